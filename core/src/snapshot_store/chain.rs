//! Snapshot chains in a store: which files a delta needs
//! ([`chain_retention`], [`chain_files`]), opening and verifying a chain
//! ([`open_chain`], [`open_chain_over`]) and deleting the snapshots a repair
//! must not leave behind ([`remove_corrupt`]).

use std::io;

use super::{SnapshotBytes, SnapshotEntry, SnapshotStore, StoreError};
use crate::snapshot::{SnapshotError, VerifiedChain};

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
    /// Whether a snapshot of the chain is damaged (it does not verify, or
    /// does not fit its chain) — not merely unreadable now (a store error)
    /// nor of another module (another version of the template, or a
    /// module image this build computes otherwise), which are kept.
    #[must_use]
    pub fn is_corrupt(&self) -> bool {
        match self {
            Self::Open { .. } => false,
            Self::Invalid { source, .. } => !matches!(
                source,
                SnapshotError::WrongModule { .. } | SnapshotError::ImageDiffers { .. }
            ),
            Self::Base { source, .. } => source.is_corrupt(),
        }
    }

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
/// restored against `template` under `max_memory` (bytes) because it is
/// damaged ([`ChainError::is_corrupt`]): snapshots known to be corrupt, and
/// deltas whose chain holds one. Snapshots of another module (an earlier
/// version's, the way back of an upgrade) stay. A repair calls this
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
            && problem.is_corrupt()
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
