//! Who the workers are: each [`Member`] (a worker's [`WorkerApi`] plus the
//! control plane's bookkeeping of it: state, incarnation, last heartbeat),
//! remote workers joining and heartbeating, and failure detection.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use super::ControlPlane;
use super::views::WorkerInfo;
pub use super::views::WorkerState;
use stasis_contract::directory::WorkerRecord;
use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::names::check_label;
use stasis_contract::status::ActorStatus;
use stasis_contract::worker_api::{ConnectWorker, Location, WorkerApi};

/// A worker as a member of this control plane's cluster.
pub struct Member {
    /// The worker's name (shared with the placements of its actors).
    pub name: Arc<str>,
    /// The worker itself.
    pub api: Arc<dyn WorkerApi>,
    /// Which admission this is (0 for in-process workers; each join of a
    /// remote worker gets a new number).
    pub incarnation: u64,
    address: Location,
    state: Mutex<WorkerState>,
    last_heartbeat: Mutex<Instant>,
    /// Moves under way to this worker (see [`Member::expect_move`]).
    incoming_moves: AtomicUsize,
    /// Cancelled when the worker is declared lost (it never comes back:
    /// a worker that registers again is a new member).
    lost: tokio_util::sync::CancellationToken,
}

/// A move to a member, counted from before the move checks that the member
/// is `ready` until the move ends (switched or rolled back).
#[must_use = "the move is counted only while the guard lives"]
pub(super) struct IncomingMove<'a>(&'a AtomicUsize);

impl Drop for IncomingMove<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Member {
    /// A `ready` member for `api`, admitted as `incarnation`.
    #[must_use]
    pub fn new(api: Arc<dyn WorkerApi>, incarnation: u64) -> Self {
        Self {
            name: Arc::from(api.name()),
            address: api.location(),
            api,
            incarnation,
            state: Mutex::new(WorkerState::Ready),
            last_heartbeat: Mutex::new(Instant::now()),
            incoming_moves: AtomicUsize::new(0),
            lost: tokio_util::sync::CancellationToken::new(),
        }
    }

    /// Its state.
    #[must_use]
    pub fn state(&self) -> WorkerState {
        *self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets its state.
    pub fn set_state(&self, state: WorkerState) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = state;
        if state == WorkerState::Lost {
            self.lost.cancel();
        }
    }

    /// Resolves once the worker is declared lost: calls still waiting for
    /// its answer are given up then, so that they do not hold the gate a
    /// re-placement of their actor waits for.
    pub async fn lost(&self) {
        self.lost.cancelled().await;
    }

    /// Sets its state to `to` if it is `from`; whether it was.
    #[must_use]
    pub fn swap_state(&self, from: WorkerState, to: WorkerState) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let swapped = *state == from;
        if swapped {
            *state = to;
            if to == WorkerState::Lost {
                self.lost.cancel();
            }
        }
        swapped
    }

    /// Counts a move to this worker until the guard is dropped. A move
    /// takes it *before* checking that the worker is `ready`, and a drain
    /// sets `draining` *before* checking that no move is under way, so one
    /// of the two always sees the other: a drain never declares a worker
    /// `drained` while a move can still land on it.
    pub(super) fn expect_move(&self) -> IncomingMove<'_> {
        self.incoming_moves.fetch_add(1, Ordering::SeqCst);
        IncomingMove(&self.incoming_moves)
    }

    /// Moves under way to this worker.
    #[must_use]
    pub(super) fn incoming_moves(&self) -> usize {
        self.incoming_moves.load(Ordering::SeqCst)
    }

    /// Whether it runs in this process.
    #[must_use]
    pub fn is_in_process(&self) -> bool {
        self.address == Location::InProcess
    }

    /// Records a heartbeat now.
    pub fn heartbeat(&self) {
        *self
            .last_heartbeat
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// Time since the last heartbeat (zero for in-process workers).
    #[must_use]
    pub fn silence(&self) -> Duration {
        if self.is_in_process() {
            return Duration::ZERO;
        }
        self.last_heartbeat
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    /// `in-process`, or the remote `host:port`.
    #[must_use]
    pub fn address(&self) -> String {
        match &self.address {
            Location::InProcess => "in-process".to_owned(),
            Location::Remote(address) => address.clone(),
        }
    }

    /// `actor`'s status on this worker.
    ///
    /// # Errors
    /// 404 if it does not host the actor; 503 if lost or unreachable.
    pub async fn status(&self, actor: &str) -> Result<ActorStatus, ApiError> {
        if self.state() == WorkerState::Lost {
            return Err(ApiError::unavailable(format!(
                "worker {} is lost",
                self.name
            )));
        }
        self.api.status(actor).await
    }

    /// Statuses of every actor it hosts.
    ///
    /// # Errors
    /// 503 if it is lost; as [`WorkerApi::statuses`] if it cannot be reached.
    pub async fn statuses(&self) -> Result<Vec<(String, ActorStatus)>, ApiError> {
        if self.state() == WorkerState::Lost {
            return Err(ApiError::unavailable(format!(
                "worker {} is lost",
                self.name
            )));
        }
        self.api.statuses().await
    }

    /// Statuses of the actors of `names` it hosts.
    ///
    /// # Errors
    /// As [`Member::statuses`].
    pub async fn statuses_of(
        &self,
        names: &[String],
    ) -> Result<Vec<(String, ActorStatus)>, ApiError> {
        if self.state() == WorkerState::Lost {
            return Err(ApiError::unavailable(format!(
                "worker {} is lost",
                self.name
            )));
        }
        self.api.statuses_of(names).await
    }
}

/// The roster of members: the one owner of the list of workers, the
/// incarnation counter of joins, and the way to reach a joining worker.
pub(super) struct Members {
    list: RwLock<Vec<Arc<Member>>>,
    incarnations: AtomicU64,
    connect: Option<Arc<dyn ConnectWorker>>,
}

impl Members {
    /// A roster of `workers` (the in-process ones, incarnation 0), reaching
    /// joining workers through `connect` (none can join without it).
    pub(super) fn new(
        workers: Vec<Arc<dyn WorkerApi>>,
        connect: Option<Arc<dyn ConnectWorker>>,
    ) -> Self {
        Self {
            list: RwLock::new(
                workers
                    .into_iter()
                    .map(|w| Arc::new(Member::new(w, 0)))
                    .collect(),
            ),
            incarnations: AtomicU64::new(1),
            connect,
        }
    }

    /// Every member, in admission order.
    pub(super) fn all(&self) -> Vec<Arc<Member>> {
        self.list.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Member `name`.
    pub(super) fn get(&self, name: &str) -> Option<Arc<Member>> {
        self.list
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|w| *w.name == *name)
            .cloned()
    }

    /// A new incarnation number for a join.
    fn next_incarnation(&self) -> u64 {
        self.incarnations.fetch_add(1, Ordering::Relaxed)
    }

    /// Makes remote worker `name` at `address` a member as `incarnation`,
    /// replacing any earlier incarnation of it.
    ///
    /// # Errors
    /// Bad request for a bad name or address; conflict if the name is an
    /// in-process worker's, or no worker can join.
    fn admit(&self, name: &str, address: &str, incarnation: u64) -> Result<Arc<Member>, ApiError> {
        check_label("worker", name)?;
        let client = self
            .connect
            .as_ref()
            .ok_or_else(|| ApiError::conflict("this control plane does not admit remote workers"))?
            .connect(name, address)?;
        let mut members = self.list.write().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = members.iter().find(|w| *w.name == *name)
            && existing.is_in_process()
        {
            return Err(ApiError::conflict(format!(
                "worker name {name} is taken by an in-process worker"
            )));
        }
        // A worker always joins empty (a new process, or one that dropped
        // its actors): its earlier incarnation's actors are re-placed.
        members.retain(|w| *w.name != *name);
        let member = Arc::new(Member::new(client, incarnation));
        members.push(member.clone());
        Ok(member)
    }

    /// Removes `member` (that incarnation only).
    fn forget(&self, member: &Member) {
        self.list
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|w| !(w.name == member.name && w.incarnation == member.incarnation));
    }
}

impl ControlPlane {
    /// Every member, in admission order.
    pub(super) fn members(&self) -> Vec<Arc<Member>> {
        self.members.all()
    }

    /// Member `name`.
    pub(super) fn member(&self, name: &str) -> Option<Arc<Member>> {
        self.members.get(name)
    }

    /// Admits remote worker `name` at `address` (`host:port`), or re-admits
    /// it as a new, empty worker; then rebalances in the background.
    ///
    /// # Errors
    /// 400 bad name; 409 the name is an in-process worker's, or this is a
    /// cluster (its workers register in etcd).
    pub fn join(self: &Arc<Self>, name: &str, address: &str) -> Result<(), ApiError> {
        if self.is_clustered() {
            return Err(ApiError::conflict(
                "this cluster's workers register in etcd: start the worker with --directory etcd://... and --snapshot-store instead of --join",
            ));
        }
        let incarnation = self.members.next_incarnation();
        self.admit(name, address, incarnation)?;
        let control = self.clone();
        tokio::spawn(async move {
            control.place_waiting().await;
            let report = control.rebalance().await;
            tracing::info!(moves = report.moves.len(), "rebalanced after a join");
        });
        Ok(())
    }

    /// Makes remote worker `name` at `address` a member as `incarnation`,
    /// replacing any earlier incarnation of it (whose actors then wait for
    /// re-placement).
    ///
    /// # Errors
    /// 400 bad name or address; 409 the name is an in-process worker's.
    pub(super) fn admit(
        &self,
        name: &str,
        address: &str,
        incarnation: u64,
    ) -> Result<Arc<Member>, ApiError> {
        let member = self.members.admit(name, address, incarnation)?;
        tracing::info!(worker = name, address, incarnation, "worker admitted");
        Ok(member)
    }

    /// Cluster mode: keeps the members in step with the workers registered
    /// in etcd (`workers`: name to record, updated by a watch). A new
    /// registration, or one under a new lease, is a new, empty incarnation
    /// (the lease id is the incarnation); a registration that is gone (its
    /// lease expired or was revoked) is a lost worker, whose actors are
    /// re-placed. Runs until the watch ends.
    pub async fn follow_registrations(
        self: Arc<Self>,
        mut workers: tokio::sync::watch::Receiver<BTreeMap<String, WorkerRecord>>,
    ) {
        loop {
            let current = workers.borrow_and_update().clone();
            self.apply_registrations(&current);
            if workers.changed().await.is_err() {
                return;
            }
        }
    }

    fn apply_registrations(self: &Arc<Self>, current: &BTreeMap<String, WorkerRecord>) {
        let mut changed = false;
        for member in self.members() {
            let registered = current
                .get(&*member.name)
                .is_some_and(|r| r.incarnation() == Some(member.incarnation));
            if registered || member.state() == WorkerState::Lost {
                continue;
            }
            if member.state() == WorkerState::Drained || !self.decides() {
                // A follower does not decide losses (nor see drains): the
                // leader re-places whatever the worker held.
                tracing::info!(worker = %member.name, "worker gone; forgetting it");
                self.forget(&member);
                continue;
            }
            tracing::warn!(worker = %member.name, "its lease is gone; declaring it lost");
            member.set_state(WorkerState::Lost);
            changed = true;
        }
        changed |= self.admit_registered(current);
        // Only the leader acts on a membership change.
        if changed && self.decides() {
            let control = self.clone();
            tokio::spawn(async move {
                control.place_waiting().await;
                let report = control.rebalance().await;
                tracing::info!(
                    moves = report.moves.len(),
                    "rebalanced after a membership change"
                );
            });
        }
    }

    /// Admits every worker of `registered` (name to record) that is not a
    /// member under that registration's lease yet; whether any was.
    pub(super) fn admit_registered(&self, registered: &BTreeMap<String, WorkerRecord>) -> bool {
        let mut admitted = false;
        for (name, record) in registered {
            let Some(incarnation) = record.incarnation() else {
                continue;
            };
            if self
                .member(name)
                .is_some_and(|m| m.incarnation == incarnation)
            {
                continue;
            }
            match self.admit(name, &record.address, incarnation) {
                Ok(_) => admitted = true,
                Err(e) => tracing::error!(worker = %name, "cannot admit a registered worker: {e}"),
            }
        }
        admitted
    }

    /// Removes `member` (that incarnation only) from the members.
    fn forget(&self, member: &Member) {
        self.members.forget(member);
    }

    /// Records a heartbeat of remote worker `name`.
    ///
    /// # Errors
    /// 404 if unknown (it must join again); 410 if it was declared lost
    /// (it must drop its actors and join again).
    pub fn heartbeat(&self, name: &str) -> Result<(), ApiError> {
        let member = self
            .member(name)
            .ok_or_else(|| ApiError::not_found(format!("no worker named {name:?}; join again")))?;
        if member.state() == WorkerState::Lost {
            return Err(ApiError::new(
                ErrorKind::Gone,
                format!("worker {name} was declared lost; drop every actor and join again"),
            ));
        }
        member.heartbeat();
        Ok(())
    }

    /// Declares remote workers silent for twice the heartbeat timeout lost
    /// and re-places their actors from their newest snapshots. (In cluster
    /// mode workers do not heartbeat: their leases in etcd tell, see
    /// [`ControlPlane::follow_registrations`].)
    pub async fn run_failure_detector(self: Arc<Self>) {
        if self.is_clustered() {
            return;
        }
        let timeout = self.config.heartbeat_timeout;
        loop {
            tokio::time::sleep(timeout / 4).await;
            for member in self.members() {
                if member.is_in_process()
                    || member.state() == WorkerState::Lost
                    || member.silence() < timeout * 2
                {
                    continue;
                }
                if member.state() == WorkerState::Drained {
                    // It left cleanly (SIGTERM drains first) and holds nothing.
                    tracing::info!(worker = %member.name, "drained worker gone; forgetting it");
                    self.forget(&member);
                    continue;
                }
                tracing::warn!(worker = %member.name, "no heartbeat for {:?}; declaring it lost", member.silence());
                member.set_state(WorkerState::Lost);
                let control = self.clone();
                tokio::spawn(async move { control.place_waiting().await });
            }
        }
    }

    pub(super) async fn worker_info(&self, member: &Member) -> Result<WorkerInfo, ApiError> {
        let statuses = member.statuses().await.unwrap_or_default();
        let actors = self
            .placements()
            .values()
            .filter(|p| p.worker == member.name)
            .count();
        Ok(WorkerInfo {
            name: member.name.to_string(),
            address: member.address(),
            state: member.state(),
            actors,
            memory_bytes: statuses.iter().map(|(_, s)| s.memory_bytes).sum(),
        })
    }

    /// Every worker, sorted by name.
    pub async fn workers(&self) -> Vec<WorkerInfo> {
        let mut out = Vec::new();
        for member in self.members() {
            if let Ok(info) = self.worker_info(&member).await {
                out.push(info);
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}
