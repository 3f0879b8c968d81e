//! The async object operations an [`ObjectSnapshotStore`](super::ObjectSnapshotStore)
//! runs on its own runtime: uploads (one request up to
//! [`MULTIPART_THRESHOLD_BYTES`], multipart above, aborted on error),
//! streamed downloads into a cache file (temp file + rename), server-side
//! copies, small reads, listings and deletions.

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::{StreamExt as _, TryStreamExt as _};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt as _, PutPayload, WriteMultipart};

use super::remote::{Failure, OP_TIMEOUT};
use crate::durable::TEMP_SUFFIX;

/// Objects larger than this are uploaded in parts of this size (bytes).
pub(super) const MULTIPART_THRESHOLD_BYTES: usize = 8 << 20;

/// Parts of one multipart upload sent at once.
const PARTS_IN_FLIGHT: usize = 4;

/// What an upload sends.
#[derive(Debug)]
pub(super) enum Source {
    /// Bytes in memory.
    Memory(Bytes),
    /// A local file (the cache copy), `len_bytes` long, read in parts so a
    /// big snapshot is never held twice in memory.
    File { path: PathBuf, len_bytes: u64 },
}

/// Uploads `source` to `path`: one PUT up to [`MULTIPART_THRESHOLD_BYTES`],
/// else a multipart upload that is aborted if any part fails. The object
/// appears whole or not at all.
pub(super) async fn upload(
    store: Arc<dyn ObjectStore>,
    path: Path,
    source: Source,
) -> Result<(), Failure> {
    match source {
        Source::Memory(bytes) if bytes.len() <= MULTIPART_THRESHOLD_BYTES => {
            store.put(&path, PutPayload::from(bytes)).await?;
            Ok(())
        }
        Source::File {
            path: file,
            len_bytes,
        } if len_bytes <= MULTIPART_THRESHOLD_BYTES as u64 => {
            let bytes = std::fs::read(file)?;
            store.put(&path, PutPayload::from(bytes)).await?;
            Ok(())
        }
        source => {
            let upload = store.put_multipart(&path).await?;
            let mut writer = WriteMultipart::new_with_chunk_size(upload, MULTIPART_THRESHOLD_BYTES);
            match send_parts(&mut writer, source).await {
                Ok(()) => {
                    // `finish` aborts the upload itself when it fails.
                    writer.finish().await?;
                    Ok(())
                }
                Err(e) => {
                    if let Err(abort) = writer.abort().await {
                        tracing::warn!(%path, "cannot abort a failed multipart upload: {abort}");
                    }
                    Err(e)
                }
            }
        }
    }
}

/// Hands `source` to `writer` part by part, at most [`PARTS_IN_FLIGHT`]
/// parts in flight.
async fn send_parts(writer: &mut WriteMultipart, source: Source) -> Result<(), Failure> {
    match source {
        Source::Memory(bytes) => {
            writer.put(bytes);
            Ok(())
        }
        Source::File { path, .. } => {
            let mut file = File::open(path)?;
            loop {
                writer.wait_for_capacity(PARTS_IN_FLIGHT).await?;
                let mut part = Vec::with_capacity(MULTIPART_THRESHOLD_BYTES);
                let read = (&mut file)
                    .take(MULTIPART_THRESHOLD_BYTES as u64)
                    .read_to_end(&mut part)?;
                if read == 0 {
                    return Ok(());
                }
                writer.put(Bytes::from(part));
            }
        }
    }
}

/// Downloads `path` into `dest` (a cache file): streamed into a temp file
/// in `dest`'s folder, then renamed, so `dest` is whole or absent.
pub(super) async fn download(
    store: Arc<dyn ObjectStore>,
    path: Path,
    dest: PathBuf,
) -> Result<(), Failure> {
    let dir = dest
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    std::fs::create_dir_all(&dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".stasis-")
        .suffix(TEMP_SUFFIX)
        .tempfile_in(&dir)?;
    let mut stream = store.get(&path).await?.into_stream();
    while let Some(chunk) = stream.next().await {
        tmp.write_all(&chunk?)?;
    }
    tmp.persist(&dest).map_err(|e| e.error)?;
    Ok(())
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
