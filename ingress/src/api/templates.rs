//! The admin API's template routes: list, read, push (`PUT` or `POST`
//! with the module's bytes), delete, and a template's rollout (start, its
//! status, a rollback).

use hyper::{Response, StatusCode};

use stasis_contract::error::ApiError;
use stasis_contract::rollout::RolloutRequest;
use stasis_contract::settings::Durability;
use stasis_contract::tokens::Role;
use stasis_http::serve::{Body, json};

use crate::respond::{no_content, ok, parse_json};
use crate::routes::Call;

/// `GET /v1/templates`: the templates of the path's namespace.
pub(super) async fn list(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let mut templates = call.control.templates()?;
    templates.retain(|t| call.in_namespace(&t.name));
    ok(&templates)
}

/// `GET /v1/templates/{name}`.
pub(super) async fn get(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    ok(&call.control.template(call.param(0))?)
}

/// `PUT` or `POST /v1/templates/{name}`: a push of the body's module,
/// `201` for a new version, `200` for the same as the newest.
pub(super) async fn push(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let (env, durability) = parse_push_query(call.query)?;
    let (info, created) = call
        .control
        .push_template(call.param(0), call.body.to_vec(), env, durability)
        .await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(json(status, &info))
}

/// `DELETE /v1/templates/{name}`.
pub(super) async fn delete(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    call.control.delete_template(call.param(0)).await?;
    Ok(no_content())
}

/// `POST /v1/templates/{name}/rollout`: starts one (`202`).
pub(super) async fn start_rollout(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let req: RolloutRequest = parse_json(&call.body)?;
    Ok(json(
        StatusCode::ACCEPTED,
        &call.control.start_rollout(call.param(0), req).await?,
    ))
}

/// `GET /v1/templates/{name}/rollout`.
pub(super) async fn rollout_status(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    ok(&call.control.rollout_status(call.param(0)).await?)
}

/// `POST /v1/templates/{name}/rollback` (`202`).
pub(super) async fn rollback(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    Ok(json(
        StatusCode::ACCEPTED,
        &call.control.rollback(call.param(0)).await?,
    ))
}

/// A template push's environment and durability override.
type PushQuery = (Vec<(String, String)>, Option<Durability>);

/// A template push's query: `env=K=V` parameters (percent-encoded), in
/// order, and at most one `durability=LEVEL`.
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
