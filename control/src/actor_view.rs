//! What the API shows of one actor: its placement, its worker's status
//! and the snapshots the store lists, put together as an [`ActorInfo`].

use stasis_contract::directory::row_version;
use stasis_contract::error::ApiError;
use stasis_contract::status::{ActorStatus, rfc3339};

use super::ControlPlane;
use super::placement::Placement;
use super::views::ActorInfo;

impl ControlPlane {
    /// Actor `name`. An actor whose worker does not answer is shown in
    /// state `unknown`, with the reason in `error`.
    ///
    /// # Errors
    /// 404 if unknown.
    pub async fn actor(&self, name: &str) -> Result<ActorInfo, ApiError> {
        self.actor_viewed(name, true).await
    }

    /// [`ControlPlane::actor`]; without `list_store`, the snapshots shown
    /// are the worker's newest alone (a create's answer: a new name holds
    /// only the snapshot its create wrote, so no round trip to a shared
    /// store is needed to show it).
    pub(super) async fn actor_viewed(
        &self,
        name: &str,
        list_store: bool,
    ) -> Result<ActorInfo, ApiError> {
        let placement = self.placement_of(name)?;
        let host = self.host_of(&placement, name);
        // The store's listing (a round trip to a shared store) runs while
        // the worker is asked.
        let listing = list_store.then(|| {
            let (store, actor) = (self.store.clone(), name.to_owned());
            tokio::task::spawn_blocking(move || store.list(&actor))
        });
        let status = match &host {
            Ok(member) => member.status(name).await.unwrap_or_else(|e| {
                ActorStatus::unknown(&format!("worker {} did not answer: {e}", member.name))
            }),
            Err(_) => self.status_without_host(&placement),
        };
        let stored = match listing {
            Some(listing) => listing.await.ok().and_then(Result::ok).unwrap_or_default(),
            None => status.snapshot.into_iter().collect(),
        };
        Ok(self.actor_info_listed(name, placement, status, stored))
    }

    /// [`ControlPlane::actor`] with its pending alarm (`alarm_at`), as
    /// the directory holds it (the retry's time while a failed delivery
    /// waits for it): `GET /v1/actors/{name}`, `actor get`.
    ///
    /// # Errors
    /// As [`ControlPlane::actor`]; the directory's.
    pub async fn actor_with_alarm(&self, name: &str) -> Result<ActorInfo, ApiError> {
        let mut info = self.actor(name).await?;
        info.alarm_at = self.alarms()?.get(name).await?.map(rfc3339);
        Ok(info)
    }

    /// The status of an actor that no worker hosts: failed with its
    /// reason, or waiting for a worker (with why its last re-placement
    /// failed, if one did: it is retried).
    pub(super) fn status_without_host(&self, placement: &Placement) -> ActorStatus {
        if placement.failure_reason.is_none() && placement.pending_adoption.is_some() {
            let placed = format!(
                "placed on worker {} (epoch {}), which adopts it at its next request",
                placement.worker, placement.epoch
            );
            return ActorStatus::waiting(&match &placement.replacement_error {
                Some(error) => format!("{placed}; {error}"),
                None => placed,
            });
        }
        match (&placement.failure_reason, &placement.replacement_error) {
            (Some(reason), _) => ActorStatus::failed(reason),
            (None, Some(error)) => {
                ActorStatus::waiting(&format!("waiting for a worker to host it; {error}"))
            }
            (None, None) => ActorStatus::waiting("waiting for a worker to host it"),
        }
    }

    /// The API view of actor `name` placed as `placement`, in `status`.
    pub(super) fn actor_info(
        &self,
        name: &str,
        placement: Placement,
        status: ActorStatus,
    ) -> ActorInfo {
        let stored = self.store.list(name).unwrap_or_default();
        self.actor_info_listed(name, placement, status, stored)
    }

    /// [`ControlPlane::actor_info`] with the snapshots the store lists.
    pub(super) fn actor_info_listed(
        &self,
        name: &str,
        placement: Placement,
        status: ActorStatus,
        stored: Vec<stasis_core::snapshot_store::SnapshotEntry>,
    ) -> ActorInfo {
        let worker_state = self.member(&placement.worker).map(|m| m.state());
        let (template, template_version) = row_version(&placement.template);
        ActorInfo {
            name: name.to_owned(),
            template: template.to_owned(),
            template_version,
            state: status.state,
            worker: placement.worker.to_string(),
            worker_state,
            epoch: placement.epoch,
            snapshots: listed_snapshots(stored, &status),
            snapshot: status.snapshot,
            resumes: status.resumes,
            last_pause_ms: status.last_pause_ms,
            last_resume_ms: status.last_resume_ms,
            requests: status.requests,
            alarms: status.alarms,
            last_alarm_at: status.last_alarm_at_unix_ms.map(rfc3339),
            memory_bytes: status.memory_bytes,
            mailbox: status.mailbox,
            error: status.error,
            error_at_unix_ms: status.error_at_unix_ms,
            durability: status.durability,
            last_request_at: status.last_request_at_unix_ms.map(rfc3339),
            last_snapshot_at: status.last_snapshot_at_unix_ms.map(rfc3339),
            last_pause_at: status.last_pause_at_unix_ms.map(rfc3339),
            last_resume_at: status.last_resume_at_unix_ms.map(rfc3339),
            last_error_at: status.error_at_unix_ms.map(rfc3339),
            created_at: placement.created_at_unix_ms.map(rfc3339),
            labels: (*placement.labels).clone(),
            alarm_at: None,
        }
    }
}

/// The snapshots an actor's view lists: those in the store, and its
/// create's snapshot 0 while its worker keeps that in the journal
/// (durable, not yet a file; see [`ActorStatus::snapshot_journaled`]).
fn listed_snapshots(
    mut stored: Vec<stasis_core::snapshot_store::SnapshotEntry>,
    status: &ActorStatus,
) -> Vec<stasis_core::snapshot_store::SnapshotEntry> {
    if let Some(journaled) = status.snapshot.filter(|_| status.snapshot_journaled)
        && !stored.iter().any(|s| s.seq == journaled.seq)
    {
        stored.push(journaled);
        stored.sort_by_key(|s| s.seq);
    }
    stored
}
