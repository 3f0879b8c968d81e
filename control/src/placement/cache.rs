//! A follower replica's placements as a bounded cache (`--placement-cache
//! N`): the table holds the placements looked up lately; a lookup that
//! finds nothing reads the actor's record from the directory (see
//! `ControlPlane::load_placement`, one read per actor at a time); the
//! watch of changes updates the names held and ignores the others; past
//! the bound, a sweep drops the placements not looked up since the last
//! sweep. A follower so starts without reading any actor.
//!
//! A read at revision R races the watch: while a name is being read, the
//! watch keeps the newest change it sees for it ([`Cache::saw`]), and the
//! read gives way to a change at a revision later than R
//! ([`PlacementTable::insert_read`]). A placement stale all the same (read
//! from a lagging etcd member, or kept across a compaction) is refused by
//! its worker (421) and dropped, so the next lookup reads it again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::{Gate, Placement, PlacementTable, follow_row};
use stasis_contract::directory::{ActorPut, ActorRead, ActorRow};
use stasis_contract::error::ApiError;
use stasis_contract::metrics::PlacementCacheMetrics;

/// What a lookup that read the directory found: the placement's gate, or
/// `None` for no such actor.
pub(crate) type Loaded = Result<Option<Arc<Gate>>, ApiError>;

/// A change the watch saw for a name being read.
#[derive(Debug, Clone)]
pub(crate) enum Seen {
    /// The record was put.
    Put(ActorPut),
    /// The record was deleted, at this revision.
    Deleted(i64),
}

impl Seen {
    fn revision(&self) -> i64 {
        match self {
            Seen::Put(put) => put.revision,
            Seen::Deleted(revision) => *revision,
        }
    }
}

/// A follower's cache: its bound, the reads in flight and its metrics.
pub(crate) struct Cache {
    bound: usize,
    /// Names being read, each with the newest change the watch saw for it
    /// meanwhile.
    loads: Mutex<HashMap<String, Option<Seen>>>,
    /// The read in flight for each name, which concurrent misses share.
    flights: Mutex<HashMap<String, Arc<tokio::sync::OnceCell<Loaded>>>>,
    /// The etcd revision the watch applied: a read must be at least as
    /// current (else it could miss what this replica already answered).
    applied: AtomicI64,
    pub(crate) metrics: PlacementCacheMetrics,
}

impl Cache {
    pub(super) fn new(bound: usize, metrics: PlacementCacheMetrics) -> Self {
        Self {
            bound: bound.max(1),
            loads: Mutex::default(),
            flights: Mutex::default(),
            applied: AtomicI64::new(0),
            metrics,
        }
    }

    /// The etcd revision the watch applied so far.
    pub(crate) fn applied(&self) -> i64 {
        self.applied.load(Ordering::SeqCst)
    }

    /// Notes that the watch applied changes up to `revision`.
    pub(crate) fn applied_up_to(&self, revision: i64) {
        self.applied.fetch_max(revision, Ordering::SeqCst);
    }

    /// The read in flight for `name`, or a new one: the first lookup to
    /// get it runs the read, the others wait for its answer (a lookup that
    /// gives up hands the read to the next).
    pub(crate) fn flight(&self, name: &str) -> Arc<tokio::sync::OnceCell<Loaded>> {
        let mut flights = self.flights.lock().unwrap_or_else(PoisonError::into_inner);
        flights.entry(name.to_owned()).or_default().clone()
    }

    /// Forgets `flight` once answered (the next miss reads again).
    pub(crate) fn land(&self, name: &str, flight: &Arc<tokio::sync::OnceCell<Loaded>>) {
        let mut flights = self.flights.lock().unwrap_or_else(PoisonError::into_inner);
        if flights.get(name).is_some_and(|f| Arc::ptr_eq(f, flight)) {
            flights.remove(name);
        }
    }

    /// Starts keeping the watch's changes for `name`, while the returned
    /// guard lives (until the read is in, or given up).
    pub(crate) fn begin(&self, name: &str) -> Loading<'_> {
        self.loads().insert(name.to_owned(), None);
        Loading {
            cache: self,
            name: name.to_owned(),
        }
    }

    /// Keeps `seen` for `name` if it is being read and `seen` is newer
    /// than what was kept.
    pub(super) fn saw(&self, name: &str, seen: Seen) {
        if let Some(kept) = self.loads().get_mut(name)
            && kept.as_ref().is_none_or(|k| k.revision() < seen.revision())
        {
            *kept = Some(seen);
        }
    }

    fn loads(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<Seen>>> {
        self.loads.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops placements until `map` is within the bound with a tenth to
    /// spare: first those not looked up since the last sweep (the others
    /// are marked for the next), then any; never one a request holds.
    fn evict(&self, map: &mut super::Placements) {
        if map.len() <= self.bound {
            return;
        }
        let keep = self.bound - self.bound / 10;
        let mut excess = map.len() - keep;
        let mut dropped = 0;
        for spare_touched in [true, false] {
            map.retain(|_, p| {
                if excess == 0 || Arc::strong_count(&p.gate) > 1 {
                    return true;
                }
                if p.gate.touched.swap(false, Ordering::Relaxed) && spare_touched {
                    return true;
                }
                excess -= 1;
                dropped += 1;
                false
            });
            if excess == 0 {
                break;
            }
        }
        self.metrics.evictions.inc_by(dropped);
    }
}

/// A read in flight ([`Cache::begin`]): the watch's changes for its name
/// are kept until it ends.
pub(crate) struct Loading<'a> {
    cache: &'a Cache,
    name: String,
}

impl Drop for Loading<'_> {
    fn drop(&mut self) {
        self.cache.loads().remove(&self.name);
    }
}

impl PlacementTable {
    /// The cache, for a follower's table.
    pub(crate) fn cache(&self) -> Option<&Cache> {
        self.cache.as_ref()
    }

    /// Whether the table follows placements another replica decides (a
    /// follower's cache, kept in step by a watch that may be behind).
    pub(crate) fn follows(&self) -> bool {
        self.cache.is_some()
    }

    /// Puts what a read of `name` found (`read`, under `loading`) in the
    /// cache, unless the watch saw a later change meanwhile (then that
    /// change); `placement` makes a new placement. The placement's gate, or
    /// `None` if the actor does not exist.
    pub(crate) fn insert_read(
        &self,
        name: &str,
        read: ActorRead,
        loading: Loading<'_>,
        placement: impl Fn(&ActorRow, Option<i64>) -> Placement,
    ) -> Option<Arc<Gate>> {
        let cache = self.cache.as_ref()?;
        let mut map = self.write();
        let seen = cache.loads().remove(name).flatten();
        drop(loading);
        let newest = match seen {
            Some(seen) if seen.revision() > read.revision => match seen {
                Seen::Put(put) => Some((put.row, put.generation)),
                Seen::Deleted(_) => None,
            },
            _ => read.row.map(|row| (row, read.generation)),
        };
        let Some((row, generation)) = newest else {
            map.remove(name);
            return None;
        };
        follow_row(&mut map, &row, Some(generation), &placement);
        let gate = map.get(name).map(|p| p.gate.clone());
        cache.evict(&mut map);
        gate
    }

    /// Drops `name`'s cached placement if its epoch is `epoch` or older (a
    /// worker refused it as stale). Not for a table that is not a cache.
    pub(crate) fn forget(&self, name: &str, epoch: u64) {
        if self.cache.is_some() {
            let mut map = self.write();
            if map.get(name).is_some_and(|p| p.epoch <= epoch) {
                map.remove(name);
            }
        }
    }

    /// Drops every cached placement (the watch started over after a
    /// compaction: changes were missed). Not for a table that is not a
    /// cache.
    pub(crate) fn forget_all(&self) {
        if self.cache.is_some() {
            self.write().clear();
        }
    }
}
