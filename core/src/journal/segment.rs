//! The journal's segment files: named by the position of their first
//! byte, created zero-filled and synced (so a group commit's `fdatasync`
//! changes no size), the next one zero-filled ahead by a thread of its
//! own, and listed at start-up.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use super::SEGMENT_BYTES;
use crate::durable::sync_dir;

pub(super) fn segment_path(dir: &Path, start: u64) -> PathBuf {
    dir.join(format!("{start:020}.log"))
}

/// The segments in `dir`, by start position, oldest first.
pub(super) fn list_segments(dir: &Path) -> io::Result<Vec<u64>> {
    let mut starts = Vec::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if let Some(start) = name.strip_suffix(".log").and_then(|s| s.parse().ok()) {
            starts.push(start);
        }
    }
    starts.sort_unstable();
    Ok(starts)
}

/// Creates segment `start` and makes its name durable.
pub(super) fn new_segment(dir: &Path, start: u64) -> io::Result<File> {
    let file = zero_filled(&segment_path(dir, start), true)?;
    sync_dir(dir)?;
    Ok(file)
}

/// The next segment, zero-filled ahead of need by a thread of its own
/// while the writer fills the current one: rolling renames it (one
/// folder sync) instead of writing and syncing [`SEGMENT_BYTES`] of zeros
/// between two group commits. A leftover one is removed at open.
pub(super) fn spare_path(dir: &Path) -> PathBuf {
    dir.join("next.spare")
}

/// Creates `path` (`new`: it must not exist; else it is replaced) holding
/// [`SEGMENT_BYTES`] of zeros, synced.
fn zero_filled(path: &Path, new: bool) -> io::Result<File> {
    // A file left half-filled (the disk is full) would hold the space and
    // be read as a segment: it goes.
    zero_fill(path, new).inspect_err(|_| {
        let _ = fs::remove_file(path);
    })
}

fn zero_fill(path: &Path, new: bool) -> io::Result<File> {
    let mut file = OpenOptions::new()
        .create_new(new)
        .create(!new)
        .truncate(!new)
        .write(true)
        .open(path)?;
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..SEGMENT_BYTES / zeros.len() as u64 {
        file.write_all(&zeros)?;
    }
    file.sync_all()?;
    Ok(file)
}

/// Starts zero-filling the spare segment ([`spare_path`]).
pub(super) fn prepare_spare(dir: &Path) -> Option<JoinHandle<io::Result<File>>> {
    let path = spare_path(dir);
    std::thread::Builder::new()
        .name("stasis-journal-spare".into())
        .spawn(move || zero_filled(&path, false))
        .inspect_err(|e| tracing::warn!("journal: cannot prepare the next segment ahead: {e}"))
        .ok()
}

/// Segment `start`: the spare renamed, when it is ready (or being made:
/// waited for), else created now.
pub(super) fn next_segment(
    dir: &Path,
    start: u64,
    spare: Option<JoinHandle<io::Result<File>>>,
) -> io::Result<File> {
    let prepared = spare.map(|spare| {
        spare
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the spare segment's thread panicked")))
    });
    match prepared {
        Some(Ok(file)) => {
            fs::rename(spare_path(dir), segment_path(dir, start))?;
            sync_dir(dir)?;
            Ok(file)
        }
        Some(Err(e)) => {
            tracing::warn!("journal: the spare segment failed ({e}); creating the next one now");
            new_segment(dir, start)
        }
        None => new_segment(dir, start),
    }
}

/// The bytes free for an unprivileged writer on `dir`'s file system, if
/// it says.
pub(super) fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt as _;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `path` is NUL-terminated and `stat` is written by the call.
    let rc = unsafe { libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: the call succeeded, so it filled `stat`.
    let stat = unsafe { stat.assume_init() };
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}
