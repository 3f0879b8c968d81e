//! Where snapshots are kept: the [`SnapshotStore`] trait the worker and the
//! control plane use (as `Arc<dyn SnapshotStore>`), the bytes it reads
//! ([`SnapshotBytes`]), what it lists ([`SnapshotEntry`]) and how it fails
//! ([`StoreError`]). The embedded implementation is
//! [`LocalSnapshotStore`](crate::snapshot_files::LocalSnapshotStore), the
//! data dir's `snapshots/` folder; a cluster shares an
//! [`ObjectSnapshotStore`](crate::snapshot_objects::ObjectSnapshotStore)
//! (a folder or an S3 bucket).

use std::fs::File;
use std::io;
use std::ops::Deref;

use memmap2::Mmap;

use crate::mapped::{Guard, HeldFile};

mod chain;

pub use chain::{
    ChainError, ChainLink, chain_files, chain_retention, open_chain, open_chain_over,
    remove_corrupt,
};

pub use crate::store_error::StoreError;

/// One stored snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SnapshotEntry {
    /// Sequence number (0 is taken at creation).
    pub seq: u64,
    /// Size in bytes.
    pub bytes: u64,
}

/// The bytes of one stored snapshot, read-only: a mapped file for the
/// local store, or owned bytes (e.g. downloaded). Derefs to `[u8]`. One
/// made by [`SnapshotBytes::map_file`] also keeps the file, which a restore
/// maps copy-on-write into the new instance ([`crate::cow`]).
pub struct SnapshotBytes {
    repr: Repr,
    checksum_verified: bool,
}

enum Repr {
    Mapped(Mmap),
    /// The map (registered with the `SIGBUS` handler by the guard) and the
    /// file with its stamp at map time ([`crate::mapped`]). The guard is
    /// declared after the map, so it is dropped after it is unmapped.
    File(Mmap, HeldFile, Guard),
    Owned(Vec<u8>),
}

impl SnapshotBytes {
    /// Maps the whole of `file` read-only and keeps the file, for a
    /// copy-on-write restore. Stores never write a file in place (they
    /// replace files by rename; unlinking is fine); should someone else
    /// truncate or write it, the map is registered with the `SIGBUS`
    /// handler and the file's stamp kept, so the process survives and
    /// [`SnapshotBytes::intact`] says so ([`crate::mapped`]). When the
    /// handler's registry is full (or the handler is not installed: no
    /// engine was built), the file is read into memory instead.
    ///
    /// # Errors
    /// The OS error of `mmap` (`ENOMEM` when the process is out of
    /// mappings), `fstat` or the read.
    pub fn map_file(file: File) -> io::Result<Self> {
        let held = HeldFile::new(file)?;
        // SAFETY: the bytes are only read; a truncation under the map is
        // answered by the guard's handler with zeros (never a crash once
        // registered below) and a write in place is seen by `intact`.
        let map = unsafe { Mmap::map(held.file()) }?;
        match Guard::register(map.as_ptr() as usize, map.len(), false) {
            Some(guard) => Ok(Self::new(Repr::File(map, held, guard))),
            None => {
                drop(map);
                // From the start: a file just written through this
                // handle has its cursor at the end.
                let mut bytes = Vec::new();
                let mut file = held.file();
                io::Seek::rewind(&mut file)?;
                io::Read::read_to_end(&mut file, &mut bytes)?;
                Ok(Self::new(Repr::Owned(bytes)))
            }
        }
    }

    /// Whether a mapped file still holds what it held when mapped: `Err`
    /// with what changed when a fault in the map was answered with zeros
    /// (the file shrank) or its stamp moved ([`crate::mapped`]). Always
    /// `Ok` for bytes that are not a mapped file.
    ///
    /// # Errors
    /// What changed, path-free.
    pub fn intact(&self) -> Result<(), String> {
        match &self.repr {
            Repr::File(_, held, guard) => {
                if guard.poisoned() {
                    return Err("a mapped page lies past the file's end now (the file was \
                                truncated)"
                        .into());
                }
                held.changed().map_or(Ok(()), Err)
            }
            Repr::Mapped(_) | Repr::Owned(_) => Ok(()),
        }
    }

    fn new(repr: Repr) -> Self {
        Self {
            repr,
            checksum_verified: false,
        }
    }

    /// These bytes, marked as known to match their CRC32C trailer: the
    /// store wrote or verified this very file and has seen no change to it
    /// since. [`verify`](crate::snapshot::verify()) then skips the checksum
    /// pass (every other check still runs). Only a store that can tell an
    /// unchanged file from a changed one may mark its bytes.
    #[must_use]
    pub fn with_checksum_verified(mut self) -> Self {
        self.checksum_verified = true;
        self
    }

    /// Whether [`SnapshotBytes::with_checksum_verified`] marked these bytes.
    #[must_use]
    pub fn checksum_verified(&self) -> bool {
        self.checksum_verified
    }

    /// The file these bytes map from its start, if they were made by
    /// [`SnapshotBytes::map_file`].
    #[must_use]
    pub fn file(&self) -> Option<&File> {
        match &self.repr {
            Repr::File(_, held, _) => Some(held.file()),
            Repr::Mapped(_) | Repr::Owned(_) => None,
        }
    }
}

impl Deref for SnapshotBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.repr {
            Repr::Mapped(map) | Repr::File(map, ..) => map,
            Repr::Owned(bytes) => bytes,
        }
    }
}

impl AsRef<[u8]> for SnapshotBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl From<Mmap> for SnapshotBytes {
    fn from(map: Mmap) -> Self {
        Self::new(Repr::Mapped(map))
    }
}

impl From<Vec<u8>> for SnapshotBytes {
    fn from(bytes: Vec<u8>) -> Self {
        Self::new(Repr::Owned(bytes))
    }
}

impl std::fmt::Debug for SnapshotBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.repr {
            Repr::Mapped(_) => "mapped",
            Repr::File(..) => "mapped file",
            Repr::Owned(_) => "owned",
        };
        write!(f, "SnapshotBytes({kind}, {} bytes)", self.len())
    }
}

/// The snapshots of every actor of one store, by actor name and sequence
/// number, with the newest acknowledged sequence number per actor.
///
/// # Blocking
/// The methods are synchronous and may block on I/O: the embedded store
/// writes and fsyncs files (`write`, `retain`, `remove*`) and maps them
/// (`open_snapshot`). Writes, retention and whole-file reads are called
/// from blocking threads (`tokio::task::spawn_blocking`); listing and
/// opening (a map, which reads lazily) are also called from async tasks,
/// since a local file system answers them in microseconds. The store over
/// an object store ([`ObjectSnapshotStore`]) asks the object store for
/// every listing (one request, bounded by a timeout), maps snapshots from
/// a local cache it keeps, and runs its requests on a runtime of its own
/// while the calling thread waits.
///
/// [`ObjectSnapshotStore`]: crate::snapshot_objects::ObjectSnapshotStore
///
/// [`LocalSnapshotStore`]: crate::snapshot_files::LocalSnapshotStore
pub trait SnapshotStore: Send + Sync + std::fmt::Debug {
    /// Writes snapshot `seq` of `actor` durably (replacing one with the
    /// same number) and records it as the actor's newest acknowledged
    /// snapshot. On return it survives a crash of this process.
    ///
    /// `epoch` is the actor's placement epoch on the writing worker. A
    /// store shared by several workers names the snapshot by it, so that
    /// when one sequence number is written at two epochs the higher epoch
    /// wins and a late write by a fenced worker never shadows the new
    /// owner's snapshot ([`ObjectSnapshotStore`]). A store of one process
    /// ([`LocalSnapshotStore`], fenced by the data dir's `LOCK`) ignores it.
    ///
    /// # Errors
    /// [`StoreError::Quota`] (nothing written) or [`StoreError::Io`]
    /// (earlier snapshots untouched); [`StoreError::Unknown`] when the
    /// store's answer was lost and the snapshot could not be read back
    /// (it may be in the store).
    ///
    /// [`ObjectSnapshotStore`]: crate::snapshot_objects::ObjectSnapshotStore
    fn write(&self, actor: &str, seq: u64, epoch: u64, bytes: &[u8]) -> Result<(), StoreError>;

    /// `actor`'s snapshots, oldest first, and the newest sequence number
    /// whose [`SnapshotStore::write`] was acknowledged (`None` if unknown).
    /// A newest listed snapshot below that number means the acknowledged
    /// one was deleted behind the store's back.
    ///
    /// # Errors
    /// [`StoreError::Io`] if the actor's snapshots cannot be listed (an
    /// actor without any has an empty list).
    fn list_acknowledged(
        &self,
        actor: &str,
    ) -> Result<(Vec<SnapshotEntry>, Option<u64>), StoreError>;

    /// `actor`'s snapshots, oldest first.
    ///
    /// # Errors
    /// As [`SnapshotStore::list_acknowledged`].
    fn list(&self, actor: &str) -> Result<Vec<SnapshotEntry>, StoreError> {
        Ok(self.list_acknowledged(actor)?.0)
    }

    /// Whether `actor`'s place in the store holds anything at all (a
    /// snapshot, a pointer, a fence, a clock mark, a log): what a create of
    /// the name must remove first. By default, whether it lists a snapshot.
    ///
    /// # Errors
    /// As [`SnapshotStore::list_acknowledged`].
    fn holds_anything(&self, actor: &str) -> Result<bool, StoreError> {
        Ok(!self.list(actor)?.is_empty())
    }

    /// The names of the actors that have a place in the store (possibly
    /// empty), in no particular order.
    ///
    /// # Errors
    /// [`StoreError::Io`] if the store cannot be listed.
    fn actors(&self) -> Result<Vec<String>, StoreError>;

    /// Snapshot `seq` of `actor`, read-only.
    ///
    /// # Errors
    /// [`StoreError::Io`] with `NotFound` if there is no such snapshot, or
    /// another I/O error (`ENOMEM` when it cannot be mapped).
    fn open_snapshot(&self, actor: &str, seq: u64) -> Result<SnapshotBytes, StoreError>;

    /// Makes snapshot `seq` of `src` also snapshot `seq` of `new`, and
    /// `new`'s newest acknowledged one, sharing the bytes instead of
    /// copying them through this process: the local store hard-links the
    /// file (one inode, whichever of the two is deleted first), the object
    /// store copies the object inside the store (a server-side copy) and
    /// hard-links its cache copy. Durable on return, as a
    /// [`SnapshotStore::write`]. `epoch` is `new`'s placement epoch (as for
    /// `write`). Returns the snapshot's size in bytes. Snapshot files do
    /// not name their actor (the header names the module), so the shared
    /// bytes serve `new` as they are. The quota counts the new name's bytes
    /// as a write of them would.
    ///
    /// # Errors
    /// [`StoreError::Io`]: `NotFound` if `src` has no snapshot `seq`,
    /// `AlreadyExists` if `new` has one already, `InvalidInput` for a name
    /// the store cannot hold, or another I/O failure (nothing of `new`
    /// acknowledged); [`StoreError::Quota`] (nothing written).
    fn fork(&self, src: &str, seq: u64, new: &str, epoch: u64) -> Result<u64, StoreError>;

    /// Tells the store that the checksum of `bytes`, which
    /// [`SnapshotStore::open_snapshot`] gave, was just computed and
    /// matched: a store that can tell an unchanged file from a changed one
    /// marks the file's next opening [`SnapshotBytes::with_checksum_verified`]
    /// ([`crate::snapshot_checked`]). Nothing by default.
    fn checksum_passed(&self, bytes: &SnapshotBytes) {
        let _ = bytes;
    }

    /// Whether workers may write delta snapshots here (format version 2,
    /// [`crate::snapshot::delta`]): the store's [`SnapshotStore::retain`]
    /// keeps every base a kept delta needs. `false` by default: the store
    /// holds full snapshots only.
    fn supports_deltas(&self) -> bool {
        false
    }

    /// Deletes all but the newest `keep` snapshots of `actor` (at least one
    /// is always kept: the newest is the actor's state) and the bases their
    /// chains need ([`chain_retention`]); returns the deleted sequence
    /// numbers.
    ///
    /// # Errors
    /// [`StoreError::Io`] if one cannot be deleted.
    fn retain(&self, actor: &str, keep: usize) -> Result<Vec<u64>, StoreError>;

    /// Whether this store handle may change `actor`'s snapshots now: a
    /// worker's handle refuses once the worker lost the lease it hosts its
    /// actors under (`stasis-worker`'s `FencedStore`). Always by default.
    ///
    /// # Errors
    /// [`StoreError::Fenced`].
    fn check_fence(&self, actor: &str) -> Result<(), StoreError> {
        let _ = actor;
        Ok(())
    }

    /// Fences off `actor`'s earlier owners: the worker that took it over
    /// at placement `epoch`, restoring snapshot `seq`, records so before
    /// it writes anything, and from then on snapshots written at a lower
    /// epoch past `seq` (by a worker woken after its lease ended) are
    /// never listed, opened nor kept. Nothing by default: a store of one
    /// process has no other owner.
    ///
    /// # Errors
    /// [`StoreError::Io`] if the fence cannot be written (the new owner
    /// must not serve then).
    fn adopt(&self, actor: &str, seq: u64, epoch: u64) -> Result<(), StoreError> {
        let _ = (actor, seq, epoch);
        Ok(())
    }

    /// The caller owns `actor` at placement `epoch` and the store holds
    /// that placement's claim (an adoption fence or a snapshot written at
    /// `epoch`): until [`SnapshotStore::release`], only this handle
    /// changes which snapshots stand for the actor, so a store shared by
    /// workers may list the actor's folder once and answer later opens
    /// from what it knows and wrote since, without a round trip. A hold at
    /// another epoch replaces the previous one. Nothing by default.
    fn hold(&self, actor: &str, epoch: u64) {
        let _ = (actor, epoch);
    }

    /// `actor` is no longer held ([`SnapshotStore::hold`]): it left the
    /// worker (moved, deleted) or the worker may no longer change it.
    /// Nothing by default.
    fn release(&self, actor: &str) {
        let _ = actor;
    }

    /// Deletes snapshot `seq` of `actor` (nothing if it does not exist).
    ///
    /// # Errors
    /// [`StoreError::Io`] if it exists but cannot be deleted.
    fn remove(&self, actor: &str, seq: u64) -> Result<(), StoreError>;

    /// Deletes every snapshot of `actor` (nothing if it has none).
    ///
    /// # Errors
    /// [`StoreError::Io`] if they exist but cannot be deleted.
    fn remove_actor(&self, actor: &str) -> Result<(), StoreError>;

    /// Bytes in use by all snapshots of the store.
    #[must_use]
    fn used_bytes(&self) -> u64;

    /// Where `actor`'s snapshots live (a folder, a prefix), for the server
    /// log: it may be a server path, so never put it in an API answer.
    fn location(&self, actor: &str) -> String;

    /// Records that `actor`'s monotonic clock must restart at no less than
    /// `clock_ns` (nanoseconds), replacing the previous mark atomically.
    /// Kept next to the actor's snapshots but outside the snapshot list and
    /// the quota; it survives the process being killed, not necessarily a
    /// power loss (it is not fsynced: it is written often).
    ///
    /// # Errors
    /// [`StoreError::Io`] if it cannot be written.
    fn write_clock_mark(&self, actor: &str, clock_ns: u64) -> Result<(), StoreError>;

    /// `actor`'s clock mark in nanoseconds (see
    /// [`SnapshotStore::write_clock_mark`]); 0 if it has none, or if it is
    /// unreadable (logged).
    #[must_use]
    fn clock_mark(&self, actor: &str) -> u64;

    /// Whether this store keeps actors' logs ([`SnapshotStore::append_log`]);
    /// a store that does not keeps nothing, and the worker keeps each
    /// actor's newest lines in memory only.
    fn keeps_logs(&self) -> bool {
        false
    }

    /// Appends `bytes` (whole lines) to `actor`'s log, next to its
    /// snapshots but outside the snapshot list and the quota. Like the
    /// clock mark it is not fsynced: it survives the process being killed,
    /// not necessarily a power loss. Deleted with the actor
    /// ([`SnapshotStore::remove_actor`]).
    ///
    /// # Errors
    /// [`StoreError::Io`] if it cannot be written.
    fn append_log(&self, actor: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let _ = (actor, bytes);
        Ok(())
    }

    /// Replaces `actor`'s log with `bytes` at once (a reader sees the old
    /// log or the new one): the worker cuts a log back this way.
    ///
    /// # Errors
    /// [`StoreError::Io`] if it cannot be written.
    fn replace_log(&self, actor: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let _ = (actor, bytes);
        Ok(())
    }

    /// `actor`'s log as appended (empty if it has none).
    ///
    /// # Errors
    /// [`StoreError::Io`] if it exists but cannot be read.
    fn read_log(&self, actor: &str) -> Result<Vec<u8>, StoreError> {
        let _ = actor;
        Ok(Vec::new())
    }
}
