//! How a `stasis worker run` process stays a member of its cluster:
//! joining and heartbeating (embedded mode) or its lease in etcd (cluster
//! mode), serving only while it is a member, and leaving (drain, or pause
//! every actor) at shutdown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;

use super::{Cluster, RemoteWorker};
use stasis_cluster::client::Peer;
use stasis_cluster::etcd::{Etcd, NameTaken, WorkerLease};
use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::proto::{ControlPath, JoinAnswer, JoinRequest};

/// Waits until the first replica has written the cluster's settings.
pub(super) async fn settings_when_written(etcd: &Etcd) -> JoinAnswer {
    let mut wait = Duration::from_millis(100);
    loop {
        match etcd.settings::<JoinAnswer>().await {
            Ok(Some(answer)) => return answer,
            Ok(None) => {
                tracing::info!("no cluster settings in etcd yet (no replica has started); waiting")
            }
            Err(e) => tracing::warn!("reading the cluster settings from etcd: {e:#}; retrying"),
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(2));
    }
}

/// 503: this worker holds no valid lease (cluster mode).
pub(super) fn lease_lost(worker: &str) -> ApiError {
    ApiError::unavailable(format!(
        "worker {worker} holds no valid lease in etcd; it serves nothing until it registers again"
    ))
}

/// Whether the control plane's answer to a join refuses this worker for
/// good, so that joining again cannot succeed: a bad name, a missing or
/// wrong token, a token that may not join, or a name taken (or a cluster
/// that takes no `--join` workers). Anything else (unreachable, not ready)
/// is worth another try.
fn refused_for_good(error: &ApiError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::BadRequest
            | ErrorKind::Unauthorized
            | ErrorKind::Forbidden
            | ErrorKind::Conflict
    )
}

/// Joins the control plane, retrying while it cannot be reached or is not
/// ready.
///
/// # Errors
/// The control plane's refusal for good (see [`refused_for_good`]).
pub(super) async fn join_until_admitted(
    control: &Peer,
    join: &JoinRequest,
) -> Result<JoinAnswer, ApiError> {
    let mut wait = Duration::from_millis(100);
    loop {
        match control
            .json::<JoinAnswer>(Method::POST, &ControlPath::Join.to_path(), join)
            .await
        {
            Ok(answer) => {
                tracing::info!(control = control.base(), name = %join.name, "joined");
                return Ok(answer);
            }
            Err(e) if refused_for_good(&e) => return Err(e),
            Err(e) => {
                tracing::warn!(
                    "joining {} failed: {e}; retrying in {wait:?}",
                    control.base()
                );
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
        }
    }
}

impl RemoteWorker {
    /// Keeps this worker a member: heartbeats (embedded mode) or its lease
    /// (cluster mode). Runs until aborted.
    pub(super) async fn keep_membership(self: Arc<Self>, heartbeat_timeout: Duration) {
        match &self.cluster {
            Cluster::Joined { control, join } => {
                let (control, join) = (Peer::clone(control), join.clone());
                self.heartbeat(control, join, heartbeat_timeout).await;
            }
            Cluster::Registered { .. } => self.keep_lease().await,
        }
    }

    /// Cluster mode: registers under a lease and serves while the lease is
    /// valid. When it is not (keep-alives unanswered until the deadline,
    /// see [`WorkerLease::is_valid`]) the worker stops serving and drops
    /// every instance before etcd expires the lease, that is before the
    /// leader can re-place its actors; then it registers again as a new,
    /// empty incarnation.
    async fn keep_lease(&self) {
        let Cluster::Registered { lease, .. } = &self.cluster else {
            return;
        };
        let mut held = lease.read().unwrap_or_else(|p| p.into_inner()).clone();
        loop {
            let granted = match held.take() {
                Some(granted) => granted,
                None => match self.register(false).await {
                    Ok(granted) => granted,
                    Err(e) => {
                        tracing::error!("registering in etcd: {e:#}");
                        return;
                    }
                },
            };
            *lease.write().unwrap_or_else(|p| p.into_inner()) = Some(granted.clone());
            self.worker.set_serving(true);
            granted.expired().await;
            tracing::error!(
                lease = granted.id(),
                "the lease could not be renewed in time; stopping to serve and dropping every instance"
            );
            self.worker.set_serving(false);
            *lease.write().unwrap_or_else(|p| p.into_inner()) = None;
            self.drop_all().await;
        }
    }

    /// Cluster mode: the first registration, before the worker says it is
    /// ready (a no-op in embedded mode).
    ///
    /// # Errors
    /// If another live worker holds the name (see [`RemoteWorker::register`]).
    pub(super) async fn register_at_start(&self) -> anyhow::Result<()> {
        let Cluster::Registered { lease, .. } = &self.cluster else {
            return Ok(());
        };
        let granted = self.register(true).await?;
        *lease.write().unwrap_or_else(|p| p.into_inner()) = Some(granted);
        Ok(())
    }

    /// Registers this worker in etcd, retrying etcd failures. While another
    /// lease holds the name it waits for that lease to end (an earlier run
    /// of this worker, killed, leaves its registration until its TTL).
    /// `give_up`: if the holder's registration outlives its lease's TTL
    /// (it is renewed: a live worker of the same name), fail rather than
    /// wait on.
    ///
    /// # Errors
    /// Only with `give_up`: the name is held by a live worker.
    async fn register(&self, give_up: bool) -> anyhow::Result<Arc<WorkerLease>> {
        let Cluster::Registered {
            etcd,
            address,
            lease_ttl,
            ..
        } = &self.cluster
        else {
            anyhow::bail!("not a cluster-mode worker");
        };
        let name = self.worker.name().to_owned();
        let mut wait = Duration::from_millis(100);
        // The holder seen first, and when.
        let mut holder: Option<(i64, Instant)> = None;
        loop {
            match etcd.register_worker(&name, address, *lease_ttl).await {
                Ok(granted) => {
                    tracing::info!(lease = granted.id(), %address, "registered in etcd; serving");
                    return Ok(Arc::new(granted));
                }
                Err(e) => match e.downcast_ref::<NameTaken>() {
                    Some(taken) => {
                        let since = match holder {
                            Some((lease, since)) if lease == taken.record.lease => since,
                            _ => {
                                let now = Instant::now();
                                holder = Some((taken.record.lease, now));
                                now
                            }
                        };
                        // Its lease would have expired by now unless renewed.
                        let patience = taken.granted_ttl + Duration::from_secs(2);
                        if give_up && since.elapsed() > patience {
                            anyhow::bail!(
                                "refusing to start: --name {name} is taken: another live worker at {} keeps its registration in etcd (lease {:x}); stop it, or give this worker another --name",
                                taken.record.address,
                                taken.record.lease
                            );
                        }
                        tracing::warn!(
                            "{taken}; waiting for that lease to end (an earlier run of this worker?)"
                        );
                    }
                    None => {
                        tracing::warn!("registering in etcd failed: {e:#}; retrying in {wait:?}")
                    }
                },
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(1));
        }
    }

    /// Whether this worker may serve now: always in embedded mode (the
    /// heartbeat task fences it), only under a valid lease in cluster mode.
    pub(super) fn may_serve(&self) -> bool {
        match &self.cluster {
            Cluster::Joined { .. } => true,
            Cluster::Registered { lease, .. } => super::lease_holds(lease),
        }
    }

    /// Asks the control plane (in cluster mode: the leader replica) to
    /// drain worker `name`.
    pub(super) async fn drain_me(&self, name: &str) -> Result<(), ApiError> {
        let drain_path = ControlPath::Drain(name).to_path();
        let control = match &self.cluster {
            Cluster::Joined { control, .. } => Peer::clone(control),
            Cluster::Registered { etcd, .. } => {
                let leader = etcd
                    .leader()
                    .await
                    .map_err(|e| ApiError::unavailable(format!("finding the leader: {e:#}")))?
                    .ok_or_else(|| ApiError::unavailable("no leader replica"))?;
                Peer::new(
                    &format!("http://{}", leader.admin),
                    self.token.as_deref(),
                    "leader replica",
                )?
            }
        };
        control
            .send(Method::POST, &drain_path, &[], Bytes::new())
            .await
            .map(|_| ())
    }

    /// At shutdown: asks the control plane to drain this worker (`name`),
    /// logs which actors the drain moved off, and pauses whatever stayed
    /// here (all of them when the drain was refused or failed).
    pub(super) async fn leave_at_shutdown(&self, name: &str) {
        tracing::info!("shutting down: asking the control plane to drain this worker");
        self.shutting_down
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let hosted = self.worker.actor_names();
        let drained = self.drain_me(name).await;
        // What the drain did, actor by actor, as the control plane decided it:
        // an actor it moved was removed from here before it answered.
        let left = self.worker.actor_names();
        for actor in hosted.iter().filter(|a| !left.contains(a)) {
            tracing::info!(actor = %actor, "moved off this worker by the drain");
        }
        match drained {
            Ok(()) => tracing::info!("drained"),
            Err(e) => {
                // Not moved: keep what was acknowledged by pausing every actor
                // here (its snapshot goes to the store, or to the control
                // plane), so that it comes back from that snapshot wherever it
                // is placed next.
                tracing::warn!(
                    status = e.kind().status(),
                    "drain refused or failed ({}); pausing every actor here before exiting",
                    e.message()
                );
            }
        }
        // Whatever stayed (all of them when the drain was refused) is paused
        // here; each actor's outcome is logged.
        self.pause_all().await;
    }

    /// Cluster mode: gives the lease back, so the registration goes at
    /// once rather than after the TTL.
    pub(super) async fn leave(&self) {
        if let Cluster::Registered { lease, .. } = &self.cluster {
            let held = lease.write().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(held) = held.and_then(|l| Arc::try_unwrap(l).ok())
                && let Err(e) = held.revoke().await
            {
                tracing::warn!("revoking the lease: {e:#}; it expires after its TTL");
            }
        }
    }

    /// Heartbeats every T/4. Unanswered for T: stop serving and drop every
    /// instance. Told it is unknown or lost: drop every actor and join again.
    async fn heartbeat(&self, control: Peer, join: JoinRequest, timeout: Duration) {
        let path = ControlPath::Heartbeat(&join.name).to_path();
        let mut last_ok = Instant::now();
        loop {
            tokio::time::sleep(timeout / 4).await;
            match control.send(Method::POST, &path, &[], Bytes::new()).await {
                Ok(_) => {
                    last_ok = Instant::now();
                    if !self.worker.is_serving() {
                        tracing::info!("control plane reachable again; serving");
                        self.worker.set_serving(true);
                    }
                }
                Err(e) if e.is(ErrorKind::NotFound) || e.is(ErrorKind::Gone) => {
                    tracing::warn!("control plane: {e}; dropping every actor and joining again");
                    self.drop_all().await;
                    match join_until_admitted(&control, &join).await {
                        Ok(_) => {
                            last_ok = Instant::now();
                            self.worker.set_serving(true);
                        }
                        Err(e) => tracing::error!("the control plane refused this worker: {e}"),
                    }
                }
                Err(e) => {
                    if last_ok.elapsed() >= timeout && self.worker.is_serving() {
                        tracing::error!(
                            "no heartbeat answered for {:?} ({e}); stopping to serve",
                            last_ok.elapsed()
                        );
                        self.worker.set_serving(false);
                        self.drop_all().await;
                    }
                }
            }
        }
    }

    /// Pauses every actor this worker hosts (at shutdown, when no drain
    /// took them), logging each outcome.
    pub(super) async fn pause_all(&self) {
        for name in self.worker.actor_names() {
            match self.worker.pause(&name).await {
                Ok(report) => tracing::info!(
                    actor = %name,
                    seq = report.seq,
                    newly_written = report.changed,
                    "stayed on this worker; paused for shutdown"
                ),
                Err(e) => tracing::error!(actor = %name, "pausing for shutdown failed: {e}"),
            }
        }
    }

    /// Drops every actor (and, in embedded mode, its local snapshot
    /// copies; a shared store is the cluster's, never this worker's to
    /// delete from).
    async fn drop_all(&self) {
        for name in self.worker.actor_names() {
            self.remove_actor(&name).await;
        }
    }

    pub(super) async fn remove_actor(&self, name: &str) {
        self.worker.remove(name).await;
        if matches!(self.cluster, Cluster::Joined { .. }) {
            let _ = self.worker.store().remove_actor(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The decision by kind refuses exactly the answers the join refused
    /// for good when it read their HTTP status (400, 401, 403, 409).
    #[test]
    fn a_join_is_refused_for_good_by_the_same_kinds_as_by_status() {
        let kinds = ErrorKind::ALL;
        for kind in kinds {
            let by_status = matches!(kind.status(), 400 | 401 | 403 | 409);
            assert_eq!(
                refused_for_good(&ApiError::new(kind, "refused")),
                by_status,
                "{kind:?}"
            );
        }
    }
}
