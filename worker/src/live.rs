//! `--max-live`: the live-instance slots of one worker and the order in
//! which their actors were last used.
//!
//! A slot is a permit of a semaphore with `--max-live` permits; an actor
//! holds one exactly while it has a live instance, so the cap is never
//! exceeded and the pooling allocator's slots (the sum over the workers
//! sharing an engine) never run out. An actor that needs a slot when none is
//! free asks the worker to pause the least recently used live actor and
//! waits for its slot. To keep that wait (a snapshot write) off the path of
//! most resumes, a worker under pressure keeps a few slots free ahead of
//! need: when fewer than `--max-live / 64` (at most 8) slots are free or
//! being freed, each new live instance also evicts the next least recently
//! used actor in the background. The recency order is kept in a [`Lru`] so
//! that choosing an actor costs `O(log n)` in the number of live actors,
//! not a scan over every actor of the worker.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use stasis_contract::error::ApiError;

/// How long a waiting actor gives one eviction before it asks for another
/// (the first may have failed, e.g. on the snapshot quota, or be stuck
/// behind a long request).
const EVICTION_PATIENCE: Duration = Duration::from_millis(500);

/// Most slots kept free ahead of need.
const MAX_RESERVE: usize = 8;

/// Live actors ordered by last use: `touch` moves an actor to the most
/// recently used end, `pop_oldest` takes from the other end and counts the
/// actor as *evicting* until it is removed (its pause freed the slot) or
/// touched again (it kept running).
#[derive(Debug, Default)]
pub struct Lru {
    order: BTreeMap<u64, Arc<str>>,
    rank: HashMap<Arc<str>, u64>,
    evicting: HashSet<Arc<str>>,
    clock: u64,
}

impl Lru {
    /// Marks `actor` as used just now (inserting it if absent).
    pub fn touch(&mut self, actor: &str) {
        self.evicting.remove(actor);
        self.clock += 1;
        let name = match self.rank.get_key_value(actor) {
            Some((name, &old)) => {
                let name = name.clone();
                self.order.remove(&old);
                name
            }
            None => Arc::from(actor),
        };
        self.order.insert(self.clock, name.clone());
        self.rank.insert(name, self.clock);
    }

    /// Inserts `actor` as most recently used unless it is already present.
    pub fn insert(&mut self, actor: &str) {
        self.evicting.remove(actor);
        if !self.rank.contains_key(actor) {
            self.touch(actor);
        }
    }

    /// Removes `actor`; false if it was absent.
    pub fn remove(&mut self, actor: &str) -> bool {
        self.evicting.remove(actor);
        match self.rank.remove(actor) {
            Some(rank) => {
                self.order.remove(&rank);
                true
            }
            None => false,
        }
    }

    /// Removes and returns the least recently used actor other than `except`.
    pub fn pop_oldest(&mut self, except: &str) -> Option<Arc<str>> {
        let (&rank, name) = self
            .order
            .iter()
            .find(|(_, name)| name.as_ref() != except)?;
        let name = name.clone();
        self.order.remove(&rank);
        self.rank.remove(&name);
        self.evicting.insert(name.clone());
        Some(name)
    }

    /// Actors popped for eviction that have not paused yet.
    #[must_use]
    pub fn evicting(&self) -> usize {
        self.evicting.len()
    }

    /// Actors in the order.
    #[must_use]
    pub fn len(&self) -> usize {
        self.rank.len()
    }

    /// Whether no actor is in the order.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rank.is_empty()
    }
}

/// Asks an actor to pause (the worker sends `Command::Pause` to its mailbox).
pub type Evict = Box<dyn Fn(&str) + Send + Sync>;

/// The live-instance slots of one worker (`--max-live`).
pub struct LiveSlots {
    max: usize,
    reserve: usize,
    permits: Arc<Semaphore>,
    lru: Mutex<Lru>,
    /// Woken when an actor enters the recency order, so a waiter that found
    /// no actor to pause looks again at once.
    listed: Notify,
    evict: Evict,
    wait: Duration,
}

impl std::fmt::Debug for LiveSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveSlots")
            .field("max", &self.max)
            .field("free", &self.permits.available_permits())
            .finish_non_exhaustive()
    }
}

impl LiveSlots {
    /// `max` slots (at least 1); `evict` pauses a named actor; an actor
    /// waits at most `wait` (`--hold-timeout`) for a slot.
    #[must_use]
    pub fn new(max: usize, wait: Duration, evict: Evict) -> Self {
        let max = max.max(1);
        Self {
            max,
            reserve: (max / 64).min(MAX_RESERVE),
            permits: Arc::new(Semaphore::new(max)),
            lru: Mutex::new(Lru::default()),
            listed: Notify::new(),
            evict,
            wait,
        }
    }

    fn lru(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.lru.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for `actor`, pausing least recently used actors until one is
    /// free.
    ///
    /// # Errors
    /// 503 if no slot is free within the wait (every eviction failed or is
    /// stuck behind a long request).
    pub async fn acquire(&self, actor: &str) -> Result<OwnedSemaphorePermit, ApiError> {
        let permit = self.wait_for_slot(actor).await?;
        self.keep_reserve(actor);
        Ok(permit)
    }

    /// A slot for creating `actor` (its init and snapshot 0), and whether
    /// the new actor keeps it as its live instance's. On a worker with
    /// room, or with a cap under 64 (no slots kept free), it does: the
    /// slot is taken as by [`LiveSlots::acquire`]. On a full worker (no
    /// more than the reserve free) the slot is only borrowed, so that a
    /// burst of creations does not pause the actors in use: the new actor
    /// is left paused, and the slot is one of those kept free, or the
    /// next freed within a short wait; only past it is the least recently
    /// used actor paused for one.
    ///
    /// # Errors
    /// 503 as [`LiveSlots::acquire`].
    pub async fn acquire_for_creation(
        &self,
        actor: &str,
    ) -> Result<(OwnedSemaphorePermit, bool), ApiError> {
        if self.reserve == 0 || self.permits.available_permits() > self.reserve {
            return Ok((self.acquire(actor).await?, true));
        }
        let freed = tokio::time::timeout(EVICTION_PATIENCE, self.permits.clone().acquire_owned());
        let permit = match freed.await {
            Ok(Ok(permit)) => permit,
            _ => self.wait_for_slot(actor).await?,
        };
        Ok((permit, false))
    }

    /// Evicts least recently used actors (other than `actor`) in the
    /// background until `reserve` slots are free or being freed.
    fn keep_reserve(&self, actor: &str) {
        let victims: Vec<Arc<str>> = {
            let mut lru = self.lru();
            let ahead = self.permits.available_permits() + lru.evicting();
            (ahead..self.reserve)
                .map_while(|_| lru.pop_oldest(actor))
                .collect()
        };
        for victim in victims {
            tracing::debug!(actor = %victim, "pausing the least recently used actor ahead of need (--max-live {})", self.max);
            (self.evict)(&victim);
        }
    }

    async fn wait_for_slot(&self, actor: &str) -> Result<OwnedSemaphorePermit, ApiError> {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return Ok(permit);
        }
        let deadline = Instant::now() + self.wait;
        loop {
            // Registered before looking for a victim, so an actor that
            // becomes evictable right after the look wakes this waiter.
            let listed = self.listed.notified();
            tokio::pin!(listed);
            listed.as_mut().enable();
            let victim = self.lru().pop_oldest(actor);
            if let Some(victim) = &victim {
                tracing::debug!(actor = %victim, "pausing the least recently used actor (--max-live {})", self.max);
                (self.evict)(victim);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let patience = tokio::time::sleep(left.min(EVICTION_PATIENCE));
            tokio::select! {
                permit = self.permits.clone().acquire_owned() => {
                    if let Ok(permit) = permit {
                        return Ok(permit);
                    }
                }
                () = &mut listed, if victim.is_none() => {}
                () = patience => {}
            }
            if Instant::now() >= deadline {
                return Err(ApiError::unavailable(format!(
                    "no live instance slot for actor {actor} within {:?}: all {} (--max-live) are \
                     in use and pausing the least recently used did not free one",
                    self.wait, self.max
                )));
            }
        }
    }

    /// Records that `actor` served a request or became live.
    pub fn touch(&self, actor: &str) {
        self.lru().touch(actor);
        self.listed.notify_waiters();
    }

    /// Records that `actor` is live, keeping its place if it is known.
    pub fn insert(&self, actor: &str) {
        self.lru().insert(actor);
        self.listed.notify_waiters();
    }

    /// Records that `actor` has no live instance.
    pub fn remove(&self, actor: &str) {
        self.lru().remove(actor);
    }

    /// The number of slots (`--max-live`).
    #[must_use]
    pub fn max(&self) -> usize {
        self.max
    }

    /// Live instances right now (slots in use).
    #[must_use]
    pub fn in_use(&self) -> usize {
        self.max - self.permits.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_large_cap_keeps_slots_free_ahead_of_need() {
        let evicted = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = evicted.clone();
        let slots = LiveSlots::new(
            128,
            Duration::from_secs(5),
            Box::new(move |a| log.lock().unwrap().push(a.to_owned())),
        );
        let mut held = Vec::new();
        for i in 0..126 {
            held.push(slots.acquire(&format!("a{i}")).await.unwrap());
            slots.touch(&format!("a{i}"));
        }
        assert!(
            evicted.lock().unwrap().is_empty(),
            "reserve of 2 still free"
        );
        held.push(slots.acquire("a126").await.unwrap());
        slots.touch("a126");
        assert_eq!(*evicted.lock().unwrap(), ["a0"], "one free + one evicting");
        held.push(slots.acquire("a127").await.unwrap());
        assert_eq!(
            *evicted.lock().unwrap(),
            ["a0", "a1"],
            "none free + two evicting"
        );
        slots.remove("a0");
        drop(held.remove(0));
        assert_eq!(slots.lru().evicting(), 1);
    }

    #[test]
    fn lru_pops_least_recently_used_first() {
        let mut lru = Lru::default();
        for name in ["a", "b", "c"] {
            lru.touch(name);
        }
        lru.touch("a");
        lru.insert("b");
        assert_eq!(lru.pop_oldest("").as_deref(), Some("b"));
        assert_eq!(lru.pop_oldest("c").as_deref(), Some("a"));
        assert_eq!(lru.pop_oldest("c"), None);
        assert_eq!(lru.len(), 1);
        assert!(lru.remove("c"));
        assert!(!lru.remove("c"));
        assert!(lru.is_empty());
    }

    #[tokio::test]
    async fn acquire_evicts_the_oldest_and_waits_for_its_slot() {
        let evicted = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = evicted.clone();
        let slots = Arc::new(LiveSlots::new(
            2,
            Duration::from_secs(5),
            Box::new(move |a| log.lock().unwrap().push(a.to_owned())),
        ));
        let a = slots.acquire("a").await.unwrap();
        slots.touch("a");
        let _b = slots.acquire("b").await.unwrap();
        slots.touch("b");
        assert_eq!(slots.in_use(), 2);
        let waiter = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire("c").await.map(|_| ()) }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(*evicted.lock().unwrap(), ["a"]);
        assert!(!waiter.is_finished());
        drop(a);
        waiter.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn acquire_gives_up_with_503_at_the_deadline() {
        let slots = LiveSlots::new(1, Duration::from_millis(100), Box::new(|_| {}));
        let _held = slots.acquire("a").await.unwrap();
        let error = slots.acquire("b").await.unwrap_err();
        assert_eq!(error.kind().status(), 503);
        assert!(
            error.message().contains("--max-live"),
            "{}",
            error.message()
        );
    }
}
