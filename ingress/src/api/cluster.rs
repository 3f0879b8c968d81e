//! The admin API's routes about more than one namespace's actors: the
//! health check and `/metrics`, namespaces (their quota, ingress auth and
//! the namespaces they take calls from), tokens, workers and the
//! cluster's moves (`rebalance`, `gc`).

use hyper::{Response, StatusCode};

use stasis_contract::error::ApiError;
use stasis_contract::policy::{CallsFromSetting, IngressAuth, IngressAuthSetting, OnDemandSetting};
use stasis_contract::quota::Quota;
use stasis_contract::tokens::Role;
use stasis_control::tokens::NewToken;
use stasis_http::serve::{Body, METRICS_CONTENT_TYPE, json, text};

use crate::respond::{detached, no_content, ok, parse_json};
use crate::routes::Call;

/// The health check's answer (`GET /healthz`).
pub(super) fn healthy() -> Response<Body> {
    text(StatusCode::OK, "ok\n".into(), "text/plain; charset=utf-8")
}

/// `GET /healthz` as a route (`/healthz/`; `/healthz` itself is answered
/// before any check).
pub(super) async fn healthz(_: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    Ok(healthy())
}

/// `GET /metrics`: a namespace's view of them for a namespace's path or
/// token.
pub(super) async fn metrics(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let mut metrics = call.control.metrics_text().await;
    if !call.scoped.global {
        metrics = crate::namespace_metrics::only_namespace(&metrics, &call.scoped.namespace);
    }
    Ok(text(StatusCode::OK, metrics, METRICS_CONTENT_TYPE))
}

/// `GET /v1/namespaces`: every one, or a namespace's token's own.
pub(super) async fn namespaces(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let scoped = call.scoped;
    ok(&(call.control).namespaces((!scoped.global).then_some(scoped.namespace.as_str()))?)
}

/// `GET /v1/namespaces/{ns}`.
pub(super) async fn namespace(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    ok(&call.control.namespace_info(call.param(0)).await?)
}

/// `PUT /v1/namespaces/{ns}/quota`: replaces the namespace's quota.
pub(super) async fn set_quota(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    // A quota replaces the old one: only an object says what; `{}`
    // removes every limit, an empty body or array nothing.
    if !call.body.trim_ascii_start().starts_with(b"{") {
        return Err(ApiError::bad_request(
            "the quota is a JSON object, e.g. {\"max_actors\": 10}; {} removes every limit",
        ));
    }
    let quota: Quota = parse_json(&call.body)?;
    ok(&call.control.set_quota(call.param(0), quota).await?)
}

/// `PUT /v1/namespaces/{ns}/on-demand`: the template unknown actors of
/// the namespace are created from on first use (`null`: none).
pub(super) async fn set_on_demand(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let setting: OnDemandSetting = parse_json(&call.body)?;
    ok(&(call.control)
        .set_on_demand(call.param(0), setting.template.as_deref())
        .await?)
}

/// `PUT /v1/namespaces/{ns}/ingress-auth`.
pub(super) async fn set_ingress_auth(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let setting: IngressAuthSetting = parse_json(&call.body)?;
    // Without --admin-token there is no token to check: the namespace's
    // actors would answer no one.
    if setting.mode == IngressAuth::Token && !call.access.guarded() {
        return Err(ApiError::bad_request(
            "ingress auth token needs a server started with --admin-token \
             (tokens are checked against it and the tokens it made)",
        ));
    }
    ok(&(call.control)
        .set_ingress_auth(call.param(0), setting.mode)
        .await?)
}

/// `PUT /v1/namespaces/{ns}/calls-from`.
pub(super) async fn set_calls_from(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let setting: CallsFromSetting = parse_json(&call.body)?;
    ok(&(call.control)
        .set_calls_from(call.param(0), setting.namespaces)
        .await?)
}

/// `GET /v1/tokens`.
pub(super) async fn tokens(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    ok(&call.control.tokens().await?)
}

/// `POST /v1/tokens`: makes one (`201`), only behind an `--admin-token`.
pub(super) async fn create_token(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    if !call.access.guarded() {
        return Err(ApiError::bad_request(
            "scoped tokens need serve --admin-token: without it the admin API is open to everyone who reaches it",
        ));
    }
    let req: NewToken = parse_json(&call.body)?;
    Ok(json(
        StatusCode::CREATED,
        &call.control.create_token(req).await?,
    ))
}

/// `DELETE /v1/tokens/{id}`: revoked, and refused here at once.
pub(super) async fn revoke_token(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let id = call.param(0);
    call.control.revoke_token(id).await?;
    call.access.forget(id);
    Ok(no_content())
}

/// `GET /v1/workers`.
pub(super) async fn workers(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    ok(&call.control.workers().await)
}

/// `POST /v1/workers/{name}/drain`.
pub(super) async fn drain(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let (c, name) = (call.control.clone(), call.param(0).to_owned());
    ok(&detached(async move { c.drain(&name).await }).await?)
}

/// `POST /v1/workers/{name}/undrain`.
pub(super) async fn undrain(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    ok(&call.control.undrain(call.param(0)).await?)
}

/// `POST /v1/rebalance`.
pub(super) async fn rebalance(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let c = call.control.clone();
    ok(&detached(async move { Ok(c.rebalance().await) }).await?)
}

/// `POST /v1/gc`.
pub(super) async fn gc(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    ok(&call.control.gc().await?)
}
