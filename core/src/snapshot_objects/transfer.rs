//! The async object operations an [`ObjectSnapshotStore`](super::ObjectSnapshotStore)
//! runs on its own runtime (uploads are in `upload`): streamed downloads
//! into a cache file (temp file, checked against the listed length and
//! the snapshot's checksum trailer, then renamed), server-side copies,
//! small reads, listings and deletions.

use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::{StreamExt as _, TryStreamExt as _};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt as _};

use super::remote::{Failure, OP_TIMEOUT};
use crate::durable::TEMP_SUFFIX;

/// What an upload sends.
#[derive(Debug)]
pub(super) enum Source {
    /// Bytes in memory.
    Memory(Bytes),
    /// A local file (the cache copy), `len_bytes` long, read in parts so a
    /// big snapshot is never held twice in memory.
    File { path: PathBuf, len_bytes: u64 },
}

/// What [`download`] left.
#[derive(Debug)]
pub(super) enum Fetched {
    /// The object is in the cache file, its length and checksum checked.
    Cached,
    /// Two downloads of the listed length both fail the snapshot's own
    /// checksum: the object itself is corrupt. Its bytes (an unlinked
    /// temp file), never cached, so that verifying them names it.
    Corrupt(File),
}

/// Why one download was not cached.
enum Bad {
    /// The store or the cache failed.
    Failed(Failure),
    /// The bytes differ from the listed length (path-free description).
    Length(String),
    /// The listed length, but the checksum trailer does not match: the
    /// description and the downloaded file.
    Checksum(String, File),
}

/// Downloads `path`, listed as `listed` bytes, into `dest` (a cache file):
/// streamed into a temp file in `dest`'s folder, checked, then renamed, so
/// `dest` is whole or absent. Checked: the length equals `listed` and the
/// CRC32C trailer (a snapshot's last 4 bytes, over the bytes before it)
/// matches. A download that fails a check, or breaks off, is tried once
/// more; only then is it an error ([`Failure::Garbled`], naming the
/// mismatch) or, for two downloads of the right length with the same bad
/// checksum, the object's own corruption ([`Fetched::Corrupt`]).
pub(super) async fn download(
    store: Arc<dyn ObjectStore>,
    path: Path,
    dest: PathBuf,
    listed: u64,
) -> Result<Fetched, Failure> {
    let first = match fetch_once(&store, &path, &dest, listed).await {
        Ok(()) => return Ok(Fetched::Cached),
        Err(Bad::Failed(e)) if e.is_not_found() => return Err(e),
        Err(Bad::Failed(e)) => e.full(),
        Err(Bad::Length(what) | Bad::Checksum(what, _)) => what,
    };
    tracing::warn!(%path, "downloading again: {first}");
    match fetch_once(&store, &path, &dest, listed).await {
        Ok(()) => Ok(Fetched::Cached),
        Err(Bad::Failed(e)) => Err(e),
        Err(Bad::Length(what)) => Err(Failure::Garbled(what)),
        Err(Bad::Checksum(what, file)) => {
            tracing::error!(%path, "downloaded twice, the object itself is corrupt: {what}");
            Ok(Fetched::Corrupt(file))
        }
    }
}

/// One download of [`download`].
async fn fetch_once(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    dest: &std::path::Path,
    listed: u64,
) -> Result<(), Bad> {
    let dir = dest
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    let failed = |e: Failure| Bad::Failed(e);
    std::fs::create_dir_all(&dir).map_err(|e| failed(e.into()))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".stasis-")
        .suffix(TEMP_SUFFIX)
        .tempfile_in(&dir)
        .map_err(|e| failed(e.into()))?;
    let mut stream = store
        .get(path)
        .await
        .map_err(|e| failed(e.into()))?
        .into_stream();
    let mut crc = Trailer::default();
    let mut got = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| failed(e.into()))?;
        got += chunk.len() as u64;
        if got > listed {
            break;
        }
        crc.feed(&chunk);
        tmp.write_all(&chunk).map_err(|e| failed(e.into()))?;
    }
    if got != listed {
        let got = if got > listed {
            "more than".to_owned()
        } else {
            format!("{got} of")
        };
        return Err(Bad::Length(format!(
            "the download does not match the store's listing: {got} the {listed} bytes listed"
        )));
    }
    if let Some((recorded, computed)) = crc.mismatch() {
        let what = format!(
            "the download does not match its checksum trailer (recorded {recorded:#010x}, \
             computed {computed:#010x})"
        );
        return Err(Bad::Checksum(what, tmp.into_file()));
    }
    tmp.persist(dest).map_err(|e| failed(e.error.into()))?;
    Ok(())
}

/// A CRC32C over all but the last 4 bytes fed, and those 4 bytes (the
/// snapshot's trailer, `format.rs`).
#[derive(Default)]
struct Trailer {
    crc: u32,
    /// The last (up to) 4 bytes seen, not yet in `crc`.
    tail: Vec<u8>,
}

impl Trailer {
    fn feed(&mut self, mut bytes: &[u8]) {
        if bytes.len() >= 4 {
            self.crc = crc32c::crc32c_append(self.crc, &self.tail);
            self.tail.clear();
            let (body, tail) = bytes.split_at(bytes.len() - 4);
            self.crc = crc32c::crc32c_append(self.crc, body);
            bytes = tail;
        }
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 4 {
            let extra = self.tail.len() - 4;
            self.crc = crc32c::crc32c_append(self.crc, &self.tail[..extra]);
            self.tail.drain(..extra);
        }
    }

    /// The recorded and computed checksums when they differ (recorded 0
    /// when fewer than 4 bytes came: no trailer at all).
    fn mismatch(&self) -> Option<(u32, u32)> {
        let Ok(trailer) = <[u8; 4]>::try_from(self.tail.as_slice()) else {
            return Some((0, self.crc));
        };
        let recorded = u32::from_le_bytes(trailer);
        (recorded != self.crc).then_some((recorded, self.crc))
    }
}

/// Copies object `from` to `to` inside the store, replacing `to`: no byte
/// passes through this process (S3 `CopyObject`; a hard link for a
/// `file://` store, as `object_store`'s `LocalFileSystem` does it).
pub(super) async fn copy(store: Arc<dyn ObjectStore>, from: Path, to: Path) -> Result<(), Failure> {
    store.copy(&from, &to).await?;
    Ok(())
}

/// The whole of a small object (pointer, clock mark).
pub(super) async fn read_small(store: Arc<dyn ObjectStore>, path: Path) -> Result<Bytes, Failure> {
    Ok(store.get(&path).await?.bytes().await?)
}

/// The whole of object `path`, its size learnt first so the body gets a
/// timeout fitting it.
pub(super) async fn read_sized(store: Arc<dyn ObjectStore>, path: Path) -> Result<Bytes, Failure> {
    let meta = tokio::time::timeout(OP_TIMEOUT, store.head(&path))
        .await
        .map_err(|_| Failure::TimedOut(OP_TIMEOUT))??;
    let limit = super::remote::timeout_for(meta.size);
    tokio::time::timeout(limit, read_small(store, path))
        .await
        .map_err(|_| Failure::TimedOut(limit))?
}

/// Every object under `prefix` (recursively).
pub(super) async fn list(
    store: Arc<dyn ObjectStore>,
    prefix: Path,
) -> Result<Vec<ObjectMeta>, Failure> {
    Ok(store.list(Some(&prefix)).try_collect().await?)
}

/// Deletes `paths`, one by one; a missing one is not an error.
pub(super) async fn delete(store: Arc<dyn ObjectStore>, paths: Vec<Path>) -> Result<(), Failure> {
    for path in paths {
        match store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
