//! Bringing actors back: at start-up every actor of the directory is
//! re-placed on an in-process worker (`paused`, resumed by its next
//! request, or `failed` with the reason); later, actors that wait for a
//! worker (none at start-up, or theirs was lost) are re-placed from their
//! newest snapshot when one is ready.

use std::sync::Arc;

use anyhow::Context as _;

use super::ControlPlane;
use super::placement::Placement;
use crate::error::ApiError;
use crate::worker::{ActorSpec, Worker};

impl ControlPlane {
    /// Re-places every actor of the directory on `locals` (the in-process
    /// workers of this run): on its recorded worker if that is one of them,
    /// else on the least-loaded one. Actors recorded on remote workers come
    /// back here too: a restarted control plane re-admits remote workers
    /// only as new, empty ones.
    ///
    /// # Errors
    /// If the directory cannot be read or names a missing template.
    pub(super) fn recover(&self, locals: &[Arc<Worker>]) -> anyhow::Result<()> {
        for row in self.directory.actors()? {
            let template = self.directory.template(&row.template)?.with_context(|| {
                format!("actor {} names missing template {}", row.name, row.template)
            })?;
            let mut placement = Placement::new("", 0, &row.template, row.epoch);
            let Some(member) = self.member(&row.worker).or_else(|| self.least_loaded()) else {
                tracing::warn!(actor = %row.name, "no worker can host it (--workers 0); it waits for one to join");
                self.placement_mut().insert(row.name.clone(), placement);
                continue;
            };
            let Some(worker) = locals.iter().find(|w| w.name() == member.name) else {
                continue;
            };
            let compiled = match self.templates.load_local(&template.digest) {
                Ok(compiled) => compiled,
                Err(e) => {
                    // One broken template must not keep the other actors down.
                    tracing::error!(actor = %row.name, "cannot load its template: {e}");
                    placement.failure_reason = Some(format!("template {}: {e}", row.template));
                    self.placement_mut().insert(row.name.clone(), placement);
                    continue;
                }
            };
            let spec = ActorSpec {
                name: row.name.clone(),
                template: compiled,
                env: template.env.clone(),
            };
            let moved = member.name != row.worker;
            let epoch = if moved { row.epoch + 1 } else { row.epoch };
            let status = worker.adopt(&spec, epoch);
            placement.worker = member.name.clone();
            placement.incarnation = member.incarnation;
            self.placement_mut().insert(row.name.clone(), placement);
            if moved {
                self.switch_placement(&row.name, &member, epoch)?;
            }
            tracing::info!(actor = %row.name, worker = %member.name, state = status.state.as_str(), "actor recovered");
        }
        Ok(())
    }

    /// Places actors that wait for a worker (e.g. after a restart with
    /// `--workers 0`, or when theirs was lost) on the least-loaded ready
    /// workers, paused.
    pub(super) async fn place_waiting(self: &Arc<Self>) {
        let waiting: Vec<(String, Placement)> = self
            .placements()
            .iter()
            .filter(|(a, p)| p.failure_reason.is_none() && self.host_of(p, a).is_err())
            .map(|(a, p)| (a.clone(), p.clone()))
            .collect();
        // Each in its own task: one actor stuck behind its gate (a call to a
        // frozen worker) must not hold up the others.
        let mut tasks = tokio::task::JoinSet::new();
        for (actor, placement) in waiting {
            let control = self.clone();
            tasks.spawn(async move {
                if let Err(e) = control.re_place(&actor, &placement).await {
                    tracing::error!(actor, "could not place: {e}");
                }
            });
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Puts `actor` on the least-loaded ready worker, paused at its newest
    /// snapshot in this control plane's store, with epoch + 1.
    async fn re_place(&self, actor: &str, placement: &Placement) -> Result<(), ApiError> {
        let _gate = placement.gate.write().await;
        let target = self
            .least_loaded()
            .ok_or_else(|| ApiError::unavailable("no ready worker"))?;
        let row = self.template_row(&placement.template)?;
        let epoch = placement.epoch + 1;
        let newest = self
            .store
            .list(actor)?
            .last()
            .copied()
            .ok_or_else(|| ApiError::unavailable(format!("actor {actor} has no snapshot")))?;
        self.ship(
            &target,
            actor,
            &Self::host_spec(&row, epoch),
            newest.seq,
            false,
        )
        .await?;
        self.switch_placement(actor, &target, epoch)?;
        tracing::info!(actor, worker = %target.name, seq = newest.seq, "actor re-placed from its newest snapshot");
        Ok(())
    }
}
