//! An actor's mailbox entries ([`Command`]) and the [`Ticket`] that
//! settles, exactly once, whether a held request runs or times out.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use stasis_host_api::{Request, Response};
use tokio::sync::oneshot;

use super::status::{Captured, ResumeFrom, SnapshotReport};
use crate::error::ApiError;

const WAITING: u8 = 0;
const STARTED: u8 = 1;
const CANCELLED: u8 = 2;

/// Decides, exactly once, whether a held request runs or is given up
/// (hold timeout): whichever side claims it first wins.
#[derive(Debug, Default)]
pub struct Ticket(AtomicU8);

impl Ticket {
    /// Claims the request for running it; false if it was given up.
    pub(super) fn start(&self) -> bool {
        self.0
            .compare_exchange(WAITING, STARTED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Gives the request up; false if the actor already started it.
    pub fn cancel(&self) -> bool {
        self.0
            .compare_exchange(WAITING, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// One mailbox entry.
pub enum Command {
    /// Handle one HTTP request.
    Call {
        /// The placement epoch the router saw; a stale one is refused (421).
        epoch: u64,
        /// The request (behind a pointer: every actor's mailbox allocates
        /// room for its commands up front, so the command is kept small;
        /// shared, so a caller that must retry elsewhere keeps it).
        request: Arc<Request>,
        /// Decides between running it and the hold timeout.
        ticket: Arc<Ticket>,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<Response, ApiError>>,
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
    /// Stop the task and drop the instance (files are the caller's).
    Stop(oneshot::Sender<()>),
}
