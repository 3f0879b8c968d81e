//! The optional *host-state section* of a snapshot file: bytes the host
//! keeps with the actor's memory (the worker's idempotency table), opaque
//! to this crate, stored after the last page run and before the CRC32C
//! trailer:
//!
//! ```text
//! ... memory pages and patches (the last ends at E, or the data start)
//! E          section bytes                            N bytes
//! E + N      N                                        u32 LE
//! E + N + 4  magic "SHST" (0x5453_4853)               u32 LE
//! L - 4      CRC32C of bytes [0, L - 4)               u32 LE
//! ```
//!
//! The format version does not change: the section is covered by the
//! file's length and checksum, and a reader that does not know it (every
//! build before it) checks only that the page runs lie inside the file,
//! which they do, so it restores the memory and ignores the section. A
//! file without one (every file of an actor whose host state is empty) is
//! byte for byte what it was before the section existed. A section is
//! found only where it ends exactly at the trailer and starts exactly
//! where the pages end, so page bytes never read as one.

use super::format::{Header, PAGE_SIZE, PREFIX_LEN, TRAILER_LEN, data_start, recorded_header_len};

/// Marks the end of a host-state section.
const MAGIC: u32 = 0x5453_4853;
/// Bytes after the section: its length and the magic.
const FOOTER: usize = 8;

/// Where the pages of a file with `header` end: the end of its last page
/// run or patch, or its data start when it stores none.
fn pages_end(bytes: &[u8], header: &Header) -> usize {
    let start = data_start(recorded_header_len(bytes));
    header
        .memories
        .iter()
        .flat_map(|m| &m.runs)
        .map(|run| (run.file_offset + run.pages * PAGE_SIZE as u64) as usize)
        .chain(
            header
                .memories
                .iter()
                .flat_map(|m| &m.patches)
                .map(|patch| (patch.file_offset + patch.len()) as usize),
        )
        .fold(start, usize::max)
}

/// Appends `section` to the snapshot file `bytes` (laid out with no
/// section, as a capture writes it; `header` is its header): its length
/// and checksum are written again. An empty section adds nothing.
///
/// # Panics
/// If `bytes` is shorter than a snapshot's prefix and trailer, or the
/// section is 4 GiB or more.
pub fn append_host_state(bytes: &mut Vec<u8>, header: &Header, section: &[u8]) {
    if section.is_empty() {
        return;
    }
    assert!(bytes.len() >= PREFIX_LEN + TRAILER_LEN, "not a snapshot");
    debug_assert_eq!(pages_end(bytes, header), bytes.len() - TRAILER_LEN);
    let len = u32::try_from(section.len()).expect("a host-state section is below 4 GiB");
    bytes.truncate(bytes.len() - TRAILER_LEN);
    bytes.extend_from_slice(section);
    bytes.extend_from_slice(&len.to_le_bytes());
    bytes.extend_from_slice(&MAGIC.to_le_bytes());
    let file_len = (bytes.len() + TRAILER_LEN) as u64;
    bytes[16..24].copy_from_slice(&file_len.to_le_bytes());
    let crc = crc32c::crc32c(bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
}

/// The host-state section of the snapshot file `bytes` whose header is
/// `header` (a verified file: its length and checksum were checked), or
/// empty when it has none.
#[must_use]
pub fn host_state<'a>(bytes: &'a [u8], header: &Header) -> &'a [u8] {
    if bytes.len() < PREFIX_LEN + TRAILER_LEN + FOOTER {
        return &[];
    }
    let end = bytes.len() - TRAILER_LEN;
    let start = pages_end(bytes, header);
    let word =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    if start + FOOTER > end || word(end - 4) != MAGIC {
        return &[];
    }
    let len = word(end - FOOTER) as usize;
    if start.checked_add(len).and_then(|e| e.checked_add(FOOTER)) != Some(end) {
        return &[];
    }
    &bytes[start..start + len]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::capture::empty_snapshot;
    use crate::snapshot::verify_header;

    #[test]
    fn a_section_reads_back_and_the_file_stays_a_valid_snapshot() {
        let plain = empty_snapshot(7);
        let header = verify_header(&plain).expect("valid");
        assert!(host_state(&plain, &header).is_empty());
        let mut with = plain.clone();
        append_host_state(&mut with, &header, b"the table");
        let again = verify_header(&with).expect("still valid: length and checksum");
        assert_eq!(again, header, "the header is unchanged");
        assert_eq!(host_state(&with, &again), b"the table");
        // An empty section changes nothing.
        let mut same = plain.clone();
        append_host_state(&mut same, &header, b"");
        assert_eq!(same, plain);
    }

    #[test]
    fn bytes_that_only_look_like_a_footer_are_no_section() {
        let plain = empty_snapshot(7);
        let header = verify_header(&plain).expect("valid");
        let mut with = plain.clone();
        append_host_state(&mut with, &header, b"abc");
        // A length that does not reach back to the pages' end.
        let end = with.len() - TRAILER_LEN;
        with[end - FOOTER..end - 4].copy_from_slice(&2u32.to_le_bytes());
        assert!(host_state(&with, &header).is_empty());
    }
}
