//! Builds a control plane from its parts: the one place that knows every
//! side. An embedded `stasis serve` gets the data dir's `stasis.db`, its
//! snapshot store, the engine and `--workers` in-process workers; a
//! cluster's replica gets the etcd directory, the shared store and the
//! client of remote workers. The in-process workers are then told to
//! reach the control plane as their [`ControlApi`].

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use stasis_cluster::client::Connector;
use stasis_cluster::shared::StoreTemplates;
use stasis_contract::control_api::ControlApi;
use stasis_contract::directory::{Directory, WorkerRecord};
use stasis_contract::metrics::Metrics;
use stasis_contract::templates::FetchTemplate;
use stasis_contract::worker_api::WorkerApi;
use stasis_control::directory::SqliteDirectory;
use stasis_control::local::LocalControl;
use stasis_control::{ControlParts, ControlPlane, OpenedStore, Role, ServeConfig};
use stasis_core::engine::StasisEngine;
use stasis_core::journal::Journal;
use stasis_core::snapshot_store::SnapshotStore;
use stasis_http::mtls::InternalTls;
use stasis_worker::Worker;

use crate::workers::WorkerBuilder;

/// Creates the data dir's folders (`templates/`, `cache/`).
fn create_data_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir.join("templates"))
        .with_context(|| format!("creating data dir {}", dir.display()))?;
    std::fs::create_dir_all(dir.join("cache"))?;
    Ok(())
}

/// The engine every in-process worker shares. With `--max-live`, they
/// share one pool of exactly their live-instance slots.
fn engine(config: &ServeConfig) -> anyhow::Result<Arc<StasisEngine>> {
    let Some(max) = config.worker.max_live else {
        return StasisEngine::new(config.limits);
    };
    let slots = max.max(1).checked_mul(config.workers).with_context(|| {
        format!(
            "--max-live {max} × --workers {} is too large",
            config.workers
        )
    })?;
    if slots > 0 {
        // Checks the slots against vm.max_map_count itself.
        StasisEngine::pooled(config.limits, slots)
    } else {
        // Remote workers get the same --max-live: refuse what no process
        // could hold, even with no in-process worker.
        stasis_core::engine::check_live_instances(max)?;
        StasisEngine::new(config.limits)
    }
}

/// What a control plane keeps its state in.
struct Backend {
    directory: Arc<dyn Directory>,
    store: OpenedStore,
    lock: Option<std::fs::File>,
    /// The data dir's worker journal, for the in-process workers.
    journal: Option<Arc<Journal>>,
}

/// Builds the control plane in `role` over `backend`, with the engine,
/// templates and in-process workers, each wired to the control plane;
/// remote workers are reached over mutual TLS with `internal_tls`.
fn build(
    config: ServeConfig,
    metrics: Arc<Metrics>,
    backend: Backend,
    role: Role,
    internal_tls: Option<Arc<InternalTls>>,
) -> anyhow::Result<Arc<ControlPlane>> {
    let dir = config.data_dir.clone();
    let engine = engine(&config)?;
    let (store, shared) = backend.store;
    let fetch = shared
        .as_ref()
        .map(|shared| Box::new(StoreTemplates::new(shared.clone())) as Box<dyn FetchTemplate>);
    let builder = WorkerBuilder::new(
        engine,
        store.clone(),
        metrics.clone(),
        config.worker.clone(),
        &dir,
        fetch,
    );
    let templates = builder.templates().clone();
    let locals: Vec<Arc<Worker>> = (1..=config.workers)
        .map(|i| builder.build(&format!("worker-{i}"), None))
        .collect();
    if let Some(journal) = &backend.journal {
        for worker in &locals {
            worker.set_journal(journal.clone());
        }
    }
    // Workers take the internal token (the admin token when none is set).
    let worker_token = config
        .internal_token
        .clone()
        .or_else(|| config.admin_token.clone());
    let connect = Arc::new(Connector::new(worker_token, internal_tls));
    let parts = ControlParts {
        directory: backend.directory,
        store,
        shared,
        templates,
        workers: locals
            .iter()
            .map(|w| w.clone() as Arc<dyn WorkerApi>)
            .collect(),
        connect: Some(connect),
        lock: backend.lock,
    };
    let control = ControlPlane::new(config, metrics, parts, role);
    let local: Arc<dyn ControlApi> = Arc::new(LocalControl::new(&control));
    for worker in &locals {
        worker.set_control(local.clone());
    }
    Ok(control)
}

/// Opens the data dir's worker journal (`journal/`), replaying what a
/// previous run left into `store` first (see [`stasis_core::journal`]).
fn open_journal(
    dir: &Path,
    store: &dyn SnapshotStore,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Arc<Journal>> {
    let syncs = metrics.journal_syncs.clone();
    let (journal, replayed) = Journal::open(
        &dir.join("journal"),
        store,
        Box::new(move || {
            syncs.inc();
        }),
    )
    .context("opening the worker journal")?;
    if replayed.entries > 0 {
        tracing::info!(
            entries = replayed.entries,
            applied = replayed.applied,
            skipped = replayed.skipped,
            torn_bytes = replayed.torn_bytes,
            damaged_bytes = replayed.damaged_bytes,
            ms = replayed.duration.as_secs_f64() * 1e3,
            "journal replayed"
        );
    }
    Ok(Arc::new(journal))
}

/// Opens an embedded control plane: the data dir (created if missing,
/// guarded by its `LOCK`), `stasis.db`, the snapshot store and the
/// in-process workers; brings every actor of the directory back, `paused`
/// (resumed by its next request) or `failed` with the reason, and starts
/// the alarms. Blocking: call it off the async workers.
///
/// # Errors
/// If the data dir is locked by another process or cannot be opened.
pub fn open_embedded(
    config: ServeConfig,
    metrics: Arc<Metrics>,
    internal_tls: Option<Arc<InternalTls>>,
) -> anyhow::Result<Arc<ControlPlane>> {
    let dir = config.data_dir.clone();
    create_data_dir(&dir)?;
    let lock = stasis_core::durable::lock_data_dir(&dir)?;
    let directory = SqliteDirectory::open(&dir.join("stasis.db")).context("opening stasis.db")?;
    let store =
        stasis_control::open_snapshot_store(&config.snapshot_store, &dir, config.snapshot_quota)?;
    let journal = open_journal(&dir, store.0.as_ref(), &metrics)?;
    let backend = Backend {
        directory: Arc::new(directory),
        store,
        lock: Some(lock),
        journal: Some(journal),
    };
    let control = build(config, metrics, backend, Role::Embedded, internal_tls)?;
    control.recover()?;
    Ok(control)
}

/// Opens the control plane of a cluster's replica, in `role`: the
/// directory in etcd (`directory`), snapshots and template modules in the
/// shared store, the workers registered in etcd (`workers`, name to
/// record) and no in-process worker; then takes the actors over (see
/// [`ControlPlane::take_over`]).
///
/// # Errors
/// If the data dir (this replica's caches) cannot be opened, the store is
/// not shared, or the directory cannot be read.
pub async fn open_replica(
    config: ServeConfig,
    metrics: Arc<Metrics>,
    directory: Arc<dyn Directory>,
    workers: &BTreeMap<String, WorkerRecord>,
    role: Role,
    internal_tls: Option<Arc<InternalTls>>,
) -> anyhow::Result<Arc<ControlPlane>> {
    let control = tokio::task::spawn_blocking(move || -> anyhow::Result<Arc<ControlPlane>> {
        let dir = config.data_dir.clone();
        create_data_dir(&dir)?;
        let store = stasis_control::open_snapshot_store(
            &config.snapshot_store,
            &dir,
            config.snapshot_quota,
        )?;
        anyhow::ensure!(
            store.1.is_some(),
            "--directory etcd:// needs a shared --snapshot-store (file:///PATH or s3://BUCKET)"
        );
        let backend = Backend {
            directory,
            store,
            lock: None,
            journal: None,
        };
        build(config, metrics, backend, role, internal_tls)
    })
    .await
    .context("opening the control plane")??;
    control.take_over(workers).await?;
    Ok(control)
}
