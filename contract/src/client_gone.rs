//! Whether the client of a routed request still waits for its answer.
//!
//! The ingress runs each routed request in a task of its own and cancels a
//! [`ClientGone`] token when hyper drops the connection's service future
//! (the client closed the connection or reset the HTTP/2 stream). Down the
//! request's path — the gate of a moving actor, the worker's mailbox, the
//! wait for a `--max-live` slot, the forward to a remote worker — a request
//! whose client is gone before the guest starts it is given up: never
//! executed, answered with [`ErrorKind::Abandoned`] (which no client sees) and counted
//! in `stasis_requests_abandoned_total`. A request the guest already runs
//! finishes and is counted with its status.

use std::future::Future;

pub use tokio_util::sync::CancellationToken as ClientGone;

use crate::error::{ApiError, ErrorKind};

/// The error of a request given up because its client left.
#[must_use]
pub fn abandoned(actor: &str) -> ApiError {
    ApiError::new(
        ErrorKind::Abandoned,
        format!("the client left before actor {actor} started the request"),
    )
}

/// Runs `work` unless the client leaves first; then `work` is dropped and
/// the answer is [`abandoned`]. Only for work that is not the guest's call
/// (waiting at a gate, forwarding to a worker that decides by itself).
///
/// # Errors
/// `work`'s error, or [`ErrorKind::Abandoned`].
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
