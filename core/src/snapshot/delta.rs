//! Incremental capture: a delta snapshot holding only the pages that
//! changed since the actor's newest snapshot (format version 2, module
//! docs of [`format`](super::format)), found by [`dirty`](super::dirty)
//! tracking instead of a scan of the whole memory.
//!
//! The caller keeps a [`DeltaBase`] per live instance: the newest snapshot
//! whose content the instance held at some point since it was made (the
//! snapshot it was restored from, or one captured from it). Pages that are
//! not dirty still hold that content, so the delta is exact. Dirty pages
//! equal to the base chain's are left out ([`ChainPages`]).

use super::capture::{CaptureStats, capture_globals, write_file};
use super::chain::ChainPages;
use super::dirty::changed_pages;
use super::format::{
    BaseRef, GlobalValue, Header, MAX_DELTA_DEPTH, MemoryImage, PAGE_SIZE, PageRun, PageSpan,
    SnapshotError, WASM_PAGE,
};
use super::memory::{page_is_zero, push_page};
use super::verify::{peek_header, recorded_crc32c};
use crate::instance::ActorInstance;

/// A delta is written only on chains whose full snapshot stores at least
/// this many 4 KiB pages (1 MiB): below it a full snapshot costs about the
/// one fsync a delta costs too, and a chain only makes restores read more
/// files.
pub const MIN_DELTA_ROOT_PAGES: u64 = 256;

/// What the next delta of a live instance is taken against (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaBase {
    /// The base snapshot's sequence number.
    pub seq: u64,
    /// The base file's CRC32C trailer.
    pub crc32c: u32,
    /// The base's depth: 0 for a full snapshot, else its delta depth.
    pub depth: u32,
    /// The base's memory sizes, in 64 KiB pages, in memory order.
    pub wasm_pages: Vec<u64>,
    /// The base's globals (a delta that changes no page and no global
    /// holds the base's state).
    pub globals: Vec<GlobalValue>,
    /// Stored pages of the full snapshot at the root of the base's chain:
    /// a delta storing more than half as many is written full instead.
    pub root_pages: u64,
}

impl DeltaBase {
    /// The base that snapshot `seq`, whose file is `bytes`, makes for the
    /// next delta. `parent` is the base the snapshot was itself taken
    /// against when it is a delta (its chain's root size comes from there).
    /// Returns `None` when `bytes` is not a snapshot this build reads, or a
    /// delta comes without its parent.
    #[must_use]
    pub fn of_file(seq: u64, bytes: &[u8], parent: Option<&DeltaBase>) -> Option<Self> {
        let header = peek_header(bytes).ok()?;
        let crc32c = recorded_crc32c(bytes)?;
        let root_pages = match header.base {
            None => header.stored_pages(),
            Some(_) => parent?.root_pages,
        };
        Some(Self::new(seq, crc32c, &header, root_pages))
    }

    /// The base a snapshot with `header`, sequence number `seq` and CRC32C
    /// trailer `crc32c` makes, on a chain whose root stores `root_pages`.
    #[must_use]
    pub fn new(seq: u64, crc32c: u32, header: &Header, root_pages: u64) -> Self {
        Self {
            seq,
            crc32c,
            depth: header.base.map_or(0, |b| b.depth),
            wasm_pages: header.memories.iter().map(|m| m.wasm_pages).collect(),
            globals: header.globals.clone(),
            root_pages,
        }
    }
}

/// Why [`capture_delta`] wrote no delta, so the caller captures in full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FullInstead {
    /// The base's chain is [`MAX_DELTA_DEPTH`] deep already.
    ChainFull,
    /// The chain's full snapshot stores fewer than
    /// [`MIN_DELTA_ROOT_PAGES`] pages.
    SmallRoot,
    /// More pages changed than half the chain's full snapshot stores.
    TooManyChanged {
        /// Changed pages (stored and zero).
        changed: u64,
        /// Pages the chain's full snapshot stores.
        root_pages: u64,
    },
    /// The memories do not match the base's (count, or a memory smaller
    /// than in the base).
    Mismatch,
    /// The page table could not be read (the message says why).
    NoDirtyTracking(String),
}

/// What [`capture_delta`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaCapture {
    /// The delta's statistics.
    pub stats: CaptureStats,
    /// Pages dirty tracking reported, before those equal to the chain's
    /// were left out.
    pub dirty_pages: u64,
    /// No page (of those compared with the chain, or reported dirty
    /// without one), memory size or global changed since the base: the
    /// instance holds the base's state (the delta written is empty; a
    /// pause need not write it).
    pub unchanged: bool,
}

/// Captures `instance` as a delta on `base` into `out` (cleared first).
/// The candidates are the pages dirty tracking reports
/// ([`dirty`](super::dirty)); with `chain` (the base's chain,
/// [`ChainPages`]) each is compared with the chain's page there and left
/// out when equal (a page the restore copied in, or written back to its
/// old content), so the delta holds only real changes and later deltas do
/// not repeat earlier ones. What is left is stored as data or, if it is
/// all zero now, as a zero run. Without `chain` every candidate is
/// written. Call it only between guest calls, as
/// [`capture`](super::capture()).
///
/// # Errors
/// `Ok(Err(FullInstead))` when a delta is not the right snapshot (the
/// chain is full, the change is large, no dirty tracking): capture in full.
/// `Err` only if the header cannot be encoded.
pub fn capture_delta(
    instance: &mut ActorInstance,
    base: &DeltaBase,
    chain: Option<&ChainPages<'_>>,
    out: &mut Vec<u8>,
) -> Result<Result<DeltaCapture, FullInstead>, SnapshotError> {
    let captured = capture_delta_over(instance, base, chain, out, MIN_DELTA_ROOT_PAGES)?;
    super::capture::intact(instance)?;
    Ok(captured)
}

fn capture_delta_over(
    instance: &mut ActorInstance,
    base: &DeltaBase,
    chain: Option<&ChainPages<'_>>,
    out: &mut Vec<u8>,
    min_root_pages: u64,
) -> Result<Result<DeltaCapture, FullInstead>, SnapshotError> {
    if base.depth >= MAX_DELTA_DEPTH {
        return Ok(Err(FullInstead::ChainFull));
    }
    if base.root_pages < min_root_pages {
        return Ok(Err(FullInstead::SmallRoot));
    }
    let info = instance.template.info.clone();
    let globals = capture_globals(instance)?;
    let store = &instance.store;
    let data: Vec<&[u8]> = instance.memories.iter().map(|m| m.data(store)).collect();
    if !fits(&data, base.wasm_pages.iter().copied()) {
        return Ok(Err(FullInstead::Mismatch));
    }
    let mut memories = Vec::with_capacity(data.len());
    let (mut changed, mut dirty_pages) = (0u64, 0u64);
    for (m, (image, bytes)) in info.memories.iter().zip(&data).enumerate() {
        let spans = match changed_pages(bytes) {
            Ok(spans) => spans,
            Err(e) => return Ok(Err(FullInstead::NoDirtyTracking(e.to_string()))),
        };
        dirty_pages += spans.iter().map(|s| s.pages).sum::<u64>();
        let (runs, zero_runs) =
            classify(bytes, &spans, |page| chain.map(|chain| chain.page(m, page)));
        changed += runs.iter().map(|r| r.pages).sum::<u64>();
        changed += zero_runs.iter().map(|z| z.pages).sum::<u64>();
        if changed * 2 > base.root_pages {
            return Ok(Err(FullInstead::TooManyChanged {
                changed,
                root_pages: base.root_pages,
            }));
        }
        memories.push(MemoryImage {
            index: image.index,
            wasm_pages: bytes.len() as u64 / WASM_PAGE,
            runs,
            zero_runs,
            patches: Vec::new(),
        });
    }
    let on = BaseRef {
        seq: base.seq,
        crc32c: base.crc32c,
        depth: base.depth + 1,
    };
    let header = Header {
        module_digest: info.digest,
        abi_version: info.abi_version,
        clock_ns: instance.clock.now_ns(),
        globals,
        memories,
        base: Some(on),
        on_image: None,
    };
    finish(header, base, changed == 0, dirty_pages, &data, out)
}

/// Whether the live memories `data` fit a base whose memories have
/// `pages` 64 KiB pages each: as many memories, none smaller now.
fn fits(data: &[&[u8]], pages: impl ExactSizeIterator<Item = u64>) -> bool {
    data.len() == pages.len()
        && data
            .iter()
            .zip(pages)
            .all(|(d, pages)| d.len() as u64 / WASM_PAGE >= pages)
}

/// Writes the delta `header` describes (its pages read from `data`) into
/// `out`; `unchanged` when `same_pages` (no page differs from `base`'s
/// state) and its sizes and globals are `base`'s too.
fn finish(
    mut header: Header,
    base: &DeltaBase,
    same_pages: bool,
    dirty_pages: u64,
    data: &[&[u8]],
    out: &mut Vec<u8>,
) -> Result<Result<DeltaCapture, FullInstead>, SnapshotError> {
    let sizes_same = header
        .memories
        .iter()
        .zip(&base.wasm_pages)
        .all(|(m, &pages)| m.wasm_pages == pages);
    let unchanged = same_pages && sizes_same && header.globals == base.globals;
    let stats = write_file(out, &mut header, data)?;
    Ok(Ok(DeltaCapture {
        stats,
        dirty_pages,
        unchanged,
    }))
}

/// Captures `instance` as one delta that replaces the newest deltas of
/// `chain`, the chain its next delta would be taken on, when that chain is
/// [`MAX_DELTA_DEPTH`] deep: the chain is compacted by merging, not by a
/// full snapshot. The merge replaces the newest deltas and goes onto the
/// first delta below them at least as large (in file bytes) as the deltas
/// merged ([`merge_point`]), or else onto the root (full snapshot): so a
/// large delta near the root (an earlier merge of many changes) is kept,
/// not rewritten by every merge, and what a merge writes is in proportion
/// to the recent changes, as in a size-tiered log. The candidates are
/// every page a merged delta mentions (stored or zero) and every page dirty
/// tracking reports; each is taken from the live memory and left out when
/// equal to the kept links' state. So the merged delta holds the union of
/// the merged deltas' changes and the instance's, newest winning, one
/// deeper than the link it is on. `unchanged` says whether the instance
/// still holds the state of `base` (the chain's head). Call it only
/// between guest calls.
///
/// # Errors
/// `Ok(Err(TooManyChanged))` when the changes (since the root, for a
/// merge onto it) pass half the root's stored pages (a full snapshot is
/// due), `Ok(Err(Mismatch | NoDirtyTracking))` as for [`capture_delta`];
/// `Err` only if the header cannot be encoded.
pub fn capture_merged<B: super::SnapshotSource>(
    instance: &mut ActorInstance,
    base: &DeltaBase,
    chain: &super::VerifiedChain<B>,
    out: &mut Vec<u8>,
) -> Result<Result<DeltaCapture, FullInstead>, SnapshotError> {
    let keep = merge_point(chain);
    let mut captured = capture_merged_onto(instance, base, chain, keep, out)?;
    if keep > 1 && matches!(captured, Err(FullInstead::TooManyChanged { .. })) {
        captured = capture_merged_onto(instance, base, chain, 1, out)?;
    }
    super::capture::intact(instance)?;
    Ok(captured)
}

/// How many links of `chain` (the root first) a merge keeps
/// ([`capture_merged`]). The newest [`MIN_MERGED`] deltas are always
/// merged, so a merge leaves room for a few deltas before the next one;
/// then each delta below them is merged too while its file is smaller than
/// the deltas merged so far together. The first one that is not (a large
/// delta near the root: an earlier merge of many changes) is kept, and
/// the merge goes onto it; 1 (the root alone) when every delta is merged.
/// So a merge writes at most about twice what the newest deltas hold, and
/// a large lower delta is not rewritten until the deltas above it have
/// grown as large (the levels of a size-tiered log).
#[must_use]
pub fn merge_point<B: super::SnapshotSource>(chain: &super::VerifiedChain<B>) -> usize {
    let sizes: Vec<usize> = chain.links().map(|(_, link)| link.bytes().len()).collect();
    let mut lowest = sizes.len().saturating_sub(MIN_MERGED).max(1);
    let mut merged: usize = sizes.get(lowest..).map_or(0, |s| s.iter().sum());
    while lowest > 1 && sizes[lowest - 1] < merged {
        lowest -= 1;
        merged += sizes[lowest];
    }
    lowest
}

/// The fewest deltas a merge ([`merge_point`]) replaces: the newest half
/// of a full chain.
pub const MIN_MERGED: usize = MAX_DELTA_DEPTH as usize / 2;

fn capture_merged_onto<B: super::SnapshotSource>(
    instance: &mut ActorInstance,
    base: &DeltaBase,
    chain: &super::VerifiedChain<B>,
    keep: usize,
    out: &mut Vec<u8>,
) -> Result<Result<DeltaCapture, FullInstead>, SnapshotError> {
    let links: Vec<_> = chain.links().collect();
    let (Some(&(_, root)), Some(&(on_seq, on))) = (links.first(), links.get(keep.max(1) - 1))
    else {
        return Ok(Err(FullInstead::Mismatch));
    };
    let root_pages = root.header().stored_pages();
    let on_header = on.header();
    let Some(on_crc) = recorded_crc32c(on.bytes()) else {
        return Ok(Err(FullInstead::Mismatch));
    };
    let info = instance.template.info.clone();
    let globals = capture_globals(instance)?;
    let store = &instance.store;
    let data: Vec<&[u8]> = instance.memories.iter().map(|m| m.data(store)).collect();
    if !fits(&data, on_header.memories.iter().map(|m| m.wasm_pages)) {
        return Ok(Err(FullInstead::Mismatch));
    }
    let kept_view = ChainPages::prefix_of(chain, keep.max(1));
    let head_view = ChainPages::of(chain);
    let mut memories = Vec::with_capacity(data.len());
    let (mut changed, mut dirty_pages) = (0u64, 0u64);
    let mut differs_from_head = false;
    for (m, (image, bytes)) in info.memories.iter().zip(&data).enumerate() {
        let dirty = match changed_pages(bytes) {
            Ok(spans) => spans,
            Err(e) => return Ok(Err(FullInstead::NoDirtyTracking(e.to_string()))),
        };
        dirty_pages += dirty.iter().map(|s| s.pages).sum::<u64>();
        let (stored, zeroed) = classify(bytes, &dirty, |page| Some(head_view.page(m, page)));
        differs_from_head |= !stored.is_empty() || !zeroed.is_empty();
        let limit = bytes.len() as u64 / PAGE_SIZE as u64;
        let mut pages: Vec<u64> = dirty
            .iter()
            .flat_map(|s| s.first_page..s.first_page + s.pages)
            .collect();
        for (_, link) in links.iter().skip(keep.max(1)) {
            if let Some(delta) = link.header().memories.get(m) {
                let runs = delta.runs.iter().map(|r| (r.first_page, r.pages));
                let zeros = delta.zero_runs.iter().map(|z| (z.first_page, z.pages));
                for (first, count) in runs.chain(zeros) {
                    pages.extend((first..first + count).filter(|&p| p < limit));
                }
            }
        }
        pages.sort_unstable();
        pages.dedup();
        let mut spans: Vec<PageSpan> = Vec::new();
        for page in pages {
            push_page(&mut spans, page);
        }
        let (runs, zero_runs) = classify(bytes, &spans, |page| Some(kept_view.page(m, page)));
        changed += runs.iter().map(|r| r.pages).sum::<u64>();
        changed += zero_runs.iter().map(|z| z.pages).sum::<u64>();
        if changed * 2 > root_pages {
            return Ok(Err(FullInstead::TooManyChanged {
                changed,
                root_pages,
            }));
        }
        memories.push(MemoryImage {
            index: image.index,
            wasm_pages: bytes.len() as u64 / WASM_PAGE,
            runs,
            zero_runs,
            patches: Vec::new(),
        });
    }
    let merged_on = BaseRef {
        seq: on_seq,
        crc32c: on_crc,
        depth: on_header.base.map_or(0, |b| b.depth) + 1,
    };
    let header = Header {
        module_digest: info.digest,
        abi_version: info.abi_version,
        clock_ns: instance.clock.now_ns(),
        globals,
        memories,
        base: Some(merged_on),
        on_image: None,
    };
    finish(header, base, !differs_from_head, dirty_pages, &data, out)
}

/// Sorts the candidate `spans` of `memory` into runs of pages to store and
/// runs of pages to record as zero, leaving out each page equal to what
/// `prior` says the chain holds there (`Some(None)`: zero, `Some(Some(p))`:
/// page `p`; `None`: unknown, so never left out).
fn classify<'a>(
    memory: &[u8],
    spans: &[PageSpan],
    prior: impl Fn(u64) -> Option<Option<&'a [u8]>>,
) -> (Vec<PageRun>, Vec<PageSpan>) {
    let mut runs: Vec<PageRun> = Vec::new();
    let mut zeros: Vec<PageSpan> = Vec::new();
    for span in spans {
        for page in span.first_page..span.first_page + span.pages {
            let start = page as usize * PAGE_SIZE;
            let now = &memory[start..start + PAGE_SIZE];
            let zero = page_is_zero(now);
            let same = match prior(page) {
                Some(None) => zero,
                Some(Some(before)) => before == now,
                None => false,
            };
            if same {
                continue;
            }
            if zero {
                push_page(&mut zeros, page);
            } else {
                push_page(&mut runs, page);
            }
        }
    }
    (runs, zeros)
}
