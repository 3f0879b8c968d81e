//! Copy-on-write restore's memory mappings: a snapshot file's page runs
//! mapped `MAP_PRIVATE | MAP_FIXED` into an instance's linear memory, the
//! budget that keeps the process's mapping count far inside
//! `vm.max_map_count`, and the anonymous re-map that gives the memory back
//! to wasmtime zeroed. Every `unsafe` block of the copy-on-write restore is
//! here.
//!
//! # Why the re-map is needed
//! A pooled slot outlives its instance: wasmtime resets it with
//! `madvise(MADV_DONTNEED)`, which on a private *file* mapping brings the
//! file's content back instead of zeros (research notes, "Dirty-page
//! tracking on this kernel"): the next actor in the slot would read the
//! previous one's memory. So [`CowMappings::release`] maps anonymous zero
//! memory over each memory that has mapped runs before the instance's
//! store is dropped, on every drop path (`ActorInstance`'s `Drop`).
//!
//! # Budget
//! Mapping a run into the middle of a linear memory splits the memory's
//! anonymous mapping: each mapped run costs up to
//! [`MAPPINGS_PER_MAPPED_RUN`] of the process's `vm.max_map_count`
//! mappings. Runs shorter than [`MIN_MAPPED_RUN_BYTES`] are copied (they
//! cost a mapping for little gain), an instance maps at most
//! [`MAX_MAPPED_RUNS_PER_INSTANCE`] runs (its largest), and all instances
//! of the process together at most [`mapping_budget`] mappings; past
//! either, runs are copied.
//!
//! # Files
//! Stores never write a file in place (every store writes a new file and
//! renames it over the old name), so the mapped bytes stay the verified
//! ones as long as nobody else writes them. Someone else may (an operator
//! truncating or overwriting a file in the data dir): every memory with
//! mapped runs is registered with [`crate::mapped`]'s `SIGBUS` handler, and
//! every mapped file is held with its stamp, so that a truncated file's
//! pages read zeros instead of killing the process and
//! [`CowMappings::check`] reports the change (the instance is then failed,
//! never captured). Unlinking a mapped file (retention, gc) is safe on Linux: the
//! mapping keeps the inode alive until the instance is dropped; only the
//! disk space is freed later than the store counts it.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::engine::{MAPPING_HEADROOM, MAPPINGS_PER_INSTANCE, max_map_count};
use crate::mapped::{FileStamp, Guard, HeldFile};

/// Runs shorter than this (bytes; 16 pages of 4 KiB) are copied, not
/// mapped: copying 64 KiB costs about as much as the `mmap` call and the
/// faults it saves, and a mapping per short run would spend the budget.
pub const MIN_MAPPED_RUN_BYTES: usize = 64 << 10;

/// The most runs one instance maps (its largest ones); the rest are copied.
pub const MAX_MAPPED_RUNS_PER_INSTANCE: usize = 64;

/// Mappings one mapped run may add to the process: the file mapping and
/// the anonymous remainder it splits off.
pub const MAPPINGS_PER_MAPPED_RUN: u64 = 2;

/// `vm.max_map_count`'s default, used when it cannot be read.
const DEFAULT_MAX_MAP_COUNT: u64 = 65_530;

/// Mappings charged by mapped runs of live instances, process-wide.
static IN_USE: AtomicU64 = AtomicU64::new(0);

/// Mappings that mapped runs may use in this process, all instances
/// together: half of what `vm.max_map_count` leaves after the process's
/// headroom and the instances themselves ([`MAPPINGS_PER_INSTANCE`] per
/// slot of a pooled engine with `slots`; with instances allocated on
/// demand, whose number is not known, half of the rest is left to them).
#[must_use]
pub fn mapping_budget(slots: Option<u32>) -> u64 {
    static LIMIT: OnceLock<u64> = OnceLock::new();
    let limit = *LIMIT.get_or_init(|| max_map_count().unwrap_or(DEFAULT_MAX_MAP_COUNT));
    let rest = limit.saturating_sub(MAPPING_HEADROOM);
    let rest = match slots {
        Some(slots) => rest.saturating_sub(u64::from(slots) * MAPPINGS_PER_INSTANCE),
        None => rest / 2,
    };
    rest / 2
}

/// Mappings charged now by the mapped runs of every live instance of the
/// process (at most [`mapping_budget`]).
#[must_use]
pub fn mappings_in_use() -> u64 {
    IN_USE.load(Ordering::Relaxed)
}

/// One mapped run: `len` bytes at `offset` in memory `memory`, whose base
/// was `base` when it was mapped.
#[derive(Debug)]
struct Region {
    memory: usize,
    base: usize,
    offset: usize,
    len: usize,
}

/// The runs mapped into one instance's memories, and the mappings charged
/// for them. Empty for an instance that was not restored copy-on-write.
#[derive(Debug, Default)]
pub(crate) struct CowMappings {
    regions: Vec<Region>,
    charged: u64,
    /// The registered extent of each memory with mapped runs: (memory,
    /// base, guard).
    guards: Vec<(usize, usize, Guard)>,
    /// Every file mapped, held open with its stamp at map time.
    files: Vec<HeldFile>,
}

impl CowMappings {
    /// Charges mappings for up to `runs` mapped runs against `budget`
    /// (process-wide, see [`mapping_budget`]); returns how many runs may
    /// be mapped (possibly 0).
    pub(crate) fn charge(&mut self, runs: usize, budget: u64) -> usize {
        let wanted = runs.min(MAX_MAPPED_RUNS_PER_INSTANCE) as u64;
        let mut granted = 0;
        let _ = IN_USE.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            let room = budget.saturating_sub(used) / MAPPINGS_PER_MAPPED_RUN;
            granted = wanted.min(room);
            Some(used + granted * MAPPINGS_PER_MAPPED_RUN)
        });
        self.charged += granted * MAPPINGS_PER_MAPPED_RUN;
        granted as usize
    }

    /// Gives back the charge of `runs` runs that were not mapped after all.
    pub(crate) fn uncharge(&mut self, runs: usize) {
        let mappings = (runs as u64 * MAPPINGS_PER_MAPPED_RUN).min(self.charged);
        self.charged -= mappings;
        IN_USE.fetch_sub(mappings, Ordering::AcqRel);
    }

    /// Bytes of linear memory mapped from snapshot files.
    pub(crate) fn mapped_bytes(&self) -> u64 {
        self.regions.iter().map(|r| r.len as u64).sum()
    }

    /// Number of mapped runs.
    pub(crate) fn mapped_runs(&self) -> usize {
        self.regions.len()
    }

    /// Maps `len` bytes of `file` from `file_offset` copy-on-write over
    /// `[offset, offset + len)` of memory `memory`, whose accessible bytes
    /// are `memory_len` at `base`.
    ///
    /// # Errors
    /// `InvalidInput` if the range is not 4 KiB-aligned or not inside the
    /// memory; the OS error if `mmap` fails (the memory is untouched then).
    pub(crate) fn map(
        &mut self,
        memory: usize,
        (base, memory_len): (*mut u8, usize),
        offset: usize,
        len: usize,
        file: &File,
        file_offset: u64,
    ) -> io::Result<()> {
        let page = crate::snapshot::PAGE_SIZE;
        let inside = offset.checked_add(len).is_some_and(|end| end <= memory_len);
        let aligned = (base as usize).is_multiple_of(page)
            && offset.is_multiple_of(page)
            && len.is_multiple_of(page)
            && file_offset.is_multiple_of(page as u64);
        if !inside || !aligned || len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("run {offset}+{len} does not fit a {memory_len}-byte memory in pages"),
            ));
        }
        let file_offset = libc::off_t::try_from(file_offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file offset too large"))?;
        self.guard(memory, base as usize, memory_len)?;
        self.hold(file)?;
        // SAFETY: [base + offset, base + offset + len) is page-aligned and
        // lies inside the accessible part of a linear memory that this
        // instance owns alone (checked above against its current size);
        // no Rust reference into it is alive (the caller holds the store
        // mutably and no slice of the memory). MAP_FIXED replaces those
        // pages in place, with the same read-write protection wasmtime
        // gave them: only their contents change, from zeros to the file's
        // bytes, which wasmtime neither caches nor tracks. The file is
        // never written in place (module docs), so the pages stay the
        // verified bytes; `release` undoes the mapping before the store
        // gives the memory back.
        let mapped = unsafe {
            libc::mmap(
                base.add(offset).cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_FIXED,
                file.as_raw_fd(),
                file_offset,
            )
        };
        if mapped == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        self.regions.push(Region {
            memory,
            base: base as usize,
            offset,
            len,
        });
        Ok(())
    }

    /// Registers memory `memory` at `base` with the `SIGBUS` handler, once.
    fn guard(&mut self, memory: usize, base: usize, len: usize) -> io::Result<()> {
        if self
            .guards
            .iter()
            .any(|(m, b, _)| *m == memory && *b == base)
        {
            return Ok(());
        }
        let guard = Guard::register(base, len, true).ok_or_else(|| {
            io::Error::other("no free slot in the mapped-file registry (copying instead)")
        })?;
        self.guards.push((memory, base, guard));
        Ok(())
    }

    /// Holds `file` (a descriptor of its own) with its stamp, once.
    fn hold(&mut self, file: &File) -> io::Result<()> {
        let id = FileStamp::of(file)?.identity();
        if !self.files.iter().any(|f| f.stamp().identity() == id) {
            self.files.push(HeldFile::new(file.try_clone()?)?);
        }
        Ok(())
    }

    /// Whether the mapped files still back the memory as they did when
    /// mapped: `Err` with what went wrong when a fault inside a mapped
    /// memory was answered with zeros (a file shrank) or a file's stamp
    /// changed ([`crate::mapped`]). Cheap: atomic loads and an `fstat` per
    /// mapped file; nothing for an instance without mapped runs.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.guards.iter().any(|(_, _, guard)| guard.poisoned()) {
            return Err(
                "a mapped page lies past the file's end now (the file was truncated)".into(),
            );
        }
        for file in &self.files {
            if let Some(change) = file.changed() {
                return Err(change);
            }
        }
        Ok(())
    }

    /// Maps anonymous zero memory over the whole accessible part of every
    /// memory that has mapped runs, if it still starts where it did
    /// (`current(memory)` gives a memory's base and accessible length now),
    /// and gives back the charged mappings. One mapping over the whole
    /// memory, not one per run: the memory becomes a single mapping again
    /// (re-mapping run by run leaves the pieces unmerged, and a pooled
    /// slot would collect them). Its other pages are this instance's too
    /// and wasmtime zeroes them anyway. A memory that moved was unmapped
    /// by wasmtime with the runs in it. Called before the store is dropped
    /// (module docs). If the kernel refuses the re-map, the process
    /// aborts: the slot would otherwise hand this actor's memory to the
    /// next one.
    pub(crate) fn release(&mut self, current: impl Fn(usize) -> Option<(*mut u8, usize)>) {
        let mut memories: Vec<(usize, usize, usize)> = self
            .regions
            .drain(..)
            .map(|r| (r.memory, r.base, r.offset + r.len))
            .collect();
        memories.sort_unstable();
        memories.dedup_by(|later, first| {
            let same = later.0 == first.0 && later.1 == first.1;
            if same {
                first.2 = first.2.max(later.2);
            }
            same
        });
        for (memory, mapped_base, mapped_end) in memories {
            let Some((base, memory_len)) = current(memory) else {
                continue;
            };
            if base as usize != mapped_base || mapped_end > memory_len {
                continue;
            }
            if let Err(e) = map_zero(base, memory_len) {
                tracing::error!(
                    "re-mapping a {memory_len}-byte copy-on-write memory anonymous failed: \
                     {e}; aborting rather than leaking it into the next instance"
                );
                eprintln!("stasis: copy-on-write memory cannot be reset: {e}");
                std::process::abort();
            }
        }
        // Unregistered only now: the memories are anonymous again.
        self.guards.clear();
        self.files.clear();
        IN_USE.fetch_sub(self.charged, Ordering::AcqRel);
        self.charged = 0;
    }
}

impl Drop for CowMappings {
    fn drop(&mut self) {
        // `release` ran already on every path that had mappings (the
        // instance's Drop); this only returns a charge left by a restore
        // that failed between charging and mapping.
        debug_assert!(self.regions.is_empty(), "mapped runs dropped unreleased");
        IN_USE.fetch_sub(self.charged, Ordering::AcqRel);
    }
}

/// Maps fresh anonymous zero pages, read-write, over the `len` accessible
/// bytes of the memory at `base`.
fn map_zero(base: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: `[base, base + len)` is the accessible part of a linear
    // memory into which `CowMappings::map` mapped runs, still mapped at
    // the same base (checked by the caller), and owned by the instance
    // being dropped: no guest code runs and no Rust reference into it is
    // alive. Replacing it with zero pages of the same protection is what
    // wasmtime expects of a memory it gets back (module docs).
    let mapped = unsafe {
        libc::mmap(
            base.cast(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if mapped == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_stop_at_the_instance_cap_and_the_process_budget() {
        // Nothing else in this test binary maps runs, so the count is ours.
        let used = mappings_in_use();
        let mut one = CowMappings::default();
        // Room for 5 runs in the process budget: 5 granted of 100.
        assert_eq!(one.charge(100, used + 5 * MAPPINGS_PER_MAPPED_RUN + 1), 5);
        assert_eq!(mappings_in_use(), used + 5 * MAPPINGS_PER_MAPPED_RUN);
        let mut other = CowMappings::default();
        assert_eq!(
            other.charge(3, used + 5 * MAPPINGS_PER_MAPPED_RUN),
            0,
            "budget spent"
        );
        one.uncharge(2);
        assert_eq!(other.charge(3, used + 5 * MAPPINGS_PER_MAPPED_RUN), 2);
        drop(one);
        drop(other);
        assert_eq!(mappings_in_use(), used, "dropping gives every charge back");
        // However large the budget, one instance maps at most its cap.
        let mut big = CowMappings::default();
        assert_eq!(big.charge(1000, u64::MAX / 2), MAX_MAPPED_RUNS_PER_INSTANCE);
        drop(big);
        assert_eq!(mappings_in_use(), used);
        // The budget leaves the pooled slots their own mappings.
        let fewer = mapping_budget(Some(1000));
        assert!(fewer < mapping_budget(Some(10)));
        assert_eq!(mapping_budget(Some(u32::MAX)), 0);
    }
}
