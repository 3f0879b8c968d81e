//! The control plane's alarm [`Scheduler`]: every pending alarm in memory,
//! in time order, backed by the directory; a task that fires each at its
//! time through a [`Deliver`] and retries failures with [`super::backoff`].
//!
//! Every change (set, cancel, and clearing a fired alarm) holds one write
//! lock across the directory write and the memory update, so the two never
//! disagree about an actor; each set gets a new generation, so a delivery
//! that finishes after its alarm was replaced or cancelled changes nothing.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use tokio::sync::{Notify, Semaphore};
use tokio::task::AbortHandle;

use stasis_contract::directory::Directory;
use stasis_contract::error::ApiError;
use stasis_contract::metrics::AlarmMetrics;

use crate::blocking;

/// Alarm deliveries (actor invocations) in flight at once; more wait for
/// a turn. Recording the outcome (a directory write) is outside the turn.
const MAX_IN_FLIGHT: usize = 64;

/// What delivering one alarm came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The handler ran to completion.
    Ran,
    /// The module has no `stasis_on_alarm` export.
    NoHook,
    /// The actor no longer exists.
    Gone,
    /// The handler trapped or the actor could not be reached (the reason).
    Failed(String),
}

/// How a due alarm reaches its actor.
#[async_trait]
pub trait Deliver: Send + Sync {
    /// Runs `actor`'s alarm handler once; `setter` is the `traceparent`
    /// of the span that set the alarm, if known (the alarm's span links to
    /// it).
    async fn deliver(&self, actor: &str, setter: Option<String>) -> Delivery;
}

/// Now, in Unix ms.
#[must_use]
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One actor's alarm in memory.
#[derive(Debug, Clone)]
struct Entry {
    /// The alarm's time as set (what the directory holds).
    at_unix_ms: u64,
    /// When it runs next: its time, or a retry's.
    due_unix_ms: u64,
    /// Which set this is (see the module docs).
    generation: u64,
    /// Failed deliveries so far.
    failures: u32,
    /// The `traceparent` of the span that set it, when set through this
    /// control plane (not kept in the directory: an alarm loaded at a start
    /// has none).
    setter: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<String, Entry>,
    /// (due, generation, actor) of every entry not being delivered.
    queue: BTreeSet<(u64, u64, String)>,
    next_generation: u64,
}

impl State {
    fn insert(&mut self, actor: &str, at_unix_ms: u64, setter: Option<String>) {
        self.remove(actor);
        self.next_generation += 1;
        let generation = self.next_generation;
        self.queue
            .insert((at_unix_ms, generation, actor.to_owned()));
        self.entries.insert(
            actor.to_owned(),
            Entry {
                at_unix_ms,
                due_unix_ms: at_unix_ms,
                generation,
                failures: 0,
                setter,
            },
        );
    }

    fn remove(&mut self, actor: &str) -> Option<Entry> {
        let entry = self.entries.remove(actor)?;
        self.queue
            .remove(&(entry.due_unix_ms, entry.generation, actor.to_owned()));
        Some(entry)
    }
}

/// A due alarm taken out of the queue: its actor, generation and setter.
type Due = (String, u64, Option<String>);

/// What the scheduler's tasks share.
struct Inner {
    directory: Arc<dyn Directory>,
    metrics: AlarmMetrics,
    /// Failed deliveries after which an alarm is given up.
    retries: u32,
    state: Mutex<State>,
    /// Held across a directory write and the memory update.
    writes: tokio::sync::Mutex<()>,
    wake: Notify,
    turns: Arc<Semaphore>,
}

/// The pending alarms of one control plane (see the module docs). The
/// firing task runs from [`Scheduler::start`] until the scheduler is
/// dropped.
pub struct Scheduler {
    inner: Arc<Inner>,
    task: Mutex<Option<AbortHandle>>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("pending", &self.inner.state().entries.len())
            .finish_non_exhaustive()
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
    }
}

impl Scheduler {
    /// A scheduler over `directory`, counting in `metrics`, giving an
    /// alarm up after `retries` failed deliveries (at least 1); it fires
    /// nothing before [`Scheduler::start`].
    #[must_use]
    pub fn new(directory: Arc<dyn Directory>, metrics: AlarmMetrics, retries: u32) -> Self {
        Self {
            inner: Arc::new(Inner {
                directory,
                metrics,
                retries: retries.max(1),
                state: Mutex::default(),
                writes: tokio::sync::Mutex::new(()),
                wake: Notify::new(),
                turns: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            }),
            task: Mutex::new(None),
        }
    }

    /// Takes `pending` (every alarm of the directory, as
    /// [`Directory::alarms`] lists them; alarms due while nothing ran fire
    /// at once, once) and starts firing through `deliver`. A second call
    /// does nothing.
    ///
    /// # Errors
    /// 500 outside a tokio runtime (nothing is started).
    pub fn start(
        &self,
        pending: Vec<(String, u64)>,
        deliver: Arc<dyn Deliver>,
    ) -> Result<(), ApiError> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| ApiError::internal(format!("the alarm scheduler needs a runtime: {e}")))?;
        let mut task = self.task.lock().unwrap_or_else(|p| p.into_inner());
        if task.is_some() {
            return Ok(());
        }
        {
            let mut state = self.inner.state();
            for (actor, at_unix_ms) in pending {
                // A set that came first is newer than the listing.
                if !state.entries.contains_key(&actor) {
                    state.insert(&actor, at_unix_ms, None);
                }
            }
            self.inner.count_pending(&state);
        }
        *task = Some(
            runtime
                .spawn(fire_loop(self.inner.clone(), deliver))
                .abort_handle(),
        );
        Ok(())
    }

    /// Sets `actor`'s alarm to `at_unix_ms`, durably, replacing any;
    /// `setter` is the `traceparent` of the span that set it (the alarm's
    /// span links to it).
    ///
    /// # Errors
    /// The directory's (500; 503 from a leader that no longer leads).
    pub async fn set(
        &self,
        actor: &str,
        at_unix_ms: u64,
        setter: Option<String>,
    ) -> Result<(), ApiError> {
        let _writes = self.inner.writes.lock().await;
        let name = actor.to_owned();
        blocking(&self.inner.directory, move |d| {
            d.set_alarm(&name, at_unix_ms)
        })
        .await?;
        let mut state = self.inner.state();
        state.insert(actor, at_unix_ms, setter);
        self.inner.count_pending(&state);
        drop(state);
        self.inner.wake.notify_one();
        Ok(())
    }

    /// Removes `actor`'s alarm, durably (fine when none is set).
    ///
    /// # Errors
    /// As [`Scheduler::set`].
    pub async fn cancel(&self, actor: &str) -> Result<(), ApiError> {
        let _writes = self.inner.writes.lock().await;
        let name = actor.to_owned();
        blocking(&self.inner.directory, move |d| d.clear_alarm(&name, None)).await?;
        let mut state = self.inner.state();
        state.remove(actor);
        self.inner.count_pending(&state);
        Ok(())
    }

    /// `actor`'s pending alarm (Unix ms), as the directory holds it; while
    /// a failed delivery waits for its retry, the retry's time.
    ///
    /// # Errors
    /// The directory's.
    pub async fn get(&self, actor: &str) -> Result<Option<u64>, ApiError> {
        let name = actor.to_owned();
        let set = blocking(&self.inner.directory, move |d| d.alarm(&name)).await?;
        let state = self.inner.state();
        let retry = state
            .entries
            .get(actor)
            .filter(|e| e.failures > 0 && Some(e.at_unix_ms) == set)
            .map(|e| e.due_unix_ms);
        Ok(retry.or(set))
    }

    /// Forgets `actor`'s alarm in memory (its directory record went with
    /// the actor).
    pub fn forget(&self, actor: &str) {
        let mut state = self.inner.state();
        state.remove(actor);
        self.inner.count_pending(&state);
    }

    /// The number of pending alarms.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.inner.state().entries.len()
    }
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count_pending(&self, state: &State) {
        self.metrics
            .pending
            .set(i64::try_from(state.entries.len()).unwrap_or(i64::MAX));
    }

    /// Takes every alarm due at `now` out of the queue (each with its
    /// generation and setter); the time of the next one after them, if any.
    fn take_due(&self, now: u64) -> (Vec<Due>, Option<u64>) {
        let mut state = self.state();
        let mut due = Vec::new();
        while let Some(first) = state.queue.first() {
            if first.0 > now {
                return (due, Some(first.0));
            }
            if let Some((_, generation, actor)) = state.queue.pop_first() {
                let setter = state.entries.get(&actor).and_then(|e| e.setter.clone());
                due.push((actor, generation, setter));
            }
        }
        (due, None)
    }

    /// After a delivery of `actor`'s alarm of `generation`: clears it
    /// (memory and directory) if it is still that alarm, or schedules a
    /// retry with backoff after a failure, or gives it up (clears it) after
    /// the last failure `retries` allows.
    async fn finish(&self, actor: &str, generation: u64, delivery: Delivery) {
        match &delivery {
            Delivery::Ran => {
                self.metrics.fired.inc();
            }
            Delivery::NoHook => {
                // Logged before it is counted: whoever sees the count
                // finds the reason in the log.
                tracing::warn!(
                    actor,
                    "the module has no stasis_on_alarm export; its alarm is removed"
                );
                self.metrics.without_hook.inc();
            }
            Delivery::Gone => {
                tracing::debug!(actor, "alarm of a deleted actor dropped");
            }
            Delivery::Failed(reason) => {
                self.metrics.failures.inc();
                if self.retry_later(actor, generation, reason) {
                    return;
                }
            }
        }
        self.clear(actor, generation).await;
    }

    /// After a failed delivery of `actor`'s alarm of `generation`: true if
    /// a retry is scheduled (or the alarm was replaced or removed
    /// meanwhile, so there is nothing to do); false once its retries are
    /// spent, when the caller gives it up.
    fn retry_later(&self, actor: &str, generation: u64, reason: &str) -> bool {
        let mut state = self.state();
        let Some(entry) = state.entries.get_mut(actor) else {
            return true;
        };
        if entry.generation != generation {
            return true;
        }
        entry.failures = entry.failures.saturating_add(1);
        if entry.failures >= self.retries {
            tracing::error!(
                actor,
                failures = entry.failures,
                "alarm handler failed ({reason}); giving the alarm up after {} failed \
                 deliveries (--alarm-retries)",
                entry.failures
            );
            self.metrics.given_up.inc();
            return false;
        }
        let pause = super::backoff(entry.failures);
        entry.due_unix_ms =
            now_unix_ms().saturating_add(u64::try_from(pause.as_millis()).unwrap_or(0));
        let key = (entry.due_unix_ms, generation, actor.to_owned());
        tracing::warn!(
            actor,
            failures = entry.failures,
            "alarm handler failed ({reason}); retrying in {pause:?}"
        );
        state.queue.insert(key);
        drop(state);
        self.wake.notify_one();
        true
    }

    /// Removes `actor`'s alarm of `generation` (memory and directory) if
    /// it is still that alarm; a failed directory write is tried again a
    /// second later.
    async fn clear(&self, actor: &str, generation: u64) {
        let _writes = self.writes.lock().await;
        let at_unix_ms = {
            let state = self.state();
            match state.entries.get(actor) {
                Some(entry) if entry.generation == generation => entry.at_unix_ms,
                // Replaced or cancelled meanwhile: that one stands.
                _ => return,
            }
        };
        let name = actor.to_owned();
        let cleared = blocking(&self.directory, move |d| {
            d.clear_alarm(&name, Some(at_unix_ms))
        })
        .await;
        match cleared {
            Ok(_) => {
                let mut state = self.state();
                state.remove(actor);
                self.count_pending(&state);
            }
            Err(e) => {
                // Still recorded: it fires again a second later (at
                // least once), and the clear is tried again after it.
                tracing::warn!(actor, "clearing a fired alarm failed: {e}");
                let mut state = self.state();
                if let Some(entry) = state.entries.get_mut(actor) {
                    entry.due_unix_ms = now_unix_ms().saturating_add(1_000);
                    let key = (entry.due_unix_ms, generation, actor.to_owned());
                    state.queue.insert(key);
                }
            }
        }
    }
}

/// Fires due alarms until the scheduler is dropped (which aborts it).
async fn fire_loop(inner: Arc<Inner>, deliver: Arc<dyn Deliver>) {
    loop {
        let (due, next) = inner.take_due(now_unix_ms());
        for (actor, generation, setter) in due {
            let (inner, deliver) = (inner.clone(), deliver.clone());
            tokio::spawn(async move {
                let Ok(turn) = inner.turns.clone().acquire_owned().await else {
                    return;
                };
                let delivery = deliver.deliver(&actor, setter).await;
                // The next delivery need not wait for this one's record.
                drop(turn);
                inner.finish(&actor, generation, delivery).await;
            });
        }
        let wait = next.map(|at| Duration::from_millis(at.saturating_sub(now_unix_ms())));
        match wait {
            Some(wait) => {
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = inner.wake.notified() => {}
                }
            }
            None => inner.wake.notified().await,
        }
    }
}
