//! The cache of compiled functions that wasmtime's incremental compilation
//! keeps ([`CompileCache`], a [`wasmtime::CacheStore`]): Cranelift looks a
//! function up by a key it derives from the function's code and the
//! settings, so a module whose functions were compiled before costs only
//! what is new in it. Every JavaScript template is the same engine with
//! another evaluated script (docs/javascript.md), so its second push
//! compiles almost nothing.
//!
//! The cache holds entries in memory up to a byte budget (then new ones
//! are not kept); with a folder ([`CompileCache::in_folder`], the CLI's
//! `~/.cache/stasis/compiled`) each entry is also a file named by the
//! SHA-256 of its key, in a subfolder of this wasmtime's version, written
//! whole (a temporary file renamed), and read back by later processes.
//!
//! Cranelift trusts what an entry holds (machine code), so a file is
//! used only if it is whole and is what was written for its key: it holds
//! the SHA-256 of the key and of the value before the value, both
//! checked on every read. A damaged or foreign file is a miss (the
//! function is compiled again and the file replaced). Opening the folder
//! deletes other wasmtime versions' subfolders and temporary files more
//! than an hour old that killed writers left. The folder is made
//! readable and writable by its owner only; whoever else can write it
//! could still put code there that passes the checks, so it must not be
//! shared with other users (`STASIS_CACHE_DIR` is the user's own).

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Mutex;

use sha2::{Digest as _, Sha256};

/// The subfolder of this wasmtime's entries (the workspace pins
/// `=48.0.8`; another version's entries are misses anyway, and its folder
/// can be deleted).
const WASMTIME: &str = "wasmtime-48.0.8";

/// The bytes of entries a cache keeps in memory at most.
const MEMORY_BUDGET: usize = 256 << 20;

/// Compiled functions by key, in memory and optionally in a folder.
#[derive(Debug, Default)]
pub struct CompileCache {
    memory: Mutex<Kept>,
    folder: Option<PathBuf>,
}

#[derive(Debug, Default)]
struct Kept {
    entries: HashMap<Vec<u8>, Vec<u8>>,
    bytes: usize,
}

impl CompileCache {
    /// A cache in memory only (a server's: it lives as long as the process).
    #[must_use]
    pub fn in_memory() -> Self {
        Self::default()
    }

    /// A cache kept in `folder` too (created when first written), shared by
    /// the processes that use it.
    #[must_use]
    pub fn in_folder(folder: PathBuf) -> Self {
        forget_others(&folder);
        Self {
            memory: Mutex::default(),
            folder: Some(folder),
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn file(&self, key: &[u8]) -> Option<PathBuf> {
        let folder = self.folder.as_ref()?;
        Some(folder.join(WASMTIME).join(hex::encode(Sha256::digest(key))))
    }

    /// The value a file holds for `key`, if it is whole and written for it.
    fn read_file(&self, key: &[u8]) -> Option<Vec<u8>> {
        let file = std::fs::read(self.file(key)?).ok()?;
        let (sums, value) = file.split_at_checked(64)?;
        let (key_sum, value_sum) = sums.split_at(32);
        (key_sum == Sha256::digest(key).as_slice() && value_sum == Sha256::digest(value).as_slice())
            .then(|| value.to_vec())
    }

    fn keep(&self, key: &[u8], value: &[u8]) {
        let mut kept = self.kept();
        if kept.bytes + key.len() + value.len() > MEMORY_BUDGET {
            return;
        }
        kept.bytes += key.len() + value.len();
        if let Some(old) = kept.entries.insert(key.to_vec(), value.to_vec()) {
            kept.bytes -= key.len() + old.len();
        }
    }

    /// Writes `value` for `key` to `file` whole (the two checksums, then
    /// the value): a temporary file, then a rename.
    fn write_file(&self, file: &std::path::Path, key: &[u8], value: &[u8]) -> std::io::Result<()> {
        let folder = file.parent().unwrap_or(file);
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(folder)?;
        let mut tmp = tempfile::NamedTempFile::new_in(folder)?;
        tmp.write_all(&Sha256::digest(key))?;
        tmp.write_all(&Sha256::digest(value))?;
        tmp.write_all(value)?;
        tmp.persist(file).map_err(|e| e.error)?;
        Ok(())
    }
}

/// Deletes what another wasmtime version left in `folder` (its entries
/// are misses for this one), and the temporary files of writes that a
/// killed process left in this version's subfolder. Best effort: a
/// folder that cannot be read is left as it is.
fn forget_others(folder: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("wasmtime-") && name != WASMTIME {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let Ok(entries) = std::fs::read_dir(folder.join(WASMTIME)) else {
        return;
    };
    let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for entry in entries.flatten() {
        let stale = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(".tmp"))
            && entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|at| at < an_hour_ago);
        if stale {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

impl wasmtime::CacheStore for CompileCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        if let Some(value) = self.kept().entries.get(key) {
            return Some(Cow::Owned(value.clone()));
        }
        let value = self.read_file(key)?;
        self.keep(key, &value);
        Some(Cow::Owned(value))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        if let Some(file) = self.file(key)
            && let Err(e) = self.write_file(&file, key, &value)
        {
            tracing::debug!("compile cache: cannot write an entry: {e}");
        }
        self.keep(key, &value);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::CacheStore as _;

    #[test]
    fn entries_come_back_from_memory_and_from_the_folder() {
        let tmp = tempfile::tempdir().expect("tmp");
        let folder = tmp.path().join("compiled");
        let first = CompileCache::in_folder(folder.clone());
        assert!(first.get(b"k").is_none());
        assert!(first.insert(b"k", b"compiled".to_vec()));
        assert_eq!(first.get(b"k").as_deref(), Some(&b"compiled"[..]));
        // Another process: from the file.
        let second = CompileCache::in_folder(folder.clone());
        assert_eq!(second.get(b"k").as_deref(), Some(&b"compiled"[..]));
        // A damaged file, or one written for another key, is a miss.
        let file = second.file(b"k").expect("a file");
        let mut bytes = std::fs::read(&file).expect("read");
        *bytes.last_mut().expect("a value") ^= 1;
        std::fs::write(&file, &bytes).expect("damage");
        assert!(CompileCache::in_folder(folder.clone()).get(b"k").is_none());
        std::fs::copy(&file, second.file(b"other").expect("a file")).expect("copy");
        assert!(
            CompileCache::in_folder(folder.clone())
                .get(b"other")
                .is_none()
        );
        // Another version's folder goes when a cache opens the folder.
        let older = folder.join("wasmtime-47.0.0");
        std::fs::create_dir_all(&older).expect("an older version's folder");
        let _ = CompileCache::in_folder(folder.clone());
        assert!(!older.exists());
        assert!(folder.join(WASMTIME).exists());
        let memory = CompileCache::in_memory();
        assert!(memory.insert(b"k", b"v".to_vec()));
        assert_eq!(memory.get(b"k").as_deref(), Some(&b"v"[..]));
    }
}
