//! Streamed responses (server-sent events and other bodies an actor keeps
//! writing to): the answer's body, then what the actor writes to the
//! stream, with heartbeats on a silent event stream; the actor hears of an
//! end it did not ask for.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt as _;
use hyper::Response;
use hyper::header::{self, HeaderValue};

use stasis_control::ControlPlane;
use stasis_control::sockets::{Outgoing, SLOW_CLIENT};
use stasis_host_api::sockets::SocketEventKind;
use stasis_http::body::Body;

use super::{Reservation, deliver_one, ended};

/// Keeps the response the actor answered (`opened`, which asked for a
/// stream) open as `stream`: its body is the answer's body, then each
/// message the actor writes to the stream, until it closes it. A client
/// that leaves ends the stream and the actor hears of it (a `Closed`
/// event with code 1001). An event stream (`content-type:
/// text/event-stream`) silent for `--socket-ping` gets a comment line
/// ([`HEARTBEAT`]): proxies keep it open, and a peer that is gone is
/// noticed when its connection fails a write.
pub fn open_stream(
    actor: &str,
    stream: Reservation,
    mut opened: Response<Body>,
    first: Bytes,
) -> Response<Body> {
    let (control, id) = (stream.control.clone(), stream.id);
    let queue = stream.take();
    // Caches and proxies must not hold the stream back.
    opened
        .headers_mut()
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-cache"));
    let guard = StreamGuard {
        control,
        actor: actor.to_owned(),
        id,
        end: Some((1001, "the client left".to_owned())),
    };
    let ping = heartbeat_period(&opened, &guard.control);
    let first = futures_util::stream::once(async move { first });
    let rest = futures_util::stream::unfold((queue, guard), move |(mut queue, guard)| async move {
        let next = match ping {
            Some(ping) => match tokio::time::timeout(ping, queue.recv()).await {
                Ok(next) => next,
                Err(_) => {
                    guard.control.sockets().metrics().heartbeats.inc();
                    return Some((Bytes::from_static(HEARTBEAT), (queue, guard)));
                }
            },
            None => queue.recv().await,
        };
        match next {
            Some(Outgoing::Message { data, .. }) => Some((data, (queue, guard))),
            Some(Outgoing::Close { .. }) => {
                guard.finish(None);
                None
            }
            None => {
                guard.finish(Some((1008, SLOW_CLIENT.to_owned())));
                None
            }
        }
    });
    *opened.body_mut() = Body::stream(Box::pin(first.chain(rest)));
    opened
}

/// What an event stream silent for `--socket-ping` is sent: an SSE
/// comment, which clients ignore.
pub const HEARTBEAT: &[u8] = b": heartbeat\n\n";

/// The heartbeat period of stream answer `opened`: `--socket-ping` for an
/// event stream, none for other bodies (a comment would be data there) or
/// with the ping off.
fn heartbeat_period(
    opened: &Response<Body>,
    control: &ControlPlane,
) -> Option<std::time::Duration> {
    let event_stream = opened
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/event-stream"));
    let ping = control.sockets().limits().ping;
    (event_stream && !ping.is_zero()).then_some(ping)
}

/// Ends a stream when its body is dropped: the actor hears of an end it
/// did not ask for.
struct StreamGuard {
    control: Arc<ControlPlane>,
    actor: String,
    id: u64,
    /// The code and reason of the `Closed` event, `None` when the actor
    /// closed the stream.
    end: Option<(u16, String)>,
}

impl StreamGuard {
    /// Ends the stream with `end` (see [`StreamGuard::end`]).
    fn finish(mut self, end: Option<(u16, String)>) {
        self.end = end;
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let end = self.end.take();
        let Some((code, reason)) = end else {
            self.control.sockets().closed(self.id);
            return;
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            let dropped_by_hub = code == 1008 && reason == SLOW_CLIENT;
            if dropped_by_hub {
                self.control.sockets().closed(self.id);
                let closed = SocketEventKind::Closed { code, reason };
                tokio::spawn(deliver_one(
                    self.control.clone(),
                    self.actor.clone(),
                    self.id,
                    closed,
                ));
            } else {
                ended(&self.control, &self.actor, self.id, code, reason);
            }
        } else {
            self.control.sockets().closed(self.id);
        }
    }
}
