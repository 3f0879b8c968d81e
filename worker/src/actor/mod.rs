//! One actor's mailbox and the task that owns its instance.
//!
//! Every operation on an actor — a request, pause, resume, checkpoint,
//! capture for a move, delete — is a [`Command`] in its bounded mailbox,
//! handled one at a time in arrival order by the actor's task. That makes
//! the pause a per-actor barrier with no extra locking: requests that arrive
//! while a pause runs wait behind it (they are *held*), the request in
//! flight finishes first, and the next request after the pause resumes the
//! actor (single flight, because only this task ever restores it).
//!
//! The task has an inside: what outlives it ([`Kept`]: the parked actor,
//! with its [`DurableState`] owned by the journal's module), the worker's
//! shared parts ([`Context`]), and the live instance with its chain state
//! ([`LiveChain`]). Its paths are child modules: `lifecycle` (create,
//! pause, capture for a move), `deliver` (one delivery, the output gate,
//! a trap's rollback), `journal` (level `request`), `capture` (the
//! snapshot-writing path), `restore` (resume, repair, verify) and
//! `hand_over` (state for another version). The mailbox entries and the
//! request ticket are in `crate::mailbox`.

mod capture;
mod deliver;
mod hand_over;
mod journal;
mod lifecycle;
mod restore;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use stasis_core::instance::{ActorInstance, InstanceConfig};
use stasis_core::module::Template;
use stasis_core::snapshot::VerifiedChain;
use stasis_core::snapshot_store::SnapshotBytes;
use tokio::sync::{OwnedSemaphorePermit, mpsc};

use crate::chain::LiveChain;
use crate::clock::ActorClock;
use crate::context::Context;
pub use crate::context::Replicator;
use crate::host_calls::services::ActorHostServices;
use crate::idempotency::IdempotencyTable;
use crate::journaled::{DurableState, Then};
use crate::logs::ActorLog;
use crate::mailbox::SavedState;
pub use crate::mailbox::{Command, Input, Ticket};
use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::settings::{ActorSettings, Durability};
use stasis_contract::status::{ActorState, ActorStatus, ResumeFrom};

/// An actor's task: what outlives it ([`Kept`]), the worker's shared
/// parts, and the live instance with what exists only with it.
pub(crate) struct ActorTask {
    name: String,
    /// The worker's shared parts.
    ctx: Arc<Context>,
    /// What outlives the task: the parked actor.
    kept: Kept,
    /// The worker's actor settings, at the actor's durability level.
    settings: ActorSettings,
    /// What the instance's host functions call; told the chain and
    /// deadline of each request before the guest runs it.
    services: Arc<ActorHostServices>,
    /// The actor's log: the instance's stdout and stderr go there.
    log: Arc<ActorLog>,
    /// The live instance.
    instance: Option<ActorInstance>,
    /// The `--max-live` slot held while `instance` is `Some`.
    slot: Option<OwnedSemaphorePermit>,
    /// What the next capture of `instance` is a delta on.
    chain: LiveChain,
    /// Calls that came while a move had captured the actor (`migrating`):
    /// they wait for the move's end (see [`ActorTask::hold_for_move`]).
    held_by_move: Vec<HeldCall>,
    /// A write of this task's state reached the store after the worker
    /// lost its lease: whether the store keeps it is unknown here, so the
    /// request it was for is answered as of unknown outcome.
    wrote_unfenced: bool,
}

/// What an actor keeps while no task runs it: the task minus its live
/// instance (and minus the worker's shared parts, its host services and
/// log handle, which the worker hands a new task). A parked actor costs
/// this and nothing else ([`ActorTask::park`], [`ActorTask::unpark`]).
pub(crate) struct Kept {
    template: Arc<Template>,
    env: Vec<(String, String)>,
    status: Arc<Mutex<ActorStatus>>,
    /// Its snapshot sequence and journal entry (see [`DurableState`]).
    durable: DurableState,
    epoch: u64,
    /// The clock floor and mark across instances.
    clock: ActorClock,
    /// A snapshot (with its sequence number) that an install verified and
    /// wrote just before starting this task: the next restore of that
    /// sequence number takes it instead of reading and verifying the file
    /// again.
    primed: Option<(u64, VerifiedChain<SnapshotBytes>)>,
    /// Its level (the template's, else the worker's).
    durability: Durability,
    /// The store holds this placement epoch's claim on the actor: an
    /// adoption fence or a snapshot written at `epoch` (see
    /// [`SnapshotStore::adopt`](stasis_core::snapshot_store::SnapshotStore::adopt)).
    /// Until it does, a restore puts the fence up first.
    adopted: bool,
    /// Its idempotency table (kept in its snapshots, see
    /// [`crate::idempotency`]).
    idem: IdempotencyTable,
}

impl Kept {
    /// A new actor of `template` at placement `epoch`, in `state`, with no
    /// snapshot yet.
    pub(crate) fn new(
        template: Arc<Template>,
        env: Vec<(String, String)>,
        state: ActorState,
        epoch: u64,
        durability: Durability,
    ) -> Self {
        Self {
            template,
            env,
            status: Arc::new(Mutex::new(ActorStatus::new(state))),
            durable: DurableState::default(),
            epoch,
            clock: ActorClock::default(),
            primed: None,
            durability,
            adopted: false,
            idem: IdempotencyTable::default(),
        }
    }

    /// The actor's status, shared with its task and the worker's table.
    pub(crate) fn status(&self) -> &Arc<Mutex<ActorStatus>> {
        &self.status
    }

    /// The placement epoch it was hosted at.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }
}

/// Why [`ActorTask::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The actor has no instance and nothing to do: the task may be parked.
    Idle,
    /// The task must end (a `Stop`, or its mailbox has no sender left).
    Stopped,
}

/// A delivery held while the actor moves: its epoch, ticket, and what
/// runs with where its answer goes.
pub(crate) type HeldCall = (u64, Arc<Ticket>, Input);

impl ActorTask {
    /// The task of actor `name` as `kept` left it, on the worker whose
    /// shared parts are `ctx`, with no instance. `settings`: the worker's
    /// actor settings (the actor's own level replaces theirs).
    pub(crate) fn unpark(
        name: &str,
        ctx: Arc<Context>,
        kept: Kept,
        settings: &ActorSettings,
        services: Arc<ActorHostServices>,
        log: Arc<ActorLog>,
    ) -> Self {
        let task = Self {
            name: name.to_owned(),
            settings: ActorSettings {
                durability: kept.durability,
                ..settings.clone()
            },
            ctx,
            kept,
            services,
            log,
            instance: None,
            slot: None,
            chain: LiveChain::default(),
            held_by_move: Vec::new(),
            wrote_unfenced: false,
        };
        task.log.placed(task.kept.epoch);
        task.status().durability = Some(task.settings.durability.name().to_owned());
        task
    }

    /// What outlives the task (see [`Kept`]). Called only when
    /// [`ActorTask::run`] ended [`Ended::Idle`]: no instance (so no slot
    /// or chain state) and no call held for a move.
    pub(crate) fn park(self) -> Kept {
        debug_assert!(self.instance.is_none() && self.held_by_move.is_empty());
        self.kept
    }

    /// The actor's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The actor's status, shared with the worker's table.
    pub(crate) fn status_handle(&self) -> &Arc<Mutex<ActorStatus>> {
        &self.kept.status
    }

    /// Whether the task holds a live instance.
    pub(crate) fn is_live(&self) -> bool {
        self.instance.is_some()
    }

    /// The actor's newest snapshot is `seq` (adopted or installed), with
    /// `primed` its verified chain when the install just verified it.
    pub(crate) fn set_newest(&mut self, seq: u64, primed: Option<VerifiedChain<SnapshotBytes>>) {
        self.kept.durable = DurableState::at(seq + 1);
        self.kept.primed = primed.map(|verified| (seq, verified));
    }

    /// A hand-over's new task: its snapshot is `seq`, its clock no earlier
    /// than the old instance's, its clock mark as the old task knew it,
    /// its idempotency table the old task's (all from `saved`).
    pub(crate) fn hand_over_at(&mut self, seq: u64, saved: &SavedState) {
        self.kept.durable = DurableState::at(seq);
        self.kept.clock.replaced(saved.clock_ns);
        self.kept.clock.inherit(saved.mark);
        self.kept.idem.restored(&saved.table, Vec::new(), 0);
    }

    /// After a panic in the task (a bug): the instance may be half-way
    /// through anything, so it is dropped and the actor is `failed` with
    /// the panic's message until a repair; the task can be parked. The
    /// request it was running was answered as of unknown outcome (see
    /// `Worker::call`).
    pub(crate) fn panicked(&mut self, panic: &(dyn std::any::Any + Send)) -> Ended {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        tracing::error!(actor = %self.name, "the actor's task panicked: {what}");
        self.instance = None;
        self.chain.clear();
        self.slot = None;
        if let Some(live) = &self.ctx.live {
            live.remove(&self.name);
        }
        for (_, _, input) in std::mem::take(&mut self.held_by_move) {
            input.refuse(ApiError::unavailable(format!("actor {} failed", self.name)));
        }
        let mut status = self.status();
        status.state = ActorState::Failed;
        status.set_error(format!(
            "the actor's task panicked: {what}; repair it with a resume from a snapshot"
        ));
        Ended::Idle
    }

    pub(super) fn status(&self) -> std::sync::MutexGuard<'_, ActorStatus> {
        self.kept.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn set_state(&self, state: ActorState) {
        self.status().state = state;
    }

    pub(super) fn config(&self) -> InstanceConfig {
        let mut config = InstanceConfig::new(&self.name, &self.ctx.worker, self.kept.env.clone());
        config.clock_floor_ns = self.kept.clock.floor_ns();
        config.clock_lease = Some(
            self.kept
                .clock
                .guest_lease(Arc::clone(&self.ctx.store), &self.name),
        );
        config.services = self.services.clone();
        config.stdout = config.stdout.with_sink(self.log.clone());
        config.stderr = config.stderr.with_sink(self.log.clone());
        config
    }

    /// Drops the live instance, remembering its clock (see
    /// [`ActorClock::dropped`]; `paused`: by a pause).
    pub(super) fn drop_instance(&mut self, paused: bool) {
        self.chain.clear();
        self.log.end_instance();
        if let Some(instance) = self.instance.take() {
            let clock_ns = instance.clock_ns();
            self.kept
                .clock
                .dropped(self.ctx.store.as_ref(), &self.name, clock_ns, paused);
        }
    }

    /// Keeps the worker's `--max-live` bookkeeping in step with the
    /// instance: a running actor is in the recency order (moved to its
    /// most recent end when `used`), an actor without an instance holds
    /// no slot.
    pub(super) fn sync_live(&mut self, used: bool) {
        let Some(live) = &self.ctx.live else {
            return;
        };
        if self.instance.is_none() {
            self.slot = None;
            live.remove(&self.name);
        } else if self.status().state != ActorState::Running {
            live.remove(&self.name);
        } else if used {
            live.touch(&self.name);
        } else {
            live.insert(&self.name);
        }
    }

    /// Takes a live-instance slot unless the actor holds one. The actor
    /// joins the recency order at once (as most recently used), so an actor
    /// waiting for a slot can ask it to pause after the command that is
    /// bringing it up.
    pub(super) async fn take_slot(&mut self) -> Result<(), ApiError> {
        if let (Some(live), None) = (&self.ctx.live, &self.slot) {
            self.slot = Some(live.acquire(&self.name).await?);
            live.insert(&self.name);
        }
        Ok(())
    }

    /// Handles the commands of `mailbox` in arrival order until the task
    /// must end ([`Ended::Stopped`]: a `Stop`, or every sender gone) or has
    /// nothing to keep running for ([`Ended::Idle`]: no instance, no call
    /// held for a move, nothing in the mailbox), when the worker parks it.
    pub(crate) async fn run(&mut self, mailbox: &mut mpsc::Receiver<Command>) -> Ended {
        while let Some(command) = mailbox.recv().await {
            let used = matches!(command, Command::Deliver { .. });
            let moving = matches!(command, Command::Capture(_));
            // Boxed so that the future of a waiting actor's task does not
            // carry the space of a guest call's future.
            let go_on = Box::pin(self.handle(command)).await;
            self.log.settle(moving || self.instance.is_none());
            self.sync_live(used);
            if !go_on {
                return Ended::Stopped;
            }
            if self.instance.is_none() && self.held_by_move.is_empty() && mailbox.is_empty() {
                return Ended::Idle;
            }
        }
        Ended::Stopped
    }

    /// Handles one command; false once the task must end.
    async fn handle(&mut self, command: Command) -> bool {
        match command {
            Command::Deliver {
                epoch,
                ticket,
                input,
            } => {
                if self.status().state == ActorState::Migrating {
                    self.hold_for_move((epoch, ticket, input));
                } else {
                    self.deliver(epoch, &ticket, input).await;
                }
            }
            Command::Capture(reply) => {
                let _ = reply.send(self.capture().await);
            }
            Command::CancelMove(reply) => {
                let state = if self.instance.is_some() {
                    ActorState::Running
                } else {
                    ActorState::Paused
                };
                self.set_state(state);
                let _ = reply.send(());
                // The actor stays here: the calls held meanwhile run now.
                for (epoch, ticket, input) in std::mem::take(&mut self.held_by_move) {
                    self.deliver(epoch, &ticket, input).await;
                }
            }
            Command::Pause(reply) => {
                let _ = reply.send(self.pause().await);
            }
            Command::Evict => {
                let running = self.status().state == ActorState::Running;
                if running
                    && self.instance.is_some()
                    && let Err(e) = self.pause().await
                {
                    tracing::warn!(actor = %self.name, "pause for --max-live failed: {e}");
                }
            }
            Command::Checkpoint(reply) => {
                let result = match self.instance {
                    Some(_) => self.snapshot(Instant::now()).await,
                    // A paused actor whose newest state is a journal entry
                    // (a create's snapshot 0): the checkpoint writes it.
                    None if self.kept.durable.unsnapshotted() => {
                        self.seal_parked(Instant::now()).await
                    }
                    None => Err(ApiError::new(
                        ErrorKind::Conflict,
                        format!("actor {} is not running", self.name),
                    )),
                };
                if result.is_ok() {
                    self.ctx.metrics.checkpointed(&self.ctx.worker, &self.name);
                }
                let _ = reply.send(result);
            }
            Command::Resume(from, reply) => {
                let result = match (from, &self.instance) {
                    (ResumeFrom::Newest, Some(_)) => Ok(()),
                    _ => self.resume(from).await,
                };
                let _ = reply.send(result);
            }
            Command::Fold(_permit) => {
                let written = if self.kept.durable.since.is_empty() {
                    self.seal(Instant::now(), Then::Keep).await.map(|_| ())
                } else if self.instance.is_some() {
                    self.snapshot(Instant::now()).await.map(|_| ())
                } else if self.failed_reason().is_none() {
                    self.seal_parked(Instant::now()).await.map(|_| ())
                } else {
                    Ok(())
                };
                if let Err(e) = written {
                    tracing::warn!(actor = %self.name, "writing its journal entries to the store: {e}");
                }
            }
            Command::SaveState(reply) => {
                let _ = reply.send(self.save_state().await);
            }
            Command::Stop(reply) => {
                self.instance = None;
                self.forget_journal();
                for (_, _, input) in std::mem::take(&mut self.held_by_move) {
                    input.refuse(ApiError::new(
                        ErrorKind::StaleEpoch,
                        format!("actor {} moved to another worker", self.name),
                    ));
                }
                let _ = reply.send(());
                return false;
            }
        }
        true
    }

    /// Holds `call`, which came while a move had captured the actor: run
    /// now, its effect would be lost with this copy (the target restores
    /// the captured snapshot). A request reaches a moving actor only from a
    /// router that does not hold the actor's gate (a follower replica); it
    /// runs here if the move is cancelled, and is refused as misdirected
    /// (421, so the router asks the new owner) once the actor has left.
    fn hold_for_move(&mut self, call: HeldCall) {
        self.held_by_move.push(call);
    }
}
