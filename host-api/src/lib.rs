//! The contract between the Stasis host and a guest actor.
//!
//! Both sides depend on this crate: the host (`stasis-runtime`) to check and
//! call a module, the guest (`stasis-guest-sdk`) to be callable. It has no
//! wasmtime dependency and builds for the host and for `wasm32-wasip1`.
//!
//! # The ABI (version [`ABI_VERSION`])
//!
//! * The module carries a custom section named [`ABI_SECTION`] whose payload
//!   is the ABI version as a little-endian `u32`: 1 or 2 ([`MIN_ABI_VERSION`]
//!   to [`ABI_VERSION`]; the host accepts both). The host reads it at
//!   `template push` without running guest code.
//! * The module exports:
//!   * [`exports::ALLOC`]`(len: i32) -> i32`: a guest buffer of `len` bytes
//!     that the host fills with one bincode-encoded [`Request`];
//!   * [`exports::HANDLE`]`(ptr: i32, len: i32) -> i64`: handles the request
//!     in that buffer (the guest takes the buffer back) and returns the
//!     bincode-encoded [`Response`] as `(ptr << 32) | len`; the guest keeps
//!     the response bytes alive until its next call;
//!   * optionally [`exports::INIT`]`()`, called exactly once when the actor is
//!     created (after the start function and `_initialize`), and the hooks
//!     [`exports::ON_PAUSE`]`()` / [`exports::ON_RESUME`]`()`, called when an
//!     actor is paused or continues from a snapshot (never for checkpoints);
//!   * optionally (version 2) [`exports::ON_ALARM`]`()`, called when the
//!     actor's alarm fires (see [`imports`]);
//!   * optionally (version 2) [`exports::ON_SOCKET`]`(ptr: i32, len: i32)
//!     -> i32`, called with each event on one of the actor's WebSockets or
//!     streamed responses (see [`sockets`]);
//!   * optionally the **state hand-over** pair, used by a live code upgrade
//!     (`stasis actor upgrade`) when the two versions do not declare the
//!     same [`LAYOUT_SECTION`]: [`exports::SAVE_STATE`]`() -> i64` on the
//!     old version's instance returns the actor's state as bytes, as
//!     `(ptr << 32) | len` (kept alive until the guest's next call); a
//!     fresh instance of the new version (start function, `_initialize`,
//!     `stasis_init` run) then gets them in [`exports::LOAD_STATE`]`(ptr:
//!     i32, len: i32) -> i32`, in a buffer from [`exports::ALLOC`] that the
//!     guest takes back; it returns 0 to accept them, any other value to
//!     refuse them (the upgrade is refused, the actor stays on its version
//!     with its state). What the bytes hold is the guest's business (the
//!     Rust SDK writes a schema version before its serialized state). An
//!     export of one of these names with another signature is refused at
//!     `template push`.
//! * Imports: a version-1 module imports WASI preview 1 ([`WASI_MODULE`])
//!   and nothing else. A version-2 module may also import the host
//!   functions of module [`imports::MODULE`] (`stasis`), each with exactly
//!   the signature [`imports::FUNCTIONS`] gives (the host refuses any other
//!   name or signature at `template push`); their conventions and errors
//!   are in [`imports`].
//! * Exports starting with [`exports::RESERVED_PREFIX`] belong to the host.
//!
//! Version 2 changes nothing else: a version-1 module behaves exactly as
//! before, and a version-2 module that imports no host function is a
//! version-1 module with another number.

#![warn(missing_docs)]

pub mod wire;

use serde::{Deserialize, Serialize};

pub mod imports;
pub mod sockets;

/// Version of the guest ABI described in the crate docs: the newest this
/// crate speaks, and the one the guest SDK writes.
pub const ABI_VERSION: u32 = 2;

/// The oldest ABI version the host still accepts (WASI imports only).
pub const MIN_ABI_VERSION: u32 = 1;

/// Name of the custom section holding the ABI version (`u32`, little-endian).
pub const ABI_SECTION: &str = "stasis-abi";

/// Name of the custom section in which a module declares the layout of its
/// state in linear memory and globals: any non-empty bytes its author
/// changes whenever that layout changes (`"todo-v1"`). An actor is
/// upgraded to another version of its template by **memory carry-over**
/// (its snapshot restored into the new module, `stasis actor upgrade`)
/// only when both versions hold this section with the same bytes, and
/// their memories and mutable globals match in number and type.
pub const LAYOUT_SECTION: &str = "stasis-layout";

/// Name of the custom section `stasis template push` writes into a
/// JavaScript template: which side of a state hand-over its script takes
/// part in, as the names of its default export's methods, comma-separated
/// (`save,load`, `save`, `load`, or empty). The engine exports
/// [`exports::SAVE_STATE`] and [`exports::LOAD_STATE`] for every script; a
/// module with this section counts as exporting each only where the
/// script has the method.
pub const JS_HAND_OVER_SECTION: &str = "stasis-js-hand-over";

/// The import module every guest may use: WASI preview 1 (a version-2
/// guest may also use [`imports::MODULE`]).
pub const WASI_MODULE: &str = "wasi_snapshot_preview1";

/// Upper bound, in bytes, on one encoded [`Request`] or [`Response`] that
/// [`decode_request`] / [`decode_response`] accept (256 MiB). Larger claims
/// are refused before anything is allocated.
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// Names of the functions a guest exports, and the prefix reserved for the host.
pub mod exports {
    /// `(len: i32) -> i32`: a buffer for the next request.
    pub const ALLOC: &str = "stasis_alloc";
    /// `(ptr: i32, len: i32) -> i64`: handle one request, return `(ptr << 32) | len`.
    pub const HANDLE: &str = "stasis_handle";
    /// `()`: optional, once at creation.
    pub const INIT: &str = "stasis_init";
    /// `()`: optional, before the snapshot of a pause.
    pub const ON_PAUSE: &str = "stasis_on_pause";
    /// `()`: optional, after a fresh instance got a snapshot back.
    pub const ON_RESUME: &str = "stasis_on_resume";
    /// `()`: optional (ABI 2), when the actor's alarm fires; a trap is
    /// retried with backoff.
    pub const ON_ALARM: &str = "stasis_on_alarm";
    /// `(ptr: i32, len: i32) -> i32`: optional (ABI 2), one event on one
    /// of the actor's WebSockets or streams (see [`crate::sockets`]); the
    /// result is 0 (other values are reserved).
    pub const ON_SOCKET: &str = "stasis_on_socket";
    /// `() -> i64`: optional, the actor's state as bytes for a hand-over to
    /// another version, `(ptr << 32) | len`.
    pub const SAVE_STATE: &str = "stasis_save_state";
    /// `(ptr: i32, len: i32) -> i32`: optional, a fresh instance of the new
    /// version takes the state [`SAVE_STATE`] returned; 0 accepts it.
    pub const LOAD_STATE: &str = "stasis_load_state";
    /// The WASI reactor initialiser; called once at creation, never after a restore.
    pub const INITIALIZE: &str = "_initialize";
    /// Exports with this prefix are added by the host's instrumentation and
    /// refused in guest modules.
    pub const RESERVED_PREFIX: &str = "__stasis_";
}

/// Who is being called, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Context {
    /// The actor's name (an RFC 1123 label).
    pub actor: String,
    /// The name of the worker hosting the instance (e.g. `worker-1`).
    pub worker: String,
}

/// One HTTP request as the guest sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Request {
    /// Upper-case method, e.g. `POST`.
    pub method: String,
    /// Path and query, e.g. `/key?x=1`; always starts with `/`.
    pub uri: String,
    /// Header names (lower-case) and raw values, in arrival order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The whole request body.
    pub body: Vec<u8>,
    /// Actor and worker names.
    pub context: Context,
}

impl Request {
    /// A request with `method` (upper case, e.g. `POST`) and `uri` (path
    /// and query, or an absolute URL for `fetch`), no headers, no body.
    #[must_use]
    pub fn new(method: &str, uri: &str) -> Self {
        Self {
            method: method.to_owned(),
            uri: uri.to_owned(),
            ..Self::default()
        }
    }

    /// This request with `body`.
    #[must_use]
    pub fn with_body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// This request with header `name` (lower case) set to `value` (added).
    #[must_use]
    pub fn with_header(mut self, name: &str, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((name.to_ascii_lowercase(), value.into()));
        self
    }

    /// The path without the query string.
    #[must_use]
    pub fn path(&self) -> &str {
        self.uri.split_once('?').map_or(&self.uri, |(p, _)| p)
    }

    /// The value of query parameter `name`, if present (no percent-decoding).
    #[must_use]
    pub fn query(&self, name: &str) -> Option<&str> {
        let (_, q) = self.uri.split_once('?')?;
        q.split('&')
            .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    }

    /// The first value of header `name` (case-insensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
}

/// One HTTP response from the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// HTTP status code (100–999; the host answers 502 for anything else).
    pub status: u16,
    /// Header names and raw values.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The whole response body.
    pub body: Vec<u8>,
}

impl Response {
    /// A response with `status`, a `content-type: text/plain; charset=utf-8`
    /// header and `body`.
    #[must_use]
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Self {
            status,
            headers: vec![(
                "content-type".to_owned(),
                b"text/plain; charset=utf-8".to_vec(),
            )],
            body: body.into().into_bytes(),
        }
    }

    /// A response with `status`, `application/octet-stream` and `body`.
    #[must_use]
    pub fn bytes(status: u16, body: Vec<u8>) -> Self {
        Self {
            status,
            headers: vec![(
                "content-type".to_owned(),
                b"application/octet-stream".to_vec(),
            )],
            body,
        }
    }
}

/// A message that could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// Encoding failed (bincode's reason).
    #[error("encoding failed: {0}")]
    Encode(String),
    /// The bytes are not one well-formed message within
    /// [`MAX_MESSAGE_BYTES`] (bincode's reason).
    #[error("malformed message: {0}")]
    Decode(String),
    /// Bytes were left over after one message.
    #[error("malformed message: {0} trailing bytes")]
    Trailing(usize),
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_MESSAGE_BYTES>()
}

pub(crate) fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, WireError> {
    bincode::serde::encode_to_vec(value, config()).map_err(|e| WireError::Encode(e.to_string()))
}

pub(crate) fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, WireError> {
    let (value, used) = bincode::serde::decode_from_slice(bytes, config())
        .map_err(|e| WireError::Decode(e.to_string()))?;
    if used != bytes.len() {
        return Err(WireError::Trailing(bytes.len() - used));
    }
    Ok(value)
}

/// Encodes a request (bincode, standard config).
///
/// # Errors
/// [`WireError::Encode`] if it exceeds [`MAX_MESSAGE_BYTES`].
pub fn encode_request(request: &Request) -> Result<Vec<u8>, WireError> {
    encode(request)
}

/// Decodes exactly one request from `bytes`.
///
/// # Errors
/// [`WireError::Decode`] / [`WireError::Trailing`] for malformed input.
pub fn decode_request(bytes: &[u8]) -> Result<Request, WireError> {
    decode(bytes)
}

/// Encodes a response (bincode, standard config).
///
/// # Errors
/// [`WireError::Encode`] if it exceeds [`MAX_MESSAGE_BYTES`].
pub fn encode_response(response: &Response) -> Result<Vec<u8>, WireError> {
    encode(response)
}

/// Decodes exactly one response from `bytes`.
///
/// # Errors
/// [`WireError::Decode`] / [`WireError::Trailing`] for malformed input.
pub fn decode_response(bytes: &[u8]) -> Result<Response, WireError> {
    decode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trips_and_parses_query() {
        let req = Request {
            method: "PUT".into(),
            uri: "/k?x=1&flag".into(),
            headers: vec![("a".into(), b"b".to_vec())],
            body: vec![1, 2, 3],
            context: Context {
                actor: "a1".into(),
                worker: "w".into(),
            },
        };
        let bytes = encode_request(&req).unwrap();
        assert_eq!(decode_request(&bytes).unwrap(), req);
        assert_eq!(req.path(), "/k");
        assert_eq!(req.query("x"), Some("1"));
        assert_eq!(req.query("flag"), Some(""));
        assert_eq!(req.query("y"), None);
        assert_eq!(req.header("A"), Some(&b"b"[..]));
    }

    #[test]
    fn length_bomb_and_trailing_bytes_are_refused() {
        // A body claiming 2^40 bytes must fail without allocating it.
        let mut bomb = encode_response(&Response::bytes(200, vec![])).unwrap();
        bomb.truncate(bomb.len() - 1);
        bomb.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 1, 0, 0]);
        assert!(matches!(decode_response(&bomb), Err(WireError::Decode(_))));
        let mut extra = encode_response(&Response::text(200, "x")).unwrap();
        extra.push(0);
        assert!(matches!(
            decode_response(&extra),
            Err(WireError::Trailing(1))
        ));
    }
}
