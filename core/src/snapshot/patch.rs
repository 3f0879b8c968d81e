//! Pages against the module's initial image (format version 3): what a
//! capture stores of each page that differs from the image (a whole page,
//! a zero run, or a patch of its changed 64-byte blocks), and putting an
//! image and a file's patches back into memory.

use super::format::{MemoryImage, PAGE_SIZE, PATCH_BLOCK, PagePatch, PageRun, PageSpan};
use super::memory::{copy, page_is_zero, push_page};
use crate::module::InitialImage;

/// A page with more changed blocks than this is stored whole: a patch
/// then saves less than half a page, and a whole page can be mapped.
const MAX_PATCH_BLOCKS: u32 = (PAGE_SIZE / PATCH_BLOCK / 2) as u32;

/// The bitmap of the 64-byte blocks in which `now` and `before` (one page
/// each) differ.
#[must_use]
pub(crate) fn changed_blocks(now: &[u8], before: &[u8]) -> u64 {
    let mut blocks = 0u64;
    for (i, (a, b)) in now
        .chunks_exact(PATCH_BLOCK)
        .zip(before.chunks_exact(PATCH_BLOCK))
        .enumerate()
    {
        if a != b {
            blocks |= 1 << i;
        }
    }
    blocks
}

/// How memory `m` (`data`, its current bytes) differs from the image: its
/// runs of stored pages, its zero runs and its patches (file offsets left
/// for [`lay_out`](super::format::lay_out)). Only `candidates` (ascending
/// spans, or every page when `None`) and the image's non-zero pages are
/// compared: any other page is zero in both.
pub(crate) fn against_image(
    data: &[u8],
    image: &InitialImage,
    m: usize,
    candidates: Option<&[PageSpan]>,
) -> (Vec<PageRun>, Vec<PageSpan>, Vec<PagePatch>) {
    let limit = (data.len() / PAGE_SIZE) as u64;
    let pages: Vec<u64> = match candidates {
        None => (0..limit).collect(),
        Some(spans) => {
            let mut pages: Vec<u64> = spans
                .iter()
                .flat_map(|s| s.first_page..s.first_page + s.pages)
                .chain(image.pages(m).map(|(p, _)| p))
                .filter(|&p| p < limit)
                .collect();
            pages.sort_unstable();
            pages.dedup();
            pages
        }
    };
    let (mut runs, mut zeros, mut patches) = (Vec::new(), Vec::new(), Vec::new());
    for page in pages {
        let start = page as usize * PAGE_SIZE;
        let now = &data[start..start + PAGE_SIZE];
        match image.page(m, page) {
            None if page_is_zero(now) => {}
            None => push_page(&mut runs, page),
            Some(before) if before == now => {}
            Some(_) if page_is_zero(now) => push_page(&mut zeros, page),
            Some(before) => {
                let blocks = changed_blocks(now, before);
                if blocks.count_ones() > MAX_PATCH_BLOCKS {
                    push_page(&mut runs, page);
                } else {
                    patches.push(PagePatch {
                        page,
                        blocks,
                        file_offset: 0,
                    });
                }
            }
        }
    }
    (runs, zeros, patches)
}

/// Writes the image's pages of memory `m` into `memory` (zero where the
/// image is not written), except those `skip` says the file replaces
/// whole (a stored run or a zero run): the memory a version-3 file's
/// runs, zero runs and patches then land on.
pub(crate) fn write_image(memory: &mut [u8], image: &InitialImage, m: usize, stored: &MemoryImage) {
    let limit = (memory.len() / PAGE_SIZE) as u64;
    for (page, bytes) in image.pages(m).take_while(|(p, _)| *p < limit) {
        if replaced_whole(stored, page) {
            continue;
        }
        let start = page as usize * PAGE_SIZE;
        copy(&mut memory[start..start + PAGE_SIZE], bytes);
    }
}

/// Whether `page` lies in one of `stored`'s runs or zero runs.
pub(crate) fn replaced_whole(stored: &MemoryImage, page: u64) -> bool {
    stored.run_at(page).is_some() || stored.zeroes(page)
}

/// Copies `patch`'s blocks from the file `bytes` over `page` (the page's 4
/// KiB, holding the image's content).
pub(crate) fn apply(page: &mut [u8], patch: &PagePatch, bytes: &[u8]) {
    let mut at = patch.file_offset as usize;
    for range in patch.ranges() {
        page[range.clone()].copy_from_slice(&bytes[at..at + PATCH_BLOCK]);
        at += PATCH_BLOCK;
    }
}

/// Appends the blocks of `patch` read from the page `page` to `out`.
pub(crate) fn append_blocks(out: &mut Vec<u8>, patch: &PagePatch, page: &[u8]) {
    for range in patch.ranges() {
        out.extend_from_slice(&page[range]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_found_exactly() {
        let before = vec![7u8; PAGE_SIZE];
        let mut now = before.clone();
        now[0] = 1;
        now[63] = 1;
        now[64 * 10 + 5] = 9;
        now[PAGE_SIZE - 1] = 0;
        let blocks = changed_blocks(&now, &before);
        assert_eq!(blocks, 1 | 1 << 10 | 1 << 63);
        let patch = PagePatch {
            page: 0,
            blocks,
            file_offset: 0,
        };
        let mut stored = Vec::new();
        append_blocks(&mut stored, &patch, &now);
        assert_eq!(stored.len() as u64, patch.len());
        let mut page = before.clone();
        apply(&mut page, &patch, &stored);
        assert_eq!(page, now);
    }
}
