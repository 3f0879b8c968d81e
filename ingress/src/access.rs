//! Who may use which admin route: the one check every `/v1` route,
//! `/metrics` and the streams (logs, events) pass through. A request
//! presents the `--admin-token` (the bootstrap token, role admin) or a
//! scoped token made by `stasis token create`
//! ([`stasis_control::tokens`]); the route needs a role
//! (its entry in the route table, [`crate::routes::Table::need`]), and a
//! token below it is refused with 403.
//!
//! A scoped token's record is read from the directory and kept here at
//! most [`REVOCATION_BOUND`]: a token revoked or expired is refused by
//! every replica within that bound (at once by the replica that revoked
//! it). Without `--admin-token` the admin API is open (loopback only, see
//! `serve`), and every request is an admin's.
//!
//! The ingress asks the same check of requests to the actors of a
//! namespace that requires a token there ([`Access::check_ingress`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::Method;
use hyper::header::{AUTHORIZATION, HeaderMap};

use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::status::now_unix_ms;
use stasis_contract::tokens::{Role, TokenRecord};
use stasis_control::ControlPlane;
use stasis_control::tokens;
use stasis_http::auth::{bearer, same_token, unauthorized};

use crate::scope::Scoped;

/// How long a replica keeps a token's record before reading it again: the
/// bound within which a revoked token is refused everywhere.
pub const REVOCATION_BOUND: Duration = Duration::from_secs(1);

/// Most token records kept; past it the cache starts over.
const MAX_CACHED: usize = 10_000;

/// The admin API's credential check (module docs).
pub struct Access {
    admin_token: Option<String>,
    control: Arc<ControlPlane>,
    cache: Mutex<HashMap<String, (Option<TokenRecord>, Instant)>>,
}

impl Access {
    /// The check of one admin API: `admin_token` is the bootstrap token
    /// (none: the API is open); scoped tokens are read through `control`.
    #[must_use]
    pub fn new(control: Arc<ControlPlane>, admin_token: Option<String>) -> Self {
        Self {
            admin_token,
            control,
            cache: Mutex::default(),
        }
    }

    /// Whether scoped tokens mean anything here: only with an
    /// `--admin-token`, without which the API is open to everyone.
    #[must_use]
    pub fn guarded(&self) -> bool {
        self.admin_token.is_some()
    }

    /// Checks that `headers` present a token whose role is at least
    /// `need`, for `method` on the route `scoped` (named in a refusal),
    /// and whose namespace, if it has one, is the route's.
    ///
    /// # Errors
    /// 400 for two `Authorization` headers; 401 for none, another scheme,
    /// a wrong, revoked or expired token; 403 for a good token whose role
    /// is below `need` or whose namespace is not the route's; 500 if the
    /// directory cannot be read.
    pub async fn check(
        &self,
        headers: &HeaderMap,
        method: &Method,
        scoped: &Scoped,
        need: Role,
    ) -> Result<Role, ApiError> {
        let path = &scoped.path;
        let Some(admin_token) = &self.admin_token else {
            return Ok(Role::Admin);
        };
        let given = bearer(headers)?;
        if same_token(given, admin_token) {
            return Ok(Role::Admin);
        }
        let Some((id, secret)) = std::str::from_utf8(given).ok().and_then(tokens::parse) else {
            return Err(unauthorized());
        };
        let record = self.record(id).await?;
        let now = now_unix_ms().unwrap_or(0);
        let Some(record) = record else {
            return Err(ApiError::new(
                ErrorKind::Unauthorized,
                format!("token {id} is revoked or was never issued"),
            ));
        };
        if !tokens::secret_matches(&record, secret) {
            return Err(unauthorized());
        }
        if record.expired(now) {
            let at = record
                .expires_at_unix_ms
                .map(stasis_contract::status::rfc3339);
            return Err(ApiError::new(
                ErrorKind::Unauthorized,
                format!("token {id} expired at {}", at.unwrap_or_default()),
            ));
        }
        let role = match &record.namespace {
            None => record.role,
            Some(namespace) if scoped.global || *namespace != scoped.namespace => {
                let route = if scoped.global {
                    "is in no namespace".to_owned()
                } else {
                    format!("is in namespace {}", scoped.namespace)
                };
                return Err(ApiError::new(
                    ErrorKind::Forbidden,
                    format!("token {id} is for namespace {namespace}; {method} {path} {route}"),
                ));
            }
            Some(_) => record.role,
        };
        if role < need {
            return Err(ApiError::new(
                ErrorKind::Forbidden,
                format!(
                    "token {id} has role {}; {method} {path} needs role {}",
                    record.role.name(),
                    need.name()
                ),
            ));
        }
        Ok(record.role)
    }

    /// What `headers` were granted for `method` on `scoped` (already
    /// checked by [`Access::check`]), to be checked again for as long as a
    /// stream it opened lasts ([`Grant::holds`]).
    #[must_use]
    pub fn grant(
        self: &Arc<Self>,
        headers: &HeaderMap,
        method: &Method,
        scoped: &Scoped,
        need: Role,
    ) -> Grant {
        Grant {
            access: self.clone(),
            authorization: authorization_of(headers),
            method: method.clone(),
            scoped: scoped.clone(),
            need,
        }
    }

    /// Checks a request through the ingress (`method` on `path`) to an
    /// actor of `namespace`, whose ingress auth is
    /// [`IngressAuth::Token`](stasis_contract::policy::IngressAuth):
    /// `headers` must present the bootstrap token or a scoped token of
    /// role invoker or above for that namespace or for every one.
    ///
    /// # Errors
    /// As [`Access::check`]; 401 for every request when this server has
    /// no `--admin-token` (it has no tokens to check: the namespace stays
    /// closed rather than open).
    pub async fn check_ingress(
        &self,
        headers: &HeaderMap,
        method: &Method,
        path: &str,
        namespace: &str,
    ) -> Result<(), ApiError> {
        if !self.guarded() {
            return Err(ApiError::new(
                ErrorKind::Unauthorized,
                format!(
                    "namespace {namespace} requires a token at the ingress, and this server has \
                     no --admin-token to check one"
                ),
            ));
        }
        let scoped = Scoped {
            namespace: namespace.to_owned(),
            path: path.to_owned(),
            global: false,
        };
        self.check(headers, method, &scoped, Role::Invoker)
            .await
            .map(|_| ())
    }

    /// The namespace a good scoped token in `headers` is limited to;
    /// `None` for the bootstrap token, a token of every namespace, and
    /// any credential [`Access::check`] would refuse (it says why).
    pub async fn token_namespace(&self, headers: &HeaderMap) -> Option<String> {
        let admin_token = self.admin_token.as_ref()?;
        let given = bearer(headers).ok()?;
        if same_token(given, admin_token) {
            return None;
        }
        let (id, secret) = std::str::from_utf8(given).ok().and_then(tokens::parse)?;
        let record = self.record(id).await.ok()??;
        tokens::secret_matches(&record, secret)
            .then_some(record.namespace)
            .flatten()
    }

    /// Drops what is kept of token `id` (it was just revoked here).
    pub fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    /// After an admin request `method path` was answered `status` by the
    /// leader (a follower forwards its admin API there): a revoke of a
    /// token (`DELETE /v1/tokens/{id}`, answered 2xx) is refused here at
    /// once too, not only once this replica's kept record of it is read
    /// again ([`REVOCATION_BOUND`]).
    pub fn forwarded(&self, method: &hyper::Method, path: &str, status: hyper::StatusCode) {
        if *method == hyper::Method::DELETE
            && status.is_success()
            && let Some(id) = path.strip_prefix("/v1/tokens/")
            && !id.is_empty()
            && !id.contains('/')
        {
            self.forget(id);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Option<TokenRecord>, Instant)>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Token `id`'s record, as read at most [`REVOCATION_BOUND`] ago.
    async fn record(&self, id: &str) -> Result<Option<TokenRecord>, ApiError> {
        if let Some((record, at)) = self.lock().get(id)
            && at.elapsed() < REVOCATION_BOUND
        {
            return Ok(record.clone());
        }
        let record = self.control.token_record(id).await?;
        let mut cache = self.lock();
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(id.to_owned(), (record.clone(), Instant::now()));
        Ok(record)
    }
}

/// The `Authorization` headers of `headers`, nothing else: what a stream
/// keeps of its request to check it again.
#[must_use]
pub fn authorization_of(headers: &HeaderMap) -> HeaderMap {
    let mut authorization = HeaderMap::new();
    for value in headers.get_all(AUTHORIZATION) {
        authorization.append(AUTHORIZATION, value.clone());
    }
    authorization
}

/// Whether `e`, from checking a credential again, says it no longer
/// admits its request (401: revoked, expired; 403: no longer allowed),
/// rather than that it could not be checked (the directory unreadable):
/// what ends a stream.
#[must_use]
pub fn no_longer_admits(e: &ApiError) -> bool {
    e.is(ErrorKind::Unauthorized) || e.is(ErrorKind::Forbidden)
}

/// A request's right to a route, kept by a stream (a followed log) that
/// outlives the request's own check: a token revoked or expired while the
/// stream is open ends it within [`REVOCATION_BOUND`].
pub struct Grant {
    access: Arc<Access>,
    /// The request's `Authorization` headers, nothing else of it.
    authorization: HeaderMap,
    method: Method,
    scoped: Scoped,
    need: Role,
}

impl Grant {
    /// Checks the credential again, as [`Access::check`] did at first.
    ///
    /// # Errors
    /// What [`Access::check`] refuses: the token is now revoked or expired
    /// (or the directory cannot be read).
    pub async fn holds(&self) -> Result<(), ApiError> {
        self.access
            .check(&self.authorization, &self.method, &self.scoped, self.need)
            .await
            .map(|_| ())
    }
}
