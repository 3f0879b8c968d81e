//! Recovery from the journal segments in the store: the deliveries of an
//! actor placed on this worker after its newest snapshot
//! ([`ShippedJournal::recover`]), and the sweep of segments whose entries
//! all no longer apply ([`ShippedJournal::sweep`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::super::entry::{Entry, EntryKind};
use super::super::recovered::{Read, follow_on};
use super::super::{Recovery, delivery::DeliveryRecord};
use super::{SWEEP_AFTER, ShippedJournal};
use crate::snapshot_store::StoreError;

/// What the segments in the store give back an actor placed on a worker
/// ([`ShippedJournal::recover`]).
#[derive(Debug, Default)]
pub struct Recovered {
    /// The sequence number of a snapshot entry written to the store as its
    /// newest snapshot (a segment of an earlier version, which shipped
    /// pages).
    pub wrote: Option<u64>,
    /// Its deliveries after its newest snapshot, to replay at its next
    /// resume, or why they cannot be; `None` when there are none.
    pub deliveries: Option<Recovery>,
}

impl ShippedJournal {
    /// What the segments in the store hold of `actor` (module docs): its
    /// deliveries after its newest snapshot, which a worker lost with its
    /// disk acknowledged. They must follow on from the snapshot without a
    /// hole, else [`Recovery::Failed`] says where. Where several owners
    /// shipped entries of the same index (a worker past its lease whose
    /// PUT raced the fence), the later placement epoch's win.
    ///
    /// # Errors
    /// [`StoreError`] when the segments cannot be listed or read, or a
    /// snapshot entry cannot be written: the actor must not run then.
    pub fn recover(
        &self,
        actor: &str,
        listed_within: Option<Duration>,
    ) -> Result<Recovered, StoreError> {
        let segments = self.read_segments(listed_within)?;
        let store = self.shared.store.as_ref();
        let mut recovered = Recovered::default();
        if let Some(entry) = newest_entry(&segments, actor)
            && super::super::replay::applies(store, entry).is_ok()
        {
            store.write(actor, entry.seq, entry.epoch, &entry.body)?;
            tracing::info!(
                actor,
                seq = entry.seq,
                epoch = entry.epoch,
                "recovered the actor's newest journal entry from the store"
            );
            recovered.wrote = Some(entry.seq);
        }
        let Some(head) = store.list(actor)?.last().map(|s| s.seq) else {
            return Ok(recovered);
        };
        let read = deliveries(&segments, actor, head);
        if read.is_empty() {
            return Ok(recovered);
        }
        let count = read.len();
        let place = |index: u64| format!("delivery {index} in the journal segments in the store");
        recovered.deliveries = Some(match follow_on(actor, head, read, &place) {
            Ok(entries) => {
                tracing::info!(
                    actor,
                    snapshot = head,
                    entries = count,
                    "journal entries recovered from the store"
                );
                Recovery::Entries(entries)
            }
            Err(why) => {
                tracing::error!(actor, "journal: {why}");
                Recovery::Failed(why)
            }
        });
        Ok(recovered)
    }

    /// Every segment in the store, decoded (each once, one recovery reading
    /// at a time; forgotten when it is gone from the store), with its age.
    ///
    /// A read that began after this call did lists every segment this
    /// call's own read would (a segment written before the call is in the
    /// store by then), so the takeovers that queued up behind one read are
    /// all served by the next: a wave of them lists the store once per
    /// round, not once each. With `listed_within`, a read that began at
    /// most that long before this call serves it too (its caller knows
    /// that every segment it needs was written before then).
    fn read_segments(
        &self,
        listed_within: Option<Duration>,
    ) -> Result<Arc<HashMap<String, Segment>>, StoreError> {
        let now = std::time::Instant::now();
        let asked = listed_within
            .and_then(|within| now.checked_sub(within))
            .unwrap_or(now);
        let mut reading = self
            .shared
            .reading
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some((began, read)) = &*reading
            && *began >= asked
        {
            return Ok(read.clone());
        }
        let began = std::time::Instant::now();
        let read = Arc::new(self.read_segments_now()?);
        *reading = Some((began, read.clone()));
        Ok(read)
    }

    /// [`ShippedJournal::read_segments`]'s read (its caller holds `reading`).
    fn read_segments_now(&self) -> Result<HashMap<String, Segment>, StoreError> {
        let listed = self.shared.objects.list_segments()?;
        let known: HashMap<String, super::Decoded> = {
            let mut seen = self.shared.seen.lock().unwrap_or_else(|p| p.into_inner());
            seen.retain(|name, _| listed.iter().any(|m| &m.name == name));
            seen.clone()
        };
        let mut all = HashMap::with_capacity(listed.len());
        let (known_now, unread): (Vec<_>, Vec<_>) = listed
            .into_iter()
            .partition(|meta| known.contains_key(&meta.name));
        for meta in known_now {
            if let Some(entries) = known.get(&meta.name) {
                let segment = Segment {
                    age: meta.age,
                    entries: entries.clone(),
                };
                all.insert(meta.name, segment);
            }
        }
        let names: Vec<String> = unread.iter().map(|m| m.name.clone()).collect();
        let reads = self.shared.objects.get_segments(&names)?;
        for (meta, read) in unread.into_iter().zip(reads) {
            let bytes = match read {
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
    /// this run's orphans (segments that held unsettled entries of an
    /// actor that left this worker); returns how many.
    ///
    /// # Errors
    /// [`StoreError`] when the segments cannot be listed, read or deleted.
    pub fn sweep(&self) -> Result<usize, StoreError> {
        let listed = self.shared.objects.list_segments()?;
        let mine = self.shared.run_prefix();
        // This run's orphans, less those an unsettled actor here needs.
        let orphans: Vec<String> = {
            let state = self.shared.lock();
            let first = state.live.values().map(|&(r, ..)| r).min();
            state
                .orphans
                .iter()
                .filter(|&&r| first.is_none_or(|first| r < first))
                .map(|&r| self.shared.segment_name(r))
                .collect()
        };
        let old: Vec<String> = listed
            .iter()
            .filter(|m| m.age >= SWEEP_AFTER)
            .filter(|m| !m.name.starts_with(&mine) || orphans.contains(&m.name))
            .map(|m| m.name.clone())
            .collect();
        if old.is_empty() {
            return Ok(0);
        }
        let segments = self.read_segments(None)?;
        let store = self.shared.store.as_ref();
        let mut heads: HashMap<String, Option<Option<u64>>> = HashMap::new();
        let mut head = |actor: &str| {
            *heads
                .entry(actor.to_owned())
                .or_insert_with(|| store.list(actor).ok().map(|l| l.last().map(|s| s.seq)))
        };
        // A snapshot entry goes when it no longer applies or a later
        // forget dropped it; a delivery when its snapshot is no longer the
        // newest (or the actor is gone) or a later forget dropped it; a
        // tombstone when no older entry of its actor still applies. An
        // actor whose snapshots cannot be listed keeps its entries.
        let mut applies = |entry: &Entry, name: &String, segment: &Segment| match entry.kind {
            EntryKind::Snapshot => super::super::replay::applies(store, entry).is_ok(),
            EntryKind::Delivery => match head(&entry.actor) {
                None => true,
                Some(head) => {
                    head.is_some_and(|head| head <= entry.seq)
                        && !forgotten(&holding(&segments, &entry.actor), (name, segment), entry)
                }
            },
            _ => false,
        };
        let doomed: Vec<String> = old
            .into_iter()
            .filter(|name| {
                let Some(segment) = segments.get(name) else {
                    return true;
                };
                segment
                    .entries
                    .values()
                    .flatten()
                    .all(|entry| match entry.kind {
                        EntryKind::Snapshot => {
                            newest_entry(&segments, &entry.actor)
                                .is_none_or(|newest| !std::ptr::eq(newest, entry))
                                || !applies(entry, name, segment)
                        }
                        EntryKind::Delivery => !applies(entry, name, segment),
                        _ if entry.epoch == TOMBSTONE => !segments.iter().any(|(other, older)| {
                            newer((name, segment), (other, older))
                                && older.entries.get(&entry.actor).is_some_and(|entries| {
                                    entries.iter().any(|e| {
                                        e.kind != EntryKind::Forget && applies(e, other, older)
                                    })
                                })
                        }),
                        _ => true,
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
    /// Each actor's entries in it, in order.
    entries: super::Decoded,
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
    match (run_of(a), run_of(b)) {
        (Some(ra), Some(rb)) if ra == rb => a > b,
        _ => sa.age < sb.age,
    }
}

/// The `<worker>/<run>` part of a segment's name.
fn run_of(name: &str) -> Option<&str> {
    name.rsplit_once('-').map(|(run, _)| run)
}

/// The segments holding entries of one actor, with those entries: what
/// [`forgotten`] looks through (found once per actor, not per entry).
type Holding<'a> = Vec<(&'a String, &'a Segment, &'a [Entry])>;

/// The segments of `segments` that hold entries of `actor`.
fn holding<'a>(segments: &'a HashMap<String, Segment>, actor: &str) -> Holding<'a> {
    segments
        .iter()
        .filter_map(|(name, segment)| {
            let entries = segment.entries.get(actor)?;
            Some((name, segment, entries.as_slice()))
        })
        .collect()
}

/// Whether a forget after `entry` (in segment `at`) dropped it: one of the
/// same run at the entry's epoch or later (the actor was deleted, moved
/// away or repaired there), or a tombstone of any worker. `holding`: the
/// segments with entries of the entry's actor.
fn forgotten(holding: &Holding<'_>, at: (&String, &Segment), entry: &Entry) -> bool {
    let run = run_of(at.0).unwrap_or(at.0.as_str());
    // A tombstone's epoch is above every other.
    let applies = |forget: &Entry| forget.kind == EntryKind::Forget && forget.epoch >= entry.epoch;
    holding.iter().any(|&(name, segment, entries)| {
        if std::ptr::eq(segment, at.1) {
            // Later in the same segment.
            return entries
                .iter()
                .skip_while(|e| !std::ptr::eq(*e, entry))
                .skip(1)
                .any(applies);
        }
        newer((name, segment), at)
            && entries.iter().any(|forget| {
                applies(forget) && (forget.epoch == TOMBSTONE || name.starts_with(run))
            })
    })
}

/// `actor`'s newest snapshot entry in `segments` (segments of an earlier
/// version shipped pages), unless a later forget dropped it. Successive
/// entries of an actor share a seq until one is sealed: of one run, the
/// later round wins.
fn newest_entry<'a>(segments: &'a HashMap<String, Segment>, actor: &str) -> Option<&'a Entry> {
    let holding = holding(segments, actor);
    let (at, entry) = holding
        .iter()
        .filter_map(|&(name, segment, entries)| {
            let newest = entries
                .iter()
                .filter(|e| e.kind == EntryKind::Snapshot)
                .max_by_key(|e| (e.seq, e.epoch))?;
            Some(((name, segment), newest))
        })
        .max_by_key(|((name, _), entry)| (entry.seq, entry.epoch, name.as_str()))?;
    (!forgotten(&holding, at, entry)).then_some(entry)
}

/// `actor`'s delivery entries on snapshot `head` in `segments` that no
/// forget dropped, by index: where owners of several placement epochs
/// shipped the same index, the later epoch's entries win, and an earlier
/// epoch's count only below the first index a later one holds (a later
/// owner replayed them and went on from there).
fn deliveries(segments: &HashMap<String, Segment>, actor: &str, head: u64) -> Read {
    let mut by_epoch: BTreeMap<u64, BTreeMap<u64, (&String, &Entry)>> = BTreeMap::new();
    let holding = holding(segments, actor);
    for &(name, segment, entries) in &holding {
        for entry in entries {
            if entry.kind != EntryKind::Delivery
                || entry.seq != head
                || forgotten(&holding, (name, segment), entry)
            {
                continue;
            }
            let Some(index) = DeliveryRecord::peek_index(&entry.body) else {
                continue;
            };
            let same = by_epoch.entry(entry.epoch).or_default();
            // Of one epoch, the later segment's copy.
            if same
                .get(&index)
                .is_none_or(|(other, _)| newer((name, segment), (other, &segments[*other])))
            {
                same.insert(index, (name, entry));
            }
        }
    }
    let mut chosen: BTreeMap<u64, &Entry> = BTreeMap::new();
    let mut below = u64::MAX;
    for same in by_epoch.values().rev() {
        let mut first = below;
        for (&index, &(_, entry)) in same.range(..below) {
            chosen.insert(index, entry);
            first = first.min(index);
        }
        below = first;
    }
    chosen
        .into_iter()
        .map(|(index, entry)| (index, entry.clone()))
        .collect()
}

/// Each actor's entries in a segment's bytes, in order (a damaged record
/// ends the segment there: a PUT is whole or absent, so it is logged).
fn decode(name: &str, bytes: &[u8]) -> HashMap<String, Vec<Entry>> {
    let (entries, end) = super::super::entry::scan(bytes);
    if end != bytes.len() {
        tracing::warn!(
            segment = name,
            ignored_bytes = bytes.len() - end,
            "journal segment in the store: a damaged record and what follows it are ignored"
        );
    }
    let mut all: HashMap<String, Vec<Entry>> = HashMap::new();
    for (_, entry) in entries {
        all.entry(entry.actor.clone()).or_default().push(entry);
    }
    all
}
