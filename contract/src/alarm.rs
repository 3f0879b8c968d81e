//! How a due alarm travels as a request: the control plane's scheduler
//! sends [`alarm_request`] along the request path (placement, gate,
//! mailbox, resume on demand), the actor task recognises it
//! ([`is_alarm`]), runs the guest's `stasis_on_alarm` and answers with
//! [`ALARM_HEADER`] set to [`RAN`] or [`NO_HOOK`]. The header is
//! [`crate::headers::HOST_ONLY`]: no client or guest can forge one.

use stasis_host_api::Request;

pub use crate::headers::ALARM_HEADER;

/// The value of [`ALARM_HEADER`] in the answer when the handler ran.
pub const RAN: &[u8] = b"ran";

/// The value of [`ALARM_HEADER`] in the answer when the module has no
/// `stasis_on_alarm` export.
pub const NO_HOOK: &[u8] = b"no-hook";

/// The request that delivers an alarm (`POST /` with [`ALARM_HEADER`]).
#[must_use]
pub fn alarm_request() -> Request {
    let mut request = Request::new("POST", "/");
    request
        .headers
        .push((ALARM_HEADER.to_owned(), b"1".to_vec()));
    request
}

/// Whether `request` delivers an alarm.
#[must_use]
pub fn is_alarm(request: &Request) -> bool {
    request.header(ALARM_HEADER).is_some()
}
