//! Actors: create, fork, pause, checkpoint, resume and delete (what one
//! actor's view shows is `actor_view`'s).

use std::io;

use stasis_core::snapshot_store::StoreError;

use super::ControlPlane;
use super::membership::Member;
use super::placement::Placement;
use super::views::{ActorInfo, PauseInfo};
use stasis_contract::directory::ActorRow;
use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::labels::{LabelPatch, Labels, check_labels};
use stasis_contract::names::{check_full_name, namespace_of};
use stasis_contract::status::{ActorState, ResumeFrom, SnapshotReport, ms};

/// Checks that `other` (a `what`) is in actor `actor`'s namespace: an
/// actor is made from its own namespace's templates and actors only.
///
/// # Errors
/// 400 naming both namespaces.
fn same_namespace(actor: &str, what: &str, other: &str) -> Result<(), ApiError> {
    let (mine, theirs) = (namespace_of(actor), namespace_of(other));
    if mine == theirs {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "actor {actor} is in namespace {mine}; {what} {other} is in namespace {theirs}"
        )))
    }
}

impl ControlPlane {
    /// Creates actor `name` from `template` on the least-loaded worker.
    ///
    /// # Errors
    /// 400 bad name; 404 unknown template; 409 name taken; 503 no worker;
    /// 500/504 if the guest fails during creation.
    pub async fn create_actor(&self, name: &str, template: &str) -> Result<ActorInfo, ApiError> {
        self.create_labelled(name, template, Labels::new()).await
    }

    /// [`ControlPlane::create_actor`] of an actor labelled `labels`.
    ///
    /// # Errors
    /// As [`ControlPlane::create_actor`]; 400 for a bad label.
    pub async fn create_labelled(
        &self,
        name: &str,
        template: &str,
        labels: Labels,
    ) -> Result<ActorInfo, ApiError> {
        check_full_name("actor", name)?;
        check_labels(&labels)?;
        same_namespace(name, "template", template)?;
        // Creates run together; each holds its name in `pending` until it
        // is placed (or failed).
        let started = std::time::Instant::now();
        let decider = self.decider()?;
        let _guard = decider.ops.read().await;
        let max_actors = self.quota(namespace_of(name)).await?.max_actors;
        let _reserved = Reserved::take(self, name, max_actors)?;
        // New actors run the template's newest version.
        let row = self.newest_version(template).await?;
        let member = self.least_loaded().ok_or_else(|| {
            ApiError::unavailable("no worker can host actors (serve --workers 0 and none joined)")
        })?;
        let looked_up = started.elapsed();
        let epoch = 1;
        let created = match member.api.create(name, &Self::host_spec(&row, epoch)).await {
            Ok(created) => created,
            Err(e) => {
                let _ = self.store.remove_actor(name);
                return Err(e);
            }
        };
        let hosted = started.elapsed();
        self.record_new(name, &row.name, &member, epoch, labels)
            .await?;
        let recorded = started.elapsed();
        tracing::info!(actor = name, template, worker = %member.name, "actor created");
        let info = match created.status {
            // A new name holds only the snapshot its create wrote: the
            // worker's status shows it, no store listing needed.
            Some(status) => self.placement_of(name).map(|placement| {
                let stored = status.snapshot.into_iter().collect();
                self.actor_info_listed(name, placement, status, stored)
            }),
            None => self.actor_viewed(name, false).await,
        };
        tracing::debug!(
            target: "stasis_control::timing",
            actor = name,
            lookup_ms = ms(looked_up),
            worker_ms = ms(hosted - looked_up),
            directory_ms = ms(recorded - hosted),
            view_ms = ms(started.elapsed() - recorded),
            "create timed"
        );
        info
    }

    /// Records actor `name` of `template`, just hosted on `member` at
    /// `epoch`, in the directory and the placement table. If the directory
    /// refuses, the actor is removed from `member` and its snapshots
    /// deleted.
    ///
    /// # Errors
    /// The directory's failure.
    async fn record_new(
        &self,
        name: &str,
        template: &str,
        member: &Member,
        epoch: u64,
        labels: Labels,
    ) -> Result<(), ApiError> {
        let created_at_unix_ms = stasis_contract::status::now_unix_ms();
        let actor_row = ActorRow {
            name: name.to_owned(),
            template: template.to_owned(),
            worker: member.name.to_string(),
            epoch,
            created_at_unix_ms,
            labels,
        };
        let directory = self.directory.clone();
        // Blocking: the directory may wait for a group commit.
        let inserted = tokio::task::spawn_blocking(move || {
            directory
                .insert_actor(&actor_row)
                .map(|()| actor_row.labels)
        })
        .await
        .map_err(ApiError::internal)
        .and_then(|r| r);
        let labels = match inserted {
            Ok(labels) => labels,
            Err(e) => {
                member.api.remove(name).await;
                let _ = self.store.remove_actor(name);
                return Err(e);
            }
        };
        self.placements.place(
            name,
            Placement::new(member.name.clone(), member.incarnation, template, epoch)
                .created(created_at_unix_ms)
                .labelled(&labels),
        );
        Ok(())
    }

    /// Creates actor `new` from snapshot `from` of actor `src` (by default
    /// its newest; a running `src` is checkpointed first, through its
    /// mailbox like any checkpoint, and forked from that). `new` gets
    /// `src`'s template and the snapshot under the same sequence number,
    /// shared rather than copied ([`SnapshotStore::fork`]), and is placed
    /// `paused` on the least-loaded worker: its first request restores it.
    /// The two diverge from there; each instance draws its own host
    /// randomness (WASI `random_get` comes from the OS generator, never
    /// from the snapshot). A fork inherits no alarms; it has `src`'s
    /// labels changed by `labels`.
    ///
    /// [`SnapshotStore::fork`]: stasis_core::snapshot_store::SnapshotStore::fork
    ///
    /// # Errors
    /// 400 bad name; 404 unknown `src` or no snapshot `from`; 409 `new`
    /// exists; 503 no worker; 507 quota; 422/503 if the snapshot does not
    /// restore on the chosen worker (nothing of `new` is left).
    pub async fn fork_actor(
        &self,
        src: &str,
        new: &str,
        from: Option<u64>,
        labels: &LabelPatch,
    ) -> Result<ActorInfo, ApiError> {
        check_full_name("actor", new)?;
        same_namespace(new, "actor", src)?;
        labels.check()?;
        let max_actors = self.quota(namespace_of(new)).await?.max_actors;
        let _guard = self.decider()?.ops.write().await;
        if let Some(max) = max_actors {
            let held = self.actors_in(namespace_of(new), &self.decider()?.lock_pending());
            if held >= max {
                return Err(crate::quotas::over_actors(namespace_of(new), held, max));
            }
        }
        if self.has_actor(new) {
            return Err(ApiError::conflict(format!("actor {new} already exists")));
        }
        let placement = self.placement_of(src)?;
        let labels = labels.apply(&placement.labels)?;
        let seq = {
            // No move of `src` meanwhile.
            let _gate = placement.gate.barrier.read().await;
            self.fork_point(src, from).await?
        };
        let row = self.template_row(&placement.template)?;
        let member = self.least_loaded().ok_or_else(|| {
            ApiError::unavailable("no worker can host actors (serve --workers 0 and none joined)")
        })?;
        let epoch = 1;
        let store = self.store.clone();
        let (from_actor, to_actor) = (src.to_owned(), new.to_owned());
        let forked =
            tokio::task::spawn_blocking(move || store.fork(&from_actor, seq, &to_actor, epoch))
                .await
                .map_err(ApiError::internal)?;
        if forked.is_err() {
            // A fork that linked part of a chain before it failed (the
            // quota, or `src`'s retention deleting a file meanwhile) leaves
            // nothing of `new`: no later actor of that name adopts it.
            let _ = self.store.remove_actor(new);
        }
        forked.map_err(|e| match &e {
            StoreError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound => {
                ApiError::not_found(format!("actor {src} has no snapshot {seq} any more"))
            }
            _ => ApiError::from(e),
        })?;
        // Alarms: a fork starts with none of `src`'s (copy nothing here).
        let spec = Self::host_spec_as_is(&row, epoch);
        if let Err(e) = self.ship(&member, new, &spec, seq, false).await {
            let _ = self.store.remove_actor(new);
            return Err(e);
        }
        self.record_new(new, &placement.template, &member, epoch, labels)
            .await?;
        tracing::info!(actor = new, src, seq, worker = %member.name, "actor forked");
        self.actor(new).await
    }

    /// The snapshot of `src` a fork starts from: `from` if `src` has it;
    /// else a checkpoint taken now if `src` is running; else its newest.
    ///
    /// # Errors
    /// 404 no such snapshot (or none at all); the checkpoint's failure
    /// (507 quota, 500).
    async fn fork_point(&self, src: &str, from: Option<u64>) -> Result<u64, ApiError> {
        if let Some(seq) = from {
            if self.store.list(src)?.iter().any(|e| e.seq == seq)
                || self.write_journaled(src, seq).await?
            {
                return Ok(seq);
            }
            return Err(ApiError::not_found(format!(
                "actor {src} has no snapshot {seq}"
            )));
        }
        if let Ok(member) = self.host_of(&self.placement_of(src)?, src) {
            match member.api.checkpoint(src).await {
                Ok(report) => return Ok(report.seq),
                // Not running: its newest snapshot is its state.
                Err(e) if e.is(ErrorKind::Conflict) => {}
                Err(e) => return Err(e),
            }
        }
        self.store
            .list(src)?
            .last()
            .map(|e| e.seq)
            .ok_or_else(|| ApiError::not_found(format!("actor {src} has no snapshot")))
    }

    /// Has `name`'s worker write snapshot `seq` to the store when it is a
    /// create's snapshot 0 that the worker keeps in its journal (a
    /// checkpoint writes it, running or paused); says whether it did.
    ///
    /// # Errors
    /// The checkpoint's.
    async fn write_journaled(&self, name: &str, seq: u64) -> Result<bool, ApiError> {
        let Ok(member) = self.host_of(&self.placement_of(name)?, name) else {
            return Ok(false);
        };
        let journaled = member
            .status(name)
            .await
            .is_ok_and(|s| s.snapshot_journaled && s.snapshot.is_some_and(|s| s.seq == seq));
        if !journaled {
            return Ok(false);
        }
        let report = member.api.checkpoint(name).await?;
        Ok(report.seq == seq)
    }

    /// The answer to a pause (`paused`) or checkpoint: the actor as the
    /// operation left it, with `report`'s snapshot as its newest, even if a
    /// request woke it (or a later snapshot was taken) since.
    async fn pause_info(
        &self,
        name: &str,
        report: SnapshotReport,
        paused: bool,
    ) -> Result<PauseInfo, ApiError> {
        let mut actor = self.actor(name).await?;
        if paused {
            actor.state = ActorState::Paused;
            actor.memory_bytes = 0;
        }
        actor.snapshots.retain(|s| s.seq <= report.seq);
        actor.snapshot = Some(stasis_core::snapshot_store::SnapshotEntry {
            seq: report.seq,
            bytes: report.snapshot_bytes,
        });
        Ok(PauseInfo {
            actor,
            snapshot_bytes: report.snapshot_bytes,
            bytes_written: report.bytes_written,
            duration_ms: report.duration_ms,
        })
    }

    /// Pauses actor `name` (idempotent).
    ///
    /// # Errors
    /// 404; 409 failed; 507 quota (actor keeps running); 500.
    pub async fn pause(&self, name: &str) -> Result<PauseInfo, ApiError> {
        // One placed lazily and not adopted yet is adopted first.
        self.place_if_waiting(name).await;
        let placement = self.placement_of(name)?;
        let _gate = placement.gate.barrier.read().await;
        let report = self
            .host_of(&self.placement_of(name)?, name)?
            .api
            .pause(name)
            .await?;
        self.pause_info(name, report, true).await
    }

    /// Checkpoints running actor `name`.
    ///
    /// # Errors
    /// 404; 409 not running; 507 quota; 500.
    pub async fn checkpoint(&self, name: &str) -> Result<PauseInfo, ApiError> {
        // One placed lazily and not adopted yet is adopted first.
        self.place_if_waiting(name).await;
        let placement = self.placement_of(name)?;
        let _gate = placement.gate.barrier.read().await;
        let report = self
            .host_of(&self.placement_of(name)?, name)?
            .api
            .checkpoint(name)
            .await?;
        self.pause_info(name, report, false).await
    }

    /// Resumes actor `name` from `from`. A snapshot written by another
    /// version of its template is restored into that version (see
    /// `ControlPlane::resume_in_its_version`).
    ///
    /// # Errors
    /// 404; 400 unknown snapshot; 503 with the reason if it cannot be
    /// restored; 409/422 for a snapshot of another version that cannot be.
    pub async fn resume(&self, name: &str, from: ResumeFrom) -> Result<ActorInfo, ApiError> {
        if from == ResumeFrom::Newest {
            self.upgrade_if_deferred(name).await;
        }
        self.place_if_waiting(name).await;
        let placement = self.placement_of(name)?;
        if let ResumeFrom::Snapshot(seq) = from
            && !self.store.list(name)?.iter().any(|e| e.seq == seq)
            && !self.write_journaled(name, seq).await?
        {
            return Err(ApiError::bad_request(format!(
                "actor {name} has no snapshot {seq}"
            )));
        }
        // A snapshot of another version of the template is restored into
        // the version that wrote it (the actor changes version).
        if let ResumeFrom::Snapshot(seq) = from
            && self.resume_in_its_version(name, seq).await?.is_some()
        {
            return self.actor(name).await;
        }
        {
            let _gate = placement.gate.barrier.read().await;
            let placement = self.placement_of(name)?;
            let member = self.host_of(&placement, name)?;
            if let ResumeFrom::Snapshot(seq) = from
                && !member.is_in_process()
            {
                // A worker with a store of its own may not hold that
                // snapshot: ship it.
                let row = self.template_row(&placement.template)?;
                self.ship(
                    &member,
                    name,
                    &Self::host_spec_as_is(&row, placement.epoch),
                    seq,
                    false,
                )
                .await?;
            }
            member.api.resume(name, from).await?;
        }
        self.actor(name).await
    }

    /// Deletes actor `name` and all its snapshots.
    ///
    /// # Errors
    /// 404 if unknown; 500 if its files cannot be removed.
    pub async fn delete_actor(&self, name: &str) -> Result<(), ApiError> {
        let _guard = self.decider()?.ops.write().await;
        let gate = self.placement_of(name)?.gate;
        let _gate = gate.barrier.write().await;
        // Re-read under the gate: a move may have finished meanwhile.
        let placement = self.placement_of(name)?;
        self.placements.remove(name);
        if let Some(member) = self.member(&placement.worker) {
            member.api.remove(name).await;
        }
        // After the placement and the actor's task are gone: nothing counts
        // for it any more.
        self.metrics.forget_actor(name);
        self.directory.delete_actor(name)?;
        self.rollout_saw_delete(name, &placement.template);
        if let Ok(alarms) = self.alarms() {
            alarms.forget(name);
        }
        self.sockets()
            .close_all(name, 1001, "the actor was deleted");
        self.store.remove_actor(name)?;
        tracing::info!(actor = name, "actor deleted");
        Ok(())
    }
}

/// A name held in the control plane's `pending` set while its create
/// runs; released on drop.
struct Reserved<'a> {
    control: &'a ControlPlane,
    name: String,
}

impl<'a> Reserved<'a> {
    /// Reserves `name`, within its namespace's `max_actors` if any: the
    /// count of its placed actors and creates in flight is taken under
    /// the lock of `pending`, so concurrent creates cannot pass it.
    ///
    /// # Errors
    /// 409 if an actor or a create in flight has it; 403 at the quota.
    fn take(
        control: &'a ControlPlane,
        name: &str,
        max_actors: Option<u64>,
    ) -> Result<Self, ApiError> {
        // A name is placed only by a create holding it here, or under the
        // write side of `ops` (which no create holds then).
        let mut pending = control.decider()?.lock_pending();
        if control.has_actor(name) || pending.contains(name) {
            return Err(ApiError::conflict(format!("actor {name} already exists")));
        }
        if let Some(max) = max_actors {
            let namespace = namespace_of(name);
            let held = control.actors_in(namespace, &pending);
            if held >= max {
                return Err(crate::quotas::over_actors(namespace, held, max));
            }
        }
        pending.insert(name.to_owned());
        drop(pending);
        Ok(Self {
            control,
            name: name.to_owned(),
        })
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        // Taken only where there is a decider (see `take`).
        if let Ok(decider) = self.control.decider() {
            decider.lock_pending().remove(&self.name);
        }
    }
}
