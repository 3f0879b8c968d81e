//! The worker side of Stasis: a worker hosts actors, one task and one
//! bounded mailbox per actor (see [`actor`]) while the actor is addressed;
//! an actor with no instance and nothing to do is *parked*: the worker's
//! table keeps what outlives its task ([`actor::Kept`]), with no
//! tokio task or mailbox, and its next command starts a task again. The
//! control plane places actors on workers and drives each through
//! [`WorkerApi`] (implemented here in [`api`]); the in-process [`Worker`]
//! here is one implementation, a remote worker's client (`stasis-cluster`)
//! the other. Templates arrive by digest and are resolved through
//! [`stasis_contract::templates`]. The actors' host functions are in
//! [`host_calls`]; they reach the control plane through a
//! [`stasis_contract::control_api::ControlApi`].
//!
//! This crate depends on the contract (`stasis-contract`) and never on the
//! control side, the cluster backends or the assembly.

#![warn(missing_docs)]

pub mod actor;
pub mod api;
mod blocking;
mod chain;
mod clock;
mod compaction;
mod context;
pub mod fence;
mod guest;
mod hand_over;
mod host;
pub mod host_calls;
mod idempotency;
mod journaled;
mod logs;
pub use journaled::Log;
pub mod live;
mod mailbox;
mod request;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use stasis_core::engine::StasisEngine;
use stasis_core::module::Template;
use stasis_core::snapshot_store::SnapshotStore;
use tokio::sync::{mpsc, oneshot};

use crate::host_calls::HostCalls;
use crate::host_calls::services::ActorHostServices;
use actor::{ActorTask, Command, Ended, Kept, Replicator};
use context::Context;
use live::LiveSlots;
use stasis_contract::control_api::ControlApi;
use stasis_contract::error::ApiError;
use stasis_contract::metrics::Metrics;
use stasis_contract::settings::{Durability, WorkerSettings};
use stasis_contract::status::{ActorState, ActorStatus, Captured, ResumeFrom, SnapshotReport};
use stasis_contract::templates::Templates;
pub use stasis_contract::worker_api::{HostSpec, Location, WorkerApi};

/// An actor's entry in the worker's table.
enum Entry {
    /// No task runs the actor: it has no instance and nothing to do
    /// (paused, failed, or paused and being moved). Its next command starts
    /// a task with a new mailbox ([`Worker::mailbox`]), and a task that
    /// has nothing left to do is parked again ([`Worker::park`]), so an
    /// actor that is not addressed costs a [`Kept`] and nothing
    /// else: no mailbox, no tokio task.
    Parked(Box<Kept>),
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
            Entry::Parked(parked) => parked.status(),
            Entry::Active { status, .. } => status,
        }
    }

    /// The actor's status as reported: a copy, with its mailbox's depth.
    fn reported_status(&self) -> ActorStatus {
        let mut status = self
            .status()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        status.mailbox = self.mailbox_depth();
        status
    }

    /// Deliveries waiting in the mailbox (none while parked).
    fn mailbox_depth(&self) -> usize {
        match self {
            Entry::Active { mailbox, .. } => mailbox.max_capacity() - mailbox.capacity(),
            Entry::Parked(_) => 0,
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
    /// What its actor tasks share (its name, engine, store, metrics,
    /// replicator, `--max-live` slots, journal).
    ctx: Arc<Context>,
    settings: WorkerSettings,
    actors: Mutex<HashMap<String, Entry>>,
    /// The worker itself, for the tasks it starts (they park themselves
    /// back into `actors`).
    this: std::sync::Weak<Worker>,
    templates: Arc<dyn Templates>,
    serving: AtomicBool,
    /// What the actors' host functions share (see [`crate::host_calls`]).
    host_calls: Arc<HostCalls>,
    /// Its actors' logs (see [`logs`]).
    logs: logs::LogBooks,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("name", &self.ctx.worker)
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
    /// The template's durability level, if its push set one (else the
    /// worker's).
    pub durability: Option<Durability>,
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
        Arc::new_cyclic(|this: &std::sync::Weak<Worker>| {
            let live = settings.max_live.map(|max| {
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
            });
            Self {
                host_calls: Arc::new(HostCalls::new(
                    metrics.host_calls.clone(),
                    engine.limits().request_timeout,
                    engine.limits().max_body,
                    settings.allow_outbound.clone(),
                )),
                ctx: Arc::new(Context {
                    worker: name.to_owned(),
                    engine,
                    store,
                    metrics,
                    replicator,
                    live,
                    journal: OnceLock::new(),
                }),
                settings,
                actors: Mutex::new(HashMap::new()),
                this: this.clone(),
                templates,
                serving: AtomicBool::new(true),
                logs: logs::LogBooks::default(),
            }
        })
    }

    /// Starts or stops serving calls. A remote worker that lost contact with
    /// the control plane stops serving by itself, so that the actor can be
    /// resumed elsewhere without two instances running at once.
    pub fn set_serving(&self, serving: bool) {
        self.serving.store(serving, Ordering::SeqCst);
    }

    /// Sets the control plane its actors' `call`, `send` and alarm
    /// functions reach (once).
    pub fn set_control(&self, control: Arc<dyn ControlApi>) {
        self.host_calls.set_control(control);
    }

    /// Whether the worker serves calls.
    #[must_use]
    pub fn is_serving(&self) -> bool {
        self.serving.load(Ordering::SeqCst)
    }

    /// The engine this worker runs actors on.
    #[must_use]
    pub fn engine(&self) -> &Arc<StasisEngine> {
        &self.ctx.engine
    }

    /// The worker's snapshot store.
    #[must_use]
    pub fn store(&self) -> &Arc<dyn SnapshotStore> {
        &self.ctx.store
    }

    /// The worker's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.ctx.worker
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.actors.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn task(&self, spec: &ActorSpec, epoch: u64, state: ActorState) -> ActorTask {
        let durability = spec.durability.unwrap_or(self.settings.actor.durability);
        let kept = Kept::new(
            spec.template.clone(),
            spec.env.clone(),
            state,
            epoch,
            durability,
        );
        self.unpark(&spec.name, kept)
    }

    /// The task of actor `name` as `kept` left it, with the worker's
    /// shared parts and no instance.
    fn unpark(&self, name: &str, kept: Kept) -> ActorTask {
        ActorTask::unpark(
            name,
            self.ctx.clone(),
            kept,
            &self.settings.actor,
            ActorHostServices::new(name, self.host_calls.clone()),
            self.logs.get(name, &self.ctx.worker, &self.ctx.store),
        )
    }

    /// Enters `task` in the table: running if it holds an instance, else
    /// parked until its first command.
    fn start(&self, task: ActorTask) {
        let name = task.name().to_owned();
        let entry = if task.is_live() {
            let (mailbox, rx) = mpsc::channel(self.settings.max_held.max(1));
            let status = task.status_handle().clone();
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
            .get_mut(task.name())
            .filter(|e| e.is_of(task.status_handle()))?;
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
            status: task.status_handle().clone(),
        };
        Some(task)
    }

    /// Removes `task`'s entry, if the table still holds it (not a later
    /// incarnation under the same name).
    fn forget(&self, task: &ActorTask) {
        let mut actors = self.lock();
        if actors
            .get(task.name())
            .is_some_and(|e| e.is_of(task.status_handle()))
        {
            actors.remove(task.name());
            self.ctx.store.release(task.name());
        }
    }

    /// `actor`'s mailbox, starting a task for it if it is parked.
    ///
    /// # Errors
    /// 404 if the worker does not host the actor.
    fn mailbox(&self, actor: &str) -> Result<mpsc::Sender<Command>, ApiError> {
        let mut actors = self.lock();
        let entry = actors.get_mut(actor).ok_or_else(|| {
            ApiError::not_found(format!(
                "actor {actor} is not on worker {}",
                self.ctx.worker
            ))
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

    /// Records lifecycle event `text` in `actor`'s log (see
    /// [`stasis_contract::worker_api::WorkerApi::event`]).
    ///
    /// # Errors
    /// 404 if it does not host the actor.
    pub fn event(&self, actor: &str, text: &str) -> Result<(), ApiError> {
        if self.status(actor).is_none() {
            return Err(ApiError::not_found(format!(
                "worker {} does not host actor {actor}",
                self.ctx.worker
            )));
        }
        self.logs
            .get(actor, &self.ctx.worker, &self.ctx.store)
            .event(text);
        Ok(())
    }

    /// Stops `actor`'s task and drops its instance; its files stay.
    /// Requests still held get 503. Returns once the journal's forget of
    /// the actor is durable: a restart never replays an entry of an actor
    /// removed here (a create's snapshot 0 would otherwise bring a deleted
    /// actor's files back).
    pub async fn remove(&self, actor: &str) {
        self.remove_task(actor).await;
        self.logs.remove(actor);
        if let Some(Log::Local(journal)) = self.ctx.journal.get()
            && let Err(e) = journal.appended().wait().await
        {
            tracing::warn!(actor, "removing the actor: {e}");
        }
    }

    async fn remove_task(&self, actor: &str) {
        let status = {
            let mut actors = self.lock();
            match actors.get(actor) {
                None => return,
                Some(Entry::Parked(parked)) => {
                    if let Some(journal) = self.ctx.journal.get() {
                        journal.forget(actor, parked.epoch());
                    }
                    actors.remove(actor);
                    self.ctx.store.release(actor);
                    return;
                }
                Some(Entry::Active { status, .. }) => status.clone(),
            }
        };
        let _ = self.command(actor, Command::Stop).await;
        let mut actors = self.lock();
        if actors.get(actor).is_some_and(|e| e.is_of(&status)) {
            actors.remove(actor);
            self.ctx.store.release(actor);
        }
    }

    /// `actor`'s status, if this worker hosts it.
    #[must_use]
    pub fn status(&self, actor: &str) -> Option<ActorStatus> {
        self.lock().get(actor).map(Entry::reported_status)
    }

    /// Status of every hosted actor.
    #[must_use]
    pub fn statuses(&self) -> Vec<(String, ActorStatus)> {
        self.lock()
            .iter()
            .map(|(name, entry)| (name.clone(), entry.reported_status()))
            .collect()
    }

    /// Status of each actor of `names` it hosts.
    #[must_use]
    pub fn statuses_of(&self, names: &[String]) -> Vec<(String, ActorStatus)> {
        let table = self.lock();
        names
            .iter()
            .filter_map(|name| Some((name.clone(), table.get(name)?.reported_status())))
            .collect()
    }

    /// Requests waiting in mailboxes right now.
    #[must_use]
    pub fn held_requests(&self) -> usize {
        self.lock().values().map(Entry::mailbox_depth).sum()
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
    use futures_util::FutureExt as _;
    loop {
        let ended = std::panic::AssertUnwindSafe(task.run(&mut mailbox))
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| task.panicked(panic.as_ref()));
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
