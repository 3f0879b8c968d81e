//! Group commit of the directory's actor writes: the inserts, placements
//! and deletes that callers submit while a transaction is in flight share
//! the next one, so concurrent creates and moves pay one etcd round trip
//! (one raft proposal, one WAL fsync) between them instead of one each.
//!
//! # One write, one verdict
//! Each write is a *nested* transaction of its own inside the batch's
//! (etcd 3.3 and later, `TxnOp::txn`): its own compare (the key absent for
//! an insert, the key's `mod_revision` unchanged for a placement, none for
//! a delete), its put or deletes when the compare holds, and a read of the
//! key when it does not. The outer transaction compares only the leader's
//! fence (if the directory has one): when the fence fails nothing of the
//! batch applies and every write is told so; otherwise each nested
//! transaction applies or not by its own compare, and a write whose
//! compare failed changes nothing and gets what the key holds now. So a
//! conflict fails only its own write, and an answer is the truth for each.
//!
//! # Limits
//! etcd refuses a transaction that writes one key twice, that has more
//! than `--max-txn-ops` (128) operations in one list, or a request over
//! `--max-request-bytes` (1.5 MiB). A batch holds each key at most once
//! (a second write of the same key waits for the next batch), at most
//! [`MAX_WRITES`] writes (at most 2 operations each, so even counted
//! together they stay within 128) and at most [`MAX_BYTES`] of keys and
//! values; the rest waits for the next transaction, which starts as soon
//! as this one is answered. An etcd run with smaller limits refuses a
//! batch as a whole before applying any of it ("too many operations in
//! txn request", "request is too large"): the batch goes back to the
//! front of the queue, and from then on batches hold half as many writes
//! and bytes, down to one write (which, refused alone, gets the error).
//!
//! A transaction whose answer was lost in transit may have applied: each
//! write is answered with the error and its caller decides (an insert
//! retries and recognises its own value; a placement re-reads; a delete
//! repeats).

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use etcd_client::{Compare, CompareOp, KeyValue, KvClient, Txn, TxnOp, TxnOpResponse};
use tokio::sync::{mpsc, oneshot};

/// Most writes in one transaction: at most 2 operations each.
pub(super) const MAX_WRITES: usize = 64;

/// Most bytes of keys and values in one transaction (etcd's request limit
/// is 1.5 MiB; this leaves room for the framing).
pub(super) const MAX_BYTES: usize = 1 << 20;

/// One write of an actor's record.
#[derive(Debug, Clone)]
pub(super) enum Write {
    /// Put `value` at `key` if the key does not exist.
    Insert { key: String, value: Vec<u8> },
    /// Put `value` at `key` if its `mod_revision` is still `seen`.
    Place {
        key: String,
        value: Vec<u8>,
        seen: i64,
    },
    /// Delete `key` and `also` (the actor's alarm).
    Delete { key: String, also: String },
}

impl Write {
    /// The key the write is about (one write per key per batch).
    fn key(&self) -> &str {
        match self {
            Write::Insert { key, .. } | Write::Place { key, .. } | Write::Delete { key, .. } => key,
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Write::Insert { key, value } | Write::Place { key, value, .. } => {
                key.len() * 2 + value.len()
            }
            Write::Delete { key, also } => key.len() * 2 + also.len(),
        }
    }

    /// Its nested transaction (module docs).
    fn txn(&self) -> Txn {
        match self {
            Write::Insert { key, value } => Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key.clone(), value.clone(), None)])
                .or_else([TxnOp::get(key.clone(), None)]),
            Write::Place { key, value, seen } => Txn::new()
                .when([Compare::mod_revision(key.clone(), CompareOp::Equal, *seen)])
                .and_then([TxnOp::put(key.clone(), value.clone(), None)])
                .or_else([TxnOp::get(key.clone(), None)]),
            Write::Delete { key, also } => Txn::new().and_then([
                TxnOp::delete(also.clone(), None),
                TxnOp::delete(key.clone(), None),
            ]),
        }
    }
}

/// What became of one write whose batch reached etcd.
#[derive(Debug, Clone)]
pub(super) enum Outcome {
    /// Applied at etcd `revision`; for a delete, whether the key existed.
    Applied { revision: i64, deleted: bool },
    /// Its own compare failed: nothing of it applied; the key holds this
    /// now (`None`: absent).
    Refused(Option<KeyValue>),
    /// The leader's fence failed: nothing of the batch applied.
    Unfenced,
}

/// A write's outcome, or the error of its transaction.
pub(super) type Answer = Result<Outcome, etcd_client::Error>;

/// A write waiting for its transaction, and where its answer goes.
pub(super) struct Pending {
    pub(super) write: Write,
    pub(super) answer: oneshot::Sender<Answer>,
}

/// The queue of writes waiting for their transaction, and the task that
/// commits them (on the etcd connection's runtime); the task ends when the
/// last [`Batcher`] clone is dropped.
#[derive(Clone)]
pub(super) struct Batcher {
    queue: mpsc::UnboundedSender<Pending>,
    /// Writes submitted and not answered yet.
    unanswered: Arc<AtomicUsize>,
}

impl Batcher {
    /// Starts the committing task on `etcd`'s runtime, its transactions
    /// fenced by `fence` (a compare on the leader key) if given.
    pub(super) fn start(etcd: &super::Etcd, fence: Option<Compare>) -> Batcher {
        let (queue, rx) = mpsc::unbounded_channel();
        let kv = etcd.client().kv_client();
        etcd.spawn(commit_loop(kv, fence, rx));
        Batcher {
            queue,
            unanswered: Arc::default(),
        }
    }

    /// Writes submitted and not answered yet (tests wait for a queue).
    #[cfg(test)]
    pub(super) fn unanswered(&self) -> usize {
        self.unanswered.load(Ordering::SeqCst)
    }

    /// Submits `write` for the next transaction; its outcome.
    ///
    /// # Errors
    /// The transaction's error (it may or may not have applied, see the
    /// module docs).
    pub(super) async fn submit(&self, write: Write) -> Answer {
        let (answer, rx) = oneshot::channel();
        self.unanswered.fetch_add(1, Ordering::SeqCst);
        let answered = match self.queue.send(Pending { write, answer }) {
            Ok(()) => rx.await.unwrap_or_else(|_| Err(stopped())),
            Err(_) => Err(stopped()),
        };
        self.unanswered.fetch_sub(1, Ordering::SeqCst);
        answered
    }
}

fn stopped() -> etcd_client::Error {
    etcd_client::Error::InvalidArgs("the directory's write queue stopped".into())
}

/// How much one transaction may hold: [`MAX_WRITES`] and [`MAX_BYTES`],
/// halved each time etcd refuses a batch as too big (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Limits {
    pub(super) writes: usize,
    pub(super) bytes: usize,
}

impl Limits {
    /// etcd's defaults.
    pub(super) const DEFAULT: Self = Self {
        writes: MAX_WRITES,
        bytes: MAX_BYTES,
    };

    /// Half of what `batch` held, at least one write.
    fn halved(self, batch: &[Pending]) -> Self {
        let bytes: usize = batch.iter().map(|p| p.write.bytes()).sum();
        Self {
            writes: (batch.len() / 2).max(1),
            bytes: (bytes / 2).max(1),
        }
    }
}

/// Whether etcd refused a transaction for its size before applying any of
/// it (its `--max-txn-ops` or `--max-request-bytes`).
fn too_big(e: &etcd_client::Error) -> bool {
    let etcd_client::Error::GRpcStatus(status) = e else {
        return false;
    };
    let message = status.message();
    message.contains("too many operations in txn request")
        || message.contains("request is too large")
        || (status.code() == tonic::Code::ResourceExhausted && message.contains("larger than max"))
}

/// Takes every write queued, commits as many as one transaction holds
/// (module docs), answers them, and goes round with the rest.
async fn commit_loop(
    kv: KvClient,
    fence: Option<Compare>,
    mut rx: mpsc::UnboundedReceiver<Pending>,
) {
    let mut waiting: VecDeque<Pending> = VecDeque::new();
    let mut limits = Limits::DEFAULT;
    loop {
        if waiting.is_empty() {
            match rx.recv().await {
                Some(first) => waiting.push_back(first),
                None => return,
            }
        }
        while let Ok(more) = rx.try_recv() {
            waiting.push_back(more);
        }
        let batch = take_batch(&mut waiting, limits);
        if batch.is_empty() {
            continue;
        }
        let answers = match commit(kv.clone(), fence.clone(), &batch).await {
            Err(e) if too_big(&e) && batch.len() > 1 => {
                // Refused whole, nothing applied: smaller batches.
                limits = limits.halved(&batch);
                tracing::warn!(
                    writes = limits.writes,
                    bytes = limits.bytes,
                    "etcd refused a batch of {} writes as too big ({e}); batches are smaller from now on",
                    batch.len()
                );
                for pending in batch.into_iter().rev() {
                    waiting.push_front(pending);
                }
                continue;
            }
            Err(e) => batch.iter().map(|_| Err(clone_error(&e))).collect(),
            Ok(answers) => answers,
        };
        for (pending, answer) in batch.into_iter().zip(answers) {
            let _ = pending.answer.send(answer);
        }
    }
}

/// The next batch out of `waiting`, in order: each key once, within
/// `limits`; writes skipped keep their places.
pub(super) fn take_batch(waiting: &mut VecDeque<Pending>, limits: Limits) -> Vec<Pending> {
    let mut batch = Vec::new();
    let mut keys: HashSet<String> = HashSet::new();
    let mut bytes = 0;
    let mut kept = VecDeque::new();
    while let Some(p) = waiting.pop_front() {
        let size = p.write.bytes();
        let fits =
            batch.len() < limits.writes && (batch.is_empty() || bytes + size <= limits.bytes);
        if fits && !keys.contains(p.write.key()) {
            keys.insert(p.write.key().to_owned());
            bytes += size;
            batch.push(p);
        } else {
            kept.push_back(p);
        }
        if batch.len() == limits.writes {
            break;
        }
    }
    kept.append(waiting);
    *waiting = kept;
    batch
}

/// One transaction of `batch`'s nested transactions; an answer per write.
///
/// # Errors
/// The transaction's (it may or may not have applied, unless [`too_big`]).
async fn commit(
    mut kv: KvClient,
    fence: Option<Compare>,
    batch: &[Pending],
) -> Result<Vec<Answer>, etcd_client::Error> {
    let txn = Txn::new()
        .when(fence.into_iter().collect::<Vec<_>>())
        .and_then(
            batch
                .iter()
                .map(|p| TxnOp::txn(p.write.txn()))
                .collect::<Vec<_>>(),
        );
    let resp = kv.txn(txn).await?;
    if !resp.succeeded() {
        return Ok(batch.iter().map(|_| Ok(Outcome::Unfenced)).collect());
    }
    let revision = resp
        .header()
        .map_or(0, etcd_client::ResponseHeader::revision);
    let ops = resp.op_responses();
    Ok(batch
        .iter()
        .enumerate()
        .map(|(i, _)| match ops.get(i) {
            Some(TxnOpResponse::Txn(nested)) if nested.succeeded() => Ok(Outcome::Applied {
                revision,
                // A delete's second operation is the actor's key.
                deleted: matches!(
                    nested.op_responses().get(1),
                    Some(TxnOpResponse::Delete(d)) if d.deleted() > 0
                ),
            }),
            Some(TxnOpResponse::Txn(nested)) => Ok(Outcome::Refused(
                nested.op_responses().iter().find_map(|op| match op {
                    TxnOpResponse::Get(got) => got.kvs().first().cloned(),
                    _ => None,
                }),
            )),
            _ => Err(etcd_client::Error::InvalidArgs(format!(
                "etcd answered a batch of {} writes without the answer of write {i}",
                batch.len()
            ))),
        })
        .collect())
}

/// `e` once per write of a batch (the client's error is not `Clone`):
/// the same kind, so [`super::retryable`] decides alike.
fn clone_error(e: &etcd_client::Error) -> etcd_client::Error {
    match e {
        etcd_client::Error::GRpcStatus(status) => etcd_client::Error::GRpcStatus(
            tonic::Status::new(status.code(), status.message().to_owned()),
        ),
        etcd_client::Error::IoError(io) => {
            etcd_client::Error::IoError(std::io::Error::new(io.kind(), io.to_string()))
        }
        // A transport error cannot be built again: an I/O error of the
        // same text is as retryable.
        etcd_client::Error::TransportError(t) => etcd_client::Error::IoError(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            t.to_string(),
        )),
        other => etcd_client::Error::InvalidArgs(other.to_string()),
    }
}
