//! The control plane: the directory, the templates, placement of actors on
//! workers, and every operation the admin API offers. It owns the data dir
//! (guarded by its `LOCK` file). One room per job:
//!
//! - [`placement`]: the placement table, the request gate, lookups, and the
//!   one placement switch;
//! - [`actors`]: actor operations and the request path (`route`, `call`);
//! - [`templates`]: template push, list, delete;
//! - [`migrate`]: one move, rebalance and drain, planned by the pure
//!   functions of [`balance`];
//! - [`ship`]: installing an actor from a stored snapshot on a worker, and
//!   receiving snapshots remote workers replicate;
//! - [`membership`]: the workers ([`membership::Member`]), joins,
//!   heartbeats, failure detection;
//! - [`recover`]: bringing actors back at start-up and after a loss;
//! - [`housekeeping`]: idle pauses, checkpoints, shutdown, gc;
//! - [`directory`]: the durable record behind a [`directory::Directory`];
//! - [`follow`]: a follower replica's placements, kept in step with etcd;
//! - [`views`]: what the API shows.
//!
//! Data dir layout (DESIGN.md): `stasis.db`, `LOCK`,
//! `templates/<digest>.wasm`, `cache/` (compiled variants),
//! `snapshots/<actor>/<seq:020>.snap`.

pub mod actors;
pub mod balance;
pub mod directory;
pub mod follow;
pub mod housekeeping;
pub mod membership;
pub mod migrate;
pub mod placement;
pub mod recover;
pub mod ship;
pub mod templates;
pub mod views;

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;

use crate::cluster::etcd::{EtcdOptions, WorkerRecord};
use crate::cluster::proto::JoinAnswer;
use crate::cluster::shared::StoreTemplates;
use crate::error::ApiError;
use crate::metrics::{Metrics, StateLabel};
use crate::worker::actor::ActorState;
use crate::worker::templates::TemplateDir;
use crate::worker::{Worker, WorkerApi, WorkerSettings};
pub use actors::Route;
use directory::{Directory, SqliteDirectory};
use membership::Member;
pub use membership::WorkerState;
use placement::Placement;
use stasis_core::engine::{Limits, StasisEngine};
use stasis_core::module::ModuleCache;
use stasis_core::snapshot_files::LocalSnapshotStore;
use stasis_core::snapshot_objects::{ObjectSnapshotStore, StoreUrl};
use stasis_core::snapshot_store::SnapshotStore;
pub use templates::MAX_TEMPLATE_BYTES;
pub use views::{
    ActorInfo, GcReport, MigrateInfo, Move, PauseInfo, RebalanceReport, TemplateInfo, WorkerInfo,
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
    /// Bearer token for the admin API and for talking to remote workers.
    pub admin_token: Option<String>,
    /// Where snapshots and template modules are kept (`--snapshot-store`):
    /// the data dir (`local`), a shared volume or an object store.
    pub snapshot_store: StoreUrl,
    /// Cluster mode (`--directory etcd://...`); `None` for the embedded
    /// directory (`stasis.db` in the data dir).
    pub cluster: Option<ClusterConfig>,
}

/// Cluster mode: the directory, membership and leadership in etcd.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The etcd cluster (`--directory etcd://...`, `--etcd-*`).
    pub etcd: EtcdOptions,
    /// TTL of the leases of workers and of the leader (`--lease-ttl`).
    pub lease_ttl: Duration,
    /// Host other replicas reach this one's listeners at (`--advertise`).
    pub advertise: Option<String>,
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
            snapshot_store: StoreUrl::Local,
            cluster: None,
        }
    }
}

impl ServeConfig {
    /// The settings every worker of the cluster shares (what a joining
    /// worker is told; in cluster mode, the record in the directory).
    #[must_use]
    pub fn cluster_settings(&self) -> JoinAnswer {
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
            max_live: self.worker.max_live,
            checkpoint_interval_ms: self.checkpoint_interval.map(ms),
            idle_timeout_ms: self.idle_timeout.map(ms),
            snapshot_quota: self.snapshot_quota,
            snapshot_store: self
                .cluster
                .as_ref()
                .map(|_| self.snapshot_store.to_string()),
        }
    }
}

/// The control plane of one `stasis serve` process (in cluster mode: of
/// the leader replica).
pub struct ControlPlane {
    directory: Arc<dyn Directory>,
    engine: Arc<StasisEngine>,
    templates: Arc<TemplateDir>,
    store: Arc<dyn SnapshotStore>,
    /// The store when it is shared with every worker (`file://`, `s3://`):
    /// template modules are kept there too, and workers read snapshots
    /// there instead of being sent them.
    shared: Option<Arc<ObjectSnapshotStore>>,
    members: RwLock<Vec<Arc<Member>>>,
    placements: RwLock<HashMap<String, Placement>>,
    metrics: Arc<Metrics>,
    config: ServeConfig,
    /// Serialises operations that change the directory's set of names
    /// (write), except creates, which run together (read) and reserve
    /// their names in `pending`.
    ops: tokio::sync::RwLock<()>,
    pending: std::sync::Mutex<std::collections::HashSet<String>>,
    incarnations: AtomicU64,
    /// Set when graceful shutdown begins: no move or drain starts after it.
    shutting_down: AtomicBool,
    role: Role,
    /// Every actor's alarm (fired only by an embedded or leading control
    /// plane, see [`crate::alarms`]).
    alarms: crate::alarms::scheduler::Scheduler,
    _lock: Option<File>,
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

/// What a control plane keeps its state in.
struct Backend {
    directory: Arc<dyn Directory>,
    store: Arc<dyn SnapshotStore>,
    shared: Option<Arc<ObjectSnapshotStore>>,
    lock: Option<File>,
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
    /// Opens the data dir (creating it), takes its `LOCK`, starts the
    /// in-process workers and brings every actor of the directory back,
    /// `paused` (resumed by its next request) or `failed` with the reason.
    ///
    /// # Errors
    /// If the data dir is locked by another process or cannot be opened.
    pub fn open(config: ServeConfig, metrics: Arc<Metrics>) -> anyhow::Result<Arc<Self>> {
        let dir = &config.data_dir;
        std::fs::create_dir_all(dir.join("templates"))
            .with_context(|| format!("creating data dir {}", dir.display()))?;
        std::fs::create_dir_all(dir.join("cache"))?;
        let lock = stasis_core::durable::lock_data_dir(dir)?;
        let directory =
            SqliteDirectory::open(&dir.join("stasis.db")).context("opening stasis.db")?;
        let (store, shared) =
            open_snapshot_store(&config.snapshot_store, dir, config.snapshot_quota)?;
        let backend = Backend {
            directory: Arc::new(directory),
            store,
            shared,
            lock: Some(lock),
        };
        let (control, locals) = Self::assemble(config, metrics, backend, Role::Embedded)?;
        control.recover(&locals)?;
        let pending = control.directory.alarms()?;
        control.start_alarms(pending)?;
        Ok(control)
    }

    /// Opens the control plane of a cluster's replica, in `role`: the
    /// directory in etcd (`directory`), snapshots and template modules in
    /// the shared store, the workers registered in etcd (`workers`, name to
    /// record) and no in-process worker.
    ///
    /// A leader takes the actors where they are: each registered worker is
    /// asked what it hosts, and actors whose worker is gone (or no longer
    /// hosts them) are re-placed. A follower only loads the placements, to
    /// route by them.
    ///
    /// # Errors
    /// If the data dir (this replica's caches) cannot be opened, the store
    /// is not shared, or the directory cannot be read.
    pub async fn open_replica(
        config: ServeConfig,
        metrics: Arc<Metrics>,
        directory: Arc<dyn Directory>,
        workers: std::collections::BTreeMap<String, WorkerRecord>,
        role: Role,
    ) -> anyhow::Result<Arc<Self>> {
        let dir = config.data_dir.clone();
        let url = config.snapshot_store.clone();
        let quota = config.snapshot_quota;
        let control = tokio::task::spawn_blocking(move || -> anyhow::Result<Arc<Self>> {
            std::fs::create_dir_all(dir.join("templates"))
                .with_context(|| format!("creating data dir {}", dir.display()))?;
            std::fs::create_dir_all(dir.join("cache"))?;
            let (store, shared) = open_snapshot_store(&url, &dir, quota)?;
            anyhow::ensure!(
                shared.is_some(),
                "--directory etcd:// needs a shared --snapshot-store (file:///PATH or s3://BUCKET)"
            );
            let backend = Backend {
                directory,
                store,
                shared,
                lock: None,
            };
            Ok(Self::assemble(config, metrics, backend, role)?.0)
        })
        .await
        .context("opening the control plane")??;
        control.admit_registered(&workers);
        let directory = control.directory.clone();
        let rows = tokio::task::spawn_blocking(move || directory.actors())
            .await
            .context("reading the directory")??;
        match role {
            Role::Leader => control.recover_cluster(rows).await,
            Role::Follower | Role::Embedded => control.load_placements(&rows),
        }
        if role == Role::Leader {
            let directory = control.directory.clone();
            let pending = tokio::task::spawn_blocking(move || directory.alarms())
                .await
                .context("reading the alarms")??;
            control.start_alarms(pending)?;
        }
        Ok(control)
    }

    fn assemble(
        config: ServeConfig,
        metrics: Arc<Metrics>,
        backend: Backend,
        role: Role,
    ) -> anyhow::Result<(Arc<Self>, Vec<Arc<Worker>>)> {
        let dir = &config.data_dir;
        // With --max-live, the in-process workers share one pool of
        // exactly their live-instance slots.
        let engine = match config.worker.max_live {
            Some(max) => {
                let slots = max.max(1).checked_mul(config.workers).with_context(|| {
                    format!(
                        "--max-live {max} × --workers {} is too large",
                        config.workers
                    )
                })?;
                if slots > 0 {
                    // Checks the slots against vm.max_map_count itself.
                    StasisEngine::pooled(config.limits, slots)?
                } else {
                    // Remote workers get the same --max-live: refuse what no
                    // process could hold, even with no in-process worker.
                    stasis_core::engine::check_live_instances(max)?;
                    StasisEngine::new(config.limits)?
                }
            }
            None => StasisEngine::new(config.limits)?,
        };
        let fetch = backend.shared.as_ref().map(|shared| {
            Box::new(StoreTemplates::new(shared.clone()))
                as Box<dyn crate::worker::templates::FetchTemplate>
        });
        let templates = Arc::new(TemplateDir::new(
            ModuleCache::new(
                engine.engine().clone(),
                engine.linker().clone(),
                Some(dir.join("cache")),
            ),
            dir.join("templates"),
            fetch,
        ));
        let store = backend.store;
        let locals: Vec<Arc<Worker>> = (1..=config.workers)
            .map(|i| {
                Worker::new(
                    &format!("worker-{i}"),
                    engine.clone(),
                    store.clone(),
                    metrics.clone(),
                    config.worker.clone(),
                    None,
                    templates.clone(),
                )
            })
            .collect();
        let members = locals
            .iter()
            .map(|w| Arc::new(Member::new(w.clone() as Arc<dyn WorkerApi>, 0)))
            .collect();
        let alarms = crate::alarms::scheduler::Scheduler::new(
            backend.directory.clone(),
            metrics.alarms.clone(),
        );
        let control = Arc::new(Self {
            directory: backend.directory,
            engine,
            templates,
            store,
            shared: backend.shared,
            members: RwLock::new(members),
            placements: RwLock::new(HashMap::new()),
            metrics,
            config,
            ops: tokio::sync::RwLock::new(()),
            pending: std::sync::Mutex::default(),
            incarnations: AtomicU64::new(1),
            shutting_down: AtomicBool::new(false),
            role,
            alarms,
            _lock: backend.lock,
        });
        let local = crate::cluster::control_peer::LocalControl::new(&control);
        for worker in &locals {
            worker.set_router(Arc::new(local.clone()));
            worker.set_alarm_router(Arc::new(local.clone()));
        }
        Ok((control, locals))
    }

    /// Whether this is a cluster's replica (membership comes from etcd).
    #[must_use]
    pub fn is_clustered(&self) -> bool {
        self.role != Role::Embedded
    }

    /// What this control plane does.
    #[must_use]
    pub fn role(&self) -> Role {
        self.role
    }

    /// The etcd revision of the newest actor record this control plane
    /// wrote (see [`Directory::actors_revision`]); `None` with the embedded
    /// directory.
    #[must_use]
    pub fn actors_revision(&self) -> Option<i64> {
        self.directory.actors_revision()
    }

    /// Every actor's alarm (see [`crate::alarms`]).
    #[must_use]
    pub fn alarms(&self) -> &crate::alarms::scheduler::Scheduler {
        &self.alarms
    }

    /// Starts firing alarms: `pending` is the directory's list.
    fn start_alarms(self: &Arc<Self>, pending: Vec<(String, u64)>) -> Result<(), ApiError> {
        let deliver = crate::alarms::deliver::ControlDeliver::new(self);
        self.alarms.start(pending, deliver)
    }

    /// The metrics registry.
    #[must_use]
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The engine shared by every in-process worker.
    #[must_use]
    pub fn engine(&self) -> &Arc<StasisEngine> {
        &self.engine
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &ServeConfig {
        &self.config
    }

    /// The metrics registry, with the gauges refreshed.
    pub async fn metrics_text(&self) -> String {
        let mut counts: HashMap<&'static str, i64> = HashMap::new();
        let mut held = 0;
        for member in self.members() {
            held += member.api.held_requests();
            for (_, status) in member.statuses().await.unwrap_or_default() {
                *counts.entry(status.state.as_str()).or_default() += 1;
            }
        }
        for state in ActorState::ALL {
            self.metrics
                .actors
                .get_or_create(&StateLabel {
                    state: state.as_str().to_owned(),
                })
                .set(counts.get(state.as_str()).copied().unwrap_or(0));
        }
        self.metrics
            .held_requests
            .set(i64::try_from(held).unwrap_or(i64::MAX));
        self.metrics
            .snapshot_bytes
            .set(i64::try_from(self.store.used_bytes()).unwrap_or(i64::MAX));
        self.metrics.encode()
    }
}
