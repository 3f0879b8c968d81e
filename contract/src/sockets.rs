//! What crosses the sides for an actor's WebSockets and streamed responses
//! (the guest ABI is `stasis_host_api::sockets`): [`SocketOp`], what an
//! actor asks of the sockets its host process holds through
//! [`ControlApi::socket`](crate::control_api::ControlApi::socket), and
//! [`SocketLimits`], the flags that bound them.

use serde::{Deserialize, Serialize};

pub use stasis_core::host::SocketTarget;

/// One operation of an actor on its sockets (the host functions
/// `socket_send`, `socket_close`, `sockets`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SocketOp {
    /// Writes `data` to one socket or stream, or to all of them.
    Send {
        /// Where.
        target: SocketTarget,
        /// The message (a text frame when `text`).
        data: Vec<u8>,
        /// A text frame rather than a binary one.
        text: bool,
    },
    /// Closes a socket with `code` and `reason`, or ends a stream.
    Close {
        /// The socket's id.
        socket: u64,
        /// The WebSocket close code (already checked).
        code: u16,
        /// The close reason (already checked).
        reason: String,
    },
    /// Lists the actor's open sockets and streams.
    List,
}

/// What a [`SocketOp`] answers: for `List`, the ids and the host's
/// `--max-socket-message` (a worker checks an actor's writes against both
/// before holding them behind the output gate); empty for the others.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketAnswer {
    /// The actor's open sockets and streams.
    pub ids: Vec<u64>,
    /// The largest message the host sends, in bytes.
    pub max_message: usize,
}

/// Encodes an op for the internal API (JSON).
///
/// # Panics
/// Never: the types serialize.
#[must_use]
pub fn encode_op(op: &SocketOp) -> Vec<u8> {
    serde_json::to_vec(op).expect("a socket op serializes")
}

/// Decodes an op of the internal API.
///
/// # Errors
/// 400 naming what does not parse.
pub fn decode_op(bytes: &[u8]) -> Result<SocketOp, crate::error::ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| crate::error::ApiError::bad_request(format!("a socket operation: {e}")))
}

/// The limits on sockets (`stasis serve` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketLimits {
    /// `--max-sockets`: open WebSockets and streams per actor.
    pub per_actor: usize,
    /// `--max-socket-message`: bytes of one message, either way.
    pub max_message: usize,
    /// Messages queued for one client before it is dropped as too slow.
    pub queue: usize,
    /// `--socket-ping`: a WebSocket silent this long is pinged, and closed
    /// when it stays silent as long again (a dead peer); zero: never.
    pub ping: std::time::Duration,
}

impl Default for SocketLimits {
    fn default() -> Self {
        Self {
            per_actor: 1024,
            max_message: 1 << 20,
            queue: 1024,
            ping: std::time::Duration::from_secs(30),
        }
    }
}
