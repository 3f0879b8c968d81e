//! The admin API (HTTP/JSON): one route per operation of the control plane,
//! in one table (`ROUTES`) of the form of [`crate::routes`], its handlers
//! by job in `templates`, `actors` and `cluster`. Routes, bodies and status
//! codes are documented in `docs/api.md`.
//!
//! Roles: reads need a reader; changes to templates and actors a writer;
//! moving an actor, or what a namespace lets in (its ingress auth, the
//! namespaces it takes calls from), a namespace-admin; workers, the
//! cluster's moves, `gc`, quotas and tokens (even listing them) an admin.

mod actors;
mod cluster;
mod templates;
#[cfg(test)]
mod tests;

use std::sync::{Arc, LazyLock};

use hyper::body::Incoming;
use hyper::{Method, Request, Response};

use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::headers::{FORWARDED_HEADER, REVISION_HEADER};
use stasis_contract::tokens::Role::{self, Admin, NamespaceAdmin, Reader, Writer};
use stasis_control::ControlPlane;
use stasis_http::auth::{authorize, refusal};
use stasis_http::serve::{Body, json_error};

use crate::access::Access;
use crate::routes::BodyLimit::{Json, Module};
use crate::routes::{Route, Slashes, Table, route};
use crate::scope::Scoped;

/// Where the internal routes (control plane and workers) start.
const INTERNAL_PREFIX: &str = "/internal/";

/// The admin API's route table, on the paths [`crate::scope`] resolved (a
/// namespace's actors and templates under `/v1/actors` and
/// `/v1/templates`, with full names). The order of a path's entries is the
/// order of the methods in its `Allow`; a template's routes read up to a
/// module whatever their method (the body is read before the method is
/// refused).
static ROUTES: LazyLock<Table<Role>> = LazyLock::new(|| {
    let mut routes = namespaced_routes();
    routes.extend(cluster_routes());
    Table::new(Slashes::Trimmed, routes)
});

/// The entries of the routes about a namespace's templates and actors.
fn namespaced_routes() -> Vec<Route<Role>> {
    use Method as M;
    vec![
        // Templates.
        route(M::GET, "/v1/templates", Reader, Json, |c| {
            Box::pin(templates::list(c))
        }),
        route(M::GET, "/v1/templates/{name}", Reader, Module, |c| {
            Box::pin(templates::get(c))
        }),
        route(M::PUT, "/v1/templates/{name}", Writer, Module, |c| {
            Box::pin(templates::push(c))
        }),
        route(M::POST, "/v1/templates/{name}", Writer, Module, |c| {
            Box::pin(templates::push(c))
        }),
        route(M::DELETE, "/v1/templates/{name}", Writer, Module, |c| {
            Box::pin(templates::delete(c))
        }),
        route(M::GET, "/v1/templates/{name}/rollout", Reader, Json, |c| {
            Box::pin(templates::rollout_status(c))
        }),
        route(M::POST, "/v1/templates/{name}/rollout", Writer, Json, |c| {
            Box::pin(templates::start_rollout(c))
        }),
        route(
            M::POST,
            "/v1/templates/{name}/rollback",
            Writer,
            Json,
            |c| Box::pin(templates::rollback(c)),
        ),
        // Actors.
        route(M::GET, "/v1/actors", Reader, Json, |c| {
            Box::pin(actors::list(c))
        }),
        route(M::POST, "/v1/actors", Writer, Json, |c| {
            Box::pin(actors::create(c))
        }),
        route(M::GET, "/v1/actors/{name}", Reader, Json, |c| {
            Box::pin(actors::get(c))
        }),
        route(M::DELETE, "/v1/actors/{name}", Writer, Json, |c| {
            Box::pin(actors::delete(c))
        }),
        route(M::GET, "/v1/actors/{name}/logs", Reader, Json, |c| {
            Box::pin(actors::logs(c))
        }),
        route(M::POST, "/v1/actors/{name}/fork", Writer, Json, |c| {
            Box::pin(actors::fork(c))
        }),
        route(M::POST, "/v1/actors/{name}/pause", Writer, Json, |c| {
            Box::pin(actors::pause(c))
        }),
        route(M::POST, "/v1/actors/{name}/checkpoint", Writer, Json, |c| {
            Box::pin(actors::checkpoint(c))
        }),
        route(M::POST, "/v1/actors/{name}/resume", Writer, Json, |c| {
            Box::pin(actors::resume(c))
        }),
        route(
            M::POST,
            "/v1/actors/{name}/migrate",
            NamespaceAdmin,
            Json,
            |c| Box::pin(actors::migrate(c)),
        ),
        route(M::POST, "/v1/actors/{name}/upgrade", Writer, Json, |c| {
            Box::pin(actors::upgrade(c))
        }),
        route(M::PATCH, "/v1/actors/{name}/labels", Writer, Json, |c| {
            Box::pin(actors::label(c))
        }),
    ]
}

/// The entries of the routes about the whole cluster: the health check,
/// `/metrics`, namespaces, tokens, workers and the cluster's moves.
fn cluster_routes() -> Vec<Route<Role>> {
    use Method as M;
    vec![
        route(M::GET, "/healthz", Reader, Json, |c| {
            Box::pin(cluster::healthz(c))
        }),
        route(M::GET, "/metrics", Reader, Json, |c| {
            Box::pin(cluster::metrics(c))
        }),
        // Namespaces.
        route(M::GET, "/v1/namespaces", Reader, Json, |c| {
            Box::pin(cluster::namespaces(c))
        }),
        route(M::GET, "/v1/namespaces/{ns}", Reader, Json, |c| {
            Box::pin(cluster::namespace(c))
        }),
        route(M::PUT, "/v1/namespaces/{ns}/quota", Admin, Json, |c| {
            Box::pin(cluster::set_quota(c))
        }),
        route(
            M::PUT,
            "/v1/namespaces/{ns}/ingress-auth",
            NamespaceAdmin,
            Json,
            |c| Box::pin(cluster::set_ingress_auth(c)),
        ),
        route(
            M::PUT,
            "/v1/namespaces/{ns}/on-demand",
            NamespaceAdmin,
            Json,
            |c| Box::pin(cluster::set_on_demand(c)),
        ),
        route(
            M::PUT,
            "/v1/namespaces/{ns}/calls-from",
            NamespaceAdmin,
            Json,
            |c| Box::pin(cluster::set_calls_from(c)),
        ),
        // Tokens.
        route(M::GET, "/v1/tokens", Admin, Json, |c| {
            Box::pin(cluster::tokens(c))
        }),
        route(M::POST, "/v1/tokens", Admin, Json, |c| {
            Box::pin(cluster::create_token(c))
        }),
        route(M::DELETE, "/v1/tokens/{id}", Admin, Json, |c| {
            Box::pin(cluster::revoke_token(c))
        }),
        // Workers and the cluster's moves.
        route(M::GET, "/v1/workers", Reader, Json, |c| {
            Box::pin(cluster::workers(c))
        }),
        route(M::POST, "/v1/workers/{name}/drain", Admin, Json, |c| {
            Box::pin(cluster::drain(c))
        }),
        route(M::POST, "/v1/workers/{name}/undrain", Admin, Json, |c| {
            Box::pin(cluster::undrain(c))
        }),
        route(M::POST, "/v1/rebalance", Admin, Json, |c| {
            Box::pin(cluster::rebalance(c))
        }),
        route(M::POST, "/v1/gc", Admin, Json, |c| Box::pin(cluster::gc(c))),
    ]
}

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
            Err(refused) => {
                // Refused before its body is read (a bad name, a
                // credential): the body is read away, so a client still
                // sending a module reads the refusal, not a broken pipe.
                let (parts, body) = request.into_parts();
                drop(stasis_http::serve::UnreadBody::new(&parts.headers, body));
                return *refused;
            }
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
            ROUTES.dispatch(control, access, request, &scoped).await
        };
        let mut response = match answer {
            Ok(response) => response,
            Err(e) => {
                let mut response = json_error(&e);
                if e.is(ErrorKind::MethodNotAllowed) {
                    let allow = if internal {
                        crate::internal::ROUTES.allowed(&scoped.path)
                    } else {
                        ROUTES.allowed(&scoped.path)
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
        let need = ROUTES.need(method, &scoped.path);
        if let Err(e) = self.access.check(headers, method, &scoped, need).await {
            return Err(refusal(&e));
        }
        Ok(scoped)
    }
}
