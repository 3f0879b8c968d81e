//! Start-up recovery of the logical journal: the delivery entries a
//! previous run left, sorted out per actor against the store.
//!
//! An actor's entries after its newest snapshot in the store are its
//! acknowledged deliveries since: the worker replays them on that snapshot
//! when the actor next resumes, and the journal keeps their segments until
//! the actor has written a snapshot past them ([`Journal::settled`]).
//! Entries on an older snapshot are in the store already; an actor with no
//! snapshot was deleted.
//!
//! The entries kept must follow on from the snapshot without a hole: on
//! snapshot `T`, indexes 1, 2, 3, … in journal order (a worker appends a
//! delivery on a snapshot only once it is in the store, so an entry on a
//! later snapshot than the store's newest means that snapshot was lost).
//! An entry repeated, gone back, or after a gap (a segment lost or damaged
//! in the middle) ends the actor's recovery: it is *failed* with the
//! reason, never served from a state that skips an acknowledged delivery,
//! and its entries stay for a repair.
//!
//! [`Journal::settled`]: super::Journal::settled

use std::collections::HashMap;

use super::delivery::DeliveryRecord;
use super::entry::Entry;
use crate::snapshot_store::SnapshotStore;

/// One delivery entry read back.
#[derive(Debug, Clone)]
pub struct RecoveredEntry {
    /// The snapshot it followed.
    pub base: u64,
    /// The actor's placement epoch when it was written.
    pub epoch: u64,
    /// The delivery.
    pub record: DeliveryRecord,
}

/// What the journal gives an actor back at start-up.
#[derive(Debug, Clone)]
pub enum Recovery {
    /// Its deliveries after its newest snapshot, in order: replay them on
    /// it.
    Entries(Vec<RecoveredEntry>),
    /// Its entries cannot be replayed (module docs): why.
    Failed(String),
}

/// The delivery entries of one actor as read, in journal order, with
/// their positions.
pub(super) type Read = Vec<(u64, Entry)>;

/// Sorts out every actor's entries `read` against `store` (module docs):
/// per actor, its recovery and the position and epoch of its first entry
/// kept (the journal keeps its segment from there on).
pub(super) fn sort_out(
    read: HashMap<String, Read>,
    store: &dyn SnapshotStore,
) -> HashMap<String, (Recovery, u64, u64)> {
    let mut out = HashMap::new();
    for (actor, entries) in read {
        let head = match store.list(&actor) {
            Ok(list) => list.last().map(|s| s.seq),
            Err(e) => {
                let why = format!(
                    "its journal entries cannot be checked: listing its snapshots: {}",
                    e.detail()
                );
                if let Some((at, entry)) = entries.first() {
                    out.insert(actor, (Recovery::Failed(why), *at, entry.epoch));
                }
                continue;
            }
        };
        // No snapshot: the actor was deleted (its create is in the store
        // or in the journal's snapshot entries, replayed before this).
        let Some(head) = head else { continue };
        let kept: Vec<_> = entries
            .into_iter()
            .filter(|(_, entry)| entry.seq >= head)
            .collect();
        let Some(&(first_at, ref first)) = kept.first() else {
            continue;
        };
        let first_epoch = first.epoch;
        let recovery = match follow_on(&actor, head, kept, &|at| format!("at position {at}")) {
            Ok(entries) => Recovery::Entries(entries),
            Err(why) => {
                tracing::error!(actor = %actor, "journal: {why}");
                Recovery::Failed(why)
            }
        };
        out.insert(actor, (recovery, first_at, first_epoch));
    }
    out
}

/// `entries` (on snapshot `head` or later) if they follow on from it
/// (module docs), decoded; `place` says where an entry was read, by the
/// number it was read with.
pub(super) fn follow_on(
    actor: &str,
    head: u64,
    entries: Read,
    place: &dyn Fn(u64) -> String,
) -> Result<Vec<RecoveredEntry>, String> {
    let (base, mut index) = (head, 0u64);
    let mut out = Vec::with_capacity(entries.len());
    for (at, entry) in entries {
        let record = DeliveryRecord::decode(&entry.body)
            .ok_or_else(|| format!("its journal entry {} is not a delivery record", place(at)))?;
        if entry.seq != base || record.index != index + 1 {
            return Err(format!(
                "actor {actor}: journal entry {}.{} (snapshot.delivery, {}) does not follow \
                 entry {base}.{index}: an entry is missing, repeated or out of order (a journal \
                 segment lost or damaged?); its {} acknowledged deliveries since snapshot {head} \
                 are kept in the journal and not replayed",
                entry.seq,
                record.index,
                place(at),
                out.len()
            ));
        }
        index = record.index;
        out.push(RecoveredEntry {
            base: entry.seq,
            epoch: entry.epoch,
            record,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::journal::EntryKind;

    fn entry(seq: u64, index: u64) -> (u64, Entry) {
        let record = DeliveryRecord {
            index,
            input_kind: 1,
            resumed: false,
            paused: 0,
            answer: 0,
            worker: "w0".into(),
            input: Vec::new(),
            tape: Vec::new(),
        };
        (
            seq * 100 + index,
            Entry {
                kind: EntryKind::Delivery,
                epoch: 1,
                seq,
                actor: "a".into(),
                body: Arc::new(record.encode()),
            },
        )
    }

    #[test]
    fn entries_follow_on_from_the_snapshot_or_the_actor_fails() {
        let ok = vec![entry(3, 1), entry(3, 2), entry(3, 3)];
        assert_eq!(
            follow_on("a", 3, ok, &|at| at.to_string())
                .expect("follows")
                .len(),
            3
        );
        for (bad, what) in [
            (vec![entry(3, 2)], "a gap at the start"),
            (vec![entry(3, 1), entry(3, 3)], "a gap"),
            (vec![entry(3, 1), entry(3, 2), entry(3, 1)], "a repeat"),
            (vec![entry(3, 1), entry(3, 2), entry(3, 2)], "a duplicate"),
            (vec![entry(4, 1)], "an entry on a snapshot the store lost"),
            (
                vec![entry(3, 1), entry(4, 1)],
                "a snapshot lost after entries",
            ),
        ] {
            let why = follow_on("a", 3, bad, &|at| at.to_string()).expect_err(what);
            assert!(why.contains("does not follow"), "{what}: {why}");
        }
    }

    /// Segments written by the journal itself, the middle one deleted: the
    /// actor whose entries ran through it is failed, naming the gap, and so
    /// is the one whose entries were all in it (by the roll record); the
    /// actor whose entries are all in the newest segment comes back whole.
    #[test]
    fn a_missing_middle_segment_fails_the_actors_whose_entries_it_held() {
        use crate::journal::{Journal, Recovery, segment_path};
        use crate::snapshot::capture::empty_snapshot;
        use crate::snapshot_files::LocalSnapshotStore;
        use crate::snapshot_store::SnapshotStore as _;

        let tmp = tempfile::tempdir().expect("tmp");
        let store = LocalSnapshotStore::open(tmp.path().join("snapshots"), None).expect("store");
        for actor in ["a", "b", "c"] {
            store
                .write(actor, 0, 1, &empty_snapshot(1))
                .expect("snapshot 0");
        }
        let dir = tmp.path().join("journal");
        let record = |index| {
            DeliveryRecord {
                index,
                input_kind: 1,
                resumed: false,
                paused: 0,
                answer: 7,
                worker: "w0".into(),
                input: b"POST /".to_vec(),
                tape: Vec::new(),
            }
            .encode()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        // Three runs of the journal, one segment each (each open starts a
        // segment after the last): `a` appends in all three, `b` only in
        // the last.
        let mut index = 0;
        for run in 0..3 {
            let (journal, _) = Journal::open(&dir, &store, Box::new(|| {})).expect("open");
            for _ in 0..2 {
                index += 1;
                journal
                    .append(EntryKind::Delivery, 1, 0, "a", &record(index))
                    .expect("append");
            }
            // `b` only in the last segment, `c` only in the middle one.
            let other = match run {
                1 => Some("c"),
                2 => Some("b"),
                _ => None,
            };
            for n in other.map_or(0..0, |_| 1..3) {
                let actor = other.expect("an actor");
                journal
                    .append(EntryKind::Delivery, 1, 0, actor, &record(n))
                    .expect("append");
            }
            rt.block_on(journal.appended().wait()).expect("durable");
        }
        let mut segments = super::super::list_segments(&dir).expect("segments");
        assert_eq!(segments.len(), 3, "{segments:?}");
        std::fs::remove_file(segment_path(&dir, segments.remove(1))).expect("delete the middle");
        let (journal, replayed) = Journal::open(&dir, &store, Box::new(|| {})).expect("open");
        assert_eq!((replayed.recovered, replayed.failed), (1, 2));
        match journal.take_recovered("a") {
            Some(Recovery::Failed(why)) => {
                assert!(why.contains("0.5") && why.contains("0.2"), "{why}");
            }
            other => panic!("a: {other:?}"),
        }
        // No entry of `c` is left to show a hole: the roll record at the
        // start of the last segment names its pin in the missing one.
        match journal.take_recovered("c") {
            Some(Recovery::Failed(why)) => assert!(why.contains("missing"), "{why}"),
            other => panic!("c: {other:?}"),
        }
        match journal.take_recovered("b") {
            Some(Recovery::Entries(entries)) => assert_eq!(entries.len(), 2),
            other => panic!("b: {other:?}"),
        }
    }
}
