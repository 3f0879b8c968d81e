//! Worker journal benchmark (issue 29): start-up replay of a journal of
//! 1,000,000 entries, and the journal's group commit under appends from
//! many threads.
//!
//! * `journal/replay/<entries>`: `Journal::open` on the segments a run
//!   left (read, checksum and decode every record, keep the newest per
//!   actor, apply it, delete the segments); entries of 16 actors, 100-byte
//!   bodies (the bodies are not snapshots, so the 16 newest are checked
//!   and skipped: the cost measured is the log's, not the store's);
//! * `journal/commit/<threads>`: one append from each of `threads` threads
//!   waiting for its durability, as that many actors answering at once: a
//!   group commit covers them all.
//!
//! `journal-summary:` lines give fdatasync calls per entry. Knob:
//! `STASIS_JOURNAL_ENTRIES` (1,000,000; 10,000 in criterion's test mode).
//! Results: BENCHMARKS.md, section 18.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use stasis_core::journal::{EntryKind, Journal};
use stasis_core::snapshot_files::LocalSnapshotStore;
use stasis_test_util::bench::test_mode;

fn entries() -> u64 {
    std::env::var("STASIS_JOURNAL_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if test_mode() { 10_000 } else { 1_000_000 })
}

fn open(dir: &Path, store: &LocalSnapshotStore) -> Journal {
    Journal::open(dir, store, Box::new(|| {}))
        .expect("journal")
        .0
}

/// Writes `n` entries of 16 actors into the journal in `dir`; returns
/// the group commits it took.
fn fill(dir: &Path, store: &LocalSnapshotStore, n: u64) -> u64 {
    let journal = open(dir, store);
    let body = [7u8; 100];
    let mut last = None;
    for i in 0..n {
        let actor = format!("actor-{}", i % 16);
        last = Some(
            journal
                .append(EntryKind::Snapshot, 1, 1 + i / 16, &actor, &body)
                .expect("append"),
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(last.expect("entries").wait()).expect("durable");
    journal.stats().syncs
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
    }
}

fn replay(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = LocalSnapshotStore::open(tmp.path().join("snapshots"), None).expect("store");
    let n = entries();
    let filled = tmp.path().join("filled");
    let syncs = fill(&filled, &store, n);
    println!("journal-summary: {n} entries appended from one thread in {syncs} group commits");
    // The journal opened to fill starts with one empty segment of its own.
    let mut group = c.benchmark_group("journal");
    group.sample_size(10);
    group.bench_with_input(BenchmarkId::new("replay", n), &n, |b, _| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for i in 0..iters {
                let dir = tmp.path().join(format!("run-{i}"));
                let _ = std::fs::remove_dir_all(&dir);
                copy_dir(&filled, &dir);
                let started = Instant::now();
                let (journal, replayed) =
                    Journal::open(&dir, &store, Box::new(|| {})).expect("replay");
                total += started.elapsed();
                assert_eq!(replayed.entries, n);
                drop(journal);
                let _ = std::fs::remove_dir_all(&dir);
            }
            total
        });
    });
    group.finish();
}

fn commit(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = LocalSnapshotStore::open(tmp.path().join("snapshots"), None).expect("store");
    let journal = Arc::new(open(&tmp.path().join("journal"), &store));
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut group = c.benchmark_group("journal");
    for threads in [1usize, 16, 64] {
        let before = journal.stats();
        let mut rounds = 0u64;
        group.bench_with_input(
            BenchmarkId::new("commit", threads),
            &threads,
            |b, &threads| {
                b.iter(|| {
                    rounds += 1;
                    rt.block_on(async {
                        let waits: Vec<_> = (0..threads)
                            .map(|t| {
                                let journal = journal.clone();
                                tokio::spawn(async move {
                                    let body = [1u8; 8192];
                                    let actor = format!("actor-{t}");
                                    journal
                                        .append(EntryKind::Snapshot, 1, 1, &actor, &body)
                                        .expect("append")
                                        .wait()
                                        .await
                                        .expect("durable");
                                })
                            })
                            .collect();
                        for wait in waits {
                            wait.await.expect("task");
                        }
                    });
                });
            },
        );
        let after = journal.stats();
        let entries = after.entries - before.entries;
        let syncs = after.syncs - before.syncs;
        println!(
            "journal-summary: commit/{threads}: {entries} entries of 8 KiB in {syncs} fdatasyncs \
             ({:.2} entries per fdatasync)",
            entries as f64 / syncs.max(1) as f64
        );
    }
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    replay(&mut c);
    commit(&mut c);
    c.final_summary();
}
