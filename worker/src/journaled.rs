//! An actor's durable state and the journal it appends to (durability
//! level `request`; the task's side is `actor::journal`): after each request (or
//! alarm) the state it produced is captured as a delta on the actor's
//! newest snapshot — every page changed since that snapshot, so the newest
//! entry alone gives the state — and appended to the worker journal
//! ([`stasis_core::journal`]) — as a patch of its previous entry when only
//! bytes within the same pages changed. The answer waits for the journal's group
//! commit (the *output gate*, [`send_gated`]) while the actor runs its next
//! request.
//!
//! The newest entry is the actor's acknowledged state: a trap rolls back
//! to it, not to the newest snapshot. It is *sealed* — written to the
//! store as the snapshot it is, so later entries are deltas on it — when
//! it passes [`SEAL_BYTES`], before every snapshot (pause, checkpoint,
//! capture for a move), before a rollback, and when the journal asks
//! ([`Command::Fold`](super::mailbox::Command::Fold): its segment is old).

use std::sync::Arc;

use stasis_core::journal::shipped::ShippedJournal;
use stasis_core::journal::{Durable, EntryKind, Journal, JournalError};
use tokio::sync::oneshot;

use stasis_contract::error::ApiError;

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

    /// Whether an entry may be appended as a patch of the one before it
    /// (a shipped round keeps each actor's newest entry only: whole).
    pub(crate) fn patches(&self) -> bool {
        matches!(self, Self::Local(_))
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

/// An entry grown past this many bytes (the actor changed many pages since
/// its newest snapshot) is sealed after its append, so that the next
/// entries are small again.
pub(crate) const SEAL_BYTES: usize = 64 << 10;

/// The actor's newest journal entry, not yet in the store.
#[derive(Debug, Clone)]
pub(crate) struct Journaled {
    /// The snapshot it becomes when sealed: the actor's next sequence
    /// number.
    pub seq: u64,
    /// The snapshot file.
    pub bytes: Arc<Vec<u8>>,
    /// Patches appended since the journal last received it whole.
    pub patches: u32,
}

/// A whole entry is appended at least every this many records of an
/// actor (module docs).
pub(crate) const PATCHES_PER_ENTRY: u32 = 256;

/// Sends `result` on `reply` once `gate` (the durability of the newest
/// entry the answer depends on) resolves; at once if there is none or it
/// is durable already. If the journal fails first, the answer is 503: the
/// request's effect may not survive a restart, so it is not reported done.
pub(crate) fn send_gated<T: Send + 'static>(
    reply: oneshot::Sender<Result<T, ApiError>>,
    result: Result<T, ApiError>,
    gate: Option<Durable>,
) {
    let Some(gate) = gate.filter(|_| result.is_ok()) else {
        let _ = reply.send(result);
        return;
    };
    match gate.outcome() {
        Some(Ok(())) => {
            let _ = reply.send(result);
        }
        Some(Err(e)) => {
            let _ = reply.send(Err(ApiError::unavailable(e.to_string())));
        }
        None => {
            tokio::spawn(async move {
                let answer = match gate.wait().await {
                    Ok(()) => result,
                    Err(e) => Err(ApiError::unavailable(e.to_string())),
                };
                let _ = reply.send(answer);
            });
        }
    }
}

/// What an actor has made durable and what is on its way: its snapshot
/// sequence, its newest journal entry and that entry's durability. It
/// outlives the actor's task (a parked actor keeps it).
#[derive(Debug, Default)]
pub(crate) struct DurableState {
    /// The sequence number of the actor's next snapshot (its newest + 1).
    pub(crate) next_seq: u64,
    /// Deliveries since the newest snapshot (for `--checkpoint-every`).
    pub(crate) since_checkpoint: u64,
    /// The newest journal entry, not yet in the store.
    pub(crate) journaled: Option<Journaled>,
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
    }

    /// The journal entries no longer apply (the actor is deleted, moved
    /// away, or repaired from another source).
    pub(crate) fn forget(&mut self) {
        self.journaled = None;
        self.gate = None;
    }
}
