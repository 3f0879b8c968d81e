//! A worker hosts actors: one task and one bounded mailbox per actor (see
//! [`actor`]) while the actor is addressed; an actor with no instance and
//! nothing to do is *parked*: the worker's table keeps what outlives its
//! task ([`actor::ParkedActor`]), with no tokio task or mailbox, and its
//! next command starts a task again. The control plane places actors on
//! workers and drives each through [`WorkerApi`] ([`api`]); the in-process
//! [`Worker`] here is one implementation, a remote worker's client
//! (`crate::cluster`) the other.
//! Templates arrive by digest and are resolved through [`templates`].

pub mod actor;
pub mod api;
mod capture;
mod clock;
pub mod live;
mod mailbox;
mod request;
mod restore;
mod status;
pub mod templates;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use stasis_core::engine::StasisEngine;
use stasis_core::module::Template;
use stasis_core::snapshot::{self, VerifiedChain};
use stasis_core::snapshot_store::{
    ChainError, SnapshotBytes, SnapshotEntry, SnapshotStore, open_chain,
};
use tokio::sync::{mpsc, oneshot};

use self::clock::ActorClock;
use crate::error::ApiError;
use crate::host_calls::services::ActorHostServices;
use crate::host_calls::{CallRouter, HostCalls};
use crate::metrics::Metrics;
use actor::{
    ActorSettings, ActorState, ActorStatus, ActorTask, Captured, Command, Ended, ParkedActor,
    Replicator, ResumeFrom, SnapshotReport,
};
pub use api::{HostSpec, Location, WorkerApi};
use live::LiveSlots;
use templates::Templates;

/// Settings of a worker.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// Requests held per actor (its mailbox size) before 503 (`--max-held`).
    pub max_held: usize,
    /// Longest a request waits in a mailbox before 503 (`--hold-timeout`).
    pub hold_timeout: Duration,
    /// Snapshot retention and checkpoints.
    pub actor: ActorSettings,
    /// Live instances per worker (`--max-live`): when an actor is about to
    /// get one and the cap is reached, the least recently used running
    /// actor is paused and the new one waits (up to `hold_timeout`) for its
    /// slot, so the cap is never exceeded (see [`live`]).
    pub max_live: Option<usize>,
    /// Hosts the actors' `fetch` may reach (`--allow-outbound`).
    pub allow_outbound: crate::host_calls::outbound::AllowList,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            max_held: 1024,
            hold_timeout: Duration::from_secs(30),
            actor: ActorSettings {
                keep_snapshots: 2,
                checkpoint_every: 0,
            },
            max_live: None,
            allow_outbound: crate::host_calls::outbound::AllowList::default(),
        }
    }
}

/// An actor's entry in the worker's table.
enum Entry {
    /// No task runs the actor: it has no instance and nothing to do
    /// (paused, failed, or paused and being moved). Its next command starts
    /// a task with a new mailbox ([`Worker::mailbox`]), and a task that
    /// has nothing left to do is parked again ([`Worker::park`]), so an
    /// actor that is not addressed costs a [`ParkedActor`] and nothing
    /// else: no mailbox, no tokio task.
    Parked(Box<ParkedActor>),
    /// A task reads the actor's mailbox.
    Active {
        mailbox: mpsc::Sender<Command>,
        status: Arc<Mutex<ActorStatus>>,
    },
}

impl Entry {
    /// The actor's status, shared with its task.
    fn status(&self) -> &Arc<Mutex<ActorStatus>> {
        match self {
            Entry::Parked(parked) => &parked.status,
            Entry::Active { status, .. } => status,
        }
    }

    /// Whether this entry is the one whose status is `status` (and not a
    /// later incarnation's under the same name).
    fn is_of(&self, status: &Arc<Mutex<ActorStatus>>) -> bool {
        Arc::ptr_eq(self.status(), status)
    }
}

/// Why a command could not be handed to an actor's mailbox.
enum Undelivered {
    /// The worker does not host the actor.
    NotHere(ApiError),
    /// Its mailbox is full (`--max-held`).
    Full,
    /// Its task is ending.
    Stopping,
}

/// A worker: a named set of actor tasks sharing an engine and a snapshot store.
pub struct Worker {
    name: String,
    engine: Arc<StasisEngine>,
    store: Arc<dyn SnapshotStore>,
    metrics: Arc<Metrics>,
    settings: WorkerSettings,
    actors: Mutex<HashMap<String, Entry>>,
    /// The worker itself, for the tasks it starts (they park themselves
    /// back into `actors`).
    this: std::sync::Weak<Worker>,
    replicator: Option<Arc<dyn Replicator>>,
    templates: Arc<dyn Templates>,
    live: Option<Arc<LiveSlots>>,
    serving: AtomicBool,
    /// What the actors' host functions share (see [`crate::host_calls`]).
    host_calls: Arc<HostCalls>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// An actor to host: its name, template and the template's environment.
#[derive(Clone)]
pub struct ActorSpec {
    /// Actor name.
    pub name: String,
    /// Compiled template.
    pub template: Arc<Template>,
    /// WASI environment of the template.
    pub env: Vec<(String, String)>,
}

/// A snapshot an install verified and wrote (see [`Worker::install`]).
struct Installed {
    seq: u64,
    verified: VerifiedChain<SnapshotBytes>,
    /// Whether the actor is resumed at once (it keeps the bytes for that).
    prime: bool,
}

impl Worker {
    /// A worker named `name`, resolving template digests through
    /// `templates`. With a `replicator`, every snapshot is also made
    /// durable through it before a pause or checkpoint is acknowledged.
    #[must_use]
    pub fn new(
        name: &str,
        engine: Arc<StasisEngine>,
        store: Arc<dyn SnapshotStore>,
        metrics: Arc<Metrics>,
        settings: WorkerSettings,
        replicator: Option<Arc<dyn Replicator>>,
        templates: Arc<dyn Templates>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|this: &std::sync::Weak<Worker>| Self {
            live: settings.max_live.map(|max| {
                let worker = this.clone();
                let evict = move |actor: &str| {
                    // Only a task can hold an instance: a parked actor has
                    // nothing to evict.
                    if let Some(worker) = worker.upgrade()
                        && let Some(Entry::Active { mailbox, .. }) = worker.lock().get(actor)
                    {
                        let _ = mailbox.try_send(Command::Evict);
                    }
                };
                Arc::new(LiveSlots::new(max, settings.hold_timeout, Box::new(evict)))
            }),
            name: name.to_owned(),
            host_calls: Arc::new(HostCalls::new(
                metrics.host_calls.clone(),
                engine.limits().request_timeout,
                engine.limits().max_body,
                settings.allow_outbound.clone(),
            )),
            engine,
            store,
            metrics,
            settings,
            actors: Mutex::new(HashMap::new()),
            this: this.clone(),
            replicator,
            templates,
            serving: AtomicBool::new(true),
        })
    }

    /// Starts or stops serving calls. A remote worker that lost contact with
    /// the control plane stops serving by itself, so that the actor can be
    /// resumed elsewhere without two instances running at once.
    pub fn set_serving(&self, serving: bool) {
        self.serving.store(serving, Ordering::SeqCst);
    }

    /// Sets how its actors' `call` and `send` reach other actors (once).
    pub fn set_router(&self, router: Arc<dyn CallRouter>) {
        self.host_calls.set_router(router);
    }

    /// Sets how its actors' alarm functions reach the scheduler (once).
    pub fn set_alarm_router(&self, alarms: Arc<dyn crate::alarms::AlarmRouter>) {
        self.host_calls.set_alarm_router(alarms);
    }

    /// Whether the worker serves calls.
    #[must_use]
    pub fn is_serving(&self) -> bool {
        self.serving.load(Ordering::SeqCst)
    }

    /// The engine this worker runs actors on.
    #[must_use]
    pub fn engine(&self) -> &Arc<StasisEngine> {
        &self.engine
    }

    /// The worker's snapshot store.
    #[must_use]
    pub fn store(&self) -> &Arc<dyn SnapshotStore> {
        &self.store
    }

    /// The worker's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.actors.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn task(&self, spec: &ActorSpec, epoch: u64, state: ActorState) -> ActorTask {
        let parked = ParkedActor {
            template: spec.template.clone(),
            env: spec.env.clone(),
            status: actor::new_status(state),
            next_seq: 0,
            since_checkpoint: 0,
            epoch,
            clock: ActorClock::default(),
            primed: None,
        };
        self.unpark(&spec.name, parked)
    }

    /// The task of actor `name` as `parked` left it, with the worker's
    /// shared parts and no instance.
    fn unpark(&self, name: &str, parked: ParkedActor) -> ActorTask {
        ActorTask {
            name: name.to_owned(),
            worker: self.name.clone(),
            template: parked.template,
            env: parked.env,
            engine: self.engine.clone(),
            store: self.store.clone(),
            metrics: self.metrics.clone(),
            settings: self.settings.actor.clone(),
            status: parked.status,
            instance: None,
            next_seq: parked.next_seq,
            since_checkpoint: parked.since_checkpoint,
            epoch: parked.epoch,
            replicator: self.replicator.clone(),
            live: self.live.clone(),
            slot: None,
            primed: parked.primed,
            delta_base: None,
            clock: parked.clock,
            held_by_move: Vec::new(),
            services: ActorHostServices::new(name, self.host_calls.clone()),
        }
    }

    /// Enters `task` in the table: running if it holds an instance, else
    /// parked until its first command.
    fn start(&self, task: ActorTask) {
        let name = task.name.clone();
        let entry = if task.instance.is_some() {
            let (mailbox, rx) = mpsc::channel(self.settings.max_held.max(1));
            let status = task.status.clone();
            tokio::spawn(drive(self.this.clone(), Box::new(task), rx));
            Entry::Active { mailbox, status }
        } else {
            Entry::Parked(Box::new(task.park()))
        };
        self.lock().insert(name, entry);
    }

    /// The mailbox of actor `name`'s task (`entry`), starting a tokio task
    /// on a new mailbox if the entry is parked.
    fn wake(&self, name: &str, entry: &mut Entry) -> mpsc::Sender<Command> {
        let (mailbox, rx) = match entry {
            Entry::Active { mailbox, .. } => return mailbox.clone(),
            Entry::Parked(_) => mpsc::channel(self.settings.max_held.max(1)),
        };
        let status = entry.status().clone();
        let active = Entry::Active {
            mailbox: mailbox.clone(),
            status,
        };
        if let Entry::Parked(parked) = std::mem::replace(entry, active) {
            let task = self.unpark(name, *parked);
            tokio::spawn(drive(self.this.clone(), Box::new(task), rx));
        }
        mailbox
    }

    /// Parks `task`, whose run found it idle, unless commands came in
    /// meanwhile: under the table's lock its mailbox is closed (a sender
    /// that still holds it sees it closed and asks the table again, see
    /// [`Worker::post`]) and drained. Without commands the task is
    /// parked (`None`); with some, they move to a new mailbox that
    /// replaces `mailbox`, and the task comes back to run them. A task
    /// whose entry was replaced or removed meanwhile just ends (`None`).
    fn park(
        &self,
        task: Box<ActorTask>,
        mailbox: &mut mpsc::Receiver<Command>,
    ) -> Option<Box<ActorTask>> {
        let mut actors = self.lock();
        let entry = actors
            .get_mut(&task.name)
            .filter(|e| e.is_of(&task.status))?;
        mailbox.close();
        let mut pending = Vec::new();
        while let Ok(command) = mailbox.try_recv() {
            pending.push(command);
        }
        if pending.is_empty() {
            *entry = Entry::Parked(Box::new((*task).park()));
            return None;
        }
        let (tx, rx) = mpsc::channel(self.settings.max_held.max(1));
        for command in pending {
            let _ = tx.try_send(command);
        }
        *mailbox = rx;
        *entry = Entry::Active {
            mailbox: tx,
            status: task.status.clone(),
        };
        Some(task)
    }

    /// Removes `task`'s entry, if the table still holds it (not a later
    /// incarnation under the same name).
    fn forget(&self, task: &ActorTask) {
        let mut actors = self.lock();
        if actors
            .get(&task.name)
            .is_some_and(|e| e.is_of(&task.status))
        {
            actors.remove(&task.name);
        }
    }

    /// Creates a new actor: first instance (start function, `_initialize`,
    /// init), snapshot seq 0, state `running`.
    ///
    /// # Errors
    /// 409 if this worker already hosts the name; the guest's failure
    /// (500/504) if creation traps; 507/500 if seq 0 cannot be written.
    pub async fn create(&self, spec: &ActorSpec, epoch: u64) -> Result<SnapshotReport, ApiError> {
        if self.lock().contains_key(&spec.name) {
            return Err(ApiError::conflict(format!("actor {} exists", spec.name)));
        }
        // Snapshots under a new actor's name are another's leftovers (a
        // create or fork that failed half-way, a delete that could not
        // remove every file): a new actor never adopts them.
        if !self.store.list(&spec.name)?.is_empty() {
            tracing::warn!(actor = %spec.name, "removing snapshots left under a new actor's name");
            self.store.remove_actor(&spec.name)?;
        }
        let mut task = self.task(spec, epoch, ActorState::Creating);
        let report = task.create().await;
        if report.is_err() {
            let _ = self.store.remove_actor(&spec.name);
            return report;
        }
        self.start(task);
        report
    }

    /// Hosts an actor that already has snapshots (after a restart or a
    /// move): `paused`, resumed by its next request. Its newest snapshot is
    /// checked (length, magic, version, checksum, header) now, so a missing
    /// or corrupt one shows as `failed` with the reason at once, never as a
    /// silently fresh actor.
    pub fn adopt(&self, spec: &ActorSpec, epoch: u64) -> ActorStatus {
        self.adopt_installed(spec, epoch, None)
    }

    /// Drops from `list` (and from the store) a newest snapshot above the
    /// `acknowledged` one that does not verify by itself: a write the
    /// process died in, before its sync round ended
    /// ([`stasis_core::durable::write_new_in`]), so no caller was told it
    /// was written. One file at most: an actor's writes are sequential, and
    /// a write starts only after the one before it was acknowledged.
    /// Snapshot 0 has no marker (the directory row acknowledges it) and is
    /// never dropped; neither is a snapshot the caller just `installed`.
    fn drop_torn_newest(
        &self,
        spec: &ActorSpec,
        list: &mut Vec<SnapshotEntry>,
        acknowledged: Option<u64>,
        installed: Option<&Installed>,
    ) {
        let Some(newest) = list.last().map(|n| n.seq) else {
            return;
        };
        if newest == 0
            || acknowledged.is_some_and(|acked| newest <= acked)
            || installed.is_some_and(|i| i.seq == newest)
        {
            return;
        }
        let max_memory = self.engine.limits().max_memory;
        let Err(ChainError::Invalid { seq, source }) = open_chain(
            self.store.as_ref(),
            &spec.name,
            newest,
            &spec.template,
            max_memory,
        ) else {
            return;
        };
        if seq != newest {
            return;
        }
        match self.store.remove(&spec.name, seq) {
            Ok(()) => {
                tracing::warn!(
                    actor = %spec.name,
                    seq,
                    "dropped snapshot {seq}: it was being written when the process stopped and was never acknowledged ({source})"
                );
                list.pop();
            }
            Err(e) => {
                tracing::warn!(actor = %spec.name, seq, "cannot drop torn snapshot {seq}: {e}")
            }
        }
    }

    /// [`Worker::adopt`], where `installed` is a snapshot (and its
    /// sequence number) the caller verified and wrote just now: if it is
    /// the newest, it is not read and verified again, and with `prime` the
    /// actor's next restore takes it as it is.
    fn adopt_installed(
        &self,
        spec: &ActorSpec,
        epoch: u64,
        installed: Option<Installed>,
    ) -> ActorStatus {
        if let Some(Entry::Active { mailbox, .. }) = self.lock().remove(&spec.name) {
            let (reply, _) = oneshot::channel();
            let _ = mailbox.try_send(Command::Stop(reply));
        }
        let mut task = self.task(spec, epoch, ActorState::Paused);
        let (mut list, acknowledged) = self.store.list_acknowledged(&spec.name).unwrap_or_default();
        self.drop_torn_newest(spec, &mut list, acknowledged, installed.as_ref());
        // Answers name the folder by its key; the log gets where it is.
        let dir = || format!("snapshots/{}", spec.name);
        let missing = acknowledged.filter(|&acked| list.last().is_none_or(|n| n.seq < acked));
        let problem = match (list.last(), missing) {
            (_, Some(acked)) => {
                task.next_seq = acked + 1;
                Some(format!(
                    "snapshot {acked} was acknowledged but is missing from {} (newest there: {})",
                    dir(),
                    list.last()
                        .map_or_else(|| "none".to_owned(), |n| n.seq.to_string())
                ))
            }
            (None, None) => Some(format!("no snapshot of actor {} in {}", spec.name, dir())),
            (Some(newest), None) if installed.as_ref().is_some_and(|i| i.seq == newest.seq) => {
                task.next_seq = newest.seq + 1;
                if let Some(installed) = installed.filter(|i| i.prime) {
                    task.primed = Some((installed.seq, installed.verified));
                }
                None
            }
            (Some(newest), None) => {
                task.next_seq = newest.seq + 1;
                open_chain(
                    self.store.as_ref(),
                    &spec.name,
                    newest.seq,
                    &spec.template,
                    self.engine.limits().max_memory,
                )
                .err()
                .map(|e| e.to_string())
            }
        };
        {
            let mut status = task.status.lock().unwrap_or_else(|p| p.into_inner());
            status.snapshot = list.last().copied();
            if let Some(problem) = problem {
                let location = self.store.location(&spec.name);
                tracing::error!(actor = %spec.name, %location, "{problem}");
                status.state = ActorState::Failed;
                status.error = Some(problem);
            }
        }
        let status = task
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        self.start(task);
        status
    }

    /// `actor`'s mailbox, starting a task for it if it is parked.
    ///
    /// # Errors
    /// 404 if the worker does not host the actor.
    fn mailbox(&self, actor: &str) -> Result<mpsc::Sender<Command>, ApiError> {
        let mut actors = self.lock();
        let entry = actors.get_mut(actor).ok_or_else(|| {
            ApiError::not_found(format!("actor {actor} is not on worker {}", self.name))
        })?;
        Ok(self.wake(actor, entry))
    }

    /// Whether `actor`'s entry no longer reads `closed` (its task was
    /// parked, or replaced): a command that found `closed` closed goes to
    /// the entry as it is now.
    fn moved_on(&self, actor: &str, closed: &mpsc::Sender<Command>) -> bool {
        self.lock().get(actor).is_some_and(
            |entry| !matches!(entry, Entry::Active { mailbox, .. } if mailbox.same_channel(closed)),
        )
    }

    /// Hands `command` to `actor`'s mailbox without waiting (a parked
    /// actor's task is started for it).
    fn post(&self, actor: &str, mut command: Command) -> Result<(), Undelivered> {
        loop {
            let mailbox = self.mailbox(actor).map_err(Undelivered::NotHere)?;
            match mailbox.try_send(command) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::TrySendError::Full(_)) => return Err(Undelivered::Full),
                Err(mpsc::error::TrySendError::Closed(back)) if self.moved_on(actor, &mailbox) => {
                    command = back;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return Err(Undelivered::Stopping),
            }
        }
    }

    async fn command<T>(
        &self,
        actor: &str,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, ApiError> {
        let (reply, answer) = oneshot::channel();
        let mut command = make(reply);
        loop {
            let mailbox = self.mailbox(actor)?;
            match mailbox.send(command).await {
                Ok(()) => break,
                Err(mpsc::error::SendError(back)) if self.moved_on(actor, &mailbox) => {
                    command = back;
                }
                Err(_) => {
                    return Err(ApiError::unavailable(format!("actor {actor} is stopping")));
                }
            }
        }
        answer
            .await
            .map_err(|_| ApiError::unavailable(format!("actor {actor} stopped")))
    }

    /// Pauses `actor` (idempotent): held requests wait, the request in
    /// flight finishes, `on_pause` runs, the snapshot is durable, the
    /// instance is dropped.
    ///
    /// # Errors
    /// 404, 409 (failed actor), 507 (quota; the actor keeps running), 500.
    pub async fn pause(&self, actor: &str) -> Result<SnapshotReport, ApiError> {
        self.command(actor, Command::Pause).await?
    }

    /// Writes a snapshot of a running actor without unloading it.
    ///
    /// # Errors
    /// 404, 409 (not running), 507 (quota), 500.
    pub async fn checkpoint(&self, actor: &str) -> Result<SnapshotReport, ApiError> {
        self.command(actor, Command::Checkpoint).await?
    }

    /// Resumes `actor` from `from` (a no-op for a running actor and
    /// [`ResumeFrom::Newest`]).
    ///
    /// # Errors
    /// 404; 503 with the reason if the snapshot cannot be restored.
    pub async fn resume(&self, actor: &str, from: ResumeFrom) -> Result<(), ApiError> {
        self.command(actor, |reply| Command::Resume(from, reply))
            .await?
    }

    /// Installs `actor` from snapshot `seq` under placement `epoch`: the
    /// snapshot (`bytes`, or the stored file when `None`) is verified
    /// against the template; given bytes are written to this worker's store
    /// unless it already holds them; then, with `resume`, the actor is
    /// restored at once (the target side of a move), else it is `paused`.
    ///
    /// # Errors
    /// 422 if the snapshot does not verify against the template; 503 if
    /// the restore fails (nothing is left installed).
    pub async fn install(
        &self,
        spec: &ActorSpec,
        epoch: u64,
        seq: u64,
        bytes: Option<Bytes>,
        resume: bool,
    ) -> Result<ActorStatus, ApiError> {
        let max_memory = self.engine.limits().max_memory;
        let what = format!("snapshot {seq} of {}", spec.name);
        let refused = move |e: &dyn std::fmt::Display| ApiError::new(422, format!("{what}: {e}"));
        let store = self.store.clone();
        let name = spec.name.clone();
        let template = spec.template.clone();
        // The snapshot is verified once, here, and handed to the actor as
        // verified. Bytes the store already held are checked by `adopt`.
        let installed = tokio::task::spawn_blocking(move || -> Result<_, ApiError> {
            let verified =
                match bytes {
                    Some(bytes) => {
                        let bytes = SnapshotBytes::from(Vec::from(bytes));
                        // Shipped bytes are one self-contained file: a full
                        // snapshot (a chain is flattened before it is sent).
                        let verified = snapshot::verify(bytes, &template, max_memory)
                            .map_err(|e| refused(&e))?;
                        let verified =
                            VerifiedChain::new(vec![(seq, verified)]).map_err(|e| refused(&e))?;
                        if store.list(&name)?.iter().any(|e| e.seq == seq) {
                            return Ok(None);
                        }
                        let (_, file) = verified.links().next().ok_or_else(|| {
                            ApiError::internal("a verified chain without a snapshot")
                        })?;
                        store.write(&name, seq, epoch, file.bytes())?;
                        verified
                    }
                    None => open_chain(store.as_ref(), &name, seq, &template, max_memory).map_err(
                        |e| match e {
                            ChainError::Open { source, .. } => ApiError::from(source),
                            ChainError::Invalid { source, .. } => refused(&source),
                            ChainError::Base { .. } => refused(&e),
                        },
                    )?,
                };
            Ok(Some(Installed {
                seq,
                verified,
                prime: resume,
            }))
        })
        .await
        .map_err(ApiError::internal)??;
        let status = self.adopt_installed(spec, epoch, installed);
        if status.state == ActorState::Failed {
            self.remove(&spec.name).await;
            return Err(ApiError::failed(status.error.unwrap_or_default()));
        }
        if resume && let Err(e) = self.resume(&spec.name, ResumeFrom::Newest).await {
            self.remove(&spec.name).await;
            return Err(e);
        }
        self.status(&spec.name)
            .ok_or_else(|| ApiError::internal("installed actor vanished"))
    }

    async fn spec(&self, actor: &str, spec: &HostSpec) -> Result<ActorSpec, ApiError> {
        crate::error::check_label("actor", actor)?;
        Ok(ActorSpec {
            name: actor.to_owned(),
            template: self.templates.template(&spec.digest).await?,
            env: spec.env.clone(),
        })
    }

    /// Captures `actor` for a move (see [`Command::Capture`]).
    ///
    /// # Errors
    /// 404; 409 failed actor; 500/507 if the snapshot cannot be written.
    pub async fn capture(&self, actor: &str) -> Result<Captured, ApiError> {
        self.command(actor, Command::Capture).await?
    }

    /// Ends a move that was rolled back: the actor serves here again.
    pub async fn cancel_move(&self, actor: &str) {
        let _ = self.command(actor, Command::CancelMove).await;
    }

    /// Stops `actor`'s task and drops its instance; its files stay.
    /// Requests still held get 503.
    pub async fn remove(&self, actor: &str) {
        let status = {
            let mut actors = self.lock();
            match actors.get(actor) {
                None => return,
                Some(Entry::Parked(_)) => {
                    actors.remove(actor);
                    return;
                }
                Some(Entry::Active { status, .. }) => status.clone(),
            }
        };
        let _ = self.command(actor, Command::Stop).await;
        let mut actors = self.lock();
        if actors.get(actor).is_some_and(|e| e.is_of(&status)) {
            actors.remove(actor);
        }
    }

    /// `actor`'s status, if this worker hosts it.
    #[must_use]
    pub fn status(&self, actor: &str) -> Option<ActorStatus> {
        self.lock().get(actor).map(|entry| {
            entry
                .status()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        })
    }

    /// Status of every hosted actor.
    #[must_use]
    pub fn statuses(&self) -> Vec<(String, ActorStatus)> {
        self.lock()
            .iter()
            .map(|(name, entry)| {
                let status = entry
                    .status()
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                (name.clone(), status)
            })
            .collect()
    }

    /// Requests waiting in mailboxes right now.
    #[must_use]
    pub fn held_requests(&self) -> usize {
        self.lock()
            .values()
            .map(|entry| match entry {
                Entry::Active { mailbox, .. } => mailbox.max_capacity() - mailbox.capacity(),
                Entry::Parked(_) => 0,
            })
            .sum()
    }

    /// Names of hosted actors.
    #[must_use]
    pub fn actor_names(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }
}

/// Runs `task` on `mailbox` for as long as it has work, parking it in
/// `worker`'s table when it is idle, and removing its entry when it ends.
async fn drive(
    worker: std::sync::Weak<Worker>,
    mut task: Box<ActorTask>,
    mut mailbox: mpsc::Receiver<Command>,
) {
    loop {
        let ended = task.run(&mut mailbox).await;
        let Some(worker) = worker.upgrade() else {
            return;
        };
        match ended {
            Ended::Stopped => {
                worker.forget(&task);
                return;
            }
            Ended::Idle => match worker.park(task, &mut mailbox) {
                Some(back) => task = back,
                None => return,
            },
        }
    }
}
