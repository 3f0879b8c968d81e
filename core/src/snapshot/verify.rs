//! The checks that turn a snapshot file's bytes into a [`VerifiedSnapshot`]
//! (the layout they check is in [`format`](super::format)), and the
//! lighter reads of a file that is not restored from: [`peek_header`],
//! [`recorded_crc32c`], [`same_state`].
//!
//! [`verify()`] checks, in this order and before anything sized by the file is
//! allocated: length ≥ the fixed parts, magic, version, recorded length,
//! checksum, header decoding (bounded), module digest, ABI version, memory
//! sizes against the engine's limit, page runs, zero runs and patches
//! against memory and file bounds, the base's depth, globals against the module (index,
//! type, and bits within the type's width). Each failure is a distinct
//! [`SnapshotError`] naming the check. A delta verifies on its own; that its
//! base is there and is the one it names is checked by
//! [`VerifiedChain::new`](super::chain::VerifiedChain::new).

use super::format::{
    FORMAT_VERSION, Header, MAGIC, MAX_DELTA_DEPTH, MAX_HEADER, MemoryImage,
    OLDEST_READABLE_VERSION, PAGE_SIZE, PREFIX_LEN, SnapshotError, TRAILER_LEN, WASM_PAGE,
    data_start, decode_header, recorded_header_len,
};
use super::source::SnapshotSource;
use crate::module::{GlobalKind, InitialImage, Template};
use std::sync::Arc;

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
    /// The template's initial image, for a snapshot taken on it (format
    /// version 3).
    image: Option<Arc<InitialImage>>,
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

    /// The module's initial image the snapshot was taken on (format
    /// version 3): pages the file does not name are the image's. `None`
    /// for other versions (such pages are zero, or a delta's base's).
    #[must_use]
    pub fn image(&self) -> Option<&InitialImage> {
        self.image.as_deref()
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
    let image = match (header.on_image, &template.info.image) {
        (None, _) => None,
        (Some(crc), Some(image)) if crc == image.checksum() => Some(image.clone()),
        (Some(crc), image) => {
            return Err(SnapshotError::ImageDiffers {
                expected: image
                    .as_ref()
                    .map_or_else(|| "none".to_owned(), |i| format!("{:08x}", i.checksum())),
                found: format!("{crc:08x}"),
            });
        }
    };
    Ok(VerifiedSnapshot {
        header,
        bytes,
        image,
    })
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
        check_patches(image, memory_pages, data_start, data_end)?;
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

/// Checks a version-3 file's patches: each with a block, ascending, inside
/// the memory of `memory_pages` 4 KiB pages, on a page no run or zero run
/// names, its blocks inside the file's data.
fn check_patches(
    image: &MemoryImage,
    memory_pages: u64,
    data_start: u64,
    data_end: u64,
) -> Result<(), SnapshotError> {
    let mut next_page = 0u64;
    for patch in &image.patches {
        let in_file = patch.file_offset >= data_start
            && patch
                .file_offset
                .checked_add(patch.len())
                .is_some_and(|end| end <= data_end);
        let ok = !patch.is_empty()
            && patch.page >= next_page
            && patch.page < memory_pages
            && in_file
            && !super::patch::replaced_whole(image, patch.page);
        if !ok {
            return Err(SnapshotError::Layout(format!(
                "patch {patch:?} of memory {} lies outside the memory or the file, out of \
                 order, or on a page a run names",
                image.index
            )));
        }
        next_page = patch.page + 1;
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
