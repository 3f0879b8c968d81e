//! The answers the admin API's routes share (public and internal): a
//! JSON `200`, a `204`, a module's bytes, a JSON body read, and a move run
//! in a task of its own.

use bytes::Bytes;
use hyper::{Response, StatusCode};
use serde::Serialize;

use stasis_contract::error::ApiError;
use stasis_http::serve::{Body, json};

/// Runs a move (or a drain, or a rebalance) in its own task: if the client
/// goes away, the handler's future is dropped, but a move must still finish
/// or roll back, never stop half-way.
pub(crate) async fn detached<T: Send + 'static>(
    work: impl std::future::Future<Output = Result<T, ApiError>> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::spawn(work)
        .await
        .map_err(|e| ApiError::internal(format!("move task failed: {e}")))?
}

#[allow(
    clippy::unnecessary_wraps,
    reason = "a route's answer, in the Result every route returns"
)]
pub(crate) fn ok<T: Serialize>(value: &T) -> Result<Response<Body>, ApiError> {
    Ok(json(StatusCode::OK, value))
}

pub(crate) fn no_content() -> Response<Body> {
    let mut response = Response::new(Body::new(Bytes::new()));
    *response.status_mut() = StatusCode::NO_CONTENT;
    response
}

pub(crate) fn parse_json<T: for<'de> serde::Deserialize<'de>>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return serde_json::from_slice(b"{}")
            .map_err(|e| ApiError::bad_request(format!("body: {e}")));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

pub(crate) fn bytes_response(bytes: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(Body::new(Bytes::from(bytes)));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/wasm"),
    );
    response
}
