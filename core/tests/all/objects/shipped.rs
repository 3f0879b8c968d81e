//! The shipped journal ([`ShippedJournal`]) over a real object store:
//! rounds group-commit many entries into one segment, another worker
//! recovers an actor's newest acknowledged entry from the segments, a
//! segment is deleted once its entries are settled but kept for an actor
//! that left the worker unsettled, a forget drops the entries before it,
//! and a round the store refuses answers
//! its entries with "may or may not have been applied".

use std::sync::Arc;
use std::time::Duration;

use stasis_core::journal::shipped::{FOLD_AFTER, SegmentObjects, ShippedJournal};
use stasis_core::journal::{Durable, EntryKind};
use stasis_core::snapshot_objects::ObjectSnapshotStore;
use stasis_core::snapshot_store::SnapshotStore;
use stasis_test_util::fault_proxy::{Fault, FaultProxy};

use super::{Shared, real_snapshot};

/// A worker's journal on `store` (itself the segment store).
fn journal(store: &Arc<ObjectSnapshotStore>, worker: &str) -> ShippedJournal {
    ShippedJournal::start(store.clone(), store.clone(), worker, FOLD_AFTER).expect("shipper")
}

fn wait(durable: Durable) -> Result<(), String> {
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(durable.wait())
        .map_err(|e| e.to_string())
}

fn segments(store: &ObjectSnapshotStore) -> Vec<String> {
    let mut names: Vec<String> = store
        .list_segments()
        .expect("list segments")
        .into_iter()
        .map(|m| m.name)
        .collect();
    names.sort();
    names
}

/// `actor` with its snapshot 0 in the store, and a full snapshot for its
/// entries (seq 1: past the head, no base).
fn created(store: &ObjectSnapshotStore, actor: &str) -> Arc<Vec<u8>> {
    store
        .write(actor, 0, 1, real_snapshot())
        .expect("snapshot 0");
    Arc::new(real_snapshot().to_vec())
}

#[test]
fn shipped_rounds_group_commit_and_another_worker_recovers_the_newest_entry() {
    let shared = Shared::file();
    let cache = tempfile::tempdir().unwrap();
    let store = Arc::new(shared.open(cache.path(), None));
    let w1 = journal(&store, "w1");
    let actors = ["a", "b", "c", "d"];
    let mut entry = Arc::default();
    for actor in actors {
        entry = created(&store, actor);
    }
    // 50 entries of each actor, appended without waiting: rounds take many.
    let mut waits = Vec::new();
    for _ in 0..50 {
        for actor in actors {
            waits.push(
                w1.append(EntryKind::Snapshot, 1, 1, actor, entry.clone())
                    .expect("append"),
            );
        }
    }
    for durable in waits {
        wait(durable).expect("every entry acknowledged");
    }
    let stats = w1.stats();
    assert_eq!(stats.entries, 200);
    assert!(
        stats.rounds < stats.entries / 4,
        "one PUT covers many entries: {stats:?}"
    );
    assert_eq!(stats.lost_rounds, 0);
    assert!(!segments(&store).is_empty());
    // Worker w1 is lost: w2, with a cache of its own, recovers each actor's
    // entry once (then it is the store's newest snapshot).
    let cache2 = tempfile::tempdir().unwrap();
    let store2 = Arc::new(shared.open(cache2.path(), None));
    let w2 = journal(&store2, "w2");
    for actor in actors {
        assert_eq!(w2.recover(actor).expect("recover"), Some(1), "{actor}");
        assert_eq!(w2.recover(actor).expect("recover"), None, "{actor}");
        let listed: Vec<u64> = store2.list(actor).unwrap().iter().map(|e| e.seq).collect();
        assert_eq!(listed, vec![0, 1], "{actor}");
    }
    // An actor no segment names recovers nothing.
    created(&store2, "z");
    assert_eq!(w2.recover("z").expect("recover"), None);
}

#[test]
fn shipped_segments_go_once_settled_and_stay_for_an_actor_that_left_unsettled() {
    let shared = Shared::file();
    let cache = tempfile::tempdir().unwrap();
    let store = Arc::new(shared.open(cache.path(), None));
    let w1 = journal(&store, "w1");
    let entry = created(&store, "a");
    created(&store, "b");
    created(&store, "c");
    wait(
        w1.append(EntryKind::Snapshot, 1, 1, "a", entry.clone())
            .unwrap(),
    )
    .unwrap();
    let with_a = segments(&store);
    assert_eq!(with_a.len(), 1, "{with_a:?}");
    // a's entry is sealed into its chain: the next round deletes a's
    // segment.
    store.write("a", 1, 1, &entry).unwrap();
    w1.settled("a", 1);
    wait(
        w1.append(EntryKind::Snapshot, 1, 1, "b", entry.clone())
            .unwrap(),
    )
    .unwrap();
    // (The shipper collects after each round too, once its answers are out.)
    w1.collect();
    let with_b = segments(&store);
    assert_eq!(with_b.len(), 1, "a's segment is gone: {with_b:?}");
    assert!(!with_b.contains(&with_a[0]), "{with_b:?}");
    // b leaves the worker unsettled: a forget (a lease that ended drops
    // every instance with one, which the fenced store never takes) does
    // not let b's segment go; only the sweep deletes it, once its entry no
    // longer applies.
    w1.append(EntryKind::Forget, 1, 0, "b", Arc::default())
        .unwrap();
    wait(
        w1.append(EntryKind::Snapshot, 1, 1, "c", entry.clone())
            .unwrap(),
    )
    .unwrap();
    w1.collect();
    let now = segments(&store);
    assert!(now.contains(&with_b[0]), "b's segment stays: {now:?}");
    // A forget the store did take (the actor was deleted, moved or
    // repaired there) drops the entry before it for the next owner.
    let cache2 = tempfile::tempdir().unwrap();
    let store2 = Arc::new(shared.open(cache2.path(), None));
    assert_eq!(journal(&store2, "w2").recover("b").unwrap(), None);
    assert_eq!(journal(&store2, "w2").recover("c").unwrap(), Some(1));
}

#[test]
fn shipped_a_round_the_store_refuses_is_reported_as_maybe_applied() {
    let shared = Shared::s3();
    let proxy = FaultProxy::start(shared.server.as_ref().expect("s3").addr());
    let cache = tempfile::tempdir().unwrap();
    let store = Arc::new(shared.open_through(&proxy, cache.path()));
    let entry = created(&store, "a");
    let w1 = journal(&store, "w1");
    // Every PUT of a segment is dropped before it reaches the store.
    proxy.on("PUT", "journal/", Fault::DropRequest, 1000);
    let started = std::time::Instant::now();
    let lost = wait(
        w1.append(EntryKind::Snapshot, 1, 1, "a", entry.clone())
            .unwrap(),
    )
    .expect_err("a round the store never took is not acknowledged");
    assert!(lost.contains("may or may not have been applied"), "{lost}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "bounded retries"
    );
    assert_eq!(w1.stats().lost_rounds, 1);
    // The store takes PUTs again: the next entry is whole and acknowledged.
    proxy.clear();
    wait(w1.append(EntryKind::Snapshot, 1, 1, "a", entry).unwrap()).expect("acknowledged");
}
