//! Durability of appended entries, shared by both journals: the
//! [`Durable`] an append returns (what the output gate waits for), the
//! group commits it follows ([`Committed`]), and [`JournalError`].

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// Why the journal refused or lost an entry. Once a write or an
/// `fdatasync` failed, what reached the disk is unknown: the journal
/// refuses every later entry and every entry not yet durable fails, so no
/// request is answered as done unless it is on disk. A restart replays
/// what is. A *refusal* ([`JournalError::is_refusal`]) wrote nothing and
/// leaves the journal usable: the data dir's disk has no room for a new
/// segment, or a lost round of the shipped journal broke the actor.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{why}")]
pub struct JournalError {
    why: Arc<str>,
    refusal: bool,
}

impl JournalError {
    /// A failure: what reached the disk (or the store) is unknown.
    pub(super) fn failed(why: impl Into<Arc<str>>) -> Self {
        Self {
            why: why.into(),
            refusal: false,
        }
    }

    /// A refusal: nothing of the entry was written.
    pub(super) fn refused(why: impl Into<Arc<str>>) -> Self {
        Self {
            why: why.into(),
            refusal: true,
        }
    }

    /// Whether the entry was refused before anything of it was written
    /// (the journal takes entries again later): the delivery is rolled
    /// back and the actor lives on.
    #[must_use]
    pub fn is_refusal(&self) -> bool {
        self.refusal
    }

    /// Whether the refusal is for want of disk space (answered 507).
    #[must_use]
    pub fn is_no_room(&self) -> bool {
        self.refusal && self.why.starts_with(NO_ROOM)
    }
}

/// How a refusal for want of disk space begins.
pub(super) const NO_ROOM: &str = "the data dir's disk is full";

/// The durable end of the log, and the failure that stopped it.
#[derive(Debug, Clone, Default)]
pub(super) struct Committed {
    pub(super) durable: u64,
    pub(super) failed: Option<Arc<str>>,
    /// Group commits at or below `durable` that did not make their
    /// entries durable (the shipped journal's lost rounds, newest last; a
    /// local journal fails for good instead).
    pub(super) lost: VecDeque<Lost>,
}

/// A group commit that did not make entries durable.
#[derive(Debug, Clone)]
pub(super) struct Lost {
    /// Its round.
    pub(super) round: u64,
    /// The one actor whose entries it left out, or `None` for all.
    pub(super) actor: Option<Arc<str>>,
    /// Why, as the answers say it.
    pub(super) why: Arc<str>,
}

impl Committed {
    /// Why the entry of `actor` (if named) in round `end` was lost.
    fn lost(&self, end: u64, actor: Option<&Arc<str>>) -> Option<&Arc<str>> {
        self.lost
            .iter()
            .find(|lost| {
                lost.round == end
                    && lost
                        .actor
                        .as_ref()
                        .is_none_or(|a| actor.is_some_and(|actor| a == actor))
            })
            .map(|lost| &lost.why)
    }
}

/// What runs once an entry's group commit is over.
type Then = Box<dyn FnOnce(Result<(), JournalError>) + Send>;

/// The callbacks of [`Durable::then`] waiting for a local journal's group
/// commits: called by its writer thread, each once its entry is durable
/// (or the journal failed), with no task or wake-up per waiter.
#[derive(Default)]
pub(super) struct Waiters(Mutex<WaitersState>);

#[derive(Default)]
struct WaitersState {
    durable: u64,
    failed: Option<Arc<str>>,
    /// By the end of the entry they wait for.
    waiting: BTreeMap<u64, Vec<Then>>,
}

impl std::fmt::Debug for Waiters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiters").finish_non_exhaustive()
    }
}

impl Waiters {
    fn lock(&self) -> std::sync::MutexGuard<'_, WaitersState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts at `durable` (everything before it is on disk).
    pub(super) fn starting_at(durable: u64) -> Self {
        Self(Mutex::new(WaitersState {
            durable,
            ..WaitersState::default()
        }))
    }

    /// Everything up to `durable` is on disk: calls its waiters.
    pub(super) fn durable(&self, durable: u64) {
        let ready = {
            let mut state = self.lock();
            state.durable = durable;
            let later = state.waiting.split_off(&(durable + 1));
            std::mem::replace(&mut state.waiting, later)
        };
        for then in ready.into_values().flatten() {
            then(Ok(()));
        }
    }

    /// The journal failed (`why`): every waiter not yet called fails.
    pub(super) fn fail(&self, why: &Arc<str>) {
        let all = {
            let mut state = self.lock();
            state.failed = Some(why.clone());
            std::mem::take(&mut state.waiting)
        };
        for then in all.into_values().flatten() {
            then(Err(JournalError::failed(why.clone())));
        }
    }

    fn then(&self, end: u64, then: Then) {
        let now = {
            let mut state = self.lock();
            if state.durable >= end {
                Ok(())
            } else if let Some(why) = &state.failed {
                Err(JournalError::failed(why.clone()))
            } else {
                state.waiting.entry(end).or_default().push(then);
                return;
            }
        };
        then(now);
    }
}

/// An appended entry's durability: [`Durable::wait`] resolves once it is
/// on disk.
#[derive(Debug, Clone)]
pub struct Durable {
    pub(super) end: u64,
    pub(super) committed: watch::Receiver<Committed>,
    /// The local journal's waiters ([`Durable::then`]); `None` for the
    /// shipped journal.
    pub(super) waiters: Option<Arc<Waiters>>,
    /// The actor whose entry it is (the shipped journal, whose round may
    /// leave out one actor's entries).
    pub(super) actor: Option<Arc<str>>,
}

impl Durable {
    /// Calls `then` once the entry's group commit is over (at once if it
    /// is): with the local journal on its writer thread, so `then` must
    /// be quick (send on a channel); otherwise from a task.
    pub fn then(self, then: impl FnOnce(Result<(), JournalError>) + Send + 'static) {
        match self.waiters.clone() {
            Some(waiters) => waiters.then(self.end, Box::new(then)),
            None => match self.outcome() {
                Some(outcome) => then(outcome),
                None => {
                    tokio::spawn(async move { then(self.wait().await) });
                }
            },
        }
    }

    /// Waits until the entry is durable.
    ///
    /// # Errors
    /// [`JournalError`] if the journal failed before the entry reached the
    /// disk.
    pub async fn wait(mut self) -> Result<(), JournalError> {
        let end = self.end;
        let committed = self
            .committed
            .wait_for(|c| c.durable >= end || c.failed.is_some())
            .await
            .map_err(|_| JournalError::failed("the journal writer stopped"))?;
        if committed.durable < end {
            return Err(JournalError::failed(
                committed.failed.clone().unwrap_or_default(),
            ));
        }
        match committed.lost(end, self.actor.as_ref()) {
            Some(why) => Err(JournalError::failed(why.clone())),
            None => Ok(()),
        }
    }

    /// How the entry's group commit ended: `None` while it runs.
    #[must_use]
    pub fn outcome(&self) -> Option<Result<(), JournalError>> {
        let committed = self.committed.borrow();
        if committed.durable < self.end {
            return committed
                .failed
                .clone()
                .map(|why| Err(JournalError::failed(why)));
        }
        Some(match committed.lost(self.end, self.actor.as_ref()) {
            Some(why) => Err(JournalError::failed(why.clone())),
            None => Ok(()),
        })
    }

    /// Whether the entry's group commit is over (durable, or lost: then
    /// [`Durable::wait`] says why at once).
    #[must_use]
    pub fn is_durable(&self) -> bool {
        self.committed.borrow().durable >= self.end
    }
}
