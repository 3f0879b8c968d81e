//! The journal path of an actor task (durability levels `request` and
//! `store`, see [`crate::journaled`], which owns the actor's
//! [`DurableState`](crate::journaled::DurableState)): after a delivery,
//! its input and tape are appended to the logical journal (and a snapshot
//! is captured once they pass a threshold); a resume replays the
//! deliveries since the newest snapshot. A create's snapshot 0 held as a
//! journal entry is *sealed* into the store before the first delivery.

use std::sync::Arc;
use std::time::Instant;

use stasis_core::journal::{Durable, EntryKind};
use stasis_core::snapshot;
use stasis_core::snapshot::delta::MIN_DELTA_ROOT_PAGES;

use opentelemetry::Context;
use stasis_contract::delivery::DueAlarm;
use stasis_core::instance::ActorInstance;
use stasis_core::journal::RecoveredEntry;
use stasis_core::journal::delivery::DeliveryRecord;
use stasis_host_api::sockets::SocketEvent;
use stasis_host_api::{Request, Response};

use super::ActorTask;
use crate::guest::{self, Work};
use crate::host_calls::services::ActorHostServices;
use crate::idempotency::Keyed;
use crate::journaled::{Journaled, Log, NotAppended, Then, entry_error};
use stasis_contract::error::ApiError;
use stasis_contract::settings::Durability;
use stasis_contract::status::SnapshotReport;

impl ActorTask {
    /// The journal, when this actor's requests go through it: level
    /// `request` or `store`, over a store that keeps deltas (an entry is
    /// sealed as one), on a worker with the data dir's journal and no
    /// replicator, or with a shipped journal (a cluster worker).
    pub(super) fn journal_on(&self) -> Option<Log> {
        let level = matches!(
            self.settings.durability,
            Durability::Request | Durability::Store
        );
        if !level || !self.ctx.store.supports_deltas() {
            return None;
        }
        match self.ctx.journal.get()? {
            Log::Local(_) if self.ctx.replicator.is_some() => None,
            log => Some(log.clone()),
        }
    }

    /// Whether this actor's deliveries go to the logical journal
    /// ([`crate::journaled`]).
    pub(super) fn logical_journal(&self) -> bool {
        self.journal_on().is_some()
    }

    /// After how many requests the actor checkpoints: `--checkpoint-every`,
    /// or after each one at level `request` without a journal (a worker
    /// process, or a store without deltas), which makes each answer wait
    /// for its snapshot instead.
    pub(super) fn checkpoint_every(&self) -> u64 {
        let level = matches!(
            self.settings.durability,
            Durability::Request | Durability::Store
        );
        if level && self.journal_on().is_none() {
            1
        } else {
            self.settings.checkpoint_every
        }
    }

    /// After `work` ran and answered `answer`: appends its entry (input,
    /// tape, answer digest) to the journal; returns what the answer must
    /// wait for.
    ///
    /// # Errors
    /// 503 when the journal failed or refused the entry: the caller rolls
    /// the delivery back.
    pub(super) async fn journal_delivery<W: Work>(
        &mut self,
        work: &W,
        answer: &W::Answer,
    ) -> Result<Option<Durable>, NotAppended> {
        let Some(journal) = self.journal_on() else {
            return Ok(None);
        };
        if let Some(e) = journal.failed() {
            return Err(NotAppended::Failed(entry_error(&e)));
        }
        // A worker past its lease keeps nothing of what it ran: its actor
        // may have an owner elsewhere (see `fence`).
        self.ctx
            .store
            .check_fence(&self.name)
            .map_err(|e| NotAppended::Failed(e.into()))?;
        let instance = self
            .instance
            .as_ref()
            .ok_or_else(|| NotAppended::Failed(ApiError::internal("no instance")))?;
        let (tape, worker) = (instance.tape().take(), instance.worker().to_owned());
        let durable = &mut self.kept.durable;
        let record = DeliveryRecord {
            index: durable.since.len() as u64 + 1,
            input_kind: W::INPUT,
            resumed: std::mem::take(&mut self.chain.resumed),
            paused: std::mem::take(&mut self.chain.paused),
            answer: W::digest(answer),
            worker,
            input: work.encode(),
            tape,
        };
        let bytes = Arc::new(record.encode());
        // Every delivery follows the newest snapshot in the store (a
        // create's snapshot 0 was sealed before the first one ran).
        let base = durable.next_seq.saturating_sub(1);
        let appended = journal
            .append(
                EntryKind::Delivery,
                self.kept.epoch,
                base,
                &self.name,
                &bytes,
            )
            .map_err(|e| {
                if e.is_refusal() {
                    NotAppended::Refused(entry_error(&e))
                } else {
                    NotAppended::Failed(entry_error(&e))
                }
            })?;
        self.ctx.metrics.journaled(bytes.len());
        durable.since.push(Arc::new(record));
        durable.since_bytes += bytes.len();
        durable.since_first.get_or_insert_with(Instant::now);
        durable.gate = Some(appended.clone());
        Ok(Some(appended))
    }

    /// A restart found `entries` (deliveries after the actor's newest
    /// snapshot) in the journal: its next resume replays them.
    ///
    /// # Errors
    /// Why they cannot be (they follow another snapshot than the newest).
    pub(crate) fn recovered(&mut self, entries: Vec<RecoveredEntry>) -> Result<(), String> {
        let newest = self.kept.durable.next_seq.checked_sub(1);
        if let Some(entry) = entries.iter().find(|e| Some(e.base) != newest) {
            return Err(format!(
                "its journal entries follow snapshot {}, but its newest snapshot is {}",
                entry.base,
                newest.map_or_else(|| "none".to_owned(), |n| n.to_string())
            ));
        }
        let durable = &mut self.kept.durable;
        for entry in entries {
            durable.since_bytes += entry.record.encoded_len();
            durable.since.push(Arc::new(entry.record));
        }
        durable.since_first = Some(Instant::now());
        Ok(())
    }

    /// Before a delivery runs on the live instance: with the logical
    /// journal, the tape records it (keeping `on_resume`'s values for its
    /// entry), and guest code that ran outside a delivery since the newest
    /// snapshot (a hook, a hand-over) is captured first, since no entry
    /// holds it; so is an actor a lost round of the shipped journal broke.
    ///
    /// # Errors
    /// The snapshot's (507 quota, 500 I/O), or 507 while the data dir's
    /// disk has no room for the journal: the delivery does not run.
    pub(super) async fn before_delivery(&mut self) -> Result<(), ApiError> {
        let Some(journal) = self.journal_on() else {
            return Ok(());
        };
        // No room on the disk for the journal: refused before it runs.
        if let Some(e) = journal.no_room() {
            return Err(entry_error(&e));
        }
        // A lost round of the shipped journal held entries since the
        // newest snapshot: the next one would follow a hole.
        let broken = journal.broken(&self.name);
        if self.chain.unjournaled || broken {
            self.snapshot(Instant::now()).await?;
            self.chain.unjournaled = false;
        }
        // A fresh recording, unless hooks recorded what this entry holds
        // first (`on_resume`, `on_pause`).
        if !self.chain.resumed
            && self.chain.paused == 0
            && let Some(instance) = &self.instance
        {
            instance.tape().record();
        }
        Ok(())
    }

    /// After a delivery's answer went to the output gate: captures a
    /// snapshot when the deliveries since the newest one passed a
    /// threshold ([`crate::journaled`]), so a replay stays short and the
    /// journal's old segments go.
    pub(super) async fn snapshot_if_due(&mut self) {
        if self.instance.is_none() || !self.kept.durable.snapshot_due() {
            return;
        }
        if let Err(e) = self.snapshot(Instant::now()).await {
            tracing::warn!(actor = %self.name, "snapshot after {} journal entries: {e}", self.kept.durable.since.len());
        }
    }

    /// Replays the deliveries since the newest snapshot on `instance`,
    /// just restored from it: each with its tape, its `on_resume` first
    /// where it ran, its answer checked against the digest recorded.
    ///
    /// Returns the answers of the requests replayed that carry an
    /// idempotency key, in order, for the actor's table
    /// ([`crate::idempotency`]).
    ///
    /// # Errors
    /// Why the replay stopped: a delivery failed, read other host values
    /// than it recorded, or answered otherwise (the actor is failed with
    /// it; its entries stay in the journal for a repair).
    pub(super) fn replay_since(
        &self,
        instance: &mut ActorInstance,
    ) -> impl Future<Output = Result<Vec<(Keyed, Response)>, String>> + Send {
        // Owned: the task (which holds a live instance, not `Sync`) is not
        // borrowed across the replay's awaits.
        let since = self.kept.durable.since.clone();
        let services = self.services.clone();
        let base = self.kept.durable.next_seq.saturating_sub(1);
        let actor = self.name.clone();
        async move {
            let started = Instant::now();
            let keyed = replay(instance, &since, &services, base).await?;
            if !since.is_empty() {
                tracing::info!(
                    actor = %actor,
                    entries = since.len(),
                    ms = started.elapsed().as_secs_f64() * 1e3,
                    "journal entries replayed"
                );
            }
            Ok(keyed)
        }
    }
}

/// Replays `since` (the deliveries after snapshot `base`) on `instance`
/// ([`ActorTask::replay_since`]), each naming the worker it ran on; the
/// instance names its own again after. Returns the keyed requests'
/// answers.
async fn replay(
    instance: &mut ActorInstance,
    since: &[Arc<DeliveryRecord>],
    services: &ActorHostServices,
    base: u64,
) -> Result<Vec<(Keyed, Response)>, String> {
    let worker = instance.worker().to_owned();
    let mut keyed = Vec::new();
    let mut result = Ok(());
    for record in since {
        match replay_entry(instance, record, services, base).await {
            Ok(Some(answer)) => keyed.push(answer),
            Ok(None) => {}
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    instance.set_worker(&worker);
    result.map(|()| keyed)
}

/// Replays one entry (`record`, after snapshot `base`) on `instance`;
/// returns a request's answer when it carries an idempotency key.
async fn replay_entry(
    instance: &mut ActorInstance,
    record: &DeliveryRecord,
    services: &ActorHostServices,
    base: u64,
) -> Result<Option<(Keyed, Response)>, String> {
    let at = |what: String| {
        format!(
            "replaying journal entry {base}.{} (snapshot.delivery) diverged: {what}; the entries \
             stay in the journal (repair with `stasis actor resume NAME --from-snapshot N`)",
            record.index
        )
    };
    instance.set_worker(&record.worker);
    instance.tape().replay(record.tape.clone());
    if record.resumed {
        instance
            .on_resume()
            .await
            .map_err(|e| at(format!("its on_resume hook failed: {e}")))?;
    }
    for _ in 0..record.paused {
        instance
            .on_pause()
            .await
            .map_err(|e| at(format!("its on_pause hook failed: {e}")))?;
    }
    let mut keyed = None;
    let digest = match record.input_kind {
        guest::REQUEST => replay_request(instance, services, record, &mut keyed).await,
        guest::ALARM => replay_one::<DueAlarm>(instance, services, record).await,
        guest::SOCKET => replay_one::<SocketEvent>(instance, services, record).await,
        other => Err(format!("unknown input kind {other}")),
    }
    .map_err(at)?;
    instance.tape().finish_replay().map_err(at)?;
    if digest != record.answer {
        return Err(at(format!(
            "its answer's digest is {digest:016x}, recorded {:016x} (the guest is not \
             deterministic over its recorded host values)",
            record.answer
        )));
    }
    Ok(keyed)
}

impl ActorTask {
    /// Writes the newest journal entry to the store as the snapshot it is
    /// (module docs) and reports it; `None` when there is none, or when
    /// `then` is [`Then::Capture`] and a capture of the live instance is
    /// the better snapshot: the actor's chain is below a delta's 1 MiB (a
    /// full snapshot costs the same and keeps one file per snapshot), or
    /// the chain the entry is a delta on was broken behind the actor's back
    /// (a file removed or replaced). The journal lets the entry go once a
    /// snapshot is written ([`ActorTask::write_snapshot`]).
    ///
    /// # Errors
    /// The store's (507 quota, 500 I/O): the entry stays the newest.
    pub(super) async fn seal(
        &mut self,
        started: Instant,
        then: Then,
    ) -> Result<Option<SnapshotReport>, ApiError> {
        // Kept until a snapshot is written (`write_snapshot` lets it go):
        // if the caller's capture is not written (the quota, the disk, or
        // nothing changed), a rollback still finds it and a fold writes it.
        let Some(newest) = self.kept.durable.journaled.clone() else {
            return Ok(None);
        };
        debug_assert_eq!(newest.seq, self.kept.durable.next_seq);
        if then == Then::Capture && self.instance.is_some() {
            let small = self
                .chain
                .base
                .as_ref()
                .is_some_and(|base| base.root_pages < MIN_DELTA_ROOT_PAGES);
            if small {
                return Ok(None);
            }
            if !self.chain_holds(&newest) {
                tracing::warn!(
                    actor = %self.name,
                    "the chain of its journal entry no longer restores; a full snapshot instead"
                );
                return Ok(None);
            }
        }
        self.write_snapshot(newest.bytes, started).await.map(Some)
    }

    /// Whether the store still holds the chain `entry` is a delta on (a
    /// full entry needs none).
    fn chain_holds(&self, entry: &Journaled) -> bool {
        let Some(base) = snapshot::peek_header(&entry.bytes)
            .ok()
            .and_then(|header| header.base)
        else {
            return true;
        };
        self.open_chain_at(base.seq)
            .is_ok_and(|chain| chain.head_crc32c() == base.crc32c)
    }

    /// The actor's journal entries no longer apply (it is deleted, moved
    /// away, or repaired from another source).
    pub(super) fn forget_journal(&mut self) {
        self.kept.durable.forget();
        if let Some(journal) = self.ctx.journal.get() {
            journal.forget(&self.name, self.kept.epoch);
        }
    }
}

/// Replays one request (`record`) on `instance`; returns its answer's
/// digest, and puts the answer in `keyed` when the request carries an
/// idempotency key.
async fn replay_request(
    instance: &mut ActorInstance,
    services: &ActorHostServices,
    record: &DeliveryRecord,
    keyed: &mut Option<(Keyed, Response)>,
) -> Result<u64, String> {
    let request =
        <Arc<Request> as Work>::decode(&record.input).ok_or("its input does not decode")?;
    let answer = request
        .run(instance, services, &Context::new())
        .await
        .map_err(|e| format!("the delivery failed: {e}"))?;
    let digest = <Arc<Request> as Work>::digest(&answer);
    *keyed = Keyed::of(&request).map(|key| (key, answer));
    Ok(digest)
}

/// Replays one delivery of kind `W` (`record`) on `instance`; returns its
/// answer's digest.
async fn replay_one<W: Work>(
    instance: &mut ActorInstance,
    services: &ActorHostServices,
    record: &DeliveryRecord,
) -> Result<u64, String> {
    let work = W::decode(&record.input).ok_or("its input does not decode")?;
    let answer = work
        .run(instance, services, &Context::new())
        .await
        .map_err(|e| format!("the delivery failed: {e}"))?;
    Ok(W::digest(&answer))
}
