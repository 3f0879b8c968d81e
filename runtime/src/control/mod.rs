//! The control plane: the directory, the templates, placement of actors on
//! workers, and every operation the admin API offers. It owns the data dir
//! (guarded by its `LOCK` file).
//!
//! Data dir layout (DESIGN.md): `stasis.db`, `LOCK`,
//! `templates/<digest>.wasm`, `cache/` (compiled variants),
//! `snapshots/<actor>/<seq:020>.snap`.

pub mod directory;

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use serde::Serialize;
use stasis_host_api::{Request, Response};

use crate::engine::{Limits, StasisEngine};
use crate::error::{ApiError, check_label};
use crate::metrics::{Metrics, StateLabel};
use crate::module::{ModuleCache, ModuleError, Template};
use crate::store::{SnapshotEntry, SnapshotStore};
use crate::worker::actor::{ActorState, ResumeFrom, SnapshotReport};
use crate::worker::{ActorSpec, Worker, WorkerSettings};
use directory::{ActorRow, Directory, TemplateRow};

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

/// A worker as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerInfo {
    /// Name.
    pub name: String,
    /// `in-process`, or the remote address.
    pub address: String,
    /// `ready`, `draining`, `drained` or `lost`.
    pub state: String,
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

#[derive(Debug, Clone)]
struct Placement {
    worker: usize,
    template: String,
    epoch: u64,
}

/// The control plane of one `stasis serve` process.
pub struct ControlPlane {
    data_dir: PathBuf,
    directory: Directory,
    engine: Arc<StasisEngine>,
    cache: ModuleCache,
    store: Arc<SnapshotStore>,
    workers: Vec<Arc<Worker>>,
    placement: RwLock<HashMap<String, Placement>>,
    metrics: Arc<Metrics>,
    config: ServeConfig,
    /// Serialises operations that change the directory.
    ops: tokio::sync::Mutex<()>,
    _lock: File,
}

fn lock_data_dir(dir: &Path) -> anyhow::Result<File> {
    let path = dir.join("LOCK");
    let mut file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            anyhow::bail!(
                "data dir {} is in use by another stasis process (pid {}); stop it or use another --data-dir",
                dir.display(),
                holder.trim()
            );
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("locking {}", path.display()));
        }
    }
    file.set_len(0)?;
    writeln!(file, "{}", std::process::id())?;
    Ok(file)
}

impl ControlPlane {
    /// Opens the data dir (creating it), takes its `LOCK`, starts the
    /// workers and brings every actor of the directory back, `paused`
    /// (resumed by its next request) or `failed` with the reason.
    ///
    /// # Errors
    /// If the data dir is locked by another process or cannot be opened.
    pub fn open(config: ServeConfig, metrics: Arc<Metrics>) -> anyhow::Result<Arc<Self>> {
        let dir = &config.data_dir;
        std::fs::create_dir_all(dir.join("templates"))
            .with_context(|| format!("creating data dir {}", dir.display()))?;
        std::fs::create_dir_all(dir.join("cache"))?;
        let lock = lock_data_dir(dir)?;
        let directory = Directory::open(&dir.join("stasis.db")).context("opening stasis.db")?;
        let engine = StasisEngine::new(config.limits)?;
        let cache = ModuleCache::new(
            engine.engine().clone(),
            engine.linker().clone(),
            Some(dir.join("cache")),
        );
        let store = Arc::new(SnapshotStore::open(
            dir.join("snapshots"),
            config.snapshot_quota,
        )?);
        let workers = (1..=config.workers)
            .map(|i| {
                Worker::new(
                    &format!("worker-{i}"),
                    engine.clone(),
                    store.clone(),
                    metrics.clone(),
                    config.worker.clone(),
                )
            })
            .collect();
        let control = Arc::new(Self {
            data_dir: dir.clone(),
            directory,
            engine,
            cache,
            store,
            workers,
            placement: RwLock::new(HashMap::new()),
            metrics,
            config,
            ops: tokio::sync::Mutex::new(()),
            _lock: lock,
        });
        control.recover()?;
        Ok(control)
    }

    fn recover(&self) -> anyhow::Result<()> {
        let templates: HashMap<String, TemplateRow> = self
            .directory
            .templates()?
            .into_iter()
            .map(|t| (t.name.clone(), t))
            .collect();
        for row in self.directory.actors()? {
            let Some(worker) = self
                .worker_index(&row.worker)
                .or_else(|| self.least_loaded())
            else {
                tracing::warn!(actor = %row.name, "no worker to host it (--workers 0)");
                continue;
            };
            let template = templates.get(&row.template).with_context(|| {
                format!("actor {} names missing template {}", row.name, row.template)
            })?;
            let compiled = self.compiled(template)?;
            let spec = ActorSpec {
                name: row.name.clone(),
                template: compiled,
                env: template.env.clone(),
            };
            let status = self.workers[worker].adopt(&spec);
            if self.workers[worker].name() != row.worker {
                self.directory.place_actor(
                    &row.name,
                    self.workers[worker].name(),
                    row.epoch + 1,
                )?;
            }
            tracing::info!(actor = %row.name, worker = self.workers[worker].name(), state = status.state.as_str(), "actor recovered");
            self.placement_mut().insert(
                row.name.clone(),
                Placement {
                    worker,
                    template: row.template.clone(),
                    epoch: row.epoch,
                },
            );
        }
        Ok(())
    }

    fn compiled(&self, template: &TemplateRow) -> anyhow::Result<Arc<Template>> {
        let path = self.template_path(&template.digest);
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        Ok(self.cache.load(&bytes)?)
    }

    fn template_path(&self, digest: &str) -> PathBuf {
        self.data_dir
            .join("templates")
            .join(format!("{digest}.wasm"))
    }

    fn placement_mut(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Placement>> {
        self.placement.write().unwrap_or_else(|p| p.into_inner())
    }

    fn placement_of(&self, actor: &str) -> Result<Placement, ApiError> {
        self.placement
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(actor)
            .cloned()
            .ok_or_else(|| ApiError::not_found(format!("no actor named {actor:?}")))
    }

    fn worker_index(&self, name: &str) -> Option<usize> {
        self.workers.iter().position(|w| w.name() == name)
    }

    fn least_loaded(&self) -> Option<usize> {
        let placement = self.placement.read().unwrap_or_else(|p| p.into_inner());
        let mut counts = vec![0usize; self.workers.len()];
        for p in placement.values() {
            counts[p.worker] += 1;
        }
        counts
            .iter()
            .enumerate()
            .min_by_key(|(_, c)| **c)
            .map(|(i, _)| i)
    }

    /// Whether actor `name` exists.
    #[must_use]
    pub fn has_actor(&self, name: &str) -> bool {
        self.placement
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(name)
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

    /// The metrics registry, with the gauges refreshed.
    #[must_use]
    pub fn metrics_text(&self) -> String {
        let mut counts: HashMap<&'static str, i64> = HashMap::new();
        let mut held = 0;
        for worker in &self.workers {
            held += worker.held_requests();
            for (_, status) in worker.statuses() {
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
        for (k, _) in &env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(ApiError::bad_request(format!(
                    "invalid environment variable name {k:?}"
                )));
            }
        }
        let _guard = self.ops.lock().await;
        let digest = hex::encode(crate::module::digest(&bytes));
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
        // Compile on a blocking thread: Cranelift takes tens of ms.
        let cache_bytes = bytes.clone();
        let loaded = {
            let control = self;
            tokio::task::block_in_place(|| control.cache.load(&cache_bytes))
        };
        loaded.map_err(|e| match e {
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
            .placement
            .read()
            .unwrap_or_else(|p| p.into_inner())
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
        self.directory
            .template(name)?
            .map(|t| self.template_info(t))
            .ok_or_else(|| ApiError::not_found(format!("no template named {name:?}")))
    }

    /// Deletes template `name`.
    ///
    /// # Errors
    /// 404 if unknown; 409 while actors use it.
    pub async fn delete_template(&self, name: &str) -> Result<(), ApiError> {
        let _guard = self.ops.lock().await;
        let row = self
            .directory
            .template(name)?
            .ok_or_else(|| ApiError::not_found(format!("no template named {name:?}")))?;
        let users: Vec<String> = self
            .placement
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, p)| p.template == name)
            .map(|(a, _)| a.clone())
            .collect();
        if !users.is_empty() {
            return Err(ApiError::conflict(format!(
                "template {name} is used by actor(s) {}; delete them first",
                users.join(", ")
            )));
        }
        self.directory.delete_template(name)?;
        let still_used = self
            .directory
            .templates()?
            .iter()
            .any(|t| t.digest == row.digest);
        if !still_used {
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
        if self.placement_of(name).is_ok() {
            return Err(ApiError::conflict(format!("actor {name} already exists")));
        }
        let row = self
            .directory
            .template(template)?
            .ok_or_else(|| ApiError::not_found(format!("no template named {template:?}")))?;
        let worker = self.least_loaded().ok_or_else(|| {
            ApiError::unavailable("no worker can host actors (serve --workers 0)")
        })?;
        let compiled = self.compiled(&row).map_err(ApiError::internal)?;
        let spec = ActorSpec {
            name: name.to_owned(),
            template: compiled,
            env: row.env.clone(),
        };
        self.workers[worker].create(&spec).await?;
        let actor_row = ActorRow {
            name: name.to_owned(),
            template: template.to_owned(),
            worker: self.workers[worker].name().to_owned(),
            epoch: 1,
        };
        if let Err(e) = self.directory.insert_actor(&actor_row) {
            self.workers[worker].remove(name).await;
            let _ = self.store.remove_actor(name);
            return Err(e);
        }
        self.placement_mut().insert(
            name.to_owned(),
            Placement {
                worker,
                template: template.to_owned(),
                epoch: 1,
            },
        );
        tracing::info!(
            actor = name,
            template,
            worker = self.workers[worker].name(),
            "actor created"
        );
        self.actor(name)
    }

    /// Actor `name`.
    ///
    /// # Errors
    /// 404 if unknown.
    pub fn actor(&self, name: &str) -> Result<ActorInfo, ApiError> {
        let placement = self.placement_of(name)?;
        let worker = &self.workers[placement.worker];
        let status = worker
            .status(name)
            .ok_or_else(|| ApiError::not_found(format!("no actor named {name:?}")))?;
        Ok(ActorInfo {
            name: name.to_owned(),
            template: placement.template,
            state: status.state,
            worker: worker.name().to_owned(),
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

    /// All actors, by name.
    #[must_use]
    pub fn actors(&self) -> Vec<ActorInfo> {
        let mut names: Vec<String> = self
            .placement
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        names.sort();
        names.iter().filter_map(|n| self.actor(n).ok()).collect()
    }

    fn worker_of(&self, actor: &str) -> Result<&Arc<Worker>, ApiError> {
        Ok(&self.workers[self.placement_of(actor)?.worker])
    }

    fn pause_info(&self, name: &str, report: SnapshotReport) -> Result<PauseInfo, ApiError> {
        Ok(PauseInfo {
            actor: self.actor(name)?,
            snapshot_bytes: report.snapshot_bytes,
            duration_ms: report.duration_ms,
        })
    }

    /// Pauses actor `name` (idempotent).
    ///
    /// # Errors
    /// 404; 409 failed; 507 quota (actor keeps running); 500.
    pub async fn pause(&self, name: &str) -> Result<PauseInfo, ApiError> {
        let report = self.worker_of(name)?.pause(name).await?;
        self.pause_info(name, report)
    }

    /// Checkpoints running actor `name`.
    ///
    /// # Errors
    /// 404; 409 not running; 507 quota; 500.
    pub async fn checkpoint(&self, name: &str) -> Result<PauseInfo, ApiError> {
        let report = self.worker_of(name)?.checkpoint(name).await?;
        self.pause_info(name, report)
    }

    /// Resumes actor `name` from `from`.
    ///
    /// # Errors
    /// 404; 400 unknown snapshot; 503 with the reason if it cannot be restored.
    pub async fn resume(&self, name: &str, from: ResumeFrom) -> Result<ActorInfo, ApiError> {
        if let ResumeFrom::Snapshot(seq) = from
            && !self.store.list(name)?.iter().any(|e| e.seq == seq)
        {
            return Err(ApiError::bad_request(format!(
                "actor {name} has no snapshot {seq}"
            )));
        }
        self.worker_of(name)?.resume(name, from).await?;
        self.actor(name)
    }

    /// Deletes actor `name` and all its snapshots.
    ///
    /// # Errors
    /// 404 if unknown; 500 if its files cannot be removed.
    pub async fn delete_actor(&self, name: &str) -> Result<(), ApiError> {
        let _guard = self.ops.lock().await;
        let placement = self.placement_of(name)?;
        self.placement_mut().remove(name);
        self.workers[placement.worker].remove(name).await;
        self.directory.delete_actor(name)?;
        self.store.remove_actor(name)?;
        tracing::info!(actor = name, "actor deleted");
        Ok(())
    }

    /// Hands an HTTP request to actor `name`.
    ///
    /// # Errors
    /// 404 unknown actor; the worker's or guest's failure.
    pub async fn call(&self, name: &str, request: Request) -> Result<Response, ApiError> {
        self.worker_of(name)?.call(name, request).await
    }

    // ---- workers and housekeeping ---------------------------------------

    /// Every worker.
    #[must_use]
    pub fn workers(&self) -> Vec<WorkerInfo> {
        self.workers
            .iter()
            .map(|w| {
                let statuses = w.statuses();
                WorkerInfo {
                    name: w.name().to_owned(),
                    address: "in-process".to_owned(),
                    state: "ready".to_owned(),
                    actors: statuses.len(),
                    memory_bytes: statuses.iter().map(|(_, s)| s.memory_bytes).sum(),
                }
            })
            .collect()
    }

    /// Applies retention to every actor and removes snapshot folders of
    /// actors the directory does not know, and stale compiled code.
    ///
    /// # Errors
    /// 500 if the snapshot folder cannot be read.
    pub async fn gc(&self) -> Result<GcReport, ApiError> {
        let _guard = self.ops.lock().await;
        let mut report = GcReport::default();
        let known: std::collections::HashSet<String> = self
            .placement
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        let root = self.data_dir.join("snapshots");
        let entries = std::fs::read_dir(&root).map_err(ApiError::internal)?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let list = self.store.list(&name)?;
            if known.contains(&name) {
                let keep = self.config.worker.actor.keep_snapshots;
                let removed = self.store.retain(&name, keep)?;
                for seq in removed {
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
        for worker in &self.workers {
            for (name, status) in worker.statuses() {
                if status.state == ActorState::Running {
                    let worker = worker.clone();
                    tasks.spawn(async move {
                        if let Err(e) = worker.pause(&name).await {
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
        let mut last_checkpoint = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(tick).await;
            let checkpoint_due = every.is_some_and(|e| last_checkpoint.elapsed() >= e);
            if checkpoint_due {
                last_checkpoint = tokio::time::Instant::now();
            }
            for worker in &self.workers {
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
