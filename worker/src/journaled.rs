//! Durability level `request` in an actor task: after each request (or
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
use std::time::Instant;

use stasis_core::journal::shipped::ShippedJournal;
use stasis_core::journal::{Durable, EntryKind, Journal, JournalError, patch};
use stasis_core::snapshot;
use stasis_core::snapshot::delta::MIN_DELTA_ROOT_PAGES;
use tokio::sync::oneshot;

use super::actor::ActorTask;
use super::capture::Kind;
use stasis_contract::error::ApiError;
use stasis_contract::settings::Durability;
use stasis_contract::status::SnapshotReport;

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
    fn append(
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

    fn failed(&self) -> Option<JournalError> {
        match self {
            Self::Local(journal) => journal.failed(),
            Self::Shipped(_) => None,
        }
    }

    /// Whether an entry may be appended as a patch of the one before it
    /// (a shipped round keeps each actor's newest entry only: whole).
    fn patches(&self) -> bool {
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
const PATCHES_PER_ENTRY: u32 = 256;

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

impl ActorTask {
    /// The journal, when this actor's requests go through it: level
    /// `request` or `store`, over a store that keeps deltas (an entry is
    /// sealed as one), on a worker with the data dir's journal and no
    /// replicator, or with a shipped journal (a cluster worker).
    pub(super) fn journal_on(&self) -> Option<Log> {
        let level = matches!(
            self.settings.durability,
            Durability::Request | Durability::Store
        );
        if !level || !self.store.supports_deltas() {
            return None;
        }
        match self.journal.as_ref()? {
            Log::Local(_) if self.replicator.is_some() => None,
            log => Some(log.clone()),
        }
    }

    /// After how many requests the actor checkpoints: `--checkpoint-every`,
    /// or after each one at level `request` without a journal (a worker
    /// process, or a store without deltas), which makes each answer wait
    /// for its snapshot instead.
    pub(super) fn checkpoint_every(&self) -> u64 {
        let level = matches!(
            self.settings.durability,
            Durability::Request | Durability::Store
        );
        if level && self.journal_on().is_none() {
            1
        } else {
            self.settings.checkpoint_every
        }
    }

    /// After a request or alarm ran: appends the state it produced to the
    /// journal, and returns what its answer must wait for (its entry, or
    /// the newest entry still in flight when it changed nothing).
    ///
    /// # Errors
    /// 503 when the journal failed or the capture did: the caller rolls the
    /// request back.
    pub(super) async fn journal_request(&mut self) -> Result<Option<Durable>, ApiError> {
        let Some(journal) = self.journal_on() else {
            return Ok(None);
        };
        if let Some(e) = journal.failed() {
            return Err(ApiError::unavailable(e.to_string()));
        }
        // A worker past its lease keeps nothing of what it ran: its actor
        // may have an owner elsewhere (see `fence`).
        self.store.check_fence(&self.name)?;
        // On the actor's task itself: a delta of a few pages takes tens of
        // microseconds, less than a hop to a blocking thread.
        let (bytes, kind) = self.capture_live(super::capture::For::Entry)?;
        let same = match &self.journaled {
            Some(newest) => snapshot::same_state(&newest.bytes, &bytes),
            None => kind == (Kind::Delta { unchanged: true }),
        };
        // The newest entry's round was lost (the store did not take it):
        // an answer showing its state waits for the entry to ship again.
        let lost = self.journaled.is_some()
            && self
                .gate
                .as_ref()
                .is_some_and(|gate| matches!(gate.outcome(), Some(Err(_))));
        if same && !lost {
            return Ok(self.gate.clone().filter(|gate| !gate.is_durable()));
        }
        let seq = self.next_seq;
        let bytes = Arc::new(bytes);
        // A patch of the previous entry when it is one of the same
        // snapshot, with a whole entry every PATCHES_PER_ENTRY records so
        // the journal's pin on old segments moves on.
        let patch = self
            .journaled
            .as_ref()
            .filter(|_| journal.patches())
            .filter(|previous| previous.seq == seq && previous.patches < PATCHES_PER_ENTRY)
            .and_then(|previous| {
                patch::diff(&previous.bytes, &bytes).map(|p| (p, previous.patches))
            });
        let (kind, record, patches) = match patch {
            Some((record, patches)) => (EntryKind::Patch, Arc::new(record), patches + 1),
            None => (EntryKind::Snapshot, bytes.clone(), 0),
        };
        let durable = journal
            .append(kind, self.epoch, seq, &self.name, &record)
            .map_err(|e| ApiError::unavailable(e.to_string()))?;
        self.metrics.journaled(record.len());
        let big = bytes.len() > SEAL_BYTES;
        self.journaled = Some(Journaled {
            seq,
            bytes,
            patches,
        });
        self.gate = Some(durable.clone());
        if big && let Err(e) = self.seal(Instant::now(), Then::Keep).await {
            tracing::warn!(actor = %self.name, "sealing a large journal entry: {e}");
        }
        Ok(Some(durable))
    }

    /// Writes the newest journal entry to the store as the snapshot it is
    /// (module docs) and reports it; `None` when there is none, or when
    /// `then` is [`Then::Capture`] and a capture of the live instance is
    /// the better snapshot: the actor's chain is below a delta's 1 MiB (a
    /// full snapshot costs the same and keeps one file per snapshot), or
    /// the chain the entry is a delta on was broken behind the actor's back
    /// (a file removed or replaced). The journal lets the entry go once a
    /// snapshot is written ([`ActorTask::write_snapshot`]).
    ///
    /// # Errors
    /// The store's (507 quota, 500 I/O): the entry stays the newest.
    pub(super) async fn seal(
        &mut self,
        started: Instant,
        then: Then,
    ) -> Result<Option<SnapshotReport>, ApiError> {
        // Kept until a snapshot is written (`write_snapshot` lets it go):
        // if the caller's capture is not written (the quota, the disk, or
        // nothing changed), a rollback still finds it and a fold writes it.
        let Some(newest) = self.journaled.clone() else {
            return Ok(None);
        };
        debug_assert_eq!(newest.seq, self.next_seq);
        if then == Then::Capture && self.instance.is_some() {
            let small = self
                .delta_base
                .as_ref()
                .is_some_and(|base| base.root_pages < MIN_DELTA_ROOT_PAGES);
            if small {
                return Ok(None);
            }
            if !self.chain_holds(&newest) {
                tracing::warn!(
                    actor = %self.name,
                    "the chain of its journal entry no longer restores; a full snapshot instead"
                );
                self.entry_chain = None;
                return Ok(None);
            }
        }
        self.write_snapshot(newest.bytes, started).await.map(Some)
    }

    /// Whether the store still holds the chain `entry` is a delta on (a
    /// full entry needs none).
    fn chain_holds(&self, entry: &Journaled) -> bool {
        let Some(base) = snapshot::peek_header(&entry.bytes)
            .ok()
            .and_then(|header| header.base)
        else {
            return true;
        };
        self.open_chain_at(base.seq)
            .is_ok_and(|chain| chain.head_crc32c() == base.crc32c)
    }

    /// The actor's journal entries no longer apply (it is deleted, moved
    /// away, or repaired from another source).
    pub(super) fn forget_journal(&mut self) {
        self.journaled = None;
        self.gate = None;
        if let Some(journal) = &self.journal {
            journal.forget(&self.name, self.epoch);
        }
    }
}
