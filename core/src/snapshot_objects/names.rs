//! The object layout of an [`ObjectSnapshotStore`](super::ObjectSnapshotStore),
//! relative to the store's prefix:
//!
//! * `snapshots/<actor>/<seq:020>-<epoch:020>.snap`: snapshot `seq` of
//!   `actor`, written at placement epoch `epoch` (both zero-padded to 20
//!   digits so names sort by number);
//! * `snapshots/<actor>/acknowledged`: JSON `{"seq": N, "epoch": E}`, the
//!   newest acknowledged snapshot, written after its object is complete;
//! * `snapshots/<actor>/clock.mark`: the actor's clock mark, decimal
//!   nanoseconds and a newline;
//! * `snapshots/<actor>/adopted-<epoch:020>-<seq:020>`: an empty object,
//!   the fence a new owner puts up when it takes the actor over at
//!   placement epoch `epoch` from snapshot `seq` (see [`Folder::effective`]);
//! * `templates/<digest>.wasm`: a template module by its digest.
//!
//! Names the store did not write (anything else under an actor's folder)
//! are ignored, so a stray `5.snap` is never mistaken for snapshot 5.

use std::collections::BTreeMap;
use std::io;

use object_store::path::PathPart;

/// The folder of every actor's objects.
pub(super) const SNAPSHOTS: &str = "snapshots";
/// The acknowledged pointer's object name in an actor's folder.
pub(super) const ACKNOWLEDGED: &str = "acknowledged";
/// The clock mark's object name in an actor's folder.
pub(super) const CLOCK_MARK: &str = "clock.mark";
/// Suffix of snapshot objects.
const SNAP: &str = ".snap";
/// Prefix of adoption fences.
const ADOPTED: &str = "adopted-";

/// Checks that `name` (an actor name or a template digest) can be one
/// segment of an object key and of a cache path unchanged: not empty, not
/// `.` or `..`, and no character the object store would escape (`/`,
/// controls, `\ { } ^ % ` ] " > [ ~ < # |`).
///
/// # Errors
/// `InvalidInput`, naming `what`.
pub(super) fn check_segment(what: &str, name: &str) -> io::Result<()> {
    let same = PathPart::parse(name).is_ok() && PathPart::from(name).as_ref() == name;
    if name.is_empty() || !same {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {name:?} cannot be used in an object key"),
        ));
    }
    Ok(())
}

/// The object name of snapshot `seq` at `epoch` in its actor's folder.
#[must_use]
pub(super) fn snapshot_name(seq: u64, epoch: u64) -> String {
    format!("{seq:020}-{epoch:020}{SNAP}")
}

/// The sequence number and epoch of a canonical snapshot object name.
#[must_use]
pub(super) fn parse_snapshot_name(name: &str) -> Option<(u64, u64)> {
    let (seq, epoch) = name.strip_suffix(SNAP)?.split_once('-')?;
    let number = |digits: &str| {
        (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
            .then(|| digits.parse().ok())
            .flatten()
    };
    Some((number(seq)?, number(epoch)?))
}

/// The object name of the fence put up by the owner that took the actor
/// over at `epoch` from snapshot `seq`.
#[must_use]
pub(super) fn adoption_name(epoch: u64, seq: u64) -> String {
    format!("{ADOPTED}{epoch:020}-{seq:020}")
}

/// The epoch and sequence number of a canonical adoption fence name.
#[must_use]
pub(super) fn parse_adoption_name(name: &str) -> Option<(u64, u64)> {
    let rest = name.strip_prefix(ADOPTED)?;
    parse_snapshot_name(&format!("{rest}{SNAP}"))
}

/// The key of `actor`'s folder.
#[must_use]
pub(super) fn actor_key(actor: &str) -> String {
    format!("{SNAPSHOTS}/{actor}")
}

/// The key of object `name` in `actor`'s folder.
#[must_use]
pub(super) fn actor_object_key(actor: &str, name: &str) -> String {
    format!("{SNAPSHOTS}/{actor}/{name}")
}

/// The key of the template with `digest`.
#[must_use]
pub(super) fn template_key(digest: &str) -> String {
    format!("templates/{digest}.wasm")
}

/// One snapshot object found in an actor's folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Found {
    pub(super) seq: u64,
    pub(super) epoch: u64,
    pub(super) bytes: u64,
}

/// An adoption fence: the owner at `epoch` took the actor over from
/// snapshot `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Adoption {
    pub(super) epoch: u64,
    pub(super) seq: u64,
}

/// What an actor's folder holds: its snapshot objects, its adoption
/// fences and whether the acknowledged pointer is there.
#[derive(Debug, Default, Clone)]
pub(super) struct Folder {
    /// Every snapshot object, by (seq, epoch).
    pub(super) snapshots: Vec<Found>,
    /// Every adoption fence.
    pub(super) adoptions: Vec<Adoption>,
    /// The folder has an `acknowledged` object.
    pub(super) acknowledged: bool,
    /// The folder has other objects (a clock mark, a log).
    pub(super) others: bool,
}

impl Folder {
    /// Sorts the folder's object names (with sizes) into a [`Folder`].
    #[must_use]
    pub(super) fn from_names(names: impl IntoIterator<Item = (String, u64)>) -> Self {
        let mut folder = Self::default();
        for (name, bytes) in names {
            if name == ACKNOWLEDGED {
                folder.acknowledged = true;
            } else if let Some((seq, epoch)) = parse_snapshot_name(&name) {
                folder.snapshots.push(Found { seq, epoch, bytes });
            } else if let Some((epoch, seq)) = parse_adoption_name(&name) {
                folder.adoptions.push(Adoption { epoch, seq });
            } else {
                folder.others = true;
            }
        }
        folder
    }

    /// Whether the folder holds no object at all.
    #[must_use]
    pub(super) fn is_empty(&self) -> bool {
        self.snapshots.is_empty() && self.adoptions.is_empty() && !self.acknowledged && !self.others
    }

    /// The snapshots that make up the actor's history, oldest first: one
    /// per sequence number, ordered by (epoch, sequence number).
    ///
    /// An owner at epoch `e` continues the history it took over, so a
    /// snapshot written at a lower epoch is *stale* (written by a worker
    /// that was fenced off, woken after its lease ended) when its sequence
    /// number is at or past where a higher epoch took over: at or past a
    /// snapshot of that epoch, or past the snapshot an adoption fence of
    /// that epoch names. Stale snapshots are never listed, opened or
    /// restored, and retention deletes them; so a late write by an old
    /// owner never shadows, extends or deletes the new owner's history.
    #[must_use]
    pub(super) fn effective(&self) -> Vec<Found> {
        let claims = self.claims();
        let mut live: Vec<Found> = self
            .snapshots
            .iter()
            .filter(|f| f.seq < lowest_claim_above(&claims, f.epoch))
            .copied()
            .collect();
        live.sort_by_key(|f| (f.seq, f.epoch));
        live
    }

    /// Whether a write of `seq` at `epoch` is stale by the snapshots and
    /// fences of this folder (see [`Folder::effective`]).
    #[must_use]
    pub(super) fn is_stale(&self, seq: u64, epoch: u64) -> bool {
        seq >= lowest_claim_above(&self.claims(), epoch)
    }

    /// For each epoch, the lowest sequence number it claims: its lowest
    /// snapshot, or one past the snapshot its fence names.
    fn claims(&self) -> BTreeMap<u64, u64> {
        let mut claims: BTreeMap<u64, u64> = BTreeMap::new();
        let claimed = self.snapshots.iter().map(|f| (f.epoch, f.seq)).chain(
            self.adoptions
                .iter()
                .map(|a| (a.epoch, a.seq.saturating_add(1))),
        );
        for (epoch, seq) in claimed {
            let slot = claims.entry(epoch).or_insert(seq);
            *slot = (*slot).min(seq);
        }
        claims
    }

    /// The snapshot standing for `seq` (see [`Folder::effective`]).
    #[must_use]
    pub(super) fn find(&self, seq: u64) -> Option<Found> {
        self.effective().into_iter().find(|f| f.seq == seq)
    }

    /// The newest adoption fence, if any (the others are implied by the
    /// snapshots after them and may be deleted).
    #[must_use]
    pub(super) fn newest_adoption(&self) -> Option<Adoption> {
        self.adoptions.iter().max().copied()
    }
}

/// The lowest sequence number any epoch above `epoch` claims in `claims`
/// (see [`Folder::effective`]).
fn lowest_claim_above(claims: &BTreeMap<u64, u64>, epoch: u64) -> u64 {
    claims
        .range(epoch.saturating_add(1)..)
        .map(|(_, &seq)| seq)
        .min()
        .unwrap_or(u64::MAX)
}

/// The acknowledged pointer's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Acknowledged {
    /// The snapshot's sequence number.
    pub(super) seq: u64,
    /// The epoch it was written at.
    pub(super) epoch: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_names_are_snapshots() {
        assert_eq!(parse_snapshot_name(&snapshot_name(7, 3)), Some((7, 3)));
        assert_eq!(
            parse_snapshot_name(&snapshot_name(u64::MAX, 0)),
            Some((u64::MAX, 0))
        );
        for stray in [
            "5.snap",
            "00000000000000000005.snap",
            "00000000000000000005-5.snap",
            "+0000000000000000005-00000000000000000005.snap",
            "00000000000000000005-00000000000000000005.snap.tmp",
            "99999999999999999999-00000000000000000005.snap",
        ] {
            assert_eq!(parse_snapshot_name(stray), None, "{stray}");
        }
    }

    #[test]
    fn the_highest_epoch_stands_for_a_sequence_number() {
        let folder = Folder::from_names([
            (snapshot_name(1, 2), 10),
            (snapshot_name(1, 5), 11),
            (snapshot_name(1, 3), 12),
            (snapshot_name(2, 0), 13),
            ("acknowledged".to_owned(), 20),
            ("clock.mark".to_owned(), 3),
        ]);
        assert!(folder.acknowledged);
        let seqs: Vec<(u64, u64, u64)> = folder
            .effective()
            .iter()
            .map(|f| (f.seq, f.epoch, f.bytes))
            .collect();
        // Epoch 5 took over at 1: epoch 0's 2 is a late write, stale.
        assert_eq!(seqs, [(1, 5, 11)]);
        assert_eq!(folder.find(1).map(|f| f.epoch), Some(5));
        assert_eq!(folder.find(3), None);
    }

    fn effective(names: &[String]) -> Vec<(u64, u64)> {
        let folder = Folder::from_names(names.iter().map(|n| (n.clone(), 1)));
        folder
            .effective()
            .iter()
            .map(|f| (f.seq, f.epoch))
            .collect()
    }

    #[test]
    fn a_fenced_off_owners_late_writes_are_stale() {
        // Owner at epoch 1 wrote 0..=3; the owner at epoch 2 took over from
        // 3 and wrote 4 and 5; the old owner, woken, wrote 4..=9 at epoch 1.
        let mut names: Vec<String> = (0..=3).map(|s| snapshot_name(s, 1)).collect();
        names.extend([snapshot_name(4, 2), snapshot_name(5, 2)]);
        names.extend((4..=9).map(|s| snapshot_name(s, 1)));
        assert_eq!(
            effective(&names),
            [(0, 1), (1, 1), (2, 1), (3, 1), (4, 2), (5, 2)]
        );
        // Before the new owner wrote anything, its fence already hides them.
        let mut names: Vec<String> = (0..=3).map(|s| snapshot_name(s, 1)).collect();
        names.push(adoption_name(2, 3));
        names.extend((4..=9).map(|s| snapshot_name(s, 1)));
        assert_eq!(effective(&names), [(0, 1), (1, 1), (2, 1), (3, 1)]);
        // A fence of an older epoch hides nothing of a newer one.
        let names = [
            adoption_name(1, 0),
            snapshot_name(0, 1),
            snapshot_name(1, 2),
        ];
        assert_eq!(effective(&names), [(0, 1), (1, 2)]);
        // Three owners: each one's history up to the next one's takeover.
        let names = [
            snapshot_name(0, 1),
            snapshot_name(1, 1),
            snapshot_name(2, 1),
            snapshot_name(2, 2),
            snapshot_name(3, 2),
            adoption_name(3, 3),
            snapshot_name(4, 2),
            snapshot_name(4, 3),
        ];
        assert_eq!(effective(&names), [(0, 1), (1, 1), (2, 2), (3, 2), (4, 3)]);
        assert_eq!(parse_adoption_name(&adoption_name(7, 9)), Some((7, 9)));
        assert_eq!(parse_adoption_name("adopted-7-9"), None);
    }

    #[test]
    fn segments_the_store_would_escape_are_refused() {
        for good in ["counter", "a-b_c.d", "x1"] {
            assert!(check_segment("actor", good).is_ok(), "{good}");
        }
        for bad in ["", ".", "..", "a/b", "a%b", "a#b", "a\nb", "a\\b"] {
            assert!(check_segment("actor", bad).is_err(), "{bad:?}");
        }
    }
}
