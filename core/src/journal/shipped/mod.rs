//! The shipped journal of a cluster worker: its actors' entries are
//! group-committed into the snapshot store as **journal segments**, one
//! object per round (`journal/<worker>/<run>-<round>.seg`, records in the
//! local journal's format, [`super::entry`]), so a worker lost with its
//! disk loses no acknowledged request and the number of PUTs per second
//! does not grow with the request rate: a round takes every entry
//! appended while the previous round's PUT ran, and keeps only each
//! actor's newest (an entry holds every page changed since the actor's
//! newest snapshot, so the newest alone gives its state).
//!
//! [`ShippedJournal::append`] returns a [`Durable`] that resolves when the
//! round carrying the entry is in the store; a round the store did not
//! take (its PUT failed, or the worker's lease ended: the store's
//! [`SnapshotStore::check_fence`]) resolves its entries with an error
//! saying the request may or may not have been applied (a PUT whose
//! answer was lost may have landed). The next entry of each such actor is
//! whole again, so nothing later depends on the lost round.
//!
//! An actor's entry stops mattering once it is written to the store as
//! the snapshot it is ([`ShippedJournal::settled`]; the worker folds
//! entries older than [`FOLD_AFTER`], see [`ShippedJournal::pinning`]);
//! a segment no actor's newest entry is in is deleted after the next
//! round. When an actor is placed on a worker,
//! [`ShippedJournal::recover`] reads the segments in the store (every
//! worker's, decoded once per segment and kept) and writes the actor's
//! newest entry to the store when it still applies (the rules of the
//! start-up replay: its base is there with the named CRC32C and its seq is
//! past the head); segments whose entries all no longer apply and that
//! are older than [`SWEEP_AFTER`] are deleted by whichever worker sees
//! them (a lost worker's segments too).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::watch;

use super::entry::{Entry, EntryKind};
use super::{Committed, Durable, JournalError};
use crate::snapshot_store::{SnapshotStore, StoreError};

mod recover;

/// An entry not written to the store as a snapshot this long after it was
/// appended is folded ([`ShippedJournal::pinning`]): the bound on how long
/// a segment is kept for a live actor (the default of
/// [`ShippedJournal::start`]'s `fold_after`).
pub const FOLD_AFTER: Duration = Duration::from_secs(5);

/// A segment whose entries all no longer apply is deleted once it is this
/// old, by any worker that reads it.
pub const SWEEP_AFTER: Duration = Duration::from_secs(60);

/// Attempts of one round's PUT before its entries are reported lost.
const PUT_ATTEMPTS: u32 = 3;

/// A journal segment in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentMeta {
    /// Its name under `journal/` (`<worker>/<run>-<round>.seg`).
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// How long ago it was written.
    pub age: Duration,
}

/// Where journal segments are kept: the snapshot store of a cluster
/// (`stasis_core::snapshot_objects`).
pub trait SegmentObjects: Send + Sync + std::fmt::Debug {
    /// Writes segment `name` whole.
    ///
    /// # Errors
    /// [`StoreError::Io`], or [`StoreError::Unknown`] when the answer was
    /// lost and the read-back failed too.
    fn put_segment(&self, name: &str, bytes: Bytes) -> Result<(), StoreError>;

    /// Every segment in the store, of every worker.
    ///
    /// # Errors
    /// [`StoreError::Io`].
    fn list_segments(&self) -> Result<Vec<SegmentMeta>, StoreError>;

    /// The bytes of segment `name`.
    ///
    /// # Errors
    /// [`StoreError::Io`], `NotFound` when it was deleted meanwhile.
    fn get_segment(&self, name: &str) -> Result<Bytes, StoreError>;

    /// Deletes segments `names` (a missing one is no error).
    ///
    /// # Errors
    /// [`StoreError::Io`].
    fn delete_segments(&self, names: &[String]) -> Result<(), StoreError>;
}

/// Counters of a shipped journal since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShippedStats {
    /// Segments put (group commits into the store).
    pub rounds: u64,
    /// Rounds the store did not take.
    pub lost_rounds: u64,
    /// Entries appended.
    pub entries: u64,
    /// Entries shipped (an actor's older entries in one round are not).
    pub shipped: u64,
    /// Bytes of segments put.
    pub bytes: u64,
}

/// One actor's entry waiting for its round.
#[derive(Debug)]
struct Pending {
    kind: EntryKind,
    epoch: u64,
    seq: u64,
    body: Arc<Vec<u8>>,
}

#[derive(Debug)]
struct State {
    /// Per actor, its newest entry appended since the last round started.
    pending: HashMap<String, Pending>,
    /// The round the pending entries go out in (rounds count from 1).
    open: u64,
    /// Per actor, the round of its newest entry not yet in the store as a
    /// snapshot, its epoch, and when it was appended.
    live: HashMap<String, (u64, u64, Instant)>,
    /// Per actor, the round whose segment holds its newest entry the
    /// store took (and that entry's epoch): that segment is kept until the
    /// entry is settled, whatever happens to later rounds.
    acked: HashMap<String, (u64, u64)>,
    /// Rounds of this run whose segment held an actor's acknowledged entry
    /// when a forget came (the actor left this worker: deleted, moved, or
    /// dropped when the lease ended): only the sweep deletes them, once
    /// their entries no longer apply, since a next owner may need one.
    orphans: BTreeSet<u64>,
    /// Rounds of this run whose segment is in the store.
    shipped: BTreeSet<u64>,
    stopping: bool,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    work: Condvar,
    committed: watch::Sender<Committed>,
    store: Arc<dyn SnapshotStore>,
    objects: Arc<dyn SegmentObjects>,
    worker: String,
    /// This run's first part of every segment name: segments of an
    /// earlier run of the same worker are another's to recover.
    run: u64,
    fold_after: Duration,
    /// Decoded segments of the store, by name: each actor's newest entry.
    seen: Mutex<HashMap<String, Arc<HashMap<String, Entry>>>>,
    stats: Counters,
}

#[derive(Debug, Default)]
struct Counters {
    rounds: AtomicU64,
    lost_rounds: AtomicU64,
    entries: AtomicU64,
    shipped: AtomicU64,
    bytes: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn segment_name(&self, round: u64) -> String {
        format!("{}{round:020}.seg", self.run_prefix())
    }

    /// The start of this run's segment names.
    fn run_prefix(&self) -> String {
        format!("{}/{:020}-", self.worker, self.run)
    }
}

/// A cluster worker's journal in the snapshot store (module docs).
#[derive(Debug)]
pub struct ShippedJournal {
    shared: Arc<Shared>,
    shipper: Mutex<Option<JoinHandle<()>>>,
}

impl ShippedJournal {
    /// Starts the shipped journal of worker `worker`: rounds go to
    /// `objects`, and the fence of `store` (the worker's own store
    /// handle) is asked before each; entries are folded `fold_after` they
    /// were appended ([`FOLD_AFTER`] is the default).
    ///
    /// # Errors
    /// If the shipper thread cannot be started.
    pub fn start(
        store: Arc<dyn SnapshotStore>,
        objects: Arc<dyn SegmentObjects>,
        worker: &str,
        fold_after: Duration,
    ) -> std::io::Result<Self> {
        let run = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                pending: HashMap::new(),
                open: 1,
                live: HashMap::new(),
                acked: HashMap::new(),
                orphans: BTreeSet::new(),
                shipped: BTreeSet::new(),
                stopping: false,
            }),
            work: Condvar::new(),
            committed: watch::Sender::new(Committed::default()),
            store,
            objects,
            worker: worker.to_owned(),
            run,
            fold_after,
            seen: Mutex::new(HashMap::new()),
            stats: Counters::default(),
        });
        let shipper = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("stasis-shipper".into())
                .spawn(move || ship_rounds(&shared))?
        };
        Ok(Self {
            shared,
            shipper: Mutex::new(Some(shipper)),
        })
    }

    /// Appends `actor`'s entry (a snapshot file, as snapshot `seq` at
    /// placement `epoch`, or a [`EntryKind::Forget`]) to the next round;
    /// it is in the store when the [`Durable`] resolves.
    ///
    /// # Errors
    /// [`JournalError`] when the journal is stopping, or for a patch
    /// (entries shipped are whole).
    pub fn append(
        &self,
        kind: EntryKind,
        epoch: u64,
        seq: u64,
        actor: &str,
        body: Arc<Vec<u8>>,
    ) -> Result<Durable, JournalError> {
        if matches!(kind, EntryKind::Patch | EntryKind::Pad) {
            return Err(JournalError(
                "the shipped journal takes whole entries only".into(),
            ));
        }
        let mut state = self.shared.lock();
        if state.stopping {
            return Err(JournalError("the worker is stopping".into()));
        }
        let round = state.open;
        match kind {
            EntryKind::Snapshot => {
                state
                    .live
                    .insert(actor.to_owned(), (round, epoch, Instant::now()));
            }
            _ => {
                // Both the acknowledged entry's segment and the forget's
                // own go to the sweep: the forget must not vanish before
                // the entry it drops.
                if let Some(&(acked, at)) = state.acked.get(actor)
                    && at <= epoch
                {
                    state.orphans.insert(acked);
                    state.orphans.insert(round);
                }
                state.settle(actor, epoch);
            }
        }
        state.pending.insert(
            actor.to_owned(),
            Pending {
                kind,
                epoch,
                seq,
                body,
            },
        );
        drop(state);
        self.shared.work.notify_one();
        self.shared.stats.entries.fetch_add(1, Ordering::Relaxed);
        Ok(Durable {
            end: round,
            committed: self.shared.committed.subscribe(),
            waiters: None,
        })
    }

    /// Puts a *tombstone* of `actor` in the next round: a forget that
    /// drops every earlier entry of the name in the store, of any worker
    /// or run. A worker creating an actor waits for it, so that no entry
    /// a deleted actor of the same name left on a lost worker ever becomes
    /// the new actor's state. Its segment is kept until the sweep finds no
    /// earlier entry of the name that still applies.
    ///
    /// # Errors
    /// [`JournalError`] when the journal is stopping.
    pub fn tombstone(&self, actor: &str) -> Result<Durable, JournalError> {
        let durable = self.append(
            EntryKind::Forget,
            recover::TOMBSTONE,
            0,
            actor,
            Arc::default(),
        )?;
        self.shared.lock().orphans.insert(durable.end);
        Ok(durable)
    }

    /// `actor`'s newest entry at `epoch` or before is in the store as a
    /// snapshot now (or no longer matters): no segment is kept for it.
    pub fn settled(&self, actor: &str, epoch: u64) {
        self.shared.lock().settle(actor, epoch);
    }

    /// Deletes this run's segments no actor's entry needs any more.
    pub fn collect(&self) {
        collect(&self.shared);
    }

    /// The actors whose newest entry was appended over `fold_after`
    /// ago: they keep its segment in the store until they write the entry
    /// as a snapshot.
    #[must_use]
    pub fn pinning(&self) -> Vec<String> {
        let state = self.shared.lock();
        state
            .live
            .iter()
            .filter(|(_, (_, _, at))| at.elapsed() >= self.shared.fold_after)
            .map(|(actor, _)| actor.clone())
            .collect()
    }

    /// Counters since the journal was started.
    #[must_use]
    pub fn stats(&self) -> ShippedStats {
        let c = &self.shared.stats;
        ShippedStats {
            rounds: c.rounds.load(Ordering::Relaxed),
            lost_rounds: c.lost_rounds.load(Ordering::Relaxed),
            entries: c.entries.load(Ordering::Relaxed),
            shipped: c.shipped.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
        }
    }
}

impl Drop for ShippedJournal {
    fn drop(&mut self) {
        self.shared.lock().stopping = true;
        self.shared.work.notify_all();
        let shipper = self
            .shipper
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(shipper) = shipper {
            let _ = shipper.join();
        }
    }
}

impl State {
    /// Drops `actor`'s entries if they are from `epoch` or before.
    fn settle(&mut self, actor: &str, epoch: u64) {
        if self.live.get(actor).is_some_and(|&(_, at, _)| at <= epoch) {
            self.live.remove(actor);
        }
        if self.acked.get(actor).is_some_and(|&(_, at)| at <= epoch) {
            self.acked.remove(actor);
        }
    }
}

/// The shipper thread: each round takes the pending entries, puts them as
/// one segment (asking the fence first), publishes the round's outcome,
/// and deletes this run's segments no live entry is in any more.
fn ship_rounds(shared: &Shared) {
    loop {
        let (round, pending) = {
            let mut state = shared.lock();
            while state.pending.is_empty() && !state.stopping {
                state = shared.work.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            if state.pending.is_empty() {
                return;
            }
            let round = state.open;
            state.open += 1;
            (round, std::mem::take(&mut state.pending))
        };
        let mut body = Vec::new();
        let mut actors: Vec<_> = pending.into_iter().collect();
        actors.sort_by(|a, b| a.0.cmp(&b.0));
        for (actor, entry) in &actors {
            super::entry::encode(
                &mut body,
                entry.kind,
                entry.epoch,
                entry.seq,
                actor,
                &entry.body,
            );
        }
        let name = shared.segment_name(round);
        let len = body.len() as u64;
        let outcome = put_round(shared, &name, Bytes::from(body));
        let stats = &shared.stats;
        match &outcome {
            Ok(()) => {
                stats.rounds.fetch_add(1, Ordering::Relaxed);
                stats
                    .shipped
                    .fetch_add(actors.len() as u64, Ordering::Relaxed);
                stats.bytes.fetch_add(len, Ordering::Relaxed);
                let mut state = shared.lock();
                state.shipped.insert(round);
                for (actor, entry) in &actors {
                    match entry.kind {
                        // Unless settled meanwhile (a seal after the
                        // append): then no segment is needed for it.
                        EntryKind::Snapshot
                            if state.live.get(actor).is_some_and(|&(at, ..)| at >= round) =>
                        {
                            state.acked.insert(actor.clone(), (round, entry.epoch));
                        }
                        _ => {}
                    }
                }
            }
            Err(why) => {
                stats.lost_rounds.fetch_add(1, Ordering::Relaxed);
                tracing::error!(segment = %name, "journal round lost: {why}");
                // A PUT whose answer was lost may have landed: the sweep
                // deletes it once its entries no longer apply.
                shared.lock().orphans.insert(round);
            }
        }
        shared.committed.send_modify(|c| {
            c.durable = round;
            if let Err(why) = outcome {
                c.lost.push_back((round, why));
                while c.lost.len() > 1024 {
                    c.lost.pop_front();
                }
            }
        });
        collect(shared);
    }
}

/// Puts one round's segment, retrying a failed PUT; the reason the round
/// is lost otherwise, as its requests' answer says it.
fn put_round(shared: &Shared, name: &str, body: Bytes) -> Result<(), Arc<str>> {
    let mut wait = Duration::from_millis(100);
    let mut attempt = 1;
    loop {
        // The fence first: a worker past its lease ships nothing.
        let put = shared
            .store
            .check_fence(name)
            .and_then(|()| shared.objects.put_segment(name, body.clone()));
        match put {
            Ok(()) => return Ok(()),
            Err(e @ (StoreError::Fenced { .. } | StoreError::Unknown { .. })) => {
                return Err(lost(&e));
            }
            Err(e) if attempt >= PUT_ATTEMPTS => return Err(lost(&e)),
            Err(e) => {
                tracing::warn!(segment = name, attempt, "putting a journal segment: {e}");
                std::thread::sleep(wait);
                wait *= 4;
                attempt += 1;
            }
        }
    }
}

fn lost(e: &StoreError) -> Arc<str> {
    format!(
        "the snapshot store did not take the journal segment holding this request's state \
         ({e}); the request may or may not have been applied"
    )
    .into()
}

/// Deletes this run's segments that no live entry is in (older rounds
/// than the newest shipped one only: a round in flight is never touched).
fn collect(shared: &Shared) {
    let doomed: Vec<u64> = {
        let state = shared.lock();
        let mut needed: BTreeSet<u64> = state.acked.values().map(|&(round, _)| round).collect();
        needed.extend(&state.orphans);
        state
            .shipped
            .iter()
            .copied()
            .filter(|round| !needed.contains(round))
            .collect()
    };
    if doomed.is_empty() {
        return;
    }
    let names: Vec<String> = doomed.iter().map(|&r| shared.segment_name(r)).collect();
    match shared.objects.delete_segments(&names) {
        Ok(()) => {
            let mut state = shared.lock();
            for round in doomed {
                state.shipped.remove(&round);
            }
        }
        Err(e) => tracing::warn!("deleting shipped journal segments: {e}"),
    }
}
