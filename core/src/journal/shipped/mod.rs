//! The shipped journal of a cluster worker: its actors' entries are
//! group-committed into the snapshot store as **journal segments**, one
//! object per round (`journal/<worker>/<run>-<round>.seg`, records in the
//! local journal's format, [`super::entry`]), so a worker lost with its
//! disk loses no acknowledged request and the number of PUTs per second
//! does not grow with the request rate: a round takes every entry
//! appended while the previous round's PUT ran.
//!
//! The entries are **logical**, as in the data dir's journal: a delivery's
//! input, the host values it read and its answer's digest
//! ([`super::delivery`], a few hundred bytes), on the actor's newest
//! snapshot in the store. The actor's acknowledged state is that snapshot
//! plus every delivery after it, so a round holds every entry appended
//! meanwhile, in order.
//!
//! [`ShippedJournal::append`] returns a [`Durable`] that resolves when the
//! round carrying the entry is in the store; a round the store did not
//! take (its PUT failed, or the worker's lease ended: the store's
//! [`SnapshotStore::check_fence`]) resolves its entries with an error
//! saying the request may or may not have been applied (a PUT whose
//! answer was lost may have landed). The actors it held are *broken*
//! until their next snapshot is in the store ([`ShippedJournal::settled`]):
//! a later delivery on the same snapshot would follow a hole, so their
//! entries still waiting for a round are left out of it (and answered the
//! same way) and a new one is refused ([`ShippedJournal::broken`] tells
//! the worker to write the snapshot first).
//!
//! An actor's entries stop mattering once a snapshot past them is in the
//! store ([`ShippedJournal::settled`]; the worker writes one for an actor
//! whose first entry since its snapshot is older than [`FOLD_AFTER`], see
//! [`ShippedJournal::pinning`]); this run's segments older than every
//! unsettled actor's first entry are deleted after the next round. When
//! an actor is placed on a worker, [`ShippedJournal::recover`] reads the
//! segments in the store (every worker's, decoded once per segment and
//! kept) and returns its deliveries after its newest snapshot, to replay
//! (the rules of the data dir's start-up recovery: they must follow on
//! from the snapshot without a hole, else the actor is failed with the
//! reason); segments whose entries all no longer apply and that are older
//! than [`SWEEP_AFTER`] are deleted by whichever worker sees them (a lost
//! worker's segments too).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::watch;

use super::durable::Lost;
use super::entry::{Entry, EntryKind};
use super::{Committed, Durable, JournalError};
use crate::snapshot_store::{SnapshotStore, StoreError};

mod objects;
mod recover;

pub use objects::{SegmentMeta, SegmentObjects};

pub use recover::Recovered;

/// An actor's first entry since its newest snapshot is this old, the
/// worker writes a snapshot ([`ShippedJournal::pinning`]): the bound on
/// how long a segment is kept for a live actor and on what a takeover
/// replays (the default of [`ShippedJournal::start`]'s `fold_after`).
pub const FOLD_AFTER: Duration = Duration::from_secs(5);

/// A segment whose entries all no longer apply is deleted once it is this
/// old, by any worker that reads it.
pub const SWEEP_AFTER: Duration = Duration::from_secs(60);

/// Attempts of one round's PUT before its entries are reported lost.
const PUT_ATTEMPTS: u32 = 3;

/// A segment's entries as decoded: each actor's, in order.
type Decoded = Arc<HashMap<String, Vec<Entry>>>;

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

/// An entry waiting for its round.
#[derive(Debug)]
struct Pending {
    kind: EntryKind,
    epoch: u64,
    seq: u64,
    actor: Arc<str>,
    body: Arc<Vec<u8>>,
}

#[derive(Debug)]
struct State {
    /// The entries appended since the last round started, in order.
    pending: Vec<Pending>,
    /// The round the pending entries go out in (rounds count from 1).
    open: u64,
    /// Per actor with entries not yet covered by a snapshot in the store:
    /// the round of the first of them, its epoch, and when it was
    /// appended. Every segment from that round on is kept for it.
    live: HashMap<String, (u64, u64, Instant)>,
    /// Actors a lost round held entries of (module docs): refused until
    /// settled.
    broken: HashSet<String>,
    /// Rounds of this run whose segment may hold the unsettled entries of
    /// an actor that left this worker (deleted, moved, or dropped when the
    /// lease ended), or a tombstone: only the sweep deletes them, once
    /// their entries no longer apply, since a next owner may need one.
    orphans: BTreeSet<u64>,
    shipped: BTreeSet<u64>, // rounds of this run whose segment is in the store
    stopping: bool,
}

/// A read of the store's segments: when it began, and what it read.
type LastRead = (Instant, Arc<HashMap<String, recover::Segment>>);

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
    /// Decoded segments of the store, by name: each actor's entries.
    seen: Mutex<HashMap<String, Decoded>>,
    /// Held while segments are read (takeovers at once read each once),
    /// with the newest read: when it began, and what it read. A takeover
    /// that asked before that read began is served by it (see
    /// `recover::ShippedJournal::read_segments`).
    reading: Mutex<Option<LastRead>>,
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
                pending: Vec::new(),
                open: 1,
                live: HashMap::new(),
                broken: HashSet::new(),
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
            reading: Mutex::new(None),
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

    /// Appends `actor`'s entry (a [`EntryKind::Delivery`] on snapshot
    /// `seq`, at placement `epoch`, or a [`EntryKind::Forget`]) to the next
    /// round; it is in the store when the [`Durable`] resolves.
    ///
    /// # Errors
    /// [`JournalError`] when the journal is stopping, for a patch, or when
    /// the actor is [broken](ShippedJournal::broken) (nothing is appended).
    pub fn append(
        &self,
        kind: EntryKind,
        epoch: u64,
        seq: u64,
        actor: &str,
        body: Arc<Vec<u8>>,
    ) -> Result<Durable, JournalError> {
        if matches!(kind, EntryKind::Patch | EntryKind::Pad) {
            return Err(JournalError::refused(
                "the shipped journal takes no page patches",
            ));
        }
        let mut state = self.shared.lock();
        if state.stopping {
            return Err(JournalError::refused("the worker is stopping"));
        }
        let round = state.open;
        match kind {
            EntryKind::Forget => {
                // The segments of an actor leaving unsettled, and the
                // forget's own, go to the sweep: the forget must not
                // vanish before the entries it drops.
                if let Some(&(first, at, _)) = state.live.get(actor)
                    && at <= epoch
                {
                    let kept: Vec<u64> = state.shipped.range(first..).copied().collect();
                    state.orphans.extend(kept);
                    state
                        .orphans
                        .extend(round.saturating_sub(1).max(first)..=round);
                }
                state.settle(actor, epoch);
            }
            _ => {
                if state.broken.contains(actor) {
                    return Err(JournalError::refused(format!(
                        "a journal round holding earlier entries of actor {actor} was lost; its \
                         next snapshot must reach the store first (the request was not applied)"
                    )));
                }
                state
                    .live
                    .entry(actor.to_owned())
                    .or_insert((round, epoch, Instant::now()));
            }
        }
        let actor: Arc<str> = actor.into();
        state.pending.push(Pending {
            kind,
            epoch,
            seq,
            actor: actor.clone(),
            body,
        });
        drop(state);
        self.shared.work.notify_one();
        self.shared.stats.entries.fetch_add(1, Ordering::Relaxed);
        Ok(Durable {
            end: round,
            committed: self.shared.committed.subscribe(),
            waiters: None,
            actor: Some(actor),
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

    /// A snapshot of `actor` at `epoch` holding every entry it appended
    /// at that epoch or before is in the store now (or they no longer
    /// matter): no segment is kept for them, and the actor is no longer
    /// broken.
    pub fn settled(&self, actor: &str, epoch: u64) {
        self.shared.lock().settle(actor, epoch);
    }

    /// Whether a lost round held entries of `actor` since its newest
    /// snapshot (module docs): its next delivery must wait for a snapshot
    /// in the store.
    #[must_use]
    pub fn broken(&self, actor: &str) -> bool {
        self.shared.lock().broken.contains(actor)
    }

    /// Deletes this run's segments no actor's entry needs any more.
    pub fn collect(&self) {
        collect(&self.shared);
    }

    /// The actors whose first entry since their newest snapshot was
    /// appended over `fold_after` ago: they keep its segment (and every
    /// later one) in the store until they write a snapshot.
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
        self.broken.remove(actor);
    }
}

/// The shipper thread: each round takes the pending entries (less those of
/// broken actors, reported lost), puts them as one segment (asking the
/// fence first), publishes the round's outcome, and deletes this run's
/// segments no unsettled entry is in any more.
fn ship_rounds(shared: &Shared) {
    let mut body = Vec::new();
    loop {
        let (round, pending, left_out) = {
            let mut state = shared.lock();
            while state.pending.is_empty() && !state.stopping {
                state = shared.work.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            if state.pending.is_empty() {
                return;
            }
            let round = state.open;
            state.open += 1;
            let mut pending = std::mem::take(&mut state.pending);
            // Appended before an earlier round of theirs was lost: they
            // would follow a hole.
            let mut left_out: Vec<Arc<str>> = Vec::new();
            if !state.broken.is_empty() {
                pending.retain(|entry| {
                    let keep =
                        entry.kind == EntryKind::Forget || !state.broken.contains(&*entry.actor);
                    if !keep && !left_out.contains(&entry.actor) {
                        left_out.push(entry.actor.clone());
                    }
                    keep
                });
            }
            (round, pending, left_out)
        };
        body.clear();
        for entry in &pending {
            super::entry::encode(
                &mut body,
                entry.kind,
                entry.epoch,
                entry.seq,
                &entry.actor,
                &entry.body,
            );
        }
        let name = shared.segment_name(round);
        let len = body.len() as u64;
        let outcome = if pending.is_empty() {
            Ok(())
        } else {
            put_round(shared, &name, Bytes::copy_from_slice(&body))
        };
        let stats = &shared.stats;
        match &outcome {
            Ok(()) if !pending.is_empty() => {
                stats.rounds.fetch_add(1, Ordering::Relaxed);
                stats
                    .shipped
                    .fetch_add(pending.len() as u64, Ordering::Relaxed);
                stats.bytes.fetch_add(len, Ordering::Relaxed);
                shared.lock().shipped.insert(round);
            }
            Ok(()) => {}
            Err(why) => {
                stats.lost_rounds.fetch_add(1, Ordering::Relaxed);
                tracing::error!(segment = %name, "journal round lost: {why}");
                // A PUT whose answer was lost may have landed: the sweep
                // deletes it once its entries no longer apply.
                let mut state = shared.lock();
                state.orphans.insert(round);
                for entry in &pending {
                    if entry.kind != EntryKind::Forget {
                        state.broken.insert(entry.actor.to_string());
                    }
                }
            }
        }
        shared.committed.send_modify(|c| {
            c.durable = round;
            let lost = |actor, why: &Arc<str>| Lost {
                round,
                actor,
                why: why.clone(),
            };
            if let Err(why) = &outcome {
                c.lost.push_back(lost(None, why));
            }
            if !left_out.is_empty() {
                let why: Arc<str> = "a journal round holding earlier entries of this actor was \
                                     lost, so this one was not shipped; the request may or may \
                                     not have been applied"
                    .into();
                for actor in left_out {
                    c.lost.push_back(lost(Some(actor), &why));
                }
            }
            while c.lost.len() > 1024 {
                c.lost.pop_front();
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

/// Deletes this run's segments older than every unsettled actor's first
/// entry (a round in flight is never touched: it is not shipped yet),
/// orphans aside.
fn collect(shared: &Shared) {
    let doomed: Vec<u64> = {
        let state = shared.lock();
        let first = state
            .live
            .values()
            .map(|&(round, ..)| round)
            .min()
            .unwrap_or(u64::MAX);
        state
            .shipped
            .iter()
            .copied()
            .filter(|round| *round < first && !state.orphans.contains(round))
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
