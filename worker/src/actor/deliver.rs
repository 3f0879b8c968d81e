//! One delivery in an actor task: resume the actor if it has no instance,
//! run the request, alarm or socket event in the guest, make its effect as durable as
//! the actor's level says (a journal entry behind the output gate, or a
//! checkpoint), and roll the actor back when the guest trapped.

use std::time::Instant;

use stasis_core::instance::CallError;
use stasis_core::journal::Durable;

use super::ActorTask;
use crate::guest::Work;
use crate::idempotency::Recall;
use crate::journaled::{NotAppended, Then, send_gated};
use crate::mailbox::{Input, Ticket};
use opentelemetry::trace::{Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};
use stasis_contract::client_gone;
use stasis_contract::delivery::DueAlarm;
use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::status::{ActorState, ResumeFrom};
use stasis_contract::trace;
use tokio::sync::oneshot;

impl ActorTask {
    /// Runs one delivery unless its ticket was given up, and sends the
    /// answer (through the output gate, [`send_gated`]).
    pub(super) async fn deliver(&mut self, epoch: u64, ticket: &Ticket, input: Input) {
        if !ticket.start() {
            return;
        }
        if epoch != self.kept.epoch {
            input.refuse(ApiError::new(
                ErrorKind::StaleEpoch,
                format!(
                    "stale placement epoch {epoch} for actor {} (now {})",
                    self.name, self.kept.epoch
                ),
            ));
            return;
        }
        match input {
            Input::Request { request, reply } => self.run_delivery(&request, ticket, reply).await,
            Input::Alarm { setter, reply } => {
                self.run_delivery(&DueAlarm { setter }, ticket, reply).await;
            }
            Input::Socket { event, reply } => self.run_delivery(&*event, ticket, reply).await,
        }
    }

    /// Runs `work` in the guest and sends its answer on `reply` through
    /// the output gate.
    async fn run_delivery<W: Work>(
        &mut self,
        work: &W,
        ticket: &Ticket,
        reply: oneshot::Sender<Result<W::Answer, ApiError>>,
    ) {
        let (result, gate) = split(self.run_guest(work, ticket).await);
        self.release_socket_ops(result.is_ok(), gate.as_ref());
        // The delivery's log lines are visible (and in the store) before
        // its answer is sent.
        self.log.settle(self.instance.is_none());
        send_gated(reply, result, gate);
        self.snapshot_if_due().await;
    }

    /// Releases the socket writes of the delivery that just ran behind its
    /// `gate` (the output gate: no client hears of an effect before it is
    /// durable), or drops them when it failed.
    fn release_socket_ops(&self, ran: bool, gate: Option<&Durable>) {
        if ran {
            self.services.release_socket_ops(gate.cloned());
        } else {
            self.services.discard_socket_ops();
        }
    }

    /// [`ActorTask::run_traced`] in the delivery's span (`stasis.request`,
    /// `stasis.alarm` or `stasis.socket`), a child of `parent` (see
    /// [`stasis_contract::trace`]).
    async fn run_guest<W: Work>(
        &mut self,
        work: &W,
        ticket: &Ticket,
    ) -> Result<(W::Answer, Option<Durable>), ApiError> {
        let parent = work.parent();
        let tracer = trace::tracer();
        let span = tracer
            .span_builder(W::SPAN)
            .with_attributes([
                KeyValue::new("stasis.actor", self.name.clone()),
                KeyValue::new("stasis.worker", self.ctx.worker.clone()),
                KeyValue::new(
                    "stasis.epoch",
                    i64::try_from(self.kept.epoch).unwrap_or(i64::MAX),
                ),
            ])
            .with_links(work.links())
            .start_with_context(&tracer, &parent);
        let cx = parent.with_span(span);
        let result = self.run_traced(work, ticket, &cx).await;
        if let Err(e) = &result {
            cx.span().set_status(Status::error(e.message().to_owned()));
        }
        cx.span().end();
        result
    }

    /// Runs `work` in the guest (resuming the actor first if it has no
    /// instance), then makes its effect durable as the actor's level says
    /// (a journal entry, whose durability the answer waits for; or a
    /// checkpoint as `--checkpoint-every` says); each step a child span of
    /// `cx`'s.
    async fn run_traced<W: Work>(
        &mut self,
        work: &W,
        ticket: &Ticket,
        cx: &Context,
    ) -> Result<(W::Answer, Option<Durable>), ApiError> {
        // A worker woken after its lease ended runs nothing more: the
        // actor may be placed elsewhere now (see `crate::fence`).
        if self.ctx.store.check_fence(&self.name).is_err() {
            return Err(ApiError::unavailable(format!(
                "worker {} holds no valid lease for actor {}: the request was not run (the \
                 actor may be placed on another worker now; send it again)",
                self.ctx.worker, self.name
            )));
        }
        if self.instance.is_none() {
            if let Some(reason) = self.failed_reason() {
                return Err(ApiError::failed(format!(
                    "actor {} failed: {reason}",
                    self.name
                )));
            }
            // A client that leaves while its request waits for a slot
            // takes the request with it.
            tokio::select! {
                taken = self.take_slot() => taken?,
                () = ticket.abandoned() => return Err(client_gone::abandoned(&self.name)),
            }
            let _span = trace::tracer().start_with_context("stasis.resume", cx);
            self.resume(ResumeFrom::Newest).await?;
        }
        // A create's snapshot 0 that is still only a journal entry goes to
        // the store before the first request runs: it stays the actor's
        // initial state (a patch of the entry would change it), and the
        // request's entry is a delta on it.
        if self
            .kept
            .durable
            .journaled
            .as_ref()
            .is_some_and(|newest| newest.seq == 0)
        {
            self.seal(Instant::now(), Then::Keep).await?;
        }
        // A retry under a key the actor remembers is not run: it gets the
        // first answer, once the entries it depends on are durable.
        let keyed = match work.recall(&self.name, &mut self.kept.idem) {
            Recall::Run(keyed) => keyed,
            Recall::Answer(answer) => {
                return answer.map(|answer| (answer, self.kept.durable.gate.clone()));
            }
        };
        self.before_delivery().await?;
        if !ticket.run() {
            return Err(client_gone::abandoned(&self.name));
        }
        let instance = self
            .instance
            .as_mut()
            .ok_or_else(|| ApiError::internal("no instance"))?;
        let result = work.run(instance, &self.services, cx).await;
        let memory_bytes = instance.memory_bytes();
        {
            let mut status = self.status();
            W::count(&mut status, &result, stasis_contract::status::now_unix_ms());
            status.last_active = Some(Instant::now());
            status.memory_bytes = memory_bytes;
        }
        let answer = match result {
            Ok(answer) => answer,
            Err(e) => return Err(self.after_failed_call(e).await),
        };
        // Remembered before the entry and the checkpoint, which hold the
        // table; forgotten again if the delivery is rolled back.
        let key = keyed.map(|keyed| {
            let key = keyed.key().to_owned();
            W::remember(keyed, &answer, &mut self.kept.idem);
            key
        });
        match self.make_durable(work, &answer, cx).await {
            Ok(gate) => Ok((answer, gate)),
            Err(e) => {
                if let Some(key) = key {
                    self.kept.idem.forget(&key);
                }
                Err(e)
            }
        }
    }

    /// After `work` ran and answered `answer`: makes its effect durable as
    /// the actor's level says (a journal entry, whose durability the
    /// answer waits for, returned; or a checkpoint as `--checkpoint-every`
    /// says), each step a child span of `cx`'s.
    ///
    /// # Errors
    /// The entry's or the checkpoint's failure: the delivery was rolled
    /// back.
    async fn make_durable<W: Work>(
        &mut self,
        work: &W,
        answer: &W::Answer,
        cx: &Context,
    ) -> Result<Option<Durable>, ApiError> {
        self.kept.durable.since_checkpoint += 1;
        let journaled = {
            let _span = trace::tracer().start_with_context("stasis.journal", cx);
            self.journal_delivery(work, answer).await
        };
        let gate = match journaled {
            Ok(gate) => gate,
            Err(e) => return Err(self.after_failed_entry(e)),
        };
        let every = self.checkpoint_every();
        if every > 0 && self.kept.durable.since_checkpoint >= every {
            let span = trace::tracer().start_with_context("stasis.checkpoint", cx);
            let written = self.snapshot(Instant::now()).await;
            drop(span);
            match written {
                Ok(_) => {
                    self.ctx.metrics.checkpointed(&self.ctx.worker, &self.name);
                }
                Err(e) if every == 1 => {
                    return Err(self.after_failed_checkpoint(e).await);
                }
                Err(e) => tracing::warn!(actor = %self.name, "checkpoint failed: {e}"),
            }
        }
        Ok(gate)
    }

    /// Drops a poisoned instance and rolls the actor back to its newest
    /// acknowledged state: its newest journal entry, written to the store
    /// first, or else its newest snapshot (DESIGN.md, "Traps").
    pub(super) async fn after_failed_call(&mut self, error: CallError) -> ApiError {
        // A trap's detail (wasmtime's message, the guest's panic and
        // stderr) is for the actor's log and `actor get`, never the
        // client: the answer names the trap by an id found in both.
        let (answer, detail) = match &error {
            CallError::Trap(_) | CallError::Host(_) => {
                let id = trap_id();
                let answer = ApiError::call(
                    &error,
                    format!(
                        "actor {} trapped ({id}): the request was not applied, and the actor is \
                         back at its last acknowledged state; the detail is in its log and in \
                         `stasis actor get {}`",
                        self.name, self.name
                    ),
                );
                (answer, format!("{error} ({id})"))
            }
            _ => (ApiError::call(&error, error.to_string()), error.to_string()),
        };
        // A bad response came after the guest ran: with the logical
        // journal its effect is in no entry, so it is rolled back too (it
        // was answered as failed).
        let ran = matches!(error, CallError::BadResponse(_)) && self.logical_journal();
        if !error.poisons_instance() && !ran {
            return answer;
        }
        if let CallError::MappedFileChanged(reason) = &error {
            return self.fail_mapped(reason);
        }
        self.ctx.metrics.trapped(&self.ctx.worker, &self.name);
        self.log.event(&format!("trapped: {detail}; rolling back"));
        tracing::warn!(actor = %self.name, "{detail}; rolling back to the last acknowledged state");
        if let Err(e) = self.seal(Instant::now(), Then::Keep).await {
            // The entry stays the newest: the restore below reads it.
            tracing::warn!(actor = %self.name, "writing its journal entry to the store: {e}");
        }
        self.drop_instance(false);
        self.status().set_error(detail);
        if let Err(e) = self.resume(ResumeFrom::Newest).await {
            tracing::error!(actor = %self.name, "rollback failed: {e}");
        }
        answer
    }

    /// The journal refused the request's entry (it failed: what reached
    /// the disk is unknown). The request ran, so the actor's memory holds
    /// an effect that is not durable; it must not be answered as done nor
    /// seen by a later request. The actor is failed until the server
    /// restarts, which replays what is on disk. A refusal (no room on the
    /// disk, a shipped journal's broken actor) drops the instance only: the
    /// next resume replays the acknowledged deliveries.
    fn after_failed_entry(&mut self, error: NotAppended) -> ApiError {
        self.drop_instance(false);
        self.sync_live(false);
        let error = match error {
            NotAppended::Refused(error) => {
                // Nothing written, and the journal takes entries again
                // later (the disk has room, the broken actor's snapshot is
                // in the store): the next resume rolls the actor back to
                // its acknowledged state.
                tracing::warn!(actor = %self.name, "{}", error.message());
                return error;
            }
            NotAppended::Failed(error) => error,
        };
        if self.ctx.store.check_fence(&self.name).is_err() {
            // Fenced off: the instance goes, and whatever this worker
            // acknowledged stays for the actor's next owner.
            tracing::warn!(actor = %self.name, "{}", error.message());
            return error;
        }
        tracing::error!(actor = %self.name, "journal: {}", error.message());
        self.kept.durable.journaled = None;
        let mut status = self.status();
        status.state = ActorState::Failed;
        status.set_error(error.message().to_owned());
        error
    }

    /// With a checkpoint per request (`--checkpoint-every 1` at level
    /// `pause`, or level `request` without a journal) an answer is sent
    /// only after its snapshot is durable: when that checkpoint fails (`error`:
    /// the quota, the disk), the request's effect is undone by rolling the
    /// actor back to its newest snapshot, as after a trap, and the answer
    /// is `error`'s status, so a client may send the request again.
    ///
    /// A worker that lost its lease does not roll back (the actor may run
    /// elsewhere now): it drops the instance; and when the lease ended
    /// while the snapshot was written, nothing is undone and the answer
    /// says the outcome is unknown.
    async fn after_failed_checkpoint(&mut self, error: ApiError) -> ApiError {
        tracing::warn!(
            actor = %self.name,
            "checkpoint failed: {}; rolling back to the newest snapshot",
            error.message()
        );
        self.drop_instance(false);
        if std::mem::take(&mut self.wrote_unfenced) {
            return error;
        }
        // Fenced off, nothing was written: the effect is gone with the
        // instance, and the actor may run elsewhere now.
        let fenced = self.ctx.store.check_fence(&self.name).is_err();
        if !fenced && let Err(e) = self.resume(ResumeFrom::Newest).await {
            tracing::error!(actor = %self.name, "rollback failed: {e}");
        }
        let message = format!(
            "the request ran but its checkpoint failed, so it was undone (the actor is back at \
             its newest snapshot): {}",
            error.message()
        );
        error.with_message(message)
    }

    /// A snapshot file mapped into the instance's memory changed under
    /// the mapping (`stasis_core::mapped`): the memory is not the actor's
    /// state, so the instance is dropped uncaptured and the actor failed
    /// until a repair (`resume --from-snapshot`/`--from-template`).
    pub(super) fn fail_mapped(&mut self, reason: &str) -> ApiError {
        let reason = format!(
            "a snapshot file mapped into actor {}'s memory changed under its mapping ({reason}); \
             nothing was captured from that memory: repair it with a resume from a snapshot",
            self.name
        );
        tracing::error!(actor = %self.name, "{reason}");
        self.drop_instance(false);
        self.sync_live(false);
        let mut status = self.status();
        status.state = ActorState::Failed;
        status.set_error(reason.clone());
        ApiError::failed(reason)
    }

    pub(super) fn failed_reason(&self) -> Option<String> {
        let status = self.status();
        (status.state == ActorState::Failed).then(|| status.error.clone().unwrap_or_default())
    }
}

/// The answer and its gate, or the error (which waits for nothing).
fn split<T>(
    result: Result<(T, Option<Durable>), ApiError>,
) -> (Result<T, ApiError>, Option<Durable>) {
    match result {
        Ok((answer, gate)) => (Ok(answer), gate),
        Err(e) => (Err(e), None),
    }
}

/// A short random id of a trap, given to the client and kept with the
/// trap's detail in the actor's log and `actor get`.
fn trap_id() -> String {
    let mut bytes = [0u8; 4];
    let _ = getrandom::fill(&mut bytes);
    format!("trap {}", hex::encode(bytes))
}
