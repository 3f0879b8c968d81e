//! Builds a process's [`Worker`]s, one way for both assemblies: `stasis
//! serve`'s in-process workers ([`crate::assemble`]) and the worker of a
//! `stasis worker run` process ([`crate::worker_process`]). Both share an
//! engine, a snapshot store, the metrics and the template modules of the
//! data dir (`templates/`, compiled code in `cache/`); each process then
//! wires its workers to the control plane in its own way.

use std::path::Path;
use std::sync::Arc;

use stasis_contract::metrics::Metrics;
use stasis_contract::settings::WorkerSettings;
use stasis_contract::templates::{FetchTemplate, TemplateDir};
use stasis_core::engine::StasisEngine;
use stasis_core::module::ModuleCache;
use stasis_core::snapshot_store::SnapshotStore;
use stasis_worker::Worker;
use stasis_worker::actor::Replicator;

/// What every worker of a process is built from.
pub(crate) struct WorkerBuilder {
    engine: Arc<StasisEngine>,
    store: Arc<dyn SnapshotStore>,
    metrics: Arc<Metrics>,
    settings: WorkerSettings,
    templates: Arc<TemplateDir>,
}

impl WorkerBuilder {
    /// Workers on `engine`, keeping snapshots in `store`, counting in
    /// `metrics`, with `settings`; their template modules are those of
    /// `data_dir` (`templates/`, compiled code cached in `cache/`), and a
    /// module missing there is fetched with `fetch`.
    pub(crate) fn new(
        engine: Arc<StasisEngine>,
        store: Arc<dyn SnapshotStore>,
        metrics: Arc<Metrics>,
        settings: WorkerSettings,
        data_dir: &Path,
        fetch: Option<Box<dyn FetchTemplate>>,
    ) -> Self {
        let templates = Arc::new(TemplateDir::new(
            ModuleCache::new(
                engine.engine().clone(),
                engine.linker().clone(),
                Some(data_dir.join("cache")),
            ),
            data_dir.join("templates"),
            fetch,
        ));
        Self {
            engine,
            store,
            metrics,
            settings,
            templates,
        }
    }

    /// The template modules the workers share.
    pub(crate) fn templates(&self) -> &Arc<TemplateDir> {
        &self.templates
    }

    /// The worker `name`. With a `replicator`, every snapshot is also made
    /// durable through it before a pause or checkpoint is acknowledged.
    /// The caller hands it its `ControlApi` (`Worker::set_control`).
    pub(crate) fn build(&self, name: &str, replicator: Option<Arc<dyn Replicator>>) -> Arc<Worker> {
        Worker::new(
            name,
            self.engine.clone(),
            self.store.clone(),
            self.metrics.clone(),
            self.settings.clone(),
            replicator,
            self.templates.clone(),
        )
    }
}
