//! Recovery from the journal segments in the store: the newest entry of
//! an actor placed on this worker ([`ShippedJournal::recover`]), and the
//! sweep of segments whose entries all no longer apply
//! ([`ShippedJournal::sweep`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::super::entry::{Entry, EntryKind};
use super::{SWEEP_AFTER, ShippedJournal};
use crate::snapshot_store::StoreError;

impl ShippedJournal {
    /// Writes `actor`'s newest entry found in the store's segments as the
    /// snapshot it is, when it still applies (module docs): the state a
    /// worker lost with its disk acknowledged after its newest snapshot.
    /// Returns the sequence number written, if any.
    ///
    /// # Errors
    /// [`StoreError`] when the segments cannot be listed or read, or the
    /// snapshot cannot be written: the actor must not run then.
    pub fn recover(&self, actor: &str) -> Result<Option<u64>, StoreError> {
        let segments = self.read_segments()?;
        let Some(entry) = newest_entry(&segments, actor) else {
            return Ok(None);
        };
        match super::super::replay::applies(self.shared.store.as_ref(), entry) {
            Ok(()) => {
                self.shared
                    .store
                    .write(actor, entry.seq, entry.epoch, &entry.body)?;
                tracing::info!(
                    actor,
                    seq = entry.seq,
                    epoch = entry.epoch,
                    "recovered the actor's newest journal entry from the store"
                );
                Ok(Some(entry.seq))
            }
            Err(why) => {
                tracing::debug!(actor, seq = entry.seq, "journal entry not recovered: {why}");
                Ok(None)
            }
        }
    }

    /// Every segment in the store, decoded (each once; forgotten when it
    /// is gone from the store), with its age.
    fn read_segments(&self) -> Result<HashMap<String, Segment>, StoreError> {
        let listed = self.shared.objects.list_segments()?;
        let known: HashMap<String, Arc<HashMap<String, Entry>>> = {
            let mut seen = self.shared.seen.lock().unwrap_or_else(|p| p.into_inner());
            seen.retain(|name, _| listed.iter().any(|m| &m.name == name));
            seen.clone()
        };
        let mut all = HashMap::with_capacity(listed.len());
        for meta in listed {
            if let Some(entries) = known.get(&meta.name) {
                let segment = Segment {
                    age: meta.age,
                    entries: entries.clone(),
                };
                all.insert(meta.name, segment);
                continue;
            }
            let bytes = match self.shared.objects.get_segment(&meta.name) {
                Ok(bytes) => bytes,
                // Deleted since the listing: its entries were settled.
                Err(StoreError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    continue;
                }
                Err(e) => return Err(e),
            };
            let entries = Arc::new(decode(&meta.name, &bytes));
            self.shared
                .seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(meta.name.clone(), entries.clone());
            let segment = Segment {
                age: meta.age,
                entries,
            };
            all.insert(meta.name, segment);
        }
        Ok(all)
    }

    /// Deletes the segments in the store older than [`SWEEP_AFTER`] whose
    /// entries all no longer apply: a lost worker's, an earlier run's, and
    /// this run's orphans (segments that held the acknowledged entry of an
    /// actor that left this worker); returns how many.
    ///
    /// # Errors
    /// [`StoreError`] when the segments cannot be listed, read or deleted.
    pub fn sweep(&self) -> Result<usize, StoreError> {
        let listed = self.shared.objects.list_segments()?;
        let mine = self.shared.run_prefix();
        let (orphans, pinned): (Vec<String>, Vec<String>) = {
            let state = self.shared.lock();
            (
                state
                    .orphans
                    .iter()
                    .map(|&r| self.shared.segment_name(r))
                    .collect(),
                state
                    .acked
                    .values()
                    .map(|&(r, _)| self.shared.segment_name(r))
                    .collect(),
            )
        };
        let old: Vec<String> = listed
            .iter()
            .filter(|m| m.age >= SWEEP_AFTER)
            .filter(|m| !m.name.starts_with(&mine) || orphans.contains(&m.name))
            .filter(|m| !pinned.contains(&m.name))
            .map(|m| m.name.clone())
            .collect();
        if old.is_empty() {
            return Ok(0);
        }
        let segments = self.read_segments()?;
        let store = self.shared.store.as_ref();
        // A snapshot entry goes when it no longer applies or a later
        // forget dropped it; a tombstone when no older entry of its actor
        // still applies.
        let applies = |entry: &Entry| super::super::replay::applies(store, entry).is_ok();
        let doomed: Vec<String> = old
            .into_iter()
            .filter(|name| {
                segments.get(name).is_none_or(|segment| {
                    segment.entries.values().all(|entry| match entry.kind {
                        EntryKind::Snapshot => {
                            newest_entry(&segments, &entry.actor)
                                .is_none_or(|newest| !std::ptr::eq(newest, entry))
                                || !applies(entry)
                        }
                        _ if entry.epoch == TOMBSTONE => !segments.iter().any(|(other, older)| {
                            newer((name, segment), (other, older))
                                && older
                                    .entries
                                    .get(&entry.actor)
                                    .is_some_and(|e| e.kind == EntryKind::Snapshot && applies(e))
                        }),
                        _ => true,
                    })
                })
            })
            .collect();
        if doomed.is_empty() {
            return Ok(0);
        }
        self.shared.objects.delete_segments(&doomed)?;
        let mut state = self.shared.lock();
        let rounds: Vec<u64> = state
            .orphans
            .iter()
            .copied()
            .filter(|&r| doomed.contains(&self.shared.segment_name(r)))
            .collect();
        for round in rounds {
            state.orphans.remove(&round);
            state.shipped.remove(&round);
        }
        Ok(doomed.len())
    }
}

/// A decoded segment of the store.
#[derive(Debug, Clone)]
pub(super) struct Segment {
    /// How long ago it was written.
    age: Duration,
    /// Each actor's newest entry in it.
    entries: Arc<HashMap<String, Entry>>,
}

/// The epoch of a *tombstone*: a forget a worker puts in the store when it
/// creates an actor ([`ShippedJournal::tombstone`]), which drops every
/// earlier entry of the name whatever worker or run wrote it (a deleted
/// actor's acknowledged state on a lost worker never becomes a new
/// actor's).
pub(super) const TOMBSTONE: u64 = u64::MAX;

/// Whether segment `a` was written after segment `b`: by round within one
/// worker's run (names sort by round), else by age.
fn newer((a, sa): (&String, &Segment), (b, sb): (&String, &Segment)) -> bool {
    let run = |name: &str| name.rsplit_once('-').map(|(run, _)| run.to_owned());
    match (run(a), run(b)) {
        (Some(ra), Some(rb)) if ra == rb => a > b,
        _ => sa.age < sb.age,
    }
}

/// `actor`'s newest snapshot entry in `segments`, unless a later forget
/// dropped it: one of the same run at the entry's epoch or later (the
/// actor was deleted, moved away or repaired there), or a tombstone of
/// any worker. Successive entries of an actor share a seq until one is
/// sealed: of one run, the later round wins.
fn newest_entry<'a>(segments: &'a HashMap<String, Segment>, actor: &str) -> Option<&'a Entry> {
    let records: Vec<((&String, &Segment), &Entry)> = segments
        .iter()
        .filter_map(|(name, segment)| segment.entries.get(actor).map(|e| ((name, segment), e)))
        .collect();
    let (at, entry) = records
        .iter()
        .filter(|(_, entry)| entry.kind == EntryKind::Snapshot)
        .max_by_key(|((name, _), entry)| (entry.seq, entry.epoch, name.as_str()))
        .copied()?;
    let run = at.0.rsplit_once('-').map_or(at.0.as_str(), |(run, _)| run);
    let forgotten = records.iter().any(|(other, forget)| {
        forget.kind == EntryKind::Forget
            && newer(*other, at)
            && (forget.epoch == TOMBSTONE
                || (other.0.starts_with(run) && forget.epoch >= entry.epoch))
    });
    (!forgotten).then_some(entry)
}

/// Each actor's newest entry in a segment's bytes (a damaged record ends
/// the segment there: a PUT is whole or absent, so it is logged).
fn decode(name: &str, bytes: &[u8]) -> HashMap<String, Entry> {
    let (entries, end) = super::super::entry::scan(bytes);
    if end != bytes.len() {
        tracing::warn!(
            segment = name,
            ignored_bytes = bytes.len() - end,
            "journal segment in the store: a damaged record and what follows it are ignored"
        );
    }
    let mut newest: HashMap<String, Entry> = HashMap::new();
    for (_, entry) in entries {
        if newest
            .get(&entry.actor)
            .is_none_or(|old| (entry.seq, entry.epoch) >= (old.seq, old.epoch))
        {
            newest.insert(entry.actor.clone(), entry);
        }
    }
    newest
}
