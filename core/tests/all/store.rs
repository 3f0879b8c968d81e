//! The snapshot store: retention, torn temp files, the quota, a stored
//! snapshot restored from its mapped file, and the files used through
//! `Arc<dyn SnapshotStore>`.

use std::sync::Arc;

use stasis_core::snapshot_files::LocalSnapshotStore;
use stasis_core::snapshot_store::{SnapshotEntry, SnapshotStore, StoreError};

use crate::support::*;

// ---------------------------------------------------------------------------
// 7. The snapshot store
// ---------------------------------------------------------------------------

/// File names in `dir`, sorted, without the acknowledgement marker.
fn files_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".acked"))
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_retains_the_newest() {
    let (_engine, _template, snap) = small_snapshot(&small_guest(None)).await;
    let len = snap.len() as u64;
    let dir = tempfile::tempdir().unwrap();
    let store = LocalSnapshotStore::open(dir.path(), None).unwrap();
    for seq in 0..=5u64 {
        store.write("a", seq, 0, &snap).unwrap();
        let path = store.path("a", seq);
        assert_eq!(std::fs::read(&path).unwrap(), snap);
        store.retain("a", 2).unwrap();
    }
    let seqs: Vec<u64> = store.list("a").unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [4, 5]);
    assert_eq!(
        files_in(&store.actor_dir("a")),
        ["00000000000000000004.snap", "00000000000000000005.snap"]
    );
    assert_eq!(store.used_bytes(), 2 * len);
    assert_eq!(store.list_acknowledged("a").unwrap().1, Some(5));
    assert!(
        store
            .actor_dir("a")
            .join("00000000000000000005.acked")
            .exists()
    );
    assert_eq!(&store.open_snapshot("a", 5).unwrap()[..], &snap[..]);
    assert!(store.open_snapshot("a", 3).is_err());

    // Retaining from many at once.
    for seq in 6..=9u64 {
        store.write("a", seq, 0, &snap).unwrap();
    }
    assert_eq!(store.retain("a", 2).unwrap(), [4, 5, 6, 7]);
    assert_eq!(store.list("a").unwrap().len(), 2);
    assert_eq!(store.used_bytes(), 2 * len);

    // A kept file that is not a snapshot (or is damaged) could be a delta
    // on any older one: nothing older is deleted on its account.
    store.write("a", 10, 0, b"not a snapshot").unwrap();
    assert_eq!(store.retain("a", 1).unwrap(), Vec::<u64>::new());
    store.write("a", 11, 0, &snap).unwrap();
    assert_eq!(store.retain("a", 1).unwrap(), [8, 9, 10]);
}

#[test]
fn store_open_removes_temp_files() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = LocalSnapshotStore::open(dir.path(), None).unwrap();
        store.write("a", 0, 0, b"snapshot zero").unwrap();
    }
    let actor = dir.path().join("a");
    std::fs::write(actor.join("00000000000000000001.snap.tmp"), b"torn").unwrap();
    assert_eq!(files_in(&actor).len(), 2);
    let store = LocalSnapshotStore::open(dir.path(), None).unwrap();
    assert_eq!(files_in(&actor), ["00000000000000000000.snap"]);
    assert_eq!(store.used_bytes(), 13);
    let seqs: Vec<u64> = store.list("a").unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [0]);
}

#[test]
fn store_quota_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalSnapshotStore::open(dir.path(), Some(100)).unwrap();
    store.write("a", 0, 0, &[1; 60]).unwrap();
    let err = store.write("a", 1, 0, &[2; 60]).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Quota {
                needed: 60,
                used: 60,
                quota: 100
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        files_in(&store.actor_dir("a")),
        ["00000000000000000000.snap"]
    );
    assert_eq!(store.used_bytes(), 60);
    // Exactly filling the quota is allowed; one byte more is not.
    store.write("b", 0, 0, &[3; 40]).unwrap();
    assert!(matches!(
        store.write("b", 1, 0, &[4; 1]),
        Err(StoreError::Quota { .. })
    ));
    assert_eq!(
        files_in(&store.actor_dir("b")),
        ["00000000000000000000.snap"]
    );
    // Freeing space lets writes through again.
    store.remove("a", 0).unwrap();
    store.write("a", 1, 0, &[2; 60]).unwrap();
    assert_eq!(store.used_bytes(), 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_snapshot_restores_from_the_mapped_file() {
    let wasm = small_guest(None);
    let (_engine, _template, bytes) = small_snapshot(&wasm).await;
    let dir = tempfile::tempdir().unwrap();
    let store = LocalSnapshotStore::open(dir.path(), None).unwrap();
    store.write("a", 0, 0, &bytes).unwrap();
    let mapped = store.open_snapshot("a", 0).unwrap();
    assert_eq!(&mapped[..], &bytes[..]);
    let (_engine, mut inst) = restore_fresh(&wasm, &mapped, config()).await;
    let globals: Vec<_> = inst.global_values().iter().map(val_bits).collect();
    assert_eq!(globals, [("i32", 41), ("i64", u128::from(u64::MAX))]);
    let mem = inst.memory_data(0).unwrap();
    assert_eq!(
        u32::from_le_bytes(mem[8192..8196].try_into().unwrap()),
        0xdead_beef
    );
    call_ok(&mut inst).await;
}

#[test]
fn the_files_serve_as_a_shared_snapshot_store() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn SnapshotStore> =
        Arc::new(LocalSnapshotStore::open(dir.path(), None).unwrap());
    store.write("a", 0, 0, b"zero").unwrap();
    store.write("b", 3, 0, b"three").unwrap();
    let mut actors = store.actors().unwrap();
    actors.sort();
    assert_eq!(actors, ["a", "b"]);
    assert_eq!(
        store.list("b").unwrap(),
        [SnapshotEntry { seq: 3, bytes: 5 }]
    );
    assert_eq!(&*store.open_snapshot("b", 3).unwrap(), b"three");
    let missing = store.open_snapshot("b", 4).unwrap_err();
    assert!(
        matches!(&missing, StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{missing:?}"
    );
    assert!(
        store.location("a").ends_with("a"),
        "{}",
        store.location("a")
    );
    store.remove_actor("a").unwrap();
    assert_eq!(store.actors().unwrap(), ["b"]);
    assert_eq!(store.used_bytes(), 5);
}

#[test]
fn store_fork_links_the_file_and_survives_either_deletion() {
    use std::os::unix::fs::MetadataExt as _;
    let dir = tempfile::tempdir().unwrap();
    let store = LocalSnapshotStore::open(dir.path(), Some(1000)).unwrap();
    store.write("src", 3, 1, &[7; 300]).unwrap();
    store.write("src", 4, 1, &[8; 300]).unwrap();
    assert_eq!(store.fork("src", 3, "new", 1).unwrap(), 300);
    let (from, to) = (store.path("src", 3), store.path("new", 3));
    let (a, b) = (from.metadata().unwrap(), to.metadata().unwrap());
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2), "one inode, two names");
    assert_eq!(
        store.list_acknowledged("new").unwrap(),
        (vec![SnapshotEntry { seq: 3, bytes: 300 }], Some(3))
    );
    assert_eq!(store.used_bytes(), 900, "counted by name, as at open");
    // Refusals: no such snapshot, a name taken, the quota.
    let kind = |e: StoreError| match e {
        StoreError::Io { source, .. } => source.kind(),
        StoreError::Quota { .. } | StoreError::Fenced { .. } | StoreError::Unknown { .. } => {
            panic!("unexpected error")
        }
    };
    assert_eq!(
        kind(store.fork("src", 9, "other", 1).unwrap_err()),
        std::io::ErrorKind::NotFound
    );
    assert_eq!(
        kind(store.fork("src", 3, "new", 1).unwrap_err()),
        std::io::ErrorKind::AlreadyExists
    );
    assert!(matches!(
        store.fork("src", 4, "third", 1),
        Err(StoreError::Quota { .. })
    ));
    assert!(!store.actor_dir("third").exists() || store.list("third").unwrap().is_empty());
    assert_eq!(store.used_bytes(), 900, "refusals count nothing");
    // Either name outlives the other.
    store.remove_actor("src").unwrap();
    assert_eq!(&store.open_snapshot("new", 3).unwrap()[..], &[7; 300][..]);
    assert_eq!(to.metadata().unwrap().nlink(), 1);
    store.fork("new", 3, "src", 1).unwrap();
    store.remove_actor("new").unwrap();
    assert_eq!(&store.open_snapshot("src", 3).unwrap()[..], &[7; 300][..]);
    assert_eq!(store.used_bytes(), 300);
}

/// A file the store wrote opens as checksum-verified (a restore skips the
/// CRC pass); one written in place behind its back does not, and its
/// corruption is then found. A file from before the store was opened is
/// checksummed once by `open_chain`, then known.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_the_store_wrote_or_checked_skip_the_checksum_until_changed() {
    use stasis_core::snapshot_store::open_chain;
    use std::io::{Seek as _, SeekFrom, Write as _};

    let wasm = small_guest(None);
    let (_engine, template, bytes) = small_snapshot(&wasm).await;
    let max_memory = u64::MAX;
    let dir = tempfile::tempdir().unwrap();
    let store = LocalSnapshotStore::open(dir.path(), None).unwrap();
    store.write("a", 0, 0, &bytes).unwrap();
    assert!(store.open_snapshot("a", 0).unwrap().checksum_verified());

    // A store opened later (a restart) knows nothing yet: open_chain
    // computes the checksum once, then the file is known.
    let store = LocalSnapshotStore::open(dir.path(), None).unwrap();
    assert!(!store.open_snapshot("a", 0).unwrap().checksum_verified());
    open_chain(&store, "a", 0, &template, max_memory).expect("verifies");
    assert!(store.open_snapshot("a", 0).unwrap().checksum_verified());

    // One byte of a page flipped in place: unknown again, and refused.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let path = store.path("a", 0);
    let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let inside_a_page = bytes.len() as u64 - 100;
    file.seek(SeekFrom::Start(inside_a_page)).unwrap();
    file.write_all(&[!bytes[bytes.len() - 100]]).unwrap();
    drop(file);
    assert!(!store.open_snapshot("a", 0).unwrap().checksum_verified());
    let error = open_chain(&store, "a", 0, &template, max_memory).expect_err("corrupt");
    assert!(error.to_string().contains("checksum"), "{error}");
}
