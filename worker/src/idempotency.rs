//! An actor's idempotency table (docs/api.md, "Idempotent retries"): per
//! `Idempotency-Key`, the digest of the request that first carried it
//! and its answer, so that a retry is answered without being applied
//! again.
//!
//! The table is host-side state of the actor, kept with its memory: it
//! is part of the parked actor ([`Kept`](crate::actor::Kept)), written
//! into every snapshot as the file's host-state section
//! ([`stasis_core::snapshot::host_state`]) — so it goes wherever the
//! snapshot goes (a pause, a move, a fork, the object store) and is
//! always the table of the state the snapshot holds — and read back by
//! every restore. The deliveries after a snapshot are in the logical
//! journal with their request (headers included): replaying them
//! re-derives their answers (checked against the digests recorded), and
//! the restore puts the keyed ones back in the table. So a key is
//! remembered exactly when its request's effect is in the actor's
//! state.
//!
//! Only an answer from the guest is remembered: a request refused or
//! rolled back by the host (503, 504, a trap's 500) was not applied and
//! leaves no key. Bounds ([`stasis_contract::idempotency`]): a key is
//! forgotten [`WINDOW`] after it was applied (a key re-derived by a
//! replay counts from the replay) or once [`MAX_KEYS`] newer ones are
//! remembered; an answer whose body is over [`MAX_KEPT_BODY`], or that is
//! among the oldest once the kept bodies pass [`MAX_KEPT_BYTES`], is kept
//! as its status and body length only: a retry then gets 409 saying the
//! request was applied, and it is not applied again.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use stasis_contract::error::ApiError;
use stasis_contract::idempotency::{
    MAX_KEPT_BODY, MAX_KEPT_BYTES, MAX_KEYS, REPLAYED_HEADER, WINDOW, key_of,
};
use stasis_core::journal::delivery::request_digest;
use stasis_host_api::{Request, Response};

#[cfg(test)]
mod tests;

/// The version of the encoded table ([`IdempotencyTable::encode`]).
const VERSION: u8 = 1;

/// What the table remembers of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Remembered {
    /// The digest of the request that first carried the key.
    request: [u8; 32],
    /// When it was applied (Unix ms).
    at_ms: u64,
    /// Its answer's status.
    status: u16,
    /// Its answer's body length.
    body_len: u64,
    /// Its whole answer, when kept.
    answer: Option<Arc<Response>>,
}

/// A request's key and digest, to remember with its answer once it was
/// applied.
#[derive(Debug, Clone)]
pub(crate) struct Keyed {
    key: String,
    request: [u8; 32],
}

impl Keyed {
    /// The key.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// The key and digest of `request`, when it carries a valid key.
    pub(crate) fn of(request: &Request) -> Option<Self> {
        let key = key_of(&request.headers).ok()??;
        Some(Self {
            key,
            request: request_digest(&request.method, &request.uri, &request.body),
        })
    }
}

/// What the table says of a delivery before it runs.
#[derive(Debug)]
pub(crate) enum Recall<A> {
    /// Run it; remember its answer under this key, if any.
    Run(Option<Keyed>),
    /// Do not run it: this is its answer (the first answer again, or why
    /// not).
    Answer(Result<A, ApiError>),
}

/// An actor's idempotency table (module docs).
#[derive(Debug, Default)]
pub(crate) struct IdempotencyTable {
    entries: HashMap<String, Remembered>,
    /// The keys, oldest applied first.
    order: VecDeque<String>,
    /// Bytes of the answers kept whole.
    kept_bytes: usize,
    /// The table changed since the actor's newest snapshot was written:
    /// a pause writes one even when the memory did not change.
    pub(crate) changed: bool,
}

/// Now, in Unix ms.
pub(crate) fn now_ms() -> u64 {
    stasis_contract::status::now_unix_ms().unwrap_or(0)
}

/// The bytes an answer kept whole counts for.
fn answer_bytes(answer: &Response) -> usize {
    answer.body.len()
        + answer
            .headers
            .iter()
            .map(|(name, value)| name.len() + value.len())
            .sum::<usize>()
}

impl IdempotencyTable {
    /// How many keys it remembers.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it remembers no key.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// What the table says of `request` to `actor` at `now_ms`: run it
    /// (remembering its key, if it has one), or answer it without running
    /// it — 400 for a key past the limits, the first answer for a retry,
    /// 422 for another request under a remembered key, 409 for a retry
    /// whose answer is not kept.
    pub(crate) fn recall(
        &mut self,
        actor: &str,
        request: &Request,
        now_ms: u64,
    ) -> Recall<Response> {
        let key = match key_of(&request.headers) {
            Ok(Some(key)) => key,
            Ok(None) => return Recall::Run(None),
            Err(why) => return Recall::Answer(Err(ApiError::bad_request(why))),
        };
        self.expire(now_ms);
        let digest = request_digest(&request.method, &request.uri, &request.body);
        let Some(first) = self.entries.get(&key) else {
            return Recall::Run(Some(Keyed {
                key,
                request: digest,
            }));
        };
        if first.request != digest {
            return Recall::Answer(Err(ApiError::unprocessable(format!(
                "Idempotency-Key {key:?} was first used with another request to actor {actor} \
                 (a key names one request: the same method, path and body); this one was not \
                 applied: use a new key for a new request"
            ))));
        }
        let Some(answer) = &first.answer else {
            return Recall::Answer(Err(ApiError::conflict(format!(
                "the request with Idempotency-Key {key:?} was applied already (it answered {} \
                 with a body of {} bytes), and was not applied again; its answer is not kept \
                 (a body over {MAX_KEPT_BODY} bytes, or among the oldest past {MAX_KEPT_BYTES} \
                 bytes of kept answers), so it cannot be given again",
                first.status, first.body_len
            ))));
        };
        let mut again = Response::clone(answer);
        again
            .headers
            .push((REPLAYED_HEADER.to_owned(), b"true".to_vec()));
        Recall::Answer(Ok(again))
    }

    /// Remembers `answer` as the answer of the request `keyed` names,
    /// applied at `now_ms`. A key remembered already keeps its first
    /// answer.
    pub(crate) fn remember(&mut self, keyed: Keyed, answer: &Response, now_ms: u64) {
        if self.entries.contains_key(&keyed.key) {
            return;
        }
        let kept = answer.body.len() <= MAX_KEPT_BODY;
        if kept {
            self.kept_bytes += answer_bytes(answer);
        }
        self.entries.insert(
            keyed.key.clone(),
            Remembered {
                request: keyed.request,
                at_ms: now_ms,
                status: answer.status,
                body_len: answer.body.len() as u64,
                answer: kept.then(|| Arc::new(strip(answer))),
            },
        );
        self.order.push_back(keyed.key);
        self.changed = true;
        self.bound();
    }

    /// Forgets `key`: its request was rolled back after all.
    pub(crate) fn forget(&mut self, key: &str) {
        if let Some(gone) = self.entries.remove(key) {
            self.order.retain(|k| k != key);
            if let Some(answer) = &gone.answer {
                self.kept_bytes -= answer_bytes(answer);
            }
            self.changed = true;
        }
    }

    /// Forgets the keys applied more than [`WINDOW`] before `now_ms`
    /// (oldest first: a key applied later is kept).
    pub(crate) fn expire(&mut self, now_ms: u64) {
        let window = u64::try_from(WINDOW.as_millis()).unwrap_or(u64::MAX);
        while let Some(oldest) = self.order.front() {
            let expired = self
                .entries
                .get(oldest)
                .is_none_or(|e| e.at_ms.saturating_add(window) < now_ms);
            if !expired {
                break;
            }
            let key = self.order.pop_front().unwrap_or_default();
            self.drop_entry(&key);
        }
    }

    /// Holds the table to [`MAX_KEYS`] keys and [`MAX_KEPT_BYTES`] of
    /// kept answers, dropping the oldest.
    fn bound(&mut self) {
        while self.order.len() > MAX_KEYS {
            let key = self.order.pop_front().unwrap_or_default();
            self.drop_entry(&key);
        }
        let mut at = 0;
        while self.kept_bytes > MAX_KEPT_BYTES && at < self.order.len() {
            if let Some(entry) = self.entries.get_mut(&self.order[at])
                && let Some(answer) = entry.answer.take()
            {
                self.kept_bytes -= answer_bytes(&answer);
            }
            at += 1;
        }
    }

    fn drop_entry(&mut self, key: &str) {
        if let Some(gone) = self.entries.remove(key) {
            if let Some(answer) = &gone.answer {
                self.kept_bytes -= answer_bytes(answer);
            }
            self.changed = true;
        }
    }

    /// The table after a restore: `section` (the restored snapshot's
    /// host-state section) with the keyed answers `replayed` re-derived
    /// from the journal after it, in order. A key the table held before
    /// keeps the time it was applied.
    pub(crate) fn restored(
        &mut self,
        section: &[u8],
        replayed: Vec<(Keyed, Response)>,
        now_ms: u64,
    ) {
        let mut table = match Self::decode(section) {
            Ok(table) => table,
            Err(why) => {
                tracing::warn!("the snapshot's idempotency table is not read: {why}");
                Self::default()
            }
        };
        let any = !replayed.is_empty();
        for (keyed, answer) in replayed {
            let at = self.entries.get(&keyed.key).map_or(now_ms, |e| e.at_ms);
            table.remember(keyed, &answer, at);
        }
        table.changed = any;
        *self = table;
    }

    /// The table's bytes, for a snapshot's host-state section; empty when
    /// it remembers no key.
    pub(crate) fn encode(&self) -> Vec<u8> {
        if self.entries.is_empty() {
            return Vec::new();
        }
        let mut out = vec![VERSION];
        out.extend_from_slice(&(self.order.len() as u32).to_le_bytes());
        for key in &self.order {
            let Some(entry) = self.entries.get(key) else {
                continue;
            };
            out.push(key.len() as u8);
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(&entry.request);
            out.extend_from_slice(&entry.at_ms.to_le_bytes());
            out.extend_from_slice(&entry.status.to_le_bytes());
            out.extend_from_slice(&entry.body_len.to_le_bytes());
            let answer = entry
                .answer
                .as_deref()
                .and_then(|a| stasis_host_api::encode_response(a).ok());
            match answer {
                Some(bytes) => {
                    out.push(1);
                    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                    out.extend_from_slice(&bytes);
                }
                None => out.push(0),
            }
        }
        out
    }

    /// Reads [`IdempotencyTable::encode`]'s bytes (empty: an empty table).
    ///
    /// # Errors
    /// Why the bytes are no table of this version.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut table = Self::default();
        if bytes.is_empty() {
            return Ok(table);
        }
        let mut r = Reader { bytes, at: 0 };
        let version = r.u8()?;
        if version != VERSION {
            return Err(format!("version {version}, this build reads {VERSION}"));
        }
        let count = u32::from_le_bytes(r.array()?);
        for _ in 0..count {
            let len = usize::from(r.u8()?);
            let key = String::from_utf8(r.take(len)?.to_vec()).map_err(|e| e.to_string())?;
            let request = r.array()?;
            let at_ms = u64::from_le_bytes(r.array()?);
            let status = u16::from_le_bytes(r.array()?);
            let body_len = u64::from_le_bytes(r.array()?);
            let answer = match r.u8()? {
                0 => None,
                _ => {
                    let len = u32::from_le_bytes(r.array()?) as usize;
                    let answer = stasis_host_api::decode_response(r.take(len)?)
                        .map_err(|e| format!("an answer: {e}"))?;
                    table.kept_bytes += answer_bytes(&answer);
                    Some(Arc::new(answer))
                }
            };
            let entry = Remembered {
                request,
                at_ms,
                status,
                body_len,
                answer,
            };
            if table.entries.insert(key.clone(), entry).is_none() {
                table.order.push_back(key);
            }
        }
        Ok(table)
    }
}

/// `answer` as kept: without the header that marks a retry's answer.
fn strip(answer: &Response) -> Response {
    let mut kept = answer.clone();
    kept.headers
        .retain(|(name, _)| !name.eq_ignore_ascii_case(REPLAYED_HEADER));
    kept
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| format!("cut short at byte {}", self.at))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
}
