//! A held actor's folder ([`SnapshotStore::hold`]): the worker that owns
//! an actor at a placement epoch lists its folder once, and then opens the
//! snapshots it wrote from its cache with no store round trip, through
//! retention; a release, or a write at another epoch, sends the next open
//! to the store again. Forced with a fault proxy that drops every listing.

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
