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
    /// A download does not match what the store listed (`what`: the
    /// mismatch, path-free).
    Garbled(String),
    /// A multipart upload failed (`cause`) and aborting it failed too.
    AbortFailed {
        /// Why the upload failed.
        cause: Box<Failure>,
        /// Why the abort failed.
        abort: Box<Failure>,
    },
    /// A write's answer was lost (`write`) and reading the object back
    /// failed too (`read_back`): it may or may not have taken effect.
    Unknown {
        /// The write's failure.
        write: Box<Failure>,
        /// The read-back's failure.
        read_back: Box<Failure>,
    },
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
    ///
    /// A [`Failure::Unknown`] (also behind a failed abort) becomes
    /// [`StoreError::Unknown`].
    pub(super) fn named(self, op: &'static str, key: &str, location: &str) -> StoreError {
        if self.is_unknown() {
            let (reason, full) = self.split();
            return StoreError::Unknown {
                op,
                key: key.to_owned(),
                path: format!("{location}/{key} ({full})"),
                reason: reason.to_string(),
            };
        }
        let (source, full) = self.split();
        StoreError::Io {
            op,
            key: key.to_owned(),
            path: format!("{location}/{key} ({full})"),
            source,
        }
    }

    /// Whether the outcome of the write that failed is unknown.
    fn is_unknown(&self) -> bool {
        match self {
            Self::Unknown { .. } => true,
            Self::AbortFailed { cause, .. } => cause.is_unknown(),
            _ => false,
        }
    }

    /// A path-free [`io::Error`] (kind and short reason) and the full
    /// error text for the server log.
    pub(super) fn split(self) -> (io::Error, String) {
        let (kind, reason) = self.describe();
        (io::Error::new(kind, reason), self.full())
    }

    /// The kind and the path-free reason of [`Failure::split`].
    fn describe(&self) -> (io::ErrorKind, String) {
        match self {
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
                match cause_of(e) {
                    Some(cause) => (kind, format!("{store} store request failed: {cause}")),
                    None => (kind, format!("{store} store request failed")),
                }
            }
            Self::Garbled(what) => (io::ErrorKind::InvalidData, what.clone()),
            Self::AbortFailed { cause, abort } => {
                let (kind, cause) = cause.describe();
                let (_, abort) = abort.describe();
                (
                    kind,
                    format!("{cause}; aborting the multipart upload failed too: {abort}"),
                )
            }
            Self::Unknown { write, read_back } => {
                let (_, write) = write.describe();
                let (_, read_back) = read_back.describe();
                (
                    io::ErrorKind::Other,
                    format!("{write}; reading the object back failed: {read_back}"),
                )
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
        }
    }

    /// The whole error chain, for the server log.
    pub(super) fn full(&self) -> String {
        match self {
            Self::Store(e) => chain(e),
            Self::Io(e) => chain(e),
            Self::TimedOut(after) => format!("timed out after {after:?}"),
            Self::Stopped => "the store's runtime has shut down".to_owned(),
            Self::Garbled(what) => what.clone(),
            Self::AbortFailed { cause, abort } => format!(
                "{}; aborting the multipart upload failed too: {}",
                cause.full(),
                abort.full()
            ),
            Self::Unknown { write, read_back } => format!(
                "{}; reading the object back failed: {}",
                write.full(),
                read_back.full()
            ),
        }
    }
}

/// A path-free cause of store error `e`: the HTTP status the store
/// answered, else the connection's failure (`connection reset`, ...),
/// else the kind of request failure; `None` if nothing is known.
fn cause_of(e: &object_store::Error) -> Option<String> {
    use object_store::client::{HttpError, HttpErrorKind};
    const STATUS: &str = "Server returned non-2xx status code: ";
    let mut http = None;
    let mut io_kind = None;
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(cause) = next {
        // The status line only: the body may name the bucket or the key.
        if let Some(rest) = cause.to_string().strip_prefix(STATUS) {
            let status = rest.split(':').next().unwrap_or_default().trim();
            return Some(format!("answered {status}"));
        }
        if let Some(h) = cause.downcast_ref::<HttpError>() {
            http.get_or_insert(h.kind());
        }
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            io_kind.get_or_insert(io.kind());
        }
        next = cause.source();
    }
    if let Some(kind) = io_kind {
        return Some(kind.to_string());
    }
    http.map(|kind| {
        match kind {
            HttpErrorKind::Connect => "cannot connect",
            HttpErrorKind::Request => "the request failed",
            HttpErrorKind::Timeout => "the request timed out",
            HttpErrorKind::Interrupted => "the connection was interrupted",
            HttpErrorKind::Decode => "the answer could not be read",
            _ => "unknown HTTP failure",
        }
        .to_owned()
    })
}

/// `e` and its sources, joined by `: `.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    crate::error_chain::with_causes(e)
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
