//! The internal routes of the admin port ([`ControlPath`]): what remote
//! workers ask of the control plane (join, heartbeats, drains, templates,
//! snapshots, their actors' calls, messages, sockets and alarms). On a
//! listener that asks for client certificates (mutual TLS), a connection's
//! certificate must name the worker a join, heartbeat or drain is about.

use std::sync::Arc;

use bytes::Bytes;
use hyper::{Method, Response, StatusCode};

use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::proto::{ControlPath, JoinRequest};
use stasis_control::ControlPlane;
use stasis_http::serve::{Body, ClientCertified, text};

use crate::respond::{bytes_response, detached, no_content, ok, parse_json};

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

/// Answers `method` on internal route `route` (`path`) with `body`, from
/// a connection that presented `peer` (a verified client certificate), if
/// any: such a connection cannot speak for a worker its certificate does
/// not name.
///
/// # Errors
/// 403 for a certificate that does not name the worker the request is
/// about; the control plane's errors; 404 or 405 for no such route.
pub(crate) async fn answer(
    c: &Arc<ControlPlane>,
    method: &Method,
    route: ControlPath<'_>,
    path: &str,
    body: Bytes,
    peer: Option<&ClientCertified>,
) -> Result<Response<Body>, ApiError> {
    match (method, route) {
        (&Method::POST, ControlPath::Join) => {
            let req: JoinRequest = parse_json(&body)?;
            names_worker(peer, &req.name)?;
            c.join(&req.name, &req.address)?;
            ok(&c.cluster_settings())
        }
        (&Method::POST, ControlPath::Heartbeat(name)) => {
            names_worker(peer, name)?;
            c.heartbeat(name)?;
            ok(&serde_json::json!({}))
        }
        (&Method::POST, ControlPath::Drain(name)) => {
            names_worker(peer, name)?;
            let (c, name) = (c.clone(), name.to_owned());
            ok(&detached(async move { c.drain(&name).await }).await?)
        }
        (&Method::GET, ControlPath::Template(digest)) => {
            Ok(bytes_response(c.template_bytes(digest)?))
        }
        (&Method::PUT, ControlPath::Snapshot(actor, seq)) => {
            let seq = seq
                .parse()
                .map_err(|_| ApiError::bad_request(format!("bad sequence number {seq:?}")))?;
            c.receive_snapshot(actor, seq, body).await?;
            Ok(no_content())
        }
        (&Method::POST, ControlPath::Call(actor)) => {
            let request = decode_host_request(&body)?;
            let response = stasis_control::calls::call_via(c, actor, request).await?;
            let bytes = stasis_host_api::encode_response(&response)
                .map_err(|e| ApiError::internal(e.to_string()))?;
            Ok(bytes_response(bytes))
        }
        (&Method::POST, ControlPath::Send(actor)) => {
            let request = decode_host_request(&body)?;
            stasis_control::calls::send_via(c, actor, request).await?;
            Ok(text(
                StatusCode::ACCEPTED,
                String::new(),
                "text/plain; charset=utf-8",
            ))
        }
        (&Method::POST, ControlPath::Sockets(actor)) => {
            let op = stasis_contract::sockets::decode_op(&body)?;
            let ids = c.socket(actor, op)?;
            Ok(text(
                StatusCode::OK,
                serde_json::to_string(&ids).map_err(|e| ApiError::internal(e.to_string()))?,
                "application/json",
            ))
        }
        (&Method::PUT, ControlPath::Alarm(actor)) => {
            let at_unix_ms = stasis_contract::proto::parse_ms(&body)?;
            c.alarms().set(actor, at_unix_ms).await?;
            Ok(no_content())
        }
        (&Method::DELETE, ControlPath::Alarm(actor)) => {
            c.alarms().cancel(actor).await?;
            Ok(no_content())
        }
        (&Method::GET, ControlPath::Alarm(actor)) => match c.alarms().get(actor).await? {
            Some(at) => Ok(text(StatusCode::OK, at.to_string(), "text/plain")),
            None => Ok(no_content()),
        },
        _ => Err(crate::routes::unrouted(method, path)),
    }
}

/// A request a remote worker's actor calls or sends (host-API encoding).
fn decode_host_request(body: &[u8]) -> Result<stasis_host_api::Request, ApiError> {
    stasis_host_api::decode_request(body)
        .map_err(|e| ApiError::bad_request(format!("the encoded request: {e}")))
}
