//! Group commit of durability: many threads that each wrote files on one
//! filesystem wait for one `syncfs(2)` instead of each fsyncing its own
//! file and folder.
//!
//! A caller of [`SyncGroup::sync`] needs a sync that *starts* after its
//! writes finished. Calls are served in rounds: while a round's `syncfs`
//! runs, new callers wait; when it ends, one of them starts the next round
//! for all of them. So with `n` writers in flight a round costs one
//! `syncfs` for up to `n` files, and a lone writer pays one `syncfs`, about
//! what the fsync of a file plus its folder costs (`BENCHMARKS.md`).
//!
//! `syncfs` writes back every dirty page and inode of the filesystem and
//! flushes the device's cache (Linux `sync_filesystem`), so it also makes
//! folder entries (a `mkdir`, a `rename`, a `link`) durable. Since Linux
//! 5.8 it reports writeback errors of the filesystem (`syncfs(2)`, "ERRORS");
//! an error fails every caller of its round and of earlier rounds still
//! waiting, since what failed to reach the disk is not known.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::{Condvar, Mutex, MutexGuard};

/// Rounds of `syncfs` on one filesystem, shared by the threads writing to
/// it (module docs).
#[derive(Debug)]
pub struct SyncGroup {
    /// A folder on the filesystem, open for `syncfs`.
    folder: File,
    state: Mutex<Rounds>,
    ended: Condvar,
}

#[derive(Debug, Default)]
struct Rounds {
    /// Rounds started so far (the running one included).
    started: u64,
    /// The newest round that ended.
    ended: u64,
    /// Whether a round runs now.
    running: bool,
    /// The newest round that failed, with its error's kind and message.
    failed: Option<(u64, io::ErrorKind, String)>,
}

impl SyncGroup {
    /// A group syncing the filesystem that holds folder `folder`.
    ///
    /// # Errors
    /// If the folder cannot be opened.
    pub fn open(folder: &Path) -> io::Result<Self> {
        Ok(Self {
            folder: File::open(folder)?,
            state: Mutex::new(Rounds::default()),
            ended: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Rounds> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Blocks until every write to the filesystem that finished before
    /// this call is durable: file contents, inodes and folder entries.
    ///
    /// # Errors
    /// The `syncfs` error of a round that covered this call (module docs).
    pub fn sync(&self) -> io::Result<()> {
        let mut rounds = self.lock();
        // The first round that starts after now covers this caller.
        let needed = rounds.started + 1;
        loop {
            if rounds.ended >= needed {
                return match &rounds.failed {
                    Some((round, kind, message)) if *round >= needed => {
                        Err(io::Error::new(*kind, message.clone()))
                    }
                    _ => Ok(()),
                };
            }
            if rounds.running {
                rounds = self.ended.wait(rounds).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            rounds.running = true;
            rounds.started += 1;
            let round = rounds.started;
            drop(rounds);
            let result = self.syncfs();
            rounds = self.lock();
            rounds.running = false;
            rounds.ended = round;
            if let Err(e) = &result {
                rounds.failed = Some((round, e.kind(), format!("syncfs: {e}")));
            }
            self.ended.notify_all();
        }
    }

    /// Rounds run so far (one `syncfs` each).
    #[must_use]
    pub fn rounds(&self) -> u64 {
        self.lock().ended
    }

    fn syncfs(&self) -> io::Result<()> {
        // SAFETY: `syncfs` takes any open descriptor; `folder` stays open
        // for the call.
        if unsafe { libc::syncfs(self.folder.as_raw_fd()) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    #[test]
    fn one_caller_runs_one_round_per_call() {
        let tmp = tempfile::tempdir().expect("tmp");
        let group = SyncGroup::open(tmp.path()).expect("open");
        for n in 1..=3 {
            std::fs::write(tmp.path().join(format!("f{n}")), b"x").expect("write");
            group.sync().expect("sync");
            assert_eq!(group.rounds(), n);
        }
    }

    #[test]
    fn concurrent_callers_share_rounds() {
        const THREADS: usize = 16;
        const WRITES: usize = 20;
        let tmp = tempfile::tempdir().expect("tmp");
        let group = Arc::new(SyncGroup::open(tmp.path()).expect("open"));
        let start = Arc::new(Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (group, start, dir) = (group.clone(), start.clone(), tmp.path().to_owned());
                std::thread::spawn(move || {
                    start.wait();
                    for i in 0..WRITES {
                        std::fs::write(dir.join(format!("{t}-{i}")), [1u8; 4096]).expect("write");
                        group.sync().expect("sync");
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("thread");
        }
        let rounds = group.rounds();
        assert!(
            rounds < (THREADS * WRITES) as u64,
            "{rounds} rounds for {} syncs: none shared",
            THREADS * WRITES
        );
        assert!(rounds >= WRITES as u64, "{rounds} rounds");
    }
}
