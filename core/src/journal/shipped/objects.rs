//! Where a shipped journal's segments are kept ([`SegmentObjects`]: a
//! cluster's snapshot store, `crate::snapshot_objects`).

use std::time::Duration;

use bytes::Bytes;

use crate::snapshot_store::StoreError;

/// A journal segment in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentMeta {
    /// Its name under `journal/` (`<worker>/<run>-<round>.seg`).
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// How long ago it was written.
    pub age: Duration,
}

/// Where journal segments are kept (a cluster's snapshot store).
pub trait SegmentObjects: Send + Sync + std::fmt::Debug {
    /// Writes segment `name` whole.
    ///
    /// # Errors
    /// [`StoreError::Io`], or [`StoreError::Unknown`] when the answer was
    /// lost and the read-back failed too.
    fn put_segment(&self, name: &str, bytes: Bytes) -> Result<(), StoreError>;

    /// Every segment in the store, of every worker.
    ///
    /// # Errors
    /// [`StoreError::Io`].
    fn list_segments(&self) -> Result<Vec<SegmentMeta>, StoreError>;

    /// The bytes of segment `name`.
    ///
    /// # Errors
    /// [`StoreError::Io`], `NotFound` when it was deleted meanwhile.
    fn get_segment(&self, name: &str) -> Result<Bytes, StoreError>;

    /// [`SegmentObjects::get_segment`] of each of `names`, in order (several
    /// at once where the store can); `Err` when they failed as a whole.
    fn get_segments(&self, names: &[String]) -> Result<Vec<Result<Bytes, StoreError>>, StoreError> {
        Ok(names.iter().map(|n| self.get_segment(n)).collect())
    }

    /// Deletes segments `names` (a missing one is no error).
    ///
    /// # Errors
    /// [`StoreError::Io`].
    fn delete_segments(&self, names: &[String]) -> Result<(), StoreError>;
}
