//! WebSockets and streamed responses (the ABI: `stasis_host_api::sockets`).
//!
//! Export the actor with `export_actor!(MyActor, sockets)` so that it takes
//! WebSocket upgrades and hears [`Actor::on_socket`](crate::Actor::on_socket)
//! events. In [`Actor::handle`](crate::Actor::handle), a request that may
//! become a socket or stream has a [`socket_id`]; answer it with
//! [`accept`] to take a WebSocket, or with [`stream`] to keep the response
//! open. Later — in the same handler, another request, an event or an
//! alarm, after any number of pauses and moves — write with [`send_text`],
//! [`send_binary`] or [`broadcast_text`], and end with [`close`]. The host
//! holds the connections, not the actor: [`open`] lists them.
//!
//! ```no_run
//! use stasis_guest_sdk::sockets::{self, SocketEvent, SocketEventKind};
//! use stasis_guest_sdk::{export_actor, Actor, Request, Response};
//!
//! #[derive(Default)]
//! struct Echo;
//!
//! impl Actor for Echo {
//!     fn handle(&mut self, req: Request) -> Response {
//!         match sockets::socket_id(&req) {
//!             Some(_) if sockets::is_upgrade(&req) => sockets::accept(),
//!             _ => Response::text(426, "connect with a WebSocket\n"),
//!         }
//!     }
//!     fn on_socket(&mut self, event: SocketEvent) {
//!         if let SocketEventKind::Message { data, .. } = event.kind {
//!             let _ = sockets::send_text(event.socket, &String::from_utf8_lossy(&data));
//!         }
//!     }
//! }
//!
//! export_actor!(Echo, sockets);
//! ```

use stasis_host_api::Request;
use stasis_host_api::Response;
pub use stasis_host_api::sockets::{
    ALL_SOCKETS, SOCKET_HEADER, STREAM_HEADER, STREAM_OPEN, SocketEvent, SocketEventKind,
};

use crate::host::{HostError, check, take};

#[cfg(target_family = "wasm")]
mod raw {
    #[link(wasm_import_module = "stasis")]
    unsafe extern "C" {
        pub(super) fn socket_send(
            socket: i64,
            data_ptr: *const u8,
            data_len: usize,
            text: i32,
        ) -> i32;
        pub(super) fn socket_close(
            socket: i64,
            code: i32,
            reason_ptr: *const u8,
            reason_len: usize,
        ) -> i32;
        pub(super) fn sockets() -> i64;
    }
}

/// Stand-ins off wasm: every function is not enabled.
#[cfg(not(target_family = "wasm"))]
mod raw {
    const NOT_ENABLED: i32 = -8;
    pub(super) unsafe fn socket_send(_: i64, _: *const u8, _: usize, _: i32) -> i32 {
        NOT_ENABLED
    }
    pub(super) unsafe fn socket_close(_: i64, _: i32, _: *const u8, _: usize) -> i32 {
        NOT_ENABLED
    }
    pub(super) unsafe fn sockets() -> i64 {
        NOT_ENABLED.into()
    }
}

/// The id the request's socket or stream will have if the handler accepts
/// it: set on a WebSocket upgrade and on a request that accepts
/// `text/event-stream`.
#[must_use]
pub fn socket_id(request: &Request) -> Option<u64> {
    std::str::from_utf8(request.header(SOCKET_HEADER)?)
        .ok()?
        .parse()
        .ok()
}

/// Whether the request is a WebSocket upgrade.
#[must_use]
pub fn is_upgrade(request: &Request) -> bool {
    request
        .header("upgrade")
        .is_some_and(|v| v.eq_ignore_ascii_case(b"websocket"))
}

/// The answer that accepts a WebSocket upgrade (status 101).
#[must_use]
pub fn accept() -> Response {
    Response {
        status: 101,
        headers: Vec::new(),
        body: Vec::new(),
    }
}

/// An answer that keeps the response open as a stream: `status`,
/// `content_type` and `first` go out at once, later writes to the
/// request's [`socket_id`] follow. For server-sent events use
/// `text/event-stream` and write [`event`]s.
#[must_use]
pub fn stream(status: u16, content_type: &str, first: impl Into<Vec<u8>>) -> Response {
    Response {
        status,
        headers: vec![
            ("content-type".to_owned(), content_type.as_bytes().to_vec()),
            (STREAM_HEADER.to_owned(), STREAM_OPEN.as_bytes().to_vec()),
        ],
        body: first.into(),
    }
}

/// One server-sent event record with `data` (each line its own `data:`).
#[must_use]
pub fn event(data: &str) -> String {
    let mut record = String::new();
    for line in data.split('\n') {
        record.push_str("data: ");
        record.push_str(line);
        record.push('\n');
    }
    record.push('\n');
    record
}

fn send(socket: i64, data: &[u8], text: bool) -> Result<(), HostError> {
    // SAFETY: `data` is live for the duration of the call.
    check(unsafe { raw::socket_send(socket, data.as_ptr(), data.len(), i32::from(text)) })
}

fn id(socket: u64) -> Result<i64, HostError> {
    i64::try_from(socket).map_err(|_| HostError::BadInput)
}

/// Sends a text message on socket `socket` (on a stream: appends it).
///
/// # Errors
/// [`HostError::NotFound`] (not open), [`HostError::TooLarge`] (over
/// `--max-socket-message`), [`HostError::Unavailable`], [`HostError::NotEnabled`].
pub fn send_text(socket: u64, text: &str) -> Result<(), HostError> {
    send(id(socket)?, text.as_bytes(), true)
}

/// Sends a binary message on socket `socket` (on a stream: appends it).
///
/// # Errors
/// As [`send_text`].
pub fn send_binary(socket: u64, data: &[u8]) -> Result<(), HostError> {
    send(id(socket)?, data, false)
}

/// Sends a text message on every open socket and stream of this actor.
///
/// # Errors
/// As [`send_text`], but never [`HostError::NotFound`].
pub fn broadcast_text(text: &str) -> Result<(), HostError> {
    send(ALL_SOCKETS, text.as_bytes(), true)
}

/// Closes socket `socket` with `code` (1000, or 3000 to 4999) and
/// `reason` (at most 123 bytes), or ends a stream. No close event follows.
///
/// # Errors
/// As [`send_text`]; [`HostError::BadInput`] for another code or a longer reason.
pub fn close(socket: u64, code: u16, reason: &str) -> Result<(), HostError> {
    // SAFETY: `reason` is live for the duration of the call.
    check(unsafe { raw::socket_close(id(socket)?, i32::from(code), reason.as_ptr(), reason.len()) })
}

/// The ids of this actor's open sockets and streams, as the host keeps
/// them (whole after a pause, resume or move).
///
/// # Errors
/// [`HostError::Unavailable`], [`HostError::NotEnabled`].
pub fn open() -> Result<Vec<u64>, HostError> {
    // SAFETY: no pointers.
    let bytes = take(unsafe { raw::sockets() })?;
    stasis_host_api::sockets::decode_ids(&bytes).map_err(|_| HostError::Internal)
}
