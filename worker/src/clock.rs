//! An actor's monotonic clock across its instances. Each instance's virtual
//! clock starts at the newest snapshot's reading; this keeps what a
//! snapshot may not know: the latest reading of an instance that was
//! dropped (a trap rollback restores an older snapshot), and a mark on
//! disk ahead of every reading the guest took (written when a reading
//! passes it, not before each call), so a restart after a crash never
//! starts the clock below a reading the guest saw.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use stasis_core::host::ClockLease;
use stasis_core::snapshot_store::SnapshotStore;

/// How far ahead of a guest's reading the persisted mark is put: at most
/// one mark write per actor per this much clock time while its guest
/// reads the clock, and after a crash the clock may jump forward by up to
/// this (never back).
const LEASE: Duration = Duration::from_secs(60);

/// After a mark write failed, readings are returned without trying again
/// for this long (each try may block the guest up to the store's timeout).
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The mark on disk, as this owner knows it.
#[derive(Debug, Default)]
struct Mark {
    /// The mark on disk while it runs ahead of the readings the guest
    /// took (a lease); 0 if none.
    ahead_ns: u64,
    /// The floor already holds the mark on disk: it was read, or written
    /// here (as the exact reading, or as a lease). Only the actor's owner
    /// writes its mark, and a new owner (a move, a re-placement, a
    /// restart) starts with a new clock, so this owner's later restores
    /// read nothing from the store (a cluster worker's resume after its
    /// own pause saves a GET).
    known: bool,
    /// A lease write failed: none is tried again before this.
    retry_at: Option<Instant>,
}

/// The floor and the persisted mark of one actor's clock (nanoseconds).
#[derive(Debug, Default)]
pub(crate) struct ActorClock {
    /// A new instance's clock starts at no less than this.
    floor_ns: u64,
    /// Shared with the [`ClockLease`] of the live instance's guest.
    mark: Arc<Mutex<Mark>>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn lock(mark: &Mutex<Mark>) -> MutexGuard<'_, Mark> {
    mark.lock().unwrap_or_else(|p| p.into_inner())
}

impl ActorClock {
    /// The lowest reading a new instance's clock may start at.
    #[must_use]
    pub(crate) fn floor_ns(&self) -> u64 {
        self.floor_ns
    }

    /// Before a restore: the mark on disk (left by a pause, or ahead of
    /// the clock of a process that crashed) raises the floor.
    pub(crate) fn load(&mut self, store: &dyn SnapshotStore, actor: &str) {
        let mut mark = lock(&self.mark);
        if mark.known {
            return;
        }
        self.floor_ns = self.floor_ns.max(store.clock_mark(actor));
        mark.known = true;
    }

    /// A new actor (a create): no mark is on disk (the create removed
    /// what its name held), so a pause before the guest reads the clock
    /// writes none.
    pub(crate) fn fresh(&mut self) {
        lock(&self.mark).known = true;
    }

    /// The mark on disk as this owner knows it, for a hand-over to another
    /// version's task ([`ActorClock::inherit`]): `Some(ns)` a lease to
    /// `ns`, `Some(0)` none ahead of the floor, `None` unknown.
    pub(crate) fn known_mark(&self) -> Option<u64> {
        let mark = lock(&self.mark);
        mark.known.then_some(mark.ahead_ns)
    }

    /// A hand-over's new task takes over what the running version knew of
    /// the mark ([`ActorClock::known_mark`]): its guest's readings lease
    /// only past the running version's lease, so the mark on disk never
    /// goes back under a reading the running version's guest saw (which
    /// keeps running if the hand-over fails).
    pub(crate) fn inherit(&mut self, known: Option<u64>) {
        if let Some(ahead_ns) = known {
            let mut mark = lock(&self.mark);
            mark.ahead_ns = mark.ahead_ns.max(ahead_ns);
            mark.known = true;
        }
    }

    /// What a new instance's guest readings go through: the mark on disk
    /// is put past a reading before the guest gets it, so guest code that
    /// never reads the clock costs no store write (a wake on a cache hit
    /// writes nothing before its request runs).
    pub(crate) fn guest_lease(
        &self,
        store: Arc<dyn SnapshotStore>,
        actor: &str,
    ) -> Arc<dyn ClockLease> {
        Arc::new(GuestLease {
            store,
            actor: actor.to_owned(),
            mark: Arc::clone(&self.mark),
        })
    }

    /// The live instance was dropped with its clock at `clock_ns`: the
    /// next one starts no earlier. With `paused`, see
    /// [`ActorClock::settle`] (no lease is needed without an instance).
    pub(crate) fn dropped(
        &mut self,
        store: &dyn SnapshotStore,
        actor: &str,
        clock_ns: u64,
        paused: bool,
    ) {
        self.floor_ns = self.floor_ns.max(clock_ns);
        if paused {
            self.settle(store, actor, clock_ns);
        }
    }

    /// No guest code runs on the live instance for now (it was paused, or
    /// captured for a move, at `clock_ns`): a mark on disk that runs ahead
    /// becomes exactly the latest reading, so a graceful restart or the
    /// move's target (on this data dir) continues the clock without a
    /// jump. Where no lease runs ahead (the guest took no reading since
    /// the last one was settled), the mark on disk is no later than the
    /// reading the snapshot holds and nothing is written. The next
    /// reading leases again.
    pub(crate) fn settle(&mut self, store: &dyn SnapshotStore, actor: &str, clock_ns: u64) {
        self.floor_ns = self.floor_ns.max(clock_ns);
        let mut mark = lock(&self.mark);
        if mark.known && mark.ahead_ns == 0 {
            return;
        }
        match store.write_clock_mark(actor, self.floor_ns) {
            Ok(()) => {
                mark.ahead_ns = 0;
                mark.known = true;
            }
            Err(e) => tracing::warn!(actor, "cannot persist the clock mark: {e}"),
        }
    }

    /// A live instance is being replaced (a repair) while its clock reads
    /// `clock_ns`: the new one starts no earlier.
    pub(crate) fn replaced(&mut self, clock_ns: u64) {
        self.floor_ns = self.floor_ns.max(clock_ns);
    }
}

/// One instance's [`ClockLease`]: before a reading past the mark on disk
/// reaches the guest, the mark is written [`LEASE`] past it. Best effort:
/// a failed write is logged (the reading is still returned) and not tried
/// again for [`RETRY_AFTER`].
#[derive(Debug)]
struct GuestLease {
    store: Arc<dyn SnapshotStore>,
    actor: String,
    mark: Arc<Mutex<Mark>>,
}

impl ClockLease for GuestLease {
    fn cover(&self, reading_ns: u64) {
        let mut mark = lock(&self.mark);
        if mark.ahead_ns >= reading_ns || mark.retry_at.is_some_and(|at| Instant::now() < at) {
            return;
        }
        let ahead = reading_ns.saturating_add(nanos(LEASE));
        match self.store.write_clock_mark(&self.actor, ahead) {
            Ok(()) => {
                mark.retry_at = None;
                // The mark on disk is this owner's now, ahead of any
                // reading by design: a restore in this process (a trap's
                // rollback) continues from the floor, not from the mark;
                // only a new process (after a crash) starts from it.
                mark.ahead_ns = ahead;
                mark.known = true;
            }
            Err(e) => {
                mark.retry_at = Some(Instant::now() + RETRY_AFTER);
                tracing::warn!(actor = self.actor, "cannot persist the clock mark: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stasis_core::snapshot_files::LocalSnapshotStore;

    fn store(tmp: &tempfile::TempDir) -> Arc<LocalSnapshotStore> {
        Arc::new(LocalSnapshotStore::open(tmp.path(), None).expect("store"))
    }

    #[test]
    fn the_mark_runs_ahead_of_guest_readings_and_a_pause_makes_it_exact() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = store(&tmp);
        let mut clock = ActorClock::default();
        let lease = clock.guest_lease(store.clone(), "a");
        assert_eq!(store.clock_mark("a"), 0, "no reading, no write");
        lease.cover(5);
        let leased = store.clock_mark("a");
        assert!(leased >= 5 + nanos(LEASE), "{leased}");
        // Within the lease: no new write.
        lease.cover(10);
        assert_eq!(store.clock_mark("a"), leased);
        // A crash: a new process starts from the mark.
        let mut after_crash = ActorClock::default();
        after_crash.load(store.as_ref(), "a");
        assert_eq!(after_crash.floor_ns(), leased);
        // A trap rollback keeps the dropped instance's reading.
        clock.dropped(store.as_ref(), "a", 7, false);
        assert_eq!(clock.floor_ns(), 7);
        assert_eq!(store.clock_mark("a"), leased);
        // ... and its restore does not jump to the mark this owner leased.
        clock.load(store.as_ref(), "a");
        assert_eq!(clock.floor_ns(), 7);
        // A pause writes the exact reading over the lease.
        clock.dropped(store.as_ref(), "a", 9, true);
        assert_eq!(store.clock_mark("a"), 9);
        // A pause after no reading writes nothing: the mark on disk is
        // behind the snapshot's reading already.
        clock.dropped(store.as_ref(), "a", 11, true);
        assert_eq!(store.clock_mark("a"), 9);
        assert_eq!(clock.floor_ns(), 11);
        // The next reading leases again.
        clock.guest_lease(store.clone(), "a").cover(12);
        assert!(store.clock_mark("a") >= 12 + nanos(LEASE));
        assert_eq!(store.used_bytes(), 0, "the mark is not a snapshot");
    }

    #[test]
    fn an_owner_reads_the_mark_once_and_a_new_owner_reads_it_again() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = store(&tmp);
        store.write_clock_mark("a", 40).expect("mark");
        let mut clock = ActorClock::default();
        clock.load(store.as_ref(), "a");
        assert_eq!(clock.floor_ns(), 40);
        // Paused here at 50 with no reading taken: nothing to write.
        clock.dropped(store.as_ref(), "a", 50, true);
        assert_eq!(store.clock_mark("a"), 40);
        store.write_clock_mark("a", 70).expect("mark");
        clock.load(store.as_ref(), "a");
        assert_eq!(clock.floor_ns(), 50, "read the store again");
        // A new owner (a fresh clock) reads it.
        let mut next = ActorClock::default();
        next.load(store.as_ref(), "a");
        assert_eq!(next.floor_ns(), 70);
    }

    #[test]
    fn a_new_actor_that_never_reads_the_clock_writes_no_mark() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = store(&tmp);
        // A create, then a pause: nothing written.
        let mut clock = ActorClock::default();
        clock.fresh();
        let _lease = clock.guest_lease(store.clone(), "new");
        clock.dropped(store.as_ref(), "new", 3, true);
        assert_eq!(store.clock_mark("new"), 0);
        // An actor this owner knows nothing of (installed, restarted):
        // its pause writes the exact reading over whatever is there.
        let mut adopted = ActorClock::default();
        adopted.dropped(store.as_ref(), "old", 4, true);
        assert_eq!(store.clock_mark("old"), 4);
    }

    #[test]
    fn a_hand_over_never_writes_a_mark_under_the_running_versions_lease() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = store(&tmp);
        let mut running = ActorClock::default();
        running.fresh();
        running.guest_lease(store.clone(), "h").cover(100);
        let leased = store.clock_mark("h");
        // The new version's task starts from the running one's knowledge:
        // its guest's earlier readings write nothing lower.
        let mut next = ActorClock::default();
        next.inherit(running.known_mark());
        next.guest_lease(store.clone(), "h").cover(50);
        assert_eq!(store.clock_mark("h"), leased);
        // Past the lease it leases on.
        next.guest_lease(store.clone(), "h").cover(leased + 1);
        assert!(store.clock_mark("h") > leased);
        // Nothing known: nothing inherited.
        let mut unknown = ActorClock::default();
        unknown.inherit(ActorClock::default().known_mark());
        assert_eq!(unknown.known_mark(), None);
    }
}
