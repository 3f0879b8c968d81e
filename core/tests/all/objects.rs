//! The snapshot store over an object store, each check run against a
//! `file://` folder and a real S3 server (`s3s-fs` on loopback): round
//! trips, a store shared by two caches, epochs, the acknowledged pointer,
//! retention and removal, multipart uploads, the quota, errors, templates,
//! clock marks, a dead server, calls from async code, and the folders
//! of held actors.

use std::io::ErrorKind;
use std::path::Path;
use std::time::{Duration, Instant};

use stasis_core::snapshot_objects::{ObjectSnapshotStore, StoreUrl};
use stasis_core::snapshot_store::{SnapshotEntry, SnapshotStore, StoreError};
use stasis_test_util::s3::S3Server;

use self::faults::sealed;

mod faults;
mod held;
mod shipped;

/// One shared store location: a folder or an S3 server.
struct Shared {
    url: StoreUrl,
    env: Vec<(String, String)>,
    /// Local paths that must never appear in a client-facing message.
    secret_paths: Vec<String>,
    _dir: tempfile::TempDir,
    server: Option<S3Server>,
}

impl Shared {
    fn file() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        Self {
            url: format!("file://{}", root.display()).parse().unwrap(),
            env: Vec::new(),
            secret_paths: vec![dir.path().display().to_string()],
            _dir: dir,
            server: None,
        }
    }

    /// The local folder holding the objects under the store's prefix.
    fn objects_dir(&self) -> std::path::PathBuf {
        match (&self.url, &self.server) {
            (StoreUrl::File(root), _) => root.clone(),
            (StoreUrl::S3 { prefix, .. }, Some(server)) => server.bucket_dir().join(prefix),
            _ => unreachable!("a shared store is a folder or S3"),
        }
    }

    fn s3() -> Self {
        let server = S3Server::start();
        let dir = tempfile::tempdir().unwrap();
        Self {
            url: server.url("cluster/one").parse().unwrap(),
            env: server.env(),
            secret_paths: vec![
                dir.path().display().to_string(),
                server.endpoint(),
                "stasis-test-secret".to_owned(),
            ],
            _dir: dir,
            server: Some(server),
        }
    }

    /// A store on this location with its own cache in `cache`.
    fn open(&self, cache: &Path, quota: Option<u64>) -> ObjectSnapshotStore {
        ObjectSnapshotStore::open_with_s3_env(&self.url, cache, quota, &self.env)
            .unwrap_or_else(|e| panic!("open {}: {}", self.url, e.detail()))
    }

    /// A store on this (S3) location reaching its server through `proxy`,
    /// with its own cache in `cache`.
    fn open_through(
        &self,
        proxy: &stasis_test_util::fault_proxy::FaultProxy,
        cache: &Path,
    ) -> ObjectSnapshotStore {
        let env: Vec<(String, String)> = self
            .env
            .iter()
            .map(|(name, value)| match name.as_str() {
                "AWS_ENDPOINT_URL" => (name.clone(), proxy.endpoint()),
                _ => (name.clone(), value.clone()),
            })
            .collect();
        ObjectSnapshotStore::open_with_s3_env(&self.url, cache, None, &env)
            .unwrap_or_else(|e| panic!("open through the proxy: {}", e.detail()))
    }

    /// Asserts `err`'s message names no local path, endpoint or secret.
    fn assert_clean(&self, err: &StoreError) {
        let shown = err.to_string();
        for secret in &self.secret_paths {
            assert!(
                !shown.contains(secret.as_str()),
                "{shown:?} shows {secret:?}"
            );
        }
    }
}

/// Runs `check` against a `file://` store, then an S3 one.
fn each_backend(check: impl Fn(&Shared)) {
    check(&Shared::file());
    check(&Shared::s3());
}

/// A real full snapshot (of the small guest), made once.
fn real_snapshot() -> &'static [u8] {
    static SNAPSHOT: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    SNAPSHOT.get_or_init(|| {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async {
            crate::support::small_snapshot(&crate::support::small_guest(None))
                .await
                .2
        })
    })
}

fn seqs(store: &ObjectSnapshotStore, actor: &str) -> Vec<u64> {
    store.list(actor).unwrap().iter().map(|e| e.seq).collect()
}

fn kind(err: &StoreError) -> ErrorKind {
    match err {
        StoreError::Io { source, .. } => source.kind(),
        StoreError::Quota { .. } | StoreError::Fenced { .. } | StoreError::Unknown { .. } => {
            panic!("unexpected error: {err}")
        }
    }
}

/// Deterministic, position-dependent bytes.
fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt) ^ (i >> 8) as u8)
        .collect()
}

#[test]
fn objects_round_trip() {
    each_backend(|shared| {
        let cache = tempfile::tempdir().unwrap();
        let store = shared.open(cache.path(), None);
        assert_eq!(store.list_acknowledged("a").unwrap(), (vec![], None));
        assert_eq!(store.actors().unwrap(), Vec::<String>::new());
        store.write("a", 0, 1, b"snapshot zero").unwrap();
        store.write("a", 1, 1, b"snapshot one!!").unwrap();
        assert_eq!(
            store.list_acknowledged("a").unwrap(),
            (
                vec![
                    SnapshotEntry { seq: 0, bytes: 13 },
                    SnapshotEntry { seq: 1, bytes: 14 }
                ],
                Some(1)
            )
        );
        assert_eq!(&store.open_snapshot("a", 0).unwrap()[..], b"snapshot zero");
        assert_eq!(&store.open_snapshot("a", 1).unwrap()[..], b"snapshot one!!");
        assert_eq!(store.downloads(), 0, "the writer reads its cache");
        assert!(store.cache_path("a", 1, 1).is_file());
        assert_eq!(store.actors().unwrap(), ["a"]);
        assert_eq!(store.used_bytes(), 27);
        assert_eq!(store.location("a"), format!("{}/snapshots/a", shared.url));
        // Reopened: the count comes from the store.
        drop(store);
        let again = shared.open(cache.path(), None);
        assert_eq!(again.used_bytes(), 27);
        assert_eq!(seqs(&again, "a"), [0, 1]);
    });
}

#[test]
fn objects_layout_under_the_prefix() {
    each_backend(|shared| {
        let cache = tempfile::tempdir().unwrap();
        let store = shared.open(cache.path(), None);
        store.write("a", 3, 7, b"three at seven").unwrap();
        store.write_clock_mark("a", 42).unwrap();
        store.put_template("d1g", b"\0asm").unwrap();
        let dir = shared.objects_dir();
        let read = |rel: &str| {
            std::fs::read(dir.join(rel)).unwrap_or_else(|e| panic!("{rel} in {dir:?}: {e}"))
        };
        assert_eq!(
            read("snapshots/a/00000000000000000003-00000000000000000007.snap"),
            b"three at seven"
        );
        let pointer: serde_json::Value =
            serde_json::from_slice(&read("snapshots/a/acknowledged")).unwrap();
        assert_eq!(pointer, serde_json::json!({"seq": 3, "epoch": 7}));
        assert_eq!(read("snapshots/a/clock.mark"), b"42\n");
        assert_eq!(read("templates/d1g.wasm"), b"\0asm");
        assert_eq!(
            std::fs::read(
                cache
                    .path()
                    .join("snapshots/a/00000000000000000003-00000000000000000007.snap")
            )
            .unwrap(),
            b"three at seven",
            "the cache copy is named like the object"
        );
    });
}

#[test]
fn objects_are_shared_and_downloaded_once() {
    each_backend(|shared| {
        let (cache_a, cache_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = shared.open(cache_a.path(), None);
        let b = shared.open(cache_b.path(), None);
        let three = sealed(b"three at seven");
        a.write("counter", 3, 7, &three).unwrap();
        assert_eq!(b.list_acknowledged("counter").unwrap().1, Some(3));
        assert_eq!(b.actors().unwrap(), ["counter"]);
        assert_eq!(&b.open_snapshot("counter", 3).unwrap()[..], &three[..]);
        assert_eq!(b.downloads(), 1);
        assert!(b.cache_path("counter", 3, 7).is_file());
        // Served from the cache from now on: a cache copy of the same size
        // but other bytes is what comes back (nothing downloaded).
        let other = sealed(b"THREE AT SEVEN");
        std::fs::write(b.cache_path("counter", 3, 7), &other).unwrap();
        assert_eq!(&b.open_snapshot("counter", 3).unwrap()[..], &other[..]);
        assert_eq!(b.downloads(), 1);
        assert_eq!(a.downloads(), 0);
        // A third store opened now counts A's bytes.
        let cache_c = tempfile::tempdir().unwrap();
        assert_eq!(shared.open(cache_c.path(), None).used_bytes(), 18);
    });
}

#[test]
fn objects_the_highest_epoch_wins() {
    each_backend(|shared| {
        let cache = tempfile::tempdir().unwrap();
        let store = shared.open(cache.path(), None);
        // New owner first, then a late write by a fenced worker.
        store.write("x", 5, 3, b"owner at epoch 3").unwrap();
        store.write("x", 5, 2, b"fenced").unwrap();
        // Old epoch first, then the new owner.
        store.write("y", 5, 2, b"fenced").unwrap();
        store.write("y", 5, 3, b"owner at epoch 3").unwrap();
        let cache_b = tempfile::tempdir().unwrap();
        let other = shared.open(cache_b.path(), None);
        for s in [&store, &other] {
            for actor in ["x", "y"] {
                assert_eq!(
                    s.list(actor).unwrap(),
                    [SnapshotEntry { seq: 5, bytes: 16 }]
                );
                assert_eq!(&s.open_snapshot(actor, 5).unwrap()[..], b"owner at epoch 3");
            }
        }
        // The pointer never moves back to an older epoch.
        store.write("x", 6, 3, b"six").unwrap();
        store.write("x", 7, 2, b"fenced seven").unwrap();
        assert_eq!(other.list_acknowledged("x").unwrap().1, Some(6));
        // Epoch 3 took over at 5: epoch 2's 7 is a late write, stale.
        assert_eq!(
            other
                .list("x")
                .unwrap()
                .iter()
                .map(|e| e.seq)
                .collect::<Vec<_>>(),
            [5, 6]
        );
        // Every object counts; retention drops the shadowed and the stale.
        assert_eq!(store.used_bytes(), 16 + 6 + 16 + 6 + 3 + 12);
        assert_eq!(store.retain("x", 10).unwrap(), Vec::<u64>::new());
        assert_eq!(store.used_bytes(), 16 + 6 + 16 + 3);
        let cache_c = tempfile::tempdir().unwrap();
        assert_eq!(
            shared.open(cache_c.path(), None).used_bytes(),
            16 + 6 + 16 + 3
        );
        assert!(!store.cache_path("x", 5, 2).exists());
        assert!(!store.cache_path("x", 7, 2).exists());
        assert_eq!(
            &store.open_snapshot("x", 5).unwrap()[..],
            b"owner at epoch 3"
        );
    });
}

/// The class (reliability round 3, input 1): the new owner takes
/// an actor over at a higher epoch before it has written anything; the old
/// owner, woken after its lease, writes later sequence numbers at its old
/// epoch and runs retention. None of that is the actor's history, and
/// nothing of the new owner's is deleted.
#[test]
fn objects_an_adoption_fence_hides_a_fenced_off_owners_writes() {
    each_backend(|shared| {
        let cache = tempfile::tempdir().unwrap();
        let store = shared.open(cache.path(), None);
        for seq in 0..=3 {
            store
                .write("f", seq, 1, format!("old {seq}").as_bytes())
                .unwrap();
        }
        // Taken over at epoch 2 from snapshot 3: the fence goes up once.
        store.adopt("f", 3, 2).unwrap();
        store.adopt("f", 3, 2).unwrap();
        // The old owner, woken, writes 4..=9 at epoch 1 and keeps 2.
        for seq in 4..=9 {
            store.write("f", seq, 1, b"zombie").unwrap();
        }
        let (list, acked) = store.list_acknowledged("f").unwrap();
        assert_eq!(list.iter().map(|e| e.seq).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(acked, Some(3), "a stale pointer names nothing");
        // (These bytes are no snapshots, so retention keeps every older
        // one, as for an unreadable header; it deletes the stale ones.)
        assert_eq!(store.retain("f", 2).unwrap(), Vec::<u64>::new());
        assert!(store.open_snapshot("f", 9).is_err());
        // The new owner goes on from 3.
        store.write("f", 4, 2, b"new 4").unwrap();
        let other_cache = tempfile::tempdir().unwrap();
        let other = shared.open(other_cache.path(), None);
        let (list, acked) = other.list_acknowledged("f").unwrap();
        assert_eq!(
            list.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        assert_eq!(acked, Some(4));
        assert_eq!(&other.open_snapshot("f", 4).unwrap()[..], b"new 4");
        // An adoption at an older epoch than the folder's changes nothing.
        other.adopt("f", 4, 1).unwrap();
        assert_eq!(other.list("f").unwrap().len(), 5);
    });
}

#[test]
fn objects_acknowledged_pointer() {
    each_backend(|shared| {
        let cache = tempfile::tempdir().unwrap();
        let store = shared.open(cache.path(), None);
        store.write("a", 3, 1, b"three").unwrap();
        store.write("a", 4, 1, b"four").unwrap();
        assert_eq!(store.list_acknowledged("a").unwrap().1, Some(4));
        // The newest deleted behind the pointer's back: the pointer still
        // says 4, the listing ends at 3.
        store.remove("a", 4).unwrap();
        let (list, acked) = store.list_acknowledged("a").unwrap();
        assert_eq!(list, [SnapshotEntry { seq: 3, bytes: 5 }]);
        assert_eq!(acked, Some(4));
    });
}

#[test]
fn objects_retain_and_remove_delete_objects_and_cache_copies() {
    each_backend(|shared| {
        let (cache_a, cache_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = shared.open(cache_a.path(), None);
        let b = shared.open(cache_b.path(), None);
        // Real (full) snapshots: retention reads their headers to keep
        // every base a kept delta needs.
        let snap = real_snapshot();
        let len = snap.len() as u64;
        for seq in 0..=4u64 {
            a.write("a", seq, 1, snap).unwrap();
        }
        a.write("keep", 0, 1, b"other actor").unwrap();
        assert_eq!(a.used_bytes(), 5 * len + 11);
        assert_eq!(a.retain("a", 2).unwrap(), [0, 1, 2]);
        assert_eq!(seqs(&b, "a"), [3, 4]);
        assert_eq!(a.used_bytes(), 2 * len + 11);
        for seq in 0..=2 {
            assert!(!a.cache_path("a", seq, 1).exists(), "cache copy of {seq}");
        }
        assert!(a.cache_path("a", 3, 1).exists());
        assert_eq!(
            kind(&b.open_snapshot("a", 1).unwrap_err()),
            ErrorKind::NotFound
        );

        a.remove("a", 3).unwrap();
        a.remove("a", 3).unwrap(); // gone already: fine
        assert_eq!(seqs(&b, "a"), [4]);
        assert!(!a.cache_path("a", 3, 1).exists());
        assert_eq!(a.used_bytes(), len + 11);

        // B holds a cache copy of 4; once the actor is removed the store
        // (the truth) says it is gone.
        assert_eq!(&b.open_snapshot("a", 4).unwrap()[..], snap);
        a.write_clock_mark("a", 99).unwrap();
        a.remove_actor("a").unwrap();
        a.remove_actor("a").unwrap(); // none left: fine
        assert_eq!(b.list_acknowledged("a").unwrap(), (vec![], None));
        assert_eq!(b.clock_mark("a"), 0);
        assert_eq!(b.actors().unwrap(), ["keep"]);
        assert_eq!(
            kind(&b.open_snapshot("a", 4).unwrap_err()),
            ErrorKind::NotFound
        );
        assert!(!cache_a.path().join("snapshots/a").exists());
        assert_eq!(a.used_bytes(), 11);
        let cache_c = tempfile::tempdir().unwrap();
        assert_eq!(shared.open(cache_c.path(), None).used_bytes(), 11);
    });
}

#[test]
fn objects_big_snapshot_round_trips_in_parts() {
    each_backend(|shared| {
        let (cache_a, cache_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = shared.open(cache_a.path(), None);
        let big = sealed(&pattern((20 << 20) + 123, 7));
        a.write("big", 1, 4, &big).unwrap();
        let b = shared.open(cache_b.path(), None);
        assert_eq!(
            b.list("big").unwrap(),
            [SnapshotEntry {
                seq: 1,
                bytes: big.len() as u64
            }]
        );
        assert!(
            b.open_snapshot("big", 1).unwrap()[..] == big[..],
            "bytes differ"
        );
        assert_eq!(b.downloads(), 1);
        assert_eq!(b.used_bytes(), big.len() as u64);
        // Templates of that size too.
        a.put_template("bigtemplate", &big).unwrap();
        assert!(
            b.get_template("bigtemplate").unwrap() == big,
            "template differs"
        );
    });
}

#[test]
fn objects_quota_refusal_writes_nothing() {
    each_backend(|shared| {
        let cache = tempfile::tempdir().unwrap();
        let store = shared.open(cache.path(), Some(100));
        store.write("a", 0, 1, &[1; 60]).unwrap();
        let err = store.write("a", 1, 1, &[2; 60]).unwrap_err();
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
        assert_eq!(store.list_acknowledged("a").unwrap().1, Some(0));
        assert_eq!(seqs(&store, "a"), [0]);
        assert!(!store.cache_path("a", 1, 1).exists());
        assert_eq!(store.used_bytes(), 60);
        // The quota counts what is in the store, also for a new store.
        let cache_b = tempfile::tempdir().unwrap();
        let other = shared.open(cache_b.path(), Some(100));
        assert!(matches!(
            other.write("b", 0, 1, &[3; 41]),
            Err(StoreError::Quota { used: 60, .. })
        ));
        other.write("b", 0, 1, &[3; 40]).unwrap();
        assert_eq!(other.used_bytes(), 100);
    });
}

#[test]
fn objects_missing_is_not_found_and_errors_name_keys_only() {
    each_backend(|shared| {
        let cache = tempfile::tempdir().unwrap();
        let store = shared.open(cache.path(), None);
        let err = store.open_snapshot("nobody", 3).unwrap_err();
        assert_eq!(kind(&err), ErrorKind::NotFound);
        assert_eq!(
            err.to_string(),
            "open snapshots/nobody/00000000000000000003-*.snap: not found"
        );
        shared.assert_clean(&err);
        assert!(
            err.detail().contains(&shared.url.to_string()),
            "{}",
            err.detail()
        );

        let err = store.get_template("0123abcd").unwrap_err();
        assert_eq!(kind(&err), ErrorKind::NotFound);
        assert_eq!(err.to_string(), "get templates/0123abcd.wasm: not found");
        shared.assert_clean(&err);
        assert!(
            err.detail().contains(&shared.url.to_string()),
            "{}",
            err.detail()
        );

        let err = store.write("a/b", 0, 1, b"x").unwrap_err();
        assert_eq!(kind(&err), ErrorKind::InvalidInput);
        assert!(store.put_template("../x", b"x").is_err());
        assert_eq!(store.clock_mark("nobody"), 0);
    });
}

#[test]
fn objects_templates_and_clock_marks_round_trip() {
    each_backend(|shared| {
        let (cache_a, cache_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = shared.open(cache_a.path(), None);
        let b = shared.open(cache_b.path(), None);
        let module = pattern(4096, 3);
        a.put_template("d1g3st", &module).unwrap();
        assert_eq!(b.get_template("d1g3st").unwrap(), module);
        a.put_template("d1g3st", b"replaced").unwrap();
        assert_eq!(b.get_template("d1g3st").unwrap(), b"replaced");
        // Templates are neither actors nor snapshot bytes.
        assert_eq!(b.actors().unwrap(), Vec::<String>::new());
        assert_eq!(a.used_bytes(), 0);

        a.write_clock_mark("c", 1_234_567_890_123).unwrap();
        assert_eq!(b.clock_mark("c"), 1_234_567_890_123);
        a.write_clock_mark("c", 5).unwrap();
        assert_eq!(b.clock_mark("c"), 5);
        // A clock mark is outside the snapshot list and the count.
        assert_eq!(b.list_acknowledged("c").unwrap(), (vec![], None));
        assert_eq!(a.used_bytes(), 0);
    });
}

#[test]
fn objects_local_url_is_not_an_object_store() {
    let cache = tempfile::tempdir().unwrap();
    let err = ObjectSnapshotStore::open(&StoreUrl::Local, cache.path(), None).unwrap_err();
    assert_eq!(kind(&err), ErrorKind::InvalidInput);
}

#[test]
fn objects_dead_server_answers_an_error_in_bounded_time() {
    let shared = Shared::s3();
    let cache = tempfile::tempdir().unwrap();
    let store = shared.open(cache.path(), None);
    store.write("a", 0, 1, b"zero").unwrap();
    let Shared {
        server, url, env, ..
    } = shared;
    drop(server);
    let started = Instant::now();
    // An earlier attempt may have landed before the server went away:
    // with no read-back possible the outcome is unknown.
    let err = store.write("a", 1, 1, b"one").unwrap_err();
    assert!(matches!(err, StoreError::Unknown { .. }), "{err:?}");
    assert!(store.list("a").is_err());
    assert!(
        store.open_snapshot("a", 0).is_err(),
        "the store is the truth"
    );
    assert_eq!(store.clock_mark("a"), 0);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(40), "took {took:?}");
    assert!(!store.cache_path("a", 1, 1).exists());
    // Opening against a dead server fails with a clear message.
    let started = Instant::now();
    let err = ObjectSnapshotStore::open_with_s3_env(&url, cache.path(), None, &env).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(40));
    let shown = err.to_string();
    assert!(
        shown.starts_with(&format!("open {url}: cannot list the store: ")),
        "{shown}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn objects_can_be_called_and_dropped_in_async_code() {
    let shared = Shared::s3();
    let cache = tempfile::tempdir().unwrap();
    let store = shared.open(cache.path(), None);
    // Straight from an async task of another (single-threaded) runtime.
    store.write("a", 0, 1, b"zero").unwrap();
    assert_eq!(&store.open_snapshot("a", 0).unwrap()[..], b"zero");
    let store = std::sync::Arc::new(store);
    let blocking = store.clone();
    let listed = tokio::task::spawn_blocking(move || blocking.list("a").unwrap())
        .await
        .unwrap();
    assert_eq!(listed, [SnapshotEntry { seq: 0, bytes: 4 }]);
    // Dropped inside the async task: no panic.
    drop(store);
}

#[test]
fn objects_fork_copies_in_the_store_and_links_the_cache() {
    use std::os::unix::fs::MetadataExt as _;
    each_backend(|shared| {
        let (cache_a, cache_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = shared.open(cache_a.path(), Some(40));
        let b = shared.open(cache_b.path(), None);
        a.write("src", 2, 5, b"two at five").unwrap();
        a.write("src", 3, 5, b"three at five").unwrap();
        // The writer holds a cache copy: the fork's copy is a link to it.
        assert_eq!(a.fork("src", 2, "new", 1).unwrap(), 11);
        let (from, to) = (a.cache_path("src", 2, 5), a.cache_path("new", 2, 1));
        assert_eq!(from.metadata().unwrap().ino(), to.metadata().unwrap().ino());
        assert_eq!(&a.open_snapshot("new", 2).unwrap()[..], b"two at five");
        assert_eq!(a.downloads(), 0, "served from the linked cache copy");
        assert_eq!(a.list_acknowledged("new").unwrap().1, Some(2));
        assert!(
            shared
                .objects_dir()
                .join("snapshots/new")
                .join("00000000000000000002-00000000000000000001.snap")
                .is_file()
        );
        // Another store without a copy forks too, and sees both.
        b.fork("src", 3, "other", 1).unwrap();
        assert_eq!(&b.open_snapshot("other", 3).unwrap()[..], b"three at five");
        assert_eq!(&b.open_snapshot("new", 2).unwrap()[..], b"two at five");
        // Refusals.
        assert_eq!(
            kind(&a.fork("src", 9, "x", 1).unwrap_err()),
            ErrorKind::NotFound
        );
        assert_eq!(
            kind(&a.fork("src", 2, "new", 1).unwrap_err()),
            ErrorKind::AlreadyExists
        );
        assert_eq!(
            kind(&a.fork("src", 2, "a/b", 1).unwrap_err()),
            ErrorKind::InvalidInput
        );
        assert!(matches!(
            a.fork("src", 3, "big", 1),
            Err(StoreError::Quota { .. })
        ));
        // Deleting the source keeps the fork.
        a.remove_actor("src").unwrap();
        assert_eq!(&b.open_snapshot("new", 2).unwrap()[..], b"two at five");
        assert_eq!(&a.open_snapshot("new", 2).unwrap()[..], b"two at five");
    });
}
