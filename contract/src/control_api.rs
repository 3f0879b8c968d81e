//! The one interface the control plane offers a worker's actors:
//! [`ControlApi`], what the host functions `call`, `send`, the alarm and
//! the socket functions need. Implemented in process by `stasis-control`'s
//! `LocalControl` and, for a remote worker, by `stasis-cluster`'s
//! `ControlPeer` (the control plane's internal API). A worker holds an
//! `Arc<dyn ControlApi>` and never asks which kind it is.

use async_trait::async_trait;
use stasis_host_api::{Request, Response};

use crate::error::ApiError;
use crate::sockets::{SocketAnswer, SocketOp};

/// Calls, messages and alarms, as a worker's actors reach them.
#[async_trait]
pub trait ControlApi: Send + Sync {
    /// Routes `request` to `actor` and waits for its answer, as the
    /// ingress router would (placement, gate, resume on demand).
    ///
    /// # Errors
    /// Not found for an unknown actor; otherwise the worker's or guest's
    /// failure.
    async fn call(&self, actor: &str, request: Request) -> Result<Response, ApiError>;

    /// Routes `request` to `actor` one-way: returns once it is accepted for
    /// delivery (the actor exists); delivery failures are counted in
    /// `stasis_sends_failed_total` and logged.
    ///
    /// # Errors
    /// Not found for an unknown actor; unavailable if it cannot be
    /// accepted.
    async fn send(&self, actor: &str, request: Request) -> Result<(), ApiError>;

    /// Sets `actor`'s alarm to `at_unix_ms` (Unix ms), replacing any;
    /// `setter` is the `traceparent` of the delivery's span that set it
    /// (the alarm's span links to it).
    ///
    /// # Errors
    /// Unavailable when the control plane cannot be reached or no longer
    /// leads; internal on a directory failure.
    async fn set_alarm(
        &self,
        actor: &str,
        at_unix_ms: u64,
        setter: Option<String>,
    ) -> Result<(), ApiError>;

    /// Removes `actor`'s alarm (fine when none is set).
    ///
    /// # Errors
    /// As [`ControlApi::set_alarm`].
    async fn cancel_alarm(&self, actor: &str) -> Result<(), ApiError>;

    /// `actor`'s pending alarm (Unix ms), if any.
    ///
    /// # Errors
    /// As [`ControlApi::set_alarm`].
    async fn alarm(&self, actor: &str) -> Result<Option<u64>, ApiError>;

    /// Carries out `op` on `actor`'s WebSockets and streams, which the
    /// process that accepted them holds.
    ///
    /// # Errors
    /// Not found for a socket the actor does not have open; too large for
    /// a message over `--max-socket-message`; unavailable when the process
    /// holding the socket cannot be reached.
    async fn socket(&self, actor: &str, op: SocketOp) -> Result<SocketAnswer, ApiError>;
}
