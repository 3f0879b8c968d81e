//! The compaction loop of a worker's journal: once a second, the actors
//! of the worker whose newest journal entry is in a closed segment are
//! asked to write it to the store ([`Command::Fold`]), a bounded number at
//! a time, and the segments no entry needs any more are deleted. While
//! segments keep rolling (a burst of creates fills one in a fraction of a
//! second), the newest [`BURST_SEGMENTS`] closed ones wait for the burst to
//! end: their writes would compete with it for the disk.

use std::sync::{Arc, Weak};

use stasis_core::journal::Journal;

use crate::Worker;
use crate::actor::Command;

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
