//! The embedded [`SnapshotStore`]: snapshot files in the data dir,
//! `snapshots/<actor>/<seq:020>.snap`, each new one written with
//! [`write_new_in`] (one sync round; a crash before it ends may leave the
//! new file torn, never an older one, and a torn newest file above the
//! marker is dropped when the actor is adopted) and a replaced one with
//! [`write_atomically_in`] (the syncs are shared by concurrent writers,
//! one `syncfs` for all: [`SyncGroup`]), with an empty `<seq:020>.acked`
//! marker naming the newest acknowledged one (none for snapshot 0);
//! retention of the newest N; an optional quota on the whole folder. Files
//! it wrote or saw checksummed are remembered ([`crate::snapshot_checked`]),
//! so their next restore skips the checksum pass.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use crate::durable::{TEMP_SUFFIX, write_atomically_in, write_new_in};
use crate::snapshot::{peek_header, verify_header};
use crate::snapshot_checked::CheckedFiles;
use crate::snapshot_quota::QuotaUsage;
use crate::snapshot_store::{
    ChainLink, SnapshotBytes, SnapshotEntry, SnapshotStore, StoreError, chain_files,
    chain_retention,
};
use crate::sync_group::SyncGroup;

const SNAPSHOT: &str = ".snap";
const ACKED: &str = ".acked";
/// File name of an actor's clock mark (see [`SnapshotStore::write_clock_mark`]).
const CLOCK_MARK: &str = "clock.mark";
/// File name of an actor's log (see [`SnapshotStore::append_log`]).
const LOG: &str = "log.ndjson";
/// The log being replaced ([`SnapshotStore::replace_log`]), renamed over [`LOG`].
const LOG_NEXT: &str = "log.ndjson.next";

/// The sequence number and suffix ([`SNAPSHOT`] or [`ACKED`]) of a
/// canonical file name (`<seq:020><suffix>`). Anything else — a stray
/// `5.snap`, a temp file — is not one, so it cannot be mistaken for
/// snapshot 5.
fn canonical(name: &OsStr) -> Option<(u64, &'static str)> {
    let name = name.to_str()?;
    let (digits, suffix) = [SNAPSHOT, ACKED]
        .into_iter()
        .find_map(|suffix| Some((name.strip_suffix(suffix)?, suffix)))?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((digits.parse().ok()?, suffix))
}

/// A [`StoreError::Io`] maker for `op` on `path` under the store's `root`:
/// its message names the file by its key (`snapshots/...`), the server
/// path is kept for the log.
fn io_err(
    root: &Path,
    op: &'static str,
    path: &Path,
) -> impl FnOnce(io::Error) -> StoreError + use<> {
    let key = match path.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => "snapshots".to_owned(),
        Ok(rel) => format!("snapshots/{}", rel.display()),
        Err(_) => path
            .file_name()
            .map_or_else(String::new, |name| name.to_string_lossy().into_owned()),
    };
    let path = path.display().to_string();
    move |source| StoreError::Io {
        op,
        key,
        path,
        source,
    }
}

/// The snapshot folder of a data dir (module docs).
#[derive(Debug)]
pub struct LocalSnapshotStore {
    root: PathBuf,
    usage: QuotaUsage,
    checked: CheckedFiles,
    /// Every write, link and new folder is made durable through it.
    sync: SyncGroup,
}

impl LocalSnapshotStore {
    /// Opens (creating) `root`, removes temp files left by a crash, and
    /// counts the bytes in use. `quota` caps the folder's total size.
    ///
    /// # Errors
    /// [`StoreError::Io`] if the folder cannot be read or created.
    pub fn open(root: impl Into<PathBuf>, quota: Option<u64>) -> Result<Self, StoreError> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(io_err(&root, "create", &root))?;
        let mut used = 0;
        for actor in fs::read_dir(&root).map_err(io_err(&root, "read", &root))? {
            let dir = actor.map_err(io_err(&root, "read", &root))?.path();
            if !dir.is_dir() {
                continue;
            }
            for file in fs::read_dir(&dir).map_err(io_err(&root, "read", &dir))? {
                let path = file.map_err(io_err(&root, "read", &dir))?.path();
                if path
                    .file_name()
                    .is_some_and(|name| name == CLOCK_MARK || name == LOG || name == LOG_NEXT)
                {
                    continue;
                }
                let torn = path
                    .file_name()
                    .and_then(OsStr::to_str)
                    .is_some_and(|name| name.ends_with(TEMP_SUFFIX));
                if torn {
                    tracing::info!(path = %path.display(), "removing torn snapshot temp file");
                    fs::remove_file(&path).map_err(io_err(&root, "remove", &path))?;
                } else if let Ok(meta) = path.metadata() {
                    used += meta.len();
                }
            }
        }
        Ok(Self {
            sync: SyncGroup::open(&root).map_err(io_err(&root, "open", &root))?,
            root,
            usage: QuotaUsage::new(quota, used),
            checked: CheckedFiles::default(),
        })
    }

    /// The folder of `actor`'s snapshots.
    #[must_use]
    pub fn actor_dir(&self, actor: &str) -> PathBuf {
        self.root.join(actor)
    }

    /// The path of snapshot `seq` of `actor`.
    #[must_use]
    pub fn path(&self, actor: &str, seq: u64) -> PathBuf {
        self.actor_dir(actor).join(format!("{seq:020}.snap"))
    }

    fn write_file(&self, actor: &str, seq: u64, bytes: &[u8]) -> Result<(), StoreError> {
        self.create_actor_dir(actor)?;
        let path = self.path(actor, seq);
        self.checked.forget(&path);
        // A new sequence number (every pause's) takes one sync round; a
        // file that exists is replaced with two, so its old content
        // survives a crash.
        match write_new_in(&self.sync, &path, bytes) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                write_atomically_in(&self.sync, &path, bytes)
            }
            other => other,
        }
        .map_err(io_err(&self.root, "write", &path))?;
        if let Ok(meta) = path.metadata() {
            self.checked.record(&meta);
        }
        self.mark_acknowledged(actor, seq);
        Ok(())
    }

    /// After a failed write of `len` bytes at `path`: counts what is on
    /// disk under that name now (old file, new file if the rename happened
    /// before the failure, or nothing) instead.
    fn recount(&self, path: &Path, len: u64) {
        let now = path.metadata().map(|m| m.len()).unwrap_or(0);
        self.usage.recount(len, now);
    }

    /// Creates `actor`'s folder if missing. Its entry becomes durable with
    /// the first file written or linked into it (the same `syncfs`).
    fn create_actor_dir(&self, actor: &str) -> Result<PathBuf, StoreError> {
        let dir = self.actor_dir(actor);
        if dir.is_dir() {
            return Ok(dir);
        }
        match fs::create_dir(&dir) {
            Ok(()) => Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(dir),
            Err(e) => Err(io_err(&self.root, "create", &dir)(e)),
        }
    }

    /// Hard-links `from` at `to` (a snapshot of `actor`); durable with the
    /// caller's next sync round.
    fn link_file(&self, from: &Path, actor: &str, to: &Path) -> Result<(), StoreError> {
        self.create_actor_dir(actor)?;
        fs::hard_link(from, to).map_err(io_err(&self.root, "link", to))
    }

    /// Snapshot `seq` of `actor`'s place in its chain, for retention: read
    /// from a header whose file passes its checksum (computed once, then
    /// known: [`crate::snapshot_checked`]), else [`ChainLink::Unknown`].
    fn link_of(&self, actor: &str, seq: u64) -> ChainLink {
        let Ok(bytes) = self.open_snapshot(actor, seq) else {
            return ChainLink::Unknown;
        };
        let header = if bytes.checksum_verified() {
            peek_header(&bytes)
        } else {
            let header = verify_header(&bytes);
            if header.is_ok() {
                self.checksum_passed(&bytes);
            }
            header
        };
        match header.map(|h| h.base) {
            Ok(None) => ChainLink::Full,
            Ok(Some(base)) => ChainLink::Delta { base: base.seq },
            Err(_) => ChainLink::Unknown,
        }
    }

    /// Hard-links snapshot `seq` of `src` as the same snapshot of `new`
    /// (quota counted; durable with the caller's next sync round); returns
    /// its length.
    fn link_snapshot(&self, src: &str, seq: u64, new: &str) -> Result<u64, StoreError> {
        let from = self.path(src, seq);
        let before = from.metadata().map_err(io_err(&self.root, "open", &from))?;
        let len = before.len();
        let to = self.path(new, seq);
        if to.exists() {
            return Err(io_err(&self.root, "link", &to)(
                io::ErrorKind::AlreadyExists.into(),
            ));
        }
        self.usage.reserve(len, 0)?;
        if let Err(e) = self.link_file(&from, new, &to) {
            // Linked after all (a race): the file is there and counted.
            let linked = !matches!(&e, StoreError::Io { source, .. }
                if source.kind() == io::ErrorKind::AlreadyExists)
                && to.exists();
            if !linked {
                self.usage.release(len);
            }
            return Err(e);
        }
        if let Ok(after) = to.metadata() {
            self.checked.relinked(&before, &after);
        }
        Ok(len)
    }

    /// Records `seq` as `actor`'s newest acknowledged snapshot: an empty
    /// marker file, created after the snapshot's rename is durable (so a
    /// marker never names a snapshot that was not written), then older
    /// markers are removed. Best effort: without a marker the check it
    /// enables is skipped, nothing else.
    fn mark_acknowledged(&self, actor: &str, seq: u64) {
        if seq == 0 {
            // Nothing older can stand in for snapshot 0: without it the
            // actor has no snapshot, which fails it anyway.
            return;
        }
        let dir = self.actor_dir(actor);
        let marker = dir.join(format!("{seq:020}{ACKED}"));
        if let Err(e) = File::create(&marker) {
            tracing::warn!(actor, "cannot write {}: {e}", marker.display());
            return;
        }
        let Ok(entries) = fs::read_dir(&dir) else {
            return;
        };
        for entry in entries.flatten() {
            if let Some((old, ACKED)) = canonical(&entry.file_name())
                && old < seq
            {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

impl SnapshotStore for LocalSnapshotStore {
    /// `epoch` is ignored: one process writes the folder (the data dir's
    /// `LOCK` fences the others).
    fn write(&self, actor: &str, seq: u64, _epoch: u64, bytes: &[u8]) -> Result<(), StoreError> {
        let len = bytes.len() as u64;
        let path = self.path(actor, seq);
        // Rewriting a sequence number replaces its file: count the difference.
        let replaced = path.metadata().map(|m| m.len()).unwrap_or(0);
        self.usage.reserve(len, replaced)?;
        let result = self.write_file(actor, seq, bytes);
        if result.is_err() {
            self.recount(&path, len);
        }
        result
    }

    /// A hard link `snapshots/<new>/<seq>.snap` to `src`'s file (and, for
    /// a delta, one to each file of its chain, oldest first), the folder
    /// entries made durable by one sync round for the whole chain (a round
    /// per link made a fork of a deep chain cost up to nine `syncfs`), then
    /// the acknowledged marker. Counted in the quota by
    /// the files' lengths, as every file is when the store is opened;
    /// returns their sum.
    fn fork(&self, src: &str, seq: u64, new: &str, _epoch: u64) -> Result<u64, StoreError> {
        let chain: Vec<u64> = chain_files(self, src, seq)?
            .into_iter()
            .map(|(at, _)| at)
            .collect();
        let mut total = 0;
        for at in chain {
            total += self.link_snapshot(src, at, new)?;
        }
        let dir = self.actor_dir(new);
        self.sync
            .sync()
            .map_err(io_err(&self.root, "fsync", &dir))?;
        self.mark_acknowledged(new, seq);
        Ok(total)
    }

    fn supports_deltas(&self) -> bool {
        true
    }

    fn list_acknowledged(
        &self,
        actor: &str,
    ) -> Result<(Vec<SnapshotEntry>, Option<u64>), StoreError> {
        let dir = self.actor_dir(actor);
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), None)),
            Err(e) => return Err(io_err(&self.root, "read", &dir)(e)),
        };
        let mut out = Vec::new();
        let mut acked: Option<u64> = None;
        for entry in entries {
            let entry = entry.map_err(io_err(&self.root, "read", &dir))?;
            match canonical(&entry.file_name()) {
                Some((seq, SNAPSHOT)) => {
                    let bytes = entry.metadata().map(|m| m.len()).unwrap_or(0);
                    out.push(SnapshotEntry { seq, bytes });
                }
                Some((seq, _)) => acked = acked.max(Some(seq)),
                None => {}
            }
        }
        out.sort_by_key(|e| e.seq);
        Ok((out, acked))
    }

    fn holds_anything(&self, actor: &str) -> Result<bool, StoreError> {
        let dir = self.actor_dir(actor);
        match fs::read_dir(&dir) {
            Ok(mut entries) => Ok(entries.next().is_some()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_err(&self.root, "read", &dir)(e)),
        }
    }

    fn open_snapshot(&self, actor: &str, seq: u64) -> Result<SnapshotBytes, StoreError> {
        let path = self.path(actor, seq);
        let file = File::open(&path).map_err(io_err(&self.root, "open", &path))?;
        let checked = file.metadata().is_ok_and(|m| self.checked.is_checked(&m));
        // Snapshot files are immutable once renamed into place, and only
        // this process (holding the data dir's LOCK) writes or removes them.
        let bytes = SnapshotBytes::map_file(file).map_err(io_err(&self.root, "map", &path))?;
        Ok(if checked {
            bytes.with_checksum_verified()
        } else {
            bytes
        })
    }

    /// Remembers the file of `bytes` (mapped by
    /// [`LocalSnapshotStore::open_snapshot`]) as checked.
    fn checksum_passed(&self, bytes: &SnapshotBytes) {
        if let Some(meta) = bytes.file().and_then(|f| f.metadata().ok()) {
            self.checked.record(&meta);
        }
    }

    fn retain(&self, actor: &str, keep: usize) -> Result<Vec<u64>, StoreError> {
        let list = self.list(actor)?;
        if list.len() <= keep.max(1) {
            return Ok(Vec::new());
        }
        let doomed = chain_retention(&list, keep, |seq| self.link_of(actor, seq));
        for entry in list.iter().filter(|e| doomed.contains(&e.seq)) {
            let path = self.path(actor, entry.seq);
            self.checked.forget(&path);
            fs::remove_file(&path).map_err(io_err(&self.root, "remove", &path))?;
            self.usage.release(entry.bytes);
        }
        Ok(doomed)
    }

    fn remove(&self, actor: &str, seq: u64) -> Result<(), StoreError> {
        let path = self.path(actor, seq);
        let len = path.metadata().map(|m| m.len()).unwrap_or(0);
        self.checked.forget(&path);
        match fs::remove_file(&path) {
            Ok(()) => {
                self.usage.release(len);
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(&self.root, "remove", &path)(e)),
        }
    }

    /// Overwrites `clock.mark` in place with one `pwrite` of a fixed-width
    /// record (20 zero-padded decimal digits and a newline, the widest a
    /// `u64` needs), without fsync: a `kill -9` leaves the old record or
    /// the new one, never a mix, and the write costs no temporary file,
    /// rename or journal entry for a folder (it runs when a guest's clock
    /// reading passes the mark, and at a pause over such a lease). The
    /// actor's folder is created if missing.
    fn write_clock_mark(&self, actor: &str, clock_ns: u64) -> Result<(), StoreError> {
        let dir = self.actor_dir(actor);
        let path = dir.join(CLOCK_MARK);
        let open = || {
            File::options()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
        };
        let file = match open() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(&dir).map_err(io_err(&self.root, "create", &dir))?;
                open()
            }
            other => other,
        }
        .map_err(io_err(&self.root, "open", &path))?;
        file.write_all_at(format!("{clock_ns:020}\n").as_bytes(), 0)
            .map_err(io_err(&self.root, "write", &path))
    }

    fn clock_mark(&self, actor: &str) -> u64 {
        let path = self.actor_dir(actor).join(CLOCK_MARK);
        match fs::read_to_string(&path) {
            Ok(text) => text.trim().parse().unwrap_or_else(|e| {
                tracing::warn!(actor, "ignoring unreadable clock mark: {e}");
                0
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(e) => {
                tracing::warn!(actor, "ignoring unreadable clock mark: {e}");
                0
            }
        }
    }

    fn keeps_logs(&self) -> bool {
        true
    }

    fn append_log(&self, actor: &str, bytes: &[u8]) -> Result<(), StoreError> {
        use std::io::Write as _;
        let dir = self.actor_dir(actor);
        let path = dir.join(LOG);
        let open = || File::options().append(true).create(true).open(&path);
        let mut file = match open() {
            // The first lines of an actor whose snapshot 0 is still a
            // journal entry (its `stasis_init` printed).
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(&dir).map_err(io_err(&self.root, "create", &dir))?;
                open()
            }
            other => other,
        }
        .map_err(io_err(&self.root, "append", &path))?;
        file.write_all(bytes)
            .map_err(io_err(&self.root, "append", &path))
    }

    fn replace_log(&self, actor: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let dir = self.actor_dir(actor);
        let next = dir.join(LOG_NEXT);
        fs::write(&next, bytes).map_err(io_err(&self.root, "write", &next))?;
        let path = dir.join(LOG);
        fs::rename(&next, &path).map_err(io_err(&self.root, "rename", &path))
    }

    fn read_log(&self, actor: &str) -> Result<Vec<u8>, StoreError> {
        let path = self.actor_dir(actor).join(LOG);
        match fs::read(&path) {
            Ok(bytes) => Ok(bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(io_err(&self.root, "read", &path)(e)),
        }
    }

    fn remove_actor(&self, actor: &str) -> Result<(), StoreError> {
        let list = self.list(actor)?;
        for entry in &list {
            self.checked.forget(&self.path(actor, entry.seq));
        }
        let total: u64 = list.iter().map(|e| e.bytes).sum();
        let dir = self.actor_dir(actor);
        match fs::remove_dir_all(&dir) {
            Ok(()) => {
                self.usage.release(total);
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(&self.root, "remove", &dir)(e)),
        }
    }

    fn used_bytes(&self) -> u64 {
        self.usage.used_bytes()
    }

    fn actors(&self) -> Result<Vec<String>, StoreError> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.root).map_err(io_err(&self.root, "read", &self.root))? {
            let entry = entry.map_err(io_err(&self.root, "read", &self.root))?;
            if entry.path().is_dir() {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        Ok(names)
    }

    fn location(&self, actor: &str) -> String {
        self.actor_dir(actor).display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::capture::empty_snapshot;

    #[test]
    fn only_canonical_names_are_snapshots() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = LocalSnapshotStore::open(tmp.path(), None).expect("open");
        let (seven, eight) = (empty_snapshot(7), empty_snapshot(8));
        store.write("a", 7, 0, &seven).expect("write");
        let dir = store.actor_dir("a");
        for stray in [
            "5.snap",
            "+5.snap",
            "0005.snap",
            "x.snap",
            "00000000000000000006.bak",
        ] {
            std::fs::write(dir.join(stray), b"junk").expect("stray");
        }
        let list = store.list("a").expect("list");
        assert_eq!(
            list,
            [SnapshotEntry {
                seq: 7,
                bytes: seven.len() as u64
            }]
        );
        store.write("a", 8, 0, &eight).expect("write");
        assert_eq!(store.retain("a", 1).expect("retain"), [7]);
        assert!(dir.join("5.snap").exists(), "strays are left alone");
    }

    #[test]
    fn the_newest_acknowledged_snapshot_is_marked() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = LocalSnapshotStore::open(tmp.path(), None).expect("open");
        assert_eq!(store.list_acknowledged("a").expect("list"), (vec![], None));
        store.write("a", 3, 0, b"three").expect("write");
        store.write("a", 4, 0, b"four").expect("write");
        let (list, acked) = store.list_acknowledged("a").expect("list");
        assert_eq!(list.len(), 2);
        assert_eq!(acked, Some(4));
        let dir = store.actor_dir("a");
        let markers: Vec<String> = std::fs::read_dir(&dir)
            .expect("dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".acked"))
            .collect();
        assert_eq!(markers, ["00000000000000000004.acked"], "one marker");
        // The newest deleted behind the store's back: the marker still
        // says 4, the listing ends at 3.
        std::fs::remove_file(store.path("a", 4)).expect("rm");
        let (list, acked) = store.list_acknowledged("a").expect("list");
        assert_eq!(list.last().map(|e| e.seq), Some(3));
        assert_eq!(acked, Some(4));
        store.remove_actor("a").expect("remove");
        assert!(!dir.exists());
    }
}
