//! The snapshot file format: its byte layout, the header's encoding and
//! decoding, and the checks that turn bytes into a [`VerifiedSnapshot`].
//!
//! # File format (versions 1 and 2)
//!
//! ```text
//! offset 0   magic "STASNAP\0"                       8 bytes
//!        8   format version (1 or 2)                 u32 LE
//!       12   header length H                         u32 LE
//!       16   file length L (this whole file)         u64 LE
//!       24   header (bincode 2, fixed-int encoding)  H bytes
//!            zero padding to the next 4 KiB boundary
//!            memory pages: each run of 4 KiB pages, raw, at the 4 KiB-aligned
//!            file offset the header names (so a restore can map them)
//!   L - 4    CRC32C of bytes [0, L - 4)              u32 LE
//! ```
//!
//! The header holds the module digest (SHA-256 of the template's original
//! bytes), the ABI version, the actor's virtual monotonic clock (ns), every
//! defined mutable global (index, type, exact bits: NaN payloads survive) and,
//! per memory, its size in 64 KiB pages and its runs of stored 4 KiB pages.
//!
//! * **Version 1, a full snapshot:** the runs are the memory's non-zero
//!   pages; pages not listed are zero. Full snapshots are still written as
//!   version 1, byte for byte as before version 2 existed.
//! * **Version 2, a delta** (an incremental snapshot): the header also names
//!   its *base* — the snapshot it was taken against, by sequence number, the
//!   base file's CRC32C trailer, and the delta's depth (1 on a full base, one
//!   more than its base's otherwise, at most [`MAX_DELTA_DEPTH`]) — and, per
//!   memory, its *zero runs*: pages that became zero. The runs hold the pages
//!   that changed since the base; every other page is as in the base.
//!   Restoring a delta takes its chain: the full snapshot at its root, then
//!   each delta in order ([`VerifiedChain`](super::chain::VerifiedChain)).
//!
//! [`verify`] checks, in this order and before anything sized by the file is
//! allocated: length ≥ the fixed parts, magic, version, recorded length,
//! checksum, header decoding (bounded), module digest, ABI version, memory
//! sizes against the engine's limit, page runs and zero runs against memory
//! and file bounds, the base's depth, globals against the module (index,
//! type, and bits within the type's width). Each failure is a distinct
//! [`SnapshotError`] naming the check. A delta verifies on its own; that its
//! base is there and is the one it names is checked by
//! [`VerifiedChain::new`](super::chain::VerifiedChain::new).

use serde::{Deserialize, Serialize};

use super::memory::{PAGE_SIZE, align_up};
use super::source::SnapshotSource;
use crate::module::{Digest, GlobalKind, Template};

/// First 8 bytes of every snapshot file.
pub const MAGIC: [u8; 8] = *b"STASNAP\0";
/// The newest format version this build writes: 2 for a delta. Full
/// snapshots are written as version [`FULL_FORMAT_VERSION`].
pub const FORMAT_VERSION: u32 = 2;
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
const PREFIX_LEN: usize = 24;
/// Length of the CRC32C trailer.
pub(crate) const TRAILER_LEN: usize = 4;
/// Largest header accepted, in bytes.
const MAX_HEADER: usize = 16 << 20;

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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryImage {
    /// Index in the module's memory index space.
    pub index: u32,
    /// Size in 64 KiB wasm pages.
    pub wasm_pages: u64,
    /// Stored 4 KiB pages, ascending, not overlapping: the non-zero pages
    /// of a full snapshot, the changed non-zero pages of a delta.
    pub runs: Vec<PageRun>,
    /// Pages a delta records as zero (ascending, overlapping no run);
    /// always empty in a full snapshot.
    pub zero_runs: Vec<PageSpan>,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
}

/// A version-1 header, as encoded (a full snapshot: no base, no zero runs).
#[derive(Serialize, Deserialize)]
struct HeaderV1 {
    module_digest: Digest,
    abi_version: u32,
    clock_ns: u64,
    globals: Vec<GlobalValue>,
    memories: Vec<MemoryImageV1>,
}

/// A version-1 memory image, as encoded.
#[derive(Serialize, Deserialize)]
struct MemoryImageV1 {
    index: u32,
    wasm_pages: u64,
    runs: Vec<PageRun>,
}

impl Header {
    /// The format version this header is written in: 1 for a full
    /// snapshot, 2 for a delta.
    #[must_use]
    pub fn version(&self) -> u32 {
        if self.base.is_some() {
            FORMAT_VERSION
        } else {
            FULL_FORMAT_VERSION
        }
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
}

fn header_config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_fixed_int_encoding()
        .with_limit::<MAX_HEADER>()
}

/// `header` encoded as a file of its [`Header::version`] stores it (bincode
/// 2, fixed-int: a version-1 header has no base and no zero runs).
///
/// # Errors
/// [`SnapshotError::TooLarge`] past the 16 MiB header limit.
pub fn encode_header(header: &Header) -> Result<Vec<u8>, SnapshotError> {
    let encoded = if header.base.is_some() {
        bincode::serde::encode_to_vec(header, header_config())
    } else {
        let v1 = HeaderV1 {
            module_digest: header.module_digest,
            abi_version: header.abi_version,
            clock_ns: header.clock_ns,
            globals: header.globals.clone(),
            memories: header
                .memories
                .iter()
                .map(|m| MemoryImageV1 {
                    index: m.index,
                    wasm_pages: m.wasm_pages,
                    runs: m.runs.clone(),
                })
                .collect(),
        };
        bincode::serde::encode_to_vec(&v1, header_config())
    };
    encoded.map_err(|e| SnapshotError::TooLarge(format!("header: {e}")))
}

/// Decodes a header of format `version` from all of `bytes` (the file's
/// header field), without any check but the decoder's bounds: the inverse
/// of [`encode_header`]. A version other than 1 decodes as version 2.
///
/// # Errors
/// [`SnapshotError::BadHeader`] if the bytes do not decode whole, or a
/// version-2 header names no base.
pub fn decode_header(version: u32, bytes: &[u8]) -> Result<Header, SnapshotError> {
    let bad = |e: bincode::error::DecodeError| SnapshotError::BadHeader(e.to_string());
    let (header, used) = if version == FULL_FORMAT_VERSION {
        let (v1, used): (HeaderV1, usize) =
            bincode::serde::decode_from_slice(bytes, header_config()).map_err(bad)?;
        let header = Header {
            module_digest: v1.module_digest,
            abi_version: v1.abi_version,
            clock_ns: v1.clock_ns,
            globals: v1.globals,
            memories: v1
                .memories
                .into_iter()
                .map(|m| MemoryImage {
                    index: m.index,
                    wasm_pages: m.wasm_pages,
                    runs: m.runs,
                    zero_runs: Vec::new(),
                })
                .collect(),
            base: None,
        };
        (header, used)
    } else {
        let (header, used): (Header, usize) =
            bincode::serde::decode_from_slice(bytes, header_config()).map_err(bad)?;
        if header.base.is_none() {
            return Err(SnapshotError::BadHeader(
                "a version-2 snapshot without a base".to_owned(),
            ));
        }
        (header, used)
    };
    if used != bytes.len() {
        return Err(SnapshotError::BadHeader(format!(
            "{} bytes left after the header",
            bytes.len() - used
        )));
    }
    Ok(header)
}

/// The header length recorded in a file's prefix (bytes 12..16); the
/// caller has checked that the prefix is there.
fn recorded_header_len(bytes: &[u8]) -> usize {
    u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]) as usize
}

/// Where page data starts in a file whose header is `header_len` bytes:
/// the first 4 KiB boundary after the header.
fn data_start(header_len: usize) -> usize {
    align_up(PREFIX_LEN + header_len)
}

/// Lays out a file for `header`: sets every page run's file offset (runs
/// follow each other in header order from the first 4 KiB boundary after
/// the header) and returns the encoded header and the whole file's length.
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

/// A snapshot whose bytes passed [`verify`] against one template: the
/// decoded header and the bytes it was read from (`B` is anything holding
/// them: a slice, a `Vec`, a mapped file, [`SnapshotBytes`]). Only
/// [`verify`] makes one, and nothing can change it afterwards, so
/// [`restore`](super::restore()) trusts it without checking again.
///
/// [`SnapshotBytes`]: crate::snapshot_store::SnapshotBytes
pub struct VerifiedSnapshot<B> {
    header: Header,
    bytes: B,
}

impl<B: AsRef<[u8]>> std::fmt::Debug for VerifiedSnapshot<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifiedSnapshot")
            .field("header", &self.header)
            .field("bytes", &self.bytes.as_ref().len())
            .finish()
    }
}

impl<B: AsRef<[u8]>> VerifiedSnapshot<B> {
    /// The decoded header.
    #[must_use]
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The verified file's bytes.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        self.bytes.as_ref()
    }

    /// What the verified bytes were read from (e.g. a mapped file,
    /// which a restore may map copy-on-write).
    #[must_use]
    pub fn source(&self) -> &B {
        &self.bytes
    }

    /// The decoded header, dropping the bytes.
    #[must_use]
    pub fn into_header(self) -> Header {
        self.header
    }

    /// The bytes, dropping the verified status.
    #[must_use]
    pub fn into_bytes(self) -> B {
        self.bytes
    }
}

/// Checks `bytes` as described in the module docs, against `template` and
/// the engine's memory limit (`max_memory`, bytes, for each linear memory,
/// as the engine applies it). The checksum pass is skipped for bytes whose
/// source already knows it matches ([`SnapshotSource::checksum_verified`]).
///
/// # Errors
/// The first failed check, as a [`SnapshotError`].
pub fn verify<B: SnapshotSource>(
    bytes: B,
    template: &Template,
    max_memory: u64,
) -> Result<VerifiedSnapshot<B>, SnapshotError> {
    let checksum = if bytes.checksum_verified() {
        Checksum::Known
    } else {
        Checksum::Compute
    };
    let header = check_layout(bytes.as_ref(), template, max_memory, checksum)?;
    Ok(VerifiedSnapshot { header, bytes })
}

/// [`verify`] on a borrowed file: the header, once every check passed.
fn check_layout(
    bytes: &[u8],
    template: &Template,
    max_memory: u64,
    checksum: Checksum,
) -> Result<Header, SnapshotError> {
    let header = check_header(bytes, checksum)?;
    let info = &template.info;
    if header.module_digest != info.digest {
        return Err(SnapshotError::WrongModule {
            expected: hex::encode(info.digest),
            found: hex::encode(header.module_digest),
        });
    }
    if header.abi_version != info.abi_version {
        return Err(SnapshotError::Layout(format!(
            "ABI version {} differs from the template's {}",
            header.abi_version, info.abi_version
        )));
    }
    if header.memories.len() != info.memories.len() {
        return Err(SnapshotError::Layout(format!(
            "{} memories, the module defines {}",
            header.memories.len(),
            info.memories.len()
        )));
    }
    let data_end = (bytes.len() - TRAILER_LEN) as u64;
    // Pages live after the header, from the first 4 KiB boundary on.
    let data_start = data_start(recorded_header_len(bytes)) as u64;
    for (image, m) in header.memories.iter().zip(&info.memories) {
        let bytes_claimed = image.wasm_pages.saturating_mul(WASM_PAGE);
        if image.index != m.index {
            return Err(SnapshotError::Layout(format!(
                "memory index {} where the module has {}",
                image.index, m.index
            )));
        }
        // Name the limit actually broken: the module's declared maximum
        // first (it holds whatever the flags say), then --max-memory.
        if let Some(max) = m.maximum_pages.filter(|&max| image.wasm_pages > max) {
            return Err(SnapshotError::TooLarge(format!(
                "memory {} claims {} pages ({bytes_claimed} bytes); the module declares \
                 at most {max} pages ({} bytes)",
                image.index,
                image.wasm_pages,
                max.saturating_mul(WASM_PAGE)
            )));
        }
        // Per memory, as the engine's limiter grows each one: a total
        // would refuse what a multi-memory actor captured (found by
        // fuzzing).
        if bytes_claimed > max_memory {
            return Err(SnapshotError::TooLarge(format!(
                "memory {} claims {} pages ({bytes_claimed} bytes); --max-memory is \
                 {max_memory} bytes ({} pages)",
                image.index,
                image.wasm_pages,
                max_memory / WASM_PAGE
            )));
        }
        if image.wasm_pages < m.initial_pages {
            return Err(SnapshotError::Layout(format!(
                "memory {} has {} pages, fewer than the module's minimum {}",
                image.index, image.wasm_pages, m.initial_pages
            )));
        }
        let memory_pages = bytes_claimed / PAGE_SIZE as u64;
        let mut next_page = 0u64;
        for run in &image.runs {
            let end_page = run.first_page.checked_add(run.pages);
            let end_off = run
                .pages
                .checked_mul(PAGE_SIZE as u64)
                .and_then(|len| run.file_offset.checked_add(len));
            let ok = run.pages > 0
                && run.first_page >= next_page
                && end_page.is_some_and(|e| e <= memory_pages)
                && run.file_offset % PAGE_SIZE as u64 == 0
                && run.file_offset >= data_start
                && end_off.is_some_and(|e| e <= data_end);
            if !ok {
                return Err(SnapshotError::Layout(format!(
                    "page run {run:?} of memory {} lies outside the memory or the file",
                    image.index
                )));
            }
            next_page = end_page.unwrap_or(u64::MAX);
        }
        check_zero_runs(image, memory_pages)?;
    }
    if let Some(base) = header.base
        && !(1..=MAX_DELTA_DEPTH).contains(&base.depth)
    {
        return Err(SnapshotError::Layout(format!(
            "delta depth {} is outside 1..={MAX_DELTA_DEPTH}",
            base.depth
        )));
    }
    let expected: Vec<(u32, GlobalKind)> = info.globals.iter().map(|g| (g.index, g.kind)).collect();
    let found: Vec<(u32, GlobalKind)> = header.globals.iter().map(|g| (g.index, g.kind)).collect();
    if expected != found {
        return Err(SnapshotError::Layout(format!(
            "globals {found:?} do not match the module's {expected:?}"
        )));
    }
    // Bits past the type's width would be dropped silently by a restore:
    // such a file does not hold what it claims (found by fuzzing).
    if let Some(g) = header.globals.iter().find(|g| !fits(g.kind, g.bits)) {
        return Err(SnapshotError::Layout(format!(
            "global {} holds {:#x}, wider than its type {:?}",
            g.index, g.bits, g.kind
        )));
    }
    Ok(header)
}

/// Checks a delta's zero runs: each non-empty, ascending, inside the
/// memory of `memory_pages` 4 KiB pages, and overlapping none of the
/// image's stored runs (a page cannot be both zero and stored).
fn check_zero_runs(image: &MemoryImage, memory_pages: u64) -> Result<(), SnapshotError> {
    let mut next_page = 0u64;
    let mut stored = image.runs.iter().peekable();
    for zero in &image.zero_runs {
        let end_page = zero.first_page.checked_add(zero.pages);
        let inside = zero.pages > 0
            && zero.first_page >= next_page
            && end_page.is_some_and(|e| e <= memory_pages);
        let Some(end_page) = end_page.filter(|_| inside) else {
            return Err(SnapshotError::Layout(format!(
                "zero run {zero:?} of memory {} lies outside the memory or out of order",
                image.index
            )));
        };
        while stored
            .peek()
            .is_some_and(|run| run.first_page + run.pages <= zero.first_page)
        {
            stored.next();
        }
        if stored.peek().is_some_and(|run| run.first_page < end_page) {
            return Err(SnapshotError::Layout(format!(
                "zero run {zero:?} of memory {} overlaps a stored page run",
                image.index
            )));
        }
        next_page = end_page;
    }
    Ok(())
}

/// Whether `bits` fits a global of type `kind` (zero-extended to 128).
fn fits(kind: GlobalKind, bits: u128) -> bool {
    let width = match kind {
        GlobalKind::I32 | GlobalKind::F32 => 32,
        GlobalKind::I64 | GlobalKind::F64 => 64,
        GlobalKind::V128 => return true,
    };
    bits >> width == 0
}

/// Whether two snapshot files hold the same actor state: equal headers
/// except for the virtual clock, and byte-equal page data. A file that does
/// not verify is never the same as anything. Restoring either gives the
/// guest the same memory and globals; the clock of the older one is earlier,
/// which the guest cannot observe because it ran no code in between that
/// left a trace.
#[must_use]
pub fn same_state(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() || a.len() < PREFIX_LEN + TRAILER_LEN {
        return false;
    }
    let end = a.len() - TRAILER_LEN;
    let data = PREFIX_LEN + recorded_header_len(a);
    if recorded_header_len(a) != recorded_header_len(b) || data > end {
        return false;
    }
    // Page data first: a changed actor usually differs there, and the
    // comparison stops at the first difference, before any checksum pass.
    if a[data..end] != b[data..end] {
        return false;
    }
    let (Ok(mut left), Ok(right)) = (verify_header(a), verify_header(b)) else {
        return false;
    };
    left.clock_ns = right.clock_ns;
    left == right
}

/// Checks the module-independent parts (length, magic, version, checksum,
/// header) and returns the header.
///
/// # Errors
/// The first failed check, as a [`SnapshotError`].
pub fn verify_header(bytes: &[u8]) -> Result<Header, SnapshotError> {
    check_header(bytes, Checksum::Compute)
}

/// The header of `bytes` after every check of [`verify_header`] except the
/// checksum pass: for callers that need a file's base or sizes but not its
/// pages (retention, the next delta's base after a write). The pages are
/// not checked, so never restore from what this returns.
///
/// # Errors
/// The first failed check, as a [`SnapshotError`].
pub fn peek_header(bytes: &[u8]) -> Result<Header, SnapshotError> {
    check_header(bytes, Checksum::Known)
}

/// The CRC32C recorded in the trailer of `bytes`, or `None` if `bytes` is
/// shorter than a snapshot's fixed parts. Not checked against the content.
#[must_use]
pub fn recorded_crc32c(bytes: &[u8]) -> Option<u32> {
    if bytes.len() < PREFIX_LEN + TRAILER_LEN {
        return None;
    }
    let at = bytes.len() - TRAILER_LEN;
    Some(u32::from_le_bytes([
        bytes[at],
        bytes[at + 1],
        bytes[at + 2],
        bytes[at + 3],
    ]))
}

/// Whether [`check_header`] computes the checksum or the caller's source
/// already knows it matches ([`SnapshotSource::checksum_verified`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Checksum {
    Compute,
    Known,
}

/// [`verify_header`], with the checksum pass skipped when it is `Known`.
fn check_header(bytes: &[u8], checksum: Checksum) -> Result<Header, SnapshotError> {
    let len = bytes.len() as u64;
    let min = (PREFIX_LEN + TRAILER_LEN) as u64;
    if len < min {
        return Err(SnapshotError::Truncated { len, min });
    }
    if bytes[..8] != MAGIC {
        return Err(SnapshotError::BadMagic);
    }
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default());
    let version = u32_at(8);
    if !(OLDEST_READABLE_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(SnapshotError::UnsupportedVersion { found: version });
    }
    let header_len = u32_at(12) as usize;
    let recorded = u64::from_le_bytes(bytes[16..24].try_into().unwrap_or_default());
    if recorded != len {
        return Err(SnapshotError::LengthMismatch {
            recorded,
            actual: len,
        });
    }
    let body = &bytes[..bytes.len() - TRAILER_LEN];
    if checksum == Checksum::Compute {
        let recorded_crc = u32_at(bytes.len() - TRAILER_LEN);
        let computed = crc32c::crc32c(body);
        if recorded_crc != computed {
            return Err(SnapshotError::ChecksumMismatch {
                recorded: recorded_crc,
                computed,
            });
        }
    }
    if header_len > MAX_HEADER || PREFIX_LEN + header_len > body.len() {
        return Err(SnapshotError::TooLarge(format!(
            "header claims {header_len} bytes in a {len}-byte file"
        )));
    }
    decode_header(version, &bytes[PREFIX_LEN..PREFIX_LEN + header_len])
}
