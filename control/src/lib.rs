//! The control side of Stasis: the control plane, which holds the
//! directory and the templates, places actors on workers, and runs every
//! operation the admin API offers. It reaches workers only through
//! [`WorkerApi`] and is given its parts (directory, snapshot store,
//! templates, in-process workers, how to reach remote workers) by the
//! assembly (`stasis-runtime`); this crate depends on the contract
//! (`stasis-contract`) and never on the worker side, the cluster backends
//! or the assembly. One room per job:
//!
//! - [`placement`]: the placement table, the request gate, lookups, and the
//!   one placement switch;
//! - [`actors`]: actor operations (create, fork, pause, delete, ...);
//! - [`request`]: the request path (`route`, then `call` or `alarm`);
//! - [`templates`]: template push, list, delete;
//! - [`migrate`]: one move, rebalance and drain, planned by the pure
//!   functions of [`balance`];
//! - [`upgrade`]: one actor moved to another version of its template
//!   through its gate; [`rollout`]: a version rolled out to every actor
//!   of a template (and rolled back), planned by [`rollout::plan`];
//! - [`ship`]: installing an actor from a stored snapshot on a worker, and
//!   receiving snapshots remote workers replicate;
//! - [`membership`]: the workers ([`membership::Member`]), joins,
//!   heartbeats, failure detection;
//! - [`recover`]: bringing actors back at start-up and after a loss;
//! - [`housekeeping`]: idle pauses, checkpoints, shutdown, gc;
//! - [`directory`]: [`directory::SqliteDirectory`], the embedded
//!   [`Directory`] in `stasis.db`;
//! - [`alarms`]: the scheduler of every actor's alarm and its delivery;
//! - [`decider`]: what only a deciding control plane (embedded, or a
//!   cluster's leader) has: the operations lock, graceful shutdown, the
//!   alarm scheduler and the rollouts; a follower has none;
//! - [`local`]: [`local::LocalControl`], this control plane as the
//!   [`stasis_contract::control_api::ControlApi`] of in-process workers,
//!   and [`calls`], how a call or message goes through it;
//! - [`follow`]: a follower replica's placements, kept in step with etcd;
//! - [`quotas`]: the namespaces' quotas (actors, request rate);
//! - [`tokens`]: scoped admin tokens: their text, making, listing and
//!   revoking them;
//! - [`views`]: what the API shows.
//!
//! Data dir layout (DESIGN.md): `stasis.db`, `LOCK`,
//! `templates/<digest>.wasm`, `cache/` (compiled variants),
//! `snapshots/<actor>/<seq:020>.snap`.

#![warn(missing_docs)]

mod actor_view;
pub mod actors;
mod adopt;
pub mod alarms;
pub mod ask_leader;
pub mod balance;
pub mod calls;
pub mod decider;
pub mod directory;
pub mod follow;
pub mod housekeeping;
mod kept;
pub mod listing;
pub mod local;
pub mod logs;
pub mod membership;
pub mod migrate;
pub mod on_demand;
pub mod placement;
pub mod policies;
pub mod quotas;
pub mod recover;
pub mod request;
pub mod rollout;
pub mod ship;
pub mod sockets;
pub mod templates;
pub mod tokens;
pub mod upgrade;
pub mod views;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

pub use membership::WorkerState;
pub use request::Route;
use stasis_contract::directory::{Directory, WorkerRecord};
use stasis_contract::error::ApiError;
use stasis_contract::metrics::Metrics;
use stasis_contract::proto::JoinAnswer;
use stasis_contract::settings::WorkerSettings;
use stasis_contract::templates::TemplateDir;
use stasis_contract::worker_api::{ConnectWorker, WorkerApi};
use stasis_core::engine::Limits;
use stasis_core::snapshot_files::LocalSnapshotStore;
use stasis_core::snapshot_objects::{ObjectSnapshotStore, StoreUrl};
use stasis_core::snapshot_store::SnapshotStore;
pub use templates::MAX_TEMPLATE_BYTES;
pub use views::{
    ActorInfo, GcReport, MigrateInfo, Move, PauseInfo, RebalanceReport, TemplateInfo,
    TemplateVersionInfo, UpgradeInfo, WorkerInfo,
};

/// Everything `stasis serve` is configured with.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The data dir (created if missing).
    pub data_dir: PathBuf,
    /// Number of in-process workers, named `worker-1..N`.
    pub workers: usize,
    /// Per-actor limits.
    pub limits: Limits,
    /// Mailbox, hold and snapshot settings of every worker.
    pub worker: WorkerSettings,
    /// Cap on the snapshot folder, in bytes.
    pub snapshot_quota: Option<u64>,
    /// Pause actors idle this long (scale to zero).
    pub idle_timeout: Option<Duration>,
    /// Checkpoint running actors this often.
    pub checkpoint_interval: Option<Duration>,
    /// A remote worker that misses heartbeats this long stops serving by
    /// itself; after twice this long the control plane declares it lost.
    pub heartbeat_timeout: Duration,
    /// What rebalancing evens out across workers.
    pub rebalance_by: RebalanceBy,
    /// Moves a rebalance or drain runs at once.
    pub max_concurrent_moves: usize,
    /// Bearer token for the admin API (and, without `internal_token`, for
    /// talking to remote workers).
    pub admin_token: Option<String>,
    /// Bearer token of the internal API between the control plane and
    /// workers (`--internal-token`): what it presents to remote workers;
    /// `None` uses `admin_token`.
    pub internal_token: Option<String>,
    /// Where snapshots and template modules are kept (`--snapshot-store`):
    /// the data dir (`local`), a shared volume or an object store.
    pub snapshot_store: StoreUrl,
    /// Failed deliveries after which an alarm is given up
    /// (`--alarm-retries`).
    pub alarm_retries: u32,
    /// `--max-sockets` and `--max-socket-message`.
    pub sockets: stasis_contract::sockets::SocketLimits,
    /// Placements a follower replica keeps cached (`--placement-cache`).
    pub placement_cache: usize,
}

/// What rebalancing evens out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RebalanceBy {
    /// Number of actors per worker.
    #[default]
    Count,
    /// Linear memory in use per worker.
    Memory,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("stasis-data"),
            workers: 2,
            limits: Limits::default(),
            worker: WorkerSettings::default(),
            snapshot_quota: None,
            idle_timeout: None,
            checkpoint_interval: None,
            heartbeat_timeout: Duration::from_secs(2),
            rebalance_by: RebalanceBy::Count,
            max_concurrent_moves: 4,
            admin_token: None,
            internal_token: None,
            snapshot_store: StoreUrl::Local,
            alarm_retries: alarms::DEFAULT_RETRIES,
            sockets: stasis_contract::sockets::SocketLimits::default(),
            placement_cache: DEFAULT_PLACEMENT_CACHE,
        }
    }
}

/// `--placement-cache`'s default: placements a follower replica keeps.
pub const DEFAULT_PLACEMENT_CACHE: usize = 100_000;

impl ServeConfig {
    /// The settings every worker of the cluster shares (what a joining
    /// worker is told; in cluster mode (`clustered`), the record in the
    /// directory, which names the shared snapshot store).
    #[must_use]
    pub fn cluster_settings(&self, clustered: bool) -> JoinAnswer {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        JoinAnswer {
            heartbeat_timeout_ms: ms(self.heartbeat_timeout),
            max_memory: self.limits.max_memory,
            cpu_limit_ms: ms(self.limits.cpu_limit),
            request_timeout_ms: ms(self.limits.request_timeout),
            max_body: self.limits.max_body as u64,
            max_held: self.worker.max_held,
            hold_timeout_ms: ms(self.worker.hold_timeout),
            keep_snapshots: self.worker.actor.keep_snapshots,
            checkpoint_every: self.worker.actor.checkpoint_every,
            durability: self.worker.actor.durability,
            max_live: self.worker.max_live,
            checkpoint_interval_ms: self.checkpoint_interval.map(ms),
            idle_timeout_ms: self.idle_timeout.map(ms),
            snapshot_quota: self.snapshot_quota,
            snapshot_store: clustered.then(|| self.snapshot_store.to_string()),
        }
    }
}

/// The control plane of one `stasis serve` process (in cluster mode: of
/// the leader replica).
pub struct ControlPlane {
    directory: Arc<dyn Directory>,
    templates: Arc<TemplateDir>,
    store: Arc<dyn SnapshotStore>,
    /// The store when it is shared with every worker (`file://`, `s3://`):
    /// template modules are kept there too, and workers read snapshots
    /// there instead of being sent them.
    shared: Option<Arc<ObjectSnapshotStore>>,
    members: membership::Members,
    placements: placement::PlacementTable,
    metrics: Arc<Metrics>,
    config: ServeConfig,
    /// What only a deciding control plane has (embedded, or a cluster's
    /// leader); `None` on a follower replica.
    decider: Option<decider::Decider>,
    /// The WebSockets and streams this process holds.
    sockets: sockets::Sockets,
    /// The namespaces' quotas as read, and their request budgets.
    quotas: quotas::QuotaState,
    /// The namespaces' policies as read.
    policies: policies::PolicyState,
}

/// What a control plane does in its process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `stasis serve` alone: the directory in `stasis.db`, every decision
    /// here.
    Embedded,
    /// The elected replica of a cluster: it places and moves actors,
    /// follows the workers' leases, rebalances and collects garbage.
    Leader,
    /// Another replica of a cluster: it routes requests by the placements
    /// it watches in etcd and never changes them (its admin API forwards
    /// to the leader).
    Follower,
}

/// The parts a control plane is built from, made by the assembly
/// (`stasis-runtime`): what it keeps its state in, the workers of its
/// process and how it reaches the others.
pub struct ControlParts {
    /// The durable record of templates, actors, placements and alarms.
    pub directory: Arc<dyn Directory>,
    /// Where snapshots are kept.
    pub store: Arc<dyn SnapshotStore>,
    /// The same store when it is shared with every worker (`file://`,
    /// `s3://`): template modules are kept there too.
    pub shared: Option<Arc<ObjectSnapshotStore>>,
    /// Template modules by digest, compiled once.
    pub templates: Arc<TemplateDir>,
    /// The workers of this process (`worker-1..N`), in order.
    pub workers: Vec<Arc<dyn WorkerApi>>,
    /// How a joining remote worker is reached.
    pub connect: Option<Arc<dyn ConnectWorker>>,
    /// The data dir's `LOCK`, held for the control plane's life.
    pub lock: Option<File>,
}

/// A snapshot store as the control plane and workers use it, and the same
/// store as a shared object store when it is one.
pub type OpenedStore = (Arc<dyn SnapshotStore>, Option<Arc<ObjectSnapshotStore>>);

/// Opens the snapshot store `config.snapshot_store` names: the data dir's
/// `snapshots/`, or a shared store cached in `<data dir>/snapshot-cache/`.
///
/// # Errors
/// If the folder or store cannot be opened or reached.
pub fn open_snapshot_store(
    url: &StoreUrl,
    data_dir: &std::path::Path,
    quota: Option<u64>,
) -> anyhow::Result<OpenedStore> {
    if *url == StoreUrl::Local {
        let local = LocalSnapshotStore::open(data_dir.join("snapshots"), quota)?;
        return Ok((Arc::new(local), None));
    }
    let shared = Arc::new(
        ObjectSnapshotStore::open(url, &data_dir.join("snapshot-cache"), quota)
            .map_err(|e| anyhow::anyhow!("--snapshot-store {url}: {}", e.detail()))?,
    );
    Ok((shared.clone(), Some(shared)))
}

impl ControlPlane {
    /// A control plane in `role` over `parts`, with nothing placed yet:
    /// the assembly then brings the actors back ([`ControlPlane::recover`]
    /// embedded, [`ControlPlane::take_over`] in a cluster) and starts the
    /// alarms ([`ControlPlane::start_alarms`]).
    #[must_use]
    pub fn new(
        config: ServeConfig,
        metrics: Arc<Metrics>,
        parts: ControlParts,
        role: Role,
    ) -> Arc<Self> {
        let sockets = sockets::Sockets::new(config.sockets, metrics.sockets.clone());
        // The one place a role is read: a follower follows placements
        // into a bounded cache and decides nothing.
        let (placements, decides) = match role {
            Role::Follower => (
                placement::PlacementTable::cached(
                    config.placement_cache,
                    metrics.placement_cache.clone(),
                ),
                false,
            ),
            Role::Embedded | Role::Leader => (placement::PlacementTable::default(), true),
        };
        let alarms = decides.then(|| {
            crate::alarms::scheduler::Scheduler::new(
                parts.directory.clone(),
                metrics.alarms.clone(),
                config.alarm_retries,
            )
        });
        let lock = parts.lock;
        Arc::new_cyclic(|me| Self {
            directory: parts.directory,
            templates: parts.templates,
            store: parts.store,
            shared: parts.shared,
            members: membership::Members::new(parts.workers, parts.connect),
            placements,
            metrics,
            config,
            decider: alarms.map(|alarms| {
                decider::Decider::new(alarms, rollout::RolloutTasks::new(me.clone()), lock)
            }),
            sockets,
            quotas: quotas::QuotaState::default(),
            policies: policies::PolicyState::default(),
        })
    }

    /// Cluster mode, once its parts are built: admits the workers
    /// registered in etcd (`workers`, name to record) and takes the actors
    /// of the directory where they are. A leader asks each registered
    /// worker what it hosts, and re-places actors whose worker is gone (or
    /// no longer hosts them), then starts the alarms; a follower reads
    /// nothing more (it reads each placement when a request first needs
    /// it).
    ///
    /// # Errors
    /// If the directory cannot be read.
    pub async fn take_over(
        self: &Arc<Self>,
        workers: &BTreeMap<String, WorkerRecord>,
    ) -> anyhow::Result<()> {
        self.admit_registered(workers);
        if self.decides() {
            let directory = self.directory.clone();
            let rows = tokio::task::spawn_blocking(move || directory.actors())
                .await
                .context("reading the directory")??;
            self.recover_cluster(rows).await;
            let directory = self.directory.clone();
            let pending = tokio::task::spawn_blocking(move || directory.alarms())
                .await
                .context("reading the alarms")??;
            self.start_alarms(pending)?;
        }
        Ok(())
    }

    /// The settings every worker of this deployment shares (what a joining
    /// worker is told).
    #[must_use]
    pub fn cluster_settings(&self) -> JoinAnswer {
        self.config.cluster_settings(self.is_clustered())
    }

    /// Whether this is a cluster's replica (membership comes from etcd):
    /// its directory is shared by the replicas.
    #[must_use]
    pub fn is_clustered(&self) -> bool {
        self.directory.is_shared()
    }

    /// Whether this control plane decides (embedded, or a cluster's
    /// leader): it places, moves and fires alarms. A follower replica only
    /// routes by the placements it follows.
    #[must_use]
    pub fn decides(&self) -> bool {
        self.decider.is_some()
    }

    /// What only a deciding control plane has.
    ///
    /// # Errors
    /// 503 on a follower replica: the leader decides.
    pub fn decider(&self) -> Result<&decider::Decider, ApiError> {
        self.decider.as_ref().ok_or_else(|| {
            ApiError::unavailable(
                "this replica follows: the leader replica decides (its admin API forwards there)",
            )
        })
    }

    /// Whether it may still act on its decisions: a leader, only while
    /// its lease holds by this process's clock ([`Directory::may_act`]).
    #[must_use]
    pub fn may_act(&self) -> bool {
        self.directory.may_act()
    }

    /// The etcd revision of the newest actor record this control plane
    /// wrote (see [`Directory::actors_revision`]); `None` with the embedded
    /// directory.
    #[must_use]
    pub fn actors_revision(&self) -> Option<i64> {
        self.directory.actors_revision()
    }

    /// Every actor's alarm (see [`crate::alarms`]).
    ///
    /// # Errors
    /// 503 on a follower replica (see [`ControlPlane::decider`]).
    pub fn alarms(&self) -> Result<&crate::alarms::scheduler::Scheduler, ApiError> {
        Ok(self.decider()?.alarms())
    }

    /// Starts firing alarms: `pending` is the directory's list
    /// ([`Directory::alarms`]).
    ///
    /// # Errors
    /// If the scheduler cannot start.
    pub fn start_alarms(self: &Arc<Self>, pending: Vec<(String, u64)>) -> Result<(), ApiError> {
        let deliver = crate::alarms::deliver::ControlDeliver::new(self);
        self.alarms()?.start(pending, deliver)
    }

    /// The metrics registry.
    #[must_use]
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &ServeConfig {
        &self.config
    }

    /// The metrics registry, with the gauges refreshed.
    pub async fn metrics_text(&self) -> String {
        let mut states = Vec::new();
        let mut held = 0;
        for member in self.members() {
            held += member.api.held_requests();
            for (_, status) in member.statuses().await.unwrap_or_default() {
                states.push(status.state);
            }
        }
        if let Some(cache) = self.placements.cache() {
            let cached = i64::try_from(self.placements().len()).unwrap_or(i64::MAX);
            cache.metrics.cached.set(cached);
        }
        let open = i64::try_from(self.sockets.len()).unwrap_or(i64::MAX);
        self.metrics.sockets.open.set(open);
        self.metrics
            .encode_at_scrape(states, held, self.store.used_bytes())
    }
}

/// Runs a directory call on a blocking thread (every [`Directory`] call
/// blocks: a SQLite transaction or an etcd round trip).
pub(crate) async fn blocking<T: Send + 'static>(
    directory: &Arc<dyn Directory>,
    work: impl FnOnce(&dyn Directory) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let directory = directory.clone();
    tokio::task::spawn_blocking(move || work(directory.as_ref()))
        .await
        .map_err(|e| ApiError::internal(format!("directory task: {e}")))?
}

#[cfg(test)]
mod tests;
