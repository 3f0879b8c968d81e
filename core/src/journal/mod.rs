//! The worker journal: one append-only log per data dir that receives
//! every actor's deliveries and makes them durable by **group commit** —
//! one `fdatasync` covers every entry appended while the previous one ran,
//! across all actors.
//!
//! An entry ([`entry`]) is usually a *delivery* ([`delivery`]): what one
//! delivery of an actor received and the host values it read, on the
//! actor's newest snapshot (the logical journal: a few hundred bytes,
//! replayed by the worker on that snapshot). A *snapshot* entry holds a
//! snapshot file instead (a create's snapshot 0, or the page entries an
//! older build wrote), written to the store at start-up. [`Journal::append`]
//! returns at once with a [`Durable`] that resolves when the entry is on
//! disk: the worker's *output gate* holds the answer until then while the
//! actor already runs its next delivery.
//!
//! The journal tracks, per actor, its oldest entry not yet covered by a
//! snapshot in the store ([`Journal::settled`] says a snapshot covers
//! them). Segments (`NNN.log`, named by the position of their first byte,
//! zero-filled ahead) roll at [`SEGMENT_BYTES`] (the next one is
//! zero-filled ahead, by a thread of its own, so a roll costs a rename); a
//! segment is deleted ([`Journal::collect`]) once no actor needs an entry
//! in it or before it, so the actors pinning old segments are asked to
//! write a snapshot ([`Journal::pinning`], [`Journal::pinning_behind`]).
//!
//! At start-up ([`Journal::open`]) the segments are read: snapshot entries
//! are written to the store when they still apply ([`replay`]); each
//! actor's deliveries after its newest snapshot are sorted out
//! ([`recovered`]) and handed to it ([`Journal::take_recovered`]), and
//! their segments stay until it has written a snapshot past them. A torn
//! tail is ignored, never applied.
//!
//! A disk with no room for the next segment (at start, or when one rolls)
//! stops nothing: replay needs no new space, entries appended before are
//! written once there is room, and new ones are *refused*
//! ([`JournalError::is_refusal`]: nothing written, the delivery is rolled
//! back) until the writer, looking every [`ROOM_PROBE`], makes the
//! segment. A failed write or `fdatasync` stops the journal for good
//! instead: what reached the disk is unknown until a restart reads it.

pub mod delivery;
mod durable;
pub mod entry;
pub mod patch;
mod recovered;
mod replay;
mod roll;
mod segment;
pub mod shipped;
mod writer;

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::watch;

use durable::{Committed, Waiters};
pub use durable::{Durable, JournalError};
pub use entry::EntryKind;
pub use recovered::{RecoveredEntry, Recovery};
pub use replay::Replayed;
use segment::{list_segments, new_segment, segment_path, spare_path};
use writer::{is_no_room, no_room, write_rounds};

use crate::snapshot_store::SnapshotStore;

/// A segment is closed and a new one started once it holds this many
/// bytes.
/// Each segment is created at this size, zero-filled and synced, and then
/// written in place: an `fdatasync` of bytes within the file's size
/// flushes the data alone, no size change (half the cost of an append's,
/// measured in BENCHMARKS.md, section 18).
pub const SEGMENT_BYTES: u64 = 16 << 20;

/// With no room on the disk for the next segment, the writer looks again
/// this often (module docs).
pub const ROOM_PROBE: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Debug)]
struct State {
    /// Records appended and not yet handed to the writer.
    pending: Vec<u8>,
    /// The position after the last appended record.
    next: u64,
    /// Per actor, the position and epoch of its newest entry not yet in
    /// the store.
    live: HashMap<String, (u64, u64)>,
    /// Start positions of the segments on disk, oldest first; the last is
    /// written now.
    segments: VecDeque<u64>,
    failed: Option<Arc<str>>,
    /// The disk has no room for the next segment (module docs): why, as
    /// refusals say it.
    no_room: Option<Arc<str>>,
    /// The end of the newest settled record: segments are deleted only
    /// once it is durable (a restart must see why a pin went).
    settled_end: u64,
    stopping: bool,
    /// The writer waits for work: the next append wakes it (appends while
    /// it writes need no wake-up, it looks again when done).
    idle: bool,
}

struct Shared {
    state: Mutex<State>,
    work: Condvar,
    committed: watch::Sender<Committed>,
    /// What [`Durable::then`] registered.
    waiters: Arc<Waiters>,
    syncs: AtomicU64,
    entries: AtomicU64,
    bytes: AtomicU64,
    /// Called after each group commit (a metrics counter).
    on_sync: Box<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fail(&self, why: String) {
        let why: Arc<str> = format!(
            "the worker journal failed: {why}; a request whose entry it had not made durable \
             may or may not have been applied, and no more requests are taken until the server \
             restarts"
        )
        .into();
        tracing::error!("worker journal: {why}");
        self.lock().failed = Some(why.clone());
        self.waiters.fail(&why);
        self.committed.send_modify(|c| c.failed = Some(why));
    }
}

/// Counters of a journal since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// `fdatasync` calls (group commits).
    pub syncs: u64,
    /// Entries appended.
    pub entries: u64,
    /// Bytes appended.
    pub bytes: u64,
    /// Segments on disk now.
    pub segments: u64,
}

/// The worker journal of one data dir (module docs).
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    shared: Arc<Shared>,
    /// What a previous run left for each actor, until the actor takes it
    /// ([`Journal::take_recovered`]).
    recovered: Mutex<HashMap<String, Recovery>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl Journal {
    /// Opens the journal in `dir` (created if missing): replays the
    /// segments a previous run left into `store` ([`replay`]), deletes
    /// them, and starts a new segment and its writer thread, which calls
    /// `on_sync` after each group commit.
    ///
    /// # Errors
    /// If the folder or a segment cannot be read, or the store refuses a
    /// replayed snapshot (the segments are then kept for the next start).
    pub fn open(
        dir: &Path,
        store: &dyn SnapshotStore,
        on_sync: Box<dyn Fn() + Send + Sync>,
    ) -> anyhow::Result<(Self, Replayed)> {
        use anyhow::Context as _;
        fs::create_dir_all(dir).context("creating the journal folder")?;
        let started = Instant::now();
        let old = list_segments(dir).context("listing the journal")?;
        let (mut replayed, deliveries, lost) = replay::replay(dir, &old, store)?;
        let mut live = HashMap::new();
        let mut recovered = HashMap::new();
        let sorted = recovered::sort_out(deliveries, store).into_iter().chain(
            lost.into_iter()
                .map(|(actor, (why, at, epoch))| (actor, (Recovery::Failed(why), at, epoch))),
        );
        for (actor, (recovery, at, epoch)) in sorted {
            if matches!(recovered.get(&actor), Some(Recovery::Failed(_))) {
                continue;
            }
            let pin = live.entry(actor.clone()).or_insert((at, epoch));
            pin.0 = pin.0.min(at);
            recovered.insert(actor, recovery);
        }
        for recovery in recovered.values() {
            match recovery {
                Recovery::Entries(_) => replayed.recovered += 1,
                Recovery::Failed(_) => replayed.failed += 1,
            }
        }
        replayed.duration = started.elapsed();
        // Positions go on past the old segments' (named by theirs).
        let start = old.last().map_or(0, |&last| {
            let len = fs::metadata(segment_path(dir, last)).map_or(0, |m| m.len());
            last + len + 1
        });
        // Segments holding deliveries still to replay stay until their
        // actors have written a snapshot past them ([`Journal::collect`]).
        let mut segments = VecDeque::new();
        if live.is_empty() {
            for &segment in &old {
                fs::remove_file(segment_path(dir, segment))
                    .context("deleting a replayed segment")?;
            }
        } else {
            segments.extend(old.iter().copied());
        }
        segments.push_back(start);
        match fs::remove_file(spare_path(dir)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(e).context("deleting the spare segment");
            }
            _ => {}
        }
        // A full disk: the journal starts with no segment, refusing entries
        // until the writer finds room ([`ROOM_PROBE`]); replay needed none.
        let (file, room) = match new_segment(dir, start) {
            Ok(file) => (Some(file), None),
            Err(e) if is_no_room(&e) => {
                let why = no_room(&e);
                tracing::warn!("worker journal: {why}");
                (None, Some(why))
            }
            Err(e) => return Err(e).context("starting a journal segment"),
        };
        let mut state = State {
            pending: Vec::new(),
            next: start,
            live,
            segments,
            failed: None,
            no_room: room,
            settled_end: 0,
            stopping: false,
            idle: false,
        };
        // The new segment starts with the pins it keeps ([`roll`]).
        roll_record(&mut state);
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            work: Condvar::new(),
            waiters: Arc::new(Waiters::starting_at(start)),
            committed: watch::Sender::new(Committed {
                durable: start,
                ..Committed::default()
            }),
            syncs: AtomicU64::new(0),
            entries: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            on_sync,
        });
        let writer = {
            let (shared, dir) = (shared.clone(), dir.to_owned());
            std::thread::Builder::new()
                .name("stasis-journal".into())
                .spawn(move || write_rounds(&shared, &dir, file, start))
                .context("starting the journal writer")?
        };
        Ok((
            Self {
                dir: dir.to_owned(),
                shared,
                recovered: Mutex::new(recovered),
                writer: Mutex::new(Some(writer)),
            },
            replayed,
        ))
    }

    /// Appends an entry: `body` (a snapshot file) as snapshot `seq` of
    /// `actor` at placement `epoch`, or a [`EntryKind::Forget`] of
    /// `actor`'s earlier entries at `epoch` or before. Returns at once; the entry is durable
    /// when the [`Durable`] resolves.
    ///
    /// # Errors
    /// [`JournalError`] once the journal has failed.
    pub fn append(
        &self,
        kind: EntryKind,
        epoch: u64,
        seq: u64,
        actor: &str,
        body: &[u8],
    ) -> Result<Durable, JournalError> {
        let mut state = self.shared.lock();
        if let Some(failed) = &state.failed {
            return Err(JournalError::failed(failed.clone()));
        }
        if let Some(why) = &state.no_room {
            return Err(JournalError::refused(why.clone()));
        }
        let at = state.next;
        entry::encode(&mut state.pending, kind, epoch, seq, actor, body);
        let len = entry::record_len(actor, body) as u64;
        state.next += len;
        match kind {
            EntryKind::Snapshot => {
                state.live.insert(actor.to_owned(), (at, epoch));
            }
            // The first delivery after the actor's newest snapshot pins
            // the journal until a snapshot past it is written.
            EntryKind::Delivery => {
                state.live.entry(actor.to_owned()).or_insert((at, epoch));
            }
            EntryKind::Forget => {
                settle(&mut state.live, actor, epoch);
            }
            // A patch needs the entry before it: the pin stays there.
            EntryKind::Pad | EntryKind::Patch | EntryKind::Roll | EntryKind::Settled => {}
        }
        let end = state.next;
        let wake = std::mem::take(&mut state.idle);
        drop(state);
        if wake {
            self.shared.work.notify_one();
        }
        self.shared.entries.fetch_add(1, Ordering::Relaxed);
        self.shared.bytes.fetch_add(len, Ordering::Relaxed);
        Ok(Durable {
            end,
            committed: self.shared.committed.subscribe(),
            waiters: Some(self.shared.waiters.clone()),
            actor: None,
        })
    }

    /// What a previous run left for `actor` ([`Recovery`]), once: the
    /// actor replays it at its next resume.
    #[must_use]
    pub fn take_recovered(&self, actor: &str) -> Option<Recovery> {
        self.recovered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(actor)
    }

    /// The durability of every entry appended so far: resolves once they
    /// are all on disk (a delete waits for its forget this way, so a
    /// restart never replays the create of an actor it deleted).
    #[must_use]
    pub fn appended(&self) -> Durable {
        let end = self.shared.lock().next;
        Durable {
            end,
            committed: self.shared.committed.subscribe(),
            waiters: Some(self.shared.waiters.clone()),
            actor: None,
        }
    }

    /// Says that `actor`'s newest entry at `epoch` or before is in the
    /// store now (or no longer matters): no segment is kept for it. An
    /// entry at a later epoch (the actor moved to another worker of this
    /// data dir meanwhile) stays.
    pub fn settled(&self, actor: &str, epoch: u64) {
        let mut state = self.shared.lock();
        if settle(&mut state.live, actor, epoch) {
            // Recorded, so that a restart knows the pin went ([`roll`]).
            let at = state.next;
            entry::encode(&mut state.pending, EntryKind::Settled, epoch, 0, actor, &[]);
            state.next = at + entry::record_len(actor, &[]) as u64;
            state.settled_end = state.next;
            let wake = std::mem::take(&mut state.idle);
            drop(state);
            if wake {
                self.shared.work.notify_one();
            }
        }
    }

    /// The actors whose newest entry is in a segment that is no longer
    /// written: they keep it from being deleted until they write the entry
    /// to the store.
    #[must_use]
    pub fn pinning(&self) -> Vec<String> {
        let state = self.shared.lock();
        let current = state.segments.back().copied().unwrap_or(0);
        state
            .live
            .iter()
            .filter(|&(_, &(at, _))| at < current)
            .map(|(actor, _)| actor.clone())
            .collect()
    }

    /// Like [`Journal::pinning`], but leaving the newest `keep` closed
    /// segments alone: the actors whose newest entry is in an older one.
    /// A burst of creates fills a segment in a fraction of a second; its
    /// entries written to the store while the burst lasts would compete
    /// with it for the disk, so the compaction loop lets a few segments
    /// wait while segments keep rolling.
    #[must_use]
    pub fn pinning_behind(&self, keep: usize) -> Vec<String> {
        let state = self.shared.lock();
        let closed = state.segments.len().saturating_sub(1);
        let Some(&bound) = state.segments.get(closed.saturating_sub(keep)) else {
            return Vec::new();
        };
        state
            .live
            .iter()
            .filter(|&(_, &(at, _))| at < bound)
            .map(|(actor, _)| actor.clone())
            .collect()
    }

    /// The start of the segment written now: it changes when a segment
    /// rolls.
    #[must_use]
    pub fn current_segment(&self) -> u64 {
        self.shared
            .lock()
            .segments
            .back()
            .copied()
            .unwrap_or_default()
    }

    /// Deletes the segments no actor's newest entry needs (module docs);
    /// returns how many.
    pub fn collect(&self) -> usize {
        let mut removed = 0;
        loop {
            let doomed = {
                let mut state = self.shared.lock();
                if self.shared.committed.borrow().durable < state.settled_end {
                    break;
                }
                let needed = state.live.values().map(|&(at, _)| at).min();
                let needed = needed.unwrap_or(u64::MAX);
                match (state.segments.front(), state.segments.get(1)) {
                    (Some(&first), Some(&next)) if next <= needed => {
                        state.segments.pop_front();
                        first
                    }
                    _ => break,
                }
            };
            match fs::remove_file(segment_path(&self.dir, doomed)) {
                Ok(()) => removed += 1,
                Err(e) => tracing::warn!("deleting journal segment {doomed}: {e}"),
            }
        }
        removed
    }

    /// The failure that stopped the journal, if any.
    #[must_use]
    pub fn failed(&self) -> Option<JournalError> {
        self.shared.lock().failed.clone().map(JournalError::failed)
    }

    /// Why the journal refuses entries now for want of disk space (module
    /// docs), if it does: it takes them again once the writer finds room.
    #[must_use]
    pub fn no_room(&self) -> Option<JournalError> {
        self.shared
            .lock()
            .no_room
            .clone()
            .map(JournalError::refused)
    }

    /// Counters since the journal was opened.
    #[must_use]
    pub fn stats(&self) -> JournalStats {
        JournalStats {
            syncs: self.shared.syncs.load(Ordering::Relaxed),
            entries: self.shared.entries.load(Ordering::Relaxed),
            bytes: self.shared.bytes.load(Ordering::Relaxed),
            segments: self.shared.lock().segments.len() as u64,
        }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.shared.lock().stopping = true;
        self.shared.work.notify_all();
        let writer = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(writer) = writer {
            let _ = writer.join();
        }
    }
}

/// The page size group commits are padded to.
pub(super) const PAGE: u64 = 4096;

/// Appends a roll record of the pins (when there are any) at the start
/// of a segment ([`roll`]).
fn roll_record(state: &mut State) {
    if state.live.is_empty() {
        return;
    }
    let body = roll::encode(&state.live);
    entry::encode(&mut state.pending, EntryKind::Roll, 0, 0, "", &body);
    state.next += entry::record_len("", &body) as u64;
}

/// Drops `actor`'s live entry if it is from `epoch` or before; says
/// whether it did.
fn settle(live: &mut HashMap<String, (u64, u64)>, actor: &str, epoch: u64) -> bool {
    let covered = live.get(actor).is_some_and(|&(_, at)| at <= epoch);
    if covered {
        live.remove(actor);
    }
    covered
}
