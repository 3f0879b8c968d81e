//! Memory helpers shared by capture and restore: the zero-page scan, copies
//! that stay fast between differently aligned buffers, and the page-fault
//! hints for memory a bulk copy is about to fill.

use super::format::{PAGE_SIZE, PageRun, PageSpan};

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

/// A run of consecutive 4 KiB pages that [`push_page`] grows page by page:
/// a stored run ([`PageRun`], its file offset not set yet) or a span
/// without bytes ([`PageSpan`]).
pub(crate) trait PageRange {
    /// A run of the one page `page`.
    fn one(page: u64) -> Self;
    /// The first page after the run.
    fn end(&self) -> u64;
    /// Makes the run one page longer.
    fn grow(&mut self);
}

impl PageRange for PageRun {
    fn one(page: u64) -> Self {
        Self {
            first_page: page,
            pages: 1,
            file_offset: 0,
        }
    }
    fn end(&self) -> u64 {
        self.first_page + self.pages
    }
    fn grow(&mut self) {
        self.pages += 1;
    }
}

impl PageRange for PageSpan {
    fn one(page: u64) -> Self {
        Self {
            first_page: page,
            pages: 1,
        }
    }
    fn end(&self) -> u64 {
        self.first_page + self.pages
    }
    fn grow(&mut self) {
        self.pages += 1;
    }
}

/// Adds `page` to ascending `runs`: the last run grows when `page` follows
/// it, else a run of `page` alone is pushed.
pub(crate) fn push_page<R: PageRange>(runs: &mut Vec<R>, page: u64) {
    match runs.last_mut() {
        Some(run) if run.end() == page => run.grow(),
        _ => runs.push(R::one(page)),
    }
}

/// The runs of non-zero 4 KiB pages of `data`, ascending (file offsets
/// not set yet).
pub(crate) fn scan_runs(data: &[u8]) -> Vec<PageRun> {
    let mut runs: Vec<PageRun> = Vec::new();
    for (i, page) in data.chunks(PAGE_SIZE).enumerate() {
        if !page_is_zero(page) {
            push_page(&mut runs, i as u64);
        }
    }
    runs
}

/// [`scan_runs`] over only the pages in `candidates` (ascending spans of
/// `data`'s 4 KiB pages): the caller knows every other page is zero, so
/// they are not read (reading an untouched page of anonymous memory costs
/// a page fault, and most of a fresh instance's memory is untouched).
pub(crate) fn scan_candidate_runs(data: &[u8], candidates: &[PageSpan]) -> Vec<PageRun> {
    let mut runs: Vec<PageRun> = Vec::new();
    for span in candidates {
        for page in span.first_page..span.first_page + span.pages {
            let start = usize::try_from(page).map_or(usize::MAX, |p| p.saturating_mul(PAGE_SIZE));
            let Some(bytes) = data.get(start..start.saturating_add(PAGE_SIZE)) else {
                break;
            };
            if !page_is_zero(bytes) {
                push_page(&mut runs, page);
            }
        }
    }
    runs
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
pub(crate) fn copy(dst: &mut [u8], src: &[u8]) {
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
pub(crate) fn append(out: &mut Vec<u8>, src: &[u8]) {
    let end = out.as_ptr().wrapping_add(out.len());
    if misaligned(end, src.as_ptr()) {
        for piece in src.chunks(MISALIGNED_PIECE) {
            out.extend_from_slice(piece);
        }
    } else {
        out.extend_from_slice(src);
    }
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
pub(crate) fn prepare_fresh(ptr: *const u8, len: usize, huge_pages: bool) {
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
pub(crate) fn prepare_fresh(_ptr: *const u8, _len: usize, _huge_pages: bool) {}
