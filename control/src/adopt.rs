//! Lazy re-placement (issue 50, item 2): when a worker's lease ends, its
//! actors are placed on the ready workers in bulk — a directory write per
//! actor at epoch + 1, pipelined into the directory's group commits, and
//! nothing installed ([`ControlPlane::place_lazily`]) — so every replica
//! sees where each actor lives within a round of commits, however many
//! there are. The worker named then *adopts* an actor (installs it from
//! its newest snapshot in the store and recovers its journal at the next
//! epoch, switched there by the directory's compare-and-set; the store's
//! adoption fence keeps the lost owner's late writes out) on its first
//! request, or in its turn in the background wave (`re_place` in
//! [`crate::recover`]). Until then the actor has no
//! host: its requests are held, never refused, and the first one has it
//! adopted at once (on a follower replica, by asking the leader).

use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt as _;

use super::ControlPlane;
use super::membership::{Member, WorkerState};
use super::placement::Placement;
use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::worker_api::HostSpec;
use stasis_core::snapshot_store::SnapshotEntry;

/// Directory writes of a lazy re-placement in flight at once: pipelined
/// into the directory's group commits (etcd batches them).
const LAZY_PARALLEL: usize = 64;

impl ControlPlane {
    /// Places each of `actors` that waits for a host on the ready workers,
    /// each actor on the one with the fewest (counted once for all),
    /// writing only the directory: the placement points at its worker,
    /// [`Placement::pending_adoption`] until that worker adopts it. Returns how many were placed; one whose
    /// write failed still waits (the wave places it the eager way).
    pub(super) async fn place_lazily(self: &Arc<Self>, actors: &[String]) -> usize {
        let counts = self.actor_counts();
        let mut ready: Vec<(usize, Arc<Member>)> = self
            .members()
            .into_iter()
            .filter(|w| w.state() == WorkerState::Ready)
            .map(|w| (counts.get(&*w.name).copied().unwrap_or(0), w))
            .collect();
        if ready.is_empty() {
            return 0;
        }
        let mut plan = Vec::new();
        for actor in actors {
            let Ok(placement) = self.placement_of(actor) else {
                continue;
            };
            if self.adoption_pending(&placement) || !self.needs_a_host(&placement, actor) {
                continue;
            }
            let Some((count, target)) = ready.iter_mut().min_by_key(|(count, _)| *count) else {
                break;
            };
            *count += 1;
            plan.push((actor.clone(), target.clone()));
        }
        let started = Instant::now();
        let planned = plan.len();
        let placed = futures_util::stream::iter(plan)
            .map(|(actor, target)| {
                let control = self.clone();
                // Each write in a task of its own: a re-placement is never
                // left half-way by a caller that goes away.
                tokio::spawn(async move {
                    match control.place_pending(&actor, &target).await {
                        Ok(placed) => placed,
                        Err(e) => {
                            tracing::warn!(actor, "lazy re-placement: {e}; placed again later");
                            false
                        }
                    }
                })
            })
            .buffer_unordered(LAZY_PARALLEL)
            .filter(|placed| std::future::ready(matches!(placed, Ok(true))))
            .count()
            .await;
        if planned > 0 {
            tracing::info!(
                placed,
                planned,
                took_ms = stasis_contract::status::ms(started.elapsed()),
                "a lost worker's actors placed lazily (each adopted on its first request)"
            );
        }
        placed
    }

    /// Whether `placement` waits for its adoption by a worker that is
    /// still there (one whose worker was lost too is placed again).
    fn adoption_pending(&self, placement: &Placement) -> bool {
        placement.pending_adoption.is_some() && self.placed_worker(placement).is_some()
    }

    /// For a follower replica holding a request for actor `name` with no
    /// host: places it now if it waits for one (see
    /// [`ControlPlane::place_if_waiting`]); a failure is left to the
    /// wave's retries and the follower asks again while it holds.
    ///
    /// # Errors
    /// 400 for a name no actor can have; 404 unknown actor; 503 where this
    /// control plane does not decide.
    pub async fn place_now(&self, name: &str) -> Result<(), ApiError> {
        stasis_contract::names::check_full_name("actor", name)?;
        self.decider()?;
        let placement = self.placement_of(name)?;
        // Refused by the worker its placement names, at that epoch (the
        // caller's reason to ask): if that worker does not host it (placed
        // lazily by an earlier leader, never adopted), it is adopted now.
        if !self.needs_a_host(&placement, name)
            && let Some(member) = self.placed_worker(&placement)
            && member
                .status(name)
                .await
                .is_err_and(|e| e.is(ErrorKind::NotFound))
        {
            tracing::warn!(actor = name, worker = %member.name, epoch = placement.epoch, "its worker does not host it: adopted there");
            self.placements
                .not_hosted(name, &member.name, placement.epoch);
        }
        self.place_if_waiting(name).await;
        Ok(())
    }

    /// Records `actor` on `target` at the next epoch, not installed, if it
    /// still waits for a host once its gate is held (a request may have
    /// placed it meanwhile). `Ok(false)` when there was nothing to do.
    async fn place_pending(&self, actor: &str, target: &Arc<Member>) -> Result<bool, ApiError> {
        let gate = self.placement_of(actor)?.gate;
        let _gate = gate.barrier.write().await;
        let placement = self.placement_of(actor)?;
        if self.adoption_pending(&placement)
            || !self.needs_a_host(&placement, actor)
            || target.state() != WorkerState::Ready
        {
            return Ok(false);
        }
        self.refuse_if_shutting_down("re-placement")?;
        self.switch_placement_pending(actor, target, placement.epoch + 1)
            .await?;
        Ok(true)
    }

    /// Installs `actor` paused on `target` under `spec` from its newest
    /// snapshot in this control plane's store, or, if the target finds
    /// that one corrupt, from the newest that verifies against the
    /// template `digest` (see [`ControlPlane::newest_good_snapshot`]).
    /// `Ok(None)`: no snapshot restores; the actor is marked failed.
    ///
    /// # Errors
    /// 503 if the actor has no snapshot yet; the store's or the target's
    /// failure.
    pub(super) async fn install_newest(
        &self,
        target: &Member,
        actor: &str,
        spec: &HostSpec,
        digest: &str,
    ) -> Result<Option<SnapshotEntry>, ApiError> {
        let (store, name) = (self.store.clone(), actor.to_owned());
        let newest = tokio::task::spawn_blocking(move || store.list(&name))
            .await
            .map_err(ApiError::internal)??
            .last()
            .copied()
            .ok_or_else(|| ApiError::unavailable(format!("actor {actor} has no snapshot")))?;
        match self.ship(target, actor, spec, newest.seq, false).await {
            Ok(()) => Ok(Some(newest)),
            // The target found the newest snapshot corrupt: come back from
            // the newest one that verifies, or fail with the reasons.
            Err(e) if e.is(ErrorKind::Unprocessable) => {
                tracing::warn!(
                    actor,
                    seq = newest.seq,
                    "newest snapshot does not verify: {}",
                    e.message()
                );
                let Some(good) = self.newest_good_snapshot(actor, digest).await? else {
                    return Ok(None);
                };
                self.ship(target, actor, spec, good.seq, false).await?;
                Ok(Some(good))
            }
            Err(e) => Err(e),
        }
    }
}
