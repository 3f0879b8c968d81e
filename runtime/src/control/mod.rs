//! The control plane: the directory, the templates, placement of actors on
//! workers, and every operation the admin API offers. It owns the data dir
//! (guarded by its `LOCK` file).
//!
//! Data dir layout (DESIGN.md): `stasis.db`, `LOCK`,
//! `templates/<digest>.wasm`, `cache/` (compiled variants),
//! `snapshots/<actor>/<seq:020>.snap`.

pub mod directory;
pub mod handle;

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;
use stasis_host_api::{Request, Response};

use crate::client::{self, ClientGone};
use crate::error::{ApiError, check_label};
use crate::metrics::{Metrics, StateLabel};
use crate::worker::actor::{ActorState, ActorStatus, ResumeFrom, SnapshotReport};
use crate::worker::{ActorSpec, Worker, WorkerSettings};
use directory::{ActorRow, Directory, TemplateRow};
use handle::{RemoteSpec, WorkerEntry, WorkerKind, WorkerState};
use stasis_core::engine::{Limits, StasisEngine};
use stasis_core::module::{ModuleCache, ModuleError};
use stasis_core::snapshot_files::LocalSnapshotStore;
use stasis_core::snapshot_store::{SnapshotEntry, SnapshotStore};

/// Largest module `template push` accepts, in bytes.
pub const MAX_TEMPLATE_BYTES: usize = 64 << 20;

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

/// A template as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct TemplateInfo {
    /// Name.
    pub name: String,
    /// SHA-256 hex of the module.
    pub digest: String,
    /// Module size in bytes.
    pub bytes: u64,
    /// WASI environment.
    pub env: std::collections::BTreeMap<String, String>,
    /// Actors using it.
    pub actors: usize,
}

/// An actor as the API shows it (docs/api.md, "Actor").
#[derive(Debug, Clone, Serialize)]
pub struct ActorInfo {
    /// Name.
    pub name: String,
    /// Template name.
    pub template: String,
    /// State.
    pub state: ActorState,
    /// Owning worker.
    pub worker: String,
    /// Placement epoch.
    pub epoch: u64,
    /// Newest snapshot.
    pub snapshot: Option<SnapshotEntry>,
    /// All stored snapshots, oldest first.
    pub snapshots: Vec<SnapshotEntry>,
    /// Restores into fresh instances.
    pub resumes: u64,
    /// Last pause, ms.
    pub last_pause_ms: Option<f64>,
    /// Last resume, ms.
    pub last_resume_ms: Option<f64>,
    /// Requests answered by the guest.
    pub requests: u64,
    /// Live linear memory, bytes.
    pub memory_bytes: u64,
    /// Why it failed, or the last trap.
    pub error: Option<String>,
}

/// The answer to a pause or checkpoint: the actor plus the snapshot.
#[derive(Debug, Clone, Serialize)]
pub struct PauseInfo {
    /// The actor after the operation.
    #[serde(flatten)]
    pub actor: ActorInfo,
    /// Size of the newest snapshot, bytes.
    pub snapshot_bytes: u64,
    /// Duration, ms (0 if nothing changed).
    pub duration_ms: f64,
}

/// The answer to a move: the actor on its new worker plus the downtime.
#[derive(Debug, Clone, Serialize)]
pub struct MigrateInfo {
    /// The actor after the move.
    #[serde(flatten)]
    pub actor: ActorInfo,
    /// Time the actor's gate was closed, in milliseconds.
    pub downtime_ms: f64,
    /// The worker it left.
    pub from: String,
}

/// One move of a rebalance or drain.
#[derive(Debug, Clone, Serialize)]
pub struct Move {
    /// The actor.
    pub actor: String,
    /// Source worker.
    pub from: String,
    /// Target worker.
    pub to: String,
    /// Gate closed → open, ms (absent if the move failed).
    pub downtime_ms: Option<f64>,
    /// Why the move failed (it was rolled back).
    pub error: Option<String>,
}

/// The answer to a rebalance.
#[derive(Debug, Clone, Serialize)]
pub struct RebalanceReport {
    /// The moves made.
    pub moves: Vec<Move>,
}

/// A worker as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerInfo {
    /// Name.
    pub name: String,
    /// `in-process`, or the remote address.
    pub address: String,
    /// `ready`, `draining`, `drained` or `lost`.
    pub state: WorkerState,
    /// Actors placed on it.
    pub actors: usize,
    /// Live linear memory of its actors, bytes.
    pub memory_bytes: u64,
}

/// What `stasis gc` reclaimed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GcReport {
    /// Files deleted.
    pub removed_files: u64,
    /// Bytes freed.
    pub reclaimed_bytes: u64,
    /// Bytes left in the snapshot folder.
    pub snapshot_bytes: u64,
}

/// Where an actor lives, and the gate its requests pass.
#[derive(Debug, Clone)]
struct Placement {
    worker: String,
    /// Which admission of that worker: a remote worker that joins again
    /// comes back empty, so placements on its earlier incarnation wait for
    /// re-placement.
    incarnation: u64,
    template: String,
    epoch: u64,
    /// Requests hold a read guard while they are forwarded; a move holds
    /// the write guard from capture to the placement switch, so no request
    /// reaches the source after its capture (the router-side barrier).
    gate: Arc<tokio::sync::RwLock<()>>,
    /// Requests waiting at the closed gate; past `--max-held` more are
    /// refused (503), as at a full mailbox.
    held: Arc<AtomicUsize>,
    migrating: bool,
    /// Why the actor cannot be hosted at all (e.g. its template file is
    /// unreadable); it is `failed` with this reason.
    problem: Option<String>,
}

/// A request counted among those waiting at an actor's closed gate, for
/// as long as it waits.
struct HeldAtGate<'a>(&'a AtomicUsize);

impl<'a> HeldAtGate<'a> {
    /// Counts one more waiting request.
    ///
    /// # Errors
    /// 503 if `max_held` requests already wait.
    fn enter(count: &'a AtomicUsize, max_held: usize, actor: &str) -> Result<Self, ApiError> {
        let before = count.fetch_add(1, Ordering::SeqCst);
        let held = Self(count);
        if before >= max_held {
            return Err(ApiError::unavailable(format!(
                "actor {actor} is moving and already holds {max_held} requests (--max-held)"
            )));
        }
        Ok(held)
    }
}

impl Drop for HeldAtGate<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The control plane of one `stasis serve` process.
pub struct ControlPlane {
    data_dir: PathBuf,
    directory: Directory,
    engine: Arc<StasisEngine>,
    cache: ModuleCache,
    store: Arc<dyn SnapshotStore>,
    workers: RwLock<Vec<Arc<WorkerEntry>>>,
    placement: RwLock<HashMap<String, Placement>>,
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
        let directory = Directory::open(&dir.join("stasis.db")).context("opening stasis.db")?;
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
        let cache = ModuleCache::new(
            engine.engine().clone(),
            engine.linker().clone(),
            Some(dir.join("cache")),
        );
        let store: Arc<dyn SnapshotStore> = Arc::new(LocalSnapshotStore::open(
            dir.join("snapshots"),
            config.snapshot_quota,
        )?);
        let workers = (1..=config.workers)
            .map(|i| {
                Arc::new(WorkerEntry::local(Worker::new(
                    &format!("worker-{i}"),
                    engine.clone(),
                    store.clone(),
                    metrics.clone(),
                    config.worker.clone(),
                    None,
                )))
            })
            .collect();
        let control = Arc::new(Self {
            data_dir: dir.clone(),
            directory,
            engine,
            cache,
            store,
            workers: RwLock::new(workers),
            placement: RwLock::new(HashMap::new()),
            metrics,
            config,
            ops: tokio::sync::Mutex::new(()),
            pending: std::sync::Mutex::default(),
            incarnations: AtomicU64::new(1),
            _lock: lock,
        });
        control.recover()?;
        Ok(control)
    }

    /// Re-places every actor of the directory: on its recorded worker if that
    /// is an in-process worker of this run, else on the least-loaded one.
    /// Actors recorded on remote workers come back here too: a restarted
    /// control plane re-admits remote workers only as new, empty ones.
    fn recover(&self) -> anyhow::Result<()> {
        for row in self.directory.actors()? {
            let template = self.directory.template(&row.template)?.with_context(|| {
                format!("actor {} names missing template {}", row.name, row.template)
            })?;
            let Some(entry) = self.worker(&row.worker).or_else(|| self.least_loaded()) else {
                tracing::warn!(actor = %row.name, "no worker can host it (--workers 0); it waits for one to join");
                self.placement_mut().insert(
                    row.name.clone(),
                    self.new_placement("", 0, &row.template, row.epoch),
                );
                continue;
            };
            let WorkerKind::Local(worker) = &entry.kind else {
                continue;
            };
            let epoch = if entry.name == row.worker {
                row.epoch
            } else {
                row.epoch + 1
            };
            let spec = match self.local_spec(&row.name, &template) {
                Ok(spec) => spec,
                Err(e) => {
                    // One broken template must not keep the other actors down.
                    tracing::error!(actor = %row.name, "cannot load its template: {e}");
                    let mut placement = self.new_placement("", 0, &row.template, row.epoch);
                    placement.problem = Some(format!("template {}: {e}", row.template));
                    self.placement_mut().insert(row.name.clone(), placement);
                    continue;
                }
            };
            let status = worker.adopt(&spec, epoch);
            if entry.name != row.worker {
                self.directory.place_actor(&row.name, &entry.name, epoch)?;
            }
            tracing::info!(actor = %row.name, worker = %entry.name, state = status.state.as_str(), "actor recovered");
            self.placement_mut().insert(
                row.name.clone(),
                self.new_placement(&entry.name, entry.incarnation, &row.template, epoch),
            );
        }
        Ok(())
    }

    fn new_placement(
        &self,
        worker: &str,
        incarnation: u64,
        template: &str,
        epoch: u64,
    ) -> Placement {
        Placement {
            worker: worker.to_owned(),
            incarnation,
            template: template.to_owned(),
            epoch,
            gate: Arc::default(),
            held: Arc::default(),
            migrating: false,
            problem: None,
        }
    }

    fn local_spec(&self, name: &str, template: &TemplateRow) -> Result<ActorSpec, ApiError> {
        let compiled = match self.cache.loaded(&template.digest) {
            Some(compiled) => compiled,
            None => {
                let path = self.template_path(&template.digest);
                let bytes = std::fs::read(&path)
                    .map_err(|e| ApiError::internal(format!("reading {}: {e}", path.display())))?;
                self.cache.load(&bytes).map_err(ApiError::internal)?
            }
        };
        Ok(ActorSpec {
            name: name.to_owned(),
            template: compiled,
            env: template.env.clone(),
        })
    }

    fn remote_spec(template: &TemplateRow, epoch: u64) -> RemoteSpec {
        RemoteSpec {
            digest: template.digest.clone(),
            env: template.env.clone(),
            epoch,
            seq: 0,
            resume: false,
        }
    }

    fn template_path(&self, digest: &str) -> PathBuf {
        self.data_dir
            .join("templates")
            .join(format!("{digest}.wasm"))
    }

    fn template_row(&self, name: &str) -> Result<TemplateRow, ApiError> {
        self.directory
            .template(name)?
            .ok_or_else(|| ApiError::not_found(format!("no template named {name:?}")))
    }

    fn placement_mut(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Placement>> {
        self.placement.write().unwrap_or_else(|p| p.into_inner())
    }

    fn placements(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Placement>> {
        self.placement.read().unwrap_or_else(|p| p.into_inner())
    }

    fn placement_of(&self, actor: &str) -> Result<Placement, ApiError> {
        self.placements()
            .get(actor)
            .cloned()
            .ok_or_else(|| ApiError::not_found(format!("no actor named {actor:?}")))
    }

    fn worker_list(&self) -> Vec<Arc<WorkerEntry>> {
        self.workers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn worker(&self, name: &str) -> Option<Arc<WorkerEntry>> {
        self.worker_list().into_iter().find(|w| w.name == name)
    }

    fn actor_counts(&self) -> HashMap<String, usize> {
        let placements = self.placements();
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for p in placements.values() {
            *counts.entry(p.worker.as_str()).or_default() += 1;
        }
        counts.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
    }

    /// The ready worker with the fewest actors. Counting scans every
    /// placement, so it is skipped when only one worker is ready.
    fn least_loaded(&self) -> Option<Arc<WorkerEntry>> {
        let mut ready: Vec<Arc<WorkerEntry>> = self
            .worker_list()
            .into_iter()
            .filter(|w| w.state() == WorkerState::Ready)
            .collect();
        if ready.len() <= 1 {
            return ready.pop();
        }
        let counts = self.actor_counts();
        ready
            .into_iter()
            .min_by_key(|w| counts.get(&w.name).copied().unwrap_or(0))
    }

    /// Whether actor `name` exists.
    #[must_use]
    pub fn has_actor(&self, name: &str) -> bool {
        self.placements().contains_key(name)
    }

    /// Counts one request answered by actor `name` in the metrics, under
    /// its template (and under its name with `--metrics-per-actor`). Not
    /// counted if the actor is gone: the placement is read while counting,
    /// and [`ControlPlane::delete_actor`] removes it before the actor's
    /// series, so no series outlives its actor.
    pub fn count_request(&self, name: &str, status: u16) {
        let placements = self.placements();
        if let Some(placement) = placements.get(name) {
            self.metrics.request(&placement.template, name, status);
        }
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
        for entry in self.worker_list() {
            if let WorkerKind::Local(w) = &entry.kind {
                held += w.held_requests();
            }
            for (_, status) in entry.statuses().await {
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

    // ---- templates -------------------------------------------------------

    /// Registers `bytes` as template `name` with WASI environment `env`.
    /// Returns the template and whether it was new (`false`: the same name,
    /// bytes and env were already registered; nothing changed).
    ///
    /// # Errors
    /// 400 bad name, env or malformed wasm; 409 the name holds other bytes
    /// or env; 413 too large; 422 the module is refused (the message names
    /// the feature). Nothing is registered on error.
    pub async fn push_template(
        &self,
        name: &str,
        bytes: Vec<u8>,
        env: Vec<(String, String)>,
    ) -> Result<(TemplateInfo, bool), ApiError> {
        check_label("template", name)?;
        if bytes.len() > MAX_TEMPLATE_BYTES {
            return Err(ApiError::new(
                413,
                format!("module larger than {MAX_TEMPLATE_BYTES} bytes"),
            ));
        }
        for (k, v) in &env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(ApiError::bad_request(format!(
                    "invalid environment variable name {k:?}"
                )));
            }
            if v.contains('\0') {
                return Err(ApiError::bad_request(format!(
                    "environment variable {k} holds a NUL byte"
                )));
            }
        }
        // The environment is a set of variables: order does not matter.
        let mut env = env;
        env.sort();
        let _guard = self.ops.lock().await;
        let digest = hex::encode(stasis_core::module::digest(&bytes));
        if let Some(existing) = self.directory.template(name)? {
            if existing.digest == digest && existing.env == env {
                return Ok((self.template_info(existing), false));
            }
            return Err(ApiError::conflict(format!(
                "template {name} exists with {}; delete it first or push under another name",
                if existing.digest == digest {
                    "another environment"
                } else {
                    "other module bytes"
                }
            )));
        }
        // Cranelift takes tens of ms: keep it off the async workers' backs.
        tokio::task::block_in_place(|| self.cache.load(&bytes)).map_err(|e| match e {
            ModuleError::Malformed(_) => ApiError::bad_request(e.to_string()),
            _ => ApiError::new(422, e.to_string()),
        })?;
        let path = self.template_path(&digest);
        write_atomically(&path, &bytes).map_err(ApiError::internal)?;
        let row = TemplateRow {
            name: name.to_owned(),
            digest,
            bytes: bytes.len() as u64,
            env,
        };
        self.directory.insert_template(&row)?;
        tracing::info!(template = name, digest = %row.digest, "template pushed");
        Ok((self.template_info(row), true))
    }

    fn template_info(&self, row: TemplateRow) -> TemplateInfo {
        let actors = self
            .placements()
            .values()
            .filter(|p| p.template == row.name)
            .count();
        TemplateInfo {
            name: row.name,
            digest: row.digest,
            bytes: row.bytes,
            env: row.env.into_iter().collect(),
            actors,
        }
    }

    /// All templates, by name.
    ///
    /// # Errors
    /// 500 on a directory failure.
    pub fn templates(&self) -> Result<Vec<TemplateInfo>, ApiError> {
        Ok(self
            .directory
            .templates()?
            .into_iter()
            .map(|t| self.template_info(t))
            .collect())
    }

    /// Template `name`.
    ///
    /// # Errors
    /// 404 if unknown.
    pub fn template(&self, name: &str) -> Result<TemplateInfo, ApiError> {
        Ok(self.template_info(self.template_row(name)?))
    }

    /// The module bytes of the template with `digest` (for remote workers).
    ///
    /// # Errors
    /// 404 if no template has that digest.
    pub fn template_bytes(&self, digest: &str) -> Result<Vec<u8>, ApiError> {
        if !self
            .directory
            .templates()?
            .iter()
            .any(|t| t.digest == digest)
        {
            return Err(ApiError::not_found(format!(
                "no template with digest {digest}"
            )));
        }
        std::fs::read(self.template_path(digest)).map_err(ApiError::internal)
    }

    /// Deletes template `name`.
    ///
    /// # Errors
    /// 404 if unknown; 409 while actors use it.
    pub async fn delete_template(&self, name: &str) -> Result<(), ApiError> {
        let _guard = self.ops.lock().await;
        let row = self.template_row(name)?;
        let mut users: Vec<String> = self
            .placements()
            .iter()
            .filter(|(_, p)| p.template == name)
            .map(|(a, _)| a.clone())
            .collect();
        if !users.is_empty() {
            users.sort();
            return Err(ApiError::conflict(format!(
                "template {name} is used by actor(s) {}; delete them first",
                users.join(", ")
            )));
        }
        self.directory.delete_template(name)?;
        if !self
            .directory
            .templates()?
            .iter()
            .any(|t| t.digest == row.digest)
        {
            let _ = std::fs::remove_file(self.template_path(&row.digest));
        }
        Ok(())
    }

    // ---- actors ----------------------------------------------------------

    /// Creates actor `name` from `template` on the least-loaded worker.
    ///
    /// # Errors
    /// 400 bad name; 404 unknown template; 409 name taken; 503 no worker;
    /// 500/504 if the guest fails during creation.
    pub async fn create_actor(&self, name: &str, template: &str) -> Result<ActorInfo, ApiError> {
        check_label("actor", name)?;
        let _guard = self.ops.lock().await;
        if self.has_actor(name) {
            return Err(ApiError::conflict(format!("actor {name} already exists")));
        }
        let row = self.template_row(template)?;
        let entry = self.least_loaded().ok_or_else(|| {
            ApiError::unavailable("no worker can host actors (serve --workers 0 and none joined)")
        })?;
        let epoch = 1;
        self.lock_pending().insert(name.to_owned());
        let created = entry
            .create(
                || self.local_spec(name, &row),
                Self::remote_spec(&row, epoch),
                name,
            )
            .await;
        self.lock_pending().remove(name);
        if let Err(e) = created {
            let _ = self.store.remove_actor(name);
            return Err(e);
        }
        let actor_row = ActorRow {
            name: name.to_owned(),
            template: template.to_owned(),
            worker: entry.name.clone(),
            epoch,
        };
        if let Err(e) = self.directory.insert_actor(&actor_row) {
            entry.remove(name).await;
            let _ = self.store.remove_actor(name);
            return Err(e);
        }
        self.placement_mut().insert(
            name.to_owned(),
            self.new_placement(&entry.name, entry.incarnation, template, epoch),
        );
        tracing::info!(actor = name, template, worker = %entry.name, "actor created");
        self.actor(name).await
    }

    /// Actor `name`.
    ///
    /// # Errors
    /// 404 if unknown; 503 if its worker cannot be reached.
    pub async fn actor(&self, name: &str) -> Result<ActorInfo, ApiError> {
        let placement = self.placement_of(name)?;
        let status = match (self.entry_of(&placement, name), &placement.problem) {
            (Ok(entry), _) => entry.status(name).await?,
            (Err(_), Some(problem)) => ActorStatus::failed(problem),
            (Err(_), None) => ActorStatus::waiting("waiting for a worker to host it"),
        };
        Ok(ActorInfo {
            name: name.to_owned(),
            template: placement.template,
            state: if placement.migrating {
                ActorState::Migrating
            } else {
                status.state
            },
            worker: placement.worker,
            epoch: placement.epoch,
            snapshot: status.snapshot,
            snapshots: self.store.list(name).unwrap_or_default(),
            resumes: status.resumes,
            last_pause_ms: status.last_pause_ms,
            last_resume_ms: status.last_resume_ms,
            requests: status.requests,
            memory_bytes: status.memory_bytes,
            error: status.error,
        })
    }

    /// All actors, by name (an actor whose worker cannot be reached is left out).
    pub async fn actors(&self) -> Vec<ActorInfo> {
        let mut names: Vec<String> = self.placements().keys().cloned().collect();
        names.sort();
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            if let Ok(info) = self.actor(&name).await {
                out.push(info);
            }
        }
        out
    }

    fn entry_of(&self, placement: &Placement, actor: &str) -> Result<Arc<WorkerEntry>, ApiError> {
        if let Some(problem) = &placement.problem {
            return Err(ApiError::unavailable(format!(
                "actor {actor} failed: {problem}"
            )));
        }
        self.worker(&placement.worker)
            .filter(|w| w.incarnation == placement.incarnation && w.state() != WorkerState::Lost)
            .ok_or_else(|| {
                ApiError::unavailable(format!("actor {actor} waits for a worker to host it"))
            })
    }

    async fn pause_info(&self, name: &str, report: SnapshotReport) -> Result<PauseInfo, ApiError> {
        Ok(PauseInfo {
            actor: self.actor(name).await?,
            snapshot_bytes: report.snapshot_bytes,
            duration_ms: report.duration_ms,
        })
    }

    /// Pauses actor `name` (idempotent).
    ///
    /// # Errors
    /// 404; 409 failed; 507 quota (actor keeps running); 500.
    pub async fn pause(&self, name: &str) -> Result<PauseInfo, ApiError> {
        let placement = self.placement_of(name)?;
        let _gate = placement.gate.read().await;
        let report = self
            .entry_of(&self.placement_of(name)?, name)?
            .pause(name)
            .await?;
        self.pause_info(name, report).await
    }

    /// Checkpoints running actor `name`.
    ///
    /// # Errors
    /// 404; 409 not running; 507 quota; 500.
    pub async fn checkpoint(&self, name: &str) -> Result<PauseInfo, ApiError> {
        let placement = self.placement_of(name)?;
        let _gate = placement.gate.read().await;
        let report = self
            .entry_of(&self.placement_of(name)?, name)?
            .checkpoint(name)
            .await?;
        self.pause_info(name, report).await
    }

    /// Resumes actor `name` from `from`.
    ///
    /// # Errors
    /// 404; 400 unknown snapshot; 503 with the reason if it cannot be restored.
    pub async fn resume(&self, name: &str, from: ResumeFrom) -> Result<ActorInfo, ApiError> {
        let placement = self.placement_of(name)?;
        if let ResumeFrom::Snapshot(seq) = from
            && !self.store.list(name)?.iter().any(|e| e.seq == seq)
        {
            return Err(ApiError::bad_request(format!(
                "actor {name} has no snapshot {seq}"
            )));
        }
        {
            let _gate = placement.gate.read().await;
            let entry = self.entry_of(&self.placement_of(name)?, name)?;
            if let (ResumeFrom::Snapshot(seq), WorkerKind::Remote(_)) = (from, &entry.kind) {
                // The remote worker may not hold that snapshot: ship it.
                let row = self.template_row(&placement.template)?;
                let mut spec = Self::remote_spec(&row, placement.epoch);
                spec.seq = seq;
                let bytes = self.read_snapshot(name, seq).await?;
                entry
                    .install(|| self.local_spec(name, &row), spec, name, bytes)
                    .await?;
            }
            entry.resume(name, from).await?;
        }
        self.actor(name).await
    }

    async fn read_snapshot(&self, actor: &str, seq: u64) -> Result<Vec<u8>, ApiError> {
        let store = self.store.clone();
        let actor = actor.to_owned();
        tokio::task::spawn_blocking(move || store.open_snapshot(&actor, seq).map(|m| m.to_vec()))
            .await
            .map_err(ApiError::internal)?
            .map_err(ApiError::from)
    }

    /// Deletes actor `name` and all its snapshots.
    ///
    /// # Errors
    /// 404 if unknown; 500 if its files cannot be removed.
    pub async fn delete_actor(&self, name: &str) -> Result<(), ApiError> {
        let _guard = self.ops.lock().await;
        let gate = self.placement_of(name)?.gate;
        let _gate = gate.write().await;
        // Re-read under the gate: a move may have finished meanwhile.
        let placement = self.placement_of(name)?;
        self.placement_mut().remove(name);
        if let Some(entry) = self.worker(&placement.worker) {
            entry.remove(name).await;
        }
        // After the placement and the actor's task are gone: nothing counts
        // for it any more.
        self.metrics.forget_actor(name);
        self.directory.delete_actor(name)?;
        self.store.remove_actor(name)?;
        tracing::info!(actor = name, "actor deleted");
        Ok(())
    }

    /// Hands an HTTP request to actor `name`, through its gate: while the
    /// actor moves, the request waits; a call refused for a stale epoch is
    /// sent again to the current owner with the same body. When `gone` is
    /// cancelled first, the request is given up unless the guest runs it
    /// (see [`crate::client`]).
    ///
    /// # Errors
    /// 404 unknown actor; the worker's or guest's failure;
    /// [`crate::client::ABANDONED`] when the client left first.
    pub async fn call(
        &self,
        name: &str,
        request: Request,
        gone: &ClientGone,
    ) -> Result<Response, ApiError> {
        let mut attempts = 0;
        let hold = self.config.worker.hold_timeout;
        loop {
            let Placement { gate, held, .. } = self.placement_of(name)?;
            let _open = match gate.try_read() {
                Ok(open) => open,
                Err(_) => {
                    let _held = HeldAtGate::enter(&held, self.config.worker.max_held, name)?;
                    let open = async {
                        tokio::time::timeout(hold, gate.read()).await.map_err(|_| {
                            ApiError::unavailable(format!(
                                "actor {name} is moving and did not take the request within the hold timeout of {hold:?}"
                            ))
                        })
                    };
                    client::unless_gone(gone, name, open).await?
                }
            };
            let placement = self.placement_of(name)?;
            let entry = self.entry_of(&placement, name)?;
            match entry
                .call(name, placement.epoch, request.clone(), gone)
                .await
            {
                Err(e) if e.status == 421 && attempts < 3 => {
                    attempts += 1;
                    tracing::debug!(actor = name, "retrying on the current owner: {e}");
                }
                other => return other,
            }
        }
    }

    // ---- moves -----------------------------------------------------------

    /// Moves actor `name` to worker `to`: gate closed at the router → capture
    /// on the source (instance kept) → ship → restore on the target →
    /// placement switched durably with epoch + 1 → gate opened to the target
    /// → source instance dropped. Any failure before the switch rolls back:
    /// the actor stays on the source and the held requests are served there.
    ///
    /// # Errors
    /// 404 unknown actor or worker; 409 already there or target not ready;
    /// the failure that caused a rollback (503 for an unreachable target).
    pub async fn migrate(&self, name: &str, to: &str) -> Result<MigrateInfo, ApiError> {
        self.migrate_from(name, None, to)
            .await?
            .ok_or_else(|| ApiError::conflict(format!("actor {name} moved meanwhile")))
    }

    /// [`ControlPlane::migrate`], but only if the actor is still on `from`
    /// once its gate is closed (`Ok(None)` otherwise): rebalances and drains
    /// plan moves ahead and must not move an actor that already moved.
    async fn migrate_from(
        &self,
        name: &str,
        from: Option<&str>,
        to: &str,
    ) -> Result<Option<MigrateInfo>, ApiError> {
        let target = self
            .worker(to)
            .ok_or_else(|| ApiError::not_found(format!("no worker named {to:?}")))?;
        if target.state() != WorkerState::Ready {
            return Err(ApiError::conflict(format!(
                "worker {to} is {}, not ready for actors",
                target.state().as_str()
            )));
        }
        let placement = self.placement_of(name)?;
        if from.is_some_and(|f| f != placement.worker) {
            return Ok(None);
        }
        if placement.worker == to {
            return Err(ApiError::conflict(format!(
                "actor {name} is already on {to}"
            )));
        }
        let gate = placement.gate.clone();
        // New requests wait from the moment the move asks for the gate.
        let started = Instant::now();
        let closed = gate.write().await;
        // Re-read under the gate: an earlier move may have finished meanwhile.
        let placement = self.placement_of(name)?;
        if from.is_some_and(|f| f != placement.worker) {
            return Ok(None);
        }
        if target.state() != WorkerState::Ready {
            return Err(ApiError::conflict(format!(
                "worker {to} stopped taking actors"
            )));
        }
        if placement.worker == to {
            return Err(ApiError::conflict(format!(
                "actor {name} is already on {to}"
            )));
        }
        let source = self.entry_of(&placement, name)?;
        self.set_migrating(name, true);
        let result = self
            .move_under_gate(name, &placement, &source, &target)
            .await;
        self.set_migrating(name, false);
        if let Err(e) = result {
            source.cancel_move(name).await;
            drop(closed);
            tracing::warn!(actor = name, from = %source.name, to, "move rolled back: {e}");
            return Err(ApiError {
                message: format!(
                    "move of {name} to {to} rolled back; it stays on {}: {}",
                    source.name, e.message
                ),
                ..e
            });
        }
        drop(closed);
        let downtime = started.elapsed();
        self.metrics
            .migration_downtime_seconds
            .observe(downtime.as_secs_f64());
        source.remove(name).await;
        tracing::info!(actor = name, from = %source.name, to, downtime_ms = downtime.as_secs_f64() * 1e3, "actor moved");
        Ok(Some(MigrateInfo {
            actor: self.actor(name).await?,
            downtime_ms: downtime.as_secs_f64() * 1e3,
            from: source.name.clone(),
        }))
    }

    fn set_migrating(&self, name: &str, migrating: bool) {
        if let Some(p) = self.placement_mut().get_mut(name) {
            p.migrating = migrating;
        }
    }

    async fn move_under_gate(
        &self,
        name: &str,
        placement: &Placement,
        source: &WorkerEntry,
        target: &WorkerEntry,
    ) -> Result<(), ApiError> {
        let row = self.template_row(&placement.template)?;
        let captured = source.capture(name).await?;
        // The bytes are verified again on arrival (checksum and all).
        let epoch = placement.epoch + 1;
        let mut spec = Self::remote_spec(&row, epoch);
        spec.seq = captured.seq;
        // A live actor is restored on the target at once; a paused one
        // stays paused there.
        spec.resume = captured.live;
        if let Err(e) = target
            .install(|| self.local_spec(name, &row), spec, name, captured.bytes)
            .await
        {
            target.remove(name).await;
            return Err(e);
        }
        if let Err(e) = self.directory.place_actor(name, &target.name, epoch) {
            target.remove(name).await;
            return Err(e);
        }
        if let Some(p) = self.placement_mut().get_mut(name) {
            p.worker = target.name.clone();
            p.incarnation = target.incarnation;
            p.epoch = epoch;
        }
        Ok(())
    }

    /// Evens out actors across ready workers (by count, or by memory with
    /// `--rebalance-by memory`), running at most `--max-concurrent-moves`
    /// moves at once.
    pub async fn rebalance(self: &Arc<Self>) -> RebalanceReport {
        let ready: Vec<Arc<WorkerEntry>> = self
            .worker_list()
            .into_iter()
            .filter(|w| w.state() == WorkerState::Ready)
            .collect();
        if ready.len() < 2 {
            return RebalanceReport { moves: Vec::new() };
        }
        // Weight of each actor: 1, or its memory.
        let mut load: HashMap<String, Vec<(String, u64)>> =
            ready.iter().map(|w| (w.name.clone(), Vec::new())).collect();
        let statuses: HashMap<String, ActorStatus> = {
            let mut all = HashMap::new();
            for w in &ready {
                all.extend(w.statuses().await);
            }
            all
        };
        for (actor, p) in self.placements().iter() {
            if let Some(list) = load.get_mut(&p.worker) {
                let weight = match self.config.rebalance_by {
                    RebalanceBy::Count => 1,
                    RebalanceBy::Memory => statuses.get(actor).map_or(0, |s| s.memory_bytes).max(1),
                };
                list.push((actor.clone(), weight));
            }
        }
        let mut plan = Vec::new();
        loop {
            let total = |l: &Vec<(String, u64)>| l.iter().map(|(_, w)| *w).sum::<u64>();
            let (max_w, max_l) = load
                .iter()
                .max_by_key(|(_, l)| total(l))
                .map(|(k, l)| (k.clone(), total(l)))
                .unwrap_or_default();
            let (min_w, min_l) = load
                .iter()
                .min_by_key(|(_, l)| total(l))
                .map(|(k, l)| (k.clone(), total(l)))
                .unwrap_or_default();
            let gap = max_l.saturating_sub(min_l);
            // Move the largest actor that narrows the gap.
            let Some(pos) = load[&max_w]
                .iter()
                .enumerate()
                .filter(|(_, (_, w))| *w < gap)
                .max_by_key(|(_, (_, w))| *w)
                .map(|(i, _)| i)
            else {
                break;
            };
            let item = load.get_mut(&max_w).map(|l| l.remove(pos));
            let Some(item) = item else { break };
            plan.push((item.0.clone(), max_w.clone(), min_w.clone()));
            if let Some(l) = load.get_mut(&min_w) {
                l.push(item);
            }
        }
        let moves = self.run_moves(plan).await;
        RebalanceReport { moves }
    }

    async fn run_moves(self: &Arc<Self>, plan: Vec<(String, String, String)>) -> Vec<Move> {
        let limit = Arc::new(tokio::sync::Semaphore::new(
            self.config.max_concurrent_moves.max(1),
        ));
        let mut tasks = tokio::task::JoinSet::new();
        for (actor, from, to) in plan {
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
                        error: Some(e.message),
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
    /// actors).
    pub async fn drain(self: &Arc<Self>, name: &str) -> Result<WorkerInfo, ApiError> {
        let entry = self
            .worker(name)
            .ok_or_else(|| ApiError::not_found(format!("no worker named {name:?}")))?;
        if entry.state() == WorkerState::Lost {
            return Err(ApiError::conflict(format!("worker {name} is lost")));
        }
        entry.set_state(WorkerState::Draining);
        // Moves planned before the drain began may still land here: go
        // round until nothing is left.
        for _ in 0..10 {
            if entry.state() != WorkerState::Draining {
                return Err(ApiError::conflict(format!(
                    "drain of {name} stopped: the worker is {} now",
                    entry.state().as_str()
                )));
            }
            let actors: Vec<String> = self
                .placements()
                .iter()
                .filter(|(_, p)| p.worker == name)
                .map(|(a, _)| a.clone())
                .collect();
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
            let mut plan = Vec::new();
            let mut counts = self.actor_counts();
            for actor in actors {
                let target = self
                    .worker_list()
                    .into_iter()
                    .filter(|w| w.state() == WorkerState::Ready && w.name != name)
                    .min_by_key(|w| counts.get(&w.name).copied().unwrap_or(0))
                    .ok_or_else(|| {
                        ApiError::unavailable(format!("no other ready worker to drain {name} to"))
                    })?;
                *counts.entry(target.name.clone()).or_default() += 1;
                plan.push((actor, name.to_owned(), target.name.clone()));
            }
            let failed: Vec<String> = self
                .run_moves(plan)
                .await
                .into_iter()
                .filter_map(|m| m.error.map(|e| format!("{}: {e}", m.actor)))
                .collect();
            if !failed.is_empty() {
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
            .worker(name)
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

    // ---- remote workers --------------------------------------------------

    /// Admits remote worker `name` at `address` (`host:port`), or re-admits
    /// it as a new, empty worker; then rebalances in the background.
    ///
    /// # Errors
    /// 400 bad name; 409 the name is an in-process worker's.
    pub fn join(self: &Arc<Self>, name: &str, address: &str) -> Result<(), ApiError> {
        check_label("worker", name)?;
        let mut workers = self.workers.write().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = workers.iter().find(|w| w.name == name)
            && matches!(existing.kind, WorkerKind::Local(_))
        {
            return Err(ApiError::conflict(format!(
                "worker name {name} is taken by an in-process worker"
            )));
        }
        // A worker always joins empty (a new process, or one that dropped
        // its actors): its earlier incarnation's actors are re-placed.
        workers.retain(|w| w.name != name);
        let incarnation = self.incarnations.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(WorkerEntry::remote(
            name,
            address,
            self.config.admin_token.clone(),
            incarnation,
        ));
        workers.push(entry);
        drop(workers);
        tracing::info!(worker = name, address, "worker joined");
        let control = self.clone();
        tokio::spawn(async move {
            control.place_waiting().await;
            let report = control.rebalance().await;
            tracing::info!(moves = report.moves.len(), "rebalanced after a join");
        });
        Ok(())
    }

    /// Records a heartbeat of remote worker `name`.
    ///
    /// # Errors
    /// 404 if unknown (it must join again); 410 if it was declared lost
    /// (it must drop its actors and join again).
    pub fn heartbeat(&self, name: &str) -> Result<(), ApiError> {
        let entry = self
            .worker(name)
            .ok_or_else(|| ApiError::not_found(format!("no worker named {name:?}; join again")))?;
        if entry.state() == WorkerState::Lost {
            return Err(ApiError::new(
                410,
                format!("worker {name} was declared lost; drop every actor and join again"),
            ));
        }
        entry.heartbeat();
        Ok(())
    }

    /// Stores snapshot `seq` of `actor` streamed by a remote worker, after
    /// verifying it (length, magic, version, checksum, header). Durable on
    /// return; retention applies.
    ///
    /// # Errors
    /// 404 unknown actor; 422 it does not verify; 507 quota; 500.
    pub async fn receive_snapshot(
        &self,
        actor: &str,
        seq: u64,
        bytes: Vec<u8>,
    ) -> Result<(), ApiError> {
        if !self.has_actor(actor) && !self.lock_pending().contains(actor) {
            return Err(ApiError::not_found(format!("no actor named {actor:?}")));
        }
        stasis_core::snapshot::verify_header(&bytes)
            .map_err(|e| ApiError::new(422, format!("snapshot {seq} of {actor}: {e}")))?;
        let store = self.store.clone();
        let keep = self.config.worker.actor.keep_snapshots;
        let actor = actor.to_owned();
        tokio::task::spawn_blocking(move || {
            store.write(&actor, seq, &bytes)?;
            store.retain(&actor, keep)
        })
        .await
        .map_err(ApiError::internal)??;
        Ok(())
    }

    /// Actors being created: not placed yet, but a remote worker already
    /// streams their seq-0 snapshot.
    fn lock_pending(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Places actors that wait for a worker (e.g. after a restart with
    /// `--workers 0`) on the least-loaded ready workers, paused.
    async fn place_waiting(self: &Arc<Self>) {
        let waiting: Vec<(String, Placement)> = self
            .placements()
            .iter()
            .filter(|(a, p)| p.problem.is_none() && self.entry_of(p, a).is_err())
            .map(|(a, p)| (a.clone(), p.clone()))
            .collect();
        // Each in its own task: one actor stuck behind its gate (a call to a
        // frozen worker) must not hold up the others.
        let mut tasks = tokio::task::JoinSet::new();
        for (actor, placement) in waiting {
            let control = self.clone();
            tasks.spawn(async move {
                if let Err(e) = control.replace(&actor, &placement).await {
                    tracing::error!(actor, "could not place: {e}");
                }
            });
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Puts `actor` on the least-loaded ready worker, paused at its newest
    /// snapshot in this data dir, with epoch + 1.
    async fn replace(&self, actor: &str, placement: &Placement) -> Result<(), ApiError> {
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
        match &target.kind {
            WorkerKind::Local(w) => {
                w.adopt(&self.local_spec(actor, &row)?, epoch);
            }
            WorkerKind::Remote(_) => {
                let mut spec = Self::remote_spec(&row, epoch);
                spec.seq = newest.seq;
                let bytes = self.read_snapshot(actor, newest.seq).await?;
                target
                    .install(|| self.local_spec(actor, &row), spec, actor, bytes)
                    .await?;
            }
        }
        self.directory.place_actor(actor, &target.name, epoch)?;
        if let Some(p) = self.placement_mut().get_mut(actor) {
            p.worker = target.name.clone();
            p.incarnation = target.incarnation;
            p.epoch = epoch;
        }
        tracing::info!(actor, worker = %target.name, seq = newest.seq, "actor re-placed from its newest snapshot");
        Ok(())
    }

    /// Declares remote workers silent for twice the heartbeat timeout lost
    /// and re-places their actors from their newest snapshots.
    pub async fn run_failure_detector(self: Arc<Self>) {
        let timeout = self.config.heartbeat_timeout;
        loop {
            tokio::time::sleep(timeout / 4).await;
            for entry in self.worker_list() {
                if matches!(entry.kind, WorkerKind::Local(_))
                    || matches!(entry.state(), WorkerState::Lost)
                    || entry.silence() < timeout * 2
                {
                    continue;
                }
                if entry.state() == WorkerState::Drained {
                    // It left cleanly (SIGTERM drains first) and holds nothing.
                    tracing::info!(worker = %entry.name, "drained worker gone; forgetting it");
                    self.workers
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .retain(|w| !(w.name == entry.name && w.incarnation == entry.incarnation));
                    continue;
                }
                tracing::warn!(worker = %entry.name, "no heartbeat for {:?}; declaring it lost", entry.silence());
                entry.set_state(WorkerState::Lost);
                let control = self.clone();
                tokio::spawn(async move { control.place_waiting().await });
            }
        }
    }

    // ---- workers and housekeeping ---------------------------------------

    async fn worker_info(&self, entry: &WorkerEntry) -> Result<WorkerInfo, ApiError> {
        let statuses = entry.statuses().await;
        let actors = self
            .placements()
            .values()
            .filter(|p| p.worker == entry.name)
            .count();
        Ok(WorkerInfo {
            name: entry.name.clone(),
            address: entry.address(),
            state: entry.state(),
            actors,
            memory_bytes: statuses.iter().map(|(_, s)| s.memory_bytes).sum(),
        })
    }

    /// Every worker.
    pub async fn workers(&self) -> Vec<WorkerInfo> {
        let mut out = Vec::new();
        for entry in self.worker_list() {
            if let Ok(info) = self.worker_info(&entry).await {
                out.push(info);
            }
        }
        out
    }

    /// Applies retention to every actor and removes snapshot folders of
    /// actors the directory does not know.
    ///
    /// # Errors
    /// 500 if the snapshot folder cannot be read.
    pub async fn gc(&self) -> Result<GcReport, ApiError> {
        let _guard = self.ops.lock().await;
        let mut report = GcReport::default();
        let known: std::collections::HashSet<String> = self.placements().keys().cloned().collect();
        let root = self.data_dir.join("snapshots");
        let entries = std::fs::read_dir(&root).map_err(ApiError::internal)?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let list = self.store.list(&name)?;
            if known.contains(&name) {
                let keep = self.config.worker.actor.keep_snapshots;
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

    /// Pauses every running actor (graceful shutdown): afterwards every
    /// actor's newest snapshot holds its latest state.
    pub async fn pause_all(&self) {
        let mut tasks = tokio::task::JoinSet::new();
        for entry in self.worker_list() {
            for (name, status) in entry.statuses().await {
                if status.state == ActorState::Running {
                    let entry = entry.clone();
                    tasks.spawn(async move {
                        if let Err(e) = entry.pause(&name).await {
                            tracing::error!(actor = %name, "pause at shutdown failed: {e}");
                        }
                    });
                }
            }
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Runs the periodic duties until the process ends: pausing actors idle
    /// past `--idle-timeout` and checkpointing running ones every
    /// `--checkpoint-interval`.
    pub async fn run_housekeeping(self: Arc<Self>) {
        let idle = self.config.idle_timeout;
        let every = self.config.checkpoint_interval;
        if idle.is_none() && every.is_none() {
            return;
        }
        let tick = [idle.map(|d| d / 4), every]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(Duration::from_secs(1))
            .clamp(Duration::from_millis(50), Duration::from_secs(1));
        let mut last_checkpoint = Instant::now();
        loop {
            tokio::time::sleep(tick).await;
            let checkpoint_due = every.is_some_and(|e| last_checkpoint.elapsed() >= e);
            if checkpoint_due {
                last_checkpoint = Instant::now();
            }
            for entry in self.worker_list() {
                let WorkerKind::Local(worker) = &entry.kind else {
                    continue;
                };
                for (name, status) in worker.statuses() {
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
                    } else if checkpoint_due && let Err(e) = worker.checkpoint(&name).await {
                        tracing::warn!(actor = %name, "checkpoint failed: {e}");
                    }
                }
            }
        }
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}
