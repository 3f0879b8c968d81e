//! Patches: a journal record that holds only the bytes in which an
//! actor's newest entry differs from its previous one.
//!
//! An entry is a whole snapshot file (every page changed since the
//! actor's newest snapshot), but a request usually changes a few bytes in
//! each of those pages: a counter's request rewrites the same six or seven
//! pages (stack, allocator, buffers) with a few words different each time.
//! When the new entry has the previous one's length (the same pages, so
//! the same layout), the record is a patch of the differing 64-byte blocks
//! instead; replay applies it to the previous entry of the actor.
//!
//! ```text
//! length u32 LE   the length of both entries
//! crc32c u32 LE   CRC32C of the entry it applies to (a patch never lands
//!                 on another entry of the same length)
//! then, per run of differing blocks:
//!   offset u32 LE, count u32 LE, count bytes
//! ```

/// Bytes compared and copied as one unit.
const BLOCK: usize = 64;

/// The patch turning `old` into `new`, or `None` when they differ in
/// length or the patch would hold more than half of `new`.
#[must_use]
pub fn diff(old: &[u8], new: &[u8]) -> Option<Vec<u8>> {
    if old.len() != new.len() {
        return None;
    }
    let len = u32::try_from(new.len()).ok()?;
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(old).to_le_bytes());
    let mut at = 0;
    while at < new.len() {
        let end = (at + BLOCK).min(new.len());
        if old[at..end] == new[at..end] {
            at = end;
            continue;
        }
        // A run of differing blocks (a single equal block between two
        // differing ones is kept in the run: 8 bytes of framing saved).
        let start = at;
        let mut stop = end;
        while stop < new.len() {
            let next = (stop + BLOCK).min(new.len());
            let after = (next + BLOCK).min(new.len());
            if old[stop..next] != new[stop..next]
                || (after > next && old[next..after] != new[next..after])
            {
                stop = next;
            } else {
                break;
            }
        }
        out.extend_from_slice(&u32::try_from(start).ok()?.to_le_bytes());
        out.extend_from_slice(&u32::try_from(stop - start).ok()?.to_le_bytes());
        out.extend_from_slice(&new[start..stop]);
        if out.len() * 2 > new.len() {
            return None;
        }
        at = stop;
    }
    Some(out)
}

fn u32_at(bytes: &[u8], at: usize) -> Option<usize> {
    let word: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
    usize::try_from(u32::from_le_bytes(word)).ok()
}

/// `old` with `patch` applied, or `None` when the patch is not one of
/// `old` (another length, a run past the end, a truncated patch).
#[must_use]
pub fn apply(old: &[u8], patch: &[u8]) -> Option<Vec<u8>> {
    if u32_at(patch, 0)? != old.len() {
        return None;
    }
    let crc = u32::from_le_bytes(patch.get(4..8)?.try_into().ok()?);
    if crc32c::crc32c(old) != crc {
        return None;
    }
    let mut new = old.to_vec();
    let mut at = 8;
    while at < patch.len() {
        let (offset, count) = (u32_at(patch, at)?, u32_at(patch, at + 4)?);
        let bytes = patch.get(at + 8..at + 8 + count)?;
        new.get_mut(offset..offset + count)?.copy_from_slice(bytes);
        at += 8 + count;
    }
    Some(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_turns_the_old_entry_into_the_new_one() {
        let old: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let mut new = old.clone();
        for at in [0, 63, 64, 5000, 5001, 5200, 19_999] {
            new[at] ^= 0x5a;
        }
        let patch = diff(&old, &new).expect("a small patch");
        assert!(patch.len() < 1000, "{} bytes", patch.len());
        assert_eq!(apply(&old, &patch).expect("applies"), new);
        // Nothing changed: an empty patch.
        assert_eq!(
            apply(&old, &diff(&old, &old).expect("patch")).expect("applies"),
            old
        );
        // Another length, or mostly changed: no patch.
        assert!(diff(&old, &new[1..]).is_none());
        let flipped: Vec<u8> = old.iter().map(|b| !b).collect();
        assert!(diff(&old, &flipped).is_none());
        // A patch of another entry does not apply, even of the same length.
        assert!(apply(&old[1..], &patch).is_none());
        let mut other = old.clone();
        other[7] ^= 1;
        assert!(apply(&other, &patch).is_none());
        assert!(apply(&old, &patch[..patch.len() - 1]).is_none());
    }
}
