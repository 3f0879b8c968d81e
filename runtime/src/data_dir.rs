//! Files every writer of a data dir shares: the `LOCK` that keeps two
//! processes out of one data dir, and the one atomic file write.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use anyhow::Context as _;

/// Creates `dir` if missing and takes its `LOCK` (holding this process's
/// id); the lock lasts as long as the returned file is open.
///
/// # Errors
/// If another process holds it, or the file cannot be opened.
pub fn lock(dir: &Path) -> anyhow::Result<File> {
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
    file.set_len(0)?;
    writeln!(file, "{}", std::process::id())?;
    Ok(file)
}

/// Writes `bytes` to `path` so that a crash leaves the old file or the new
/// one, never a torn one: a temporary file, fsync, rename, fsync of the
/// folder.
///
/// # Errors
/// The I/O failure.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}
