//! Periodic and operator duties: pausing idle actors and checkpointing
//! running ones (in-process workers), pausing everything at shutdown, and
//! gc through the snapshot store.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::ControlPlane;
use super::views::GcReport;
use stasis_contract::error::ApiError;
use stasis_contract::status::ActorState;

impl ControlPlane {
    /// Applies retention to every actor and removes the snapshots of
    /// actors the directory does not know.
    ///
    /// # Errors
    /// 500 if the snapshot store cannot be read.
    pub async fn gc(&self) -> Result<GcReport, ApiError> {
        let _guard = self.decider()?.ops.write().await;
        let mut report = GcReport::default();
        let known: HashSet<String> = self.placements().keys().cloned().collect();
        let keep = self.config.worker.actor.keep_snapshots;
        for name in self.store.actors()? {
            let list = self.store.list(&name)?;
            if known.contains(&name) {
                for seq in self.store.retain(&name, keep)? {
                    report.removed_files += 1;
                    report.reclaimed_bytes +=
                        list.iter().find(|e| e.seq == seq).map_or(0, |e| e.bytes);
                }
            } else {
                report.removed_files += list.len() as u64;
                report.reclaimed_bytes += list.iter().map(|e| e.bytes).sum::<u64>();
                self.store.remove_actor(&name)?;
            }
        }
        report.snapshot_bytes = self.store.used_bytes();
        Ok(report)
    }

    /// Begins graceful shutdown: from now on no move or drain starts (they
    /// answer 503 "control plane shutting down"), so every actor stays on
    /// the worker it is on and is paused there. Idempotent.
    pub fn begin_shutdown(&self) {
        if self
            .decider
            .as_ref()
            .is_some_and(crate::decider::Decider::begin_shutdown)
        {
            tracing::info!("shutting down: no more moves or drains; actors are paused in place");
        }
    }

    /// 503 "control plane shutting down" once [`ControlPlane::begin_shutdown`]
    /// ran: what a move or drain answers then (and 503 on a follower,
    /// which decides none).
    ///
    /// # Errors
    /// 503 while shutting down, or on a follower.
    pub(super) fn refuse_if_shutting_down(&self, what: &str) -> Result<(), ApiError> {
        self.decider()?.refuse_if_shutting_down(what)
    }

    /// Pauses every running actor (graceful shutdown): afterwards every
    /// actor's newest snapshot holds its latest state. Begins shutdown
    /// first (no new move or drain), waits for moves under way to end, and
    /// logs each actor's outcome with its worker.
    pub async fn pause_all(&self) {
        self.begin_shutdown();
        // A move holds its actor's gate from start to end.
        let gates: Vec<_> = self.placements().values().map(|p| p.gate.clone()).collect();
        for gate in gates {
            drop(gate.barrier.write().await);
        }
        let mut tasks = tokio::task::JoinSet::new();
        for member in self.members() {
            let statuses = match member.statuses().await {
                Ok(statuses) => statuses,
                Err(e) => {
                    // A remote worker shutting down pauses its actors
                    // itself (streaming their snapshots here) and exits.
                    tracing::warn!(worker = %member.name, "cannot list its actors at shutdown: {e}");
                    continue;
                }
            };
            for (name, status) in statuses {
                // One pausing or resuming (a remote worker pausing for its
                // own shutdown) is paused too: the call waits behind that
                // in the actor's mailbox, so every snapshot it streams here
                // has arrived before the worker API stops.
                if matches!(
                    status.state,
                    ActorState::Running | ActorState::Pausing | ActorState::Resuming
                ) {
                    let member = member.clone();
                    tasks.spawn(async move {
                        match member.api.pause(&name).await {
                            Ok(report) => tracing::info!(
                                actor = %name,
                                worker = %member.name,
                                seq = report.seq,
                                "paused for shutdown; stays on its worker"
                            ),
                            // A remote worker stopping at the same time
                            // pauses its actors itself and closes its API
                            // once it has: gone by now, it is not a failure
                            // here (as when it cannot be listed, above).
                            Err(e) if member.statuses().await.is_err() => tracing::warn!(
                                actor = %name,
                                worker = %member.name,
                                "cannot pause it at shutdown: its worker is gone ({e}); a worker that \
                                 stops pauses its actors itself"
                            ),
                            Err(e) => tracing::error!(
                                actor = %name,
                                worker = %member.name,
                                "pause at shutdown failed: {e}"
                            ),
                        }
                    });
                }
            }
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Runs the periodic duties until the process ends: pausing actors idle
    /// past `--idle-timeout` and checkpointing running ones every
    /// `--checkpoint-interval`, on the in-process workers.
    /// Actors at durability `interval` (a template may choose it at push)
    /// are checkpointed at that interval, 1 s without the flag.
    pub async fn run_housekeeping(self: std::sync::Arc<Self>) {
        let idle = self.config.idle_timeout;
        let every = self.config.checkpoint_interval;
        let interval_every = every.unwrap_or(Duration::from_secs(1));
        let tick = [idle.map(|d| d / 4), Some(interval_every)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(Duration::from_secs(1))
            .clamp(Duration::from_millis(50), Duration::from_secs(1));
        let mut last_checkpoint = Instant::now();
        // Housekeeping runs where decisions are made (embedded, or the
        // leader): rollouts carry on from there.
        self.resume_rollouts();
        loop {
            tokio::time::sleep(tick).await;
            let checkpoint_due = last_checkpoint.elapsed() >= interval_every;
            if checkpoint_due {
                last_checkpoint = Instant::now();
            }
            for member in self.members() {
                if !member.is_in_process() {
                    continue;
                }
                let worker = &member.api;
                for (name, status) in worker.statuses().await.unwrap_or_default() {
                    if status.state != ActorState::Running {
                        continue;
                    }
                    let idle_for = status.last_active().map(|t| t.elapsed());
                    if let (Some(limit), Some(idle_for)) = (idle, idle_for)
                        && idle_for >= limit
                    {
                        tracing::info!(actor = %name, "idle for {idle_for:?}; pausing");
                        if let Err(e) = worker.pause(&name).await {
                            tracing::warn!(actor = %name, "idle pause failed: {e}");
                        }
                    } else if checkpoint_due
                        && (every.is_some() || status.durability.as_deref() == Some("interval"))
                        && let Err(e) = worker.checkpoint(&name).await
                    {
                        tracing::warn!(actor = %name, "checkpoint failed: {e}");
                    }
                }
            }
        }
    }
}
