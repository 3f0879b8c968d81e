//! The journal path of an actor task (durability levels `request` and
//! `store`): after a delivery, the state it produced is captured and
//! appended to the worker journal ([`crate::journaled`], which owns the
//! actor's [`DurableState`](crate::journaled::DurableState)); the newest
//! entry is *sealed* into the store when it grows, before every snapshot
//! and when the journal asks.

use std::sync::Arc;
use std::time::Instant;

use stasis_core::journal::{Durable, EntryKind, patch};
use stasis_core::snapshot;
use stasis_core::snapshot::delta::MIN_DELTA_ROOT_PAGES;

use super::ActorTask;
use super::capture::{For, Kind};
use crate::journaled::{Journaled, Log, PATCHES_PER_ENTRY, SEAL_BYTES, Then};
use stasis_contract::error::ApiError;
use stasis_contract::settings::Durability;
use stasis_contract::status::SnapshotReport;

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
        if !level || !self.ctx.store.supports_deltas() {
            return None;
        }
        match self.ctx.journal.get()? {
            Log::Local(_) if self.ctx.replicator.is_some() => None,
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
        self.ctx.store.check_fence(&self.name)?;
        // On the actor's task itself: a delta of a few pages takes tens of
        // microseconds, less than a hop to a blocking thread.
        let (bytes, kind) = self.capture_live(For::Entry)?;
        let same = match &self.kept.durable.journaled {
            Some(newest) => snapshot::same_state(&newest.bytes, &bytes),
            None => kind == (Kind::Delta { unchanged: true }),
        };
        // The newest entry's round was lost (the store did not take it):
        // an answer showing its state waits for the entry to ship again.
        let lost = self.kept.durable.journaled.is_some()
            && self
                .kept
                .durable
                .gate
                .as_ref()
                .is_some_and(|gate| matches!(gate.outcome(), Some(Err(_))));
        if same && !lost {
            return Ok(self
                .kept
                .durable
                .gate
                .clone()
                .filter(|gate| !gate.is_durable()));
        }
        let seq = self.kept.durable.next_seq;
        let bytes = Arc::new(bytes);
        // A patch of the previous entry when it is one of the same
        // snapshot, with a whole entry every PATCHES_PER_ENTRY records so
        // the journal's pin on old segments moves on.
        let patch = self
            .kept
            .durable
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
            .append(kind, self.kept.epoch, seq, &self.name, &record)
            .map_err(|e| ApiError::unavailable(e.to_string()))?;
        self.ctx.metrics.journaled(record.len());
        let big = bytes.len() > SEAL_BYTES;
        self.kept.durable.journaled = Some(Journaled {
            seq,
            bytes,
            patches,
        });
        self.kept.durable.gate = Some(durable.clone());
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
        let Some(newest) = self.kept.durable.journaled.clone() else {
            return Ok(None);
        };
        debug_assert_eq!(newest.seq, self.kept.durable.next_seq);
        if then == Then::Capture && self.instance.is_some() {
            let small = self
                .chain
                .base
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
                self.chain.verified = None;
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
        self.kept.durable.forget();
        if let Some(journal) = self.ctx.journal.get() {
            journal.forget(&self.name, self.kept.epoch);
        }
    }
}
