//! An actor's durable state and the journal it appends to (durability
//! levels `request` and `store`; the task's side is `actor::journal`).
//!
//! **The journal is logical**, the data dir's and a cluster worker's
//! shipped one ([`stasis_core::journal::shipped`]) alike: after each delivery (request,
//! alarm, socket event) its input, the host values it read (its tape,
//! [`stasis_core::tape`]) and a digest of its answer are appended
//! ([`stasis_core::journal::delivery`]), a few hundred bytes; the answer
//! waits for the journal's group commit (the *output gate*,
//! [`send_gated`]) while the actor runs its next delivery. The actor's
//! acknowledged state is its newest snapshot plus the deliveries after it
//! ([`DurableState::since`], also kept in memory): a trap, a restart or a
//! resume restores the snapshot and replays them. A snapshot is captured
//! in the background (after the answer is handed to the gate) once they
//! pass [`SNAPSHOT_AFTER_ENTRIES`], [`SNAPSHOT_AFTER_BYTES`] or
//! [`SNAPSHOT_AFTER`], at every pause, move and upgrade, and when the
//! journal asks ([`Command::Fold`](super::mailbox::Command::Fold): their
//! segment is old); the journal lets their segments go once it is written.
//!
//! A cluster worker's actors also write a snapshot once their first entry
//! since the newest is [`FOLD_AFTER`](stasis_core::journal::shipped::FOLD_AFTER)
//! old (the journal asks), and before their next delivery when a round
//! holding their entries was lost ([`Log::broken`]).
//!
//! A create's snapshot 0 is a page entry of the data dir's journal until it
//! is *sealed* (written to the store as the snapshot it is,
//! [`Journaled`]): before the first delivery, at a pause, and when the
//! journal asks.

use std::sync::Arc;
use std::time::Instant;

use stasis_core::journal::delivery::DeliveryRecord;
use stasis_core::journal::shipped::ShippedJournal;
use stasis_core::journal::{Durable, EntryKind, Journal, JournalError};
use tokio::sync::oneshot;

use stasis_contract::error::{ApiError, ErrorKind};

/// Where a worker's actors append their journal entries.
#[derive(Debug, Clone)]
pub enum Log {
    /// The data dir's journal, group-committed by `fdatasync` (one machine).
    Local(Arc<Journal>),
    /// Journal segments group-committed into the snapshot store (a cluster
    /// worker, [`stasis_core::journal::shipped`]).
    Shipped(Arc<ShippedJournal>),
}

impl Log {
    pub(crate) fn append(
        &self,
        kind: EntryKind,
        epoch: u64,
        seq: u64,
        actor: &str,
        body: &Arc<Vec<u8>>,
    ) -> Result<Durable, JournalError> {
        match self {
            Self::Local(journal) => journal.append(kind, epoch, seq, actor, body),
            Self::Shipped(journal) => journal.append(kind, epoch, seq, actor, body.clone()),
        }
    }

    /// Appends a forget of `actor`'s entries at `epoch` or before.
    pub(crate) fn forget(&self, actor: &str, epoch: u64) {
        let _ = self.append(EntryKind::Forget, epoch, 0, actor, &Arc::default());
    }

    pub(crate) fn failed(&self) -> Option<JournalError> {
        match self {
            Self::Local(journal) => journal.failed(),
            Self::Shipped(_) => None,
        }
    }

    /// Whether a lost round of the shipped journal held entries of
    /// `actor` since its newest snapshot: its next delivery waits for a
    /// snapshot in the store ([`ShippedJournal::broken`]).
    pub(crate) fn broken(&self, actor: &str) -> bool {
        match self {
            Self::Local(_) => false,
            Self::Shipped(journal) => journal.broken(actor),
        }
    }

    /// Why the data dir's journal refuses entries now for want of disk
    /// space, if it does: a delivery does not run.
    pub(crate) fn no_room(&self) -> Option<JournalError> {
        match self {
            Self::Local(journal) => journal.no_room(),
            Self::Shipped(_) => None,
        }
    }

    /// `actor`'s newest entry at `epoch` or before is in the store.
    pub(crate) fn settled(&self, actor: &str, epoch: u64) {
        match self {
            Self::Local(journal) => journal.settled(actor, epoch),
            Self::Shipped(journal) => journal.settled(actor, epoch),
        }
    }
}

/// What follows a [`ActorTask::seal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    /// A capture of the live instance, which may replace the entry.
    Capture,
    /// Nothing: the entry must reach the store as it is (a trap's
    /// rollback, a fold, a grown entry).
    Keep,
}

/// A create's snapshot 0 as a journal entry, not yet in the store.
#[derive(Debug, Clone)]
pub(crate) struct Journaled {
    /// The snapshot it becomes when sealed: the actor's next sequence
    /// number.
    pub seq: u64,
    /// The snapshot file.
    pub bytes: Arc<Vec<u8>>,
}

/// Sends `result` on `reply` once `gate` (the durability of the newest
/// entry the answer depends on) resolves; at once if there is none or it
/// is durable already. If the journal fails first (a write or `fdatasync`
/// error), what reached the disk is unknown: the answer is 503 saying the
/// request may or may not have been applied (a restart replays whatever
/// did), never that it was refused.
pub(crate) fn send_gated<T: Send + 'static>(
    reply: oneshot::Sender<Result<T, ApiError>>,
    result: Result<T, ApiError>,
    gate: Option<Durable>,
) {
    let Some(gate) = gate.filter(|_| result.is_ok()) else {
        let _ = reply.send(result);
        return;
    };
    // Sent by the journal's writer once the entry's group commit is over
    // (at once if it is): no task or wake-up per answer.
    gate.then(move |outcome| {
        let answer = match outcome {
            Ok(()) => result,
            Err(e) => Err(unknown_outcome(&e)),
        };
        let _ = reply.send(answer);
    });
}

/// A logical journal's deliveries since the newest snapshot reach this
/// many, a snapshot is captured (module docs).
pub(crate) const SNAPSHOT_AFTER_ENTRIES: usize = 1_000;
/// … or this many bytes of entries.
pub(crate) const SNAPSHOT_AFTER_BYTES: usize = 4 << 20;
/// … or the oldest of them is this old.
pub(crate) const SNAPSHOT_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// The answer of a request whose journal entry's group commit failed:
/// 503, with the journal's reason, which says the request may or may not
/// have been applied.
fn unknown_outcome(e: &JournalError) -> ApiError {
    ApiError::unavailable(e.to_string())
}

/// The answer of a delivery whose entry the journal refused or lost: 507
/// when the data dir's disk has no room (the reason names it), else 503.
pub(crate) fn entry_error(e: &JournalError) -> ApiError {
    if e.is_no_room() {
        ApiError::new(ErrorKind::InsufficientStorage, e.to_string())
    } else {
        ApiError::unavailable(e.to_string())
    }
}

/// Why a delivery's entry is not in the journal.
#[derive(Debug)]
pub(crate) enum NotAppended {
    /// Nothing of it was written and the journal takes entries again
    /// later (no room on the disk, a shipped journal's broken actor): the
    /// delivery is rolled back and the actor lives on.
    Refused(ApiError),
    /// The journal failed (what reached the disk is unknown), or the
    /// worker lost its lease.
    Failed(ApiError),
}

/// What an actor has made durable and what is on its way: its snapshot
/// sequence, its deliveries since (or its create's page entry) and the
/// durability of the newest. It outlives the actor's task (a parked actor
/// keeps it).
#[derive(Debug, Default)]
pub(crate) struct DurableState {
    /// The sequence number of the actor's next snapshot (its newest + 1).
    pub(crate) next_seq: u64,
    /// Deliveries since the newest snapshot (for `--checkpoint-every`).
    pub(crate) since_checkpoint: u64,
    /// A create's snapshot 0 as a page entry, not yet in the store.
    pub(crate) journaled: Option<Journaled>,
    /// The logical journal's deliveries after the newest snapshot, in
    /// order: replayed on it by a resume (after a trap, a pause, a
    /// restart).
    pub(crate) since: Vec<Arc<DeliveryRecord>>,
    /// Their bytes in the journal.
    pub(crate) since_bytes: usize,
    /// When the first of them was appended.
    pub(crate) since_first: Option<Instant>,
    /// The durability of the newest entry appended: an answer that
    /// changed nothing still waits for it (it may show its effect).
    pub(crate) gate: Option<Durable>,
}

impl DurableState {
    /// A state whose newest snapshot is `next_seq - 1`.
    pub(crate) fn at(next_seq: u64) -> Self {
        Self {
            next_seq,
            ..Self::default()
        }
    }

    /// Snapshot `next_seq` was written to the store: the sequence moves
    /// on, and the journal entries are in the store now (this snapshot, or
    /// an older state a live capture superseded).
    pub(crate) fn wrote_snapshot(&mut self) {
        self.next_seq += 1;
        self.since_checkpoint = 0;
        self.journaled = None;
        self.covered();
    }

    /// The newest snapshot holds every delivery since the one before: they
    /// are no longer needed for a replay.
    pub(crate) fn covered(&mut self) {
        self.since.clear();
        self.since_bytes = 0;
        self.since_first = None;
    }

    /// Whether the actor's newest state is not a snapshot in the store: a
    /// page entry, or deliveries after the newest snapshot.
    pub(crate) fn unsnapshotted(&self) -> bool {
        self.journaled.is_some() || !self.since.is_empty()
    }

    /// Whether the deliveries since the newest snapshot passed a threshold
    /// (module docs).
    pub(crate) fn snapshot_due(&self) -> bool {
        self.since.len() >= SNAPSHOT_AFTER_ENTRIES
            || self.since_bytes >= SNAPSHOT_AFTER_BYTES
            || self
                .since_first
                .is_some_and(|first| first.elapsed() >= SNAPSHOT_AFTER)
    }

    /// The journal entries no longer apply (the actor is deleted, moved
    /// away, or repaired from another source).
    pub(crate) fn forget(&mut self) {
        self.journaled = None;
        self.gate = None;
        self.covered();
    }
}
