//! Chains of snapshots: a full snapshot and the deltas taken on it, in
//! order ([`VerifiedChain`]), checked to fit together, and turned back
//! into one full snapshot file ([`flatten`]) where a self-contained file
//! is needed (a move to a worker with its own store); and a chain's pages
//! looked up in its files ([`ChainPages`]), which a new delta is compared
//! with.

use super::capture::write_file;
use super::format::{
    BaseRef, Header, MAX_DELTA_DEPTH, MemoryImage, PAGE_SIZE, SnapshotError, WASM_PAGE,
};
use super::memory::{copy, scan_runs};
use super::patch::{apply, write_image};
use super::source::SnapshotSource;
use super::verify::{VerifiedSnapshot, recorded_crc32c};
use crate::module::InitialImage;
use std::collections::HashMap;

/// A full snapshot followed by the deltas of its chain, oldest first, each
/// verified and each naming the one before it as its base (sequence
/// number, CRC32C trailer, depth). Restoring it
/// ([`restore_chain`](super::restore_chain)) gives the state of the last
/// one.
pub struct VerifiedChain<B> {
    links: Vec<(u64, VerifiedSnapshot<B>)>,
}

impl<B: SnapshotSource> std::fmt::Debug for VerifiedChain<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let seqs: Vec<u64> = self.links.iter().map(|(seq, _)| *seq).collect();
        f.debug_struct("VerifiedChain")
            .field("seqs", &seqs)
            .finish()
    }
}

impl<B: SnapshotSource> VerifiedChain<B> {
    /// Whether every link's bytes still hold what was verified
    /// ([`SnapshotSource::intact`]).
    ///
    /// # Errors
    /// [`SnapshotError::MappedFileChanged`] naming the link that changed.
    pub fn intact(&self) -> Result<(), SnapshotError> {
        for (seq, link) in self.links() {
            link.source()
                .intact()
                .map_err(|e| SnapshotError::MappedFileChanged(format!("snapshot {seq}: {e}")))?;
        }
        Ok(())
    }

    /// Puts `links` (sequence number and verified snapshot, oldest first)
    /// together as a chain.
    ///
    /// # Errors
    /// [`SnapshotError::Layout`] naming the link that does not fit: the
    /// first is a delta, a delta's base is not the link before it (another
    /// sequence number or checksum: the base was replaced), the depths do
    /// not count up from 1, a memory shrinks, or the chain is longer than
    /// [`MAX_DELTA_DEPTH`] deltas. Empty `links` are refused too.
    pub fn new(links: Vec<(u64, VerifiedSnapshot<B>)>) -> Result<Self, SnapshotError> {
        let Some((first_seq, first)) = links.first() else {
            return Err(SnapshotError::Layout("an empty snapshot chain".to_owned()));
        };
        if let Some(base) = first.header().base {
            return Err(SnapshotError::Layout(format!(
                "snapshot {first_seq} is a delta on snapshot {}, not a full snapshot",
                base.seq
            )));
        }
        if links.len() > MAX_DELTA_DEPTH as usize + 1 {
            return Err(SnapshotError::Layout(format!(
                "a chain of {} deltas, at most {MAX_DELTA_DEPTH} are allowed",
                links.len() - 1
            )));
        }
        for (depth, pair) in links.windows(2).enumerate() {
            let [(base_seq, base), (seq, delta)] = pair else {
                continue;
            };
            let expected = BaseRef {
                seq: *base_seq,
                crc32c: recorded_crc32c(base.bytes()).unwrap_or_default(),
                depth: depth as u32 + 1,
            };
            let named = delta.header().base;
            if named != Some(expected) {
                return Err(SnapshotError::Layout(format!(
                    "snapshot {seq} names base {named:?}, but its chain has {expected:?} there \
                     (the base was replaced or the chain is out of order)"
                )));
            }
            let shrinks = base
                .header()
                .memories
                .iter()
                .zip(&delta.header().memories)
                .any(|(b, d)| d.wasm_pages < b.wasm_pages);
            if shrinks {
                return Err(SnapshotError::Layout(format!(
                    "snapshot {seq} has a memory smaller than its base {base_seq} has"
                )));
            }
        }
        Ok(Self { links })
    }

    /// The sequence number of the last link (the state the chain restores).
    #[must_use]
    pub fn head_seq(&self) -> u64 {
        self.links.last().map_or(0, |(seq, _)| *seq)
    }

    /// The last link's header (sizes, globals and clock of the chain's
    /// state).
    #[must_use]
    pub fn head(&self) -> &Header {
        self.links
            .last()
            .map(|(_, s)| s.header())
            .expect("a chain is never empty")
    }

    /// The links, oldest (the full snapshot) first.
    pub fn links(&self) -> impl ExactSizeIterator<Item = (u64, &VerifiedSnapshot<B>)> {
        self.links.iter().map(|(seq, s)| (*seq, s))
    }

    /// Pages stored by the chain's full snapshot.
    #[must_use]
    pub fn root_pages(&self) -> u64 {
        self.links
            .first()
            .map_or(0, |(_, s)| s.header().stored_pages())
    }

    /// The CRC32C trailer of the last link.
    #[must_use]
    pub fn head_crc32c(&self) -> u32 {
        self.links
            .last()
            .and_then(|(_, s)| recorded_crc32c(s.bytes()))
            .unwrap_or_default()
    }
}

/// The chain's state as one full snapshot file (format version 1, so it
/// restores without the module's initial image: an upgrade carries it to
/// another module): each memory is put together in a buffer (the image
/// when the root is taken on it, the full snapshot's pages, zero runs and
/// patches, then each delta's pages and zero runs in order) and written as
/// a capture without an image would.
/// Needs as much memory as the actor's linear memories.
///
/// # Errors
/// Only if the header cannot be encoded (more than 16 MiB of page runs).
pub fn flatten<B: SnapshotSource>(chain: &VerifiedChain<B>) -> Result<Vec<u8>, SnapshotError> {
    let head = chain.head();
    let mut memories: Vec<Vec<u8>> = head
        .memories
        .iter()
        .map(|m| vec![0u8; (m.wasm_pages * WASM_PAGE) as usize])
        .collect();
    for (_, link) in chain.links() {
        let bytes = link.bytes();
        for (m, (image, memory)) in link.header().memories.iter().zip(&mut memories).enumerate() {
            if let Some(initial) = link.image() {
                write_image(memory, initial, m, image);
            }
            for run in &image.runs {
                let src = run.file_offset as usize;
                let dst = run.first_page as usize * PAGE_SIZE;
                let len = run.pages as usize * PAGE_SIZE;
                copy(&mut memory[dst..dst + len], &bytes[src..src + len]);
            }
            for zero in &image.zero_runs {
                let start = zero.first_page as usize * PAGE_SIZE;
                memory[start..start + zero.pages as usize * PAGE_SIZE].fill(0);
            }
            for patch in &image.patches {
                let start = patch.page as usize * PAGE_SIZE;
                apply(&mut memory[start..start + PAGE_SIZE], patch, bytes);
            }
        }
    }
    let mut header = Header {
        module_digest: head.module_digest,
        abi_version: head.abi_version,
        clock_ns: head.clock_ns,
        globals: head.globals.clone(),
        memories: head
            .memories
            .iter()
            .zip(&memories)
            .map(|(m, data)| MemoryImage {
                index: m.index,
                wasm_pages: m.wasm_pages,
                runs: scan_runs(data),
                zero_runs: Vec::new(),
                patches: Vec::new(),
            })
            .collect(),
        base: None,
        on_image: None,
    };
    let slices: Vec<&[u8]> = memories.iter().map(Vec::as_slice).collect();
    let mut out = Vec::new();
    write_file(&mut out, &mut header, &slices)?;
    // The head's host state is the chain's (a move ships it with the
    // memory).
    if let Some((_, last)) = chain.links().last() {
        let section = super::host_state::host_state(last.bytes(), last.header());
        super::host_state::append_host_state(&mut out, &header, section);
    }
    Ok(out)
}

/// The pages of a chain's state, looked up in its files without putting
/// the memory together: what [`capture_delta`](super::capture_delta)
/// compares dirty pages with, so a delta stores only pages that differ
/// from the state it is taken on. Made from a [`VerifiedChain`], so a
/// delta is never taken on files that do not restore.
pub struct ChainPages<'a> {
    links: Vec<(&'a Header, &'a [u8])>,
    /// The root's initial image (a version-3 root): pages no link names.
    image: Option<&'a InitialImage>,
    /// The root's patched pages, put together: (memory, page) → bytes.
    patched: HashMap<(usize, u64), Box<[u8]>>,
}

impl<'a> ChainPages<'a> {
    /// The pages of `chain`'s state.
    #[must_use]
    pub fn of<B: SnapshotSource>(chain: &'a VerifiedChain<B>) -> Self {
        Self::prefix_of(chain, chain.links.len())
    }

    /// The pages of `chain`'s root alone (its full snapshot).
    #[must_use]
    pub fn root_of<B: SnapshotSource>(chain: &'a VerifiedChain<B>) -> Self {
        Self::prefix_of(chain, 1)
    }

    /// The pages of the state of `chain`'s first `links` links (the root
    /// and `links - 1` deltas): what a merged delta
    /// ([`capture_merged`](super::capture_merged)) on the last of them is
    /// compared with.
    #[must_use]
    pub fn prefix_of<B: SnapshotSource>(chain: &'a VerifiedChain<B>, links: usize) -> Self {
        let image = chain.links.first().and_then(|(_, root)| root.image());
        let mut patched = HashMap::new();
        if let Some((_, root)) = chain.links.first() {
            for (m, memory) in root.header().memories.iter().enumerate() {
                for patch in &memory.patches {
                    let mut page: Box<[u8]> = image
                        .and_then(|i| i.page(m, patch.page))
                        .map_or_else(|| vec![0u8; PAGE_SIZE].into(), Into::into);
                    apply(&mut page, patch, root.bytes());
                    patched.insert((m, patch.page), page);
                }
            }
        }
        Self {
            links: chain
                .links()
                .take(links)
                .map(|(_, link)| (link.header(), link.bytes()))
                .collect(),
            image,
            patched,
        }
    }

    /// Page `page` (4 KiB) of memory `m` (in header order) as the chain
    /// leaves it: the bytes of the newest file that stores it (or the
    /// root's patch over the image); `None` if the newest file to mention
    /// it records it as zero, or none does and the image (if the root is
    /// taken on one) has none there.
    #[must_use]
    pub fn page(&self, m: usize, page: u64) -> Option<&[u8]> {
        for (header, bytes) in self.links.iter().rev() {
            let image = header.memories.get(m)?;
            if let Some(run) = image.run_at(page) {
                let at = run.file_offset as usize + (page - run.first_page) as usize * PAGE_SIZE;
                return bytes.get(at..at + PAGE_SIZE);
            }
            if image.zeroes(page) {
                return None;
            }
            if let Some(patched) = self.patched.get(&(m, page))
                && image
                    .patches
                    .binary_search_by_key(&page, |p| p.page)
                    .is_ok()
            {
                return Some(patched);
            }
        }
        self.image.and_then(|image| image.page(m, page))
    }
}
