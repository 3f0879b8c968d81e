//! Start-up replay: the newest entry of each actor, from the segments a
//! previous run left, is written to the store as the snapshot it is, when
//! it still applies.
//!
//! An entry applies when the store still holds what it was taken on: a
//! delta's base (its sequence number *and* its CRC32C, so a snapshot
//! replaced or an actor deleted and re-created under the same name does
//! not take it), and a sequence number past the actor's newest snapshot.
//! An entry at or below the newest is older than it: the actor wrote its
//! entry to the store itself (the same bytes), or a later snapshot
//! superseded it. An actor with no snapshot at all takes only a *create*
//! entry: snapshot 0, full (no base), which a create journals instead of
//! writing a file; any other entry of such an actor was of one since
//! deleted. A [`EntryKind::Forget`] drops the actor's entries
//! before it at its epoch or an earlier one (not those of a worker the
//! actor moved to meanwhile).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;

use super::entry::{Damaged, Entry, EntryKind, damaged, scan};
use super::recovered::Read;
use super::roll::{Lost, Pins};
use super::segment_path;
use crate::snapshot::{peek_header, recorded_crc32c};
use crate::snapshot_store::SnapshotStore;

/// What a replay found and did.
#[derive(Debug, Clone, Default)]
pub struct Replayed {
    /// Whole entries read (padding not counted).
    pub entries: u64,
    /// Actors whose newest entry was written to the store.
    pub applied: u64,
    /// Actors whose newest entry no longer applied (module docs).
    pub skipped: u64,
    /// Bytes of torn tails ignored (the zeros of a segment's unused space
    /// are none).
    pub torn_bytes: u64,
    /// Bytes of damaged records skipped between whole ones.
    pub damaged_bytes: u64,
    /// Delivery entries read (the logical journal's).
    pub deliveries: u64,
    /// Actors whose delivery entries are replayed at their next resume.
    pub recovered: u64,
    /// Actors failed because their delivery entries do not follow on from
    /// their newest snapshot ([`super::recovered`]).
    pub failed: u64,
    /// How long the replay took.
    pub duration: Duration,
}

/// Replays segments `segments` of `dir` into `store` (module docs);
/// returns the delivery entries read, per actor, for
/// [`super::recovered`].
pub(super) fn replay(
    dir: &Path,
    segments: &[u64],
    store: &dyn SnapshotStore,
) -> anyhow::Result<(Replayed, HashMap<String, Read>, Lost)> {
    let mut newest: HashMap<String, Entry> = HashMap::new();
    let mut deliveries: HashMap<String, Read> = HashMap::new();
    let mut pins = Pins::default();
    let mut read = Vec::with_capacity(segments.len());
    // Actors with a damaged record in the middle of a segment, and where.
    let mut damaged_of: HashMap<String, u64> = HashMap::new();
    let mut replayed = Replayed::default();
    for &start in segments {
        let path = segment_path(dir, start);
        let bytes =
            std::fs::read(&path).with_context(|| format!("reading journal segment {start}"))?;
        let (entries, end) = scan_segment(&bytes, start, &mut replayed, &mut damaged_of);
        read.push((start, start + end as u64));
        replayed.entries += entries
            .iter()
            .filter(|(_, entry)| {
                !matches!(
                    entry.kind,
                    EntryKind::Pad | EntryKind::Roll | EntryKind::Settled
                )
            })
            .count() as u64;
        for (at, entry) in entries {
            match entry.kind {
                EntryKind::Snapshot => {
                    newest.insert(entry.actor.clone(), entry);
                }
                EntryKind::Delivery => {
                    replayed.deliveries += 1;
                    deliveries
                        .entry(entry.actor.clone())
                        .or_default()
                        .push((start + at as u64, entry));
                }
                EntryKind::Pad => {}
                EntryKind::Roll => pins.roll(&entry.body),
                EntryKind::Settled => pins.settled(&entry.actor, entry.epoch),
                EntryKind::Patch => {
                    // On the actor's previous entry, which must be there.
                    let patched = newest
                        .get(&entry.actor)
                        .filter(|previous| previous.seq == entry.seq)
                        .and_then(|previous| super::patch::apply(&previous.body, &entry.body));
                    match patched {
                        Some(body) => {
                            let mut whole = entry;
                            whole.kind = EntryKind::Snapshot;
                            whole.body = std::sync::Arc::new(body);
                            newest.insert(whole.actor.clone(), whole);
                        }
                        None => {
                            tracing::warn!(actor = %entry.actor, seq = entry.seq, "journal: a patch without its entry is ignored");
                        }
                    }
                }
                EntryKind::Forget => {
                    pins.settled(&entry.actor, entry.epoch);
                    if let Some(list) = deliveries.get_mut(&entry.actor) {
                        list.retain(|(_, older)| older.epoch > entry.epoch);
                    }
                    if newest
                        .get(&entry.actor)
                        .is_some_and(|older| older.epoch <= entry.epoch)
                    {
                        newest.remove(&entry.actor);
                    }
                }
            }
        }
    }
    let mut actors: Vec<_> = newest.into_values().collect();
    actors.sort_by(|a, b| a.actor.cmp(&b.actor));
    for entry in actors {
        match applies(store, &entry) {
            Ok(()) => {
                store
                    .write(&entry.actor, entry.seq, entry.epoch, &entry.body)
                    .with_context(|| {
                        format!(
                            "replaying the journal: writing snapshot {} of actor {}",
                            entry.seq, entry.actor
                        )
                    })?;
                replayed.applied += 1;
            }
            Err(why) => {
                tracing::info!(actor = %entry.actor, seq = entry.seq, "journal entry not replayed: {why}");
                replayed.skipped += 1;
            }
        }
    }
    let mut lost = pins.lost(&read);
    for (actor, at) in damaged_of {
        let why = format!(
            "actor {actor}: a journal record at position {at} that may be its entry is damaged; \
             its acknowledged deliveries since its newest snapshot cannot all be replayed, and \
             the journal is kept for a repair"
        );
        tracing::error!(actor = %actor, "journal: {why}");
        lost.entry(actor).or_insert((why, at, 0));
    }
    Ok((replayed, deliveries, lost))
}

/// The whole records of one segment's `bytes` (segment `start`) with
/// their offsets, and where they end; counts torn and damaged bytes in
/// `replayed` and notes in `damaged_of` the actors whose entry a damaged
/// record in the middle may have been.
fn scan_segment(
    bytes: &[u8],
    start: u64,
    replayed: &mut Replayed,
    damaged_of: &mut HashMap<String, u64>,
) -> (Vec<(usize, Entry)>, usize) {
    let (mut entries, mut end) = scan(bytes);
    // A damaged record with whole ones after it: those still count,
    // and the actor whose entry it was is failed (any actor with a
    // delivery in the segment, when its header names none).
    let mut unattributed = false;
    while let Some(next) = super::entry::resync(bytes, end) {
        tracing::error!(
            segment = start,
            offset = end,
            skipped_bytes = next - end,
            "journal: a damaged record is skipped; the records after it are replayed"
        );
        let run = &bytes[end..next];
        // Whole pages of zeros: never-written space (a record after
        // it is a stray copy, judged by its actor's sequence), not a
        // damaged record.
        let unwritten = run.iter().all(|&b| b == 0)
            && (end as u64).is_multiple_of(super::PAGE)
            && (next as u64).is_multiple_of(super::PAGE);
        let owner = if unwritten {
            Damaged::Padding
        } else {
            damaged(run)
        };
        match owner {
            Damaged::Padding => {}
            Damaged::Of(actor) => {
                damaged_of.insert(actor, start + end as u64);
            }
            Damaged::Unknown => unattributed = true,
        }
        replayed.damaged_bytes += (next - end) as u64;
        let (more, more_end) = scan(&bytes[next..]);
        entries.extend(more.into_iter().map(|(at, entry)| (at + next, entry)));
        end = next + more_end;
    }
    // Zeros after the records are the segment's unused space.
    if bytes[end..].iter().any(|&b| b != 0) {
        tracing::warn!(
            segment = start,
            ignored_bytes = bytes.len() - end,
            "journal: a torn tail is ignored"
        );
        replayed.torn_bytes += (bytes.len() - end) as u64;
    }
    if unattributed {
        for (at, entry) in &entries {
            if entry.kind == EntryKind::Delivery {
                damaged_of
                    .entry(entry.actor.clone())
                    .or_insert(start + *at as u64);
            }
        }
    }
    (entries, end)
}

/// Whether `entry` still applies to `store` (module docs), or why not.
pub(super) fn applies(store: &dyn SnapshotStore, entry: &Entry) -> Result<(), String> {
    let header = peek_header(&entry.body).map_err(|e| format!("not a snapshot: {e}"))?;
    let list = store
        .list(&entry.actor)
        .map_err(|e| format!("listing its snapshots: {e}"))?;
    let Some(head) = list.last().map(|s| s.seq) else {
        // A new actor's first snapshot, journaled by its create: it is the
        // whole actor (no base), and a delete or re-create since appended
        // a forget, which dropped it before this point.
        if entry.seq == 0 && header.base.is_none() {
            return Ok(());
        }
        return Err("the actor has no snapshot (deleted)".into());
    };
    if entry.seq <= head {
        return Err(format!("snapshot {head} is as new or newer"));
    }
    if let Some(base) = header.base {
        let stored = store
            .open_snapshot(&entry.actor, base.seq)
            .map_err(|e| format!("its base {}: {e}", base.seq))?;
        if recorded_crc32c(&stored) != Some(base.crc32c) {
            return Err(format!("its base {} was replaced", base.seq));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{EntryKind, Journal};
    use crate::snapshot::capture::empty_snapshot;
    use crate::snapshot_files::LocalSnapshotStore;
    use crate::snapshot_store::SnapshotStore as _;

    fn journal(dir: &std::path::Path, store: &LocalSnapshotStore) -> (Journal, super::Replayed) {
        Journal::open(dir, store, Box::new(|| {})).expect("journal")
    }

    fn durable(journal: &Journal) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(journal.appended().wait()).expect("durable");
    }

    /// A create's snapshot 0, journaled, is written to an empty store at
    /// the next start; one deleted (a forget after it) is not, and one
    /// re-created after its forget is, as the new actor's.
    #[test]
    fn a_journaled_create_is_replayed_unless_a_forget_follows_it() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = LocalSnapshotStore::open(tmp.path().join("snapshots"), None).expect("store");
        let dir = tmp.path().join("journal");
        let (old, recreated) = (empty_snapshot(1), empty_snapshot(2));
        {
            let (journal, _) = journal(&dir, &store);
            let append = |kind, seq, actor: &str, body: &[u8]| {
                journal.append(kind, 1, seq, actor, body).expect("append");
            };
            append(EntryKind::Snapshot, 0, "created", &old);
            append(EntryKind::Snapshot, 0, "deleted", &old);
            append(EntryKind::Forget, 0, "deleted", &[]);
            append(EntryKind::Snapshot, 0, "again", &old);
            append(EntryKind::Forget, 0, "again", &[]);
            append(EntryKind::Snapshot, 0, "again", &recreated);
            // Not a create: an actor with no snapshot takes no later one.
            append(EntryKind::Snapshot, 3, "gone", &old);
            durable(&journal);
        }
        let (_journal, replayed) = journal(&dir, &store);
        assert_eq!((replayed.applied, replayed.skipped), (2, 1));
        let read = |actor: &str| store.open_snapshot(actor, 0).map(|b| b.to_vec());
        assert_eq!(read("created").expect("created"), old);
        assert_eq!(read("again").expect("re-created"), recreated);
        assert!(store.list("deleted").expect("list").is_empty());
        assert!(store.list("gone").expect("list").is_empty());
    }

    /// A create entry of an actor whose snapshot 0 reached the store (the
    /// actor sealed it) changes nothing.
    #[test]
    fn a_create_entry_already_in_the_store_is_skipped() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = LocalSnapshotStore::open(tmp.path().join("snapshots"), None).expect("store");
        let dir = tmp.path().join("journal");
        let body = empty_snapshot(1);
        {
            let (journal, _) = journal(&dir, &store);
            journal
                .append(EntryKind::Snapshot, 1, 0, "a", &body)
                .expect("append");
            durable(&journal);
        }
        store.write("a", 0, 1, &body).expect("sealed");
        let (_journal, replayed) = journal(&dir, &store);
        assert_eq!((replayed.applied, replayed.skipped), (0, 1));
    }
}
