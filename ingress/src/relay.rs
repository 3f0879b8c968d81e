//! A follower replica's relay of WebSockets and streams to the leader's
//! ingress (cluster mode), and of a followed log to its admin API. An actor's socket writes reach the sockets its
//! control plane holds, and a remote worker's control plane is the leader
//! replica; so a follower does not hold sockets itself: it passes a
//! WebSocket upgrade, or a request that accepts a stream, to the leader's
//! ingress as it came (with [`FORWARDED_HEADER`]) and relays what follows,
//! bytes both ways for a socket, the body frame by frame for a stream.
//! When the leader goes, the sockets it held close (the client sees the
//! connection end) and clients reconnect through any replica.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

use stasis_contract::error::ApiError;
use stasis_http::body::Body;

pub use stasis_contract::headers::FORWARDED_HEADER;

/// How long connecting to the leader's ingress may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Relays `request` (a WebSocket upgrade, or a request accepting a stream,
/// with no body) to the ingress at `target` (`host:port`) for replica `me`.
///
/// # Errors
/// 503 if it was forwarded once already (the leadership is changing
/// hands) or the leader's ingress cannot be reached; 413 for a body.
pub async fn relay(
    me: &str,
    target: &str,
    mut request: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    if request.headers().contains_key(FORWARDED_HEADER) {
        return Err(ApiError::unavailable(
            "the leadership is changing hands; retry",
        ));
    }
    let downstream = hyper::upgrade::on(&mut request);
    let (parts, body) = request.into_parts();
    // Nothing to relay but the head: a body of even one byte is refused.
    let empty = hyper::body::Body::is_end_stream(&body)
        || http_body_util::Limited::new(body, 0)
            .collect()
            .await
            .is_ok();
    if !empty {
        return Err(ApiError::new(
            stasis_contract::error::ErrorKind::TooLarge,
            "a WebSocket upgrade or a stream request through a follower replica takes no body",
        ));
    }
    let unreachable = |e: &dyn std::fmt::Display| {
        ApiError::unavailable(format!("the leader replica cannot be reached: {e}"))
    };
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(target))
        .await
        .map_err(|_| unreachable(&"connect timed out"))?
        .map_err(|e| unreachable(&e))?;
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| unreachable(&e))?;
    tokio::spawn(async move {
        if let Err(e) = connection.with_upgrades().await {
            tracing::debug!("relay to the leader ended: {e}");
        }
    });
    let mut upstream = Request::from_parts(parts, Empty::<Bytes>::new());
    if let Ok(value) = HeaderValue::from_str(me) {
        upstream.headers_mut().insert(FORWARDED_HEADER, value);
    }
    let mut answer = sender
        .send_request(upstream)
        .await
        .map_err(|e| unreachable(&e))?;
    if answer.status() == hyper::StatusCode::SWITCHING_PROTOCOLS {
        let upgraded = hyper::upgrade::on(&mut answer);
        tokio::spawn(async move {
            match tokio::try_join!(downstream, upgraded) {
                Ok((client, leader)) => {
                    let (mut client, mut leader) = (TokioIo::new(client), TokioIo::new(leader));
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut leader).await;
                }
                Err(e) => tracing::debug!("relaying a WebSocket: {e}"),
            }
        });
        let (parts, _) = answer.into_parts();
        return Ok(Response::from_parts(parts, Body::empty()));
    }
    let (mut parts, body) = answer.into_parts();
    let hop_by_hop: Vec<_> = parts
        .headers
        .keys()
        .filter(|name| stasis_contract::headers::not_passed_on(name.as_str()))
        .cloned()
        .collect();
    for name in hop_by_hop {
        parts.headers.remove(name);
    }
    let frames = body
        .into_data_stream()
        .map(|frame| frame.unwrap_or_default());
    Ok(Response::from_parts(parts, Body::stream(Box::pin(frames))))
}
