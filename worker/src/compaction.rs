//! The worker's journal and its compaction loop: which journal its actors
//! append to (the data dir's, or a cluster worker's shipped journal), and
//! the once-a-second loop that folds old entries into the actors' chains
//! and deletes the segments no entry needs.

use std::sync::Arc;

use stasis_core::journal::Journal;
use stasis_core::journal::shipped::ShippedJournal;

use super::Worker;
use super::journaled::Log;
use super::mailbox::Command;

impl Worker {
    /// Gives the worker the data dir's journal (once, before its first
    /// actor), which its actors at level `request` append to, and starts
    /// the compaction loop: every second, the actors of this worker whose
    /// newest entry is in a closed segment write it to the store, and
    /// segments no entry needs are deleted.
    pub fn set_journal(&self, journal: Arc<Journal>) {
        self.set_log(Log::Local(journal));
    }

    /// Gives a cluster worker its shipped journal (once, before its first
    /// actor): its actors at levels `request` and `store` group-commit
    /// their entries into the snapshot store
    /// ([`stasis_core::journal::shipped`]), and an actor placed here
    /// recovers the newest entry a lost worker shipped for it. The
    /// compaction loop folds entries older than
    /// [`stasis_core::journal::shipped::FOLD_AFTER`] into the actors'
    /// chains, deletes segments no entry needs, and every minute sweeps
    /// the segments of lost workers whose entries are all folded.
    pub fn set_shipped(&self, journal: Arc<ShippedJournal>) {
        self.set_log(Log::Shipped(journal));
    }

    fn set_log(&self, log: Log) {
        if self.journal.set(log.clone()).is_err() {
            return;
        }
        let worker = self.this.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut ticks = 0u64;
            loop {
                tick.tick().await;
                ticks += 1;
                let Some(worker) = worker.upgrade() else {
                    return;
                };
                for actor in log.pinning() {
                    let _ = worker.post(&actor, Command::Fold);
                }
                drop(worker);
                match &log {
                    Log::Local(journal) => {
                        journal.collect();
                    }
                    Log::Shipped(journal) => {
                        let journal = journal.clone();
                        let sweep = ticks.is_multiple_of(60);
                        let _ = tokio::task::spawn_blocking(move || {
                            journal.collect();
                            if sweep {
                                match journal.sweep() {
                                    Ok(0) => {}
                                    Ok(n) => tracing::info!(
                                        segments = n,
                                        "deleted journal segments whose entries are all folded"
                                    ),
                                    Err(e) => {
                                        tracing::warn!("sweeping journal segments: {}", e.detail());
                                    }
                                }
                            }
                        })
                        .await;
                    }
                }
            }
        });
    }

    /// The shipped journal, on a cluster worker.
    #[must_use]
    pub fn shipped(&self) -> Option<&Arc<ShippedJournal>> {
        match self.journal.get()? {
            Log::Shipped(journal) => Some(journal),
            Log::Local(_) => None,
        }
    }
}
