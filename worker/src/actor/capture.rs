//! The snapshot-writing path of an actor task: capture the live instance
//! as a delta on its chain ([`stasis_core::snapshot::capture_delta`]) or
//! in full, skip the write when a pause finds nothing changed, write the
//! snapshot durably (and through the replicator), then retention.

use std::sync::Arc;
use std::time::Instant;

use stasis_core::snapshot::delta::MIN_DELTA_ROOT_PAGES;
use stasis_core::snapshot::{self, ChainPages, DeltaBase, FullInstead, VerifiedChain};
use stasis_core::snapshot_store::{
    ChainError, SnapshotBytes, SnapshotEntry, StoreError, open_chain,
};

use stasis_core::journal::{EntryKind, Journal};

use super::ActorTask;
use crate::journaled::{Journaled, Then};
use stasis_contract::error::ApiError;
use stasis_contract::status::SnapshotReport;
use stasis_contract::status::ms;

impl ActorTask {
    /// Captures the live instance and writes the next snapshot durably
    /// (a delta when [`ActorTask::capture_live`] can take one), then
    /// applies retention. The instance is kept.
    /// With a journal entry newer than the store's snapshots, that entry
    /// is the instance's state (no guest code ran since it was taken): it
    /// is written as the snapshot instead ([`ActorTask::seal`]).
    pub(super) async fn snapshot(&mut self, started: Instant) -> Result<SnapshotReport, ApiError> {
        if let Some(report) = self.seal(started, Then::Capture).await? {
            return Ok(report);
        }
        let (bytes, _) = crate::blocking::off_the_executor(|| self.capture_live())?;
        self.write_snapshot(bytes, started).await
    }

    /// Like [`ActorTask::snapshot`] for a pause: when the instance holds
    /// exactly the newest snapshot's state (it has not changed since, e.g.
    /// an actor resumed and paused again by `--max-live` without a request
    /// in between), nothing is written and the newest snapshot is reported.
    /// A checkpoint always writes: it is asked for a new snapshot.
    pub(super) async fn snapshot_if_changed(
        &mut self,
        started: Instant,
    ) -> Result<SnapshotReport, ApiError> {
        // A journal entry goes to the store first, so the capture below
        // (of what `on_pause` changed, if anything) is a delta on it.
        let sealed = self.seal(started, Then::Capture).await?;
        let (bytes, kind) = crate::blocking::off_the_executor(|| self.capture_live())?;
        // A changed idempotency table is a change (a keyed request that
        // changed no memory must still be remembered by a snapshot).
        let unchanged = !self.kept.idem.changed
            && match kind {
                Kind::Delta { unchanged } => unchanged,
                Kind::Full => self.status().snapshot.is_some_and(|newest| {
                    self.ctx
                        .store
                        .open_snapshot(&self.name, newest.seq)
                        .is_ok_and(|map| snapshot::same_state(&map, &bytes))
                }),
            };
        if unchanged {
            // The newest snapshot holds the deliveries since (they changed
            // nothing): the journal need not keep them.
            self.kept.durable.covered();
            if let Some(journal) = self.ctx.journal.get() {
                journal.settled(&self.name, self.kept.epoch);
            }
        }
        match (unchanged, sealed) {
            (true, Some(sealed)) => Ok(sealed),
            (true, None) => Ok(self.newest_unchanged(started)),
            (false, sealed) => {
                let mut report = self.write_snapshot(bytes, started).await?;
                report.bytes_written += sealed.map_or(0, |s| s.bytes_written);
                Ok(report)
            }
        }
    }

    /// The report of a snapshot that wrote nothing: the newest one holds
    /// the instance's state already.
    fn newest_unchanged(&self, started: Instant) -> SnapshotReport {
        let newest = self.status().snapshot;
        SnapshotReport {
            seq: newest.map_or(0, |s| s.seq),
            snapshot_bytes: newest.map_or(0, |s| s.bytes),
            bytes_written: 0,
            duration_ms: ms(started.elapsed()),
            changed: true,
        }
    }

    /// Captures the live instance: a delta on [`ActorTask::delta_base`]
    /// when there is one and it is the newest snapshot, the store keeps
    /// chains, and no replicator needs self-contained files; otherwise (or
    /// when [`snapshot::capture_delta`] says a full snapshot is due) a full
    /// snapshot. Also says which it took.
    /// An instance whose mapped snapshot files changed is failed instead
    /// ([`ActorTask::fail_mapped`]), and nothing it captured is returned.
    /// The actor's idempotency table goes into the file as its
    /// host-state section ([`crate::idempotency`]).
    pub(super) fn capture_live(&mut self) -> Result<(Vec<u8>, Kind), ApiError> {
        let captured = self.capture_live_unchecked();
        let (mut bytes, kind) = match self.instance.as_ref().map(|i| i.mapped_intact()) {
            Some(Err(reason)) => return Err(self.fail_mapped(&reason)),
            _ => captured?,
        };
        self.kept.idem.expire(crate::idempotency::now_ms());
        let table = self.kept.idem.encode();
        if !table.is_empty() {
            let header = snapshot::peek_header(&bytes)
                .map_err(|e| ApiError::internal(format!("the snapshot just captured: {e}")))?;
            snapshot::append_host_state(&mut bytes, &header, &table);
        }
        Ok((bytes, kind))
    }

    fn capture_live_unchecked(&mut self) -> Result<(Vec<u8>, Kind), ApiError> {
        let newest = self.kept.durable.next_seq.checked_sub(1);
        let base = self
            .chain
            .base
            .as_ref()
            .filter(|base| Some(base.seq) == newest)
            .filter(|_| self.ctx.replicator.is_none() && self.ctx.store.supports_deltas());
        // The base's chain, verified (no checksum pass for files the store
        // wrote or checked): a delta is only taken on a chain that
        // restores, and leaves out pages that hold what it holds (those a
        // restore copied in count as dirty). A chain damaged or replaced
        // since gives a full snapshot: the live instance holds the state.
        let chain = base.and_then(|base| {
            self.open_chain_at(base.seq)
                .map_err(|e| e.to_string())
                .and_then(|chain| {
                    if chain.head_crc32c() == base.crc32c {
                        Ok((base, chain))
                    } else {
                        Err(format!("snapshot {} was replaced", base.seq))
                    }
                })
                .inspect_err(|e| {
                    tracing::warn!(
                        actor = %self.name,
                        "full snapshot instead of a delta: the base chain cannot be used: {e}"
                    );
                })
                .ok()
        });
        let instance = self
            .instance
            .as_mut()
            .ok_or_else(|| ApiError::internal("no instance"))?;
        let internal = |e: snapshot::SnapshotError| ApiError::internal(e.to_string());
        if let Some((base, chain)) = &chain {
            let pages = ChainPages::of(chain);
            let mut bytes = Vec::new();
            let delta = snapshot::capture_delta(instance, base, Some(&pages), &mut bytes)
                .map_err(internal)?;
            // A chain file changed while compared with: no delta on it.
            let delta = delta.and_then(|d| match chain.intact() {
                Ok(()) => Ok(d),
                Err(e) => {
                    tracing::warn!(actor = %self.name, "full snapshot instead of a delta: {e}");
                    Err(FullInstead::Mismatch)
                }
            });
            match delta {
                Ok(delta) => {
                    tracing::debug!(
                        actor = %self.name,
                        base = base.seq,
                        dirty_pages = delta.dirty_pages,
                        stored_pages = delta.stats.stored_pages,
                        file_bytes = delta.stats.file_bytes,
                        "delta captured"
                    );
                    return Ok((
                        bytes,
                        Kind::Delta {
                            unchanged: delta.unchanged,
                        },
                    ));
                }
                Err(FullInstead::NoDirtyTracking(why)) => {
                    tracing::debug!(actor = %self.name, "full snapshot: no dirty tracking: {why}");
                }
                Err(FullInstead::ChainFull) => {
                    // Compacted by merging the chain's deltas into one on
                    // its root; a full snapshot only past half the root.
                    if let Ok(merged) = snapshot::capture_merged(instance, base, chain, &mut bytes)
                        .map_err(internal)?
                    {
                        tracing::debug!(
                            actor = %self.name,
                            stored_pages = merged.stats.stored_pages,
                            "chain full: its deltas merged into one"
                        );
                        return Ok((
                            bytes,
                            Kind::Delta {
                                unchanged: merged.unchanged,
                            },
                        ));
                    }
                }
                Err(_) => {}
            }
        }
        snapshot::capture(instance)
            .map(|(bytes, _)| (bytes, Kind::Full))
            .map_err(internal)
    }

    /// After full snapshot `seq` was written from the live instance: maps
    /// its runs copy-on-write over the memory where they hold what it
    /// holds ([`snapshot::map_written_snapshot`]), so the next deltas (a
    /// journal entry per request) compare only the pages written since
    /// with the chain. Without it an actor never restored since its create
    /// reports every page it ever wrote as dirty: a 110 MiB `kv` actor
    /// paid 28 ms per request at level `request` (BENCHMARKS.md, section
    /// 18). Best effort: on any failure the memory stays as it is.
    fn map_written(&mut self, seq: u64) {
        let Some(instance) = self.instance.as_ref() else {
            return;
        };
        if instance.mapped_intact().is_err() {
            return;
        }
        let chain = match self.open_chain_at(seq) {
            Ok(chain) => chain,
            Err(e) => {
                tracing::debug!(actor = %self.name, seq, "not mapping the snapshot written: {e}");
                return;
            }
        };
        let Some((_, written)) = chain.links().last() else {
            return;
        };
        let engine = self.ctx.engine.clone();
        if let Some(instance) = self.instance.as_mut() {
            let mapped = snapshot::map_written_snapshot(&engine, instance, written);
            tracing::debug!(actor = %self.name, seq, mapped, "snapshot mapped over the live memory");
        }
    }

    /// Snapshot `seq` of this actor with its chain, from the store,
    /// verified against the template.
    pub(super) fn open_chain_at(
        &self,
        seq: u64,
    ) -> Result<VerifiedChain<SnapshotBytes>, ChainError> {
        let max_memory = self.ctx.engine.limits().max_memory;
        open_chain(
            self.ctx.store.as_ref(),
            &self.name,
            seq,
            &self.kept.template,
            max_memory,
        )
    }

    /// A new actor's snapshot 0 (`bytes`) as a journal entry instead of a
    /// file: appended, and reported once the group commit that holds it
    /// is durable, so concurrent creates share one `fdatasync` (and no
    /// folder, file or `syncfs` round is made for it now). It is the
    /// actor's journal entry from then on: written to the store
    /// ([`ActorTask::seal`]) before the actor's first request runs, before
    /// a pause, checkpoint or move, when the journal asks (its segment is
    /// old), and by the start-up replay after a crash.
    ///
    /// # Errors
    /// 503 if the journal failed (refused the entry, or lost it before it
    /// was durable).
    pub(super) async fn journal_create(
        &mut self,
        journal: &Journal,
        bytes: Vec<u8>,
        started: Instant,
    ) -> Result<SnapshotReport, ApiError> {
        debug_assert!(self.kept.durable.next_seq == 0 && self.kept.durable.journaled.is_none());
        let seq = self.kept.durable.next_seq;
        let len = bytes.len() as u64;
        let unavailable = |e: stasis_core::journal::JournalError| {
            ApiError::unavailable(format!("creating the actor: {e}"))
        };
        let durable = journal
            .append(
                EntryKind::Snapshot,
                self.kept.epoch,
                seq,
                &self.name,
                &bytes,
            )
            .map_err(unavailable)?;
        self.ctx.metrics.journaled(bytes.len());
        durable.clone().wait().await.map_err(unavailable)?;
        self.kept.durable.journaled = Some(Journaled {
            seq,
            bytes: Arc::new(bytes),
        });
        self.kept.durable.gate = Some(durable);
        Ok(self.wrote(seq, len, true, started))
    }

    /// Writes the journal entry of an actor without an instance (paused
    /// with its newest state in the journal: a create's snapshot 0 when
    /// `--max-live` was full) to the store, and reports it.
    ///
    /// # Errors
    /// The store's (507 quota, 500 I/O): the entry stays the newest.
    pub(super) async fn seal_parked(
        &mut self,
        started: Instant,
    ) -> Result<SnapshotReport, ApiError> {
        if self.kept.durable.journaled.is_none() && !self.kept.durable.since.is_empty() {
            // Deliveries after the newest snapshot (a restart left them in
            // the journal): replayed by a resume, then captured.
            self.resume(stasis_contract::status::ResumeFrom::Newest)
                .await?;
            return self.snapshot(started).await;
        }
        let report = self.seal(started, Then::Keep).await?;
        // An entry sealed with no instance is no delta base.
        self.chain.base = None;
        report.ok_or_else(|| ApiError::internal("no journal entry to write"))
    }

    /// Writes `bytes` as the next snapshot durably (and through the
    /// replicator), then applies retention.
    pub(super) async fn write_snapshot(
        &mut self,
        bytes: impl Into<Arc<Vec<u8>>>,
        started: Instant,
    ) -> Result<SnapshotReport, ApiError> {
        let bytes: Arc<Vec<u8>> = bytes.into();
        let seq = self.kept.durable.next_seq;
        let store = self.ctx.store.clone();
        let actor = self.name.clone();
        let epoch = self.kept.epoch;
        let keep = self.settings.keep_snapshots;
        let len = bytes.len() as u64;
        let local = bytes.clone();
        let fenced = tokio::task::spawn_blocking(move || -> Result<bool, StoreError> {
            store.write(&actor, seq, epoch, &local)?;
            // Written: from here on the outcome is the snapshot's, and a
            // failed cleanup of older ones changes nothing of it. A
            // create's snapshot 0 has nothing older to clean up (the
            // create removed what the name held): no listing of the store
            // for it; the next snapshot's retention sees everything.
            if seq > 0
                && let Err(e) = store.retain(&actor, keep)
            {
                tracing::warn!(actor, seq, "retention after snapshot: {}", e.detail());
            }
            Ok(store.check_fence(&actor).is_err())
        })
        .await
        .map_err(|e| ApiError::internal(format!("snapshot writer panicked: {e}")))?
        .inspect_err(|e| {
            // The snapshot may be in the store: nothing is undone and the
            // answer says the outcome is unknown (as when unfenced).
            if matches!(e, StoreError::Unknown { .. }) {
                self.wrote_unfenced = true;
            }
        })?;
        if fenced {
            // The lease ended while the snapshot was written: it may have
            // landed before the actor was placed elsewhere (then the new
            // owner continues from it) or after (then it is stale).
            self.wrote_unfenced = true;
            return Err(ApiError::internal(format!(
                "worker {} lost its lease while writing snapshot {seq} of actor {}: the request \
                 may or may not have been applied",
                self.ctx.worker, self.name
            )));
        }
        if !self.kept.adopted {
            // The snapshot at this epoch is the placement's claim.
            self.ctx.store.hold(&self.name, self.kept.epoch);
            self.kept.adopted = true;
        }
        let next_base = DeltaBase::of_file(seq, &bytes, self.chain.base.as_ref());
        if let Some(replicator) = &self.ctx.replicator {
            replicator.replicate(&self.name, seq, bytes).await?;
        }
        self.kept.durable.wrote_snapshot();
        // Captured with the table as it is (no request ran since).
        self.kept.idem.changed = false;
        if let Some(journal) = self.ctx.journal.get() {
            journal.settled(&self.name, self.kept.epoch);
        }
        let full = next_base
            .as_ref()
            .is_some_and(|b| b.depth == 0 && b.root_pages >= MIN_DELTA_ROOT_PAGES);
        self.chain.base = next_base;
        if full && self.ctx.replicator.is_none() && self.ctx.store.supports_deltas() {
            self.map_written(seq);
        }
        Ok(self.wrote(seq, len, false, started))
    }

    /// Records snapshot `seq` of `len` bytes, just written (to the store,
    /// or to the journal: `journaled`), as the actor's newest, and reports
    /// it.
    fn wrote(&self, seq: u64, len: u64, journaled: bool, started: Instant) -> SnapshotReport {
        {
            let mut status = self.status();
            status.snapshot = Some(SnapshotEntry { seq, bytes: len });
            status.snapshot_journaled = journaled;
            status.last_snapshot_at_unix_ms = stasis_contract::status::now_unix_ms();
        }
        SnapshotReport {
            seq,
            snapshot_bytes: len,
            bytes_written: len,
            duration_ms: ms(started.elapsed()),
            changed: true,
        }
    }
}

/// What [`ActorTask::capture_live`] took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A full snapshot.
    Full,
    /// A delta on the newest snapshot; `unchanged`: no page, size or
    /// global differs from it.
    Delta {
        /// Nothing changed since the base.
        unchanged: bool,
    },
}
