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

use crate::snapshot::{SnapshotError, VerifiedChain};

/// Why a snapshot could not be stored, listed, read or removed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Writing would exceed `--snapshot-quota`.
    #[error(
        "--snapshot-quota exceeded: {needed} more bytes needed, {used} of {quota} bytes in use"
    )]
    Quota {
        /// Size of the new snapshot, in bytes.
        needed: u64,
        /// Bytes in use now.
        used: u64,
        /// The quota, in bytes.
        quota: u64,
    },
    /// An I/O operation failed. The message names the file by its key in
    /// the store (e.g. `snapshots/NAME/SEQ.snap`), never by a server path,
    /// so it can be shown to API clients; [`StoreError::detail`] adds the
    /// path for the server log.
    #[error("{op} {key}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file, folder or object, relative to the store.
        key: String,
        /// The file, folder or object as the server knows it (a path).
        path: String,
        /// The OS error (`NotFound` for a missing snapshot).
        source: io::Error,
    },
    /// Refused before anything was written or deleted: the worker no
    /// longer holds the lease it hosts the actor under (it may be placed
    /// on another worker now), so it may not change the actor's snapshots.
    #[error(
        "worker {worker} holds no valid lease for actor {actor}: nothing was written (the actor may be placed on another worker now)"
    )]
    Fenced {
        /// The worker.
        worker: String,
        /// The actor.
        actor: String,
    },
}

impl StoreError {
    /// The message with the server-side path, for the server log (never
    /// for an API answer: [`Display`](std::fmt::Display) is path-free).
    #[must_use]
    pub fn detail(&self) -> String {
        match self {
            Self::Io {
                op, path, source, ..
            } => format!("{op} {path}: {source}"),
            Self::Quota { .. } | Self::Fenced { .. } => self.to_string(),
        }
    }
}

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
                let mut bytes = Vec::new();
                io::Read::read_to_end(&mut held.file(), &mut bytes)?;
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
    /// (earlier snapshots untouched).
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
}

/// What retention knows of one snapshot's place in a chain
/// ([`chain_retention`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainLink {
    /// A full snapshot: it needs no older file.
    Full,
    /// A delta on snapshot `base`.
    Delta {
        /// The base's sequence number.
        base: u64,
    },
    /// Not known: the file cannot be opened, does not pass its checksum,
    /// or its header does not decode. Retention then keeps every older
    /// snapshot: a damaged header is never trusted to decide a deletion.
    Unknown,
}

/// The sequence numbers retention deletes from `entries` (oldest first):
/// all but the newest `keep` (at least 1) and the snapshots their chains
/// need, followed through `link_of` (each snapshot's [`ChainLink`]; a
/// delta naming a base not older than itself counts as
/// [`ChainLink::Unknown`]). Ascending.
#[must_use]
pub fn chain_retention(
    entries: &[SnapshotEntry],
    keep: usize,
    mut link_of: impl FnMut(u64) -> ChainLink,
) -> Vec<u64> {
    let keep_from = entries.len().saturating_sub(keep.max(1));
    let mut kept: std::collections::BTreeSet<u64> =
        entries[keep_from..].iter().map(|e| e.seq).collect();
    let mut follow: Vec<u64> = kept.iter().copied().collect();
    while let Some(seq) = follow.pop() {
        match link_of(seq) {
            ChainLink::Full => {}
            ChainLink::Delta { base } if base < seq => {
                if kept.insert(base) {
                    follow.push(base);
                }
            }
            ChainLink::Delta { .. } | ChainLink::Unknown => {
                for older in entries.iter().map(|e| e.seq).filter(|s| *s < seq) {
                    if kept.insert(older) {
                        follow.push(older);
                    }
                }
            }
        }
    }
    entries
        .iter()
        .map(|e| e.seq)
        .filter(|seq| !kept.contains(seq))
        .collect()
}

/// Why snapshot `seq` of an actor and its chain (for a delta) could not be
/// opened and verified ([`open_chain`]).
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// The snapshot could not be opened (`NotFound`: it is missing).
    #[error("snapshot {seq}: {source}")]
    Open {
        /// Its sequence number.
        seq: u64,
        /// The store's error.
        source: StoreError,
    },
    /// The snapshot does not verify, or does not fit its chain.
    #[error("snapshot {seq}: {source}")]
    Invalid {
        /// Its sequence number.
        seq: u64,
        /// The failed check.
        source: SnapshotError,
    },
    /// Snapshot `seq` is a delta, and a snapshot of its chain cannot be
    /// used (`source` names it and why): every delta on a broken base
    /// fails with it.
    #[error("snapshot {seq} is a delta, and its chain's {source}")]
    Base {
        /// The delta asked for.
        seq: u64,
        /// What is wrong with the base ([`ChainError::Open`] or
        /// [`ChainError::Invalid`]).
        source: Box<ChainError>,
    },
}

impl ChainError {
    /// The store error behind this one, if a snapshot could not be opened.
    #[must_use]
    pub fn store_error(&self) -> Option<&StoreError> {
        match self {
            Self::Open { source, .. } => Some(source),
            Self::Invalid { .. } => None,
            Self::Base { source, .. } => source.store_error(),
        }
    }

    /// Whether snapshot `seq` itself (not a base of it) is missing.
    #[must_use]
    pub fn is_missing(&self) -> bool {
        matches!(self, Self::Open { source: StoreError::Io { source, .. }, .. }
            if source.kind() == io::ErrorKind::NotFound)
    }
}

/// The files of snapshot `seq` of `actor` and, for a delta, of its chain,
/// oldest first, followed through headers decoded without their checksum
/// pass ([`peek_header`]; at most [`MAX_DELTA_DEPTH`] deltas). For answers
/// that may be wrong without harm (is a new delta a no-op, which files
/// does a fork link); a restore takes [`open_chain`], which verifies.
///
/// # Errors
/// The [`StoreError`] of a file that cannot be opened.
///
/// [`peek_header`]: crate::snapshot::peek_header
/// [`MAX_DELTA_DEPTH`]: crate::snapshot::MAX_DELTA_DEPTH
pub fn chain_files(
    store: &dyn SnapshotStore,
    actor: &str,
    seq: u64,
) -> Result<Vec<(u64, SnapshotBytes)>, StoreError> {
    use crate::snapshot::{MAX_DELTA_DEPTH, peek_header};
    let mut files = vec![(seq, store.open_snapshot(actor, seq)?)];
    while let Some((at, bytes)) = files.last() {
        let Some(base) = peek_header(bytes).ok().and_then(|h| h.base) else {
            break;
        };
        if base.seq >= *at || files.len() > MAX_DELTA_DEPTH as usize {
            break;
        }
        files.push((base.seq, store.open_snapshot(actor, base.seq)?));
    }
    files.reverse();
    Ok(files)
}

/// Opens snapshot `seq` of `actor` and, if it is a delta, its chain down to
/// the full snapshot (at most [`MAX_DELTA_DEPTH`] deltas), verifying each
/// file against `template` under `max_memory` (bytes) and checking that
/// each delta's base is the file it names (sequence number and checksum).
///
/// # Errors
/// [`ChainError`] naming the snapshot that cannot be opened or used.
///
/// [`MAX_DELTA_DEPTH`]: crate::snapshot::MAX_DELTA_DEPTH
pub fn open_chain(
    store: &dyn SnapshotStore,
    actor: &str,
    seq: u64,
    template: &crate::module::Template,
    max_memory: u64,
) -> Result<VerifiedChain<SnapshotBytes>, ChainError> {
    open_chain_over(store, actor, seq, template, max_memory, None)
}

/// [`open_chain`] where snapshot `head.0` is the bytes `head.1` instead of
/// the store's file: a journal entry not yet written to the store
/// ([`crate::journal`]), on a chain that is.
///
/// # Errors
/// As [`open_chain`].
pub fn open_chain_over(
    store: &dyn SnapshotStore,
    actor: &str,
    seq: u64,
    template: &crate::module::Template,
    max_memory: u64,
    head: Option<(u64, &[u8])>,
) -> Result<VerifiedChain<SnapshotBytes>, ChainError> {
    use crate::snapshot::{MAX_DELTA_DEPTH, recorded_crc32c, verify};
    let in_chain = |error: ChainError, at: u64| {
        if at == seq {
            error
        } else {
            ChainError::Base {
                seq,
                source: Box::new(error),
            }
        }
    };
    let mut links = Vec::new();
    let mut at = seq;
    let mut named: Option<crate::snapshot::BaseRef> = None;
    loop {
        let bytes = match head {
            Some((entry, bytes)) if entry == at => Ok(SnapshotBytes::from(bytes.to_vec())),
            _ => store.open_snapshot(actor, at),
        }
        .map_err(|source| in_chain(ChainError::Open { seq: at, source }, at))?;
        let computed = !bytes.checksum_verified();
        let verified = verify(bytes, template, max_memory)
            .map_err(|source| in_chain(ChainError::Invalid { seq: at, source }, at))?;
        if computed {
            store.checksum_passed(verified.source());
        }
        if let Some(named) = named {
            let crc = recorded_crc32c(verified.bytes()).unwrap_or_default();
            if crc != named.crc32c {
                let source = SnapshotError::Layout(format!(
                    "its checksum {crc:08x} is not the {:08x} its delta names \
                     (the file was replaced)",
                    named.crc32c
                ));
                return Err(in_chain(ChainError::Invalid { seq: at, source }, at));
            }
        }
        let base = verified.header().base;
        links.push((at, verified));
        match base {
            None => break,
            Some(base) if base.seq < at && links.len() <= MAX_DELTA_DEPTH as usize => {
                named = Some(base);
                at = base.seq;
            }
            Some(base) => {
                let source = SnapshotError::Layout(format!(
                    "its base {} is not an earlier snapshot of a chain of at most \
                     {MAX_DELTA_DEPTH} deltas",
                    base.seq
                ));
                return Err(in_chain(ChainError::Invalid { seq: at, source }, at));
            }
        }
    }
    links.reverse();
    VerifiedChain::new(links).map_err(|source| ChainError::Invalid { seq, source })
}

/// Deletes every snapshot of `actor` except `source` that cannot be
/// restored against `template` under `max_memory` (bytes): snapshots known
/// to be corrupt, and deltas whose chain holds one. A repair calls this
/// before it writes the repaired state, so that retention, which keeps the
/// newest snapshots, never keeps a corrupt one in place of the snapshot the
/// repair came from (`source`: the snapshot it resumed from, `None` when it
/// started from the template). Returns the deleted sequence numbers, each
/// with the reason. A snapshot that cannot be opened now (missing, not
/// mappable), or whose base cannot, is not known to be corrupt and stays.
///
/// # Errors
/// [`StoreError::Io`] if the snapshots cannot be listed or one cannot be
/// deleted.
pub fn remove_corrupt(
    store: &dyn SnapshotStore,
    actor: &str,
    template: &crate::module::Template,
    max_memory: u64,
    source: Option<u64>,
) -> Result<Vec<(u64, String)>, StoreError> {
    let mut corrupt = Vec::new();
    for entry in store.list(actor)? {
        if Some(entry.seq) == source {
            continue;
        }
        if let Err(problem) = open_chain(store, actor, entry.seq, template, max_memory)
            && problem.store_error().is_none()
        {
            corrupt.push((entry.seq, problem.to_string()));
        }
    }
    // Judged first, deleted after: a delta is judged with its base present.
    for (seq, _) in &corrupt {
        store.remove(actor, *seq)?;
    }
    Ok(corrupt)
}
