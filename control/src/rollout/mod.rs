//! Rollouts and rollbacks of a template version over every actor of the
//! template (issue 31, item 3): [`ControlPlane::start_rollout`],
//! [`ControlPlane::rollback`] and [`ControlPlane::rollout_status`], and
//! the task that drives a rollout ([`plan`] decides, this module runs its
//! steps through [`ControlPlane::upgrade`]).
//!
//! - Canaries first, one at a time, then the rest in waves of
//!   [`WAVE`] actors, [`PARALLEL`] upgrades at once. The rollout stops
//!   once `max_failures` actors failed, or when a canary fails.
//! - Running actors go through the upgrade's barrier. Paused actors are
//!   upgraded at once with `eager`; otherwise each is upgraded when next
//!   resumed (a request, an alarm or `actor resume` reaching it upgrades it
//!   first, see [`ControlPlane::upgrade_if_deferred`]), and until then the
//!   rollout stays `running` with them counted as `deferred`.
//! - The record and every actor's outcome are in the directory
//!   ([`stasis_contract::rollout::Rollouts`]): an embedded control plane
//!   or a cluster's new leader carries a running rollout on where it was
//!   ([`ControlPlane::resume_rollouts`], from housekeeping, which only the
//!   embedded control plane and the leader run).
//! - A rollback moves every actor the rollout upgraded (and that still
//!   runs the rollout's version) back to the version it ran before, with
//!   its state as it is now: the changes made under the new version stay.

mod gone;
pub mod plan;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt as _;
use stasis_contract::directory::row_version;
use stasis_contract::error::ApiError;
use stasis_contract::rollout::{
    ActorOutcome, RolloutRecord, RolloutRequest, RolloutState, RolloutStatus,
};
use stasis_contract::status::ActorState;

use crate::ControlPlane;
use plan::{ActorNow, Input, Next, Step};

/// Most actors planned at once after the canaries (the plan is made again
/// after each wave, so that a stop or a rollback takes effect soon).
pub const WAVE: usize = 64;

/// Upgrades running at once.
pub const PARALLEL: usize = 8;

/// How often a rollout left with paused actors only (`deferred`) looks
/// again.
const WAIT_POLL: Duration = Duration::from_millis(500);

/// Failpoint: each upgrade of a rollout waits this many milliseconds
/// first (tests force a restart "mid-rollout" with it).
const DELAY_FAILPOINT: &str = "STASIS_FAILPOINT_ROLLOUT_DELAY_MS";

/// What the control plane keeps in memory of its rollouts: which
/// templates have a driving task, and the paused actors each upgraded at
/// its next resume.
pub struct RolloutTasks {
    /// The control plane itself, to run an upgrade at a resume in a task
    /// of its own (a request whose client leaves never stops it
    /// half-way).
    me: std::sync::Weak<ControlPlane>,
    /// Templates whose rollout a task drives now.
    driving: Mutex<HashSet<String>>,
    /// Paused actors to upgrade when next resumed: actor → (template, step).
    deferred: Mutex<HashMap<String, (String, Step)>>,
    /// Whether `deferred` may hold anything (the request path's one check).
    any_deferred: AtomicBool,
    /// Actors being upgraded at their resume now.
    busy: Mutex<HashSet<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl RolloutTasks {
    /// Nothing driven yet, for the control plane `me`.
    #[must_use]
    pub fn new(me: std::sync::Weak<ControlPlane>) -> Self {
        Self {
            me,
            driving: Mutex::default(),
            deferred: Mutex::default(),
            any_deferred: AtomicBool::new(false),
            busy: Mutex::default(),
        }
    }

    /// The control plane these rollouts belong to, while it lives.
    pub(crate) fn control(&self) -> Option<Arc<ControlPlane>> {
        self.me.upgrade()
    }

    /// Replaces template `template`'s deferred actors with `steps`.
    fn defer(&self, template: &str, steps: Vec<Step>) {
        let mut deferred = lock(&self.deferred);
        deferred.retain(|_, (t, _)| t != template);
        for step in steps {
            deferred.insert(step.actor.clone(), (template.to_owned(), step));
        }
        self.any_deferred
            .store(!deferred.is_empty(), Ordering::SeqCst);
    }
}

fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl ControlPlane {
    /// Starts rolling version `req.to_version` of template `template` out
    /// to every actor of the template; answers at once with its status
    /// (`GET /v1/templates/{name}/rollout` follows it).
    ///
    /// # Errors
    /// 404 unknown template or version; 400 `max_failures` 0; 409 a
    /// rollout or rollback of the template is running; 500 directory.
    pub async fn start_rollout(
        self: &Arc<Self>,
        template: &str,
        req: RolloutRequest,
    ) -> Result<RolloutStatus, ApiError> {
        self.refuse_if_shutting_down("rollout")?;
        let newest = self.versions_of(template)?.len() as u64;
        if newest == 0 {
            return Err(ApiError::not_found(format!(
                "no template named {template:?}"
            )));
        }
        if req.to_version == 0 || req.to_version > newest {
            return Err(ApiError::not_found(format!(
                "template {template} has no version {} (versions 1 to {newest})",
                req.to_version
            )));
        }
        if req.max_failures == Some(0) {
            return Err(ApiError::bad_request(
                "max_failures must be at least 1 (the rollout stops at that many failures)",
            ));
        }
        self.refuse_if_running(template)?;
        let mut record = RolloutRecord {
            template: template.to_owned(),
            to_version: req.to_version,
            canaries: Vec::new(),
            max_failures: req.max_failures.unwrap_or(1),
            eager: req.eager,
            state: RolloutState::Running,
            rollback: false,
            started_unix_ms: now_unix_ms(),
            stop_reason: None,
        };
        let (actors, _) = self.gather(template).await?;
        let busy = HashSet::new();
        let empty = BTreeMap::new();
        record.canaries = plan::canaries(
            &Input {
                record: &record,
                actors: &actors,
                outcomes: &empty,
                busy: &busy,
            },
            req.canary,
        );
        self.directory.clear_rollout_outcomes(template)?;
        self.directory.put_rollout(&record)?;
        tracing::info!(
            template,
            to_version = record.to_version,
            canaries = record.canaries.len(),
            max_failures = record.max_failures,
            eager = record.eager,
            "rollout started"
        );
        self.drive(template);
        self.rollout_status(template).await
    }

    /// Starts moving every actor the last rollout of `template` upgraded
    /// back to the version it ran before (a running rollout stops first).
    /// Their state stays as it is now.
    ///
    /// # Errors
    /// 404 the template has no rollout; 409 a rollback runs already;
    /// 500 directory.
    pub async fn rollback(self: &Arc<Self>, template: &str) -> Result<RolloutStatus, ApiError> {
        self.refuse_if_shutting_down("rollback")?;
        let mut record = self.record_of(template)?;
        if record.rollback && record.state == RolloutState::Running {
            return Err(ApiError::conflict(format!(
                "a rollback of template {template} is running"
            )));
        }
        if record.rollback {
            return Err(ApiError::conflict(format!(
                "the last rollout of template {template} was rolled back already"
            )));
        }
        record.rollback = true;
        record.state = RolloutState::Running;
        record.stop_reason = None;
        self.directory.put_rollout(&record)?;
        self.rollouts()?.defer(template, Vec::new());
        tracing::info!(
            template,
            from_version = record.to_version,
            "rollback started"
        );
        self.drive(template);
        self.rollout_status(template).await
    }

    /// Template `template`'s last rollout (or rollback) and its counts.
    ///
    /// # Errors
    /// 404 the template has no rollout; 500 directory.
    pub async fn rollout_status(&self, template: &str) -> Result<RolloutStatus, ApiError> {
        let record = self.record_of(template)?;
        let (actors, outcomes) = self.gather(template).await?;
        let busy = lock(&self.rollouts()?.busy).clone();
        Ok(plan::status(&Input {
            record: &record,
            actors: &actors,
            outcomes: &outcomes,
            busy: &busy,
        }))
    }

    /// Carries on every running rollout of the directory (at start, or
    /// when this replica begins to lead).
    pub fn resume_rollouts(self: &Arc<Self>) {
        let records = match self.directory.rollouts() {
            Ok(records) => records,
            Err(e) => {
                tracing::error!("reading the rollouts: {e}");
                return;
            }
        };
        for record in records {
            if record.state == RolloutState::Running {
                tracing::info!(template = record.template, "rollout carried on");
                self.drive(&record.template);
            }
        }
    }

    /// Before a request, an alarm or a resume reaches paused actor `name`:
    /// if a rollout defers its upgrade to this moment, upgrades it first
    /// (the outcome is recorded either way; a failed upgrade leaves it on
    /// its version, and the request goes on to it there).
    pub(crate) async fn upgrade_if_deferred(&self, name: &str) {
        // A follower drives no rollout: nothing is deferred there.
        let Ok(rollouts) = self.rollouts() else {
            return;
        };
        if !rollouts.any_deferred.load(Ordering::Relaxed) {
            return;
        }
        let taken = {
            let mut deferred = lock(&rollouts.deferred);
            let taken = deferred.remove(name);
            rollouts
                .any_deferred
                .store(!deferred.is_empty(), Ordering::SeqCst);
            taken
        };
        let (Some((template, step)), Some(me)) = (taken, rollouts.me.upgrade()) else {
            return;
        };
        lock(&rollouts.busy).insert(name.to_owned());
        tracing::info!(
            actor = name,
            to = step.to,
            "upgrading a deferred actor at its resume"
        );
        // In a task of its own: a request whose client leaves never stops
        // the upgrade half-way.
        let task = tokio::spawn(async move {
            me.run_step(&template, &step, false).await;
            if let Ok(rollouts) = me.rollouts() {
                lock(&rollouts.busy).remove(&step.actor);
            }
        });
        let _ = task.await;
    }

    /// The rollouts this control plane drives.
    ///
    /// # Errors
    /// 503 on a follower (see [`ControlPlane::decider`]).
    fn rollouts(&self) -> Result<&RolloutTasks, ApiError> {
        Ok(&self.decider()?.rollouts)
    }

    /// Whether rollouts stop here: graceful shutdown began, or this
    /// control plane decides nothing (a follower).
    fn stopping(&self) -> bool {
        self.decider
            .as_ref()
            .is_none_or(|decider| decider.shutting_down())
    }

    /// 409 if a rollout or rollback of `template` is running.
    fn refuse_if_running(&self, template: &str) -> Result<(), ApiError> {
        match self.directory.rollout(template)? {
            Some(r) if r.state == RolloutState::Running => Err(ApiError::conflict(format!(
                "a {} of template {template} to version {} is running; wait for it (stasis \
                 template rollout-status {template}) or roll it back",
                if r.rollback { "rollback" } else { "rollout" },
                r.to_version
            ))),
            _ => Ok(()),
        }
    }

    /// The version of its template actor `name` runs.
    fn version_of(&self, name: &str) -> Option<u64> {
        self.placement_of(name)
            .ok()
            .map(|p| row_version(&p.template).1)
    }

    fn record_of(&self, template: &str) -> Result<RolloutRecord, ApiError> {
        self.directory
            .rollout(template)?
            .ok_or_else(|| ApiError::not_found(format!("template {template:?} has no rollout")))
    }

    /// The template's actors now (version and whether paused), and the
    /// outcomes of its rollout, by actor.
    async fn gather(
        &self,
        template: &str,
    ) -> Result<(Vec<ActorNow>, BTreeMap<String, ActorOutcome>), ApiError> {
        let mut actors: Vec<(String, u64)> = self
            .placements()
            .iter()
            .filter_map(|(name, p)| {
                let (t, version) = row_version(&p.template);
                (t == template).then(|| (name.clone(), version))
            })
            .collect();
        actors.sort();
        let mut paused = HashSet::new();
        for member in self.members() {
            for (name, status) in member.statuses().await.unwrap_or_default() {
                if status.state == ActorState::Paused {
                    paused.insert(name);
                }
            }
        }
        let actors = actors
            .into_iter()
            .map(|(name, version)| ActorNow {
                paused: paused.contains(&name),
                name,
                version,
            })
            .collect();
        let outcomes = self
            .directory
            .rollout_outcomes(template)?
            .into_iter()
            .map(|o| (o.actor.clone(), o))
            .collect();
        Ok((actors, outcomes))
    }

    /// Starts the task driving `template`'s rollout, unless one runs.
    fn drive(self: &Arc<Self>, template: &str) {
        let Ok(rollouts) = self.rollouts() else {
            return;
        };
        if !lock(&rollouts.driving).insert(template.to_owned()) {
            return;
        }
        let (control, template) = (self.clone(), template.to_owned());
        tokio::spawn(async move {
            loop {
                if let Err(e) = control.drive_until_done(&template).await {
                    tracing::error!(template, "rollout interrupted: {e}");
                    tokio::time::sleep(WAIT_POLL).await;
                }
                let Ok(rollouts) = control.rollouts() else {
                    return;
                };
                lock(&rollouts.driving).remove(&template);
                // A rollout (or rollback) started while this task ended
                // found it still driving: carry it on.
                let running = matches!(
                    control.directory.rollout(&template),
                    Ok(Some(r)) if r.state == RolloutState::Running
                );
                if !running
                    || !control.may_act()
                    || control.stopping()
                    || !lock(&rollouts.driving).insert(template.clone())
                {
                    return;
                }
            }
        });
    }

    /// The driving loop: plans, runs a wave, plans again, until the
    /// rollout finishes or stops (or this control plane may no longer
    /// act: shutting down, or no longer leading).
    async fn drive_until_done(&self, template: &str) -> Result<(), ApiError> {
        loop {
            if !self.may_act() || self.stopping() {
                return Ok(());
            }
            let Some(mut record) = self.directory.rollout(template)? else {
                return Ok(());
            };
            if record.state != RolloutState::Running {
                self.rollouts()?.defer(template, Vec::new());
                return Ok(());
            }
            let (actors, outcomes) = self.gather(template).await?;
            let busy = lock(&self.rollouts()?.busy).clone();
            let input = Input {
                record: &record,
                actors: &actors,
                outcomes: &outcomes,
                busy: &busy,
            };
            let next = plan::next(&input, WAVE);
            match next {
                Next::Upgrade(steps) => {
                    let failed = plan::status(&input).failed;
                    self.run_wave(&record, steps, failed).await;
                }
                Next::Wait(steps) => {
                    self.rollouts()?.defer(template, steps);
                    tokio::time::sleep(WAIT_POLL).await;
                }
                Next::Finish | Next::Stop(_) => {
                    self.rollouts()?.defer(template, Vec::new());
                    record.state = plan::state_after(&next).unwrap_or(record.state);
                    if let Next::Stop(why) = next {
                        tracing::warn!(template, "rollout stopped: {why}");
                        record.stop_reason = Some(why);
                    } else {
                        tracing::info!(template, rollback = record.rollback, "rollout finished");
                    }
                    self.directory.put_rollout(&record)?;
                    return Ok(());
                }
            }
        }
    }

    /// Runs one wave of upgrades, [`PARALLEL`] at once; no new one starts
    /// once the failures (`failed` before the wave) reach the limit.
    async fn run_wave(&self, record: &RolloutRecord, steps: Vec<Step>, failed: usize) {
        let failures = AtomicUsize::new(failed);
        let limit = if record.rollback {
            usize::MAX
        } else {
            record.max_failures.max(1)
        };
        futures_util::stream::iter(steps)
            .map(|step| {
                let failures = &failures;
                async move {
                    if failures.load(Ordering::SeqCst) >= limit || self.stopping() {
                        return;
                    }
                    if !self
                        .run_step(&record.template, &step, record.rollback)
                        .await
                    {
                        failures.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
            .buffer_unordered(PARALLEL)
            .collect::<()>()
            .await;
    }

    /// Upgrades one actor as `step` says and records the outcome; false if
    /// the upgrade failed.
    async fn run_step(&self, template: &str, step: &Step, rollback: bool) -> bool {
        if let Some(ms) = std::env::var(DELAY_FAILPOINT)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        {
            tracing::info!(actor = step.actor, "failpoint: rollout step waits {ms} ms");
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let result = self.upgrade(&step.actor, Some(step.to)).await;
        if self.stopping() && result.is_err() {
            // Refused because the control plane stops: not the actor's
            // failure; the rollout carries on after the restart.
            return true;
        }
        let error = match result {
            Ok(_) => None,
            // Upgraded meanwhile by another path (its resume): done.
            Err(_) if self.version_of(&step.actor) == Some(step.to) => None,
            Err(e)
                if e.is(stasis_contract::error::ErrorKind::NotFound)
                    && !self.has_actor(&step.actor) =>
            {
                // Deleted before its turn: skipped, not failed.
                self.record_gone(
                    template,
                    &step.actor,
                    if rollback { step.to } else { step.from },
                );
                return true;
            }
            Err(e) => Some(e.message().to_owned()),
        };
        let ok = error.is_none();
        let outcome = ActorOutcome {
            actor: step.actor.clone(),
            // A rollback moves an actor back to the version it ran before.
            from_version: if rollback { step.to } else { step.from },
            error: if rollback { None } else { error.clone() },
            rolled_back: rollback && ok,
            rollback_error: if rollback { error.clone() } else { None },
            gone: false,
        };
        match &error {
            None => tracing::info!(
                actor = step.actor,
                template,
                from = step.from,
                to = step.to,
                "rollout upgraded actor"
            ),
            Some(why) => tracing::warn!(
                actor = step.actor,
                template,
                from = step.from,
                to = step.to,
                "rollout: upgrade failed: {why}"
            ),
        }
        if let Err(e) = self.directory.put_rollout_outcome(template, &outcome) {
            tracing::error!(actor = step.actor, "recording a rollout outcome: {e}");
        }
        ok
    }
}
