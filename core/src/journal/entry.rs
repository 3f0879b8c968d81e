//! The journal's record format: how one entry is laid out in a segment
//! file, written and read back, and how a scan stops at a torn tail.
//!
//! ```text
//! magic  u32 LE   "SJE1" (0x3145_4A53)
//! length u32 LE   bytes of the payload
//! crc32c u32 LE   CRC32C of the payload
//! payload:
//!   kind   u8     1 = snapshot, 2 = forget, 3 = pad (ignored),
//!                 4 = patch of the actor's previous entry, 5 = delivery
//!                 (the logical journal's entry, `super::delivery`),
//!                 6 = roll (the actors' pins, `super::roll`), 7 = settled
//!                 (the actor's entries are covered by a snapshot)
//!   epoch  u64 LE the actor's placement epoch on the writing worker
//!   seq    u64 LE the snapshot's sequence number (0 for a forget; for a
//!                 delivery, the snapshot it followed)
//!   name   u16 LE length, then that many bytes of UTF-8: the actor
//!   body          the rest: a snapshot file (format version 1 or 2), or
//!                 a patch (`super::patch`)
//! ```
//!
//! A record is valid only whole: a short read, another magic, a length
//! past the end or a checksum that does not match ends the scan of that
//! segment there (a crash tore the tail while it was being written; what
//! follows was never acknowledged).

use std::sync::Arc;

/// Marks the start of a record.
const MAGIC: u32 = 0x3145_4A53;
/// Bytes before the payload.
pub(super) const HEADER_BYTES: usize = 12;
/// Bytes of the payload before the actor's name.
const FIXED_PAYLOAD: usize = 1 + 8 + 8 + 2;

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// The actor's state as snapshot `seq` (a delta on the snapshot its
    /// header names, or full).
    Snapshot,
    /// The actor's entries before this one no longer apply (deleted,
    /// re-created or repaired).
    Forget,
    /// Nothing: fills a group commit's last page, so the next commit never
    /// writes into a page still being written back.
    Pad,
    /// The actor's state as snapshot `seq`, as a patch of its previous
    /// entry ([`super::patch`]).
    Patch,
    /// One delivery after snapshot `seq`: its input and the host values it
    /// read ([`super::delivery`]), replayed on that snapshot.
    Delivery,
    /// The actors whose entries were not yet covered by a snapshot when a
    /// segment began ([`super::roll`]).
    Roll,
    /// The actor's entries before this one are covered by a snapshot.
    Settled,
}

impl EntryKind {
    fn code(self) -> u8 {
        match self {
            Self::Snapshot => 1,
            Self::Forget => 2,
            Self::Pad => 3,
            Self::Patch => 4,
            Self::Delivery => 5,
            Self::Roll => 6,
            Self::Settled => 7,
        }
    }

    fn of(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Snapshot),
            2 => Some(Self::Forget),
            3 => Some(Self::Pad),
            4 => Some(Self::Patch),
            5 => Some(Self::Delivery),
            6 => Some(Self::Roll),
            7 => Some(Self::Settled),
            _ => None,
        }
    }
}

/// One decoded entry.
#[derive(Debug, Clone)]
pub struct Entry {
    /// What it records.
    pub kind: EntryKind,
    /// The actor's placement epoch when it was written.
    pub epoch: u64,
    /// The snapshot's sequence number.
    pub seq: u64,
    /// The actor.
    pub actor: String,
    /// The snapshot file (empty for a forget).
    pub body: Arc<Vec<u8>>,
}

/// Appends the record of one entry to `out`.
///
/// # Panics
/// If the actor's name is longer than 65,535 bytes or the payload longer
/// than 4 GiB (names are at most 63 bytes; snapshots are bounded by
/// `--max-memory`, at most 4 GiB by the Wasm 32-bit address space).
pub(super) fn encode(
    out: &mut Vec<u8>,
    kind: EntryKind,
    epoch: u64,
    seq: u64,
    actor: &str,
    body: &[u8],
) {
    let name = u16::try_from(actor.len()).expect("actor names are short");
    let length = FIXED_PAYLOAD + actor.len() + body.len();
    let length = u32::try_from(length).expect("a journal entry is below 4 GiB");
    let start = out.len();
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&length.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    let payload = out.len();
    out.push(kind.code());
    out.extend_from_slice(&epoch.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&name.to_le_bytes());
    out.extend_from_slice(actor.as_bytes());
    out.extend_from_slice(body);
    let crc = crc32c::crc32c(&out[payload..]);
    out[start + 8..start + 12].copy_from_slice(&crc.to_le_bytes());
}

/// Appends a [`EntryKind::Pad`] record that ends at the next multiple of
/// `page` from `offset` (the file offset `out` starts at); returns its
/// length.
pub(super) fn pad_to_page(out: &mut Vec<u8>, offset: u64, page: u64) -> u64 {
    let end = offset + out.len() as u64;
    let mut gap = (page - end % page) % page;
    if gap == 0 {
        return 0;
    }
    let least = (HEADER_BYTES + FIXED_PAYLOAD) as u64;
    if gap < least {
        gap += page;
    }
    // Written in place: the header, then the zeros, then the checksum.
    let start = out.len();
    let length = u32::try_from(gap - HEADER_BYTES as u64).expect("a pad is below a page");
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&length.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.push(EntryKind::Pad.code());
    out.resize(start + gap as usize, 0);
    let crc = crc32c::crc32c(&out[start + HEADER_BYTES..]);
    out[start + 8..start + 12].copy_from_slice(&crc.to_le_bytes());
    gap
}

/// The size of the record [`encode`] writes.
pub(super) fn record_len(actor: &str, body: &[u8]) -> usize {
    HEADER_BYTES + FIXED_PAYLOAD + actor.len() + body.len()
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// Reads the record at the start of `bytes`: the entry and the record's
/// length, or `None` when there is no whole, valid record there (module
/// docs).
pub(super) fn decode(bytes: &[u8]) -> Option<(Entry, usize)> {
    if u32_at(bytes, 0)? != MAGIC {
        return None;
    }
    let length = usize::try_from(u32_at(bytes, 4)?).ok()?;
    let crc = u32_at(bytes, 8)?;
    let payload = bytes.get(HEADER_BYTES..HEADER_BYTES.checked_add(length)?)?;
    if crc32c::crc32c(payload) != crc || payload.len() < FIXED_PAYLOAD {
        return None;
    }
    let kind = EntryKind::of(payload[0])?;
    let epoch = u64_at(payload, 1)?;
    let seq = u64_at(payload, 9)?;
    let name = usize::from(u16::from_le_bytes(payload.get(17..19)?.try_into().ok()?));
    let actor = std::str::from_utf8(payload.get(19..19 + name)?).ok()?;
    let body = payload.get(19 + name..)?;
    Some((
        Entry {
            kind,
            epoch,
            seq,
            actor: actor.to_owned(),
            body: Arc::new(body.to_vec()),
        },
        HEADER_BYTES + length,
    ))
}

/// Whose a damaged record was, as far as its header still says.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Damaged {
    /// Padding: nothing was lost.
    Padding,
    /// An entry of this actor (a delivery, or a snapshot entry).
    Of(String),
    /// The header cannot be read (or names no actor: a roll record).
    Unknown,
}

/// Whose the damaged record at the start of `bytes` was ([`Damaged`]).
pub(super) fn damaged(bytes: &[u8]) -> Damaged {
    if u32_at(bytes, 0) != Some(MAGIC) {
        return Damaged::Unknown;
    }
    let payload = bytes.get(HEADER_BYTES..).unwrap_or_default();
    let name = payload
        .get(17..19)
        .map(|len| usize::from(u16::from_le_bytes([len[0], len[1]])))
        .and_then(|len| payload.get(19..19 + len))
        .and_then(|name| std::str::from_utf8(name).ok());
    match (payload.first().copied().and_then(EntryKind::of), name) {
        (Some(EntryKind::Pad), Some("")) => Damaged::Padding,
        (Some(EntryKind::Delivery | EntryKind::Snapshot | EntryKind::Patch), Some(actor))
            if !actor.is_empty() =>
        {
            Damaged::Of(actor.to_owned())
        }
        _ => Damaged::Unknown,
    }
}

/// Every whole record of a segment's `bytes` from its start, in order,
/// with its offset, and the offset where the valid records end (the torn
/// tail, if any, starts there).
pub(super) fn scan(bytes: &[u8]) -> (Vec<(usize, Entry)>, usize) {
    let mut entries = Vec::new();
    let mut at = 0;
    while let Some((entry, len)) = decode(&bytes[at..]) {
        entries.push((at, entry));
        at += len;
    }
    (entries, at)
}

/// The offset of the next whole record after `from` in `bytes`, if any:
/// where a scan resumes past a damaged record (a flipped bit in the
/// middle of a segment, not a torn tail).
pub(super) fn resync(bytes: &[u8], from: usize) -> Option<usize> {
    let magic = MAGIC.to_le_bytes();
    let mut at = from + 1;
    while at + HEADER_BYTES <= bytes.len() {
        let next = bytes[at..].windows(4).position(|w| w == magic)? + at;
        if decode(&bytes[next..]).is_some() {
            return Some(next);
        }
        at = next + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(actor: &str, seq: u64, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(&mut out, EntryKind::Snapshot, 3, seq, actor, body);
        out
    }

    #[test]
    fn a_record_reads_back_whole() {
        let mut bytes = record("counter-1", 7, b"state");
        assert_eq!(bytes.len(), record_len("counter-1", b"state"));
        encode(&mut bytes, EntryKind::Forget, 4, 0, "other", b"");
        let (entries, end) = scan(&bytes);
        assert_eq!(end, bytes.len());
        assert_eq!(entries.len(), 2);
        let (_, first) = &entries[0];
        assert_eq!(
            (first.kind, first.epoch, first.seq, first.actor.as_str()),
            (EntryKind::Snapshot, 3, 7, "counter-1")
        );
        assert_eq!(first.body.as_slice(), b"state");
        assert_eq!(entries[1].1.kind, EntryKind::Forget);
    }

    #[test]
    fn a_damaged_record_in_the_middle_is_skipped_to_the_next_whole_one() {
        let mut bytes = record("a", 1, b"first");
        let second = bytes.len();
        bytes.extend_from_slice(&record("b", 1, b"second, damaged below"));
        let third = bytes.len();
        bytes.extend_from_slice(&record("c", 1, b"third"));
        bytes[second + 30] ^= 0x10;
        let (entries, end) = scan(&bytes);
        assert_eq!((entries.len(), end), (1, second));
        assert_eq!(resync(&bytes, end), Some(third));
        let (rest, _) = scan(&bytes[third..]);
        assert_eq!(rest[0].1.actor, "c");
        // A torn tail has nothing whole after it.
        assert_eq!(resync(&bytes[..third + 20], end), None);
    }

    #[test]
    fn padding_ends_on_a_page_and_is_a_record() {
        for offset in [0u64, 100, 4000, 4090, 4096] {
            let mut out = record("a", 1, b"x");
            let added = pad_to_page(&mut out, offset, 4096);
            assert_eq!((offset + out.len() as u64) % 4096, 0, "offset {offset}");
            assert!(added == 0 || added >= 31);
            let (entries, end) = scan(&out);
            assert_eq!(end, out.len());
            assert_eq!(entries.len(), if added == 0 { 1 } else { 2 });
        }
    }

    #[test]
    fn a_torn_tail_is_never_read() {
        let mut bytes = record("a", 1, b"first");
        let whole = bytes.len();
        bytes.extend_from_slice(&record("a", 2, b"second")[..20]);
        let (entries, end) = scan(&bytes);
        assert_eq!((entries.len(), end), (1, whole));
        // A flipped bit in a whole record ends the scan before it.
        let mut bytes = record("a", 1, b"first");
        bytes.extend_from_slice(&record("a", 2, b"second"));
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let (entries, end) = scan(&bytes);
        assert_eq!((entries.len(), end), (1, whole));
        // Zeros (a preallocated or half-written page) are no record.
        assert!(scan(&[0u8; 64]).0.is_empty());
    }
}
