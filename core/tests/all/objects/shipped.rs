//! The shipped journal ([`ShippedJournal`]) over a real object store:
//! rounds group-commit many delivery entries into one segment, another
//! worker recovers an actor's deliveries after its newest snapshot from
//! the segments (a later owner's entries winning over a fenced one's, a
//! hole failing the actor), a segment is deleted once its entries are
//! settled but kept for an actor that left the worker unsettled, a forget
//! drops the entries before it, and a round the store refuses answers its
//! entries with "may or may not have been applied" and breaks its actors
//! until their next snapshot.

use std::sync::Arc;
use std::time::Duration;

use stasis_core::journal::delivery::DeliveryRecord;
use stasis_core::journal::shipped::{FOLD_AFTER, SegmentObjects, ShippedJournal};
use stasis_core::journal::{Durable, EntryKind, Recovery};
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

/// `actor` with its snapshot 0 in the store.
fn created(store: &ObjectSnapshotStore, actor: &str) {
    store
        .write(actor, 0, 1, real_snapshot())
        .expect("snapshot 0");
}

/// Delivery `index` on snapshot `base` of `actor` at `epoch`; `answer`
/// tells copies apart.
fn deliver(
    journal: &ShippedJournal,
    actor: &str,
    (epoch, base, index): (u64, u64, u64),
    answer: u64,
) -> Result<Durable, String> {
    let record = DeliveryRecord {
        index,
        input_kind: 1,
        resumed: false,
        paused: 0,
        answer,
        worker: "w".into(),
        input: b"POST /increment".to_vec(),
        tape: vec![7; 16],
    };
    journal
        .append(
            EntryKind::Delivery,
            epoch,
            base,
            actor,
            Arc::new(record.encode()),
        )
        .map_err(|e| e.to_string())
}

/// The (index, answer) of each delivery `journal` recovers for `actor`.
fn recovered(journal: &ShippedJournal, actor: &str) -> Result<Vec<(u64, u64)>, String> {
    match journal.recover(actor, None).expect("recover").deliveries {
        None => Ok(Vec::new()),
        Some(Recovery::Entries(entries)) => Ok(entries
            .iter()
            .map(|e| (e.record.index, e.record.answer))
            .collect()),
        Some(Recovery::Failed(why)) => Err(why),
    }
}

#[test]
fn shipped_rounds_group_commit_and_another_worker_recovers_the_deliveries() {
    let shared = Shared::file();
    let cache = tempfile::tempdir().unwrap();
    let store = Arc::new(shared.open(cache.path(), None));
    let w1 = journal(&store, "w1");
    let actors = ["a", "b", "c", "d"];
    for actor in actors {
        created(&store, actor);
    }
    // 50 deliveries of each actor, appended without waiting: rounds take
    // many.
    let mut waits = Vec::new();
    for index in 1..=50 {
        for actor in actors {
            waits.push(deliver(&w1, actor, (1, 0, index), index).expect("append"));
        }
    }
    for durable in waits {
        wait(durable).expect("every entry acknowledged");
    }
    let stats = w1.stats();
    assert_eq!(stats.entries, 200);
    assert_eq!(stats.shipped, 200, "every delivery is shipped: {stats:?}");
    assert!(
        stats.rounds < stats.entries / 4,
        "one PUT covers many entries: {stats:?}"
    );
    assert!(
        stats.bytes < 200 * 256,
        "a delivery costs bytes, not pages: {stats:?}"
    );
    assert_eq!(stats.lost_rounds, 0);
    assert!(!segments(&store).is_empty());
    // Worker w1 is lost: w2, with a cache of its own, recovers each actor's
    // deliveries in order; the store's snapshots are untouched.
    let cache2 = tempfile::tempdir().unwrap();
    let store2 = Arc::new(shared.open(cache2.path(), None));
    let w2 = journal(&store2, "w2");
    let all: Vec<(u64, u64)> = (1..=50).map(|i| (i, i)).collect();
    for actor in actors {
        assert_eq!(recovered(&w2, actor).expect("follows on"), all, "{actor}");
        let listed: Vec<u64> = store2.list(actor).unwrap().iter().map(|e| e.seq).collect();
        assert_eq!(listed, vec![0], "{actor}");
    }
    // Once a snapshot past them is in the store they no longer apply.
    store2.write("a", 1, 2, real_snapshot()).unwrap();
    assert_eq!(recovered(&w2, "a").unwrap(), Vec::new());
    // An actor no segment names recovers nothing.
    created(&store2, "z");
    assert_eq!(recovered(&w2, "z").unwrap(), Vec::new());
}

#[test]
fn shipped_a_later_owner_wins_and_a_hole_fails_the_actor() {
    let shared = Shared::file();
    let cache = tempfile::tempdir().unwrap();
    let store = Arc::new(shared.open(cache.path(), None));
    created(&store, "a");
    created(&store, "b");
    let w1 = journal(&store, "w1");
    for index in 1..=3 {
        wait(deliver(&w1, "a", (1, 0, index), 100 + index).unwrap()).unwrap();
    }
    // w2 took "a" over at epoch 2 after replaying 1 and 2, while w1's PUT
    // of delivery 3 raced its fence: w2's own 3 and 4 win.
    let w2 = journal(&store, "w2");
    for index in 3..=4 {
        wait(deliver(&w2, "a", (2, 0, index), 200 + index).unwrap()).unwrap();
    }
    let w3 = journal(&store, "w3");
    assert_eq!(
        recovered(&w3, "a").expect("follows on"),
        vec![(1, 101), (2, 102), (3, 203), (4, 204)]
    );
    // A hole (delivery 2 of "b" is in no segment) fails the actor, naming
    // the entries; it is never served from a state that skips one.
    wait(deliver(&w1, "b", (1, 0, 1), 1).unwrap()).unwrap();
    wait(deliver(&w1, "b", (1, 0, 3), 3).unwrap()).unwrap();
    let why = recovered(&w3, "b").expect_err("a hole");
    assert!(
        why.contains("0.3") && why.contains("does not follow"),
        "{why}"
    );
}

#[test]
fn shipped_segments_go_once_settled_and_stay_for_an_actor_that_left_unsettled() {
    let shared = Shared::file();
    let cache = tempfile::tempdir().unwrap();
    let store = Arc::new(shared.open(cache.path(), None));
    let w1 = journal(&store, "w1");
    for actor in ["a", "b", "c"] {
        created(&store, actor);
    }
    wait(deliver(&w1, "a", (1, 0, 1), 1).unwrap()).unwrap();
    let with_a = segments(&store);
    assert_eq!(with_a.len(), 1, "{with_a:?}");
    // A snapshot of a past its delivery is in the store: the next round
    // deletes a's segment.
    store.write("a", 1, 1, real_snapshot()).unwrap();
    w1.settled("a", 1);
    wait(deliver(&w1, "b", (1, 0, 1), 1).unwrap()).unwrap();
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
    wait(deliver(&w1, "c", (1, 0, 1), 1).unwrap()).unwrap();
    w1.collect();
    let now = segments(&store);
    assert!(now.contains(&with_b[0]), "b's segment stays: {now:?}");
    // A forget the store did take (the actor was deleted, moved or
    // repaired there) drops the entries before it for the next owner.
    let cache2 = tempfile::tempdir().unwrap();
    let store2 = Arc::new(shared.open(cache2.path(), None));
    assert_eq!(recovered(&journal(&store2, "w2"), "b").unwrap(), Vec::new());
    assert_eq!(
        recovered(&journal(&store2, "w2"), "c").unwrap(),
        vec![(1, 1)]
    );
}

#[test]
fn shipped_a_round_the_store_refuses_is_reported_as_maybe_applied() {
    let shared = Shared::s3();
    let proxy = FaultProxy::start(shared.server.as_ref().expect("s3").addr());
    let cache = tempfile::tempdir().unwrap();
    let store = Arc::new(shared.open_through(&proxy, cache.path()));
    created(&store, "a");
    created(&store, "b");
    let w1 = journal(&store, "w1");
    // Every PUT of a segment is dropped before it reaches the store.
    proxy.on("PUT", "journal/", Fault::DropRequest, 1000);
    let started = std::time::Instant::now();
    let lost = wait(deliver(&w1, "a", (1, 0, 1), 1).unwrap())
        .expect_err("a round the store never took is not acknowledged");
    assert!(lost.contains("may or may not have been applied"), "{lost}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "bounded retries"
    );
    assert_eq!(w1.stats().lost_rounds, 1);
    // The store takes PUTs again, but a's next delivery would follow a
    // hole: it is refused (not applied) until a's next snapshot is in the
    // store; b is not held back.
    proxy.clear();
    assert!(w1.broken("a") && !w1.broken("b"));
    let refused = deliver(&w1, "a", (1, 0, 2), 2).expect_err("a is broken");
    assert!(refused.contains("not applied"), "{refused}");
    wait(deliver(&w1, "b", (1, 0, 1), 1).unwrap()).expect("b acknowledged");
    store.write("a", 1, 1, real_snapshot()).unwrap();
    w1.settled("a", 1);
    assert!(!w1.broken("a"));
    wait(deliver(&w1, "a", (1, 1, 1), 1).unwrap()).expect("acknowledged");
    let cache2 = tempfile::tempdir().unwrap();
    let store2 = Arc::new(shared.open_through(&proxy, cache2.path()));
    assert_eq!(
        recovered(&journal(&store2, "w2"), "a").unwrap(),
        vec![(1, 1)]
    );
}

/// Lazy re-placement (issue 50, item 2): a takeover told that a read of
/// the segments made within a bound covers its actor is answered from the
/// worker's newest read (no listing of the store); without the bound, or
/// past it, the segments are read again.
#[test]
fn shipped_a_recent_read_serves_takeovers_within_their_bound() {
    let shared = Shared::file();
    let cache = tempfile::tempdir().unwrap();
    let store = Arc::new(shared.open(cache.path(), None));
    let w1 = journal(&store, "w1");
    for actor in ["a", "b"] {
        created(&store, actor);
        wait(deliver(&w1, actor, (1, 0, 1), 1).expect("append")).expect("acknowledged");
    }
    let cache2 = tempfile::tempdir().unwrap();
    let store2 = Arc::new(shared.open(cache2.path(), None));
    let w2 = journal(&store2, "w2");
    let within = |actor: &str, bound: Option<Duration>| -> Vec<u64> {
        match w2.recover(actor, bound).expect("recover").deliveries {
            Some(Recovery::Entries(entries)) => entries.iter().map(|e| e.record.index).collect(),
            Some(Recovery::Failed(why)) => panic!("{actor}: {why}"),
            None => Vec::new(),
        }
    };
    // w2's first read, then an entry of b shipped after it.
    assert_eq!(within("a", Some(Duration::from_secs(60))), vec![1]);
    wait(deliver(&w1, "b", (1, 0, 2), 2).expect("append")).expect("acknowledged");
    // Within the bound the earlier read answers: b's second entry, written
    // after it, is not seen.
    assert_eq!(within("b", Some(Duration::from_secs(60))), vec![1]);
    // A read of its own sees it, and so does a bound the read is past.
    assert_eq!(within("b", None), vec![1, 2]);
    wait(deliver(&w1, "b", (1, 0, 3), 3).expect("append")).expect("acknowledged");
    assert_eq!(within("b", Some(Duration::ZERO)), vec![1, 2, 3]);
}
