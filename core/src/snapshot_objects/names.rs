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

/// What an actor's folder holds: its snapshot objects and whether the
/// acknowledged pointer is there.
#[derive(Debug, Default)]
pub(super) struct Folder {
    /// Every snapshot object, by (seq, epoch).
    pub(super) snapshots: Vec<Found>,
    /// The folder has an `acknowledged` object.
    pub(super) acknowledged: bool,
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
            }
        }
        folder
    }

    /// The snapshot each sequence number stands for: the one at the
    /// highest epoch (a write by a fenced worker at an older epoch never
    /// shadows the new owner's), oldest sequence number first.
    #[must_use]
    pub(super) fn effective(&self) -> Vec<Found> {
        let mut best: BTreeMap<u64, Found> = BTreeMap::new();
        for found in &self.snapshots {
            let slot = best.entry(found.seq).or_insert(*found);
            if found.epoch > slot.epoch {
                *slot = *found;
            }
        }
        best.into_values().collect()
    }

    /// The snapshot standing for `seq` (see [`Folder::effective`]).
    #[must_use]
    pub(super) fn find(&self, seq: u64) -> Option<Found> {
        self.snapshots
            .iter()
            .filter(|f| f.seq == seq)
            .max_by_key(|f| f.epoch)
            .copied()
    }
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
        assert_eq!(seqs, [(1, 5, 11), (2, 0, 13)]);
        assert_eq!(folder.find(1).map(|f| f.epoch), Some(5));
        assert_eq!(folder.find(3), None);
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
