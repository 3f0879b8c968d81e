//! Roll records: which actors needed which older entries when a segment
//! began, so a segment lost in the middle is never skipped silently.
//!
//! Each segment that starts while actors have entries not yet covered by
//! a snapshot (at a roll, and at start-up) holds a *roll* record listing
//! them, each with the position of its first such entry; a *settled*
//! record says an actor's entries before it are covered now (a snapshot
//! was written, or they were forgotten). At start-up the pins of the
//! newest roll record, less those settled after it, must lie in segments
//! that are there: an actor whose pin falls before the oldest segment or in
//! a gap between two (a segment deleted or lost) is failed with the
//! positions, even when none of its entries is left to show a hole.
//!
//! ```text
//! roll body: count u32 LE, then per actor:
//!   position u64 LE, epoch u64 LE, name length u16 LE, name
//! ```

use std::collections::HashMap;

/// The body of a roll record listing `live` (actor to position, epoch).
pub(super) fn encode(live: &HashMap<String, (u64, u64)>) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + live.len() * 32);
    let count = u32::try_from(live.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&count.to_le_bytes());
    for (actor, &(at, epoch)) in live.iter().take(count as usize) {
        out.extend_from_slice(&at.to_le_bytes());
        out.extend_from_slice(&epoch.to_le_bytes());
        let name = u16::try_from(actor.len()).expect("actor names are short");
        out.extend_from_slice(&name.to_le_bytes());
        out.extend_from_slice(actor.as_bytes());
    }
    out
}

/// The pins a roll record's `body` lists; `None` when it is not one.
fn decode(body: &[u8]) -> Option<Vec<(String, u64, u64)>> {
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(body.get(at..at + 8)?.try_into().ok()?))
    };
    let count = u32::from_le_bytes(body.get(..4)?.try_into().ok()?);
    let mut at = 4;
    let mut pins = Vec::new();
    for _ in 0..count {
        let (position, epoch) = (u64_at(at)?, u64_at(at + 8)?);
        let len = usize::from(u16::from_le_bytes(
            body.get(at + 16..at + 18)?.try_into().ok()?,
        ));
        let name = std::str::from_utf8(body.get(at + 18..at + 18 + len)?).ok()?;
        pins.push((name.to_owned(), position, epoch));
        at += 18 + len;
    }
    Some(pins)
}

/// The actors whose pins were lost: why, and their pin's position and
/// epoch.
pub(super) type Lost = HashMap<String, (String, u64, u64)>;

/// The pins of the newest roll record read, less those settled since.
#[derive(Debug, Default)]
pub(super) struct Pins(HashMap<String, (u64, u64)>);

impl Pins {
    /// A roll record (`body`) was read: its pins replace the earlier ones.
    pub(super) fn roll(&mut self, body: &[u8]) {
        match decode(body) {
            Some(pins) => {
                self.0 = pins
                    .into_iter()
                    .map(|(actor, at, epoch)| (actor, (at, epoch)))
                    .collect();
            }
            None => tracing::error!("journal: a roll record does not decode; it is ignored"),
        }
    }

    /// `actor`'s entries at `epoch` or before are covered (settled or
    /// forgotten).
    pub(super) fn settled(&mut self, actor: &str, epoch: u64) {
        if self.0.get(actor).is_some_and(|&(_, at)| at <= epoch) {
            self.0.remove(actor);
        }
    }

    /// The actors whose pin lies outside `segments` (start and valid end
    /// of each segment read, oldest first), with why.
    pub(super) fn lost(&self, segments: &[(u64, u64)]) -> Lost {
        let mut lost = HashMap::new();
        for (actor, &(at, epoch)) in &self.0 {
            let missing = match segments.iter().position(|&(start, _)| start > at) {
                // Before the oldest segment.
                Some(0) => Some((0, segments[0].0)),
                // After segment `i - 1`'s valid end, before segment `i`.
                Some(i) if at >= segments[i - 1].1 => Some((segments[i - 1].1, segments[i].0)),
                _ => None,
            };
            if let Some((from, to)) = missing {
                let why = format!(
                    "actor {actor}: its journal entries from position {at} were in a journal \
                     segment that is missing or damaged (positions {from}..{to}); its \
                     acknowledged deliveries since its newest snapshot cannot be replayed, and \
                     the rest of the journal is kept for a repair"
                );
                tracing::error!(actor = %actor, "journal: {why}");
                lost.insert(actor.clone(), (why, at, epoch));
            }
        }
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_outside_the_segments_read_are_lost_unless_settled() {
        let live = HashMap::from([
            ("before".to_owned(), (50, 1)),
            ("gap".to_owned(), (250, 1)),
            ("here".to_owned(), (120, 1)),
            ("settled".to_owned(), (250, 1)),
        ]);
        let mut pins = Pins::default();
        pins.roll(&encode(&live));
        pins.settled("settled", 1);
        let lost = pins.lost(&[(100, 200), (300, 400)]);
        let mut names: Vec<_> = lost.keys().cloned().collect();
        names.sort();
        assert_eq!(names, ["before", "gap"]);
        assert!(
            lost["gap"].0.contains("positions 200..300"),
            "{:?}",
            lost["gap"]
        );
    }
}
