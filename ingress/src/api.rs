//! The admin API (HTTP/JSON): one route per operation of the control plane.
//! Routes, bodies and status codes are documented in `docs/api.md`.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};

use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::headers::{FORWARDED_HEADER, REVISION_HEADER};
use stasis_contract::logs::LogQuery;
use stasis_contract::policy::{CallsFromSetting, IngressAuth, IngressAuthSetting};
use stasis_contract::proto::{ControlPath, ResumeRequest};
use stasis_contract::rollout::RolloutRequest;
use stasis_contract::settings::Durability;
use stasis_control::tokens::NewToken;
use stasis_control::{ControlPlane, MAX_TEMPLATE_BYTES};

use crate::access::Access;
use crate::respond::{detached, no_content, ok, parse_json};
use crate::routes::Scoped;
use stasis_contract::names::resolve;
use stasis_contract::quota::Quota;
use stasis_contract::tokens::Role;
use stasis_http::auth::{authorize, refusal};
use stasis_http::serve::{Body, METRICS_CONTENT_TYPE, collect_body, json, json_error, text};

/// Where the internal routes (control plane and workers) start.
const INTERNAL_PREFIX: &str = "/internal/";

/// Largest JSON body the admin API reads, in bytes.
const MAX_JSON: usize = 64 << 10;

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

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateActor {
    name: String,
    template: String,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ForkActor {
    name: String,
    from_snapshot: Option<u64>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MigrateBody {
    to: String,
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct UpgradeBody {
    /// The version to move to; the template's newest when absent.
    #[serde(default)]
    to_version: Option<u64>,
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
            return text(StatusCode::OK, "ok\n".into(), "text/plain; charset=utf-8");
        }
        // The console's files hold no data (see `crate::console`).
        if crate::console::is_console(&path) {
            return crate::console::serve(request.method(), &path)
                .unwrap_or_else(|e| stasis_http::serve::text_error(&e));
        }
        let scoped = if path.starts_with(INTERNAL_PREFIX) {
            if self.internal_certified
                && request
                    .extensions()
                    .get::<stasis_http::serve::ClientCertified>()
                    .is_none()
            {
                return *stasis_http::auth::refusal(&ApiError::new(
                    ErrorKind::Unauthorized,
                    "the internal API needs a client certificate from the internal CA (--internal-ca): this connection presented none",
                ));
            }
            let token = self.internal_token.as_deref().or(self.token.as_deref());
            if let Err(refused) = authorize(&request, token) {
                return *refused;
            }
            Scoped {
                namespace: stasis_contract::names::DEFAULT_NAMESPACE.to_owned(),
                path: path.clone(),
                global: true,
            }
        } else {
            // The namespace is resolved first: the check is of the route
            // the request stands for.
            let (method, headers) = (request.method(), request.headers());
            let scoped = match crate::routes::scope(&path) {
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
                    let unscoped = match crate::routes::namespace_in(&path) {
                        Some(namespace) => Scoped {
                            namespace,
                            path: path.clone(),
                            global: false,
                        },
                        None => Scoped {
                            namespace: stasis_contract::names::DEFAULT_NAMESPACE.to_owned(),
                            path: path.clone(),
                            global: true,
                        },
                    };
                    let checked = self.access.check(headers, method, &unscoped, Role::Reader);
                    return *refusal(&checked.await.err().unwrap_or(e));
                }
            };
            let need = crate::routes::needs(method, &scoped.path);
            if let Err(e) = self.access.check(headers, method, &scoped, need).await {
                return *refusal(&e);
            }
            scoped
        };
        let path = scoped.path.clone();
        // A write a follower forwarded: its answer says the etcd revision
        // of the newest actor record written (this write's or a later
        // one), for the follower to answer once its watch has applied it.
        let forwarded_write = request.headers().contains_key(FORWARDED_HEADER)
            && !matches!(
                *request.method(),
                Method::GET | Method::HEAD | Method::OPTIONS
            );
        let mut response = match self.route(request, &scoped).await {
            Ok(response) => response,
            Err(e) => {
                let mut response = json_error(&e);
                if e.is(ErrorKind::MethodNotAllowed) {
                    let allow = crate::routes::allowed(&path).join(", ");
                    if let Ok(value) = hyper::header::HeaderValue::from_str(&allow) {
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

    async fn route(
        &self,
        request: Request<Incoming>,
        scoped: &Scoped,
    ) -> Result<Response<Body>, ApiError> {
        let (path, namespace) = (scoped.path.as_str(), scoped.namespace.as_str());
        let in_namespace = |name: &str| stasis_contract::names::namespace_of(name) == namespace;
        let method = request.method().clone();
        let query = request.uri().query().unwrap_or("").to_owned();
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let c = &self.control;
        let internal = ControlPath::parse(path);
        let (limit, limit_name) = match (segments.as_slice(), internal) {
            (["v1", "templates", _], _) => (MAX_TEMPLATE_BYTES, "the module size limit"),
            (_, Some(ControlPath::Snapshot(..))) => (
                usize::try_from(c.config().limits.max_memory)
                    .unwrap_or(usize::MAX)
                    .saturating_add(16 << 20),
                "the snapshot size limit (--max-memory plus 16 MiB)",
            ),
            (_, Some(ControlPath::Call(_) | ControlPath::Send(_))) => (
                c.config().limits.max_body.saturating_add(64 << 10),
                "--max-body (plus 64 KiB for the request's head)",
            ),
            _ => (MAX_JSON, "the JSON body limit"),
        };
        let (parts, body) = request.into_parts();
        let body = collect_body(&parts, body, limit, limit_name).await?;
        if let Some(internal) = internal {
            let peer = parts
                .extensions
                .get::<stasis_http::serve::ClientCertified>();
            return crate::internal::answer(c, &method, internal, path, body, peer).await;
        }
        match (&method, segments.as_slice()) {
            (&Method::GET, ["metrics"]) => {
                let mut metrics = c.metrics_text().await;
                if !scoped.global {
                    metrics = crate::namespace_metrics::only_namespace(&metrics, namespace);
                }
                Ok(text(StatusCode::OK, metrics, METRICS_CONTENT_TYPE))
            }
            (&Method::GET, ["v1", "templates"]) => {
                let mut templates = c.templates()?;
                templates.retain(|t| in_namespace(&t.name));
                ok(&templates)
            }
            (&Method::GET, ["v1", "templates", name]) => ok(&c.template(name)?),
            (&Method::PUT | &Method::POST, ["v1", "templates", name]) => {
                let (env, durability) = parse_push_query(&query)?;
                let (info, created) = c
                    .push_template(name, body.to_vec(), env, durability)
                    .await?;
                let status = if created {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                };
                Ok(json(status, &info))
            }
            (&Method::POST, ["v1", "templates", name, "rollout"]) => {
                let req: RolloutRequest = parse_json(&body)?;
                Ok(json(
                    StatusCode::ACCEPTED,
                    &c.start_rollout(name, req).await?,
                ))
            }
            (&Method::GET, ["v1", "templates", name, "rollout"]) => {
                ok(&c.rollout_status(name).await?)
            }
            (&Method::POST, ["v1", "templates", name, "rollback"]) => {
                Ok(json(StatusCode::ACCEPTED, &c.rollback(name).await?))
            }
            (&Method::DELETE, ["v1", "templates", name]) => {
                c.delete_template(name).await?;
                Ok(no_content())
            }
            (&Method::GET, ["v1", "actors"]) => {
                let mut actors = c.actors().await;
                actors.retain(|a| in_namespace(&a.name));
                ok(&actors)
            }
            (&Method::POST, ["v1", "actors"]) => {
                let req: CreateActor = parse_json(&body)?;
                let name = resolve("actor", namespace, &req.name)?;
                let template = resolve("template", namespace, &req.template)?;
                let info = c.create_actor(&name, &template).await?;
                Ok(json(StatusCode::CREATED, &info))
            }
            (&Method::GET, ["v1", "actors", name]) => ok(&c.actor_with_alarm(name).await?),
            (&Method::GET, ["v1", "actors", name, "logs"]) => {
                let now = stasis_contract::status::now_unix_ms().unwrap_or(0);
                let (query, follow) = crate::follow::split_follow(&query)?;
                let query = LogQuery::parse(&query, now)?;
                let lines = c.logs(name, &query).await?;
                if follow {
                    // The stream outlives this check: it is made again
                    // while it lasts.
                    let need = crate::routes::needs(&method, path);
                    let grant = self.access.grant(&parts.headers, &method, scoped, need);
                    return Ok(crate::follow::followed(
                        c.clone(),
                        grant,
                        name,
                        query,
                        lines,
                    ));
                }
                Ok(text(
                    StatusCode::OK,
                    crate::follow::ndjson(&lines),
                    "application/x-ndjson",
                ))
            }
            (&Method::DELETE, ["v1", "actors", name]) => {
                c.delete_actor(name).await?;
                Ok(no_content())
            }
            (&Method::POST, ["v1", "actors", src, "fork"]) => {
                let req: ForkActor = parse_json(&body)?;
                let new = resolve("actor", namespace, &req.name)?;
                // Detached: a client that leaves never stops a fork half-way.
                let (c, src) = (c.clone(), (*src).to_owned());
                let info =
                    detached(async move { c.fork_actor(&src, &new, req.from_snapshot).await })
                        .await?;
                Ok(json(StatusCode::CREATED, &info))
            }
            (&Method::POST, ["v1", "actors", name, "pause"]) => ok(&c.pause(name).await?),
            (&Method::POST, ["v1", "actors", name, "checkpoint"]) => {
                ok(&c.checkpoint(name).await?)
            }
            (&Method::POST, ["v1", "actors", name, "resume"]) => {
                let req: ResumeRequest = parse_json(&body)?;
                ok(&c.resume(name, req.source()?).await?)
            }
            (&Method::POST, ["v1", "actors", name, "migrate"]) => {
                let req: MigrateBody = parse_json(&body)?;
                let (c, name) = (c.clone(), (*name).to_owned());
                ok(&detached(async move { c.migrate(&name, &req.to).await }).await?)
            }
            (&Method::POST, ["v1", "actors", name, "upgrade"]) => {
                let req: UpgradeBody = if body.is_empty() {
                    UpgradeBody::default()
                } else {
                    parse_json(&body)?
                };
                let (c, name) = (c.clone(), (*name).to_owned());
                ok(&detached(async move { c.upgrade(&name, req.to_version).await }).await?)
            }
            (&Method::GET, ["v1", "namespaces"]) => {
                ok(&c.namespaces((!scoped.global).then_some(namespace))?)
            }
            (&Method::GET, ["v1", "namespaces", ns]) => ok(&c.namespace_info(ns).await?),
            (&Method::PUT, ["v1", "namespaces", ns, "quota"]) => {
                // A quota replaces the old one: only an object says what;
                // `{}` removes every limit, an empty body or array nothing.
                if !body.trim_ascii_start().starts_with(b"{") {
                    return Err(ApiError::bad_request(
                        "the quota is a JSON object, e.g. {\"max_actors\": 10}; {} removes every limit",
                    ));
                }
                let quota: Quota = parse_json(&body)?;
                ok(&c.set_quota(ns, quota).await?)
            }
            (&Method::PUT, ["v1", "namespaces", ns, "ingress-auth"]) => {
                let setting: IngressAuthSetting = parse_json(&body)?;
                // Without --admin-token there is no token to check: the
                // namespace's actors would answer no one.
                if setting.mode == IngressAuth::Token && !self.access.guarded() {
                    return Err(ApiError::bad_request(
                        "ingress auth token needs a server started with --admin-token \
                         (tokens are checked against it and the tokens it made)",
                    ));
                }
                ok(&c.set_ingress_auth(ns, setting.mode).await?)
            }
            (&Method::PUT, ["v1", "namespaces", ns, "calls-from"]) => {
                let setting: CallsFromSetting = parse_json(&body)?;
                ok(&c.set_calls_from(ns, setting.namespaces).await?)
            }
            (&Method::GET, ["v1", "tokens"]) => ok(&c.tokens().await?),
            (&Method::POST, ["v1", "tokens"]) => {
                if !self.access.guarded() {
                    return Err(ApiError::bad_request(
                        "scoped tokens need serve --admin-token: without it the admin API is open to everyone who reaches it",
                    ));
                }
                let req: NewToken = parse_json(&body)?;
                Ok(json(StatusCode::CREATED, &c.create_token(req).await?))
            }
            (&Method::DELETE, ["v1", "tokens", id]) => {
                c.revoke_token(id).await?;
                self.access.forget(id);
                Ok(no_content())
            }
            (&Method::GET, ["v1", "workers"]) => ok(&c.workers().await),
            (&Method::POST, ["v1", "workers", name, "drain"]) => {
                let (c, name) = (c.clone(), (*name).to_owned());
                ok(&detached(async move { c.drain(&name).await }).await?)
            }
            (&Method::POST, ["v1", "workers", name, "undrain"]) => ok(&c.undrain(name).await?),
            (&Method::POST, ["v1", "rebalance"]) => {
                let c = c.clone();
                ok(&detached(async move { Ok(c.rebalance().await) }).await?)
            }
            (&Method::POST, ["v1", "gc"]) => ok(&c.gc().await?),
            _ => Err(crate::routes::unrouted(&method, path)),
        }
    }
}

/// A template push's query: `env=K=V` parameters (percent-encoded), in
/// order, and at most one `durability=LEVEL`.
/// A template push's environment and durability override.
type PushQuery = (Vec<(String, String)>, Option<Durability>);

fn parse_push_query(query: &str) -> Result<PushQuery, ApiError> {
    let mut env = Vec::new();
    let mut durability = None;
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        if key == "durability" {
            if durability.is_some() {
                return Err(ApiError::bad_request("durability given twice"));
            }
            durability = Some(Durability::parse(&value).map_err(ApiError::bad_request)?);
            continue;
        }
        if key != "env" {
            return Err(ApiError::bad_request(format!(
                "unknown query parameter {key:?}"
            )));
        }
        let (k, v) = value
            .split_once('=')
            .ok_or_else(|| ApiError::bad_request(format!("env {value:?} is not K=V")))?;
        if env.iter().any(|(existing, _)| existing == k) {
            return Err(ApiError::bad_request(format!("env {k} given twice")));
        }
        env.push((k.to_owned(), v.to_owned()));
    }
    Ok((env, durability))
}
