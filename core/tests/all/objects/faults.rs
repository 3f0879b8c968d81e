//! The object store's failure paths through a fault proxy
//! ([`FaultProxy`]) between the store client and a real S3 server
//! (`s3s-fs`): a write whose answer is lost is read back before it is
//! reported (the snapshot PUT, `CompleteMultipartUpload`, the
//! acknowledged pointer), a write that never arrived is a plain failure,
//! one whose read-back fails too is of unknown outcome; downloads are
//! checked against the listed size and the checksum trailer before they
//! are cached; a `file://` store sweeps stale upload parts at open.

use std::path::Path;
use std::time::{Duration, SystemTime};

use stasis_core::snapshot_objects::{ObjectSnapshotStore, STALE_UPLOAD_AGE};
use stasis_core::snapshot_store::{SnapshotStore, StoreError};
use stasis_test_util::fault_proxy::{Fault, FaultProxy};

use super::{Shared, pattern};

/// `body` with a snapshot's CRC32C trailer (a downloaded snapshot must
/// match it to be cached).
pub(super) fn sealed(body: &[u8]) -> Vec<u8> {
    let mut bytes = body.to_vec();
    bytes.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    bytes
}

/// Enough faults for every retry of the client (3) and then some.
const ALWAYS: usize = 100;

/// An S3 store and a proxy in front of it.
struct Faulty {
    shared: Shared,
    proxy: FaultProxy,
}

impl Faulty {
    fn start() -> Self {
        let shared = Shared::s3();
        let proxy = FaultProxy::start(shared.server.as_ref().expect("s3").addr());
        Self { shared, proxy }
    }

    /// A store reaching the server through the proxy.
    fn open(&self, cache: &Path) -> ObjectSnapshotStore {
        self.shared.open_through(&self.proxy, cache)
    }

    /// A store reaching the server directly.
    fn direct(&self, cache: &Path) -> ObjectSnapshotStore {
        self.shared.open(cache, None)
    }
}

/// The object name of snapshot `seq` of `actor` at `epoch`, as it
/// appears in a request's target.
fn object(actor: &str, seq: u64, epoch: u64) -> String {
    format!("snapshots/{actor}/{seq:020}-{epoch:020}.snap")
}

#[test]
fn objects_lost_answer_to_complete_multipart_upload_is_read_back() {
    let faulty = Faulty::start();
    let cache = tempfile::tempdir().unwrap();
    let store = faulty.open(cache.path());
    // The store applies CompleteMultipartUpload; its answer (and those to
    // the client's retries) never comes back.
    faulty
        .proxy
        .on("POST", "uploadId=", Fault::LoseAnswer, ALWAYS);
    let big = sealed(&pattern((9 << 20) + 77, 3));
    store.write("m", 4, 1, &big).unwrap();
    assert!(!faulty.proxy.fired().is_empty(), "the fault was applied");
    faulty.proxy.clear();
    let reader_cache = tempfile::tempdir().unwrap();
    let reader = faulty.direct(reader_cache.path());
    assert_eq!(reader.list_acknowledged("m").unwrap().1, Some(4));
    assert!(reader.open_snapshot("m", 4).unwrap()[..] == big[..]);
}

#[test]
fn objects_lost_answer_to_a_put_is_read_back() {
    let faulty = Faulty::start();
    let cache = tempfile::tempdir().unwrap();
    let store = faulty.open(cache.path());
    faulty
        .proxy
        .on("PUT", &object("p", 1, 2), Fault::LoseAnswer, ALWAYS);
    store.write("p", 1, 2, &sealed(b"one at two")).unwrap();
    assert!(!faulty.proxy.fired().is_empty(), "the fault was applied");
    assert_eq!(store.list_acknowledged("p").unwrap().1, Some(1));
}

#[test]
fn objects_lost_answer_to_the_pointer_is_read_back() {
    let faulty = Faulty::start();
    let cache = tempfile::tempdir().unwrap();
    let store = faulty.open(cache.path());
    faulty
        .proxy
        .on("PUT", "snapshots/q/acknowledged", Fault::LoseAnswer, ALWAYS);
    store.write("q", 1, 1, &sealed(b"one")).unwrap();
    assert!(!faulty.proxy.fired().is_empty(), "the fault was applied");
    assert_eq!(store.list_acknowledged("q").unwrap().1, Some(1));
    // A fork fails when the new actor's pointer cannot be written: here
    // it was, only its answer is lost.
    faulty
        .proxy
        .on("PUT", "snapshots/r/acknowledged", Fault::LoseAnswer, ALWAYS);
    store.fork("q", 1, "r", 1).unwrap();
    assert_eq!(store.list_acknowledged("r").unwrap().1, Some(1));
}

#[test]
fn objects_a_put_that_never_arrived_is_a_plain_failure() {
    let faulty = Faulty::start();
    let cache = tempfile::tempdir().unwrap();
    let store = faulty.open(cache.path());
    faulty
        .proxy
        .on("PUT", &object("n", 1, 1), Fault::DropRequest, ALWAYS);
    let err = store.write("n", 1, 1, &sealed(b"never")).unwrap_err();
    assert!(matches!(err, StoreError::Io { .. }), "{err}");
    faulty.shared.assert_clean(&err);
    assert!(store.list("n").unwrap().is_empty());
    assert!(!store.cache_path("n", 1, 1).exists());
}

#[test]
fn objects_a_lost_answer_that_cannot_be_read_back_is_unknown() {
    let faulty = Faulty::start();
    let cache = tempfile::tempdir().unwrap();
    let store = faulty.open(cache.path());
    let key = object("u", 1, 1);
    faulty.proxy.on("PUT", &key, Fault::LoseAnswer, ALWAYS);
    faulty.proxy.on("HEAD", &key, Fault::DropRequest, ALWAYS);
    faulty.proxy.on("GET", &key, Fault::DropRequest, ALWAYS);
    let err = store.write("u", 1, 1, &sealed(b"unknown")).unwrap_err();
    assert!(matches!(err, StoreError::Unknown { .. }), "{err}");
    assert!(err.to_string().contains("may or may not"), "{err}");
    assert!(err.to_string().contains(&key), "names the object: {err}");
    faulty.shared.assert_clean(&err);
}

#[test]
fn objects_a_failed_multipart_upload_names_its_cause() {
    let faulty = Faulty::start();
    let cache = tempfile::tempdir().unwrap();
    let store = faulty.open(cache.path());
    faulty
        .proxy
        .on("PUT", "partNumber=2", Fault::DropRequest, ALWAYS);
    let big = sealed(&pattern((9 << 20) + 5, 1));
    let err = store.write("f", 1, 1, &big).unwrap_err();
    assert!(matches!(err, StoreError::Io { .. }), "{err}");
    assert!(
        err.to_string().contains("store request failed: "),
        "names a cause: {err}"
    );
    faulty.shared.assert_clean(&err);
    assert!(store.list("f").unwrap().is_empty());
}

#[test]
fn objects_short_download_is_retried_and_never_cached() {
    let faulty = Faulty::start();
    let (cache_a, cache_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let writer = faulty.direct(cache_a.path());
    let bytes = sealed(&pattern(5000, 9));
    writer.write("d", 1, 1, &bytes).unwrap();
    let reader = faulty.open(cache_b.path());
    let key = object("d", 1, 1);
    // Once short: the second download is good, the snapshot is not blamed.
    faulty.proxy.on("GET", &key, Fault::ShortBody(0), 1);
    assert!(reader.open_snapshot("d", 1).unwrap()[..] == bytes[..]);
    assert_eq!(faulty.proxy.fired().len(), 1);
    assert!(reader.cache_path("d", 1, 1).is_file());
    // Always short: an error naming the object and the mismatch, nothing
    // cached under the final name and no temp file left.
    let cache_c = tempfile::tempdir().unwrap();
    let other = faulty.open(cache_c.path());
    faulty.proxy.on("GET", &key, Fault::ShortBody(100), ALWAYS);
    let err = other.open_snapshot("d", 1).unwrap_err();
    let shown = err.to_string();
    assert!(shown.contains(&key), "{shown}");
    assert!(shown.contains("100 of the 5004 bytes listed"), "{shown}");
    faulty.shared.assert_clean(&err);
    let folder = other.cache_path("d", 1, 1).parent().unwrap().to_owned();
    let left: Vec<_> = std::fs::read_dir(&folder)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left in the cache: {left:?}");
}

#[test]
fn objects_a_corrupt_object_is_handed_out_but_never_cached() {
    let faulty = Faulty::start();
    let (cache_a, cache_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let writer = faulty.direct(cache_a.path());
    // No valid trailer: every download fails the checksum.
    writer.write("c", 1, 1, b"not a snapshot at all").unwrap();
    let reader = faulty.direct(cache_b.path());
    let bytes = reader.open_snapshot("c", 1).unwrap();
    assert_eq!(&bytes[..], b"not a snapshot at all");
    assert!(!reader.cache_path("c", 1, 1).exists());
}

#[test]
fn objects_file_store_sweeps_stale_upload_parts_at_open() {
    let shared = Shared::file();
    let cache = tempfile::tempdir().unwrap();
    drop(shared.open(cache.path(), None));
    let folder = shared.objects_dir().join("snapshots/a");
    std::fs::create_dir_all(&folder).unwrap();
    let (stale, fresh, object) = (
        folder.join("00000000000000000001-00000000000000000001.snap#3"),
        folder.join("00000000000000000002-00000000000000000001.snap#4"),
        folder.join("00000000000000000001-00000000000000000001.snap"),
    );
    for path in [&stale, &fresh, &object] {
        std::fs::write(path, b"part").unwrap();
    }
    let long_ago = SystemTime::now() - STALE_UPLOAD_AGE - Duration::from_secs(60);
    for path in [&stale, &object] {
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(long_ago).unwrap();
    }
    drop(shared.open(cache.path(), None));
    assert!(!stale.exists(), "a stale part is swept");
    assert!(fresh.exists(), "an upload that may be under way is kept");
    assert!(object.exists(), "objects are never swept");
}
