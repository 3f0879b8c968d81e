//! Fakes of what the control plane is built from: [`FakeWorker`], a
//! [`WorkerApi`] that keeps its actors in a map and records what it was
//! asked; [`MemoryDirectory`], a [`Directory`] in memory with the same
//! compare-and-set on placement epochs as the real ones; and
//! [`FakeConnector`], which hands out fake remote workers by name.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use stasis_contract::alarm::AlarmOutcome;
use stasis_contract::client_gone::ClientGone;
use stasis_contract::directory::{ActorRead, ActorRow, Directory, TemplateRow};
use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::namespace_settings::{NamespaceSettings, SettingTable};
use stasis_contract::rollout::{ActorOutcome, RolloutRecord, Rollouts};
use stasis_contract::status::{
    ActorState, ActorStatus, Captured, Created, ResumeFrom, SnapshotReport,
};
use stasis_contract::tokens::{TokenRecord, Tokens};
use stasis_contract::worker_api::{ConnectWorker, HostSpec, Location, WorkerApi};
use stasis_core::snapshot_store::SnapshotStore;
use stasis_host_api::{Request, Response};

/// Placeholder bytes a fake worker stores as an actor's snapshot: the
/// control plane only lists and ships snapshots to workers, which verify
/// them; a fake does not.
const FAKE_SNAPSHOT: &[u8] = b"fake snapshot";

/// One actor a fake worker hosts.
#[derive(Debug, Clone)]
pub(crate) struct Hosted {
    pub(crate) epoch: u64,
    pub(crate) status: ActorStatus,
}

/// A worker that hosts actors in a map (module docs).
pub(crate) struct FakeWorker {
    name: String,
    location: Location,
    store: Arc<dyn SnapshotStore>,
    actors: Mutex<BTreeMap<String, Hosted>>,
    log: Mutex<Vec<String>>,
    /// Installs still to refuse (`u32::MAX`: all).
    refuse_installs: Mutex<u32>,
}

impl FakeWorker {
    /// A worker named `name` at `location`, writing the snapshots of the
    /// actors it creates into `store` (the control plane's).
    pub(crate) fn new(name: &str, location: Location, store: Arc<dyn SnapshotStore>) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_owned(),
            location,
            store,
            actors: Mutex::default(),
            log: Mutex::default(),
            refuse_installs: Mutex::new(0),
        })
    }

    /// Makes every later install fail as unavailable.
    pub(crate) fn refuse_installs(&self) {
        *self.refuse_installs.lock().expect("lock") = u32::MAX;
    }

    /// Makes the next `n` installs fail as unavailable (a store that is
    /// down for a moment).
    pub(crate) fn refuse_next_installs(&self, n: u32) {
        *self.refuse_installs.lock().expect("lock") = n;
    }

    /// Hosts `actor` at `epoch` in `state` (what a worker holds before the
    /// control plane asks).
    pub(crate) fn host(&self, actor: &str, epoch: u64, state: ActorState) {
        self.actors.lock().expect("lock").insert(
            actor.to_owned(),
            Hosted {
                epoch,
                status: ActorStatus::new(state),
            },
        );
    }

    /// The actor `actor` as hosted here, if it is.
    pub(crate) fn hosted(&self, actor: &str) -> Option<Hosted> {
        self.actors.lock().expect("lock").get(actor).cloned()
    }

    /// What it was asked, in order (`"install a0 epoch 2"`, ...).
    pub(crate) fn log(&self) -> Vec<String> {
        self.log.lock().expect("lock").clone()
    }

    fn note(&self, entry: String) {
        self.log.lock().expect("lock").push(entry);
    }

    fn set_state(&self, actor: &str, state: ActorState) -> Result<(), ApiError> {
        let mut actors = self.actors.lock().expect("lock");
        let hosted = actors.get_mut(actor).ok_or_else(|| self.not_here(actor))?;
        hosted.status.state = state;
        Ok(())
    }

    fn not_here(&self, actor: &str) -> ApiError {
        ApiError::not_found(format!("actor {actor} is not on worker {}", self.name))
    }

    fn report(seq: u64) -> SnapshotReport {
        SnapshotReport {
            seq,
            snapshot_bytes: FAKE_SNAPSHOT.len() as u64,
            bytes_written: 0,
            duration_ms: 0.0,
            changed: false,
        }
    }
}

#[async_trait]
impl WorkerApi for FakeWorker {
    fn name(&self) -> &str {
        &self.name
    }

    fn location(&self) -> Location {
        self.location.clone()
    }

    async fn create(&self, actor: &str, spec: &HostSpec) -> Result<Created, ApiError> {
        if self.hosted(actor).is_some() {
            return Err(ApiError::conflict(format!("actor {actor} exists")));
        }
        self.store.write(actor, 0, spec.epoch, FAKE_SNAPSHOT)?;
        self.host(actor, spec.epoch, ActorState::Running);
        self.note(format!("create {actor} epoch {}", spec.epoch));
        Ok(Created {
            report: Self::report(0),
            status: None,
        })
    }

    async fn install(
        &self,
        actor: &str,
        spec: &HostSpec,
        seq: u64,
        _bytes: Option<Bytes>,
        resume: bool,
    ) -> Result<(), ApiError> {
        self.note(format!("install {actor} epoch {} seq {seq}", spec.epoch));
        {
            let mut refuse = self.refuse_installs.lock().expect("lock");
            if *refuse > 0 {
                if *refuse != u32::MAX {
                    *refuse -= 1;
                }
                return Err(ApiError::unavailable(format!(
                    "worker {} refuses installs",
                    self.name
                )));
            }
        }
        let state = if resume {
            ActorState::Running
        } else {
            ActorState::Paused
        };
        self.host(actor, spec.epoch, state);
        Ok(())
    }

    async fn call(
        &self,
        actor: &str,
        epoch: u64,
        request: Arc<Request>,
        _gone: &ClientGone,
    ) -> Result<Response, ApiError> {
        let mut actors = self.actors.lock().expect("lock");
        let hosted = actors.get_mut(actor).ok_or_else(|| self.not_here(actor))?;
        if hosted.epoch != epoch {
            return Err(ApiError::new(
                ErrorKind::StaleEpoch,
                format!(
                    "stale placement epoch {epoch} for actor {actor} (now {})",
                    hosted.epoch
                ),
            ));
        }
        hosted.status.state = ActorState::Running;
        hosted.status.requests += 1;
        Ok(Response::text(
            200,
            format!("{} {} {} epoch {epoch}", self.name, request.method, actor),
        ))
    }

    async fn socket_event(
        &self,
        _: &str,
        _: u64,
        _: stasis_host_api::sockets::SocketEvent,
    ) -> Result<(), ApiError> {
        Ok(())
    }

    async fn alarm(
        &self,
        actor: &str,
        epoch: u64,
        _setter: Option<&str>,
    ) -> Result<AlarmOutcome, ApiError> {
        let hosted = self.hosted(actor).ok_or_else(|| self.not_here(actor))?;
        if hosted.epoch != epoch {
            return Err(ApiError::new(
                ErrorKind::StaleEpoch,
                format!("stale placement epoch {epoch} for actor {actor}"),
            ));
        }
        self.note(format!("alarm {actor} epoch {epoch}"));
        Ok(AlarmOutcome::Ran)
    }

    async fn pause(&self, actor: &str) -> Result<SnapshotReport, ApiError> {
        self.set_state(actor, ActorState::Paused)?;
        Ok(Self::report(0))
    }

    async fn checkpoint(&self, actor: &str) -> Result<SnapshotReport, ApiError> {
        self.hosted(actor).ok_or_else(|| self.not_here(actor))?;
        Ok(Self::report(0))
    }

    async fn resume(&self, actor: &str, _from: ResumeFrom) -> Result<(), ApiError> {
        self.set_state(actor, ActorState::Running)
    }

    async fn capture(&self, actor: &str) -> Result<Captured, ApiError> {
        let live = self
            .hosted(actor)
            .ok_or_else(|| self.not_here(actor))?
            .status
            .state
            == ActorState::Running;
        self.set_state(actor, ActorState::Migrating)?;
        self.note(format!("capture {actor}"));
        Ok(Captured { seq: 0, live })
    }

    async fn event(&self, actor: &str, text: &str) -> Result<(), ApiError> {
        self.note(format!("event {actor} {text}"));
        Ok(())
    }

    async fn cancel_move(&self, actor: &str) {
        self.note(format!("cancel_move {actor}"));
        let _ = self.set_state(actor, ActorState::Running);
    }

    async fn hand_over(
        &self,
        actor: &str,
        _spec: &HostSpec,
        seq: u64,
    ) -> Result<SnapshotReport, ApiError> {
        self.note(format!("hand_over {actor} {seq}"));
        Err(ApiError::unprocessable("the fake worker runs no guest"))
    }

    async fn remove(&self, actor: &str) {
        self.note(format!("remove {actor}"));
        self.actors.lock().expect("lock").remove(actor);
    }

    async fn status(&self, actor: &str) -> Result<ActorStatus, ApiError> {
        self.hosted(actor)
            .map(|h| h.status)
            .ok_or_else(|| self.not_here(actor))
    }

    async fn statuses(&self) -> Result<Vec<(String, ActorStatus)>, ApiError> {
        Ok(self
            .actors
            .lock()
            .expect("lock")
            .iter()
            .map(|(name, hosted)| (name.clone(), hosted.status.clone()))
            .collect())
    }
}

/// Hands out the fake remote workers it was given, by name.
#[derive(Default)]
pub(crate) struct FakeConnector {
    workers: Mutex<BTreeMap<String, Arc<FakeWorker>>>,
}

impl FakeConnector {
    /// Makes `worker` the one a join of its name gets.
    pub(crate) fn offer(&self, worker: Arc<FakeWorker>) {
        self.workers
            .lock()
            .expect("lock")
            .insert(worker.name.clone(), worker);
    }
}

impl ConnectWorker for FakeConnector {
    fn connect(&self, name: &str, _address: &str) -> Result<Arc<dyn WorkerApi>, ApiError> {
        let worker = self
            .workers
            .lock()
            .expect("lock")
            .get(name)
            .cloned()
            .ok_or_else(|| ApiError::bad_request(format!("no fake worker named {name}")))?;
        Ok(worker)
    }
}

/// A [`Directory`] in memory (module docs).
#[derive(Default)]
pub(crate) struct MemoryDirectory {
    templates: Mutex<BTreeMap<String, TemplateRow>>,
    actors: Mutex<BTreeMap<String, ActorRow>>,
    alarms: Mutex<BTreeMap<String, u64>>,
    rollouts: Mutex<BTreeMap<String, RolloutRecord>>,
    outcomes: Mutex<BTreeMap<(String, String), ActorOutcome>>,
    tokens: Mutex<BTreeMap<String, TokenRecord>>,
    /// Namespace settings: (table, namespace) to record.
    settings: Mutex<BTreeMap<(&'static str, String), String>>,
    /// Stands for etcd (a cluster's replicas share it).
    shared: bool,
}

impl MemoryDirectory {
    /// A directory that stands for etcd when `shared`, else for
    /// `stasis.db`.
    pub(crate) fn new(shared: bool) -> Self {
        Self {
            shared,
            ..Self::default()
        }
    }

    /// The actor row `name`, if any.
    pub(crate) fn actor(&self, name: &str) -> Option<ActorRow> {
        self.actors.lock().expect("lock").get(name).cloned()
    }
}

impl Directory for MemoryDirectory {
    fn is_shared(&self) -> bool {
        self.shared
    }

    fn insert_template(&self, row: &TemplateRow) -> Result<(), ApiError> {
        self.templates
            .lock()
            .expect("lock")
            .insert(row.name.clone(), row.clone());
        Ok(())
    }

    fn template(&self, name: &str) -> Result<Option<TemplateRow>, ApiError> {
        Ok(self.templates.lock().expect("lock").get(name).cloned())
    }

    fn templates(&self) -> Result<Vec<TemplateRow>, ApiError> {
        Ok(self
            .templates
            .lock()
            .expect("lock")
            .values()
            .cloned()
            .collect())
    }

    fn delete_template(&self, name: &str) -> Result<bool, ApiError> {
        Ok(self.templates.lock().expect("lock").remove(name).is_some())
    }

    fn insert_actor(&self, row: &ActorRow) -> Result<(), ApiError> {
        let mut actors = self.actors.lock().expect("lock");
        if actors.contains_key(&row.name) {
            return Err(ApiError::internal(format!("actor {} exists", row.name)));
        }
        actors.insert(row.name.clone(), row.clone());
        Ok(())
    }

    fn place_actor_as(
        &self,
        name: &str,
        worker: &str,
        epoch: u64,
        template: &str,
    ) -> Result<(), ApiError> {
        self.place_actor(name, worker, epoch)?;
        if let Some(row) = self.actors.lock().expect("lock").get_mut(name) {
            row.template = template.to_owned();
        }
        Ok(())
    }

    fn place_actor(&self, name: &str, worker: &str, epoch: u64) -> Result<(), ApiError> {
        let mut actors = self.actors.lock().expect("lock");
        match actors.get_mut(name) {
            Some(row) if row.epoch < epoch => {
                row.worker = worker.to_owned();
                row.epoch = epoch;
                Ok(())
            }
            _ => Err(ApiError::conflict(format!(
                "actor {name} is gone or placed at epoch {epoch} or later"
            ))),
        }
    }

    fn patch_labels(
        &self,
        name: &str,
        patch: &stasis_contract::labels::LabelPatch,
    ) -> Result<stasis_contract::labels::Labels, ApiError> {
        let mut actors = self.actors.lock().expect("lock");
        let row = actors
            .get_mut(name)
            .ok_or_else(|| ApiError::not_found(format!("no actor named {name:?}")))?;
        row.labels = patch.apply(&row.labels)?;
        Ok(row.labels.clone())
    }

    fn actors(&self) -> Result<Vec<ActorRow>, ApiError> {
        Ok(self
            .actors
            .lock()
            .expect("lock")
            .values()
            .cloned()
            .collect())
    }

    fn actor(&self, name: &str, _at_least: i64) -> Result<ActorRead, ApiError> {
        Ok(ActorRead {
            row: self.actors.lock().expect("lock").get(name).cloned(),
            ..ActorRead::default()
        })
    }

    fn delete_actor(&self, name: &str) -> Result<(), ApiError> {
        self.actors.lock().expect("lock").remove(name);
        self.alarms.lock().expect("lock").remove(name);
        Ok(())
    }

    fn set_alarm(&self, name: &str, at_unix_ms: u64) -> Result<(), ApiError> {
        self.alarms
            .lock()
            .expect("lock")
            .insert(name.to_owned(), at_unix_ms);
        Ok(())
    }

    fn clear_alarm(&self, name: &str, only_at: Option<u64>) -> Result<bool, ApiError> {
        let mut alarms = self.alarms.lock().expect("lock");
        match (alarms.get(name), only_at) {
            (Some(at), Some(only)) if *at != only => Ok(false),
            (Some(_), _) => Ok(alarms.remove(name).is_some()),
            (None, _) => Ok(false),
        }
    }

    fn alarm(&self, name: &str) -> Result<Option<u64>, ApiError> {
        Ok(self.alarms.lock().expect("lock").get(name).copied())
    }

    fn alarms(&self) -> Result<Vec<(String, u64)>, ApiError> {
        Ok(self
            .alarms
            .lock()
            .expect("lock")
            .iter()
            .map(|(name, at)| (name.clone(), *at))
            .collect())
    }
}

impl NamespaceSettings for MemoryDirectory {
    fn put_record(
        &self,
        table: SettingTable,
        namespace: &str,
        record: String,
    ) -> Result<(), ApiError> {
        let mut settings = self.settings.lock().expect("lock");
        settings.insert((table.name, namespace.to_owned()), record);
        Ok(())
    }

    fn record(&self, table: SettingTable, namespace: &str) -> Result<Option<String>, ApiError> {
        let settings = self.settings.lock().expect("lock");
        Ok(settings.get(&(table.name, namespace.to_owned())).cloned())
    }
}

impl Tokens for MemoryDirectory {
    fn put_token(&self, record: &TokenRecord) -> Result<(), ApiError> {
        let mut tokens = self.tokens.lock().expect("lock");
        tokens.insert(record.id.clone(), record.clone());
        Ok(())
    }

    fn token(&self, id: &str) -> Result<Option<TokenRecord>, ApiError> {
        Ok(self.tokens.lock().expect("lock").get(id).cloned())
    }

    fn tokens(&self) -> Result<Vec<TokenRecord>, ApiError> {
        Ok(self
            .tokens
            .lock()
            .expect("lock")
            .values()
            .cloned()
            .collect())
    }

    fn delete_token(&self, id: &str) -> Result<bool, ApiError> {
        Ok(self.tokens.lock().expect("lock").remove(id).is_some())
    }
}

impl Rollouts for MemoryDirectory {
    fn put_rollout(&self, record: &RolloutRecord) -> Result<(), ApiError> {
        self.rollouts
            .lock()
            .expect("lock")
            .insert(record.template.clone(), record.clone());
        Ok(())
    }

    fn rollout(&self, template: &str) -> Result<Option<RolloutRecord>, ApiError> {
        Ok(self.rollouts.lock().expect("lock").get(template).cloned())
    }

    fn rollouts(&self) -> Result<Vec<RolloutRecord>, ApiError> {
        Ok(self
            .rollouts
            .lock()
            .expect("lock")
            .values()
            .cloned()
            .collect())
    }

    fn put_rollout_outcome(&self, template: &str, outcome: &ActorOutcome) -> Result<(), ApiError> {
        self.outcomes.lock().expect("lock").insert(
            (template.to_owned(), outcome.actor.clone()),
            outcome.clone(),
        );
        Ok(())
    }

    fn rollout_outcomes(&self, template: &str) -> Result<Vec<ActorOutcome>, ApiError> {
        Ok(self
            .outcomes
            .lock()
            .expect("lock")
            .iter()
            .filter(|((t, _), _)| t == template)
            .map(|(_, o)| o.clone())
            .collect())
    }

    fn clear_rollout_outcomes(&self, template: &str) -> Result<(), ApiError> {
        self.outcomes
            .lock()
            .expect("lock")
            .retain(|(t, _), _| t != template);
        Ok(())
    }
}
