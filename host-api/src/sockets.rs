//! WebSockets and streamed responses: how an actor accepts a socket or
//! keeps a response open, the events it gets, and the host functions it
//! writes with ([`SOCKET_SEND`](crate::imports::SOCKET_SEND),
//! [`SOCKET_CLOSE`](crate::imports::SOCKET_CLOSE),
//! [`SOCKETS`](crate::imports::SOCKETS)).
//!
//! # Sockets and streams
//!
//! A request that may become long-lived carries the host-set header
//! [`SOCKET_HEADER`] (`stasis-socket: ID`, a decimal `u64` unique on its
//! host): a WebSocket upgrade (`Upgrade: websocket`), or a request whose
//! `Accept` names `text/event-stream`. Its handler (`stasis_handle`)
//! decides:
//!
//! * **A WebSocket** is accepted by answering status `101`; its headers
//!   (`sec-websocket-protocol`, ...) go to the client, its body is
//!   ignored. The host completes the handshake (`Sec-WebSocket-Accept`)
//!   and holds the socket. Any other status refuses the upgrade and is
//!   sent to the client as an ordinary response. A module that does not
//!   export [`ON_SOCKET`](crate::exports::ON_SOCKET) never sees an upgrade:
//!   the host answers `501` itself.
//! * **A stream** is kept open by answering with the header
//!   [`STREAM_HEADER`] (`stasis-stream: open`, removed before the client
//!   sees the response): the status, headers and body go out at once, and
//!   the response's body stays open; each later `socket_send` to its id
//!   appends bytes to it (an HTTP/1.1 chunk or an HTTP/2 data frame, sent
//!   as it comes), and `socket_close` ends it. For server-sent events the
//!   guest answers `content-type: text/event-stream` and writes
//!   `data: ...\n\n` records.
//!
//! Sockets and streams are held by the host process that accepted them
//! (the ingress), not by the actor's instance: the actor can be paused
//! (`--idle-timeout`: an actor whose sockets are all idle hibernates),
//! resumed and moved to another worker while they stay open. A pause does
//! not wait for open streams, and a resume does not reopen them: they are
//! simply still there. The host keeps the list of an actor's open sockets
//! and streams ([`SOCKETS`](crate::imports::SOCKETS)).
//!
//! # Events
//!
//! Each message a client sends on a WebSocket, and the end of every socket
//! or stream the actor did not close itself, is delivered to the guest's
//! [`ON_SOCKET`](crate::exports::ON_SOCKET) export as one bincode-encoded
//! [`SocketEvent`], in a buffer from `stasis_alloc` that the guest takes
//! back. Events are mailbox deliveries like requests: one at a time, in the
//! order each socket received them, a paused actor resumed for them, and
//! durable as the actor's level says. A trap in the hook rolls the actor
//! back as a failed request does and closes that socket with code 1011.
//!
//! # Limits
//!
//! `--max-sockets` open sockets and streams per actor (an upgrade or
//! stream over it is answered 503, naming the flag); `--max-socket-message`
//! bytes per message in either direction (a client message over it closes
//! the socket with code 1009, naming the flag; a `socket_send` over it
//! fails with [`HostError::TooLarge`](crate::imports::HostError)).

use serde::{Deserialize, Serialize};

use crate::WireError;

/// The request header with the id a socket or stream will have if the
/// handler accepts it (module docs); set by the host only.
pub const SOCKET_HEADER: &str = "stasis-socket";

/// The response header (value [`STREAM_OPEN`]) that keeps a response's body
/// open as a stream; removed before the client sees the response.
pub const STREAM_HEADER: &str = "stasis-stream";

/// The value of [`STREAM_HEADER`] that opens a stream.
pub const STREAM_OPEN: &str = "open";

/// The `socket` argument of `socket_send` that means every open socket and
/// stream of the actor (a broadcast).
pub const ALL_SOCKETS: i64 = -1;

/// One event on one of the actor's sockets or streams.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketEvent {
    /// The socket's id, as [`SOCKET_HEADER`] gave it.
    pub socket: u64,
    /// What happened.
    pub kind: SocketEventKind,
}

/// What happened on a socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SocketEventKind {
    /// A message from the client: `text` for a text frame (`data` is then
    /// UTF-8), else binary.
    Message {
        /// The message's bytes.
        data: Vec<u8>,
        /// Whether it came as a text frame.
        text: bool,
    },
    /// The socket or stream ended without the actor closing it: the
    /// client's close code (1005 when it sent none, 1006 for a lost
    /// connection, 1009 for a message over the limit) and reason.
    Closed {
        /// The WebSocket close code.
        code: u16,
        /// The close reason, possibly empty.
        reason: String,
    },
}

/// Whether `request` is a WebSocket upgrade the host offers the actor (it
/// carries the host's [`SOCKET_HEADER`] and `upgrade: websocket`): only
/// then may the handler answer 101.
#[must_use]
pub fn offers_socket(request: &crate::Request) -> bool {
    request.header(SOCKET_HEADER).is_some()
        && request
            .header("upgrade")
            .is_some_and(|v| v.eq_ignore_ascii_case(b"websocket"))
}

/// Encodes an event as the host hands it to the guest.
///
/// # Errors
/// [`WireError::Encode`] if it exceeds [`MAX_MESSAGE_BYTES`](crate::MAX_MESSAGE_BYTES).
pub fn encode_event(event: &SocketEvent) -> Result<Vec<u8>, WireError> {
    crate::encode(event)
}

/// Decodes exactly one event (the guest side of [`encode_event`]).
///
/// # Errors
/// [`WireError::Decode`] / [`WireError::Trailing`] for malformed input.
pub fn decode_event(bytes: &[u8]) -> Result<SocketEvent, WireError> {
    crate::decode(bytes)
}

/// Encodes the list of socket ids the `sockets` host function returns.
///
/// # Errors
/// [`WireError::Encode`] if it exceeds [`MAX_MESSAGE_BYTES`](crate::MAX_MESSAGE_BYTES).
pub fn encode_ids(ids: &[u64]) -> Result<Vec<u8>, WireError> {
    crate::encode(&ids)
}

/// Decodes the list `sockets` returns.
///
/// # Errors
/// [`WireError::Decode`] / [`WireError::Trailing`] for malformed input.
pub fn decode_ids(bytes: &[u8]) -> Result<Vec<u64>, WireError> {
    crate::decode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_and_ids_round_trip() {
        for kind in [
            SocketEventKind::Message {
                data: b"hi".to_vec(),
                text: true,
            },
            SocketEventKind::Closed {
                code: 1000,
                reason: "bye".to_owned(),
            },
        ] {
            let event = SocketEvent { socket: 7, kind };
            let bytes = encode_event(&event).expect("encode");
            assert_eq!(decode_event(&bytes).expect("decode"), event);
        }
        let ids = encode_ids(&[1, 300]).expect("encode");
        assert_eq!(decode_ids(&ids).expect("decode"), vec![1, 300]);
    }
}
