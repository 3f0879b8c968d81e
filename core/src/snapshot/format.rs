//! Snapshots: capture an instance's linear memories and mutable globals into
//! the snapshot file format, verify a file, and restore it into a fresh
//! resume instance.
//!
//! # File format (version [`FORMAT_VERSION`])
//!
//! ```text
//! offset 0   magic "STASNAP\0"                       8 bytes
//!        8   format version                          u32 LE
//!       12   header length H                         u32 LE
//!       16   file length L (this whole file)         u64 LE
//!       24   header (bincode 2, fixed-int encoding)  H bytes
//!            zero padding to the next 4 KiB boundary
//!            memory pages: each run of non-zero 4 KiB pages, raw, at the
//!            4 KiB-aligned file offset the header names (so a later version
//!            can map them instead of copying)
//!   L - 4    CRC32C of bytes [0, L - 4)              u32 LE
//! ```
//!
//! The header holds the module digest (SHA-256 of the template's original
//! bytes), the ABI version, the actor's virtual monotonic clock (ns), every
//! defined mutable global (index, type, exact bits: NaN payloads survive) and,
//! per memory, its size in 64 KiB pages and its runs of non-zero 4 KiB pages.
//! Pages not listed are zero.
//!
//! [`verify`] checks, in this order and before anything sized by the file is
//! allocated: length ≥ the fixed parts, magic, version, recorded length,
//! checksum, header decoding (bounded), module digest, ABI version, memory
//! sizes against the engine's limit, page runs against memory and file
//! bounds, globals against the module. Each failure is a distinct
//! [`SnapshotError`] naming the check.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use wasmtime::Val;

use crate::engine::StasisEngine;
use crate::instance::{ActorInstance, CallError, InstanceConfig, Start};
use crate::module::{Digest, GlobalKind, Template};

/// First 8 bytes of every snapshot file.
pub const MAGIC: [u8; 8] = *b"STASNAP\0";
/// The format version this build writes.
pub const FORMAT_VERSION: u32 = 1;
/// The oldest format version this build reads. Version 1 is the first, so
/// there is no previous version yet; when version 2 comes, this stays 1.
pub const OLDEST_READABLE_VERSION: u32 = 1;
/// Granularity of the sparse page map, in bytes.
pub const PAGE_SIZE: usize = 4096;
const WASM_PAGE: u64 = 65536;
const PREFIX_LEN: usize = 24;
const TRAILER_LEN: usize = 4;
/// Largest header accepted, in bytes.
const MAX_HEADER: usize = 16 << 20;
/// Capture copies and checksums page runs in chunks of this size (fits L2).
const CRC_CHUNK: usize = 64 << 10;

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

/// One linear memory's image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryImage {
    /// Index in the module's memory index space.
    pub index: u32,
    /// Size in 64 KiB wasm pages.
    pub wasm_pages: u64,
    /// Non-zero 4 KiB pages, ascending, not overlapping.
    pub runs: Vec<PageRun>,
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
}

impl Header {
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

/// Statistics of one capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureStats {
    /// Total size of the memories, in bytes.
    pub memory_bytes: u64,
    /// Non-zero 4 KiB pages written.
    pub stored_pages: u64,
    /// Size of the encoded snapshot, in bytes.
    pub file_bytes: u64,
}

fn header_config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_fixed_int_encoding()
        .with_limit::<MAX_HEADER>()
}

/// Whether a 4 KiB page is all zero (early exit on the first non-zero
/// 256-byte block). Fixed-size chunks let the compiler vectorise the OR,
/// so a zero page is scanned at memory bandwidth.
#[must_use]
pub fn page_is_zero(page: &[u8]) -> bool {
    let mut blocks = page.chunks_exact(256);
    for block in &mut blocks {
        let mut acc = 0u64;
        for word in block.chunks_exact(8) {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            acc |= u64::from_ne_bytes(w);
        }
        if acc != 0 {
            return false;
        }
    }
    blocks.remainder().iter().all(|&b| b == 0)
}

fn scan_runs(data: &[u8]) -> Vec<PageRun> {
    let mut runs: Vec<PageRun> = Vec::new();
    for (i, page) in data.chunks(PAGE_SIZE).enumerate() {
        if page_is_zero(page) {
            continue;
        }
        let i = i as u64;
        match runs.last_mut() {
            Some(run) if run.first_page + run.pages == i => run.pages += 1,
            _ => runs.push(PageRun {
                first_page: i,
                pages: 1,
                file_offset: 0,
            }),
        }
    }
    runs
}

fn global_bits(value: &Val) -> Option<(GlobalKind, u128)> {
    Some(match value {
        Val::I32(v) => (GlobalKind::I32, u128::from(*v as u32)),
        Val::I64(v) => (GlobalKind::I64, u128::from(*v as u64)),
        Val::F32(bits) => (GlobalKind::F32, u128::from(*bits)),
        Val::F64(bits) => (GlobalKind::F64, u128::from(*bits)),
        Val::V128(v) => (GlobalKind::V128, v.as_u128()),
        _ => return None,
    })
}

fn global_val(value: &GlobalValue) -> Val {
    match value.kind {
        GlobalKind::I32 => Val::I32(value.bits as u32 as i32),
        GlobalKind::I64 => Val::I64(value.bits as u64 as i64),
        GlobalKind::F32 => Val::F32(value.bits as u32),
        GlobalKind::F64 => Val::F64(value.bits as u64),
        GlobalKind::V128 => Val::V128(value.bits.into()),
    }
}

/// Captures `instance` into the snapshot file format, in memory. Call it
/// only between guest calls (no wasm frame on the stack): the worker
/// guarantees that by owning the instance.
///
/// # Errors
/// Only if the header cannot be encoded (more than 16 MiB of page runs).
pub fn capture(instance: &mut ActorInstance) -> Result<(Vec<u8>, CaptureStats), SnapshotError> {
    let mut out = Vec::new();
    let stats = capture_into(instance, &mut out)?;
    Ok((out, stats))
}

/// Like [`capture`], but writes the snapshot into `out` (cleared first),
/// reusing its allocation. A buffer kept across captures is already faulted
/// in, so a large capture runs at memcpy speed instead of paying a page
/// fault per 4 KiB of fresh allocation (research notes §3.3).
///
/// # Errors
/// Only if the header cannot be encoded (more than 16 MiB of page runs).
pub fn capture_into(
    instance: &mut ActorInstance,
    out: &mut Vec<u8>,
) -> Result<CaptureStats, SnapshotError> {
    out.clear();
    let info = instance.template.info.clone();
    let values = instance.global_values();
    let mut globals = Vec::with_capacity(values.len());
    for (g, v) in info.globals.iter().zip(&values) {
        let (kind, bits) = global_bits(v)
            .ok_or_else(|| SnapshotError::Layout(format!("global {} is not a number", g.index)))?;
        globals.push(GlobalValue {
            index: g.index,
            kind,
            bits,
        });
    }
    let store = &instance.store;
    let mut memories = Vec::with_capacity(info.memories.len());
    for (m, memory) in info.memories.iter().zip(&instance.memories) {
        let data = memory.data(store);
        memories.push(MemoryImage {
            index: m.index,
            wasm_pages: data.len() as u64 / WASM_PAGE,
            runs: scan_runs(data),
        });
    }
    let mut header = Header {
        module_digest: info.digest,
        abi_version: info.abi_version,
        clock_ns: instance.clock.now_ns(),
        globals,
        memories,
    };
    // Fixed-int encoding: the header's length does not depend on the offsets.
    let header_len = encode_header(&header)?.len();
    let mut offset = align_up(PREFIX_LEN + header_len) as u64;
    for run in header.memories.iter_mut().flat_map(|m| &mut m.runs) {
        run.file_offset = offset;
        offset += run.pages * PAGE_SIZE as u64;
    }
    let header_bytes = encode_header(&header)?;
    let file_len = offset + TRAILER_LEN as u64;
    let fresh = out.capacity() < file_len as usize;
    out.reserve(file_len as usize);
    if fresh {
        // The first `file_len` bytes of the new buffer are about to be written.
        let spare = out.spare_capacity_mut();
        prepare_fresh(
            spare.as_ptr().cast(),
            spare.len().min(file_len as usize),
            true,
        );
    }
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(header_bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(&file_len.to_le_bytes());
    out.extend_from_slice(&header_bytes);
    out.resize(align_up(out.len()), 0);
    // One pass over the pages: each chunk is checksummed right after it is
    // copied, while it is still in cache.
    let mut crc = crc32c::crc32c(out);
    for (image, memory) in header.memories.iter().zip(&instance.memories) {
        let data = memory.data(store);
        for run in &image.runs {
            let start = run.first_page as usize * PAGE_SIZE;
            let bytes = &data[start..start + run.pages as usize * PAGE_SIZE];
            for chunk in bytes.chunks(CRC_CHUNK) {
                append(out, chunk);
                crc = crc32c::crc32c_append(crc, chunk);
            }
        }
    }
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(CaptureStats {
        memory_bytes: header.memory_bytes(),
        stored_pages: header.stored_pages(),
        file_bytes: out.len() as u64,
    })
}

/// Pieces in which [`copy`] and [`append`] move bytes between buffers that
/// are not equally aligned to a cache line.
const MISALIGNED_PIECE: usize = 512;

/// Whether `dst` and `src` sit at different offsets within a cache line.
fn misaligned(dst: *const u8, src: *const u8) -> bool {
    !(dst as usize).wrapping_sub(src as usize).is_multiple_of(64)
}

/// `dst.copy_from_slice(src)`, fast also when the two are not equally
/// aligned. glibc's `memcpy` moves copies between a few KiB and its
/// non-temporal threshold with `rep movsb`, which on this machine (AMD EPYC,
/// glibc 2.36) runs 3–4× slower when source and destination differ in their
/// offset within a cache line. That is the normal case here: linear memory
/// and mapped files are page-aligned, a `Vec`'s buffer starts 16 bytes into
/// its malloc chunk. Pieces of 512 bytes take glibc's vector loop instead.
fn copy(dst: &mut [u8], src: &[u8]) {
    if misaligned(dst.as_ptr(), src.as_ptr()) {
        for (d, s) in dst
            .chunks_mut(MISALIGNED_PIECE)
            .zip(src.chunks(MISALIGNED_PIECE))
        {
            d.copy_from_slice(s);
        }
    } else {
        dst.copy_from_slice(src);
    }
}

/// `out.extend_from_slice(src)`, fast also when the two are not equally
/// aligned (see [`copy`]).
fn append(out: &mut Vec<u8>, src: &[u8]) {
    let end = out.as_ptr().wrapping_add(out.len());
    if misaligned(end, src.as_ptr()) {
        for piece in src.chunks(MISALIGNED_PIECE) {
            out.extend_from_slice(piece);
        }
    } else {
        out.extend_from_slice(src);
    }
}

fn encode_header(header: &Header) -> Result<Vec<u8>, SnapshotError> {
    bincode::serde::encode_to_vec(header, header_config())
        .map_err(|e| SnapshotError::TooLarge(format!("header: {e}")))
}

fn align_up(n: usize) -> usize {
    n.div_ceil(PAGE_SIZE) * PAGE_SIZE
}

/// A snapshot whose bytes passed [`verify`]: the header, and the bytes it
/// was read from (borrowed, e.g. from a mapped file).
#[derive(Debug)]
pub struct Verified<'a> {
    /// The decoded header.
    pub header: Header,
    bytes: &'a [u8],
}

/// Checks `bytes` as described in the module docs, against `template` and
/// the engine's memory limit (`max_memory`, bytes).
///
/// # Errors
/// The first failed check, as a [`SnapshotError`].
pub fn verify<'a>(
    bytes: &'a [u8],
    template: &Template,
    max_memory: u64,
) -> Result<Verified<'a>, SnapshotError> {
    let header = verify_header(bytes)?;
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
    let header_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap_or_default()) as usize;
    let data_start = align_up(PREFIX_LEN + header_len) as u64;
    let mut total = 0u64;
    for (image, m) in header.memories.iter().zip(&info.memories) {
        let bytes_claimed = image.wasm_pages.saturating_mul(WASM_PAGE);
        total = total.saturating_add(bytes_claimed);
        if image.index != m.index {
            return Err(SnapshotError::Layout(format!(
                "memory index {} where the module has {}",
                image.index, m.index
            )));
        }
        if total > max_memory || m.maximum_pages.is_some_and(|max| image.wasm_pages > max) {
            return Err(SnapshotError::TooLarge(format!(
                "memory {} claims {} pages ({bytes_claimed} bytes); the limit is {max_memory} bytes",
                image.index, image.wasm_pages
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
    }
    let expected: Vec<(u32, GlobalKind)> = info.globals.iter().map(|g| (g.index, g.kind)).collect();
    let found: Vec<(u32, GlobalKind)> = header.globals.iter().map(|g| (g.index, g.kind)).collect();
    if expected != found {
        return Err(SnapshotError::Layout(format!(
            "globals {found:?} do not match the module's {expected:?}"
        )));
    }
    Ok(Verified { header, bytes })
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
    let header_len = |file: &[u8]| u32::from_le_bytes([file[12], file[13], file[14], file[15]]);
    let end = a.len() - TRAILER_LEN;
    let data = PREFIX_LEN + header_len(a) as usize;
    if header_len(a) != header_len(b) || data > end {
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
    let recorded_crc = u32_at(bytes.len() - TRAILER_LEN);
    let computed = crc32c::crc32c(body);
    if recorded_crc != computed {
        return Err(SnapshotError::ChecksumMismatch {
            recorded: recorded_crc,
            computed,
        });
    }
    if header_len > MAX_HEADER || PREFIX_LEN + header_len > body.len() {
        return Err(SnapshotError::TooLarge(format!(
            "header claims {header_len} bytes in a {len}-byte file"
        )));
    }
    let (header, used): (Header, usize) = bincode::serde::decode_from_slice(
        &bytes[PREFIX_LEN..PREFIX_LEN + header_len],
        header_config(),
    )
    .map_err(|e| SnapshotError::BadHeader(e.to_string()))?;
    if used != header_len {
        return Err(SnapshotError::BadHeader(format!(
            "{} bytes left after the header",
            header_len - used
        )));
    }
    Ok(header)
}

/// Why a restore failed.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The snapshot did not verify.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// Instantiating the resume variant or writing state back failed.
    #[error(transparent)]
    Call(#[from] CallError),
}

/// Restores a verified snapshot into a fresh instance of `template`'s resume
/// variant: grows each memory to its recorded size, writes every stored page
/// once, sets every global and starts the virtual clock where it stopped.
/// Does not call `on_resume` (the caller decides).
///
/// # Errors
/// [`RestoreError`] if instantiation traps or a memory cannot grow to the
/// recorded size under this engine's limits.
pub async fn restore(
    engine: &StasisEngine,
    template: Arc<Template>,
    config: InstanceConfig,
    snapshot: &Verified<'_>,
) -> Result<ActorInstance, RestoreError> {
    let header = &snapshot.header;
    let mut instance = ActorInstance::instantiate(
        engine,
        template,
        config,
        Start::Resume {
            clock_ns: header.clock_ns,
        },
    )
    .await?;
    // Huge-page advice would outlive the instance in a pooled slot and
    // change how later instances in that slot fault (research notes §4,
    // pitfall 9), and split the slot's mapping in three.
    let huge_pages = engine.slots().is_none();
    let memories = instance.memories.clone();
    for (image, memory) in header.memories.iter().zip(&memories) {
        let current = memory.size(&instance.store);
        if image.wasm_pages > current {
            memory
                .grow(&mut instance.store, image.wasm_pages - current)
                .map_err(|e| {
                    SnapshotError::TooLarge(format!(
                        "memory {} cannot grow to {} pages here: {e}",
                        image.index, image.wasm_pages
                    ))
                })?;
        }
        let data = memory.data_mut(&mut instance.store);
        for run in &image.runs {
            let src = run.file_offset as usize;
            let dst = run.first_page as usize * PAGE_SIZE;
            let len = run.pages as usize * PAGE_SIZE;
            let dst = &mut data[dst..dst + len];
            prepare_fresh(dst.as_ptr(), dst.len(), huge_pages);
            copy(dst, &snapshot.bytes[src..src + len]);
        }
    }
    let globals = instance.globals.clone();
    for (value, global) in header.globals.iter().zip(&globals) {
        global
            .set(&mut instance.store, global_val(value))
            .map_err(|e| CallError::Host(format!("setting global {}: {e:#}", value.index)))?;
    }
    Ok(instance)
}

/// Smallest stretch of a run worth one `MADV_POPULATE_WRITE` call rather
/// than a page fault per 4 KiB page.
#[cfg(target_os = "linux")]
const POPULATE_MIN: usize = 64 << 10;
/// Size of a transparent huge page (x86-64, aarch64 with 4 KiB pages).
#[cfg(target_os = "linux")]
const HUGE_PAGE: usize = 2 << 20;

/// Readies `len` bytes at `ptr` — memory the caller owns, freshly
/// allocated or mapped, that one bulk copy is about to fill completely (a
/// run's destination in a fresh resume instance, or a new capture buffer)
/// — for that copy. Page faults dominate such a copy (research notes §3.3:
/// a 4 KiB fault costs 1–2 µs, more than copying the page), so:
///
/// * the 2 MiB-aligned blocks inside the range are advised `MADV_HUGEPAGE`:
///   one fault per 2 MiB instead of 512. Only blocks the copy fills
///   completely get the advice, so no huge page ever holds memory that
///   would otherwise have stayed unmapped;
/// * what is left of a large range is prefaulted with one
///   `MADV_POPULATE_WRITE` call.
///
/// Both are hints that never change memory contents; errors (kernels before
/// 5.14, THP disabled) are ignored and the copy faults pages in as usual.
/// The huge-page advice lives as long as the mapping. The on-demand
/// allocator unmaps an instance's memory when the instance is dropped, so
/// the advice cannot leak into another instance; a pooled slot outlives its
/// instance (research notes §4 pitfall 9), so with `huge_pages` false
/// (pooled engines) only the prefault is applied.
#[cfg(target_os = "linux")]
fn prepare_fresh(ptr: *const u8, len: usize, huge_pages: bool) {
    let base = ptr as usize;
    // Whole pages only: a page shared with another allocation is left alone.
    let start = base.next_multiple_of(PAGE_SIZE);
    let end = (base + len) / PAGE_SIZE * PAGE_SIZE;
    let advise = |from: usize, to: usize, advice: libc::c_int| {
        if to > from {
            // SAFETY: [from, to) is page-aligned and lies inside memory the
            // caller owns; neither advice changes its contents, and the
            // result is ignored on purpose (a hint).
            unsafe { libc::madvise(from as *mut libc::c_void, to - from, advice) };
        }
    };
    let populate = |from: usize, to: usize| {
        if to.saturating_sub(from) >= POPULATE_MIN {
            advise(from, to, libc::MADV_POPULATE_WRITE);
        }
    };
    let huge_start = start.next_multiple_of(HUGE_PAGE);
    let huge_end = end / HUGE_PAGE * HUGE_PAGE;
    if huge_pages && huge_end > huge_start {
        advise(huge_start, huge_end, libc::MADV_HUGEPAGE);
        populate(start, huge_start);
        populate(huge_end, end);
    } else {
        populate(start, end);
    }
}

#[cfg(not(target_os = "linux"))]
fn prepare_fresh(_ptr: *const u8, _len: usize, _huge_pages: bool) {}
