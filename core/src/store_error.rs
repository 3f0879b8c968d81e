//! How a [`SnapshotStore`](crate::snapshot_store::SnapshotStore) fails:
//! [`StoreError`], re-exported as `snapshot_store::StoreError`. Messages
//! name files and objects by their key in the store only, so they can be
//! shown to API clients; [`StoreError::detail`] adds the server's paths.

use std::io;

/// Why a snapshot could not be stored, listed, read or removed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Writing would exceed `--snapshot-quota`.
    #[error(
        "--snapshot-quota exceeded: {needed} more bytes needed, {used} of {quota} bytes in use"
    )]
    Quota {
        /// Size of the new snapshot, in bytes.
        needed: u64,
        /// Bytes in use now.
        used: u64,
        /// The quota, in bytes.
        quota: u64,
    },
    /// An I/O operation failed. The message names the file by its key in
    /// the store (e.g. `snapshots/NAME/SEQ.snap`), never by a server path,
    /// so it can be shown to API clients; [`StoreError::detail`] adds the
    /// path for the server log.
    #[error("{op} {key}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file, folder or object, relative to the store.
        key: String,
        /// The file, folder or object as the server knows it (a path).
        path: String,
        /// The OS error (`NotFound` for a missing snapshot).
        source: io::Error,
    },
    /// A write's answer was lost and the object could not be read back to
    /// know whether it took effect: it may or may not have. The message
    /// names the object by its key only, as [`StoreError::Io`]'s does;
    /// [`StoreError::detail`] adds the path and the full errors.
    #[error(
        "{op} {key}: the write may or may not have taken effect (its answer was lost): {reason}"
    )]
    Unknown {
        /// What was being done.
        op: &'static str,
        /// The object, relative to the store.
        key: String,
        /// The object as the server knows it, with the full errors.
        path: String,
        /// Why it is unknown, path-free.
        reason: String,
    },
    /// Refused before anything was written or deleted: the worker no
    /// longer holds the lease it hosts the actor under (it may be placed
    /// on another worker now), so it may not change the actor's snapshots.
    #[error(
        "worker {worker} holds no valid lease for actor {actor}: nothing was written (the actor may be placed on another worker now)"
    )]
    Fenced {
        /// The worker.
        worker: String,
        /// The actor.
        actor: String,
    },
}

impl StoreError {
    /// The message with the server-side path, for the server log (never
    /// for an API answer: [`Display`](std::fmt::Display) is path-free).
    #[must_use]
    pub fn detail(&self) -> String {
        match self {
            Self::Io {
                op, path, source, ..
            } => format!("{op} {path}: {source}"),
            Self::Unknown {
                op, path, reason, ..
            } => format!("{op} {path}: the write may or may not have taken effect: {reason}"),
            Self::Quota { .. } | Self::Fenced { .. } => self.to_string(),
        }
    }
}
