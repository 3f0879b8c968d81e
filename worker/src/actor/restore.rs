//! The restore path of an actor task: resume from the newest snapshot, a
//! named one or the template (a repair), reading and verifying the
//! snapshot, and deciding whether a failure leaves the actor `failed` or
//! just busy.

use std::time::Instant;

use stasis_core::instance::{ActorInstance, CallError};
use stasis_core::snapshot::{self, DeltaBase, VerifiedChain};
use stasis_core::snapshot_store::{
    ChainError, SnapshotBytes, StoreError, open_chain_over, remove_corrupt,
};

use tokio::sync::OwnedSemaphorePermit;

use super::ActorTask;
use stasis_contract::error::ApiError;
use stasis_contract::status::{ActorState, ResumeFrom, ms};

impl ActorTask {
    /// Restores the actor from `from` into a fresh instance (a repair when
    /// it runs: the new instance is built next to the old one, which keeps
    /// running if the repair fails); the state becomes `running`, or
    /// `failed` with the reason when `from` cannot give a working instance.
    ///
    /// # Errors
    /// 409 repair of a running actor with `--max-live` 1; 503 no live
    /// instance now, or the restore failed (with the reason).
    pub(super) async fn resume(&mut self, from: ResumeFrom) -> Result<(), ApiError> {
        self.take_slot().await?;
        // A repair of a running actor builds the new instance next to the
        // old one (which keeps running if the repair fails): a second slot.
        let second_slot = match (&self.ctx.live, &self.instance, from) {
            (Some(live), Some(_), ResumeFrom::Snapshot(_) | ResumeFrom::Template) => {
                if live.max() == 1 {
                    return Err(ApiError::conflict(format!(
                        "actor {} is running and --max-live is 1: resuming it from a snapshot or \
                         the template needs a second live instance; pause it first",
                        self.name
                    )));
                }
                Some(live.acquire(&self.name).await?)
            }
            _ => None,
        };
        // Timed from here: the wait for a slot is not part of the resume.
        let started = Instant::now();
        if let Some(live) = &self.instance {
            self.kept.clock.replaced(live.clock_ns());
        }
        self.set_state(ActorState::Resuming);
        let result = match from {
            ResumeFrom::Template => self.fresh_from_template().await.map(|i| (i, None)),
            ResumeFrom::Newest => match self.newest_seq() {
                Some(seq) => self.restore(seq, true).await,
                None => Err(Unrestorable::Broken(format!(
                    "actor {} has no snapshot",
                    self.name
                ))),
            },
            ResumeFrom::Snapshot(seq) => self.restore(seq, false).await,
        };
        match result {
            Ok((instance, base)) => {
                self.resumed(from, instance, base, second_slot, started)
                    .await
            }
            Err(unrestorable) => Err(self.not_resumed(unrestorable)),
        }
    }

    /// After [`ActorTask::resume`] restored `instance` (with its chain's
    /// `base`): it is the actor's instance now, counted and logged; a
    /// repair (`from` other than the newest) also removes corrupt
    /// snapshots and writes the repaired state as the newest snapshot.
    async fn resumed(
        &mut self,
        from: ResumeFrom,
        instance: ActorInstance,
        base: Option<DeltaBase>,
        second_slot: Option<OwnedSemaphorePermit>,
        started: Instant,
    ) -> Result<(), ApiError> {
        let memory_bytes = instance.memory_bytes();
        self.instance = Some(instance);
        // `on_resume` ran on the tape: the next entry holds it.
        self.chain.resumed = self.logical_journal();
        self.chain.unjournaled = false;
        // A repair's snapshot below is full: it starts a new chain.
        // A journal entry is no base until it is in the store.
        let entry = self
            .kept
            .durable
            .journaled
            .as_ref()
            .map(|newest| newest.seq);
        self.chain.base = base
            .filter(|_| from == ResumeFrom::Newest)
            .filter(|base| Some(base.seq) != entry);
        if second_slot.is_some() {
            // The old instance is gone: keep one slot.
            self.slot = second_slot;
        }
        let elapsed = started.elapsed();
        self.ctx
            .metrics
            .resume_seconds
            .observe(elapsed.as_secs_f64());
        self.ctx.metrics.resumed(&self.ctx.worker, &self.name);
        {
            let mut status = self.status();
            status.state = ActorState::Running;
            status.resumes += 1;
            status.last_resume_ms = Some(ms(elapsed));
            status.last_resume_at_unix_ms = stasis_contract::status::now_unix_ms();
            status.last_active = Some(Instant::now());
            status.memory_bytes = memory_bytes;
            if from != ResumeFrom::Newest {
                status.error = None;
                status.error_at_unix_ms = None;
            }
        }
        self.log.event(&match from {
            ResumeFrom::Newest => format!("resumed in {:.1} ms", ms(elapsed)),
            ResumeFrom::Snapshot(seq) => format!("resumed from snapshot {seq}"),
            ResumeFrom::Template => "resumed from the template".to_owned(),
        });
        if from == ResumeFrom::Template {
            // A fresh instance applied no request.
            self.kept.idem.restored(&[], Vec::new(), 0);
            self.kept.idem.changed = true;
        }
        if from != ResumeFrom::Newest {
            // Make the repaired state the newest snapshot, so a later
            // rollback does not land on the bad one again; corrupt
            // snapshots go first, so retention keeps good ones.
            self.remove_corrupt_snapshots(from).await;
            // The journal's entries are of the state left behind.
            self.forget_journal();
            self.snapshot(started).await?;
        }
        Ok(())
    }

    /// After [`ActorTask::resume`] could not restore: what the actor is
    /// left as (unchanged when busy or unfenced, running when a repair of
    /// a live actor failed, else `failed` with the reason), and the answer.
    fn not_resumed(&mut self, unrestorable: Unrestorable) -> ApiError {
        let unchanged = if self.instance.is_some() {
            ActorState::Running
        } else {
            ActorState::Paused
        };
        match unrestorable {
            Unrestorable::Busy(e) => {
                // Out of instance capacity for now: nothing is wrong with
                // the actor, which stays as it was.
                self.set_state(unchanged);
                ApiError::unavailable(format!(
                    "actor {} cannot get a live instance now: {e}",
                    self.name
                ))
            }
            Unrestorable::Unfenced(e) => {
                self.set_state(unchanged);
                e
            }
            Unrestorable::Broken(reason) if self.instance.is_some() => {
                // A repair attempt on a live actor failed: it keeps running
                // as it was.
                self.set_state(ActorState::Running);
                ApiError::failed(format!(
                    "actor {} keeps running; resume failed: {reason}",
                    self.name
                ))
            }
            Unrestorable::Broken(reason) => {
                tracing::error!(actor = %self.name, "resume failed: {reason}");
                let mut status = self.status();
                status.state = ActorState::Failed;
                status.set_error(reason.clone());
                ApiError::failed(format!("actor {} failed: {reason}", self.name))
            }
        }
    }

    /// Deletes, for a repair from `from`, every snapshot but the repair's
    /// source that does not verify (known corrupt), so retention keeps the
    /// source and good snapshots instead (docs/operations.md, "Retention
    /// and repairs"). Failures are logged: the repair itself succeeded.
    async fn remove_corrupt_snapshots(&mut self, from: ResumeFrom) {
        let source = match from {
            ResumeFrom::Snapshot(seq) => Some(seq),
            ResumeFrom::Template | ResumeFrom::Newest => None,
        };
        let (store, actor) = (self.ctx.store.clone(), self.name.clone());
        let (template, max_memory) = (
            self.kept.template.clone(),
            self.ctx.engine.limits().max_memory,
        );
        let removed = tokio::task::spawn_blocking(move || {
            remove_corrupt(store.as_ref(), &actor, &template, max_memory, source)
        })
        .await;
        match removed {
            Ok(Ok(removed)) => {
                for (seq, problem) in removed {
                    tracing::warn!(actor = %self.name, seq, "repair deleted corrupt snapshot: {problem}");
                }
            }
            Ok(Err(e)) => tracing::warn!(actor = %self.name, "removing corrupt snapshots: {e}"),
            Err(e) => tracing::warn!(actor = %self.name, "removing corrupt snapshots: {e}"),
        }
    }

    /// The newest snapshot this actor acknowledged. Known in memory from
    /// the write (or from the folder and its acknowledgement marker when
    /// the actor was adopted), so a newest file deleted behind the actor's
    /// back makes the resume fail instead of silently rolling back.
    pub(super) fn newest_seq(&self) -> Option<u64> {
        // A journal entry not yet in the store is newer than any snapshot.
        if let Some(newest) = &self.kept.durable.journaled {
            return Some(newest.seq);
        }
        let known = self.status().snapshot.map(|s| s.seq).or_else(|| {
            self.ctx
                .store
                .list(&self.name)
                .ok()
                .and_then(|list| list.last().map(|e| e.seq))
        });
        // An acknowledged snapshot missing from the folder at adoption left
        // `next_seq` past every file there: a plain resume names it (and
        // fails) instead of rolling back to an older file.
        known.max(self.kept.durable.next_seq.checked_sub(1))
    }

    /// Restores snapshot `seq` (with its chain, for a delta), replays the
    /// logical journal's deliveries after it when `replay` and it is the
    /// newest ([`ActorTask::replay_since`]), and runs `on_resume` (its
    /// host values recorded for the next entry); returns the instance and
    /// the base its next delta can be taken against.
    async fn restore(
        &mut self,
        seq: u64,
        replay: bool,
    ) -> Result<(ActorInstance, Option<DeltaBase>), Unrestorable> {
        let broken = |what: &str, e: &dyn std::fmt::Display| {
            Unrestorable::Broken(format!("{what} {seq}: {e}"))
        };
        if !self.kept.adopted {
            self.adopt(seq)?;
        }
        self.kept.clock.load(self.ctx.store.as_ref(), &self.name);
        let chain = match self.kept.primed.take() {
            Some((primed, chain)) if primed == seq => chain,
            _ => self.open_verified(seq)?,
        };
        let restored = snapshot::restore_chain(
            &self.ctx.engine,
            self.kept.template.clone(),
            self.config(),
            &chain,
        )
        .await;
        let mut instance = match restored {
            Ok(instance) => instance,
            Err(snapshot::RestoreError::Call(e @ CallError::Capacity(_))) => {
                return Err(Unrestorable::Busy(e.to_string()));
            }
            Err(e) => return Err(broken("restoring snapshot", &e)),
        };
        let base = DeltaBase::new(
            chain.head_seq(),
            chain.head_crc32c(),
            chain.head(),
            chain.root_pages(),
        );
        // The idempotency table of the state restored: the head's.
        let table = chain
            .links()
            .last()
            .map(|(_, head)| snapshot::host_state(head.bytes(), head.header()).to_vec())
            .unwrap_or_default();
        drop(chain);
        let mut replayed = Vec::new();
        if replay && seq + 1 == self.kept.durable.next_seq {
            match self.replay_since(&mut instance).await {
                Ok(keyed) => replayed = keyed,
                Err(why) => {
                    self.ctx.metrics.journal_replay_failures.inc();
                    return Err(Unrestorable::Broken(why));
                }
            }
        }
        if self.logical_journal() {
            instance.tape().record();
        }
        instance.on_resume().await.map_err(|e| match e {
            CallError::Capacity(_) => Unrestorable::Busy(e.to_string()),
            _ => broken("on_resume hook after snapshot", &e),
        })?;
        self.status().memory_bytes = instance.memory_bytes();
        self.kept
            .idem
            .restored(&table, replayed, crate::idempotency::now_ms());
        Ok((instance, Some(base)))
    }

    /// Puts up this placement's fence in the store before the actor runs
    /// from snapshot `seq` ([`SnapshotStore::adopt`]): from then on, what
    /// an earlier owner woken after its lease writes is never the actor's
    /// state.
    ///
    /// [`SnapshotStore::adopt`]: stasis_core::snapshot_store::SnapshotStore::adopt
    fn adopt(&mut self, seq: u64) -> Result<(), Unrestorable> {
        let epoch = self.kept.epoch;
        // Held from the fence's listing on (`SnapshotStore::hold`): the
        // next opens of this placement need no store round trip.
        self.ctx.store.hold(&self.name, epoch);
        // In place (a no-op for a store of one process, one small listing
        // and PUT for the object store), like the restore's other store
        // calls: no blocking-pool round trip on every first resume.
        let adopted =
            crate::blocking::off_the_executor(|| self.ctx.store.adopt(&self.name, seq, epoch));
        match adopted {
            Ok(()) => {
                self.kept.adopted = true;
                Ok(())
            }
            Err(e @ StoreError::Fenced { .. }) => Err(Unrestorable::Unfenced(e.into())),
            Err(e) => {
                tracing::warn!(actor = %self.name, epoch, "fencing off earlier owners: {}", e.detail());
                Err(Unrestorable::Unfenced(ApiError::unavailable(format!(
                    "actor {} cannot run until its earlier owners are fenced off in the store: \
                     {e}",
                    self.name
                ))))
            }
        }
    }

    /// Reads snapshot `seq` (and, for a delta, its chain) from the store
    /// and verifies it against the template.
    fn open_verified(&self, seq: u64) -> Result<VerifiedChain<SnapshotBytes>, Unrestorable> {
        let max_memory = self.ctx.engine.limits().max_memory;
        let entry = self
            .kept
            .durable
            .journaled
            .as_ref()
            .filter(|newest| newest.seq == seq)
            .map(|newest| (newest.seq, newest.bytes.as_slice()));
        open_chain_over(
            self.ctx.store.as_ref(),
            &self.name,
            seq,
            &self.kept.template,
            max_memory,
            entry,
        )
        .map_err(|e| {
            if let Some(store) = e.store_error() {
                tracing::warn!(actor = %self.name, "opening snapshot {seq}: {}", store.detail());
            }
            unrestorable(seq, &e)
        })
    }

    async fn fresh_from_template(&mut self) -> Result<ActorInstance, Unrestorable> {
        match ActorInstance::spawn(&self.ctx.engine, self.kept.template.clone(), self.config())
            .await
        {
            Ok(instance) => Ok(instance),
            Err(e @ CallError::Capacity(_)) => Err(Unrestorable::Busy(e.to_string())),
            Err(e) => Err(Unrestorable::Broken(format!(
                "creating a fresh instance: {e}"
            ))),
        }
    }
}

/// What a [`ChainError`] for snapshot `seq` makes of a resume: a missing
/// acknowledged snapshot or a broken one fails the actor; a file that
/// cannot be mapped for want of mappings or memory is the host being full.
fn unrestorable(seq: u64, e: &ChainError) -> Unrestorable {
    let out_of_memory = matches!(e.store_error(), Some(StoreError::Io { source, .. })
        if source.raw_os_error() == Some(libc::ENOMEM));
    if out_of_memory {
        Unrestorable::Busy(e.to_string())
    } else if let Some(store) = e.store_error().filter(|_| e.is_missing()) {
        Unrestorable::Broken(format!(
            "snapshot {seq} was acknowledged but is missing: {store}"
        ))
    } else {
        Unrestorable::Broken(e.to_string())
    }
}

/// Why a resume did not produce an instance.
enum Unrestorable {
    /// The snapshot (or template) cannot give a working instance: the actor
    /// becomes `failed` with this reason.
    Broken(String),
    /// No instance can be allocated right now (503); the actor is unharmed.
    Busy(String),
    /// The worker may not run the actor now (it lost its lease, or the
    /// store did not take the adoption fence); the actor is unharmed.
    Unfenced(ApiError),
}
