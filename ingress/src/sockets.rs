//! WebSockets and streamed responses at the edge (the guest's side is
//! `stasis_host_api::sockets`): the handshake checks, the connection of an
//! accepted WebSocket, the body of an open stream, and the deliveries of
//! their events to the actor. The connection belongs to this process, not
//! to the actor's instance, so it stays open while the actor is paused,
//! resumed or moved; each event reaches the actor the way a request does
//! ([`ControlPlane::socket_event`]): through its gate, resuming it if it is
//! paused, held while it moves.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::http::request::Parts;
use hyper::upgrade::OnUpgrade;
use hyper::{Method, Response, Version};
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message, error::CapacityError};

use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::metrics::SocketMetrics;
use stasis_control::ControlPlane;
use stasis_control::sockets::{Outgoing, SLOW_CLIENT};
use stasis_host_api::sockets::{SocketEvent, SocketEventKind};
use stasis_http::body::Body;

mod stream;

pub use stream::{HEARTBEAT, open_stream};

/// Events of one socket waiting for the actor, past which the socket is
/// closed (1008): its client sends faster than the actor handles them.
const MAX_PENDING_EVENTS: usize = 1024;

/// The read buffer of one socket, allocated up front (larger messages
/// are assembled beside it).
const READ_BUFFER: usize = 4096;

/// Longest close reason (RFC 6455 §5.5: 125 bytes of payload, 2 of code).
const MAX_REASON: usize = 123;

/// Whether the request asks for a WebSocket (`Upgrade: websocket`).
#[must_use]
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    header_has(headers, header::UPGRADE, "websocket")
}

/// Whether a request may become a socket or a stream (see
/// [`is_upgrade`], [`accepts_event_stream`]).
#[must_use]
pub fn may_become_socket(headers: &HeaderMap) -> bool {
    is_upgrade(headers) || accepts_event_stream(headers)
}

/// Whether the request accepts server-sent events (`Accept:
/// text/event-stream`): its answer may be a stream.
#[must_use]
pub fn accepts_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(',').any(|t| {
                t.split(';')
                    .next()
                    .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/event-stream"))
            })
        })
}

fn header_has(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|p| p.trim().eq_ignore_ascii_case(token)))
}

/// Checks a WebSocket handshake (RFC 6455 §4.2.1) and gives the
/// `Sec-WebSocket-Accept` value for it.
///
/// # Errors
/// 400 naming what is missing or wrong (WebSockets over HTTP/2 are not
/// taken: 400 as well).
pub fn check_handshake(parts: &Parts) -> Result<String, ApiError> {
    let bad = |what: &str| ApiError::bad_request(format!("a WebSocket upgrade {what}"));
    if parts.version != Version::HTTP_11 {
        return Err(bad("must use HTTP/1.1"));
    }
    if parts.method != Method::GET {
        return Err(bad("must be a GET"));
    }
    if !header_has(&parts.headers, header::CONNECTION, "upgrade") {
        return Err(bad("needs `Connection: Upgrade`"));
    }
    if parts
        .headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_none_or(|v| v.as_bytes() != b"13")
    {
        return Err(bad("needs `Sec-WebSocket-Version: 13`"));
    }
    let key = parts
        .headers
        .get(header::SEC_WEBSOCKET_KEY)
        .ok_or_else(|| bad("needs a `Sec-WebSocket-Key`"))?;
    // RFC 6455 §4.2.1: the base64 of a 16-byte nonce (24 characters).
    use base64::Engine as _;
    let nonce = base64::engine::general_purpose::STANDARD.decode(key.as_bytes());
    if nonce.map_or(true, |n| n.len() != 16) {
        return Err(bad(
            "needs a `Sec-WebSocket-Key` that is the base64 of 16 bytes (RFC 6455)",
        ));
    }
    Ok(tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes()))
}

/// A socket or stream opened for a request before the actor answers it,
/// so that what the actor writes to it while it handles the request (or
/// from an alarm that fires right after) is kept; dropped unless the
/// answer accepts it.
pub struct Reservation {
    control: Arc<ControlPlane>,
    id: u64,
    queue: Option<mpsc::Receiver<Outgoing>>,
}

impl Reservation {
    /// Opens a socket of `actor` with a fresh id.
    ///
    /// # Errors
    /// 503 naming `--max-sockets` when the actor holds that many.
    pub fn new(control: &Arc<ControlPlane>, actor: &str) -> Result<Self, ApiError> {
        let id = control.sockets().next_id();
        let queue = control.sockets().open(actor, id)?;
        Ok(Self {
            control: control.clone(),
            id,
            queue: Some(queue),
        })
    }

    /// The socket's id.
    #[must_use]
    pub fn id(&self) -> u64 {
        self.id
    }

    fn take(mut self) -> mpsc::Receiver<Outgoing> {
        self.queue.take().expect("taken once")
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.queue.is_some() {
            self.control.sockets().closed(self.id);
        }
    }
}

/// Completes the upgrade the actor accepted (its answer `accepted`, status
/// 101) for `socket` of `actor`, and serves its connection in a task of
/// its own once hyper hands it over.
pub fn accept(
    actor: &str,
    socket: Reservation,
    accept_key: &str,
    on_upgrade: OnUpgrade,
    mut accepted: Response<Body>,
) -> Response<Body> {
    let (control, id) = (socket.control.clone(), socket.id);
    let queue = socket.take();
    let headers = accepted.headers_mut();
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(value) = HeaderValue::from_str(accept_key) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, value);
    }
    *accepted.body_mut() = Body::empty();
    let (control, actor) = (control.clone(), actor.to_owned());
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => serve(control, actor, id, TokioIo::new(upgraded), queue).await,
            Err(e) => {
                tracing::debug!(actor, socket = id, "the upgrade failed: {e}");
                ended(&control, &actor, id, 1006, String::new());
            }
        }
    });
    accepted
}

/// The socket ended without the actor closing it: unless the actor closed
/// it meanwhile, it hears of it (a `Closed` event).
fn ended(control: &Arc<ControlPlane>, actor: &str, id: u64, code: u16, reason: String) {
    if control.sockets().closed(id) {
        let closed = SocketEventKind::Closed { code, reason };
        tokio::spawn(deliver_one(control.clone(), actor.to_owned(), id, closed));
    }
}

/// Delivers one event; a failure is logged (there is nobody to answer).
async fn deliver_one(control: Arc<ControlPlane>, actor: String, id: u64, kind: SocketEventKind) {
    if let Err(e) = deliver(&control, &actor, id, kind).await {
        tracing::debug!(actor, socket = id, "a socket event was not delivered: {e}");
    }
}

async fn deliver(
    control: &ControlPlane,
    actor: &str,
    id: u64,
    kind: SocketEventKind,
) -> Result<(), ApiError> {
    let route = control.route(actor).await?;
    control
        .socket_event(route, SocketEvent { socket: id, kind })
        .await
}

/// `reason` cut to what a close frame holds, at a character boundary.
fn cut(reason: &str) -> String {
    let mut end = reason.len().min(MAX_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason[..end].trim_end().to_owned()
}

fn close_frame(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: cut(reason).into(),
    }))
}

/// The client was silent for `ping`: pings it, or when it was pinged
/// already (a dead peer), closes it with 1011; the end, if it ended.
async fn ping_or_give_up<S>(
    ws: &mut WebSocketStream<S>,
    pinged: &mut bool,
    ping: std::time::Duration,
    metrics: &SocketMetrics,
) -> Option<(u16, String)>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    if *pinged {
        metrics.dead.inc();
        let reason = format!("no answer to a ping within {ping:?} (--socket-ping)");
        let _ = ws.send(close_frame(1011, &reason)).await;
        return Some((1006, cut(&reason)));
    }
    if ws.send(Message::Ping(Bytes::new())).await.is_err() {
        return Some((1006, String::new()));
    }
    metrics.pings.inc();
    *pinged = true;
    None
}

/// The client was heard from: the next ping is `ping` from now.
fn heard(
    pinged: &mut bool,
    silence: std::pin::Pin<&mut tokio::time::Sleep>,
    ping: std::time::Duration,
) {
    *pinged = false;
    silence.reset(tokio::time::Instant::now() + ping);
}

/// Serves an accepted WebSocket: what the client sends goes to the actor
/// in order (one delivery at a time, by a task of its own, so that what
/// the actor writes meanwhile still goes out); what the actor writes goes
/// to the client; either side's close ends it.
async fn serve<S>(
    control: Arc<ControlPlane>,
    actor: String,
    id: u64,
    io: S,
    mut queue: mpsc::Receiver<Outgoing>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let max = control.sockets().limits().max_message;
    // Small buffers: most sockets idle (a 4 KiB read buffer instead of
    // tungstenite's eager 128 KiB; each message written at once).
    let config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(0)
        .max_message_size(Some(max))
        .max_frame_size(Some(max));
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await;
    let pending = Arc::new(AtomicUsize::new(0));
    let (events, to_deliver) = mpsc::unbounded_channel::<SocketEventKind>();
    // The deliveries, in order; a failed one closes the socket.
    let deliveries = tokio::spawn(deliver_in_order(
        control.clone(),
        actor.clone(),
        id,
        pending.clone(),
        to_deliver,
    ));
    // A client silent for `--socket-ping` is pinged; silent as long again,
    // it is taken for dead (a frozen process, a network gone).
    let ping = control.sockets().limits().ping;
    let silence = tokio::time::sleep(ping);
    tokio::pin!(silence);
    let mut pinged = false;
    let (code, reason) = loop {
        tokio::select! {
            () = &mut silence, if !ping.is_zero() => {
                if let Some(end) = ping_or_give_up(&mut ws, &mut pinged, ping, control.sockets().metrics()).await {
                    break end;
                }
                silence.as_mut().reset(tokio::time::Instant::now() + ping);
            }
            out = queue.recv() => match out {
                Some(Outgoing::Message { data, text }) => {
                    let message = if text {
                        match String::from_utf8(data.to_vec()) {
                            Ok(text) => Message::text(text),
                            Err(_) => Message::Binary(data),
                        }
                    } else {
                        Message::Binary(data)
                    };
                    if ws.send(message).await.is_err() {
                        break (1006, String::new());
                    }
                }
                Some(Outgoing::Close { code, reason }) => {
                    let _ = ws.send(close_frame(code, &reason)).await;
                    // The actor closed it: no event follows.
                    break (0, String::new());
                }
                None => {
                    let _ = ws.send(close_frame(1008, SLOW_CLIENT)).await;
                    break (1008, SLOW_CLIENT.to_owned());
                }
            },
            incoming = ws.next() => {
                heard(&mut pinged, silence.as_mut(), ping);
                match incoming {
                Some(Ok(Message::Text(text))) => {
                    let data = Bytes::from(text).to_vec();
                    if !queue_event(&pending, &events, SocketEventKind::Message { data, text: true }) {
                        break too_fast(&mut ws).await;
                    }
                }
                Some(Ok(Message::Binary(data))) => {
                    let data = data.to_vec();
                    if !queue_event(&pending, &events, SocketEventKind::Message { data, text: false }) {
                        break too_fast(&mut ws).await;
                    }
                }
                Some(Ok(Message::Close(frame))) => {
                    let (code, reason) = frame.map_or((1005, String::new()), |f| {
                        (u16::from(f.code), f.reason.to_string())
                    });
                    // tungstenite answers the close frame itself.
                    let _ = ws.flush().await;
                    break (code, reason);
                }
                Some(Ok(_)) => {}
                Some(Err(WsError::Capacity(CapacityError::MessageTooLong { size, max_size }))) => {
                    let reason = format!(
                        "a message of {size} bytes is over --max-socket-message ({max_size} bytes)"
                    );
                    let _ = ws.send(close_frame(1009, &reason)).await;
                    break (1009, cut(&reason));
                }
                Some(Err(e)) => {
                    tracing::debug!(actor, socket = id, "socket ended: {e}");
                    break (1006, String::new());
                }
                None => break (1006, String::new()),
                }
            }
        }
    };
    // The hub dropped a slow client itself (its entry is gone already):
    // the actor did not close it, so it hears of it all the same.
    let dropped_by_hub = code == 1008 && reason == SLOW_CLIENT;
    if code != 0 && (control.sockets().closed(id) || dropped_by_hub) {
        let _ = events.send(SocketEventKind::Closed { code, reason });
    }
    drop(events);
    let _ = ws.close(None).await;
    // The deliveries left run to their end on their own.
    drop(deliveries);
}

/// Delivers socket `id`'s events to `actor` in order, one at a time,
/// until the socket's side ends; a failed message closes the socket (1013
/// when the actor cannot take it now, else 1011).
async fn deliver_in_order(
    control: Arc<ControlPlane>,
    actor: String,
    id: u64,
    pending: Arc<AtomicUsize>,
    mut to_deliver: mpsc::UnboundedReceiver<SocketEventKind>,
) {
    while let Some(kind) = to_deliver.recv().await {
        let message = matches!(kind, SocketEventKind::Message { .. });
        let result = deliver(&control, &actor, id, kind).await;
        pending.fetch_sub(1, Ordering::AcqRel);
        if let Err(e) = result
            && message
        {
            // Not now (1013 Try Again Later), else broken (1011).
            let code = match e.kind() {
                ErrorKind::Unavailable
                | ErrorKind::Unreachable
                | ErrorKind::Abandoned
                | ErrorKind::OutcomeUnknown => 1013,
                _ => 1011,
            };
            tracing::debug!(actor, socket = id, "closing: {e}");
            let close = stasis_contract::sockets::SocketOp::Close {
                socket: id,
                code,
                reason: cut(e.message()),
            };
            let _ = control.socket(&actor, close);
        }
    }
}

/// Queues an event for delivery; false when too many wait already.
fn queue_event(
    pending: &AtomicUsize,
    events: &mpsc::UnboundedSender<SocketEventKind>,
    kind: SocketEventKind,
) -> bool {
    if pending.fetch_add(1, Ordering::AcqRel) >= MAX_PENDING_EVENTS {
        pending.fetch_sub(1, Ordering::AcqRel);
        return false;
    }
    events.send(kind).is_ok()
}

async fn too_fast<S>(ws: &mut WebSocketStream<S>) -> (u16, String)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let reason = format!(
        "the client sends faster than the actor handles its messages ({MAX_PENDING_EVENTS} wait)"
    );
    let _ = ws.send(close_frame(1008, &reason)).await;
    (1008, cut(&reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_cut_at_a_character_boundary() {
        let long = "é".repeat(100);
        let cut = cut(&long);
        assert!(cut.len() <= MAX_REASON);
        assert!(cut.chars().all(|c| c == 'é'));
    }

    #[test]
    fn handshakes_are_checked() {
        let parts = |headers: &[(&str, &str)]| {
            let mut b = hyper::Request::builder().uri("/");
            for (k, v) in headers {
                b = b.header(*k, *v);
            }
            b.body(()).expect("request").into_parts().0
        };
        let good = [
            ("upgrade", "websocket"),
            ("connection", "keep-alive, Upgrade"),
            ("sec-websocket-version", "13"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ];
        assert_eq!(
            check_handshake(&parts(&good)).expect("valid"),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert!(is_upgrade(&parts(&good).headers));
        let message = check_handshake(&parts(&good[..3]))
            .expect_err("no key")
            .to_string();
        assert!(message.contains("Sec-WebSocket-Key"), "{message}");
        assert!(accepts_event_stream(
            &parts(&[("accept", "text/html, text/event-stream;q=0.9")]).headers
        ));
    }
}
