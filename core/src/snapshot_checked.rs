//! Snapshot files whose CRC32C this process knows to match: files it wrote
//! itself, or checksummed once, and has seen unchanged since. A restore of
//! such a file skips the checksum pass over its pages
//! ([`SnapshotBytes::with_checksum_verified`]), so waking a paused actor
//! costs the same for 1 MiB of memory as for 1 GiB.
//!
//! A file is known by its identity and stamp as `fstat` reports them:
//! device and inode, length, modification and status-change times (ns). A
//! write into the file moves its mtime and ctime, a rename over its name
//! gives another inode, a hard link moves its ctime: each makes the file
//! unknown again, and the next open checksums it. What this cannot see is
//! a change that keeps every one of those (a write within the file
//! system's timestamp granularity of the last stamp, with the same length,
//! or a bit flipped by the disk under the page cache); the checksum of a
//! file that was not written in this process still runs once.
//!
//! [`SnapshotBytes::with_checksum_verified`]: crate::snapshot_store::SnapshotBytes::with_checksum_verified

use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Mutex;

/// A file's stamp: what changes when its content may have changed. Times
/// are ns since the Unix epoch as `i64` (times up to the year 2262), to
/// keep an entry at 40 bytes: there is one per snapshot file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime_ns: i64,
    ctime_ns: i64,
}

/// `(device, inode)` and stamp of a file's metadata.
fn identity(meta: &Metadata) -> ((u64, u64), Stamp) {
    let ns = |secs: i64, nanos: i64| secs.saturating_mul(1_000_000_000).saturating_add(nanos);
    (
        (meta.dev(), meta.ino()),
        Stamp {
            len: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        },
    )
}

/// The files known to match their checksum (module docs), 40 bytes each
/// in the map; a file is forgotten when the store deletes it.
#[derive(Debug, Default)]
pub(crate) struct CheckedFiles {
    files: Mutex<HashMap<(u64, u64), Stamp>>,
}

impl CheckedFiles {
    fn files(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, u64), Stamp>> {
        // A panic while holding the lock leaves a plain map behind.
        self.files
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records the file of `meta` as matching its checksum: this process
    /// wrote it, or its checksum was just computed.
    pub(crate) fn record(&self, meta: &Metadata) {
        let (id, stamp) = identity(meta);
        self.files().insert(id, stamp);
    }

    /// Whether the file of `meta` is known and unchanged since.
    pub(crate) fn is_checked(&self, meta: &Metadata) -> bool {
        let (id, stamp) = identity(meta);
        self.files().get(&id) == Some(&stamp)
    }

    /// After a hard link made from a file whose metadata was `before` (its
    /// ctime moved; `after` is the new metadata): keeps it known if it was.
    pub(crate) fn relinked(&self, before: &Metadata, after: &Metadata) {
        if self.is_checked(before) {
            self.record(after);
        }
    }

    /// Forgets the file at `path`, about to be deleted or replaced
    /// (nothing if it does not exist). Its other hard links, if any, are
    /// checksummed again on their next open.
    pub(crate) fn forget(&self, path: &Path) {
        if let Ok(meta) = path.metadata() {
            self.files().remove(&identity(&meta).0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek as _, SeekFrom, Write as _};

    #[test]
    fn a_write_in_place_a_replacement_or_a_link_makes_a_file_unknown() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.snap");
        std::fs::write(&path, b"snapshot bytes").expect("write");
        let checked = CheckedFiles::default();
        let meta = || path.metadata().expect("stat");
        assert!(!checked.is_checked(&meta()), "unknown until recorded");
        checked.record(&meta());
        assert!(checked.is_checked(&meta()));

        // A hard link moves the ctime; relinked keeps it known.
        let before = meta();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::hard_link(&path, dir.path().join("b.snap")).expect("link");
        assert!(!checked.is_checked(&meta()), "a link moves the ctime");
        checked.relinked(&before, &meta());
        assert!(checked.is_checked(&meta()));

        // A write in place, same length.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        file.seek(SeekFrom::Start(3)).expect("seek");
        file.write_all(b"X").expect("write");
        drop(file);
        assert!(!checked.is_checked(&meta()), "a write in place");

        // A replacement by rename: another inode.
        checked.record(&meta());
        let other = dir.path().join("c.snap");
        std::fs::write(&other, b"snapshot bytes").expect("write");
        std::fs::rename(&other, &path).expect("rename");
        assert!(!checked.is_checked(&meta()), "a replacement");

        checked.record(&meta());
        checked.forget(&path);
        assert!(!checked.is_checked(&meta()), "forgotten");
    }
}
