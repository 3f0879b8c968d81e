//! The internal routes of the admin port ([`ControlPath`]): what remote
//! workers ask of the control plane (join, heartbeats, drains, templates,
//! snapshots, their actors' calls, messages, sockets and alarms), as a
//! route table ([`ROUTES`], in the form of [`crate::routes`]) whose
//! patterns are the contract's paths. On a listener that asks for client
//! certificates (mutual TLS), a connection's certificate must name the
//! worker a join, heartbeat or drain is about.

use std::sync::LazyLock;

use hyper::{Method, Response, StatusCode};

use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::proto::{ControlPath, JoinRequest};
use stasis_http::serve::{Body, ClientCertified, text};

use crate::respond::{bytes_response, detached, no_content, ok, parse_json};
use crate::routes::BodyLimit::{HostRequest, Json, Snapshot};
use crate::routes::{BodyLimit, Call, Handler, Route, Slashes, Table};

/// What every internal route needs: the internal token (the admin token
/// when there is none), checked with the client certificate, if the
/// listener asks for one, before the table is asked (`crate::api`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InternalToken;

/// A request to an internal route, as its handler gets it.
type Internal<'a> = Call<'a, InternalToken>;

/// The internal routes, matched as written (no slash trimmed, as
/// [`ControlPath::parse`] reads them). The order of a path's entries is
/// the order of the methods in its `Allow`.
pub(crate) static ROUTES: LazyLock<Table<InternalToken>> = LazyLock::new(|| {
    use Method as M;
    Table::new(
        Slashes::Kept,
        vec![
            route(M::POST, ControlPath::Join, Json, |c| Box::pin(join(c))),
            route(M::POST, ControlPath::Heartbeat("{name}"), Json, |c| {
                Box::pin(heartbeat(c))
            }),
            route(M::POST, ControlPath::Drain("{name}"), Json, |c| {
                Box::pin(drain(c))
            }),
            route(M::GET, ControlPath::Template("{digest}"), Json, |c| {
                Box::pin(template(c))
            }),
            route(
                M::PUT,
                ControlPath::Snapshot("{actor}", "{seq}"),
                Snapshot,
                |c| Box::pin(snapshot(c)),
            ),
            route(M::POST, ControlPath::Call("{actor}"), HostRequest, |c| {
                Box::pin(host_call(c))
            }),
            route(M::POST, ControlPath::Send("{actor}"), HostRequest, |c| {
                Box::pin(send(c))
            }),
            route(M::POST, ControlPath::Sockets("{actor}"), Json, |c| {
                Box::pin(sockets(c))
            }),
            route(M::GET, ControlPath::Alarm("{actor}"), Json, |c| {
                Box::pin(alarm(c))
            }),
            route(M::PUT, ControlPath::Alarm("{actor}"), Json, |c| {
                Box::pin(set_alarm(c))
            }),
            route(M::DELETE, ControlPath::Alarm("{actor}"), Json, |c| {
                Box::pin(cancel_alarm(c))
            }),
            route(M::POST, ControlPath::OnDemand("{actor}"), Json, |c| {
                Box::pin(on_demand(c))
            }),
            route(M::POST, ControlPath::Place("{actor}"), Json, |c| {
                Box::pin(place(c))
            }),
        ],
    )
});

/// An internal entry: `method` on the contract's `path` (its fields the
/// pattern's `{...}`).
fn route(
    method: Method,
    path: ControlPath<'_>,
    limit: BodyLimit,
    handler: Handler<InternalToken>,
) -> Route<InternalToken> {
    crate::routes::route(method, &path.to_path(), InternalToken, limit, handler)
}

/// Checks that `peer`, the connection's certificate if it presented one,
/// names worker `name`.
///
/// # Errors
/// 403 when it names another.
fn names_worker(peer: Option<&ClientCertified>, name: &str) -> Result<(), ApiError> {
    match peer {
        Some(peer) if !peer.names(name) => Err(ApiError::new(
            ErrorKind::Forbidden,
            format!(
                "this connection's client certificate is not worker {name}'s \
                 (issue it with stasis ca issue --name {name})"
            ),
        )),
        _ => Ok(()),
    }
}

/// The connection's verified client certificate, if it presented one.
fn peer<'a>(call: &Internal<'a>) -> Option<&'a ClientCertified> {
    call.parts.extensions.get::<ClientCertified>()
}

/// `POST` [`ControlPath::Join`]: a worker joins, its certificate (if any)
/// naming it.
async fn join(call: Internal<'_>) -> Result<Response<Body>, ApiError> {
    let req: JoinRequest = parse_json(&call.body)?;
    names_worker(peer(&call), &req.name)?;
    call.control.join(&req.name, &req.address)?;
    ok(&call.control.cluster_settings())
}

/// `POST` [`ControlPath::Heartbeat`].
async fn heartbeat(call: Internal<'_>) -> Result<Response<Body>, ApiError> {
    let name = call.param(0);
    names_worker(peer(&call), name)?;
    call.control.heartbeat(name)?;
    ok(&serde_json::json!({}))
}

/// `POST` [`ControlPath::Drain`].
async fn drain(call: Internal<'_>) -> Result<Response<Body>, ApiError> {
    let name = call.param(0);
    names_worker(peer(&call), name)?;
    let (c, name) = (call.control.clone(), name.to_owned());
    ok(&detached(async move { c.drain(&name).await }).await?)
}

/// `GET` [`ControlPath::Template`]: a module's bytes.
async fn template(call: Internal<'_>) -> Result<Response<Body>, ApiError> {
    Ok(bytes_response(call.control.template_bytes(call.param(0))?))
}

/// `PUT` [`ControlPath::Snapshot`]: a replicated snapshot.
async fn snapshot(call: Internal<'_>) -> Result<Response<Body>, ApiError> {
    let (actor, seq) = (call.param(0), call.param(1));
    let seq = seq
        .parse()
        .map_err(|_| ApiError::bad_request(format!("bad sequence number {seq:?}")))?;
    call.control.receive_snapshot(actor, seq, call.body).await?;
    Ok(no_content())
}

/// `POST` [`ControlPath::Call`]: a remote actor's call, answered with the
/// encoded response.
async fn host_call(call: Internal<'_>) -> Result<Response<Body>, ApiError> {
    let request = decode_host_request(&call.body)?;
    let response = stasis_control::calls::call_via(call.control, call.param(0), request).await?;
    let bytes = stasis_host_api::encode_response(&response)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(bytes_response(bytes))
}

/// `POST` [`ControlPath::Send`]: a remote actor's message (`202`).
async fn send(call: Internal<'_>) -> Result<Response<Body>, ApiError> {
    let request = decode_host_request(&call.body)?;
    stasis_control::calls::send_via(call.control, call.param(0), request).await?;
    Ok(text(
        StatusCode::ACCEPTED,
        String::new(),
        "text/plain; charset=utf-8",
    ))
}

/// `POST` [`ControlPath::Sockets`]: a remote actor's socket operation.
async fn sockets(call: Internal<'_>) -> Result<Response<Body>, ApiError> {
    let op = stasis_contract::sockets::decode_op(&call.body)?;
    let ids = call.control.socket(call.param(0), op)?;
    Ok(text(
        StatusCode::OK,
        serde_json::to_string(&ids).map_err(|e| ApiError::internal(e.to_string()))?,
        "application/json",
    ))
}

/// `GET` [`ControlPath::Alarm`]: its time (Unix ms), `204` for none.
async fn alarm(call: Internal<'_>) -> Result<Response<Body>, ApiError> {
    match call.control.alarms()?.get(call.param(0)).await? {
        Some(at) => Ok(text(StatusCode::OK, at.to_string(), "text/plain")),
        None => Ok(no_content()),
    }
}

/// `PUT` [`ControlPath::Alarm`] (body: Unix ms, decimal).
async fn set_alarm(call: Internal<'_>) -> Result<Response<Body>, ApiError> {
    let at_unix_ms = stasis_contract::proto::parse_ms(&call.body)?;
    // The span that set it, for the alarm's span to link to.
    let setter = call
        .parts
        .headers
        .get(stasis_contract::trace::TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    call.control
        .alarms()?
        .set(call.param(0), at_unix_ms, setter)
        .await?;
    Ok(no_content())
}

/// `DELETE` [`ControlPath::Alarm`].
async fn cancel_alarm(call: Internal<'_>) -> Result<Response<Body>, ApiError> {
    call.control.alarms()?.cancel(call.param(0)).await?;
    Ok(no_content())
}

/// `POST` [`ControlPath::OnDemand`]: a follower replica has this leader
/// create an actor on first use.
async fn on_demand(call: Internal<'_>) -> Result<Response<Body>, ApiError> {
    // A create is never left half-way when the follower gives up waiting.
    let (c, name) = (call.control.clone(), call.param(0).to_owned());
    detached(async move { c.create_on_demand_here(&name).await }).await?;
    Ok(no_content())
}

/// `POST` [`ControlPath::Place`]: a follower replica holding a request
/// for an actor with no host has this leader place it now.
async fn place(call: Internal<'_>) -> Result<Response<Body>, ApiError> {
    // A placement is never left half-way when the follower gives up waiting.
    let (c, name) = (call.control.clone(), call.param(0).to_owned());
    detached(async move { c.place_now(&name).await }).await?;
    Ok(no_content())
}

/// A request a remote worker's actor calls or sends (host-API encoding).
fn decode_host_request(body: &[u8]) -> Result<stasis_host_api::Request, ApiError> {
    stasis_host_api::decode_request(body)
        .map_err(|e| ApiError::bad_request(format!("the encoded request: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table's patterns are the contract's paths: each entry's example
    /// parses as the route it stands for and is found under its method
    /// only by it; every path the contract has is some entry's.
    #[test]
    fn every_entry_is_a_contract_path_reachable_and_alone() {
        let routes = ROUTES.routes();
        for (i, entry) in routes.iter().enumerate() {
            let path = entry.pattern.example("x");
            let parsed = ControlPath::parse(&path).expect(&path);
            assert_eq!(parsed.to_path(), path);
            let (found, params) = ROUTES.find(&entry.method, &path).expect(&path);
            assert!(std::ptr::eq(found, entry), "{} {path}", entry.method);
            assert_eq!(params.len(), entry.pattern.params(), "{path}");
            for other in &routes[i + 1..] {
                assert!(
                    other.method != entry.method || !other.pattern.overlaps(&entry.pattern),
                    "{} {path} overlaps {}",
                    entry.method,
                    other.pattern.as_str()
                );
                if other.pattern.as_str() == entry.pattern.as_str() {
                    assert_eq!(other.limit, entry.limit, "{path}");
                }
            }
        }
        for path in [
            ControlPath::Join,
            ControlPath::Heartbeat("w1"),
            ControlPath::Drain("w1"),
            ControlPath::Template("ab"),
            ControlPath::Snapshot("c1", "7"),
            ControlPath::Call("c1"),
            ControlPath::Send("c1"),
            ControlPath::Alarm("c1"),
            ControlPath::Sockets("c1"),
            ControlPath::OnDemand("c1"),
            ControlPath::Place("c1"),
        ] {
            assert!(!ROUTES.allowed(&path.to_path()).is_empty(), "{path:?}");
        }
    }

    #[test]
    fn each_internal_path_allows_its_methods_and_reads_its_limit() {
        for (path, methods, limit) in [
            (ControlPath::Join, &["POST"][..], Json),
            (ControlPath::Heartbeat("w"), &["POST"], Json),
            (ControlPath::Template("d"), &["GET"], Json),
            (ControlPath::Snapshot("a", "1"), &["PUT"], Snapshot),
            (ControlPath::Call("a"), &["POST"], HostRequest),
            (ControlPath::Send("a"), &["POST"], HostRequest),
            (ControlPath::Sockets("a"), &["POST"], Json),
            (ControlPath::Alarm("a"), &["GET", "PUT", "DELETE"], Json),
            (ControlPath::Alarm(""), &["GET", "PUT", "DELETE"], Json),
            (ControlPath::OnDemand("a"), &["POST"], Json),
            (ControlPath::Place("a"), &["POST"], Json),
        ] {
            let path = path.to_path();
            assert_eq!(ROUTES.allowed(&path), methods, "{path}");
            assert_eq!(ROUTES.limit(&path), limit, "{path}");
        }
        for path in [
            "/internal/nothing",
            "/internal/v1/workers/join/",
            "/internal/v1/alarms/a/",
        ] {
            assert!(ROUTES.allowed(path).is_empty(), "{path}");
            assert_eq!(ROUTES.limit(path), Json, "{path}");
        }
    }
}
