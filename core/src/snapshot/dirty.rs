//! Which pages of a linear memory may differ from the snapshot the
//! instance was restored from or last captured into: read from the
//! kernel's page table (`/proc/self/pagemap`, Linux
//! `Documentation/admin-guide/mm/pagemap.rst`), with no write tracking of
//! our own.
//!
//! Every page of an instance's memory starts out either unmapped (it reads
//! zero), mapped from a file (a copy-on-write restore, [`crate::cow`], or
//! wasmtime's memory image of a fresh instance), or written by the host (a
//! copied run). The first guest write to a file-mapped page gives the
//! instance a private anonymous copy, and a write to an unmapped page
//! gives it an anonymous page. So the pages whose content may have changed
//! since the instance was made are exactly those that are now
//! *present and not file-backed* (pagemap bit 63 set, bit 61 clear) or
//! *swapped* (bit 62). The set is a superset: it also holds pages the host
//! copied in at restore, pages only read from the shared zero page, and
//! pages written back to their old content. A delta stores each such page,
//! as data or as zero, so a superset is always exact on restore; it is
//! only larger than it needs to be.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::format::{PAGE_SIZE, PageSpan};
use super::memory::push_page;

/// pagemap: the page is present in RAM.
const PRESENT: u64 = 1 << 63;
/// pagemap: the page is swapped out.
const SWAPPED: u64 = 1 << 62;
/// pagemap: the page is file-backed or shared anonymous.
const FILE_OR_SHARED: u64 = 1 << 61;
/// Entries read from pagemap per `pread` (8 bytes each: 512 KiB).
const ENTRIES_PER_READ: usize = 64 << 10;

/// The 4 KiB pages of `data` (page-aligned, a linear memory of this
/// process) that may have changed since its mapping was made, as ascending
/// runs (module docs). Call it only while no guest code runs on the
/// memory.
///
/// # Errors
/// The I/O error of opening or reading `/proc/self/pagemap` (no `/proc`,
/// or a kernel without it): the caller then writes a full snapshot.
pub(crate) fn changed_pages(data: &[u8]) -> io::Result<Vec<PageSpan>> {
    let base = data.as_ptr() as usize;
    if !base.is_multiple_of(PAGE_SIZE) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "linear memory is not page-aligned",
        ));
    }
    let pages = data.len() / PAGE_SIZE;
    let pagemap = File::open("/proc/self/pagemap")?;
    let mut runs: Vec<PageSpan> = Vec::new();
    let mut buf = vec![0u8; ENTRIES_PER_READ.min(pages.max(1)) * 8];
    let mut page = 0usize;
    while page < pages {
        let count = (pages - page).min(ENTRIES_PER_READ);
        let bytes = &mut buf[..count * 8];
        let offset = ((base / PAGE_SIZE + page) * 8) as u64;
        pagemap.read_exact_at(bytes, offset)?;
        for (i, entry) in bytes.chunks_exact(8).enumerate() {
            let mut word = [0u8; 8];
            word.copy_from_slice(entry);
            let entry = u64::from_le_bytes(word);
            let changed =
                entry & SWAPPED != 0 || (entry & PRESENT != 0 && entry & FILE_OR_SHARED == 0);
            if !changed {
                continue;
            }
            push_page(&mut runs, (page + i) as u64);
        }
        page += count;
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An anonymous private mapping of `pages` pages, unmapped on drop.
    struct Anon(*mut u8, usize);

    impl Anon {
        fn new(pages: usize) -> Self {
            let len = pages * PAGE_SIZE;
            // SAFETY: a fresh private anonymous mapping, owned by the value.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(ptr, libc::MAP_FAILED);
            Self(ptr.cast(), len)
        }

        fn bytes(&mut self) -> &mut [u8] {
            // SAFETY: the mapping is `self.1` bytes, readable and writable.
            unsafe { std::slice::from_raw_parts_mut(self.0, self.1) }
        }
    }

    impl Drop for Anon {
        fn drop(&mut self) {
            // SAFETY: unmaps exactly the mapping made in `new`.
            unsafe { libc::munmap(self.0.cast(), self.1) };
        }
    }

    #[test]
    fn written_pages_are_changed_and_untouched_ones_are_not() {
        let mut memory = Anon::new(16);
        assert_eq!(changed_pages(memory.bytes()).expect("pagemap"), []);
        let bytes = memory.bytes();
        bytes[3 * PAGE_SIZE] = 1;
        bytes[4 * PAGE_SIZE + 100] = 2;
        bytes[9 * PAGE_SIZE + 4095] = 3;
        assert_eq!(
            changed_pages(memory.bytes()).expect("pagemap"),
            [
                PageSpan {
                    first_page: 3,
                    pages: 2
                },
                PageSpan {
                    first_page: 9,
                    pages: 1
                }
            ]
        );
    }

    /// What capture relies on (`capture_into`): on anonymous memory, the
    /// runs found by reading only the changed pages are the runs of a scan
    /// of every page: pages only read (the shared zero page), written back
    /// to zero, or never touched are all left out either way.
    #[test]
    fn scanning_only_changed_pages_finds_the_runs_of_a_full_scan() {
        use crate::snapshot::memory::{scan_candidate_runs, scan_runs};
        let pages = 64;
        let mut memory = Anon::new(pages);
        let bytes = memory.bytes();
        let mut read_sum = 0u64;
        for page in (0..pages).step_by(5) {
            read_sum += u64::from(bytes[page * PAGE_SIZE + 7]);
        }
        assert_eq!(read_sum, 0);
        for page in [1, 2, 3, 10, 11, 40, 63] {
            bytes[page * PAGE_SIZE + page] = page as u8;
        }
        // Written, then zero again: changed, but not in a run.
        bytes[20 * PAGE_SIZE] = 9;
        bytes[20 * PAGE_SIZE] = 0;
        bytes[11 * PAGE_SIZE + 11] = 0;
        let candidates = changed_pages(memory.bytes()).expect("pagemap");
        let full = scan_runs(memory.bytes());
        assert_eq!(scan_candidate_runs(memory.bytes(), &candidates), full);
        let runs: Vec<(u64, u64)> = full.iter().map(|r| (r.first_page, r.pages)).collect();
        assert_eq!(runs, [(1, 3), (10, 1), (40, 1), (63, 1)]);
    }

    #[test]
    fn unaligned_memory_is_refused() {
        let mut memory = Anon::new(2);
        let bytes = memory.bytes();
        assert!(changed_pages(&bytes[1..]).is_err());
    }
}
