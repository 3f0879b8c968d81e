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
//! The task's restore path (resume, repair, reading and verifying a
//! snapshot) is in `super::restore`, its snapshot-writing path (a delta or
//! a full capture, the durable write) in `super::capture`; the mailbox
//! entries and the request ticket in `super::mailbox`.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use stasis_core::engine::StasisEngine;
use stasis_core::instance::{ActorInstance, InstanceConfig};
use stasis_core::journal::Durable;
use stasis_core::module::Template;
use stasis_core::snapshot::{DeltaBase, VerifiedChain};
use stasis_core::snapshot_store::{SnapshotBytes, SnapshotStore};
use tokio::sync::{OwnedSemaphorePermit, mpsc};

use super::clock::ActorClock;
use super::journaled::Journaled;
use super::live::LiveSlots;
pub use super::mailbox::{Command, Input, Ticket};
use crate::host_calls::services::ActorHostServices;
use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::metrics::Metrics;
use stasis_contract::settings::{ActorSettings, Durability};
use stasis_contract::status::{ActorState, ActorStatus, Captured, ResumeFrom, SnapshotReport, ms};

/// Copies every acknowledged snapshot somewhere durable before the pause
/// or checkpoint is acknowledged: a remote worker streams its snapshots to
/// the control plane's store this way (DESIGN.md, "Scale out / scale in").
pub trait Replicator: Send + Sync {
    /// Stores `bytes` as snapshot `seq` of `actor`; resolves once durable.
    fn replicate(
        &self,
        actor: &str,
        seq: u64,
        bytes: Arc<Vec<u8>>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ApiError>> + Send>>;
}

/// Everything the task needs besides its mailbox.
pub(crate) struct ActorTask {
    pub name: String,
    pub worker: String,
    pub template: Arc<Template>,
    pub env: Vec<(String, String)>,
    pub engine: Arc<StasisEngine>,
    pub store: Arc<dyn SnapshotStore>,
    pub metrics: Arc<Metrics>,
    pub settings: ActorSettings,
    pub status: Arc<Mutex<ActorStatus>>,
    pub instance: Option<ActorInstance>,
    pub next_seq: u64,
    pub since_checkpoint: u64,
    pub epoch: u64,
    pub replicator: Option<Arc<dyn Replicator>>,
    /// The worker's `--max-live` slots, if it has a cap.
    pub live: Option<Arc<LiveSlots>>,
    /// The slot held while `instance` is `Some`.
    pub slot: Option<OwnedSemaphorePermit>,
    /// A snapshot (with its sequence number) that an install verified and
    /// wrote just before starting this task: the next restore of that
    /// sequence number takes it instead of reading and verifying the file
    /// again.
    pub primed: Option<(u64, VerifiedChain<SnapshotBytes>)>,
    /// What the next snapshot of `instance` can be a delta on: the newest
    /// snapshot whose state the instance held since it was made (restored
    /// from, or captured from it). `None` without an instance, after a
    /// repair, or where the store keeps no deltas.
    pub delta_base: Option<DeltaBase>,
    /// The clock floor and mark across instances.
    pub clock: ActorClock,
    /// Calls that came while a move had captured the actor (`migrating`):
    /// they wait for the move's end (see [`ActorTask::hold_for_move`]).
    pub held_by_move: Vec<HeldCall>,
    /// What the instance's host functions call; told the chain and
    /// deadline of each request before the guest runs it.
    pub services: Arc<ActorHostServices>,
    /// The worker journal (durability level `request`, see
    /// [`super::journaled`]).
    pub journal: Option<super::journaled::Log>,
    /// The newest journal entry, not yet in the store.
    pub journaled: Option<Journaled>,
    /// The verified chain of `delta_base`, kept from one journal entry's
    /// capture to the next (dropped with the instance).
    pub entry_chain: Option<Arc<VerifiedChain<SnapshotBytes>>>,
    /// The durability of the newest entry appended: an answer that
    /// changed nothing still waits for it (it may show its effect).
    pub gate: Option<Durable>,
    /// The store holds this placement epoch's claim on the actor: an
    /// adoption fence or a snapshot written at `epoch` (see
    /// [`SnapshotStore::adopt`]). Until it does, a restore puts the fence
    /// up first.
    pub adopted: bool,
    /// A write of this task's state reached the store after the worker
    /// lost its lease: whether the store keeps it is unknown here, so the
    /// request it was for is answered as of unknown outcome.
    pub wrote_unfenced: bool,
    /// The actor's log: the instance's stdout and stderr go there.
    pub log: Arc<crate::logs::ActorLog>,
}

/// What a parked actor keeps while no task runs it: the fields of its
/// task that outlive the task. Everything else a task holds is the
/// worker's (engine, store, settings, slots) or exists only with an
/// instance (slot, delta base, calls held for a move), so the worker
/// rebuilds the task from this on the actor's next command
/// ([`ActorTask::park`] and `Worker::unpark`).
pub(crate) struct ParkedActor {
    pub template: Arc<Template>,
    pub env: Vec<(String, String)>,
    pub status: Arc<Mutex<ActorStatus>>,
    pub next_seq: u64,
    pub since_checkpoint: u64,
    pub epoch: u64,
    pub clock: ActorClock,
    pub primed: Option<(u64, VerifiedChain<SnapshotBytes>)>,
    pub journaled: Option<Journaled>,
    pub gate: Option<Durable>,
    /// Its level (the template's, else the worker's).
    pub durability: Durability,
    pub adopted: bool,
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

pub(crate) fn new_status(state: ActorState) -> Arc<Mutex<ActorStatus>> {
    Arc::new(Mutex::new(ActorStatus::new(state)))
}

impl ActorTask {
    /// The fields that outlive the task (see [`ParkedActor`]). Called only
    /// when [`ActorTask::run`] ended [`Ended::Idle`]: no instance (so no
    /// slot or delta base) and no call held for a move.
    pub(super) fn park(self) -> ParkedActor {
        debug_assert!(self.instance.is_none() && self.held_by_move.is_empty());
        ParkedActor {
            template: self.template,
            env: self.env,
            status: self.status,
            next_seq: self.next_seq,
            since_checkpoint: self.since_checkpoint,
            epoch: self.epoch,
            clock: self.clock,
            primed: self.primed,
            journaled: self.journaled,
            gate: self.gate,
            durability: self.settings.durability,
            adopted: self.adopted,
        }
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
        self.delta_base = None;
        self.entry_chain = None;
        self.slot = None;
        if let Some(live) = &self.live {
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
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn set_state(&self, state: ActorState) {
        self.status().state = state;
    }

    pub(super) fn config(&self) -> InstanceConfig {
        let mut config = InstanceConfig::new(&self.name, &self.worker, self.env.clone());
        config.clock_floor_ns = self.clock.floor_ns();
        config.services = self.services.clone();
        config.stdout = config.stdout.with_sink(self.log.clone());
        config.stderr = config.stderr.with_sink(self.log.clone());
        config
    }

    /// Before guest code runs on the live instance (see [`ActorClock::lease`]).
    pub(super) fn lease_clock(&mut self, now_ns: u64) {
        let timeout = self.engine.limits().request_timeout;
        self.clock
            .lease(self.store.as_ref(), &self.name, now_ns, timeout);
    }

    /// Drops the live instance, remembering its clock (see
    /// [`ActorClock::dropped`]; `paused`: by a pause).
    pub(super) fn drop_instance(&mut self, paused: bool) {
        self.delta_base = None;
        self.entry_chain = None;
        self.log.end_instance();
        if let Some(instance) = self.instance.take() {
            let clock_ns = instance.clock_ns();
            self.clock
                .dropped(self.store.as_ref(), &self.name, clock_ns, paused);
        }
    }

    /// Creates the first instance and snapshot seq 0 (a journal entry at
    /// level `request` with a journal, else a file). The actor is left
    /// `running`, or `paused` on a worker whose `--max-live` slots are full
    /// (see [`LiveSlots::acquire_for_creation`]).
    pub(crate) async fn create(&mut self) -> Result<SnapshotReport, ApiError> {
        self.create_with(None).await
    }

    /// [`ActorTask::create`]; with `state`, the new instance is given it
    /// (`stasis_load_state`, a hand-over from another version) before its
    /// snapshot, which is then a file even at level `request`.
    pub(crate) async fn create_with(
        &mut self,
        state: Option<&[u8]>,
    ) -> Result<SnapshotReport, ApiError> {
        let started = Instant::now();
        let keep = match &self.live {
            None => true,
            Some(live) => {
                let (slot, keep) = live.acquire_for_creation(&self.name).await?;
                if keep {
                    live.insert(&self.name);
                }
                self.slot = Some(slot);
                keep
            }
        };
        let spawned = ActorInstance::spawn(&self.engine, self.template.clone(), self.config())
            .await
            .map_err(|e| match state {
                // A hand-over: the new version failed its side (422).
                Some(_) => crate::hand_over::refused("starting the new version", &e),
                None => ApiError::call(&e, format!("creating the actor: {e}")),
            });
        let instance = match spawned {
            Ok(instance) => instance,
            Err(e) => {
                self.sync_live(false);
                return Err(e);
            }
        };
        self.instance = Some(instance);
        if let Some(state) = state
            && let Err(e) = self.load_state(state).await
        {
            self.instance = None;
            self.sync_live(false);
            return Err(e);
        }
        let spawned_at = started.elapsed();
        let captured =
            crate::blocking::off_the_executor(|| self.capture_live(super::capture::For::Snapshot));
        let captured_at = started.elapsed();
        if !keep {
            // A borrowed slot is given back before the write. Snapshot 0
            // holds the clock's reading: no mark is needed.
            self.drop_instance(false);
            self.sync_live(false);
        }
        // At level `request` with a journal, snapshot 0 is a journal entry
        // (creates share group commits), written to the store later like
        // any entry (`capture::journal_create`).
        let written = match (captured, self.journal_on()) {
            // (A cluster worker's store is shared: snapshot 0 goes there.)
            (Ok((bytes, _)), Some(super::journaled::Log::Local(journal))) if state.is_none() => {
                self.journal_create(&journal, bytes, started).await
            }
            (Ok((bytes, _)), _) => self.write_snapshot(bytes, started).await,
            (Err(e), _) => Err(e),
        };
        if !keep {
            // No delta base without an instance (the restore sets it).
            self.delta_base = None;
        }
        let report = match written {
            Ok(report) => report,
            Err(e) => {
                self.instance = None;
                self.sync_live(false);
                return Err(e);
            }
        };
        {
            let mut status = self.status();
            status.state = if keep {
                ActorState::Running
            } else {
                ActorState::Paused
            };
            status.memory_bytes = self
                .instance
                .as_ref()
                .map_or(0, ActorInstance::memory_bytes);
        }
        self.sync_live(true);
        tracing::debug!(
            target: "stasis_worker::timing",
            actor = %self.name,
            spawn_ms = stasis_contract::status::ms(spawned_at),
            capture_ms = stasis_contract::status::ms(captured_at - spawned_at),
            write_ms = stasis_contract::status::ms(started.elapsed() - captured_at),
            "create timed"
        );
        let what = if state.is_some() {
            "upgraded (state handed over)"
        } else {
            "created"
        };
        self.log.event(&format!("{what}: snapshot {}", report.seq));
        Ok(report)
    }

    /// Keeps the worker's `--max-live` bookkeeping in step with the
    /// instance: a running actor is in the recency order (moved to its
    /// most recent end when `used`), an actor without an instance holds
    /// no slot.
    pub(super) fn sync_live(&mut self, used: bool) {
        let Some(live) = &self.live else {
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
        if let (Some(live), None) = (&self.live, &self.slot) {
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
                    None if self.journaled.is_some() => self.seal_parked(Instant::now()).await,
                    None => Err(ApiError::new(
                        ErrorKind::Conflict,
                        format!("actor {} is not running", self.name),
                    )),
                };
                if result.is_ok() {
                    self.metrics.checkpointed(&self.worker, &self.name);
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
                if let Err(e) = self
                    .seal(Instant::now(), super::journaled::Then::Keep)
                    .await
                {
                    tracing::warn!(actor = %self.name, "writing its journal entry to the store: {e}");
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

    async fn pause(&mut self) -> Result<SnapshotReport, ApiError> {
        let started = Instant::now();
        if self.instance.is_none() {
            if let Some(reason) = self.failed_reason() {
                return Err(ApiError::new(
                    ErrorKind::Conflict,
                    format!("actor {} failed: {reason}", self.name),
                ));
            }
            let newest = self.status().snapshot;
            return Ok(SnapshotReport {
                seq: newest.map_or(0, |s| s.seq),
                snapshot_bytes: newest.map_or(0, |s| s.bytes),
                bytes_written: 0,
                duration_ms: 0.0,
                changed: false,
            });
        }
        self.set_state(ActorState::Pausing);
        if let Some(now_ns) = self.instance.as_ref().map(ActorInstance::clock_ns) {
            self.lease_clock(now_ns);
        }
        let hook = match self.instance.as_mut() {
            Some(instance) => instance.on_pause().await,
            None => Ok(()),
        };
        if let Err(e) = hook {
            let answer = self.after_failed_call(e).await;
            let message = format!("on_pause hook failed: {}", answer.message());
            return Err(answer.with_message(message));
        }
        match self.snapshot_if_changed(started).await {
            Ok(mut report) => {
                self.drop_instance(true);
                report.duration_ms = ms(started.elapsed());
                self.metrics
                    .pause_seconds
                    .observe(started.elapsed().as_secs_f64());
                let mut status = self.status();
                status.state = ActorState::Paused;
                status.last_pause_ms = Some(report.duration_ms);
                status.last_pause_at_unix_ms = stasis_contract::status::now_unix_ms();
                status.memory_bytes = 0;
                drop(status);
                self.log.event(&format!("paused: snapshot {}", report.seq));
                Ok(report)
            }
            Err(e) => {
                // A capture that found its mapped files changed failed
                // the actor (`fail_mapped`): it stays failed.
                if self.instance.is_some() {
                    self.set_state(ActorState::Running);
                }
                Err(e)
            }
        }
    }

    /// Captures the actor for a move. A live instance is snapshotted (and
    /// kept, in case the move rolls back); a paused actor hands over its
    /// newest snapshot as it is.
    async fn capture(&mut self) -> Result<Captured, ApiError> {
        if let Some(reason) = self.failed_reason() {
            return Err(ApiError::conflict(format!(
                "actor {} failed: {reason}",
                self.name
            )));
        }
        let live = self.instance.is_some();
        if let Some(now_ns) = self.instance.as_ref().map(ActorInstance::clock_ns) {
            self.clock.settle(self.store.as_ref(), &self.name, now_ns);
        }
        let seq = if live {
            self.snapshot(Instant::now()).await?.seq
        } else if self.journaled.is_some() {
            // The target installs from the store.
            self.seal_parked(Instant::now()).await?.seq
        } else {
            self.newest_seq()
                .ok_or_else(|| ApiError::internal(format!("actor {} has no snapshot", self.name)))?
        };
        self.set_state(ActorState::Migrating);
        self.log
            .event(&format!("captured for a move: snapshot {seq}"));
        Ok(Captured { seq, live })
    }
}
