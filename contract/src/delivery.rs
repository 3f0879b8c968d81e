//! One delivery to an actor, from the control plane to the guest: an HTTP
//! request (`Arc<Request>`), a due alarm ([`DueAlarm`]) or an event on one
//! of its sockets (`SocketEvent`). Each is a [`Delivery`], which names the
//! type of its answer and the [`WorkerApi`] operation that carries it, so
//! the control plane's request path passes any delivery through the
//! actor's gate with one generic function, the worker runs it in the guest
//! as the same type, and no code matches one kind of answer against
//! another.

use std::future::Future;
use std::sync::Arc;

use stasis_host_api::sockets::SocketEvent;
use stasis_host_api::{Request, Response};

use crate::alarm::AlarmOutcome;
use crate::client_gone::ClientGone;
use crate::error::ApiError;
use crate::worker_api::WorkerApi;

/// What can be delivered to an actor (module docs).
pub trait Delivery: Clone + Send + Sync + 'static {
    /// What the guest answers to it.
    type Answer: Send + 'static;

    /// Its name in spans and messages: `request`, `alarm` or `socket`.
    const KIND: &'static str;

    /// Hands it to `worker` for `actor` under placement `epoch`; `gone`
    /// is cancelled when its client leaves (see [`WorkerApi::call`]).
    ///
    /// # Errors
    /// The worker's, as [`WorkerApi::call`].
    fn send<'a>(
        &'a self,
        worker: &'a dyn WorkerApi,
        actor: &'a str,
        epoch: u64,
        gone: &'a ClientGone,
    ) -> impl Future<Output = Result<Self::Answer, ApiError>> + Send + 'a;
}

/// An HTTP request, for the guest's handler (shared: a retry on the
/// actor's new owner sends the same request).
impl Delivery for Arc<Request> {
    type Answer = Response;
    const KIND: &'static str = "request";

    fn send<'a>(
        &'a self,
        worker: &'a dyn WorkerApi,
        actor: &'a str,
        epoch: u64,
        gone: &'a ClientGone,
    ) -> impl Future<Output = Result<Response, ApiError>> + Send + 'a {
        worker.call(actor, epoch, self.clone(), gone)
    }
}

/// A due alarm, for the guest's `stasis_on_alarm` (see [`crate::alarm`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DueAlarm {
    /// The `traceparent` of the span that set the alarm, when known: the
    /// alarm's span (a trace of its own) links to it.
    pub setter: Option<String>,
}

impl Delivery for DueAlarm {
    type Answer = AlarmOutcome;
    const KIND: &'static str = "alarm";

    fn send<'a>(
        &'a self,
        worker: &'a dyn WorkerApi,
        actor: &'a str,
        epoch: u64,
        _gone: &'a ClientGone,
    ) -> impl Future<Output = Result<AlarmOutcome, ApiError>> + Send + 'a {
        worker.alarm(actor, epoch, self.setter.as_deref())
    }
}

/// An event on one of the actor's sockets, for the guest's
/// `stasis_on_socket`.
impl Delivery for SocketEvent {
    type Answer = ();
    const KIND: &'static str = "socket";

    fn send<'a>(
        &'a self,
        worker: &'a dyn WorkerApi,
        actor: &'a str,
        epoch: u64,
        _gone: &'a ClientGone,
    ) -> impl Future<Output = Result<(), ApiError>> + Send + 'a {
        worker.socket_event(actor, epoch, self.clone())
    }
}
