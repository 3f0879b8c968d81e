//! The admin API (HTTP/JSON): one route per operation of the control plane.
//! Routes, bodies and status codes are documented in `docs/api.md`.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde::Serialize;

use crate::control::{ControlPlane, MAX_TEMPLATE_BYTES};
use crate::error::ApiError;
use crate::http::{Body, collect_body};
use crate::worker::actor::ResumeFrom;

/// Largest JSON body the admin API reads, in bytes.
const MAX_JSON: usize = 64 << 10;

/// The admin API of one `stasis serve`.
pub struct AdminApi {
    control: Arc<ControlPlane>,
    token: Option<String>,
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<Body> {
    let body = serde_json::to_vec_pretty(value).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

fn json_error(error: &ApiError) -> Response<Body> {
    let mut response = json(
        StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &serde_json::json!({ "error": error.message }),
    );
    if let Some(secs) = error.retry_after {
        response
            .headers_mut()
            .insert(hyper::header::RETRY_AFTER, secs.into());
    }
    response
}

fn text(status: StatusCode, body: String, content_type: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

#[allow(clippy::unnecessary_wraps)]
fn ok<T: Serialize>(value: &T) -> Result<Response<Body>, ApiError> {
    Ok(json(StatusCode::OK, value))
}

fn no_content() -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::NO_CONTENT;
    response
}

fn parse_json<T: for<'de> serde::Deserialize<'de>>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return serde_json::from_slice(b"{}")
            .map_err(|e| ApiError::bad_request(format!("body: {e}")));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateActor {
    name: String,
    template: String,
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ResumeBody {
    #[serde(default)]
    from_snapshot: Option<u64>,
    #[serde(default)]
    from_template: bool,
}

impl AdminApi {
    /// The API over `control`; with `token`, every route but `/healthz`
    /// requires `Authorization: Bearer <token>`.
    #[must_use]
    pub fn new(control: Arc<ControlPlane>, token: Option<String>) -> Self {
        Self { control, token }
    }

    fn authorized(&self, request: &Request<Incoming>) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        request
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| given.trim().as_bytes() == token.as_bytes())
    }

    /// Answers one admin request.
    pub async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let path = request.uri().path().to_owned();
        if path == "/healthz" {
            return text(StatusCode::OK, "ok\n".into(), "text/plain; charset=utf-8");
        }
        if !self.authorized(&request) {
            let mut response = json_error(&ApiError::new(401, "missing or wrong bearer token"));
            response.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Bearer"),
            );
            return response;
        }
        match self.route(request, &path).await {
            Ok(response) => response,
            Err(e) => json_error(&e),
        }
    }

    async fn route(
        &self,
        request: Request<Incoming>,
        path: &str,
    ) -> Result<Response<Body>, ApiError> {
        let method = request.method().clone();
        let query = request.uri().query().unwrap_or("").to_owned();
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let c = &self.control;
        let limit = if matches!(segments.as_slice(), ["v1", "templates", _]) {
            MAX_TEMPLATE_BYTES
        } else {
            MAX_JSON
        };
        let (parts, body) = request.into_parts();
        let body = collect_body(&parts, body, limit).await?;
        match (&method, segments.as_slice()) {
            (&Method::GET, ["metrics"]) => Ok(text(
                StatusCode::OK,
                c.metrics_text(),
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )),
            (&Method::GET, ["v1", "templates"]) => ok(&c.templates()?),
            (&Method::GET, ["v1", "templates", name]) => ok(&c.template(name)?),
            (&Method::PUT | &Method::POST, ["v1", "templates", name]) => {
                let env = parse_env(&query)?;
                let (info, created) = c.push_template(name, body.to_vec(), env).await?;
                let status = if created {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                };
                Ok(json(status, &info))
            }
            (&Method::DELETE, ["v1", "templates", name]) => {
                c.delete_template(name).await?;
                Ok(no_content())
            }
            (&Method::GET, ["v1", "actors"]) => ok(&c.actors()),
            (&Method::POST, ["v1", "actors"]) => {
                let req: CreateActor = parse_json(&body)?;
                let info = c.create_actor(&req.name, &req.template).await?;
                Ok(json(StatusCode::CREATED, &info))
            }
            (&Method::GET, ["v1", "actors", name]) => ok(&c.actor(name)?),
            (&Method::DELETE, ["v1", "actors", name]) => {
                c.delete_actor(name).await?;
                Ok(no_content())
            }
            (&Method::POST, ["v1", "actors", name, "pause"]) => ok(&c.pause(name).await?),
            (&Method::POST, ["v1", "actors", name, "checkpoint"]) => {
                ok(&c.checkpoint(name).await?)
            }
            (&Method::POST, ["v1", "actors", name, "resume"]) => {
                let req: ResumeBody = parse_json(&body)?;
                let from = match (req.from_snapshot, req.from_template) {
                    (Some(_), true) => {
                        return Err(ApiError::bad_request(
                            "give from_snapshot or from_template, not both",
                        ));
                    }
                    (Some(seq), false) => ResumeFrom::Snapshot(seq),
                    (None, true) => ResumeFrom::Template,
                    (None, false) => ResumeFrom::Newest,
                };
                ok(&c.resume(name, from).await?)
            }
            (&Method::GET, ["v1", "workers"]) => ok(&c.workers()),
            (&Method::POST, ["v1", "gc"]) => ok(&c.gc().await?),
            (_, ["healthz" | "metrics"])
            | (_, ["v1", "templates" | "actors" | "workers" | "gc", ..]) => Err(ApiError::new(
                405,
                format!("method {method} not allowed on {path}"),
            )),
            _ => Err(ApiError::not_found(format!("no admin route {path}"))),
        }
    }
}

/// `env=K=V` query parameters (percent-encoded), in order.
fn parse_env(query: &str) -> Result<Vec<(String, String)>, ApiError> {
    let mut env = Vec::new();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
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
    Ok(env)
}
