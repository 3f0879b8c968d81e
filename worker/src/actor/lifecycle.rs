//! An actor task's lifecycle steps: create (the first instance and
//! snapshot 0, or a hand-over's new version), pause (the snapshot, then no
//! instance) and capture for a move.

use std::time::Instant;

use stasis_core::instance::ActorInstance;

use super::ActorTask;
use super::hand_over::refused;
use crate::journaled::Log;
use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::status::{ActorState, Captured, SnapshotReport, ms};

impl ActorTask {
    /// Creates the first instance and snapshot seq 0 (a journal entry at
    /// level `request` with a journal, else a file). The actor is left
    /// `running`, or `paused` on a worker whose `--max-live` slots are full
    /// (see [`LiveSlots::acquire_for_creation`]).
    pub(crate) async fn create(&mut self) -> Result<SnapshotReport, ApiError> {
        self.create_with(None).await
    }

    /// A create answered as failed after [`ActorTask::create`] made the
    /// instance (its tombstone was not shipped): the instance and its
    /// `--max-live` slot go, as when the create itself fails.
    pub(crate) fn undo_create(&mut self) {
        self.instance = None;
        self.sync_live(false);
    }

    /// [`ActorTask::create`]; with `state`, the new instance is given it
    /// (`stasis_load_state`, a hand-over from another version) before its
    /// snapshot, which is then a file even at level `request`.
    pub(crate) async fn create_with(
        &mut self,
        state: Option<&[u8]>,
    ) -> Result<SnapshotReport, ApiError> {
        let started = Instant::now();
        if state.is_none() {
            self.kept.clock.fresh();
        }
        let keep = match &self.ctx.live {
            None => true,
            Some(live) => {
                let (slot, keep) = live.acquire_for_creation(&self.name).await?;
                if keep {
                    live.insert(&self.name);
                }
                self.slot = Some(slot);
                keep
            }
        };
        let spawned =
            ActorInstance::spawn(&self.ctx.engine, self.kept.template.clone(), self.config())
                .await
                .map_err(|e| match state {
                    // A hand-over: the new version failed its side (422).
                    Some(_) => refused("starting the new version", &e),
                    None => ApiError::call(&e, format!("creating the actor: {e}")),
                });
        let instance = match spawned {
            Ok(instance) => instance,
            Err(e) => {
                self.sync_live(false);
                return Err(e);
            }
        };
        self.instance = Some(instance);
        if let Some(state) = state
            && let Err(e) = self.load_state(state).await
        {
            self.instance = None;
            self.sync_live(false);
            return Err(e);
        }
        let spawned_at = started.elapsed();
        let captured = crate::blocking::off_the_executor(|| self.capture_live());
        let captured_at = started.elapsed();
        if !keep {
            // A borrowed slot is given back before the write. Snapshot 0
            // holds the clock's reading; a lease the guest's init took
            // (it read the clock) is settled to it, as by a pause.
            self.drop_instance(true);
            self.sync_live(false);
        }
        // At level `request` with a journal, snapshot 0 is a journal entry
        // (creates share group commits), written to the store later like
        // any entry (`capture::journal_create`).
        let written = match (captured, self.journal_on()) {
            // (A cluster worker's store is shared: snapshot 0 goes there.)
            (Ok((bytes, _)), Some(Log::Local(journal))) if state.is_none() => {
                self.journal_create(&journal, bytes, started).await
            }
            (Ok((bytes, _)), _) => self.write_snapshot(bytes, started).await,
            (Err(e), _) => Err(e),
        };
        if !keep {
            // No delta base without an instance (the restore sets it).
            self.chain.base = None;
        }
        let report = match written {
            Ok(report) => report,
            Err(e) => {
                self.instance = None;
                self.sync_live(false);
                return Err(e);
            }
        };
        {
            let mut status = self.status();
            status.state = if keep {
                ActorState::Running
            } else {
                ActorState::Paused
            };
            status.memory_bytes = self
                .instance
                .as_ref()
                .map_or(0, ActorInstance::memory_bytes);
        }
        self.sync_live(true);
        tracing::debug!(
            target: "stasis_worker::timing",
            actor = %self.name,
            spawn_ms = stasis_contract::status::ms(spawned_at),
            capture_ms = stasis_contract::status::ms(captured_at - spawned_at),
            write_ms = stasis_contract::status::ms(started.elapsed() - captured_at),
            "create timed"
        );
        let what = if state.is_some() {
            "upgraded (state handed over)"
        } else {
            "created"
        };
        self.log.event(&format!("{what}: snapshot {}", report.seq));
        Ok(report)
    }

    pub(super) async fn pause(&mut self) -> Result<SnapshotReport, ApiError> {
        let started = Instant::now();
        if self.instance.is_none() {
            if let Some(reason) = self.failed_reason() {
                return Err(ApiError::new(
                    ErrorKind::Conflict,
                    format!("actor {} failed: {reason}", self.name),
                ));
            }
            let newest = self.status().snapshot;
            return Ok(SnapshotReport {
                seq: newest.map_or(0, |s| s.seq),
                snapshot_bytes: newest.map_or(0, |s| s.bytes),
                bytes_written: 0,
                duration_ms: 0.0,
                changed: false,
            });
        }
        self.set_state(ActorState::Pausing);
        // `on_pause` runs on the tape: the snapshot below holds what it
        // did, or (when that fails) the next journal entry does.
        let logical = self.logical_journal();
        let hook = match self.instance.as_mut() {
            Some(instance) => {
                if logical {
                    instance.tape().ensure_recording();
                }
                instance.on_pause().await
            }
            None => Ok(()),
        };
        if logical {
            self.chain.paused = self.chain.paused.saturating_add(1);
            // More than an entry can count: a snapshot comes first.
            self.chain.unjournaled |= self.chain.paused > 127;
        }
        if let Err(e) = hook {
            let answer = self.after_failed_call(e).await;
            let message = format!("on_pause hook failed: {}", answer.message());
            return Err(answer.with_message(message));
        }
        match self.snapshot_if_changed(started).await {
            Ok(mut report) => {
                self.drop_instance(true);
                report.duration_ms = ms(started.elapsed());
                self.ctx
                    .metrics
                    .pause_seconds
                    .observe(started.elapsed().as_secs_f64());
                let mut status = self.status();
                status.state = ActorState::Paused;
                status.last_pause_ms = Some(report.duration_ms);
                status.last_pause_at_unix_ms = stasis_contract::status::now_unix_ms();
                status.memory_bytes = 0;
                drop(status);
                self.log.event(&format!("paused: snapshot {}", report.seq));
                Ok(report)
            }
            Err(e) => {
                // A capture that found its mapped files changed failed
                // the actor (`fail_mapped`): it stays failed.
                if self.instance.is_some() {
                    self.set_state(ActorState::Running);
                }
                Err(e)
            }
        }
    }

    /// Captures the actor for a move. A live instance is snapshotted (and
    /// kept, in case the move rolls back); a paused actor hands over its
    /// newest snapshot as it is.
    pub(super) async fn capture(&mut self) -> Result<Captured, ApiError> {
        if let Some(reason) = self.failed_reason() {
            return Err(ApiError::conflict(format!(
                "actor {} failed: {reason}",
                self.name
            )));
        }
        let live = self.instance.is_some();
        if let Some(now_ns) = self.instance.as_ref().map(ActorInstance::clock_ns) {
            self.kept
                .clock
                .settle(self.ctx.store.as_ref(), &self.name, now_ns);
        }
        let seq = if live {
            self.snapshot(Instant::now()).await?.seq
        } else if self.kept.durable.unsnapshotted() {
            // The target installs from the store.
            self.seal_parked(Instant::now()).await?.seq
        } else {
            self.newest_seq()
                .ok_or_else(|| ApiError::internal(format!("actor {} has no snapshot", self.name)))?
        };
        self.set_state(ActorState::Migrating);
        self.log
            .event(&format!("captured for a move: snapshot {seq}"));
        Ok(Captured { seq, live })
    }
}
