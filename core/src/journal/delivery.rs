//! The logical journal's entry: what one delivery received and what the
//! host answered it, not the pages it dirtied (the body of a
//! [`EntryKind::Delivery`](super::EntryKind::Delivery) record, whose
//! header's `seq` names the snapshot the delivery followed).
//!
//! ```text
//! index   u64 LE  1 for the first delivery after that snapshot, then
//!                 one more for each (continuous per actor and snapshot)
//! input   u8      1 request, 2 alarm, 3 socket event
//! flags   u8      bit 0: the actor's on_resume hook ran before it;
//!                 bits 1-7: how many times its on_pause hook ran since the
//!                 previous delivery (a pause whose snapshot failed); their
//!                 host values come first on the tape, on_resume's first
//! answer  u64 LE  digest of the delivery's answer (checked on replay)
//! worker  u8      length, then that many bytes: the worker it ran on (a
//!                 request names it to the guest)
//! length  u32 LE  bytes of the input, then the input (encoded as the
//!                 guest receives it)
//! tape            the rest: the host values the delivery read
//!                 ([`crate::tape`])
//! ```

use sha2::{Digest as _, Sha256};

/// Bytes before the worker's name.
const FIXED: usize = 8 + 1 + 1 + 8;

/// One delivery as the journal keeps it (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRecord {
    /// Its place after the snapshot it followed (1, 2, …).
    pub index: u64,
    /// What kind of delivery it was (the worker's code).
    pub input_kind: u8,
    /// The actor's `on_resume` hook ran just before it.
    pub resumed: bool,
    /// Its `on_pause` hook ran this many times since the previous
    /// delivery (pauses whose snapshot failed; at most 127).
    pub paused: u8,
    /// The digest of its answer ([`answer_digest`]).
    pub answer: u64,
    /// The worker it ran on (at most 255 bytes: worker names are short).
    pub worker: String,
    /// The delivery's input, encoded.
    pub input: Vec<u8>,
    /// The host values it read ([`crate::tape`]).
    pub tape: Vec<u8>,
}

impl DeliveryRecord {
    /// The record's bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let worker = &self.worker.as_bytes()[..self.worker.len().min(255)];
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&self.index.to_le_bytes());
        out.push(self.input_kind);
        out.push(u8::from(self.resumed) | (self.paused.min(127) << 1));
        out.extend_from_slice(&self.answer.to_le_bytes());
        out.push(worker.len() as u8);
        out.extend_from_slice(worker);
        let len = u32::try_from(self.input.len()).expect("a delivery is below 4 GiB");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&self.input);
        out.extend_from_slice(&self.tape);
        out
    }

    /// The length of [`DeliveryRecord::encode`]'s bytes.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        FIXED + 1 + self.worker.len().min(255) + 4 + self.input.len() + self.tape.len()
    }

    /// The index of the record in `bytes`, without decoding the rest.
    #[must_use]
    pub fn peek_index(bytes: &[u8]) -> Option<u64> {
        Some(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?))
    }

    /// Reads a record's bytes; `None` when they are not one.
    #[must_use]
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
        };
        let index = u64_at(0)?;
        let input_kind = *bytes.get(8)?;
        let flags = *bytes.get(9)?;
        let answer = u64_at(10)?;
        let worker_len = usize::from(*bytes.get(FIXED)?);
        let worker = bytes.get(FIXED + 1..FIXED + 1 + worker_len)?;
        let at = FIXED + 1 + worker_len;
        let len = u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?);
        let end = (at + 4).checked_add(usize::try_from(len).ok()?)?;
        Some(Self {
            index,
            input_kind,
            resumed: flags & 1 == 1,
            paused: flags >> 1,
            answer,
            worker: String::from_utf8(worker.to_vec()).ok()?,
            input: bytes.get(at + 4..end)?.to_vec(),
            tape: bytes.get(end..)?.to_vec(),
        })
    }
}

/// The digest of a delivery's answer, encoded (the first 8 bytes of its
/// SHA-256).
#[must_use]
pub fn answer_digest(answer: &[u8]) -> u64 {
    let hash = Sha256::digest(answer);
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash[..8]);
    u64::from_le_bytes(first)
}

/// The SHA-256 of a request's method, path and body, each length-prefixed:
/// what an idempotency key is checked against (a retry with the same key
/// must be the same request).
#[must_use]
pub fn request_digest(method: &str, uri: &str, body: &[u8]) -> [u8; 32] {
    let mut hash = Sha256::new();
    for part in [method.as_bytes(), uri.as_bytes(), body] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    hash.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back() {
        let record = DeliveryRecord {
            index: 7,
            input_kind: 1,
            resumed: true,
            paused: 2,
            answer: answer_digest(b"200 ok"),
            worker: "w0".into(),
            input: b"POST /".to_vec(),
            tape: vec![1, 2, 3],
        };
        let bytes = record.encode();
        assert_eq!(bytes.len(), FIXED + 3 + 4 + 6 + 3);
        assert_eq!(bytes.len(), record.encoded_len());
        assert_eq!(DeliveryRecord::decode(&bytes), Some(record));
        assert_eq!(DeliveryRecord::decode(&bytes[..FIXED + 5]), None);
        assert_ne!(answer_digest(b"a"), answer_digest(b"b"));
    }
}
