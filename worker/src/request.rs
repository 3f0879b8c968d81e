//! A delivery to an actor on this worker (an HTTP request, or a due
//! alarm): handed to its mailbox, answered, or given up (full mailbox, hold
//! timeout, client gone) — never both given up and executed.

use std::sync::Arc;

use stasis_host_api::{Request, Response};
use tokio::sync::oneshot;

use super::actor::{Command, Input, Ticket};
use super::{Undelivered, Worker};
use stasis_contract::alarm::AlarmOutcome;
use stasis_contract::client_gone::{self, ClientGone};
use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::metrics::Metrics;

/// Gives a request up if [`Worker::call`] is dropped before its answer
/// (the remote worker's serving loop dropped it: the router's connection
/// closed), and counts it when it was never started.
struct AbandonOnDrop<'a> {
    ticket: Option<Arc<Ticket>>,
    metrics: &'a Metrics,
}

impl Drop for AbandonOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take()
            && ticket.abandon()
        {
            self.metrics.abandoned();
        }
    }
}

impl Worker {
    /// Hands `request` to `actor`'s mailbox and waits for the answer. A full
    /// mailbox (`--max-held`) or a wait past `--hold-timeout` before the
    /// actor starts the request is 503 with `Retry-After`; a request is never
    /// both given up and executed. When `gone` is cancelled (or this future
    /// is dropped) before the guest runs the request, the request is given
    /// up (see [`stasis_contract::client_gone`]); one the guest runs is waited for.
    ///
    /// # Errors
    /// 421 if the actor is not on this worker (or at another epoch); the
    /// actor's or guest's failure as an [`ApiError`];
    /// [`stasis_contract::error::ErrorKind::Abandoned`] when the client left first.
    pub async fn call(
        &self,
        actor: &str,
        epoch: u64,
        request: impl Into<Arc<Request>>,
        gone: &ClientGone,
    ) -> Result<Response, ApiError> {
        let request = request.into();
        self.deliver(actor, epoch, gone, |reply| Input::Request {
            request,
            reply,
        })
        .await
    }

    /// Delivers a due alarm to `actor`: a command of its own in the
    /// actor's mailbox, after the requests before it (see
    /// [`stasis_contract::alarm`]); held and refused as a request is.
    /// `setter`: the `traceparent` of the span that set it.
    ///
    /// # Errors
    /// As [`Worker::call`].
    pub async fn alarm(
        &self,
        actor: &str,
        epoch: u64,
        setter: Option<&str>,
    ) -> Result<AlarmOutcome, ApiError> {
        let setter = setter.map(str::to_owned);
        self.deliver(actor, epoch, &ClientGone::new(), |reply| Input::Alarm {
            setter,
            reply,
        })
        .await
    }

    /// Delivers `event` on one of `actor`'s sockets: a command of its own
    /// in the actor's mailbox, after the requests before it; held and
    /// refused as a request is.
    ///
    /// # Errors
    /// As [`Worker::call`].
    pub async fn socket_event(
        &self,
        actor: &str,
        epoch: u64,
        event: stasis_host_api::sockets::SocketEvent,
    ) -> Result<(), ApiError> {
        let event = Box::new(event);
        self.deliver(actor, epoch, &ClientGone::new(), |reply| Input::Socket {
            event,
            reply,
        })
        .await
    }

    /// Hands the delivery `input` (made with the channel its answer comes
    /// back on) to `actor`'s mailbox and waits for the answer (see
    /// [`Worker::call`]).
    async fn deliver<T>(
        &self,
        actor: &str,
        epoch: u64,
        gone: &ClientGone,
        input: impl FnOnce(oneshot::Sender<Result<T, ApiError>>) -> Input,
    ) -> Result<T, ApiError> {
        if !self.is_serving() {
            return Err(ApiError::unavailable(format!(
                "worker {} lost contact with the control plane and stopped serving",
                self.ctx.worker
            )));
        }
        // Not here (moved away, or never here): misdirected, so the router
        // asks the current owner (421, as for a stale epoch).
        let ticket = Arc::new(Ticket::default());
        let (reply, answer) = oneshot::channel();
        let command = Command::Deliver {
            epoch,
            ticket: ticket.clone(),
            input: input(reply),
        };
        self.post(actor, command).map_err(|e| match e {
            Undelivered::NotHere(e) => ApiError::new(ErrorKind::StaleEpoch, e.message()),
            Undelivered::Full => ApiError::unavailable(format!(
                "actor {actor} already holds {} requests (--max-held)",
                self.settings.max_held
            )),
            Undelivered::Stopping => ApiError::unavailable(format!("actor {actor} is stopping")),
        })?;
        let mut waiting = AbandonOnDrop {
            ticket: Some(ticket.clone()),
            metrics: &self.ctx.metrics,
        };
        // The task ended without an answer: before the guest had the
        // delivery it was not applied; after, whether its effect stays is
        // unknown, and the answer says so rather than "failed".
        let stopped = || {
            if ticket.ran() {
                ApiError::internal(format!(
                    "actor {actor} stopped while running the request: it may or may not have \
                     been applied"
                ))
            } else {
                ApiError::unavailable(format!("actor {actor} stopped"))
            }
        };
        let hold = tokio::time::sleep(self.settings.hold_timeout);
        tokio::pin!(answer, hold);
        let (mut holding, mut listening) = (true, true);
        let result = loop {
            tokio::select! {
                result = &mut answer => break result.map_err(|_| stopped()).and_then(|r| r),
                () = &mut hold, if holding => {
                    holding = false;
                    if ticket.cancel() {
                        break Err(ApiError::unavailable(format!(
                            "actor {actor} did not take the request within the hold timeout of {:?}",
                            self.settings.hold_timeout
                        )));
                    }
                }
                () = gone.cancelled(), if listening => {
                    listening = false;
                    if ticket.abandon() {
                        break Err(client_gone::abandoned(actor));
                    }
                }
            }
        };
        waiting.ticket = None;
        result
    }
}
