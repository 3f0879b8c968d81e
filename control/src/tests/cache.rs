//! A follower's placement cache: nothing read at start, one read on a miss,
//! the watch applied to the names held only, a read that gives way to a
//! later change the watch saw meanwhile, and eviction past the bound.

use stasis_contract::directory::{ActorPut, ActorRead, ActorsChange, Directory as _};
use stasis_contract::error::ErrorKind;
use stasis_contract::metrics::PlacementCacheMetrics;

use super::{harness, row};
use crate::Role;
use crate::follow::follower_placement;
use crate::placement::PlacementTable;

fn put(name: &str, worker: &str, epoch: u64, generation: i64, revision: i64) -> ActorPut {
    ActorPut {
        row: row(name, worker, epoch),
        generation,
        revision,
    }
}

fn changed(put: Vec<ActorPut>, deleted: &[(&str, i64)], revision: i64) -> ActorsChange {
    ActorsChange::Changed {
        put,
        deleted: deleted.iter().map(|(d, r)| ((*d).to_owned(), *r)).collect(),
        revision,
    }
}

#[tokio::test]
async fn a_follower_reads_a_placement_at_its_first_lookup_then_follows_its_changes() {
    let h = harness(Role::Follower, 0, &[row("a", "w1", 1), row("b", "w1", 1)]);
    let metrics = h.control.metrics().placement_cache.clone();
    let placed = |name: &str| {
        h.control
            .placement_of(name)
            .ok()
            .map(|p| (p.worker.to_string(), p.epoch))
    };
    let at = |worker: &str, epoch: u64| Some((worker.to_owned(), epoch));
    // Nothing is read before a lookup needs it.
    assert_eq!(placed("a"), None);
    assert_eq!(metrics.reads.get(), 0);
    h.control.route("a").await.expect("a exists");
    assert_eq!(placed("a"), at("w1", 1));
    assert_eq!(metrics.reads.get(), 1);
    h.control.route("a").await.expect("cached");
    assert_eq!(metrics.reads.get(), 1, "a hit reads nothing");
    assert_eq!(metrics.misses.get(), 1);
    let unknown = h.control.route("nobody").await.map(|_| ());
    assert!(unknown.is_err_and(|e| e.is(ErrorKind::NotFound)));
    assert_eq!(
        metrics.reads.get(),
        2,
        "an unknown name is read, not cached"
    );

    // A move of the cached actor applies; one of a name not cached is
    // ignored (it is read when a request needs it).
    let revision = h.control.apply_change(&changed(
        vec![put("a", "w2", 2, 0, 101), put("b", "w2", 2, 0, 101)],
        &[],
        101,
    ));
    assert_eq!(revision, 101);
    assert_eq!(placed("a"), at("w2", 2));
    assert_eq!(placed("b"), None);
    // An event that lags a switch seen here does not move it back.
    h.control
        .apply_change(&changed(vec![put("a", "w1", 1, 0, 102)], &[], 102));
    assert_eq!(placed("a"), at("w2", 2));
    // Deleted and created again: another generation, epochs start over.
    h.control
        .apply_change(&changed(vec![put("a", "w1", 1, 40, 103)], &[], 103));
    assert_eq!(placed("a"), at("w1", 1));
    // Deleted: gone.
    h.control
        .apply_change(&changed(Vec::new(), &[("a", 104)], 104));
    assert_eq!(placed("a"), None);
    // The watch started over after a compaction: what was cached goes.
    h.control.route("b").await.expect("b exists");
    assert_eq!(placed("b"), at("w1", 1));
    let revision = h
        .control
        .apply_change(&ActorsChange::Watching { revision: 200 });
    assert_eq!(revision, 200);
    assert_eq!(placed("b"), None);
    // A worker refused the cached epoch as stale: dropped, read again.
    h.control.route("b").await.expect("b exists");
    h.directory.place_actor("b", "w2", 2).expect("moved");
    h.control.placements.forget("b", 1);
    h.control.route("b").await.expect("b exists");
    assert_eq!(placed("b"), at("w2", 2));
}

#[tokio::test]
async fn a_read_gives_way_to_a_later_change_the_watch_saw_meanwhile() {
    let h = harness(Role::Follower, 0, &[]);
    let table = &h.control.placements;
    let cache = table.cache().expect("a follower's table is a cache");
    let read = |worker: &str, epoch: u64, revision: i64| ActorRead {
        row: Some(row("x", worker, epoch)),
        generation: 10,
        revision,
    };
    let placed = || {
        h.control
            .placement_of("x")
            .ok()
            .map(|p| (p.worker.to_string(), p.epoch))
    };
    // A move at revision 60 arrives while a read at 50 is in flight.
    let loading = cache.begin("x");
    h.control
        .apply_change(&changed(vec![put("x", "w2", 3, 10, 60)], &[], 60));
    let gate = table.insert_read("x", read("w1", 2, 50), loading, follower_placement);
    assert!(gate.is_some());
    assert_eq!(placed(), Some(("w2".to_owned(), 3)));
    table.forget("x", 3);
    // A change older than the read loses to it.
    let loading = cache.begin("x");
    h.control
        .apply_change(&changed(vec![put("x", "w2", 3, 10, 60)], &[], 60));
    table.insert_read("x", read("w3", 4, 70), loading, follower_placement);
    assert_eq!(placed(), Some(("w3".to_owned(), 4)));
    table.forget("x", 4);
    // Deleted while being read: not cached, and not found.
    let loading = cache.begin("x");
    h.control
        .apply_change(&changed(Vec::new(), &[("x", 80)], 80));
    let gate = table.insert_read("x", read("w1", 5, 75), loading, follower_placement);
    assert!(gate.is_none());
    assert_eq!(placed(), None);
    // A change to a name nobody reads is not kept.
    h.control
        .apply_change(&changed(vec![put("y", "w1", 1, 90, 90)], &[], 90));
    let loading = cache.begin("y");
    let gate = table.insert_read("y", ActorRead::default(), loading, follower_placement);
    assert!(gate.is_none());
}

#[tokio::test]
async fn the_cache_keeps_within_its_bound_and_drops_what_was_not_used_first() {
    let metrics = PlacementCacheMetrics::default();
    let table = PlacementTable::cached(10, metrics.clone());
    let cache = table.cache().expect("cache");
    let load = |name: &str| {
        let read = ActorRead {
            row: Some(row(name, "w1", 1)),
            generation: 1,
            revision: 1,
        };
        table.insert_read(name, read, cache.begin(name), follower_placement)
    };
    // One held by a request in flight is never dropped.
    let held = load("held").expect("placed");
    for i in 0..9 {
        load(&format!("a{i}"));
    }
    assert_eq!(table.read().len(), 10);
    assert_eq!(metrics.evictions.get(), 0);
    // a0 is used again; the 11th placement sweeps the cache down to 9.
    table.read()["a0"]
        .gate
        .touched
        .store(true, std::sync::atomic::Ordering::Relaxed);
    load("new").expect("placed");
    let map = table.read();
    assert_eq!(map.len(), 9, "{:?}", map.keys().collect::<Vec<_>>());
    assert!(map.contains_key("held"));
    assert!(map.contains_key("a0"), "used since the last sweep");
    assert!(map.contains_key("new"));
    assert_eq!(metrics.evictions.get(), 2);
    drop(held);
}
