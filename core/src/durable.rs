//! Durable files: the one atomic-write routine of the project
//! ([`write_atomically`]) and the data dir's `LOCK` ([`lock_data_dir`]).
//!
//! A file written with [`write_atomically`] is, after a crash at any
//! point, either absent, or its previous content, or its new content: it is
//! written under a temporary name in the same folder, fsynced, renamed over
//! the final name, and the folder is fsynced so the rename itself survives.
//! [`write_atomically_in`] does the same with the two syncs shared between
//! concurrent writers ([`crate::sync_group`]), and [`write_new_in`] writes a
//! file under a new name with one of them, for files whose readers detect a
//! torn write.

use std::fs::File;
use std::io::{self, Write as _};
use std::path::Path;

use anyhow::Context as _;

use crate::sync_group::SyncGroup;

/// Suffix of the temporary files [`write_atomically`] leaves behind when
/// the process dies mid-write; openers of a folder may delete files with
/// names ending in it.
pub const TEMP_SUFFIX: &str = ".tmp";

/// Writes `bytes` to `path` atomically and durably (module docs): on
/// success the new content is on disk under its final name. The folder
/// must exist.
///
/// # Errors
/// The failing I/O operation's error; the temporary file is removed and
/// whatever `path` held before is untouched.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_via_temp(path, bytes, Durability::Fsync)
}

/// [`write_atomically`] where the two syncs (of the temporary file before
/// its rename, of the rename after it) are rounds of `group`, shared with
/// the other writers on the filesystem ([`SyncGroup`]): with many files
/// written at once, two `syncfs` calls make all of them durable.
///
/// # Errors
/// As [`write_atomically`].
pub fn write_atomically_in(group: &SyncGroup, path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_via_temp(path, bytes, Durability::Group(group))
}

/// Writes `bytes` under the new name `path` with one round of `group`
/// (where [`write_atomically_in`] takes two): the file is written under a
/// temporary name, renamed to `path` only if nothing has that name, then
/// one `syncfs` makes its content and its name durable together. On
/// success the file is on disk, whole. After a crash before that round
/// ended, `path` may be missing, or hold fewer bytes than were written:
/// only for files whose readers detect that (a snapshot's recorded length
/// and CRC32C) and that nobody was told about before this returned.
///
/// # Errors
/// [`io::ErrorKind::AlreadyExists`] if `path` exists (nothing written:
/// replace it with [`write_atomically_in`]); otherwise as
/// [`write_atomically`].
pub fn write_new_in(group: &SyncGroup, path: &Path, bytes: &[u8]) -> io::Result<()> {
    temp_beside(path, bytes)?
        .persist_noclobber(path)
        .map_err(|e| e.error)?;
    group.sync()
}

/// A temporary file holding `bytes` in the folder of `path` (named
/// `.stasis-*` + [`TEMP_SUFFIX`]), removed on drop unless persisted.
fn temp_beside(path: &Path, bytes: &[u8]) -> io::Result<tempfile::NamedTempFile> {
    let mut tmp = tempfile::Builder::new()
        .prefix(".stasis-")
        .suffix(TEMP_SUFFIX)
        .tempfile_in(folder_of(path))?;
    tmp.write_all(bytes)?;
    Ok(tmp)
}

/// Replaces `path` with `bytes` atomically but without fsync: after the
/// process is killed it holds the old or the new content, whole; after a
/// power loss it may hold either or be absent. For small files written
/// often, whose loss only costs a little (the clock mark). The folder must
/// exist.
///
/// # Errors
/// As [`write_atomically`].
pub fn replace_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_via_temp(path, bytes, Durability::None)
}

/// How [`write_via_temp`] makes the file and its rename durable.
#[derive(Clone, Copy)]
enum Durability<'a> {
    /// Not at all (the page cache only).
    None,
    /// `fsync` of the file, then of its folder.
    Fsync,
    /// Two rounds of a [`SyncGroup`].
    Group(&'a SyncGroup),
}

fn write_via_temp(path: &Path, bytes: &[u8], durability: Durability<'_>) -> io::Result<()> {
    let dir = folder_of(path);
    let tmp = temp_beside(path, bytes)?;
    match durability {
        Durability::None => {}
        Durability::Fsync => tmp.as_file().sync_all()?,
        Durability::Group(group) => group.sync()?,
    }
    tmp.persist(path).map_err(|e| e.error)?;
    match durability {
        Durability::None => Ok(()),
        Durability::Fsync => sync_dir(dir),
        Durability::Group(group) => group.sync(),
    }
}

/// Fsyncs folder `dir`, making the creation, rename or removal of its
/// entries durable.
///
/// # Errors
/// If the folder cannot be opened or synced.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The folder holding `path` (`.` for a bare file name).
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Creates data dir `dir` if needed and takes its `LOCK`: an exclusive
/// `flock` on `dir/LOCK`, which then holds this process's pid. The lock
/// lasts as long as the returned file is open, so one data dir is served by
/// one process (`stasis serve` or `stasis worker run`) at a time.
///
/// # Errors
/// If another process holds the lock (the message names its pid), or the
/// folder or the file cannot be created.
#[must_use = "the data dir is unlocked when the returned file is dropped"]
pub fn lock_data_dir(dir: &Path) -> anyhow::Result<File> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("LOCK");
    let mut file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            anyhow::bail!(
                "data dir {} is in use by another stasis process (pid {}); stop it or use another --data-dir",
                dir.display(),
                holder.trim()
            );
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("locking {}", path.display()));
        }
    }
    file.set_len(0)
        .with_context(|| format!("truncating {}", path.display()))?;
    // The pid only names the holder to another process: a full disk does
    // not keep the server from starting (docs/operations.md).
    match writeln!(file, "{}", std::process::id()) {
        Err(e) if e.kind() == std::io::ErrorKind::StorageFull => {
            tracing::warn!("{}: the pid is not written: {e}", path.display());
        }
        written => written.with_context(|| format!("writing the pid to {}", path.display()))?,
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomically_replaces_and_leaves_no_temp_file() {
        let tmp = tempfile::tempdir().expect("tmp");
        let path = tmp.path().join("file");
        write_atomically(&path, b"one").expect("first write");
        write_atomically(&path, b"two").expect("second write");
        assert_eq!(std::fs::read(&path).expect("read"), b"two");
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .expect("dir")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, ["file"]);
    }

    #[test]
    fn a_data_dir_is_locked_once() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("data");
        let held = lock_data_dir(&dir).expect("first lock");
        let pid = std::fs::read_to_string(dir.join("LOCK")).expect("pid");
        assert_eq!(pid.trim(), std::process::id().to_string());
        let err = lock_data_dir(&dir).expect_err("second lock");
        assert!(
            err.to_string().contains("in use by another stasis process"),
            "{err}"
        );
        drop(held);
        let _again = lock_data_dir(&dir).expect("lock after release");
    }
}
