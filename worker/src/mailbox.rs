//! An actor's mailbox entries ([`Command`]) and the [`Ticket`] that
//! settles, exactly once, whether a held request runs, times out, or is
//! given up because its client left.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use stasis_host_api::sockets::SocketEvent;
use stasis_host_api::{Request, Response};
use tokio::sync::{Notify, oneshot};

use stasis_contract::alarm::AlarmOutcome;
use stasis_contract::error::ApiError;
use stasis_contract::status::{Captured, ResumeFrom, SnapshotReport};

/// In the mailbox.
const WAITING: u8 = 0;
/// Taken by the actor task, before the guest runs it (e.g. waiting for a
/// `--max-live` slot).
const STARTED: u8 = 1;
/// The guest runs (or ran) it.
const RUNNING: u8 = 2;
/// Given up at the hold timeout.
const CANCELLED: u8 = 3;
/// Given up because its client left.
const ABANDONED: u8 = 4;

/// Decides, exactly once, whether a held request runs or is given up
/// (hold timeout, or its client left): whichever side claims it first wins.
/// The hold timeout can give a request up only while it is in the mailbox;
/// a client that leaves can also while the actor prepares to run it (waits
/// for a live-instance slot), never once the guest runs it.
#[derive(Debug, Default)]
pub struct Ticket {
    state: AtomicU8,
    /// Woken when the client leaves.
    left: Notify,
}

impl Ticket {
    fn claim(&self, from: u8, to: u8) -> bool {
        self.state
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The actor takes the request; false if it was given up.
    pub(super) fn start(&self) -> bool {
        self.claim(WAITING, STARTED)
    }

    /// The guest is about to run the request; false if its client left.
    pub(super) fn run(&self) -> bool {
        self.claim(STARTED, RUNNING)
    }

    /// Whether the guest was given the delivery.
    pub(super) fn ran(&self) -> bool {
        self.state.load(Ordering::Acquire) == RUNNING
    }

    /// Resolves once the client has left (or at once if it has).
    pub(super) async fn abandoned(&self) {
        loop {
            let left = self.left.notified();
            tokio::pin!(left);
            left.as_mut().enable();
            if self.state.load(Ordering::Acquire) == ABANDONED {
                return;
            }
            left.await;
        }
    }

    /// Gives the request up at the hold timeout; false if the actor
    /// already took it.
    #[must_use]
    pub fn cancel(&self) -> bool {
        self.claim(WAITING, CANCELLED)
    }

    /// Gives the request up because its client left; false if the guest
    /// already runs it (or it was given up before).
    #[must_use]
    pub fn abandon(&self) -> bool {
        let abandoned = self.claim(WAITING, ABANDONED) || self.claim(STARTED, ABANDONED);
        if abandoned {
            self.left.notify_waiters();
        }
        abandoned
    }
}

/// What a delivery asks the guest to run, and where its answer goes.
pub enum Input {
    /// An HTTP request, for the guest's handler.
    Request {
        /// The request (behind a pointer: every actor's mailbox allocates
        /// room for its commands up front, so the command is kept small;
        /// shared, so a caller that must retry elsewhere keeps it).
        request: Arc<Request>,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<Response, ApiError>>,
    },
    /// A due alarm, for the guest's `stasis_on_alarm`.
    Alarm {
        /// The `traceparent` of the span that set it.
        setter: Option<String>,
        /// Where the outcome goes.
        reply: oneshot::Sender<Result<AlarmOutcome, ApiError>>,
    },
    /// An event on one of the actor's sockets, for the guest's
    /// `stasis_on_socket`.
    Socket {
        /// The event (boxed: mailbox entries are kept small).
        event: Box<SocketEvent>,
        /// Where the outcome goes.
        reply: oneshot::Sender<Result<(), ApiError>>,
    },
}

impl Input {
    /// Answers with `error` instead of running.
    pub(crate) fn refuse(self, error: ApiError) {
        match self {
            Input::Request { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            Input::Alarm { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            Input::Socket { reply, .. } => {
                let _ = reply.send(Err(error));
            }
        }
    }
}

/// One mailbox entry.
pub enum Command {
    /// Run one delivery in the guest: an HTTP request or an alarm, in
    /// arrival order with every other command.
    Deliver {
        /// The placement epoch the router saw; a stale one is refused (421).
        epoch: u64,
        /// Decides between running it and giving it up (hold timeout, or
        /// its client left).
        ticket: Arc<Ticket>,
        /// What runs, and where its answer goes.
        input: Input,
    },
    /// Pause (idempotent).
    Pause(oneshot::Sender<Result<SnapshotReport, ApiError>>),
    /// Pause to free a live-instance slot (`--max-live`), unless the actor
    /// is no longer `running` (e.g. being moved).
    Evict,
    /// Checkpoint a running actor (no hooks, instance kept).
    Checkpoint(oneshot::Sender<Result<SnapshotReport, ApiError>>),
    /// Resume (idempotent unless a source is named).
    Resume(ResumeFrom, oneshot::Sender<Result<(), ApiError>>),
    /// Capture for a move: write a snapshot (no hooks), keep the instance,
    /// state `migrating`, and hand back its sequence number.
    Capture(oneshot::Sender<Result<Captured, ApiError>>),
    /// A move was rolled back: back to `running` (or `paused`).
    CancelMove(oneshot::Sender<()>),
    /// Write the newest journal entry to the store: its journal segment
    /// is old (see `super::journaled`). The permit, if any, is one of the
    /// compaction loop's folds in flight, given back once handled.
    Fold(Option<tokio::sync::OwnedSemaphorePermit>),
    /// For a hand-over to another version (the actor is captured): the
    /// state `stasis_save_state` returns, the instance's clock (ns) and
    /// the actor's idempotency table, encoded.
    SaveState(oneshot::Sender<Result<SavedState, ApiError>>),
    /// Stop the task and drop the instance (files are the caller's).
    Stop(oneshot::Sender<()>),
}

/// What a hand-over takes from the running version.
pub struct SavedState {
    /// What `stasis_save_state` returned.
    pub(crate) state: Vec<u8>,
    /// The instance's clock (ns) after it returned.
    pub(crate) clock_ns: u64,
    /// The clock mark on disk as the running version knows it (see
    /// [`crate::clock::ActorClock::known_mark`]).
    pub(crate) mark: Option<u64>,
    /// The actor's idempotency table, encoded.
    pub(crate) table: Vec<u8>,
}
