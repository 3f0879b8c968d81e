//! The snapshot file format: its byte layout and the header's encoding
//! and decoding.
//!
//! # File format (versions 1, 2 and 3)
//!
//! ```text
//! offset 0   magic "STASNAP\0"                       8 bytes
//!        8   format version (1, 2 or 3)              u32 LE
//!       12   header length H                         u32 LE
//!       16   file length L (this whole file)         u64 LE
//!       24   header (bincode 2, fixed-int encoding)  H bytes
//!            zero padding to the next 4 KiB boundary
//!            memory pages: each run of 4 KiB pages, raw, at the 4 KiB-aligned
//!            file offset the header names (so a restore can map them)
//!            patch blocks (version 3): each patch's 64-byte blocks, in header
//!            order, right after the last run
//!   L - 4    CRC32C of bytes [0, L - 4)              u32 LE
//! ```
//!
//! The header holds the module digest (SHA-256 of the template's original
//! bytes), the ABI version, the actor's virtual monotonic clock (ns), every
//! defined mutable global (index, type, exact bits: NaN payloads survive) and,
//! per memory, its size in 64 KiB pages and its runs of stored 4 KiB pages.
//!
//! * **Version 1, a full snapshot:** the runs are the memory's non-zero
//!   pages; pages not listed are zero. Full snapshots of a template without
//!   an initial image are written as version 1, byte for byte as before
//!   versions 2 and 3 existed (and a flattened chain is version 1).
//! * **Version 2, a delta** (an incremental snapshot): the header also names
//!   its *base* — the snapshot it was taken against, by sequence number, the
//!   base file's CRC32C trailer, and the delta's depth (1 on a full base, one
//!   more than its base's otherwise, at most [`MAX_DELTA_DEPTH`]) — and, per
//!   memory, its *zero runs*: pages that became zero. The runs hold the pages
//!   that changed since the base; every other page is as in the base.
//!   Restoring a delta takes its chain: the full snapshot at its root, then
//!   each delta in order ([`VerifiedChain`](super::chain::VerifiedChain)).
//! * **Version 3, a full snapshot on the module's image:** the memory
//!   starts as the template's initial image ([`InitialImage`]: its active
//!   data segments over zero pages, a function of the module the digest
//!   names) instead of zero; the runs hold the pages that differ from it,
//!   the zero runs the image's non-zero pages that are zero now, and the
//!   *patches* the pages that differ in a few 64-byte blocks: per patch, the
//!   page, a bitmap of its changed blocks (bit *i*: bytes `64i..64i+64`) and
//!   the file offset of those blocks, stored one after another (the pages'
//!   other blocks are the image's). Every other page is the image's. The
//!   header records the image's checksum, so a file is only ever restored
//!   onto the image it was taken on. It is
//!   a chain's root as a version-1 file is; an actor of a JavaScript
//!   template, whose evaluated heap is the image, changes a few hundred
//!   bytes of it per request, so its snapshot holds kilobytes, not the
//!   heap. Written whenever the template has an image (its data segments'
//!   offsets are constants); a file that must restore without the template
//!   (an upgrade that carries the memory over to another module) is
//!   flattened to version 1 ([`flatten`](super::chain::flatten)).
//!
//! A file may also hold a *host-state section* between its last page and
//! its trailer, in either version ([`host_state`](mod@super::host_state)):
//! readers that do not know it ignore it.
//!
//! The checks that turn bytes into a
//! [`VerifiedSnapshot`](super::VerifiedSnapshot) are in
//! [`verify`](mod@super::verify).

use serde::{Deserialize, Serialize};

#[cfg(doc)]
use crate::module::InitialImage;
use crate::module::{Digest, GlobalKind};

/// First 8 bytes of every snapshot file.
pub const MAGIC: [u8; 8] = *b"STASNAP\0";
/// The newest format version this build reads and writes: 3 for a full
/// snapshot on the module's image. Deltas are written as version
/// [`DELTA_FORMAT_VERSION`], full snapshots of a template without an image
/// as version [`FULL_FORMAT_VERSION`].
pub const FORMAT_VERSION: u32 = 3;
/// The format version of deltas (module docs).
pub const DELTA_FORMAT_VERSION: u32 = 2;
/// The format version of full snapshots on the module's image (module
/// docs).
pub const IMAGE_FORMAT_VERSION: u32 = 3;
/// Size of a patch block (version 3), in bytes: a patch stores the
/// changed blocks of a page, up to `PAGE_SIZE / PATCH_BLOCK` of them.
pub const PATCH_BLOCK: usize = 64;
/// The format version of full snapshots (module docs).
pub const FULL_FORMAT_VERSION: u32 = 1;
/// The oldest format version this build reads.
pub const OLDEST_READABLE_VERSION: u32 = 1;
/// Most deltas on one full snapshot: a delta's depth is at most this, so a
/// restore reads at most `MAX_DELTA_DEPTH + 1` files. The snapshot after a
/// delta of this depth is full.
pub const MAX_DELTA_DEPTH: u32 = 8;
/// Size of a wasm page, in bytes.
pub(crate) const WASM_PAGE: u64 = 65536;
/// Length of the fixed prefix (magic, version, header length, file length).
pub(crate) const PREFIX_LEN: usize = 24;
/// Length of the CRC32C trailer.
pub(crate) const TRAILER_LEN: usize = 4;
/// Largest header accepted, in bytes.
pub(crate) const MAX_HEADER: usize = 16 << 20;
/// Granularity of the sparse page map, in bytes: the unit of a run, and
/// the alignment of the memory pages in the file.
pub const PAGE_SIZE: usize = 4096;

/// One defined mutable global's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GlobalValue {
    /// Index in the module's global index space.
    pub index: u32,
    /// Value type.
    pub kind: GlobalKind,
    /// Exact bits (zero-extended to 128).
    pub bits: u128,
}

/// A run of consecutive non-zero 4 KiB pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageRun {
    /// Index of the first 4 KiB page in the memory.
    pub first_page: u64,
    /// Number of pages.
    pub pages: u64,
    /// File offset of the run's bytes (a multiple of 4096).
    pub file_offset: u64,
}

/// A run of consecutive 4 KiB pages, without their bytes (a delta's zero
/// runs; the pages dirty tracking reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageSpan {
    /// Index of the first 4 KiB page in the memory.
    pub first_page: u64,
    /// Number of pages.
    pub pages: u64,
}

/// One linear memory's image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryImage {
    /// Index in the module's memory index space.
    pub index: u32,
    /// Size in 64 KiB wasm pages.
    pub wasm_pages: u64,
    /// Stored 4 KiB pages, ascending, not overlapping: the non-zero pages
    /// of a full snapshot, the changed non-zero pages of a delta.
    pub runs: Vec<PageRun>,
    /// Pages a delta records as zero, or a snapshot on the module's image
    /// records as zero where the image is not (ascending, overlapping no
    /// run); always empty in a version-1 snapshot.
    pub zero_runs: Vec<PageSpan>,
    /// Pages stored as their changed 64-byte blocks over the module's
    /// image (ascending, overlapping no run and no zero run); only in a
    /// version-3 snapshot.
    pub patches: Vec<PagePatch>,
}

impl MemoryImage {
    /// The stored run holding 4 KiB page `page`, if any.
    #[must_use]
    pub fn run_at(&self, page: u64) -> Option<&PageRun> {
        let at = self
            .runs
            .partition_point(|r| r.first_page + r.pages <= page);
        self.runs.get(at).filter(|r| r.first_page <= page)
    }

    /// Whether a zero run holds 4 KiB page `page`.
    #[must_use]
    pub fn zeroes(&self, page: u64) -> bool {
        let at = self
            .zero_runs
            .partition_point(|z| z.first_page + z.pages <= page);
        self.zero_runs.get(at).is_some_and(|z| z.first_page <= page)
    }
}

/// A page stored as the blocks that differ from the module's image
/// (format version 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PagePatch {
    /// Index of the 4 KiB page in the memory.
    pub page: u64,
    /// Bit `i` set: bytes `64 i .. 64 i + 64` of the page are stored.
    /// Never 0.
    pub blocks: u64,
    /// File offset of the stored blocks, one after another.
    pub file_offset: u64,
}

impl PagePatch {
    /// Bytes of the stored blocks.
    #[must_use]
    pub fn len(&self) -> u64 {
        u64::from(self.blocks.count_ones()) * PATCH_BLOCK as u64
    }

    /// Whether no block is stored (never so in a valid file).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.blocks == 0
    }

    /// The byte ranges of the page that are stored, in order.
    pub fn ranges(&self) -> impl Iterator<Item = std::ops::Range<usize>> + use<> {
        let blocks = self.blocks;
        (0..64usize)
            .filter(move |i| blocks >> i & 1 == 1)
            .map(|i| i * PATCH_BLOCK..(i + 1) * PATCH_BLOCK)
    }
}

/// The snapshot a delta was taken against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseRef {
    /// The base's sequence number.
    pub seq: u64,
    /// The base file's CRC32C trailer: names one file, not just a number.
    pub crc32c: u32,
    /// This delta's depth: 1 on a full base, the base's depth + 1 on a
    /// delta (at most [`MAX_DELTA_DEPTH`]).
    pub depth: u32,
}

/// The decoded header of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// SHA-256 of the template's original bytes.
    pub module_digest: Digest,
    /// Guest ABI version of the template.
    pub abi_version: u32,
    /// The actor's virtual monotonic clock at capture, in nanoseconds.
    pub clock_ns: u64,
    /// Every defined mutable global, in index order.
    pub globals: Vec<GlobalValue>,
    /// Every defined memory, in index order.
    pub memories: Vec<MemoryImage>,
    /// The base of a delta; `None` for a full snapshot.
    pub base: Option<BaseRef>,
    /// A full snapshot on the module's image (format version 3), with the
    /// image's checksum ([`InitialImage::checksum`]): pages no run, zero
    /// run or patch names are the image's, not zero. `None` otherwise.
    pub on_image: Option<u32>,
}

impl Header {
    /// The format version this header is written in: 1 for a full
    /// snapshot, 2 for a delta, 3 for a full snapshot on the module's
    /// image.
    #[must_use]
    pub fn version(&self) -> u32 {
        if self.base.is_some() {
            DELTA_FORMAT_VERSION
        } else if self.on_image.is_some() {
            IMAGE_FORMAT_VERSION
        } else {
            FULL_FORMAT_VERSION
        }
    }

    /// Number of pages stored as patches (version 3).
    #[must_use]
    pub fn patched_pages(&self) -> u64 {
        self.memories.iter().map(|m| m.patches.len() as u64).sum()
    }

    /// Number of pages a delta records as zero.
    #[must_use]
    pub fn zero_pages(&self) -> u64 {
        self.memories
            .iter()
            .flat_map(|m| &m.zero_runs)
            .map(|r| r.pages)
            .sum()
    }

    /// Bytes of memory the snapshot restores (sum of memory sizes).
    #[must_use]
    pub fn memory_bytes(&self) -> u64 {
        self.memories
            .iter()
            .map(|m| m.wasm_pages.saturating_mul(WASM_PAGE))
            .sum()
    }

    /// Number of non-zero 4 KiB pages stored.
    #[must_use]
    pub fn stored_pages(&self) -> u64 {
        self.memories
            .iter()
            .flat_map(|m| &m.runs)
            .map(|r| r.pages)
            .sum()
    }
}

/// Why a snapshot could not be read; each variant names the failed check.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SnapshotError {
    /// The file could not be read.
    #[error("snapshot unreadable: {0}")]
    Io(String),
    /// Shorter than the fixed prefix and trailer.
    #[error("snapshot truncated: {len} bytes, a snapshot has at least {min}")]
    Truncated {
        /// Actual length.
        len: u64,
        /// Minimum length.
        min: u64,
    },
    /// The first 8 bytes are not [`MAGIC`].
    #[error("not a snapshot: bad magic")]
    BadMagic,
    /// A format version this build does not read.
    #[error(
        "snapshot format version {found} is not supported (this build reads {OLDEST_READABLE_VERSION}..={FORMAT_VERSION})"
    )]
    UnsupportedVersion {
        /// The version in the file.
        found: u32,
    },
    /// The recorded length differs from the actual one (truncated or extended).
    #[error("snapshot length check failed: header records {recorded} bytes, file has {actual}")]
    LengthMismatch {
        /// Length recorded in the file.
        recorded: u64,
        /// Actual length.
        actual: u64,
    },
    /// The CRC32C over the file does not match.
    #[error("snapshot checksum mismatch: recorded {recorded:08x}, computed {computed:08x}")]
    ChecksumMismatch {
        /// Checksum in the trailer.
        recorded: u32,
        /// Checksum of the content.
        computed: u32,
    },
    /// The header does not decode.
    #[error("snapshot header malformed: {0}")]
    BadHeader(String),
    /// Taken from another module than the actor's template.
    #[error("snapshot is of module {found}, not of the template {expected}")]
    WrongModule {
        /// Hex digest expected.
        expected: String,
        /// Hex digest found.
        found: String,
    },
    /// A size claim exceeds a limit.
    #[error("snapshot too large: {0}")]
    TooLarge(String),
    /// Page runs or globals do not fit the module or the file.
    #[error("snapshot layout invalid: {0}")]
    Layout(String),
    /// Taken on the module's initial image (format version 3), and the
    /// template's image is not that one (its checksum differs, or this
    /// build computes none for the module): not a damaged file, and not
    /// restorable here.
    #[error(
        "snapshot is taken on a module image with checksum {found}; this template's is {expected}"
    )]
    ImageDiffers {
        /// The template's image checksum (hex), or "none".
        expected: String,
        /// The checksum the snapshot records (hex).
        found: String,
    },
    /// A snapshot file mapped into memory (by a restore, or to be read)
    /// was truncated or written in place since it was mapped
    /// ([`crate::mapped`]): what was read from it is not its state.
    #[error("a snapshot file changed under its mapping: {0}")]
    MappedFileChanged(String),
}

pub use super::wire::{decode_header, encode_header};

/// The header length recorded in a file's prefix (bytes 12..16); the
/// caller has checked that the prefix is there.
pub(crate) fn recorded_header_len(bytes: &[u8]) -> usize {
    u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]) as usize
}

/// `n` rounded up to a whole number of [`PAGE_SIZE`] pages.
fn align_up(n: usize) -> usize {
    n.div_ceil(PAGE_SIZE) * PAGE_SIZE
}

/// Where page data starts in a file whose header is `header_len` bytes:
/// the first 4 KiB boundary after the header.
pub(crate) fn data_start(header_len: usize) -> usize {
    align_up(PREFIX_LEN + header_len)
}

/// Lays out a file for `header`: sets every page run's file offset (runs
/// follow each other in header order from the first 4 KiB boundary after
/// the header, then the patches' blocks) and returns the encoded header and the whole file's length.
///
/// # Errors
/// [`SnapshotError::TooLarge`] if the header does not encode (over 16 MiB).
pub(crate) fn lay_out(header: &mut Header) -> Result<(Vec<u8>, u64), SnapshotError> {
    // Fixed-int encoding: the header's length does not depend on the offsets.
    let header_len = encode_header(header)?.len();
    let mut offset = data_start(header_len) as u64;
    for run in header.memories.iter_mut().flat_map(|m| &mut m.runs) {
        run.file_offset = offset;
        offset += run.pages * PAGE_SIZE as u64;
    }
    for patch in header.memories.iter_mut().flat_map(|m| &mut m.patches) {
        patch.file_offset = offset;
        offset += patch.len();
    }
    Ok((encode_header(header)?, offset + TRAILER_LEN as u64))
}

/// Appends the fixed prefix (with format `version`), `header_bytes` and the
/// zero padding up to the first page run to `out` (empty on entry).
pub(crate) fn write_prefix(out: &mut Vec<u8>, version: u32, header_bytes: &[u8], file_len: u64) {
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(header_bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(&file_len.to_le_bytes());
    out.extend_from_slice(header_bytes);
    out.resize(data_start(header_bytes.len()), 0);
}
