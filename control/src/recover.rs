//! Bringing actors back: at start-up every actor of the directory is
//! re-placed on an in-process worker (`paused`, resumed by its next
//! request, or `failed` with the reason); later, actors that wait for a
//! worker (none at start-up, or theirs was lost) are re-placed from their
//! newest snapshot when one is ready.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Context as _;

use super::ControlPlane;
use super::placement::Placement;
use stasis_contract::directory::{ActorRow, TemplateRow};
use stasis_contract::error::ApiError;
use stasis_contract::status::ActorState;
use stasis_contract::templates::Templates as _;
use stasis_core::snapshot_store::{ChainError, SnapshotEntry, open_chain, remove_corrupt};
use std::collections::HashMap;

/// Re-placements of a wave (a lost worker's actors, those waiting at a
/// start) running at once.
const PLACE_PARALLEL: usize = 8;

/// The first retry of a failed re-placement comes this long after it.
const REPLACE_RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(500);

/// Re-placement retries back off by doubling up to this pause.
const REPLACE_RETRY_CAP: std::time::Duration = std::time::Duration::from_secs(30);

impl ControlPlane {
    /// Embedded, at start-up: re-places every actor of the directory on
    /// the in-process workers, on its recorded worker if that is one of
    /// them, else on the least-loaded one, each `paused` (resumed by its
    /// next request) or `failed` with the reason; then starts the alarms.
    /// Actors recorded on remote workers come back here too: a restarted
    /// control plane re-admits remote workers only as new, empty ones.
    ///
    /// # Errors
    /// If the directory cannot be read or names a missing template.
    pub fn recover(self: &Arc<Self>) -> anyhow::Result<()> {
        // Each template's versions, read once for all its actors.
        let mut versions: HashMap<String, Vec<TemplateRow>> = HashMap::new();
        for mut row in self.directory.actors()? {
            let template = self.directory.template(&row.template)?.with_context(|| {
                format!("actor {} names missing template {}", row.name, row.template)
            })?;
            let name = stasis_contract::directory::row_version(&row.template)
                .0
                .to_owned();
            if !versions.contains_key(&name) {
                let read = self.versions_of(&name)?;
                versions.insert(name.clone(), read);
            }
            let template = self.finish_upgrade(&mut row, template, &versions[&name])?;
            let mut placement = Placement::new(Arc::from(""), 0, &row.template, row.epoch)
                .created(row.created_at_unix_ms)
                .labelled(&row.labels);
            let Some(member) = self.member(&row.worker).or_else(|| self.least_loaded()) else {
                tracing::warn!(actor = %row.name, "no worker can host it (--workers 0); it waits for one to join");
                self.placements.place(&row.name, placement);
                continue;
            };
            if !member.is_in_process() {
                continue;
            }
            let moved = *member.name != *row.worker;
            let epoch = if moved { row.epoch + 1 } else { row.epoch };
            let spec = Self::host_spec(&template, epoch);
            let status = match member.api.adopt(&row.name, &spec) {
                Ok(status) => status,
                Err(e) => {
                    // One broken template must not keep the other actors down.
                    tracing::error!(actor = %row.name, "cannot load its template: {e}");
                    placement.failure_reason = Some(format!("template {}: {e}", row.template));
                    self.placements.place(&row.name, placement);
                    continue;
                }
            };
            placement.worker = member.name.clone();
            placement.incarnation = member.incarnation;
            self.placements.place(&row.name, placement);
            if moved {
                self.switch_placement(&row.name, &member, epoch)?;
            }
            tracing::info!(actor = %row.name, worker = %member.name, state = status.state.as_str(), "actor recovered");
        }
        let pending = self.directory.alarms()?;
        self.start_alarms(pending)?;
        Ok(())
    }

    /// A crash between an upgrade's new snapshot (durable) and the switch
    /// of the actor's version in the directory leaves its newest snapshot
    /// written by another version of its template than the one `row`
    /// names: the upgrade is finished (the actor moves to that version,
    /// `row` is updated) rather than leaving the actor failed.
    /// `versions`: every version of its template.
    fn finish_upgrade(
        &self,
        row: &mut ActorRow,
        template: TemplateRow,
        versions: &[TemplateRow],
    ) -> anyhow::Result<TemplateRow> {
        // A template of one version (most): nothing to finish, no file to
        // open.
        if versions.len() < 2 {
            return Ok(template);
        }
        let newest = self
            .store
            .list(&row.name)
            .ok()
            .and_then(|l| l.last().map(|e| e.seq));
        let Some(digest) = newest
            .and_then(|seq| super::upgrade::snapshot_module(&*self.store, &row.name, seq).ok())
        else {
            return Ok(template);
        };
        if digest == template.digest {
            return Ok(template);
        }
        let Some((_, target)) = super::upgrade::version_with_module(versions, &digest) else {
            return Ok(template);
        };
        let target = target.clone();
        let epoch = row.epoch + 1;
        self.directory
            .place_actor_as(&row.name, &row.worker, epoch, &target.name)?;
        tracing::warn!(actor = %row.name, from = %row.template, to = %target.name, "an upgrade interrupted after its new snapshot: finished");
        row.epoch = epoch;
        row.template.clone_from(&target.name);
        Ok(target)
    }

    /// Cluster mode, when this replica becomes the leader, its members
    /// admitted from etcd: takes the placements of the directory (`rows`)
    /// as they are,
    /// checked against what each worker says it hosts. An actor whose
    /// worker is not registered, or does not host it, waits for
    /// re-placement; one left `migrating` by a leader that died mid-move
    /// is given back to its owner (the move is cancelled); a copy on a
    /// worker that does not own it (a move's target that was never
    /// switched to) is removed. A worker that cannot be asked is trusted:
    /// if it is really gone, its lease expires and it is declared lost.
    pub(super) async fn recover_cluster(self: &Arc<Self>, rows: Vec<ActorRow>) {
        let mut hosted = HashMap::new();
        for member in self.members() {
            match member.statuses().await {
                Ok(statuses) => {
                    hosted.insert(
                        member.name.clone(),
                        statuses.into_iter().collect::<HashMap<_, _>>(),
                    );
                }
                Err(e) => {
                    tracing::warn!(worker = %member.name, "cannot list its actors ({e}); trusting the directory")
                }
            }
        }
        for row in rows {
            let member = self.member(&row.worker);
            let status = hosted.get(row.worker.as_str()).map(|h| h.get(&row.name));
            let placement = match (&member, status) {
                (Some(member), None | Some(Some(_))) => Placement::new(
                    member.name.clone(),
                    member.incarnation,
                    &row.template,
                    row.epoch,
                ),
                _ => Placement::new(Arc::from(""), 0, &row.template, row.epoch),
            }
            .created(row.created_at_unix_ms)
            .labelled(&row.labels);
            if let (Some(member), Some(Some(status))) = (&member, status)
                && status.state == ActorState::Migrating
            {
                tracing::warn!(actor = %row.name, worker = %member.name, "left migrating by the previous leader; cancelling the move");
                member.api.cancel_move(&row.name).await;
            }
            self.placements.place(&row.name, placement);
        }
        for (worker, statuses) in &hosted {
            let Some(member) = self.member(worker) else {
                continue;
            };
            for actor in statuses.keys() {
                let owner = self.placements().get(actor).map(|p| p.worker.clone());
                if owner.as_deref() != Some(worker) {
                    tracing::warn!(
                        actor,
                        worker = &**worker,
                        "removing a copy its worker does not own"
                    );
                    member.api.remove(actor).await;
                }
            }
        }
        let control = self.clone();
        tokio::spawn(async move { control.place_waiting().await });
    }

    /// Places actors that wait for a worker (e.g. after a restart with
    /// `--workers 0`, or when theirs was lost) on the least-loaded ready
    /// workers, paused.
    pub(super) async fn place_waiting(self: &Arc<Self>) {
        // Actors with requests waiting go first; the others in name order.
        let mut waiting: Vec<(bool, String)> = self
            .placements()
            .iter()
            .filter(|(a, p)| self.needs_a_host(p, a))
            .map(|(a, p)| (p.gate.held.load(Ordering::Relaxed) == 0, a.clone()))
            .collect();
        waiting.sort();
        // First all of them are placed in bulk, lazily (directory writes
        // only): every replica routes to the new worker at once, and a
        // request has its actor adopted there without waiting for the wave
        // below, which then has the rest adopted (see [`crate::adopt`]).
        let names: Vec<String> = waiting.iter().map(|(_, actor)| actor.clone()).collect();
        self.place_lazily(&names).await;
        // Each in its own task: one actor stuck behind its gate (a call to a
        // frozen worker) must not hold up the others. At most
        // `PLACE_PARALLEL` at once, so that each is done soon rather than
        // all of them late (and a request held for one places it at once,
        // outside this bound: see `place_if_waiting`).
        let permits = Arc::new(tokio::sync::Semaphore::new(PLACE_PARALLEL));
        let mut tasks = tokio::task::JoinSet::new();
        for (_, actor) in waiting {
            let control = self.clone();
            let permits = permits.clone();
            tasks.spawn(async move {
                let Ok(_permit) = permits.acquire_owned().await else {
                    return;
                };
                if let Err(e) = control.re_place(&actor).await {
                    control.replacement_failed(&actor, &e);
                    // Retried in the background (whoever waits for this
                    // round, a join's rebalance, goes on) while a worker
                    // could take it; with none, the next join or
                    // registration places it.
                    if control.least_loaded().is_some() {
                        tokio::spawn(async move { control.re_place_until_done(actor).await });
                    }
                }
            });
        }
        while tasks.join_next().await.is_some() {}
    }

    /// On a deciding control plane, places `actor` now if it waits for a
    /// host (its worker was lost) and a worker is ready: a request held
    /// for it does not wait for its turn in the re-placement wave. A
    /// failure is counted and left to the wave's retries.
    pub(crate) async fn place_if_waiting(&self, actor: &str) {
        // The cheap checks first: this runs before every pause, resume,
        // move and upgrade.
        if !self.decides()
            || !self
                .placement_of(actor)
                .is_ok_and(|p| self.needs_a_host(&p, actor))
            || self.least_loaded().is_none()
        {
            return;
        }
        // In a task of its own: a request whose client leaves must not stop
        // a re-placement half-way (a copy shipped, the switch not made).
        let Some(control) = self.decider().ok().and_then(|d| d.rollouts.control()) else {
            return;
        };
        let name = actor.to_owned();
        let placed = tokio::spawn(async move {
            if let Err(e) = control.re_place(&name).await {
                control.replacement_failed(&name, &e);
            }
        });
        let _ = placed.await;
    }

    /// Counts and logs a failed re-placement of `actor`, and keeps its
    /// reason for `actor get` until the actor is placed.
    fn replacement_failed(&self, actor: &str, e: &ApiError) {
        self.metrics.replacement_failed();
        tracing::error!(actor, "could not place: {e}; retrying");
        self.placements
            .note_replacement_error(actor, Some(format!("re-placement failed: {e}")));
    }

    /// Re-places `actor` again after [`REPLACE_RETRY_FIRST`], doubling the
    /// pause up to [`REPLACE_RETRY_CAP`], until it is placed (by this or any
    /// other decision), deleted or failed, no worker is ready (the next
    /// join or registration places it), or the control plane shuts down.
    async fn re_place_until_done(self: Arc<Self>, actor: String) {
        let mut pause = REPLACE_RETRY_FIRST;
        loop {
            tokio::time::sleep(pause).await;
            let waits = self
                .placement_of(&actor)
                .is_ok_and(|p| self.needs_a_host(&p, &actor));
            if !waits
                || self.least_loaded().is_none()
                || self.refuse_if_shutting_down("re-placement").is_err()
            {
                return;
            }
            match self.re_place(&actor).await {
                Ok(()) => return,
                Err(e) => self.replacement_failed(&actor, &e),
            }
            pause = (pause * 2).min(REPLACE_RETRY_CAP);
        }
    }

    /// Whether `actor`, placed as `placement`, waits for a worker: not
    /// failed, and no live member hosts it.
    pub(super) fn needs_a_host(&self, placement: &Placement, actor: &str) -> bool {
        placement.failure_reason.is_none() && self.host_of(placement, actor).is_err()
    }

    /// Puts `actor` on the least-loaded ready worker — or, when it was
    /// placed lazily on a worker that is still there, on that one (its
    /// adoption, see [`crate::adopt`]) — paused at its newest good snapshot
    /// in this control plane's store (see
    /// [`ControlPlane::newest_good_snapshot`]), with epoch + 1, if it still
    /// waits for a worker once its gate is held. Re-placements race (each
    /// worker that joins, and each loss, starts one for every waiting
    /// actor): deciding on the placement as it is under the gate, not as it
    /// was when the re-placement was planned, makes it one decision per
    /// actor, and the directory's compare-and-set on the epoch makes that
    /// decision durable once. A copy installed for a decision that lost (a
    /// leader that lost its leadership meanwhile, an attempt whose answer
    /// was lost) is never served, since no placement names its epoch until
    /// the switch, and is removed again; a target lost during the install
    /// is not waited for.
    async fn re_place(&self, actor: &str) -> Result<(), ApiError> {
        let gate = self.placement_of(actor)?.gate;
        let _gate = gate.barrier.write().await;
        let placement = self.placement_of(actor)?;
        if !self.needs_a_host(&placement, actor) {
            return Ok(());
        }
        // A control plane shutting down places nothing: the actor is
        // re-placed at the next start.
        self.refuse_if_shutting_down("re-placement")?;
        let started = std::time::Instant::now();
        let adopting = placement
            .pending_adoption
            .and_then(|since| Some((self.placed_worker(&placement)?, since)));
        let target = match &adopting {
            Some((target, _)) => target.clone(),
            None => self
                .least_loaded()
                .ok_or_else(|| ApiError::unavailable("no ready worker"))?,
        };
        let row = self.template_row(&placement.template)?;
        let epoch = placement.epoch + 1;
        let mut spec = Self::host_spec(&row, epoch);
        // An adoption: a read of the journal segments that began after the
        // actor was placed lazily began after its lost owner stopped
        // writing (and none serves it until the switch below), so the
        // target's newest read serves every actor it adopts from a loss.
        spec.journal_listed_within_ms = adopting
            .as_ref()
            .map(|(_, since)| u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX));
        let installed = tokio::select! {
            biased;
            installed = self.install_newest(&target, actor, &spec, &row.digest) => installed,
            () = target.lost() => Err(ApiError::unavailable(format!(
                "worker {} was lost while actor {actor} was installed there",
                target.name
            ))),
        };
        let Some(newest) = installed? else {
            return Ok(());
        };
        if let Err(e) = self.switch_placement_async(actor, &target, epoch).await {
            target.api.remove(actor).await;
            return Err(e);
        }
        self.placements.note_replacement_error(actor, None);
        tracing::info!(
            actor,
            worker = %target.name,
            epoch,
            seq = newest.seq,
            adopted = adopting.is_some(),
            took_ms = stasis_contract::status::ms(started.elapsed()),
            "actor re-placed from its newest snapshot (or a newer journal entry its worker recovered from the store)"
        );
        Ok(())
    }

    /// The newest snapshot of `actor` that verifies against its template
    /// (module `digest`) under `--max-memory`, for a re-placement. Newer
    /// snapshots that do not verify (known corrupt) are deleted, so that
    /// retention never keeps them in place of the one the actor came back
    /// from (issue 11 input 5), each with a warning naming the reason.
    /// With no snapshot that verifies, nothing is deleted and the actor is
    /// marked `failed` with the reasons (`Ok(None)`); it stays so until
    /// repaired (`stasis actor resume --from-template`).
    ///
    /// # Errors
    /// 503 if the actor has no snapshot at all (it waits); the store's
    /// error if a snapshot cannot be read (nothing is decided); the
    /// template's if it cannot be loaded.
    pub(super) async fn newest_good_snapshot(
        &self,
        actor: &str,
        digest: &str,
    ) -> Result<Option<SnapshotEntry>, ApiError> {
        let entries = self.store.list(actor)?;
        if entries.is_empty() {
            return Err(ApiError::unavailable(format!(
                "actor {actor} has no snapshot"
            )));
        }
        let template = self.templates.template(digest).await?;
        let store = self.store.clone();
        let max_memory = self.config.limits.max_memory;
        let name = actor.to_owned();
        let checked = tokio::task::spawn_blocking(move || {
            let mut problems = Vec::new();
            for entry in entries.iter().rev() {
                // A snapshot that cannot be read now (store unreachable,
                // file gone) is not known to be corrupt: no going back past
                // it; the re-placement is tried again later.
                // A delta is good when its whole chain is.
                match open_chain(store.as_ref(), &name, entry.seq, &template, max_memory) {
                    Err(ChainError::Open { source, .. }) => return Err(source.into()),
                    Ok(_) => {
                        let removed = remove_corrupt(
                            store.as_ref(),
                            &name,
                            &template,
                            max_memory,
                            Some(entry.seq),
                        )?;
                        return Ok::<_, ApiError>((Some(*entry), removed, problems));
                    }
                    Err(problem) => problems.push(problem.to_string()),
                }
            }
            Ok((None, Vec::new(), problems))
        })
        .await
        .map_err(ApiError::internal)??;
        let (good, removed, problems) = checked;
        for (seq, problem) in removed {
            tracing::warn!(
                actor,
                seq,
                "deleted corrupt snapshot before re-placing: {problem}"
            );
        }
        if good.is_none() {
            let reason = format!("no snapshot can be restored: {}", problems.join("; "));
            tracing::error!(actor, "re-placement failed: {reason}");
            self.placements.fail(actor, reason);
        }
        Ok(good)
    }
}
