//! Whether the client of a routed request still waits for its answer.
//!
//! The ingress runs each routed request in a task of its own and cancels a
//! [`ClientGone`] token when hyper drops the connection's service future
//! (the client closed the connection or reset the HTTP/2 stream). Down the
//! request's path — the gate of a moving actor, the worker's mailbox, the
//! wait for a `--max-live` slot, the forward to a remote worker — a request
//! whose client is gone before the guest starts it is given up: never
//! executed, answered with [`ABANDONED`] (which no client sees) and counted
//! in `stasis_requests_abandoned_total`. A request the guest already runs
//! finishes and is counted with its status.

use std::future::Future;

pub use tokio_util::sync::CancellationToken as ClientGone;

use crate::error::ApiError;

/// The status of a request given up because its client left (never sent:
/// there is nobody to send it to).
pub const ABANDONED: u16 = 499;

/// The status of a request whose client left while it was forwarded to a
/// remote worker that could not be told (frozen, unreachable): the forward
/// is given up and whether the worker ran it is unknown, so it is counted
/// neither as abandoned nor under a status (never sent either).
pub const OUTCOME_UNKNOWN: u16 = 498;

/// The error of a request given up because its client left.
#[must_use]
pub fn abandoned(actor: &str) -> ApiError {
    ApiError::new(
        ABANDONED,
        format!("the client left before actor {actor} started the request"),
    )
}

/// Runs `work` unless the client leaves first; then `work` is dropped and
/// the answer is [`abandoned`]. Only for work that is not the guest's call
/// (waiting at a gate, forwarding to a worker that decides by itself).
///
/// # Errors
/// `work`'s error, or [`ABANDONED`].
pub async fn unless_gone<T>(
    gone: &ClientGone,
    actor: &str,
    work: impl Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    tokio::select! {
        biased;
        () = gone.cancelled() => Err(abandoned(actor)),
        result = work => result,
    }
}
