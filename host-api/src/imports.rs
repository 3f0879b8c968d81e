//! The host functions of ABI version 2: the [`MODULE`] (`stasis`) import
//! module, each function's exact wasm signature, its result convention and
//! its errors ([`HostError`]).
//!
//! # Conventions
//!
//! * Pointers and lengths are `i32` values read as unsigned offsets into
//!   the guest's memory 0 (the memory exported as `memory`).
//! * Strings (actor names) are UTF-8, not NUL-terminated.
//! * A request argument is one bincode-encoded [`Request`](crate::Request)
//!   (the wire layout of the crate docs); its `context` is ignored.
//! * A **buffer result** is an `i64` `r`: `r < 0` is an error,
//!   [`HostError::code`]; `r >= 0` means the host now holds a result of
//!   `r` bytes for this instance (the *held result*). The guest allocates
//!   `r` bytes itself and copies the result in with
//!   [`TAKE_RESULT`]`(ptr, r)`. The held result is replaced by the next
//!   buffer result and dropped when taken; it never survives a pause (take
//!   it in the same handler). The host never calls into the guest while a
//!   host function runs.
//! * A **status result** is an `i32`: `0` for success, else a
//!   [`HostError::code`].
//!
//! # The functions
//!
//! | name | signature | result |
//! |------|-----------|--------|
//! | [`CALL`] | `(actor_ptr: i32, actor_len: i32, req_ptr: i32, req_len: i32) -> i64` | buffer: one bincode [`Response`](crate::Response) |
//! | [`SEND`] | `(actor_ptr: i32, actor_len: i32, req_ptr: i32, req_len: i32) -> i32` | status |
//! | [`SET_ALARM`] | `(at_unix_ms: i64) -> i32` | status |
//! | [`CANCEL_ALARM`] | `() -> i32` | status |
//! | [`ALARM`] | `() -> i64` | `>= 0`: the pending alarm, Unix ms; else a code |
//! | [`FETCH`] | `(req_ptr: i32, req_len: i32) -> i64` | buffer: one bincode [`Response`](crate::Response) |
//! | [`SELF_NAME`] | `() -> i64` | buffer: the actor's name, UTF-8 |
//! | [`LAST_ERROR`] | `() -> i64` | buffer: why the last failing host call failed, UTF-8 |
//! | [`TAKE_RESULT`] | `(ptr: i32, len: i32) -> i32` | status: copies the held result to `ptr` |
//! | [`SOCKET_SEND`] | `(socket: i64, data_ptr: i32, data_len: i32, text: i32) -> i32` | status |
//! | [`SOCKET_CLOSE`] | `(socket: i64, code: i32, reason_ptr: i32, reason_len: i32) -> i32` | status |
//! | [`SOCKETS`] | `() -> i64` | buffer: the actor's open socket ids (see [`crate::sockets`]) |
//!
//! * **`call`** sends the request to actor `actor` (by name, wherever it
//!   is placed; a paused actor is resumed) and waits for its answer. The
//!   caller's handler waits; the caller is not re-entered meanwhile (its
//!   mailbox holds). Every failure *at the callee* comes back as a
//!   response, as an HTTP client of the callee would see it (500 for a
//!   trap, 503 when it cannot take requests, 504 for its timeout...).
//!   Errors: [`HostError::NotFound`] (no actor of that name),
//!   [`HostError::LoopDetected`] (the callee is already in the chain of
//!   callers of this request, e.g. an actor calling itself: answered at
//!   once, HTTP 508), [`HostError::Deadline`] (the caller's own request
//!   time ran out first), [`HostError::TooLarge`] (a request or response
//!   body over `--max-body`), [`HostError::BadInput`], [`HostError::Unavailable`]
//!   (this worker has no route to other actors), [`HostError::Internal`].
//!   A callee that cannot be reached (its worker, or the control plane for
//!   a remote worker) is a 503 response.
//! * **`send`** hands the request to actor `actor`'s mailbox without
//!   waiting for the handler: `0` means the target exists and the message
//!   was accepted for delivery to its mailbox. Delivery is at most once: a
//!   message lost with a crashing worker, or refused by a full mailbox, is
//!   not retried (failures are counted in the `stasis_sends_failed_total`
//!   metric). A message carries no chain of callers (nobody waits on it),
//!   so loops are not checked. Errors: [`HostError::NotFound`],
//!   [`HostError::Unavailable`] (no route, or the control plane cannot be
//!   reached from a remote worker), [`HostError::TooLarge`],
//!   [`HostError::BadInput`], [`HostError::Deadline`], [`HostError::Internal`].
//! * **`set_alarm`** sets the actor's one alarm to `at_unix_ms` (replacing
//!   any other; a time in the past fires as soon as possible). At that
//!   time the host calls the guest's [`stasis_on_alarm`](crate::exports::ON_ALARM)
//!   export, resuming the actor if paused; a trapping hook is retried with
//!   backoff (at least once). `cancel_alarm` removes it (`0` also when
//!   none was set); `alarm` reads it. Errors: [`HostError::NotEnabled`]
//!   (this host has no alarms), [`HostError::BadInput`] (a negative time),
//!   [`HostError::Unavailable`] (the directory cannot be written),
//!   [`HostError::NotFound`] (`alarm` only: no alarm is set).
//! * **`fetch`** sends the request to the outside world: its `uri` is an
//!   absolute `http://` or `https://` URL (HTTP/1.1, TLS by rustls with the
//!   system's roots) to a host allowed by `--allow-outbound` whose
//!   addresses are public or named by a rule; redirects are returned, not
//!   followed. Errors: [`HostError::Refused`] (host not allowed, an
//!   address it resolves to special and not named, or fetch not enabled),
//!   [`HostError::BadInput`] (not an absolute http(s) URL), [`HostError::Unavailable`]
//!   (connection or TLS failure), [`HostError::Deadline`], [`HostError::TooLarge`]
//!   (response body over `--max-body`), [`HostError::Internal`].
//! * **`self_name`** returns the actor's own name (never fails except
//!   [`HostError::Internal`]).
//! * **`take_result`** copies the held result to `ptr..ptr + len` and
//!   drops it. Errors: [`HostError::NotFound`] (no result held),
//!   [`HostError::BadInput`] (`len` is not the result's length, or the
//!   range is outside memory).
//! * **`socket_send`** writes `data` to one of the actor's WebSockets or
//!   streams (`socket`, an id from the `stasis-socket` header), or with
//!   `socket` = [`ALL_SOCKETS`](crate::sockets::ALL_SOCKETS) (`-1`) to
//!   every one of them (a broadcast); on a WebSocket `text` = 1 sends a
//!   text frame (the data must be UTF-8), 0 a binary one; on a stream the
//!   bytes are appended to the body. Messages to one socket arrive in the
//!   order they were sent. What a delivery (a request, an event, an alarm)
//!   writes is held behind its output gate: sent once the state it
//!   produced is durable (as the actor's durability level says), and never
//!   when the delivery fails (a trap rolls its effect back, and its writes
//!   with it). The checks below are made at the call, against the host's
//!   list of the actor's sockets as the delivery began. Delivery is at most once (a client that is
//!   gone, or reads too slowly to keep up, loses it and its socket is
//!   closed). Errors: [`HostError::NotFound`] (no open socket of this
//!   actor with that id), [`HostError::TooLarge`] (over
//!   `--max-socket-message`), [`HostError::BadInput`] (a text message that
//!   is not UTF-8), [`HostError::Unavailable`] (the host holding the
//!   socket cannot be reached), [`HostError::NotEnabled`].
//! * **`socket_close`** closes one of the actor's WebSockets with `code`
//!   (1000 or 3000–4999; 1000 when 0) and a UTF-8 `reason` of at most 123
//!   bytes, or ends a stream's body. No close event follows. Closing a
//!   socket that is not open (its client closed it: this may be the
//!   handler of its close event; or it was closed before) does nothing and
//!   is no error. Errors: as `socket_send` but for that, and
//!   [`HostError::BadInput`] for another code.
//! * **`sockets`** returns the ids of the actor's open WebSockets and
//!   streams, as a bincode list of `u64` (a varint count, then each id as
//!   a varint); the list is the host's, so it is whole after a pause, a
//!   resume or a move.
//! * **`last_error`** returns a human-readable reason for the last host
//!   function of this instance that returned an error code
//!   ([`HostError::NotFound`] if none did).
//!
//! Every function also returns [`HostError::BadInput`] when a pointer and
//! length pair is outside memory 0 or the request does not decode.

/// The import module of the host functions.
pub const MODULE: &str = "stasis";

/// `call(actor_ptr: i32, actor_len: i32, req_ptr: i32, req_len: i32) -> i64`.
pub const CALL: &str = "call";
/// `send(actor_ptr: i32, actor_len: i32, req_ptr: i32, req_len: i32) -> i32`.
pub const SEND: &str = "send";
/// `set_alarm(at_unix_ms: i64) -> i32`.
pub const SET_ALARM: &str = "set_alarm";
/// `cancel_alarm() -> i32`.
pub const CANCEL_ALARM: &str = "cancel_alarm";
/// `alarm() -> i64`.
pub const ALARM: &str = "alarm";
/// `fetch(req_ptr: i32, req_len: i32) -> i64`.
pub const FETCH: &str = "fetch";
/// `self_name() -> i64`.
pub const SELF_NAME: &str = "self_name";
/// `last_error() -> i64`.
pub const LAST_ERROR: &str = "last_error";
/// `take_result(ptr: i32, len: i32) -> i32`.
pub const TAKE_RESULT: &str = "take_result";
/// `socket_send(socket: i64, data_ptr: i32, data_len: i32, text: i32) -> i32`.
pub const SOCKET_SEND: &str = "socket_send";
/// `socket_close(socket: i64, code: i32, reason_ptr: i32, reason_len: i32) -> i32`.
pub const SOCKET_CLOSE: &str = "socket_close";
/// `sockets() -> i64`.
pub const SOCKETS: &str = "sockets";

/// A wasm value type in a host function's signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValType {
    /// `i32`.
    I32,
    /// `i64`.
    I64,
}

impl std::fmt::Display for ValType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ValType::I32 => "i32",
            ValType::I64 => "i64",
        })
    }
}

/// One host function: its name, parameters and results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signature {
    /// The import's field name in [`MODULE`].
    pub name: &'static str,
    /// Parameter types, in order.
    pub params: &'static [ValType],
    /// Result types (one).
    pub results: &'static [ValType],
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |types: &[ValType]| {
            types
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        write!(
            f,
            "{}({}) -> {}",
            self.name,
            list(self.params),
            list(self.results)
        )
    }
}

use ValType::{I32, I64};

/// Every host function of ABI version 2 with its exact signature.
pub const FUNCTIONS: [Signature; 12] = [
    Signature {
        name: CALL,
        params: &[I32, I32, I32, I32],
        results: &[I64],
    },
    Signature {
        name: SEND,
        params: &[I32, I32, I32, I32],
        results: &[I32],
    },
    Signature {
        name: SET_ALARM,
        params: &[I64],
        results: &[I32],
    },
    Signature {
        name: CANCEL_ALARM,
        params: &[],
        results: &[I32],
    },
    Signature {
        name: ALARM,
        params: &[],
        results: &[I64],
    },
    Signature {
        name: FETCH,
        params: &[I32, I32],
        results: &[I64],
    },
    Signature {
        name: SELF_NAME,
        params: &[],
        results: &[I64],
    },
    Signature {
        name: LAST_ERROR,
        params: &[],
        results: &[I64],
    },
    Signature {
        name: TAKE_RESULT,
        params: &[I32, I32],
        results: &[I32],
    },
    Signature {
        name: SOCKET_SEND,
        params: &[I64, I32, I32, I32],
        results: &[I32],
    },
    Signature {
        name: SOCKET_CLOSE,
        params: &[I64, I32, I32, I32],
        results: &[I32],
    },
    Signature {
        name: SOCKETS,
        params: &[],
        results: &[I64],
    },
];

/// The host function named `name`, if ABI 2 has one.
#[must_use]
pub fn signature(name: &str) -> Option<&'static Signature> {
    FUNCTIONS.iter().find(|s| s.name == name)
}

/// Why a host function failed; its [`code`](HostError::code) is what the
/// guest receives (see the module docs for which function returns which).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// `-1`: no actor of that name (`call`, `send`); no alarm set
    /// (`alarm`); no earlier error (`last_error`). HTTP 404.
    #[error("not found")]
    NotFound,
    /// `-2`: the callee is already in this request's chain of callers.
    /// HTTP 508.
    #[error("loop detected: the callee is already in the chain of callers")]
    LoopDetected,
    /// `-3`: the caller's request time ran out first. HTTP 504.
    #[error("deadline exceeded")]
    Deadline,
    /// `-4`: outbound request to a host not allowed by `--allow-outbound`;
    /// a message to an actor of a namespace that does not take the
    /// sender's. HTTP 502.
    #[error("refused (by the outbound allow-list, or by the callee's namespace)")]
    Refused,
    /// `-5`: a body over `--max-body`. HTTP 413.
    #[error("body too large")]
    TooLarge,
    /// `-6`: a pointer/length outside memory, a request that does not
    /// decode, an invalid actor name or URL, a negative time. HTTP 400.
    #[error("bad input")]
    BadInput,
    /// `-7`: the target cannot be reached or take it now (full mailbox,
    /// unreachable worker, connection failure). HTTP 503.
    #[error("unavailable")]
    Unavailable,
    /// `-8`: the function is not enabled on this host. HTTP 501.
    #[error("not enabled on this host")]
    NotEnabled,
    /// `-9`: a failure of the host itself.
    /// HTTP 500.
    #[error("internal host error")]
    Internal,
}

impl HostError {
    /// Every error, in code order.
    pub const ALL: [HostError; 9] = [
        HostError::NotFound,
        HostError::LoopDetected,
        HostError::Deadline,
        HostError::Refused,
        HostError::TooLarge,
        HostError::BadInput,
        HostError::Unavailable,
        HostError::NotEnabled,
        HostError::Internal,
    ];

    /// The negative code the guest receives (`-1` ... `-9`).
    #[must_use]
    pub fn code(self) -> i32 {
        match self {
            HostError::NotFound => -1,
            HostError::LoopDetected => -2,
            HostError::Deadline => -3,
            HostError::Refused => -4,
            HostError::TooLarge => -5,
            HostError::BadInput => -6,
            HostError::Unavailable => -7,
            HostError::NotEnabled => -8,
            HostError::Internal => -9,
        }
    }

    /// The error a negative result stands for; unknown negative codes
    /// (reserved for later versions) read as [`HostError::Internal`];
    /// `None` for `code >= 0` (success).
    #[must_use]
    pub fn from_code(code: i64) -> Option<Self> {
        if code >= 0 {
            return None;
        }
        Some(
            Self::ALL
                .into_iter()
                .find(|e| i64::from(e.code()) == code)
                .unwrap_or(HostError::Internal),
        )
    }

    /// The HTTP status that best answers a client for this error.
    #[must_use]
    pub fn status(self) -> u16 {
        match self {
            HostError::NotFound => 404,
            HostError::LoopDetected => 508,
            HostError::Deadline => 504,
            HostError::Refused => 502,
            HostError::TooLarge => 413,
            HostError::BadInput => 400,
            HostError::Unavailable => 503,
            HostError::NotEnabled => 501,
            HostError::Internal => 500,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for e in HostError::ALL {
            assert_eq!(HostError::from_code(i64::from(e.code())), Some(e));
        }
        assert_eq!(HostError::from_code(-100), Some(HostError::Internal));
        assert_eq!(HostError::from_code(0), None);
        assert_eq!(
            signature("call").map(ToString::to_string).as_deref(),
            Some("call(i32, i32, i32, i32) -> i64")
        );
        assert!(signature("nope").is_none());
    }
}
