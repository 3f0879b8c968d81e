//! The host functions of ABI 2, as plain Rust functions: call and message
//! other actors, set the actor's alarm, reach outside through the host's
//! allow-list, and ask the actor's own name. Call them from
//! [`Actor::handle`](crate::Actor::handle) or a hook; each blocks the
//! handler (never the host) until it has its answer.
//!
//! Errors are [`HostError`]s; [`HostError::status`] is the HTTP status
//! that best passes one on, and [`last_error`] says why the last one
//! happened. The conventions and every error of every function are in
//! `stasis_host_api::imports`.
//!
//! Built for anything but wasm (e.g. the SDK's own tests), every function
//! fails with [`HostError::NotEnabled`].

use stasis_host_api::{Request, Response, decode_response, encode_request};

pub use stasis_host_api::imports::HostError;

/// The raw imports (`stasis_host_api::imports`).
#[cfg(target_family = "wasm")]
mod raw {
    #[link(wasm_import_module = "stasis")]
    unsafe extern "C" {
        pub(super) fn call(
            actor_ptr: *const u8,
            actor_len: usize,
            req_ptr: *const u8,
            req_len: usize,
        ) -> i64;
        pub(super) fn send(
            actor_ptr: *const u8,
            actor_len: usize,
            req_ptr: *const u8,
            req_len: usize,
        ) -> i32;
        pub(super) fn set_alarm(at_unix_ms: i64) -> i32;
        pub(super) fn cancel_alarm() -> i32;
        pub(super) fn alarm() -> i64;
        pub(super) fn fetch(req_ptr: *const u8, req_len: usize) -> i64;
        pub(super) fn self_name() -> i64;
        pub(super) fn last_error() -> i64;
        pub(super) fn take_result(ptr: *mut u8, len: usize) -> i32;
    }
}

/// Stand-ins off wasm: every function is not enabled.
#[cfg(not(target_family = "wasm"))]
#[allow(
    clippy::unnecessary_wraps,
    clippy::missing_safety_doc,
    reason = "stand-ins with the signatures of the wasm imports they replace"
)]
mod raw {
    const NOT_ENABLED: i32 = -8;
    pub(super) unsafe fn call(_: *const u8, _: usize, _: *const u8, _: usize) -> i64 {
        NOT_ENABLED.into()
    }
    pub(super) unsafe fn send(_: *const u8, _: usize, _: *const u8, _: usize) -> i32 {
        NOT_ENABLED
    }
    pub(super) unsafe fn set_alarm(_: i64) -> i32 {
        NOT_ENABLED
    }
    pub(super) unsafe fn cancel_alarm() -> i32 {
        NOT_ENABLED
    }
    pub(super) unsafe fn alarm() -> i64 {
        NOT_ENABLED.into()
    }
    pub(super) unsafe fn fetch(_: *const u8, _: usize) -> i64 {
        NOT_ENABLED.into()
    }
    pub(super) unsafe fn self_name() -> i64 {
        NOT_ENABLED.into()
    }
    pub(super) unsafe fn last_error() -> i64 {
        NOT_ENABLED.into()
    }
    pub(super) unsafe fn take_result(_: *mut u8, _: usize) -> i32 {
        NOT_ENABLED
    }
}

pub(crate) fn check(status: i32) -> Result<(), HostError> {
    match HostError::from_code(status.into()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Collects a buffer result: `r` bytes held by the host, or an error.
pub(crate) fn take(r: i64) -> Result<Vec<u8>, HostError> {
    if let Some(e) = HostError::from_code(r) {
        return Err(e);
    }
    let len = usize::try_from(r).map_err(|_| HostError::Internal)?;
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` is `len` writable bytes; the host writes exactly `len`.
    check(unsafe { raw::take_result(buf.as_mut_ptr(), len) })?;
    Ok(buf)
}

fn encode(request: &Request) -> Result<Vec<u8>, HostError> {
    encode_request(request).map_err(|_| HostError::TooLarge)
}

fn response(bytes: &[u8]) -> Result<Response, HostError> {
    decode_response(bytes).map_err(|_| HostError::Internal)
}

/// Sends `request` to actor `actor` and waits for its response. The actor
/// is resumed if paused, wherever it is placed; a failure at the callee (a
/// trap, a full mailbox) is a response with its status, as an HTTP client
/// would see it. Meanwhile this actor takes no other request.
///
/// ```no_run
/// use stasis_guest_sdk::{host, Request, Response};
///
/// fn handle(_req: Request) -> Response {
///     match host::call("counter", &Request::new("POST", "/")) {
///         Ok(answer) => Response::bytes(answer.status, answer.body),
///         Err(e) => Response::text(e.status(), format!("call failed: {e}\n")),
///     }
/// }
/// ```
///
/// # Errors
/// [`HostError::NotFound`] (no such actor), [`HostError::LoopDetected`]
/// (`actor` is already waiting in this chain of calls, e.g. this actor
/// itself), [`HostError::Deadline`] (this request's time ran out),
/// [`HostError::TooLarge`], [`HostError::Unavailable`],
/// [`HostError::NotEnabled`].
pub fn call(actor: &str, request: &Request) -> Result<Response, HostError> {
    let bytes = encode(request)?;
    // SAFETY: both ranges are live for the duration of the call.
    let r = unsafe { raw::call(actor.as_ptr(), actor.len(), bytes.as_ptr(), bytes.len()) };
    response(&take(r)?)
}

/// Enqueues `request` at actor `actor` and returns without waiting for it
/// to run. Delivery is at most once: nothing is retried.
///
/// ```no_run
/// use stasis_guest_sdk::{host, Request};
///
/// let delivered = host::send("audit-log", &Request::new("POST", "/").with_body("hello"));
/// assert!(delivered.is_ok());
/// ```
///
/// # Errors
/// [`HostError::NotFound`], [`HostError::Unavailable`] (its mailbox is
/// full or its worker unreachable), [`HostError::TooLarge`],
/// [`HostError::NotEnabled`].
pub fn send(actor: &str, request: &Request) -> Result<(), HostError> {
    let bytes = encode(request)?;
    // SAFETY: both ranges are live for the duration of the call.
    check(unsafe { raw::send(actor.as_ptr(), actor.len(), bytes.as_ptr(), bytes.len()) })
}

/// Sets this actor's one alarm to `at_unix_ms` (milliseconds since the
/// Unix epoch), replacing any other. At that time the host calls
/// [`Actor::alarm`](crate::Actor::alarm), resuming the actor if it is
/// paused; a panicking alarm hook is retried (at least once delivery).
///
/// ```no_run
/// use stasis_guest_sdk::host;
/// use std::time::{SystemTime, UNIX_EPOCH};
///
/// let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
/// host::set_alarm(now_ms + 60_000).expect("alarm set");
/// ```
///
/// # Errors
/// [`HostError::NotEnabled`] (no alarms on this host),
/// [`HostError::BadInput`] (past `i64::MAX`), [`HostError::Unavailable`].
pub fn set_alarm(at_unix_ms: u64) -> Result<(), HostError> {
    let at = i64::try_from(at_unix_ms).map_err(|_| HostError::BadInput)?;
    // SAFETY: no pointers.
    check(unsafe { raw::set_alarm(at) })
}

/// Removes this actor's alarm (fine when none is set).
///
/// ```no_run
/// stasis_guest_sdk::host::cancel_alarm().expect("alarm cancelled");
/// ```
///
/// # Errors
/// [`HostError::NotEnabled`], [`HostError::Unavailable`].
pub fn cancel_alarm() -> Result<(), HostError> {
    // SAFETY: no pointers.
    check(unsafe { raw::cancel_alarm() })
}

/// This actor's pending alarm (Unix ms), if one is set.
///
/// ```no_run
/// if let Ok(Some(at_unix_ms)) = stasis_guest_sdk::host::alarm() {
///     println!("next alarm at {at_unix_ms}");
/// }
/// ```
///
/// # Errors
/// [`HostError::NotEnabled`], [`HostError::Unavailable`].
pub fn alarm() -> Result<Option<u64>, HostError> {
    // SAFETY: no pointers.
    let r = unsafe { raw::alarm() };
    match HostError::from_code(r) {
        Some(HostError::NotFound) => Ok(None),
        Some(e) => Err(e),
        None => Ok(u64::try_from(r).ok()),
    }
}

/// Sends `request` to the outside world: its `uri` is an absolute
/// `http://` or `https://` URL whose host the operator allowed with
/// `stasis serve --allow-outbound HOST[:PORT]` (or `public`), and whose
/// addresses are public or named by a rule (docs/api.md, "fetch"). A 3xx
/// answer is returned as it is, never followed.
///
/// ```no_run
/// use stasis_guest_sdk::{host, Request};
///
/// match host::fetch(&Request::new("GET", "https://api.example.com/v1/items")) {
///     Ok(answer) => println!("{} ({} bytes)", answer.status, answer.body.len()),
///     Err(e) => println!("refused or failed: {e}: {}", host::last_error().unwrap_or_default()),
/// }
/// ```
///
/// # Errors
/// [`HostError::Refused`] (host not allowed), [`HostError::BadInput`]
/// (not an absolute http(s) URL), [`HostError::Unavailable`] (connection
/// or TLS failure), [`HostError::Deadline`], [`HostError::TooLarge`].
pub fn fetch(request: &Request) -> Result<Response, HostError> {
    let bytes = encode(request)?;
    // SAFETY: the range is live for the duration of the call.
    let r = unsafe { raw::fetch(bytes.as_ptr(), bytes.len()) };
    response(&take(r)?)
}

/// This actor's name (also in every request's `context.actor`; this one
/// works in hooks too, and stays right in a forked copy).
///
/// ```no_run
/// let me = stasis_guest_sdk::host::self_name().unwrap_or_default();
/// println!("I am {me}");
/// ```
///
/// # Errors
/// [`HostError::NotEnabled`] off wasm; [`HostError::Internal`].
pub fn self_name() -> Result<String, HostError> {
    // SAFETY: no pointers.
    let bytes = take(unsafe { raw::self_name() })?;
    String::from_utf8(bytes).map_err(|_| HostError::Internal)
}

/// Why the last host function that failed (in this instance) failed, in
/// words; `None` if none did.
#[must_use]
pub fn last_error() -> Option<String> {
    // SAFETY: no pointers.
    let bytes = take(unsafe { raw::last_error() }).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}
