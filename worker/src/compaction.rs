//! The compaction loops of a worker's journal. With the data dir's
//! journal, once a second, the actors of the worker whose newest journal
//! entry is in a closed segment are asked to write it to the store
//! ([`Command::Fold`]), a bounded number at a time, and the segments no
//! entry needs any more are deleted. While segments keep rolling (a burst
//! of creates fills one in a fraction of a second), the newest
//! [`BURST_SEGMENTS`] closed ones wait for the burst to end: their writes
//! would compete with it for the disk. With a cluster worker's shipped
//! journal ([`stasis_core::journal::shipped`]), entries older than its
//! fold delay are folded, this run's segments no entry needs are deleted,
//! and once a minute lost workers' segments whose entries are all folded
//! are swept.

use std::sync::{Arc, Weak};

use stasis_core::journal::Journal;
use stasis_core::journal::shipped::ShippedJournal;

use crate::Worker;
use crate::actor::Command;
use crate::journaled::Log;

impl Worker {
    /// Gives the worker the data dir's journal (once, before its first
    /// actor), which its actors at level `request` append to, and starts
    /// its compaction loop ([`run`]).
    pub fn set_journal(&self, journal: Arc<Journal>) {
        if self.ctx.journal.set(Log::Local(journal.clone())).is_err() {
            return;
        }
        tokio::spawn(run(self.this.clone(), journal));
    }

    /// Gives a cluster worker its shipped journal (once, before its first
    /// actor): its actors at levels `request` and `store` group-commit
    /// their entries into the snapshot store, and an actor placed here
    /// recovers the newest entry a lost worker shipped for it. Starts its
    /// compaction loop ([`run_shipped`]).
    pub fn set_shipped(&self, journal: Arc<ShippedJournal>) {
        if self.ctx.journal.set(Log::Shipped(journal.clone())).is_err() {
            return;
        }
        tokio::spawn(run_shipped(self.this.clone(), journal));
    }

    /// The shipped journal, on a cluster worker.
    #[must_use]
    pub fn shipped(&self) -> Option<&Arc<ShippedJournal>> {
        match self.ctx.journal.get()? {
            Log::Shipped(journal) => Some(journal),
            Log::Local(_) => None,
        }
    }
}

/// The compaction loop of `worker` over its shipped `journal` (module
/// docs); ends with the worker.
async fn run_shipped(worker: Weak<Worker>, journal: Arc<ShippedJournal>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ticks = 0u64;
    loop {
        tick.tick().await;
        ticks += 1;
        let Some(live) = worker.upgrade() else {
            return;
        };
        for actor in journal.pinning() {
            let _ = live.post(&actor, Command::Fold(None));
        }
        drop(live);
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
                    Err(e) => tracing::warn!("sweeping journal segments: {}", e.detail()),
                }
            }
        })
        .await;
    }
}

/// Closed journal segments whose entries the compaction loop leaves in
/// the journal while segments keep rolling ([`run`]): at
/// most this many segments' worth (16 MiB each) of entries wait, and the
/// actors that a full `--max-live` left paused at their create keep that
/// many bytes of snapshot 0 in memory until then.
pub(crate) const BURST_SEGMENTS: usize = 4;

/// Journal entries the compaction loop has written to the store at once
/// ([`run`]).
const FOLDS_AT_ONCE: usize = 64;

/// After a wave of at least this many folds the compaction loop gives the
/// memory they freed back to the system ([`give_back_freed_memory`]).
const TRIM_AFTER_FOLDS: usize = 256;

/// Returns free heap memory to the system (`malloc_trim(3)`): the 16–30
/// KiB of snapshot 0 that each actor paused at its create keeps until its
/// journal entry is written to the store are freed in the middle of the
/// heap, where the allocator keeps them otherwise, and a burst of creates
/// would leave the process that much larger.
async fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases memory that malloc holds free.
    let _ = tokio::task::spawn_blocking(|| unsafe { libc::malloc_trim(0) }).await;
}

/// The compaction loop of `worker` over `journal` (module docs); ends
/// with the worker.
pub(crate) async fn run(worker: Weak<Worker>, journal: Arc<Journal>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut current = journal.current_segment();
    let folds = Arc::new(tokio::sync::Semaphore::new(FOLDS_AT_ONCE));
    loop {
        tick.tick().await;
        let Some(worker) = worker.upgrade() else {
            return;
        };
        let rolled = std::mem::replace(&mut current, journal.current_segment()) != current;
        let keep = if rolled { BURST_SEGMENTS } else { 0 };
        // At most FOLDS_AT_ONCE at a time (each a snapshot write on
        // a blocking thread): they share sync rounds, and a
        // thousand actors pinning one segment do not start a
        // thousand threads.
        let mut posted = 0;
        for actor in journal.pinning_behind(keep) {
            let Ok(permit) = folds.clone().acquire_owned().await else {
                break;
            };
            if worker.post(&actor, Command::Fold(Some(permit))).is_ok() {
                posted += 1;
            }
        }
        if posted >= TRIM_AFTER_FOLDS {
            // Once they are done: the snapshot bytes that actors
            // paused at their create kept until their fold are
            // freed, and given back to the system.
            let all = u32::try_from(FOLDS_AT_ONCE).unwrap_or(u32::MAX);
            drop(folds.acquire_many(all).await);
            give_back_freed_memory().await;
        }
        journal.collect();
    }
}
