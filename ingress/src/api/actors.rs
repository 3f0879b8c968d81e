//! The admin API's actor routes: list, create, read, delete, an actor's
//! log (answered whole, or followed as a stream), and its moves (fork,
//! pause, checkpoint, resume, migrate, upgrade).

use hyper::{Response, StatusCode};

use stasis_contract::error::ApiError;
use stasis_contract::labels::{LabelPatch, Labels};
use stasis_contract::listing::{ActorQuery, CONTINUE_HEADER};
use stasis_contract::logs::LogQuery;
use stasis_contract::names::resolve;
use stasis_contract::proto::ResumeRequest;
use stasis_contract::tokens::Role;
use stasis_http::serve::{Body, json, text};

use crate::respond::{detached, no_content, ok, parse_json};
use crate::routes::Call;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateActor {
    name: String,
    template: String,
    #[serde(default)]
    labels: Labels,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ForkActor {
    name: String,
    from_snapshot: Option<u64>,
    /// Changes to the source's labels (a merge patch: `null` removes one).
    #[serde(default)]
    labels: LabelPatch,
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

/// `GET /v1/actors`: the actors of the path's namespace that the query
/// selects (all, or a page: the next page's token in
/// [`CONTINUE_HEADER`]).
pub(super) async fn list(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let query = ActorQuery::parse(call.query)?;
    let namespace = call.scoped.namespace.as_str();
    let template = match &query.template {
        Some(t) => Some(resolve("template", namespace, t)?),
        None => None,
    };
    let page = (call.control)
        .list_actors(namespace, &query, template.as_deref())
        .await?;
    let mut response = ok(&page.actors)?;
    if let Some(next) = page.next
        && let Ok(value) = hyper::header::HeaderValue::from_str(&next)
    {
        response.headers_mut().insert(CONTINUE_HEADER, value);
    }
    Ok(response)
}

/// `PATCH /v1/actors/{name}/labels`: changes its labels by the body, a
/// JSON merge patch of them (`{"tier":"gold","beta":null}`); answers the
/// labels it has then.
pub(super) async fn label(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let patch: LabelPatch = parse_json(&call.body)?;
    let (c, name) = (call.control.clone(), call.param(0).to_owned());
    ok(&detached(async move { c.label_actor(&name, patch).await }).await?)
}

/// `POST /v1/actors`: creates one (`201`), its names in the path's
/// namespace.
pub(super) async fn create(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let namespace = call.scoped.namespace.as_str();
    let req: CreateActor = parse_json(&call.body)?;
    let name = resolve("actor", namespace, &req.name)?;
    let template = resolve("template", namespace, &req.template)?;
    let info = (call.control)
        .create_labelled(&name, &template, req.labels)
        .await?;
    Ok(json(StatusCode::CREATED, &info))
}

/// `GET /v1/actors/{name}`, with its alarm.
pub(super) async fn get(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    ok(&call.control.actor_with_alarm(call.param(0)).await?)
}

/// `DELETE /v1/actors/{name}`.
pub(super) async fn delete(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    call.control.delete_actor(call.param(0)).await?;
    Ok(no_content())
}

/// `GET /v1/actors/{name}/logs`: the lines the query asks for, as NDJSON;
/// with `follow`, a stream that goes on with the lines to come.
pub(super) async fn logs(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let (c, name) = (call.control, call.param(0));
    let now = stasis_contract::status::now_unix_ms().unwrap_or(0);
    let (query, follow) = crate::follow::split_follow(call.query)?;
    let query = LogQuery::parse(&query, now)?;
    let lines = c.logs(name, &query).await?;
    if follow {
        // The stream outlives this check: it is made again while it lasts.
        let grant = (call.access).grant(&call.parts.headers, call.method, call.scoped, call.need);
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

/// `POST /v1/actors/{name}/fork` (`201`).
pub(super) async fn fork(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let req: ForkActor = parse_json(&call.body)?;
    let new = resolve("actor", &call.scoped.namespace, &req.name)?;
    // Detached: a client that leaves never stops a fork half-way.
    let (c, src) = (call.control.clone(), call.param(0).to_owned());
    let info = detached(async move {
        c.fork_actor(&src, &new, req.from_snapshot, &req.labels)
            .await
    })
    .await?;
    Ok(json(StatusCode::CREATED, &info))
}

/// `POST /v1/actors/{name}/pause`.
pub(super) async fn pause(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    ok(&call.control.pause(call.param(0)).await?)
}

/// `POST /v1/actors/{name}/checkpoint`.
pub(super) async fn checkpoint(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    ok(&call.control.checkpoint(call.param(0)).await?)
}

/// `POST /v1/actors/{name}/resume`.
pub(super) async fn resume(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let req: ResumeRequest = parse_json(&call.body)?;
    ok(&call.control.resume(call.param(0), req.source()?).await?)
}

/// `POST /v1/actors/{name}/migrate`.
pub(super) async fn migrate(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let req: MigrateBody = parse_json(&call.body)?;
    let (c, name) = (call.control.clone(), call.param(0).to_owned());
    ok(&detached(async move { c.migrate(&name, &req.to).await }).await?)
}

/// `POST /v1/actors/{name}/upgrade` (an empty body: to the newest
/// version).
pub(super) async fn upgrade(call: Call<'_, Role>) -> Result<Response<Body>, ApiError> {
    let req: UpgradeBody = if call.body.is_empty() {
        UpgradeBody::default()
    } else {
        parse_json(&call.body)?
    };
    let (c, name) = (call.control.clone(), call.param(0).to_owned());
    ok(&detached(async move { c.upgrade(&name, req.to_version).await }).await?)
}
