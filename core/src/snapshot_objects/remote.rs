//! The bridge from the synchronous [`SnapshotStore`] methods to the async
//! `object_store` client: a small tokio runtime owned by the store
//! ([`Bridge`]), one bounded wait per operation, and the mapping of
//! `object_store` errors to [`StoreError::Io`].
//!
//! Each call spawns its future on the store's own runtime (its own two
//! worker threads) and waits for the answer on the calling thread with a
//! blocking channel receive. It never calls `Handle::block_on`, so it is
//! safe from a blocking thread (`spawn_blocking`), from a plain thread and
//! from inside another runtime's async task (which it blocks for the
//! duration of the call, as any synchronous I/O would). Every operation has
//! a timeout ([`timeout_for`]): a dead or unreachable store answers an
//! error (`TimedOut`), never a hang.
//!
//! [`SnapshotStore`]: crate::snapshot_store::SnapshotStore

use std::error::Error as _;
use std::future::Future;
use std::io;
use std::sync::mpsc;
use std::time::Duration;

use tokio::runtime::{Handle, Runtime};

use crate::snapshot_store::StoreError;

/// Timeout of one small operation (list, head, delete, a small object).
pub(super) const OP_TIMEOUT: Duration = Duration::from_secs(30);

/// Throughput below which a big upload or download is given up, in bytes
/// per second: the timeout grows by one second per MiB.
const MIN_BYTES_PER_S: u64 = 1 << 20;

/// The timeout of an operation moving `len_bytes`: [`OP_TIMEOUT`] plus one
/// second per MiB (the store must sustain at least 1 MiB/s).
#[must_use]
pub(super) fn timeout_for(len_bytes: u64) -> Duration {
    OP_TIMEOUT + Duration::from_secs(len_bytes / MIN_BYTES_PER_S)
}

/// The store's own runtime. Dropping it shuts it down in the background
/// (never blocking, so the store may be dropped from an async task).
#[derive(Debug)]
pub(super) struct Bridge {
    runtime: Option<Runtime>,
    handle: Handle,
}

/// Why a bridged operation failed, before it is named by its key.
#[derive(Debug)]
pub(super) enum Failure {
    /// The object store answered an error.
    Store(object_store::Error),
    /// A local file (the cache) failed.
    Io(io::Error),
    /// No answer within the timeout.
    TimedOut(Duration),
    /// The store's runtime is gone (the operation was dropped).
    Stopped,
}

impl From<object_store::Error> for Failure {
    fn from(e: object_store::Error) -> Self {
        Self::Store(e)
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

impl Failure {
    /// True when the store said the object does not exist.
    pub(super) fn is_not_found(&self) -> bool {
        match self {
            Self::Store(object_store::Error::NotFound { .. }) => true,
            Self::Io(e) => e.kind() == io::ErrorKind::NotFound,
            _ => false,
        }
    }

    /// A [`StoreError::Io`] for `op` on `key` (relative to the store's
    /// prefix) of the store at `location` (its URL). The message shown to
    /// clients names the key and a path-free reason; the full error (which
    /// may name the endpoint or a local path) goes to
    /// [`StoreError::detail`] only.
    pub(super) fn named(self, op: &'static str, key: &str, location: &str) -> StoreError {
        let (source, full) = self.split();
        StoreError::Io {
            op,
            key: key.to_owned(),
            path: format!("{location}/{key} ({full})"),
            source,
        }
    }

    /// A path-free [`io::Error`] (kind and short reason) and the full
    /// error text for the server log.
    pub(super) fn split(self) -> (io::Error, String) {
        let full = self.full();
        let (kind, reason) = match &self {
            Self::Store(object_store::Error::NotFound { .. }) => {
                (io::ErrorKind::NotFound, "not found".to_owned())
            }
            Self::Io(e) if e.kind() == io::ErrorKind::NotFound => {
                (io::ErrorKind::NotFound, "not found".to_owned())
            }
            Self::Store(e) => {
                let kind = io_kind_in(e).unwrap_or(io::ErrorKind::Other);
                let store = match e {
                    object_store::Error::Generic { store, .. } => *store,
                    _ => "object",
                };
                if kind == io::ErrorKind::Other {
                    (kind, format!("{store} store request failed"))
                } else {
                    (kind, format!("{store} store request failed ({kind})"))
                }
            }
            // An OS error's text names no file; a wrapped one may.
            Self::Io(e) if e.raw_os_error().is_some() => (e.kind(), e.to_string()),
            Self::Io(e) => (e.kind(), e.kind().to_string()),
            Self::TimedOut(after) => (
                io::ErrorKind::TimedOut,
                format!(
                    "no answer from the object store within {}s",
                    after.as_secs()
                ),
            ),
            Self::Stopped => (
                io::ErrorKind::Other,
                "the object store client has stopped".to_owned(),
            ),
        };
        (io::Error::new(kind, reason), full)
    }

    /// The whole error chain, for the server log.
    fn full(&self) -> String {
        match self {
            Self::Store(e) => chain(e),
            Self::Io(e) => chain(e),
            Self::TimedOut(after) => format!("timed out after {after:?}"),
            Self::Stopped => "the store's runtime has shut down".to_owned(),
        }
    }
}

/// `e` and its sources, joined by `: `.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        next = cause.source();
    }
    text
}

/// The kind of the first [`io::Error`] among `e`'s sources (e.g.
/// `ConnectionRefused`), if any.
fn io_kind_in(e: &object_store::Error) -> Option<io::ErrorKind> {
    let mut next = e.source();
    while let Some(cause) = next {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            return Some(io.kind());
        }
        next = cause.source();
    }
    None
}

impl Bridge {
    /// Starts the runtime: two worker threads named `stasis-objects`, with
    /// I/O and timers.
    ///
    /// # Errors
    /// If the threads cannot be started.
    pub(super) fn start() -> io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("stasis-objects")
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        Ok(Self {
            runtime: Some(runtime),
            handle,
        })
    }

    /// Runs `future` on the store's runtime and waits (blocking the calling
    /// thread) for its answer, at most `timeout`; on timeout the future is
    /// dropped (cancelled) and [`Failure::TimedOut`] is returned.
    pub(super) fn run<T, F>(&self, timeout: Duration, future: F) -> Result<T, Failure>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, Failure>> + Send + 'static,
    {
        let (tx, rx) = mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let answer = match tokio::time::timeout(timeout, future).await {
                Ok(answer) => answer,
                Err(_) => Err(Failure::TimedOut(timeout)),
            };
            // The caller may have given up (below): nobody to tell.
            let _ = tx.send(answer);
        });
        // The runtime's own timer answers first; this one only guards
        // against a runtime that stopped polling.
        match rx.recv_timeout(timeout + Duration::from_secs(5)) {
            Ok(answer) => answer,
            Err(mpsc::RecvTimeoutError::Timeout) => Err(Failure::TimedOut(timeout)),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(Failure::Stopped),
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
