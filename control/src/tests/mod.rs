//! The control plane tested in process: built from fakes
//! ([`fakes::FakeWorker`], [`fakes::MemoryDirectory`]) and a real snapshot
//! store in a temporary folder, with tokio's paused time where time
//! matters, so that moves, drains, a lost worker and a leader change are
//! exercised without a process, a socket or a sleep.

mod cache;
pub(crate) mod fakes;
mod labels;
mod scenarios;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use stasis_contract::client_gone::ClientGone;
use stasis_contract::directory::{ActorRow, Directory, TemplateRow};
use stasis_contract::error::ApiError;
use stasis_contract::metrics::Metrics;
use stasis_contract::templates::TemplateDir;
use stasis_contract::worker_api::{Location, WorkerApi};
use stasis_core::engine::{Limits, StasisEngine};
use stasis_core::module::ModuleCache;
use stasis_core::snapshot_files::LocalSnapshotStore;
use stasis_core::snapshot_store::SnapshotStore;
use stasis_host_api::Request;

use crate::{ControlParts, ControlPlane, Role, ServeConfig};
use fakes::{FakeConnector, FakeWorker, MemoryDirectory};

/// The template every test's actors are made from.
const TEMPLATE: &str = "counter";

/// How long a remote worker may stay silent (lost after twice this).
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(2);

/// A control plane over fakes, and the fakes, for a test to drive.
struct Harness {
    control: Arc<ControlPlane>,
    directory: Arc<MemoryDirectory>,
    store: Arc<dyn SnapshotStore>,
    /// The in-process workers, `worker-1..N`.
    workers: Vec<Arc<FakeWorker>>,
    connector: Arc<FakeConnector>,
    _dir: tempfile::TempDir,
}

/// A control plane in `role` with `in_process` fake workers, the template
/// [`TEMPLATE`] registered and `actors` already in its directory (not yet
/// brought back: see [`ControlPlane::recover`] and
/// [`ControlPlane::take_over`]).
fn harness(role: Role, in_process: usize, actors: &[ActorRow]) -> Harness {
    let dir = tempfile::tempdir().expect("temp dir");
    let store: Arc<dyn SnapshotStore> = Arc::new(
        LocalSnapshotStore::open(dir.path().join("snapshots"), None).expect("snapshot store"),
    );
    let workers: Vec<Arc<FakeWorker>> = (1..=in_process)
        .map(|i| FakeWorker::new(&format!("worker-{i}"), Location::InProcess, store.clone()))
        .collect();
    let directory = Arc::new(MemoryDirectory::new(role != Role::Embedded));
    directory
        .insert_template(&TemplateRow {
            name: TEMPLATE.to_owned(),
            digest: "0".repeat(64),
            bytes: 0,
            env: Vec::new(),
            durability: None,
        })
        .expect("template");
    for row in actors {
        directory.insert_actor(row).expect("actor row");
    }
    let engine = StasisEngine::new(Limits::default()).expect("engine");
    let templates = Arc::new(TemplateDir::new(
        ModuleCache::new(engine.engine().clone(), engine.linker().clone(), None),
        dir.path().join("templates"),
        None,
    ));
    let connector = Arc::new(FakeConnector::default());
    let config = ServeConfig {
        data_dir: dir.path().to_owned(),
        workers: in_process,
        heartbeat_timeout: HEARTBEAT_TIMEOUT,
        ..ServeConfig::default()
    };
    let parts = ControlParts {
        directory: directory.clone(),
        store: store.clone(),
        shared: None,
        templates,
        workers: workers
            .iter()
            .map(|w| w.clone() as Arc<dyn WorkerApi>)
            .collect(),
        connect: Some(connector.clone()),
        lock: None,
    };
    let control = ControlPlane::new(config, Arc::new(Metrics::new(false)), parts, role);
    Harness {
        control,
        directory,
        store,
        workers,
        connector,
        _dir: dir,
    }
}

impl Harness {
    /// `POST /` to `actor` along the request path (route, gate, worker).
    async fn post(&self, actor: &str) -> Result<String, ApiError> {
        let route = self.control.route(actor).await?;
        let answer = self
            .control
            .call(route, Request::new("POST", "/"), &ClientGone::new())
            .await?;
        Ok(String::from_utf8_lossy(&answer.body).into_owned())
    }

    /// The worker and epoch `actor` is placed at, as the API shows it.
    async fn placed(&self, actor: &str) -> (String, u64) {
        let info = self.control.actor(actor).await.expect("actor info");
        (info.worker, info.epoch)
    }

    /// Makes a fake remote worker named `name` join.
    fn join_remote(&self, name: &str) -> Arc<FakeWorker> {
        let worker = FakeWorker::new(
            name,
            Location::Remote(format!("{name}.test:7071")),
            self.store.clone(),
        );
        self.connector.offer(worker.clone());
        worker
    }
}

/// Waits (in paused time, so without waiting) until `done` holds; panics
/// naming `what` after `limit` of the paused clock.
async fn until(limit: Duration, what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !done().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An actor row of [`TEMPLATE`] placed on `worker` at `epoch`.
fn row(name: &str, worker: &str, epoch: u64) -> ActorRow {
    ActorRow {
        name: name.to_owned(),
        template: TEMPLATE.to_owned(),
        worker: worker.to_owned(),
        epoch,
        created_at_unix_ms: None,
        labels: Default::default(),
    }
}

/// The registrations of `names`, each under its own lease (cluster mode).
fn registered(names: &[&str]) -> BTreeMap<String, stasis_contract::directory::WorkerRecord> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            (
                (*name).to_owned(),
                stasis_contract::directory::WorkerRecord {
                    address: format!("{name}.test:7071"),
                    lease: 100 + i64::try_from(i).expect("few"),
                },
            )
        })
        .collect()
}
