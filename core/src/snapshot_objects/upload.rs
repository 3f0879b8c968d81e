//! Uploads that tell the truth: one PUT up to [`MULTIPART_THRESHOLD_BYTES`],
//! a multipart upload above, and a read-back when the store's answer to
//! the request that makes the object appear (the PUT, or
//! `CompleteMultipartUpload`) is lost.
//!
//! # A lost answer
//! A connection reset, a timeout, a 5xx or an unexpected 4xx (the retry of
//! an applied `CompleteMultipartUpload` is refused, its upload id being
//! gone) after the request was sent says nothing of whether the store
//! applied it. The object is then read back: present with the bytes that
//! were sent, the write succeeded (the failure is logged); absent or with
//! other bytes, the write failed and its failure is reported; when the
//! read-back fails too, the outcome is unknown ([`Failure::Unknown`],
//! which becomes [`StoreError::Unknown`]).
//!
//! # Multipart hygiene
//! Every failure of a multipart upload that did not complete aborts it (a
//! part failed, the time ran out, the object is absent after a lost
//! `complete`), and so does dropping the upload's future (the store's own
//! timeout, its runtime stopping): the abort then runs as a task of its
//! own. An abort that fails is logged and named in the error next to the
//! cause. What a killed process leaves behind is swept at open (a
//! `file://` store) or by the bucket's lifecycle rule (S3, see
//! docs/operations.md).
//!
//! [`StoreError::Unknown`]: crate::snapshot_store::StoreError::Unknown

use std::fs::File;
use std::io::Read as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt as _;
use object_store::path::Path;
use object_store::{MultipartUpload, ObjectStore, ObjectStoreExt as _, PutPayload};
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout_at};

use super::remote::{Failure, OP_TIMEOUT, timeout_for};
use super::transfer::Source;

/// Objects larger than this are uploaded in parts of this size (bytes).
pub(super) const MULTIPART_THRESHOLD_BYTES: usize = 8 << 20;

/// Parts of one multipart upload sent at once.
const PARTS_IN_FLIGHT: usize = 4;

/// How a failed request left the object.
enum Sent {
    /// Nothing was applied (the request never made the object appear).
    Not(Failure),
    /// The request may have been applied: read back to know.
    Maybe(Failure),
}

/// Uploads `source` to `path` within [`timeout_for`] its length, then,
/// when the answer to the final request was lost, reads the object back
/// (module docs). The object appears whole or not at all. The caller's own
/// timeout must be [`upload_time`] so the read-back and an abort fit.
pub(super) async fn upload(
    store: Arc<dyn ObjectStore>,
    path: Path,
    source: Source,
) -> Result<(), Failure> {
    let limit = timeout_for(source.len());
    let sent = if source.len() <= MULTIPART_THRESHOLD_BYTES as u64 {
        single(&store, &path, &source, limit).await
    } else {
        multipart(&store, &path, &source, limit).await
    };
    match sent {
        Ok(()) => Ok(()),
        Err(Sent::Not(failure)) => Err(failure),
        Err(Sent::Maybe(failure)) => resolve(&store, &path, &source, failure).await,
    }
}

/// The time [`upload`] of `len_bytes` may take in all: the upload, a
/// read-back of the same size and an abort.
pub(super) fn upload_time(len_bytes: u64) -> Duration {
    timeout_for(len_bytes) * 2 + OP_TIMEOUT
}

/// The read-back of a write whose answer was lost (module docs).
async fn resolve(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    source: &Source,
    failure: Failure,
) -> Result<(), Failure> {
    let limit = timeout_for(source.len());
    let found = tokio::time::timeout(limit, holds(store, path, source))
        .await
        .unwrap_or(Err(Failure::TimedOut(limit)));
    match found {
        Ok(true) => {
            tracing::warn!(
                %path,
                "the store's answer to a write was lost, but the object reads back whole: \
                 written ({})",
                failure.full()
            );
            Ok(())
        }
        Ok(false) => Err(failure),
        Err(read_back) => Err(Failure::Unknown {
            write: Box::new(failure),
            read_back: Box::new(read_back),
        }),
    }
}

/// Whether object `path` holds exactly the bytes of `source`: `false` if
/// it is absent or differs.
async fn holds(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    source: &Source,
) -> Result<bool, Failure> {
    let meta = match store.head(path).await {
        Ok(meta) => meta,
        Err(object_store::Error::NotFound { .. }) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    if meta.size != source.len() {
        return Ok(false);
    }
    let mut expected = source.reader()?;
    let mut stream = match store.get(path).await {
        Ok(got) => got.into_stream(),
        Err(object_store::Error::NotFound { .. }) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let mut seen = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        let mut want = vec![0; chunk.len()];
        if expected.read_exact(&mut want).is_err() || want != chunk {
            return Ok(false);
        }
        seen += chunk.len() as u64;
    }
    Ok(seen == source.len())
}

/// One PUT of `source`.
async fn single(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    source: &Source,
    limit: Duration,
) -> Result<(), Sent> {
    let bytes = source.bytes().map_err(|e| Sent::Not(e.into()))?;
    match tokio::time::timeout(limit, store.put(path, PutPayload::from(bytes))).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Sent::Maybe(e.into())),
        Err(_) => Err(Sent::Maybe(Failure::TimedOut(limit))),
    }
}

/// A multipart upload of `source`, in parts of
/// [`MULTIPART_THRESHOLD_BYTES`], at most [`PARTS_IN_FLIGHT`] at once.
async fn multipart(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    source: &Source,
    limit: Duration,
) -> Result<(), Sent> {
    let deadline = Instant::now() + limit;
    let over = || Failure::TimedOut(limit);
    let upload = match timeout_at(deadline, store.put_multipart(path)).await {
        Ok(Ok(upload)) => upload,
        Ok(Err(e)) => return Err(Sent::Not(e.into())),
        // An upload may have been created whose id is unknown here: the
        // sweep (module docs) removes it.
        Err(_) => return Err(Sent::Not(over())),
    };
    let mut upload = Pending {
        upload: Some(upload),
        parts: JoinSet::new(),
        path: path.clone(),
    };
    let sent = match timeout_at(deadline, upload.send_parts(source)).await {
        Ok(sent) => sent,
        Err(_) => Err(over()),
    };
    if let Err(cause) = sent {
        return Err(Sent::Not(upload.abort(cause).await));
    }
    let completed = match timeout_at(deadline, upload.complete()).await {
        Ok(Ok(())) => {
            upload.upload = None;
            return Ok(());
        }
        Ok(Err(e)) => Failure::from(e),
        Err(_) => over(),
    };
    // Whether the store applied it is unknown: read back first, and abort
    // only when the object is not there (an abort of a completed upload is
    // harmless, but it must not race a completion still under way).
    match resolve(store, path, source, completed).await {
        Ok(()) => {
            upload.upload = None;
            Ok(())
        }
        Err(failure) => Err(Sent::Not(upload.abort(failure).await)),
    }
}

/// A multipart upload under way: aborted (in a task of its own) if
/// dropped before it completed or was aborted.
struct Pending {
    upload: Option<Box<dyn MultipartUpload>>,
    parts: JoinSet<object_store::Result<()>>,
    path: Path,
}

impl Pending {
    /// Hands `source` to the upload part by part, at most
    /// [`PARTS_IN_FLIGHT`] parts in flight, and waits for every part.
    async fn send_parts(&mut self, source: &Source) -> Result<(), Failure> {
        let Some(upload) = self.upload.as_mut() else {
            return Err(Failure::Stopped);
        };
        let mut reader = source.reader()?;
        loop {
            while self.parts.len() >= PARTS_IN_FLIGHT {
                joined(self.parts.join_next().await)?;
            }
            let mut part = Vec::with_capacity(MULTIPART_THRESHOLD_BYTES);
            let read = (&mut reader)
                .take(MULTIPART_THRESHOLD_BYTES as u64)
                .read_to_end(&mut part)?;
            if read == 0 {
                break;
            }
            self.parts
                .spawn(upload.put_part(PutPayload::from(Bytes::from(part))));
        }
        while let Some(done) = self.parts.join_next().await {
            joined(Some(done))?;
        }
        Ok(())
    }

    /// Sends `CompleteMultipartUpload`.
    async fn complete(&mut self) -> object_store::Result<()> {
        match self.upload.as_mut() {
            Some(upload) => upload.complete().await.map(|_| ()),
            None => Ok(()),
        }
    }

    /// Aborts the upload after `cause`: the error to report, naming the
    /// abort's own failure too if it failed.
    async fn abort(&mut self, cause: Failure) -> Failure {
        self.parts.abort_all();
        let Some(mut upload) = self.upload.take() else {
            return cause;
        };
        match upload.abort().await {
            Ok(()) => cause,
            Err(abort) => {
                let abort = Failure::from(abort);
                tracing::warn!(
                    path = %self.path,
                    "cannot abort a failed multipart upload ({}) after: {}",
                    abort.full(),
                    cause.full()
                );
                Failure::AbortFailed {
                    cause: Box::new(cause),
                    abort: Box::new(abort),
                }
            }
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let Some(mut upload) = self.upload.take() else {
            return;
        };
        let path = self.path.clone();
        // Dropped mid-way (a timeout, the runtime stopping): abort in a
        // task of its own, best effort (the sweep catches the rest).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = upload.abort().await {
                    tracing::warn!(%path, "cannot abort a dropped multipart upload: {e}");
                }
            });
        }
    }
}

/// The outcome of one part's task.
fn joined(
    done: Option<Result<object_store::Result<()>, tokio::task::JoinError>>,
) -> Result<(), Failure> {
    match done {
        None | Some(Ok(Ok(()))) => Ok(()),
        Some(Ok(Err(e))) => Err(e.into()),
        Some(Err(_)) => Err(Failure::Stopped),
    }
}

impl Source {
    /// Length in bytes.
    pub(super) fn len(&self) -> u64 {
        match self {
            Self::Memory(bytes) => bytes.len() as u64,
            Self::File { len_bytes, .. } => *len_bytes,
        }
    }

    /// The whole of it in memory (a small one).
    fn bytes(&self) -> std::io::Result<Bytes> {
        match self {
            Self::Memory(bytes) => Ok(bytes.clone()),
            Self::File { path, .. } => Ok(Bytes::from(std::fs::read(path)?)),
        }
    }

    /// A reader of its bytes from the start.
    fn reader(&self) -> std::io::Result<Box<dyn std::io::Read + Send>> {
        match self {
            Self::Memory(bytes) => Ok(Box::new(std::io::Cursor::new(bytes.clone()))),
            Self::File { path, .. } => Ok(Box::new(std::io::BufReader::new(File::open(path)?))),
        }
    }
}
