//! Moving actors between workers: one move (gate closed → capture →
//! ship → placement switch → gate open, rolled back on any failure before
//! the switch), and the rebalance and drain that run planned moves.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use super::balance::{PlannedMove, plan_drain, plan_rebalance};
use super::membership::{Member, WorkerState};
use super::placement::Placement;
use super::views::{MigrateInfo, Move, RebalanceReport, WorkerInfo};
use super::{ControlPlane, RebalanceBy};
use opentelemetry::KeyValue;
use opentelemetry::trace::{Span as _, Status, Tracer as _};
use stasis_contract::error::ApiError;
use stasis_contract::status::{ActorState, ActorStatus, ms};
use stasis_contract::trace;

/// Moves of paused actors a drain runs at once (see
/// [`ControlPlane::run_drain_moves`]).
const PAUSED_MOVES_AT_ONCE: usize = 32;

impl ControlPlane {
    /// Moves actor `name` to worker `to`: gate closed at the router → capture
    /// on the source (instance kept) → ship → restore on the target →
    /// placement switched durably with epoch + 1 → gate opened to the target
    /// → source instance dropped. Any failure before the switch rolls back:
    /// the actor stays on the source and the held requests are served there.
    ///
    /// # Errors
    /// 404 unknown actor or worker; 409 already there or target not ready;
    /// the failure that caused a rollback (503 for an unreachable target);
    /// 503 "control plane shutting down" once graceful shutdown began.
    pub async fn migrate(&self, name: &str, to: &str) -> Result<MigrateInfo, ApiError> {
        self.migrate_from(name, None, to)
            .await?
            .ok_or_else(|| ApiError::conflict(format!("actor {name} moved meanwhile")))
    }

    /// [`ControlPlane::migrate`], but only if the actor is still on `from`
    /// once its gate is closed (`Ok(None)` otherwise): rebalances and drains
    /// plan moves ahead and must not move an actor that already moved. A
    /// trace of its own (`stasis.move`, see [`stasis_contract::trace`]).
    async fn migrate_from(
        &self,
        name: &str,
        from: Option<&str>,
        to: &str,
    ) -> Result<Option<MigrateInfo>, ApiError> {
        let tracer = trace::tracer();
        let mut span = tracer
            .span_builder("stasis.move")
            .with_attributes([
                KeyValue::new("stasis.actor", name.to_owned()),
                KeyValue::new("stasis.target", to.to_owned()),
            ])
            .start(&tracer);
        let moved = self.move_if_still_on(name, from, to).await;
        match &moved {
            Ok(Some(info)) => {
                span.set_attribute(KeyValue::new("stasis.downtime_ms", info.downtime_ms));
            }
            Ok(None) => span.set_attribute(KeyValue::new("stasis.moved_meanwhile", true)),
            Err(e) => span.set_status(Status::error(e.message().to_owned())),
        }
        span.end();
        moved
    }

    /// [`ControlPlane::migrate_from`] without its span.
    async fn move_if_still_on(
        &self,
        name: &str,
        from: Option<&str>,
        to: &str,
    ) -> Result<Option<MigrateInfo>, ApiError> {
        self.refuse_if_shutting_down("move")?;
        let target = self
            .member(to)
            .ok_or_else(|| ApiError::not_found(format!("no worker named {to:?}")))?;
        if target.state() != WorkerState::Ready {
            return Err(ApiError::conflict(format!(
                "worker {to} is {}, not ready for actors",
                target.state().as_str()
            )));
        }
        let placement = self.placement_of(name)?;
        if from.is_some_and(|f| f != &*placement.worker) {
            return Ok(None);
        }
        if *placement.worker == *to {
            return Err(ApiError::conflict(format!(
                "actor {name} is already on {to}"
            )));
        }
        // One placed lazily and not adopted yet is adopted first.
        self.place_if_waiting(name).await;
        let gate = placement.gate.clone();
        // New requests wait from the moment the move asks for the gate.
        let started = Instant::now();
        let closed = gate.barrier.write().await;
        // Re-read under the gate: an earlier move may have finished meanwhile.
        let placement = self.placement_of(name)?;
        if from.is_some_and(|f| f != &*placement.worker) {
            return Ok(None);
        }
        // Shutdown began while this move waited for the gate.
        self.refuse_if_shutting_down("move")?;
        // Counted before the check, so a drain of the target that begins now
        // waits for this move to end (see `Member::expect_move`).
        let _incoming = target.expect_move();
        if target.state() != WorkerState::Ready {
            return Err(ApiError::conflict(format!(
                "worker {to} stopped taking actors"
            )));
        }
        if *placement.worker == *to {
            return Err(ApiError::conflict(format!(
                "actor {name} is already on {to}"
            )));
        }
        let source = self.host_of(&placement, name)?;
        let result = self
            .move_under_gate(name, &placement, &source, &target)
            .await;
        if let Err(e) = result {
            source.api.cancel_move(name).await;
            drop(closed);
            tracing::warn!(actor = name, from = %source.name, to, "move rolled back: {e}");
            let message = format!(
                "move of {name} to {to} rolled back; it stays on {}: {}",
                source.name,
                e.message()
            );
            return Err(e.with_message(message));
        }
        drop(closed);
        let downtime = started.elapsed();
        self.metrics
            .migration_downtime_seconds
            .observe(downtime.as_secs_f64());
        source.api.remove(name).await;
        let removed = started.elapsed();
        tracing::info!(actor = name, from = %source.name, to, downtime_ms = ms(downtime), "actor moved");
        let actor = self.actor(name).await?;
        tracing::debug!(
            target: "stasis_control::timing",
            actor = name,
            gate_and_move_ms = ms(downtime),
            remove_ms = ms(removed - downtime),
            view_ms = ms(started.elapsed() - removed),
            "move answered"
        );
        Ok(Some(MigrateInfo {
            actor,
            downtime_ms: ms(downtime),
            from: source.name.to_string(),
        }))
    }

    async fn move_under_gate(
        &self,
        name: &str,
        placement: &Placement,
        source: &Member,
        target: &Member,
    ) -> Result<(), ApiError> {
        let started = Instant::now();
        let row = self.template_row(&placement.template)?;
        let looked_up = started.elapsed();
        // The snapshot is in this control plane's store once captured.
        let captured = source.api.capture(name).await?;
        let capture_done = started.elapsed();
        let epoch = placement.epoch + 1;
        // A live actor is restored on the target at once; a paused one
        // stays paused there. The target verifies the snapshot.
        let spec = Self::host_spec_as_is(&row, epoch);
        if let Err(e) = self
            .ship(target, name, &spec, captured.seq, captured.live)
            .await
        {
            target.api.remove(name).await;
            return Err(e);
        }
        let shipped = started.elapsed();
        // A drain of the target that began during the ship: roll back rather
        // than place on a worker that no longer takes actors.
        // So does a shutdown that began meanwhile: every actor stays where
        // it is and is paused there.
        let switched = if target.state() == WorkerState::Ready {
            match self.refuse_if_shutting_down("move") {
                Ok(()) => self.switch_placement_async(name, target, epoch).await,
                Err(e) => Err(e),
            }
        } else {
            Err(ApiError::conflict(format!(
                "worker {} stopped taking actors",
                target.name
            )))
        };
        if let Err(e) = switched {
            target.api.remove(name).await;
            return Err(e);
        }
        tracing::debug!(
            target: "stasis_control::timing",
            actor = name,
            lookup_ms = ms(looked_up),
            capture_ms = ms(capture_done - looked_up),
            ship_ms = ms(shipped - capture_done),
            switch_ms = ms(started.elapsed() - shipped),
            "move timed"
        );
        Ok(())
    }

    /// Evens out actors across ready workers (by count, or by memory with
    /// `--rebalance-by memory`), running at most `--max-concurrent-moves`
    /// moves at once.
    pub async fn rebalance(self: &Arc<Self>) -> RebalanceReport {
        let ready: Vec<Arc<Member>> = self
            .members()
            .into_iter()
            .filter(|w| w.state() == WorkerState::Ready)
            .collect();
        if ready.len() < 2 {
            return RebalanceReport { moves: Vec::new() };
        }
        // Weight of each actor: 1, or its memory.
        let mut load: BTreeMap<String, Vec<(String, u64)>> = ready
            .iter()
            .map(|w| (w.name.to_string(), Vec::new()))
            .collect();
        let statuses: HashMap<String, ActorStatus> = {
            let mut all = HashMap::new();
            for w in &ready {
                all.extend(w.statuses().await.unwrap_or_default());
            }
            all
        };
        for (actor, p) in self.placements().iter() {
            if let Some(list) = load.get_mut(&*p.worker) {
                let weight = match self.config.rebalance_by {
                    RebalanceBy::Count => 1,
                    RebalanceBy::Memory => statuses.get(actor).map_or(0, |s| s.memory_bytes).max(1),
                };
                list.push((actor.clone(), weight));
            }
        }
        let mut moves = self.run_moves(plan_rebalance(&load)).await;
        moves.sort_by(|a, b| a.actor.cmp(&b.actor));
        RebalanceReport { moves }
    }

    async fn run_moves(self: &Arc<Self>, plan: Vec<PlannedMove>) -> Vec<Move> {
        self.run_moves_at(plan, self.config.max_concurrent_moves.max(1))
            .await
    }

    /// A drain's moves: those of actors `source` reports paused (nothing
    /// runs, so a move is a few round trips: capture of the newest
    /// snapshot, the target's install, the placement switch) run
    /// [`PAUSED_MOVES_AT_ONCE`] at a time, pipelined through the
    /// directory's group commits and the store; the others at most
    /// `--max-concurrent-moves` at once, as a rebalance's. An actor whose
    /// state cannot be read counts as running.
    async fn run_drain_moves(
        self: &Arc<Self>,
        source: &Member,
        plan: Vec<PlannedMove>,
    ) -> Vec<Move> {
        let names: Vec<String> = plan.iter().map(|m| m.actor.clone()).collect();
        let paused: std::collections::HashSet<String> = source
            .statuses_of(&names)
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, status)| status.state == ActorState::Paused)
            .map(|(name, _)| name)
            .collect();
        let (quiet, live): (Vec<_>, Vec<_>) =
            plan.into_iter().partition(|m| paused.contains(&m.actor));
        let at_once = PAUSED_MOVES_AT_ONCE.max(self.config.max_concurrent_moves);
        let (mut moved, live) =
            tokio::join!(self.run_moves_at(quiet, at_once), self.run_moves(live));
        moved.extend(live);
        moved
    }

    /// `plan`'s moves, at most `at_once` at a time.
    async fn run_moves_at(self: &Arc<Self>, plan: Vec<PlannedMove>, at_once: usize) -> Vec<Move> {
        let limit = Arc::new(tokio::sync::Semaphore::new(at_once));
        let mut tasks = tokio::task::JoinSet::new();
        for PlannedMove { actor, from, to } in plan {
            let control = self.clone();
            let limit = limit.clone();
            tasks.spawn(async move {
                let _permit = limit.acquire().await;
                let result = control.migrate_from(&actor, Some(&from), &to).await;
                match result {
                    Ok(None) => None,
                    Ok(Some(info)) => Some(Move {
                        actor,
                        from,
                        to,
                        downtime_ms: Some(info.downtime_ms),
                        error: None,
                    }),
                    Err(e) => Some(Move {
                        actor,
                        from,
                        to,
                        downtime_ms: None,
                        error: Some(e.message().to_owned()),
                    }),
                }
            });
        }
        let mut moves = Vec::new();
        while let Some(done) = tasks.join_next().await {
            if let Ok(Some(m)) = done {
                moves.push(m);
            }
        }
        moves
    }

    /// Moves every actor off worker `name` to the other ready workers, then
    /// marks it `drained` (it takes no actors until it is undrained or, for
    /// a remote worker, joins again).
    ///
    /// # Errors
    /// 404 unknown worker; 409 lost, or undrained while the drain ran (the
    /// drain stops; actors already moved stay where they went); 503 if some
    /// actor could not be moved (the worker stays `draining` and keeps those
    /// actors), or "control plane shutting down" once graceful shutdown
    /// began (the worker keeps its state and actors; they are paused there).
    pub async fn drain(self: &Arc<Self>, name: &str) -> Result<WorkerInfo, ApiError> {
        let entry = self
            .member(name)
            .ok_or_else(|| ApiError::not_found(format!("no worker named {name:?}")))?;
        if entry.state() == WorkerState::Lost {
            return Err(ApiError::conflict(format!("worker {name} is lost")));
        }
        self.refuse_if_shutting_down(&format!("drain of {name}"))?;
        entry.set_state(WorkerState::Draining);
        // Moves planned before the drain began may still land here: go
        // round until nothing is left and no move is under way to it.
        let mut rounds = 0;
        while rounds < 10 {
            if entry.state() != WorkerState::Draining {
                return Err(ApiError::conflict(format!(
                    "drain of {name} stopped: the worker is {} now",
                    entry.state().as_str()
                )));
            }
            // Read before the placements: a move that ends in between has
            // switched its placement by the time the count drops.
            let incoming = entry.incoming_moves();
            let actors: Vec<String> = self
                .placements()
                .iter()
                .filter(|(_, p)| *p.worker == *name)
                .map(|(a, _)| a.clone())
                .collect();
            if actors.is_empty() && incoming > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
            if actors.is_empty() {
                if !entry.swap_state(WorkerState::Draining, WorkerState::Drained) {
                    return Err(ApiError::conflict(format!(
                        "drain of {name} stopped: the worker is {} now",
                        entry.state().as_str()
                    )));
                }
                tracing::info!(worker = name, "drained");
                return self.worker_info(&entry).await;
            }
            let targets: Vec<String> = self
                .members()
                .into_iter()
                .filter(|w| w.state() == WorkerState::Ready)
                .map(|w| w.name.to_string())
                .collect();
            let plan = plan_drain(name, &actors, &targets, &self.actor_counts()).map_err(|_| {
                ApiError::unavailable(format!("no other ready worker to drain {name} to"))
            })?;
            rounds += 1;
            let failed: Vec<Move> = self
                .run_drain_moves(&entry, plan)
                .await
                .into_iter()
                .filter(|m| m.error.is_some())
                .collect();
            // A move whose target began draining meanwhile was rolled back:
            // plan again with the workers that are still ready.
            let target_left = |m: &Move| {
                self.member(&m.to)
                    .is_none_or(|w| w.state() != WorkerState::Ready)
            };
            if !failed.is_empty() && !failed.iter().all(target_left) {
                let failed: Vec<String> = failed
                    .into_iter()
                    .filter_map(|m| m.error.map(|e| format!("{}: {e}", m.actor)))
                    .collect();
                return Err(ApiError::unavailable(format!(
                    "drain of {name} incomplete: {}",
                    failed.join("; ")
                )));
            }
        }
        Err(ApiError::unavailable(format!(
            "drain of {name} incomplete: actors kept arriving"
        )))
    }

    /// Puts a `draining` or `drained` worker back into service: `ready`, it
    /// takes new actors again (existing ones move to it on the next
    /// rebalance). A running drain stops. A no-op for a `ready` worker.
    ///
    /// # Errors
    /// 404 unknown worker; 409 lost (a lost worker comes back by joining).
    pub async fn undrain(&self, name: &str) -> Result<WorkerInfo, ApiError> {
        let entry = self
            .member(name)
            .ok_or_else(|| ApiError::not_found(format!("no worker named {name:?}")))?;
        let before = entry.state();
        match before {
            WorkerState::Lost => {
                return Err(ApiError::conflict(format!(
                    "worker {name} is lost; it comes back by joining again"
                )));
            }
            WorkerState::Ready => {}
            WorkerState::Draining | WorkerState::Drained => {
                if entry.swap_state(before, WorkerState::Ready) {
                    tracing::info!(worker = name, "undrained (was {})", before.as_str());
                }
            }
        }
        self.worker_info(&entry).await
    }
}
