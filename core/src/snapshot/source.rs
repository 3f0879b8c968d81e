//! What a snapshot's bytes can be held in ([`SnapshotSource`]): anything
//! that gives the bytes, plus two facts a store may know about them — the
//! file they map (for a copy-on-write restore) and whether their checksum
//! is already known to match (so [`verify`](super::verify()) can skip the
//! one pass that reads every page).

use std::fs::File;

/// Bytes of one snapshot file, as [`verify`](super::verify()) and
/// [`restore`](super::restore()) take them.
pub trait SnapshotSource: AsRef<[u8]> {
    /// The file whose whole content these bytes are, if they come from one
    /// on local disk that is never written in place. `None` (the default)
    /// restores by copying.
    fn file(&self) -> Option<&File> {
        None
    }

    /// Whether the CRC32C trailer of these bytes is already known to match
    /// their content: the store that handed them out wrote or verified
    /// this very file and has seen no change to it since
    /// ([`SnapshotBytes::with_checksum_verified`]). [`verify`] then skips
    /// the checksum pass and still makes every other check. `false` (the
    /// default) checksums the whole file.
    ///
    /// [`verify`]: super::verify()
    /// [`SnapshotBytes::with_checksum_verified`]: crate::snapshot_store::SnapshotBytes::with_checksum_verified
    fn checksum_verified(&self) -> bool {
        false
    }

    /// Whether these bytes still hold what they held when they were
    /// verified: `Err` with what changed when they map a file that was
    /// truncated or written since ([`crate::mapped`]). `Ok` (the default)
    /// for bytes that cannot change.
    ///
    /// # Errors
    /// What changed.
    fn intact(&self) -> Result<(), String> {
        Ok(())
    }
}

impl SnapshotSource for [u8] {}
impl SnapshotSource for Vec<u8> {}
impl<const N: usize> SnapshotSource for [u8; N] {}
impl SnapshotSource for memmap2::Mmap {}
impl SnapshotSource for bytes::Bytes {}
impl<T: SnapshotSource + ?Sized> SnapshotSource for &T {
    fn file(&self) -> Option<&File> {
        (**self).file()
    }

    fn checksum_verified(&self) -> bool {
        (**self).checksum_verified()
    }

    fn intact(&self) -> Result<(), String> {
        (**self).intact()
    }
}
impl SnapshotSource for crate::snapshot_store::SnapshotBytes {
    fn file(&self) -> Option<&File> {
        crate::snapshot_store::SnapshotBytes::file(self)
    }

    fn checksum_verified(&self) -> bool {
        crate::snapshot_store::SnapshotBytes::checksum_verified(self)
    }

    fn intact(&self) -> Result<(), String> {
        crate::snapshot_store::SnapshotBytes::intact(self)
    }
}
