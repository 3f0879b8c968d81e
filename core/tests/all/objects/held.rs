//! A held actor's folder ([`SnapshotStore::hold`]): the worker that owns
//! an actor at a placement epoch lists its folder once, and then opens the
//! snapshots it wrote from its cache with no store round trip, through
//! retention; a release, or a write at another epoch, sends the next open
//! to the store again; its acknowledged pointer is moved without being
//! read, and a new actor's snapshot 0 is one object. Forced with a fault
//! proxy that drops every listing (or every read of the pointer).

use stasis_core::snapshot_store::SnapshotStore;
use stasis_test_util::fault_proxy::{Fault, FaultProxy};

use super::faults::sealed;
use super::{Shared, pattern, real_snapshot};

/// Enough faults for every retry of the client.
const ALWAYS: usize = 1000;

#[test]
fn objects_a_held_actor_opens_what_it_wrote_without_listing_the_store() {
    let shared = Shared::s3();
    let proxy = FaultProxy::start(shared.server.as_ref().expect("s3").addr());
    let cache = tempfile::tempdir().unwrap();
    let store = shared.open_through(&proxy, cache.path());
    // Real (full) snapshots: retention reads their headers.
    let snap = real_snapshot();
    let other = sealed(&pattern(5000, 7));

    store.hold("h", 3);
    store.adopt("h", 0, 3).unwrap();
    for seq in 0..4 {
        store.write("h", seq, 3, snap).unwrap();
    }
    assert_eq!(store.retain("h", 2).unwrap(), vec![0, 1]);
    store.write("unheld", 0, 3, &other).unwrap();

    // From here every listing of the store is dropped.
    proxy.on("GET", "list-type", Fault::DropRequest, ALWAYS);
    for seq in [2u64, 3] {
        let opened = store.open_snapshot("h", seq).unwrap();
        assert_eq!(&opened[..], snap, "snapshot {seq}");
    }
    assert!(
        proxy.fired().is_empty(),
        "a held actor's opens listed the store: {:?}",
        proxy.fired()
    );
    // What retention deleted is not opened from what was known.
    assert!(store.open_snapshot("h", 0).is_err());
    // An actor not held asks the store (and fails without it).
    assert!(store.open_snapshot("unheld", 0).is_err());

    // Released (moved away): the next open asks the store.
    let asked = proxy.fired().len();
    store.release("h");
    assert!(store.open_snapshot("h", 3).is_err());
    assert!(
        proxy.fired().len() > asked,
        "a released actor's open did not list"
    );

    // Held again, then written at another epoch (a newer placement): the
    // folder is listed again.
    proxy.clear();
    store.hold("h", 3);
    store.open_snapshot("h", 3).unwrap();
    store.write("h", 4, 5, &other).unwrap();
    proxy.on("GET", "list-type", Fault::DropRequest, ALWAYS);
    assert!(store.open_snapshot("h", 3).is_err());
}

/// The names of the files under `dir` (none if it does not exist), but
/// hidden ones (a server's own).
fn files_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|name| !name.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn objects_a_held_actor_moves_its_pointer_without_reading_it() {
    let shared = Shared::s3();
    let proxy = FaultProxy::start(shared.server.as_ref().expect("s3").addr());
    let cache = tempfile::tempdir().unwrap();
    let store = shared.open_through(&proxy, cache.path());
    let snap = real_snapshot();
    // Every read of the pointer is dropped from here.
    proxy.on("GET", "acknowledged", Fault::DropRequest, ALWAYS);

    // A create: the new name is held, its folder listed empty, snapshot 0
    // written: one object in the store, no pointer (and a cache copy).
    store.hold("n", 1);
    assert!(store.list("n").unwrap().is_empty());
    store.write("n", 0, 1, snap).unwrap();
    let folder = shared.objects_dir().join("snapshots/n");
    assert_eq!(
        files_in(&folder),
        ["00000000000000000000-00000000000000000001.snap"]
    );
    assert_eq!(
        files_in(&cache.path().join("snapshots/n")),
        ["00000000000000000000-00000000000000000001.snap"]
    );

    // Later snapshots move the pointer: a PUT each, no read first.
    store.write("n", 1, 1, snap).unwrap();
    store.write("n", 2, 1, snap).unwrap();
    assert!(
        proxy.fired().is_empty(),
        "a held actor's pointer was read: {:?}",
        proxy.fired()
    );
    let pointer: serde_json::Value =
        serde_json::from_slice(&std::fs::read(folder.join("acknowledged")).unwrap()).unwrap();
    assert_eq!(pointer, serde_json::json!({"seq": 2, "epoch": 1}));

    // Read back (a takeover's listing), and snapshot 0 from the cache.
    proxy.clear();
    let (listed, acked) = store.list_acknowledged("n").unwrap();
    assert_eq!(listed.len(), 3);
    assert_eq!(acked, Some(2));
    assert_eq!(&store.open_snapshot("n", 0).unwrap()[..], snap);
}
