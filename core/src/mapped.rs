//! Guards for snapshot files mapped into the process: a file changed
//! behind Stasis's back (truncated, or written in place) can neither take
//! the process down nor become a snapshot.
//!
//! # What can go wrong
//! A restore maps snapshot files copy-on-write into linear memory
//! ([`crate::cow`]) and the stores map them read-only for the host
//! ([`SnapshotBytes::map_file`]). Pages of a `MAP_PRIVATE` file mapping
//! that were not written still show the file's page cache, so:
//!
//! * a file **truncated** under the mapping makes every access past its
//!   new end raise `SIGBUS`, in guest code or in the host (a capture reads
//!   the memory), which kills the whole process by default;
//! * a file **written in place** shows its new bytes in every page the
//!   actor never wrote: the actor computes on them, and a capture would
//!   store them as a valid snapshot.
//!
//! # The guard
//! * **Faults**: a process-wide `SIGBUS` handler ([`install`]) and an
//!   async-signal-safe registry of mapped ranges (a fixed array of atomics,
//!   [`SLOTS`] slots: one per linear memory with mapped runs, one per
//!   mapped snapshot file). A fault inside a registered range is answered
//!   by mapping anonymous zeros over the whole range (`mmap` is
//!   async-signal-safe; one mapping, however many pages would fault) and
//!   setting the range's *poisoned* flag; the access then reads zeros, and
//!   so does the rest of the range: the actor's memory is lost, as it
//!   would be with the process. Any other `SIGBUS` goes to the handler that was
//!   installed before (Rust's stack-overflow handler, then the default
//!   action). Wasmtime installs no `SIGBUS` handler on Linux (only
//!   `SIGSEGV`, `SIGILL` and `SIGFPE`; `SIGBUS` on macOS and FreeBSD), so a
//!   fault in wasm code reaches this handler directly; it is installed when
//!   the engine is built ([`crate::engine::StasisEngine::new`]), after
//!   wasmtime's, and chains to whatever it replaced.
//! * **Changes**: each mapped file's identity and stamp ([`FileStamp`]:
//!   device, inode, length, mtime, ctime) is taken with `fstat` on the held
//!   descriptor when it is mapped and compared again after every guest call
//!   and every capture ([`crate::instance::ActorInstance::mapped_intact`]).
//!   Truncation and writes move the length or the mtime. A rename of the
//!   file or over its name, or a deletion (retention), leaves the mapped
//!   inode's bytes as they were: only its link count and ctime move, which
//!   are not compared.
//!
//! A failed check (a poisoned range or a changed stamp) fails the actor:
//! its memory is never captured again, so no snapshot is written from it.
//!
//! # Limits
//! A write that keeps the length and sets the mtime back to its old value
//! (e.g. `touch -d` after it) is not seen: the ctime would tell, but a
//! plain rename of the file moves it too. A guest may compute on changed bytes for the rest of the call
//! that reads them; that call's answer is replaced by the failure. When
//! every slot is taken, copy-on-write restores copy instead of mapping and
//! the stores read files into memory instead of mapping them.
//!
//! [`SnapshotBytes::map_file`]: crate::snapshot_store::SnapshotBytes::map_file

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

/// Ranges that may be registered at once, process-wide.
pub const SLOTS: usize = 16_384;

const FREE: u8 = 0;
const BUSY: u8 = 1;
const LIVE: u8 = 2;

/// One registered range; only atomics, so the handler may read it.
struct Slot {
    state: AtomicU8,
    start: AtomicUsize,
    len: AtomicUsize,
    writable: AtomicBool,
    poisoned: AtomicBool,
}

#[allow(
    clippy::declare_interior_mutable_const,
    reason = "the initialiser of a static array of atomics"
)]
const EMPTY: Slot = Slot {
    state: AtomicU8::new(FREE),
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    writable: AtomicBool::new(false),
    poisoned: AtomicBool::new(false),
};

static REGISTRY: [Slot; SLOTS] = [EMPTY; SLOTS];
/// One past the highest slot ever taken: the handler scans no further.
static HIGH: AtomicUsize = AtomicUsize::new(0);
/// The action `SIGBUS` had before [`install`], as written by `sigaction`.
static mut PREVIOUS: libc::sigaction = {
    // SAFETY: `sigaction` is a plain C struct; all zeros is `SIG_DFL`
    // with no flags and an empty mask.
    unsafe { std::mem::zeroed() }
};
static INSTALL: Once = Once::new();

/// Installs the `SIGBUS` handler once per process (module docs). Call it
/// after wasmtime's engine exists, so that it runs first.
pub fn install() {
    INSTALL.call_once(|| {
        // SAFETY: `action` is fully initialised below; `PREVIOUS` is
        // written only here, once (`Once`), before the handler can run
        // (it is installed by this very call), and read only by the
        // handler afterwards.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
            action.sa_sigaction = on_sigbus as *const () as usize;
            libc::sigemptyset(&raw mut action.sa_mask);
            if libc::sigaction(libc::SIGBUS, &raw const action, &raw mut PREVIOUS) != 0 {
                panic!(
                    "installing the SIGBUS handler for mapped snapshot files: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    });
}

/// Whether [`install`] ran.
#[must_use]
pub fn installed() -> bool {
    INSTALL.is_completed()
}

/// A registered range, unregistered on drop. Its [`Guard::poisoned`] says
/// whether a fault inside it was answered with zeros.
#[derive(Debug)]
pub struct Guard {
    slot: usize,
}

impl Guard {
    /// Registers `[start, start + len)`: a fault there is answered by a
    /// zero page, read-write when `writable` (linear memory) or read-only.
    /// `None` when every slot is taken or the handler is not installed.
    #[must_use]
    pub fn register(start: usize, len: usize, writable: bool) -> Option<Self> {
        if !installed() || len == 0 {
            return None;
        }
        for (i, slot) in REGISTRY.iter().enumerate() {
            if slot
                .state
                .compare_exchange(FREE, BUSY, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                slot.start.store(start, Ordering::Relaxed);
                slot.len.store(len, Ordering::Relaxed);
                slot.writable.store(writable, Ordering::Relaxed);
                slot.poisoned.store(false, Ordering::Relaxed);
                slot.state.store(LIVE, Ordering::Release);
                HIGH.fetch_max(i + 1, Ordering::AcqRel);
                return Some(Self { slot: i });
            }
        }
        None
    }

    /// Whether a fault in the range was answered with zeros: the file
    /// shrank under the mapping.
    #[must_use]
    pub fn poisoned(&self) -> bool {
        REGISTRY[self.slot].poisoned.load(Ordering::Acquire)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let slot = &REGISTRY[self.slot];
        slot.state.store(BUSY, Ordering::Release);
        slot.len.store(0, Ordering::Relaxed);
        slot.state.store(FREE, Ordering::Release);
    }
}

/// The `SIGBUS` handler (module docs). Async-signal-safe: atomics and
/// `mmap` only.
extern "C" fn on_sigbus(
    signum: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid `siginfo_t` to an SA_SIGINFO
    // handler; `si_addr` is the faulting address for SIGBUS.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = crate::snapshot::PAGE_SIZE;
    let high = HIGH.load(Ordering::Acquire).min(SLOTS);
    for slot in &REGISTRY[..high] {
        if slot.state.load(Ordering::Acquire) != LIVE {
            continue;
        }
        let start = slot.start.load(Ordering::Relaxed);
        let len = slot.len.load(Ordering::Relaxed);
        if addr < start || addr - start >= len {
            continue;
        }
        let prot = if slot.writable.load(Ordering::Relaxed) {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // The whole range at once: one mapping however many of its pages
        // would fault, so a scan over a truncated file cannot run the
        // process out of mappings; the single page if that fails.
        let whole = (start, (len + page - 1) & !(page - 1));
        let single = (addr & !(page - 1), page);
        for (at, len) in [whole, single] {
            // SAFETY: `[at, at + len)` lies inside a registered mapping of
            // a snapshot file (linear memory restored copy-on-write, or a
            // store's read-only map) whose file no longer backs it:
            // replacing it with zeros of the same protection changes only
            // what the retried access and later ones read, and the poisoned
            // flag set below makes the owner fail the actor before those
            // bytes are used as state.
            let mapped = unsafe {
                libc::mmap(
                    at as *mut libc::c_void,
                    len,
                    prot,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if mapped != libc::MAP_FAILED {
                slot.poisoned.store(true, Ordering::Release);
                return;
            }
        }
        break;
    }
    // SAFETY: `PREVIOUS` was written once by `install` before this handler
    // was installed and is only read here.
    let previous = unsafe { std::ptr::read(&raw const PREVIOUS) };
    chain(&previous, signum, info, context);
}

/// Hands a `SIGBUS` this module does not own to the action installed
/// before it; the default action is restored and the fault retried (it
/// then ends the process as it would have without this module).
fn chain(
    previous: &libc::sigaction,
    signum: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    let handler = previous.sa_sigaction;
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // SAFETY: resetting a signal's action is async-signal-safe; the
        // faulting access is retried on return and takes the default
        // action (a SIGBUS from a fault cannot be ignored usefully).
        unsafe {
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(signum, &raw const default, std::ptr::null_mut());
        }
    } else if previous.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: an SA_SIGINFO action's `sa_sigaction` is a handler of
        // this signature, called with what the kernel gave this one.
        unsafe {
            let f = std::mem::transmute::<
                usize,
                extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void),
            >(handler);
            f(signum, info, context);
        }
    } else {
        // SAFETY: without SA_SIGINFO, `sa_sigaction` holds an
        // `sa_handler` taking the signal number only.
        unsafe {
            let f = std::mem::transmute::<usize, extern "C" fn(libc::c_int)>(handler);
            f(signum);
        }
    }
}

/// A file's identity and stamp as `fstat` reports them on a held
/// descriptor (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl FileStamp {
    /// The stamp of `file` now.
    ///
    /// # Errors
    /// The OS error of `fstat`.
    pub fn of(file: &File) -> std::io::Result<Self> {
        let meta = file.metadata()?;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Ok(Self {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
        })
    }

    /// Device and inode: the file itself, whatever its name.
    #[must_use]
    pub fn identity(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    /// What changed in `file` since this stamp was taken, if its content
    /// may have: its length or its mtime (a rename of the file, over its
    /// name, a link or a deletion moves only its ctime and link count).
    #[must_use]
    pub fn changed(&self, file: &File) -> Option<String> {
        let now = match Self::of(file) {
            Ok(now) => now,
            Err(e) => return Some(format!("it cannot be checked: {e}")),
        };
        if now.len != self.len {
            return Some(format!(
                "its length changed from {} to {} bytes",
                self.len, now.len
            ));
        }
        if now.mtime_ns != self.mtime_ns {
            return Some("it was written in place".to_owned());
        }
        // The ctime is not compared: a rename of the file itself, a link,
        // an unlink or a chmod move it without touching a byte.
        None
    }
}

/// A mapped file held open with the stamp it had when mapped.
#[derive(Debug)]
pub struct HeldFile {
    file: File,
    stamp: FileStamp,
}

impl HeldFile {
    /// Holds `file` (its own descriptor) with its stamp now.
    ///
    /// # Errors
    /// The OS error of `fstat`.
    pub fn new(file: File) -> std::io::Result<Self> {
        let stamp = FileStamp::of(&file)?;
        Ok(Self { file, stamp })
    }

    /// The held file.
    #[must_use]
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The stamp taken when it was mapped.
    #[must_use]
    pub fn stamp(&self) -> &FileStamp {
        &self.stamp
    }

    /// What changed since, if anything ([`FileStamp::changed`]).
    #[must_use]
    pub fn changed(&self) -> Option<String> {
        self.stamp.changed(&self.file)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn a_truncated_mapping_reads_zeros_and_poisons_its_range() {
        install();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = File::create(&path).unwrap();
        f.write_all(&[7u8; 3 * 4096]).unwrap();
        drop(f);
        let file = File::open(&path).unwrap();
        let held = HeldFile::new(file.try_clone().unwrap()).unwrap();
        // SAFETY: a private read-only map of a file of this test.
        let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
        let guard = Guard::register(map.as_ptr() as usize, map.len(), false).unwrap();
        assert_eq!(map[4096], 7);
        assert!(held.changed().is_none());
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(0)
            .unwrap();
        // SAFETY: reading through a raw pointer so the compiler cannot
        // assume the (changed) mapping's content.
        let read = unsafe { std::ptr::read_volatile(map.as_ptr().add(2 * 4096 + 5)) };
        assert_eq!(read, 0, "the faulting page reads zeros");
        assert!(guard.poisoned());
        assert!(held.changed().unwrap().contains("length"));
        drop(guard);
    }

    #[test]
    fn a_rename_over_the_name_or_an_unlink_is_no_change_but_a_write_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, [1u8; 4096]).unwrap();
        let held = HeldFile::new(File::open(&path).unwrap()).unwrap();
        let other = dir.path().join("g");
        std::fs::write(&other, [2u8; 4096]).unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert!(held.changed().is_none(), "the old inode is untouched");
        let path2 = dir.path().join("h");
        std::fs::write(&path2, [1u8; 4096]).unwrap();
        // Written long ago, as a snapshot file is when it is restored.
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1 << 30);
        File::options()
            .write(true)
            .open(&path2)
            .unwrap()
            .set_times(std::fs::FileTimes::new().set_modified(old))
            .unwrap();
        let held2 = HeldFile::new(File::open(&path2).unwrap()).unwrap();
        let mut f = File::options().write(true).open(&path2).unwrap();
        f.write_all(&[9u8; 16]).unwrap();
        assert!(held2.changed().is_some(), "a write in place is seen");
    }
}
