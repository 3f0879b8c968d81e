//! Durability of appended entries, shared by both journals: the
//! [`Durable`] an append returns (what the output gate waits for), the
//! group commits it follows ([`Committed`]), and [`JournalError`].

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::watch;

/// Why the journal refused or lost an entry. Once a write or an
/// `fdatasync` failed, what reached the disk is unknown: the journal
/// refuses every later entry and every entry not yet durable fails, so no
/// request is answered as done unless it is on disk. A restart replays
/// what is.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct JournalError(pub(super) Arc<str>);

/// The durable end of the log, and the failure that stopped it.
#[derive(Debug, Clone, Default)]
pub(super) struct Committed {
    pub(super) durable: u64,
    pub(super) failed: Option<Arc<str>>,
    /// Group commits at or below `durable` that did not make their
    /// entries durable, with why (the shipped journal's lost rounds,
    /// newest last; a local journal fails for good instead).
    pub(super) lost: VecDeque<(u64, Arc<str>)>,
}

/// An appended entry's durability: [`Durable::wait`] resolves once it is
/// on disk.
#[derive(Debug, Clone)]
pub struct Durable {
    pub(super) end: u64,
    pub(super) committed: watch::Receiver<Committed>,
}

impl Durable {
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
            .map_err(|_| JournalError("the journal writer stopped".into()))?;
        if committed.durable < end {
            return Err(JournalError(committed.failed.clone().unwrap_or_default()));
        }
        match committed.lost.iter().find(|(round, _)| *round == end) {
            Some((_, why)) => Err(JournalError(why.clone())),
            None => Ok(()),
        }
    }

    /// How the entry's group commit ended: `None` while it runs.
    #[must_use]
    pub fn outcome(&self) -> Option<Result<(), JournalError>> {
        let committed = self.committed.borrow();
        if committed.durable < self.end {
            return committed.failed.clone().map(|why| Err(JournalError(why)));
        }
        Some(
            match committed.lost.iter().find(|(round, _)| *round == self.end) {
                Some((_, why)) => Err(JournalError(why.clone())),
                None => Ok(()),
            },
        )
    }

    /// Whether the entry's group commit is over (durable, or lost: then
    /// [`Durable::wait`] says why at once).
    #[must_use]
    pub fn is_durable(&self) -> bool {
        self.committed.borrow().durable >= self.end
    }
}
