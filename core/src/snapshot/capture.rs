//! Capture: an instance's linear memories and mutable globals into the
//! snapshot file format, in one pass over the non-zero pages (over the
//! pages that differ from the module's initial image, when it has one).

use wasmtime::Val;

use super::dirty::changed_pages;
use super::format::{self, GlobalValue, Header, MemoryImage, PAGE_SIZE, SnapshotError, WASM_PAGE};
use super::memory::{append, prepare_fresh, scan_candidate_runs, scan_runs};
use super::patch::{against_image, append_blocks};
use crate::instance::ActorInstance;
use crate::module::GlobalKind;
use crate::module::InitialImage;

/// Capture copies and checksums page runs in chunks of this size (fits L2).
const CRC_CHUNK: usize = 64 << 10;

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
/// If the header cannot be encoded (more than 16 MiB of page runs), or
/// [`SnapshotError::MappedFileChanged`] when a snapshot file mapped into
/// the memory changed ([`crate::mapped`]).
pub fn capture_into(
    instance: &mut ActorInstance,
    out: &mut Vec<u8>,
) -> Result<CaptureStats, SnapshotError> {
    let info = instance.template.info.clone();
    let globals = capture_globals(instance)?;
    // Without copy-on-write mapped runs (wasmtime's own memory image is
    // off, `memory_init_cow(false)`), every page of the instance's memory
    // that is neither present nor swapped is anonymous and unwritten: zero.
    // Only the others are read (see `dirty`); without pagemap, all are.
    let anonymous = instance.cow.mapped_runs() == 0;
    let store = &instance.store;
    let data: Vec<&[u8]> = instance.memories.iter().map(|m| m.data(store)).collect();
    let image = info.image.as_deref();
    let memories = info
        .memories
        .iter()
        .zip(&data)
        .enumerate()
        .map(|(n, (m, data))| {
            let candidates = match anonymous.then(|| changed_pages(data)) {
                Some(Ok(candidates)) => Some(candidates),
                _ => None,
            };
            let (runs, zero_runs, patches) = match image {
                // Format version 3: only what differs from the image.
                Some(image) => against_image(data, image, n, candidates.as_deref()),
                None => (
                    match candidates {
                        Some(candidates) => scan_candidate_runs(data, &candidates),
                        None => scan_runs(data),
                    },
                    Vec::new(),
                    Vec::new(),
                ),
            };
            MemoryImage {
                index: m.index,
                wasm_pages: data.len() as u64 / WASM_PAGE,
                runs,
                zero_runs,
                patches,
            }
        })
        .collect();
    let mut header = Header {
        module_digest: info.digest,
        abi_version: info.abi_version,
        clock_ns: instance.clock.now_ns(),
        globals,
        memories,
        base: None,
        on_image: image.map(InitialImage::checksum),
    };
    let stats = write_file(out, &mut header, &data)?;
    intact(instance)?;
    Ok(stats)
}

/// After a capture: [`SnapshotError::MappedFileChanged`] if a snapshot
/// file mapped into `instance`'s memory changed, so that what was read is
/// not its state ([`crate::mapped`]); the capture must not be written.
///
/// # Errors
/// As said.
pub(crate) fn intact(instance: &ActorInstance) -> Result<(), SnapshotError> {
    instance
        .mapped_intact()
        .map_err(SnapshotError::MappedFileChanged)
}

/// Every defined mutable global of `instance`, in the module's order.
///
/// # Errors
/// [`SnapshotError::Layout`] if a global holds no number (a reference).
pub(crate) fn capture_globals(
    instance: &mut ActorInstance,
) -> Result<Vec<GlobalValue>, SnapshotError> {
    let values = instance.global_values();
    let info = &instance.template.info;
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
    Ok(globals)
}

/// Lays out `header` ([`format::lay_out`]) and writes the whole file into
/// `out` (cleared first, its allocation reused): the prefix, then each run's
/// pages and each patch's blocks taken from `memories` (one slice per memory, in header order, each
/// at least as long as its runs reach), then the CRC32C trailer.
///
/// # Errors
/// Only if the header cannot be encoded (more than 16 MiB of page runs).
pub(crate) fn write_file(
    out: &mut Vec<u8>,
    header: &mut Header,
    memories: &[&[u8]],
) -> Result<CaptureStats, SnapshotError> {
    out.clear();
    let (header_bytes, file_len) = format::lay_out(header)?;
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
    format::write_prefix(out, header.version(), &header_bytes, file_len);
    // One pass over the pages: each chunk is checksummed right after it is
    // copied, while it is still in cache.
    let mut crc = crc32c::crc32c(out);
    for (image, data) in header.memories.iter().zip(memories) {
        for run in &image.runs {
            let start = run.first_page as usize * PAGE_SIZE;
            let bytes = &data[start..start + run.pages as usize * PAGE_SIZE];
            for chunk in bytes.chunks(CRC_CHUNK) {
                append(out, chunk);
                crc = crc32c::crc32c_append(crc, chunk);
            }
        }
    }
    let patched = out.len();
    for (image, data) in header.memories.iter().zip(memories) {
        for patch in &image.patches {
            let start = patch.page as usize * PAGE_SIZE;
            append_blocks(out, patch, &data[start..start + PAGE_SIZE]);
        }
    }
    crc = crc32c::crc32c_append(crc, &out[patched..]);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(CaptureStats {
        memory_bytes: header.memory_bytes(),
        stored_pages: header.stored_pages(),
        file_bytes: out.len() as u64,
    })
}

/// A valid full snapshot of no memory and no global, told apart by its
/// clock (for tests of what reads headers: retention, journal replay).
#[cfg(test)]
pub(crate) fn empty_snapshot(clock_ns: u64) -> Vec<u8> {
    let mut header = Header {
        module_digest: [0; 32],
        abi_version: 1,
        clock_ns,
        globals: Vec::new(),
        memories: Vec::new(),
        base: None,
        on_image: None,
    };
    let mut out = Vec::new();
    write_file(&mut out, &mut header, &[]).expect("encodes");
    out
}
