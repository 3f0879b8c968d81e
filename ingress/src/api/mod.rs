//! The admin API (HTTP/JSON): one route per operation of the control plane.
//! Routes, bodies and status codes are documented in `docs/api.md`.

mod actors;
mod cluster;
mod table;
mod templates;

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, Response};

use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::headers::{FORWARDED_HEADER, REVISION_HEADER};
use stasis_contract::tokens::Role;
use stasis_control::ControlPlane;
use stasis_http::auth::{authorize, refusal};
use stasis_http::serve::{Body, json_error};

use crate::access::Access;
use crate::scope::Scoped;

/// Where the internal routes (control plane and workers) start.
const INTERNAL_PREFIX: &str = "/internal/";

/// The admin API of one `stasis serve`.
pub struct AdminApi {
    control: Arc<ControlPlane>,
    /// The `--admin-token`: what the internal routes take when there is no
    /// internal token.
    token: Option<String>,
    /// The check of every other route (bootstrap and scoped tokens).
    access: Arc<Access>,
    /// The token of its internal routes (`/internal/...`, used by
    /// workers); `None`: the admin token.
    internal_token: Option<String>,
    /// Whether the internal routes also need a connection that presented
    /// a verified client certificate (mutual TLS on the admin listener).
    internal_certified: bool,
}

impl AdminApi {
    /// The API over `control`; with `token`, every route but `/healthz`
    /// (and the console's files) requires `Authorization: Bearer` with
    /// `token` or a scoped token whose role the route allows
    /// ([`crate::access`]). With `internal_token`, the internal routes
    /// (`/internal/...`) require it instead, and refuse the admin token, as
    /// the other routes refuse it; scoped tokens never open them.
    #[must_use]
    pub fn new(
        control: Arc<ControlPlane>,
        token: Option<String>,
        internal_token: Option<String>,
    ) -> Self {
        Self {
            access: Arc::new(Access::new(control.clone(), token.clone())),
            control,
            token,
            internal_token,
            internal_certified: false,
        }
    }

    /// The credential check of this API, which the ingress shares for
    /// namespaces that require a token ([`Access::check_ingress`]).
    #[must_use]
    pub fn access(&self) -> Arc<Access> {
        self.access.clone()
    }

    /// The internal routes refuse (401) a request whose connection
    /// presented no client certificate from the internal CA: the admin
    /// listener asks for one (`--admin-tls-cert` with `--internal-ca`).
    #[must_use]
    pub fn with_certified_internal_routes(mut self) -> Self {
        self.internal_certified = true;
        self
    }

    /// Answers one admin request.
    pub async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let path = request.uri().path().to_owned();
        if path == "/healthz" {
            return cluster::healthy();
        }
        // The console's files hold no data (see `crate::console`).
        if crate::console::is_console(&path) {
            return crate::console::serve(request.method(), &path)
                .unwrap_or_else(|e| stasis_http::serve::text_error(&e));
        }
        let internal = path.starts_with(INTERNAL_PREFIX);
        let admitted = if internal {
            self.admit_internal(&request, &path)
        } else {
            self.admit(&request, &path).await
        };
        let scoped = match admitted {
            Ok(scoped) => scoped,
            Err(refused) => return *refused,
        };
        // A write a follower forwarded: its answer says the etcd revision
        // of the newest actor record written (this write's or a later
        // one), for the follower to answer once its watch has applied it.
        let forwarded_write = request.headers().contains_key(FORWARDED_HEADER)
            && !matches!(
                *request.method(),
                Method::GET | Method::HEAD | Method::OPTIONS
            );
        let (control, access) = (&self.control, &self.access);
        let answer = if internal {
            let table = &crate::internal::ROUTES;
            table.dispatch(control, access, request, &scoped).await
        } else {
            table::ROUTES
                .dispatch(control, access, request, &scoped)
                .await
        };
        let mut response = match answer {
            Ok(response) => response,
            Err(e) => {
                let mut response = json_error(&e);
                if e.is(ErrorKind::MethodNotAllowed) {
                    let allow = if internal {
                        crate::internal::ROUTES.allowed(&scoped.path)
                    } else {
                        table::ROUTES.allowed(&scoped.path)
                    };
                    if let Ok(value) = hyper::header::HeaderValue::from_str(&allow.join(", ")) {
                        response.headers_mut().insert(hyper::header::ALLOW, value);
                    }
                }
                response
            }
        };
        if forwarded_write && let Some(revision) = self.control.actors_revision() {
            response
                .headers_mut()
                .insert(REVISION_HEADER, hyper::header::HeaderValue::from(revision));
        }
        response
    }

    /// Lets a request for an internal route in: with the internal token
    /// (the admin token when there is none) and, where the listener asks
    /// for one, a client certificate.
    ///
    /// # Errors
    /// The refusal (401) to answer instead.
    fn admit_internal(
        &self,
        request: &Request<Incoming>,
        path: &str,
    ) -> Result<Scoped, Box<Response<Body>>> {
        if self.internal_certified
            && request
                .extensions()
                .get::<stasis_http::serve::ClientCertified>()
                .is_none()
        {
            return Err(stasis_http::auth::refusal(&ApiError::new(
                ErrorKind::Unauthorized,
                "the internal API needs a client certificate from the internal CA (--internal-ca): this connection presented none",
            )));
        }
        let token = self.internal_token.as_deref().or(self.token.as_deref());
        authorize(request, token)?;
        Ok(Scoped {
            namespace: stasis_contract::names::DEFAULT_NAMESPACE.to_owned(),
            path: path.to_owned(),
            global: true,
        })
    }

    /// Lets a request for an admin route in: resolves its path's
    /// namespace, then checks its token against the role the route needs.
    ///
    /// # Errors
    /// The refusal (401, 403, or the path's 400 or 404 to a token that
    /// may read it) to answer instead.
    async fn admit(
        &self,
        request: &Request<Incoming>,
        path: &str,
    ) -> Result<Scoped, Box<Response<Body>>> {
        // The namespace is resolved first: the check is of the route
        // the request stands for.
        let (method, headers) = (request.method(), request.headers());
        let scoped = match crate::scope::scope(path) {
            // A namespace's token reads /metrics as its namespace's,
            // and finds its own namespace in the list of namespaces.
            Ok(scoped)
                if scoped.global
                    && matches!(scoped.path.as_str(), "/metrics" | "/v1/namespaces") =>
            {
                match self.access.token_namespace(headers).await {
                    Some(namespace) => Scoped {
                        namespace,
                        global: false,
                        ..scoped
                    },
                    None => scoped,
                }
            }
            Ok(scoped) => scoped,
            Err(e) => {
                // Credentials first: a stranger learns nothing of names.
                // A token of the path's namespace (when that is a name)
                // is told what is wrong with the rest, as an admin is.
                let unscoped = match crate::scope::namespace_in(path) {
                    Some(namespace) => Scoped {
                        namespace,
                        path: path.to_owned(),
                        global: false,
                    },
                    None => Scoped {
                        namespace: stasis_contract::names::DEFAULT_NAMESPACE.to_owned(),
                        path: path.to_owned(),
                        global: true,
                    },
                };
                let checked = self.access.check(headers, method, &unscoped, Role::Reader);
                return Err(refusal(&checked.await.err().unwrap_or(e)));
            }
        };
        let need = table::ROUTES.need(method, &scoped.path);
        if let Err(e) = self.access.check(headers, method, &scoped, need).await {
            return Err(refusal(&e));
        }
        Ok(scoped)
    }
}
