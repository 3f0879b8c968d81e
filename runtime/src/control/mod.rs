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
//! - [`views`]: what the API shows.
//!
//! Data dir layout (DESIGN.md): `stasis.db`, `LOCK`,
//! `templates/<digest>.wasm`, `cache/` (compiled variants),
//! `snapshots/<actor>/<seq:020>.snap`.

pub mod actors;
pub mod balance;
pub mod directory;
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
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;

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
        }
    }
}

/// The control plane of one `stasis serve` process.
pub struct ControlPlane {
    directory: Arc<dyn Directory>,
    engine: Arc<StasisEngine>,
    templates: Arc<TemplateDir>,
    store: Arc<dyn SnapshotStore>,
    members: RwLock<Vec<Arc<Member>>>,
    placements: RwLock<HashMap<String, Placement>>,
    metrics: Arc<Metrics>,
    config: ServeConfig,
    /// Serialises operations that change the directory's set of names.
    ops: tokio::sync::Mutex<()>,
    pending: std::sync::Mutex<std::collections::HashSet<String>>,
    incarnations: AtomicU64,
    _lock: File,
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
        let templates = Arc::new(TemplateDir::new(
            ModuleCache::new(
                engine.engine().clone(),
                engine.linker().clone(),
                Some(dir.join("cache")),
            ),
            dir.join("templates"),
            None,
        ));
        let store: Arc<dyn SnapshotStore> = Arc::new(LocalSnapshotStore::open(
            dir.join("snapshots"),
            config.snapshot_quota,
        )?);
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
        let control = Arc::new(Self {
            directory: Arc::new(directory),
            engine,
            templates,
            store,
            members: RwLock::new(members),
            placements: RwLock::new(HashMap::new()),
            metrics,
            config,
            ops: tokio::sync::Mutex::new(()),
            pending: std::sync::Mutex::default(),
            incarnations: AtomicU64::new(1),
            _lock: lock,
        });
        control.recover(&locals)?;
        Ok(control)
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
