//! An actor's monotonic clock across its instances. Each instance's virtual
//! clock starts at the newest snapshot's reading; this keeps what a
//! snapshot may not know: the latest reading of an instance that was
//! dropped (a trap rollback restores an older snapshot), and a mark on
//! disk ahead of the live clock, so a restart after a crash never starts
//! the clock below a reading the guest saw.

use std::time::Duration;

use stasis_core::snapshot_store::SnapshotStore;

/// How far ahead of the live clock the persisted mark runs, beyond the
/// request timeout: at most one mark write per actor per this much clock
/// time, and after a crash the clock may jump forward by up to this plus
/// the request timeout (never back).
const LEASE: Duration = Duration::from_secs(60);

/// The floor and the persisted mark of one actor's clock (nanoseconds).
#[derive(Debug, Default)]
pub(crate) struct ActorClock {
    /// A new instance's clock starts at no less than this.
    floor_ns: u64,
    /// The mark on disk while it runs ahead of the live clock; 0 if none.
    mark_ns: u64,
    /// The floor already holds the mark on disk: it was read, or written
    /// here as the exact reading. Only the actor's owner writes its mark,
    /// and a new owner (a move, a re-placement, a restart) starts with a
    /// new clock, so this owner's later restores read nothing from the
    /// store (a cluster worker's resume after its own pause saves a GET).
    known: bool,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
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
        if self.known {
            return;
        }
        self.floor_ns = self.floor_ns.max(store.clock_mark(actor));
        self.known = true;
    }

    /// Before guest code runs on a live instance whose clock reads
    /// `now_ns`, and which is cut after `timeout`: makes sure the mark on
    /// disk is past any reading the guest can take meanwhile. Best effort:
    /// a failed write is logged.
    pub(crate) fn lease(
        &mut self,
        store: &dyn SnapshotStore,
        actor: &str,
        now_ns: u64,
        timeout: Duration,
    ) {
        let needed = now_ns.saturating_add(nanos(timeout));
        if self.mark_ns >= needed {
            return;
        }
        let mark = needed.saturating_add(nanos(LEASE));
        match store.write_clock_mark(actor, mark) {
            Ok(()) => {
                self.mark_ns = mark;
                // The mark on disk is this owner's now, ahead of any
                // reading by design: a restore in this process (a trap's
                // rollback) continues from the floor, not from the mark;
                // only a new process (after a crash) starts from it.
                self.known = true;
            }
            Err(e) => tracing::warn!(actor, "cannot persist the clock mark: {e}"),
        }
    }

    /// The live instance was dropped with its clock at `clock_ns`: the
    /// next one starts no earlier. With `paused`, the mark on disk becomes
    /// exactly that reading (no lease is needed without an instance), so a
    /// paused actor's clock continues after a restart without a jump.
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

    /// No guest code runs on the live instance for now (it was captured
    /// for a move, at `clock_ns`): the mark on disk becomes exactly the
    /// latest reading, so the move's target (on this data dir) continues
    /// the clock without a jump. The next call leases again.
    pub(crate) fn settle(&mut self, store: &dyn SnapshotStore, actor: &str, clock_ns: u64) {
        self.floor_ns = self.floor_ns.max(clock_ns);
        match store.write_clock_mark(actor, self.floor_ns) {
            Ok(()) => {
                self.mark_ns = 0;
                self.known = true;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_runs_ahead_and_a_pause_makes_it_exact() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store =
            stasis_core::snapshot_files::LocalSnapshotStore::open(tmp.path(), None).expect("store");
        let timeout = Duration::from_secs(1);
        let mut clock = ActorClock::default();
        clock.lease(&store, "a", 5, timeout);
        let leased = store.clock_mark("a");
        assert!(leased >= 5 + nanos(timeout) + nanos(LEASE), "{leased}");
        // Within the lease: no new write.
        clock.lease(&store, "a", 10, timeout);
        assert_eq!(store.clock_mark("a"), leased);
        // A crash: a new process starts from the mark.
        let mut after_crash = ActorClock::default();
        after_crash.load(&store, "a");
        assert_eq!(after_crash.floor_ns(), leased);
        // A trap rollback keeps the dropped instance's reading.
        clock.dropped(&store, "a", 7, false);
        assert_eq!(clock.floor_ns(), 7);
        assert_eq!(store.clock_mark("a"), leased);
        // ... and its restore does not jump to the mark this owner leased.
        clock.load(&store, "a");
        assert_eq!(clock.floor_ns(), 7);
        // A pause writes the exact reading.
        let mut paused = ActorClock::default();
        paused.dropped(&store, "a", 9, true);
        assert_eq!(store.clock_mark("a"), 9);
        assert_eq!(store.used_bytes(), 0, "the mark is not a snapshot");
    }

    #[test]
    fn an_owner_reads_the_mark_once_and_a_new_owner_reads_it_again() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store =
            stasis_core::snapshot_files::LocalSnapshotStore::open(tmp.path(), None).expect("store");
        store.write_clock_mark("a", 40).expect("mark");
        let mut clock = ActorClock::default();
        clock.load(&store, "a");
        assert_eq!(clock.floor_ns(), 40);
        // Paused here at 50: the mark is exact, and the next restore of
        // this owner needs no read (a mark only its owner writes).
        clock.dropped(&store, "a", 50, true);
        assert_eq!(store.clock_mark("a"), 50);
        store.write_clock_mark("a", 70).expect("mark");
        clock.load(&store, "a");
        assert_eq!(clock.floor_ns(), 50, "read the store again");
        // A new owner (a fresh clock) reads it.
        let mut next = ActorClock::default();
        next.load(&store, "a");
        assert_eq!(next.floor_ns(), 70);
    }
}
