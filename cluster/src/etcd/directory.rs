//! [`EtcdDirectory`]: the [`Directory`] in etcd, one small JSON value per
//! template (`<prefix>/templates/<name>`), per actor
//! (`<prefix>/actors/<name>`) and per actor's alarm
//! (`<prefix>/alarms/<name>`, `{"at_unix_ms":N}`). Inserts are put-if-absent transactions,
//! placements compare-and-set on the key's `mod_revision`, listings go page
//! by page. Actor inserts, placements and deletes are group-committed
//! ([`super::batch`]), each with its own compare and answer. The trait is
//! sync; every call runs through [`Etcd::run_blocking`].
//!
//! # Fencing the leader's writes
//! The leader replica writes through [`Etcd::leader_directory`]: every
//! write is a transaction that also compares `<prefix>/leader`'s lease with
//! the leader's own, so etcd itself refuses a write from a replica whose
//! leadership ended (a leader frozen past its lease, then woken with a
//! move or a placement half done) once another replica may lead. Such a
//! write fails with a 503 and changes nothing.
//!
//! # Read-your-writes
//! Every write of an actor's record notes etcd's revision of it
//! ([`Directory::actors_revision`], the newest one): the leader's answer to
//! a write a follower forwarded carries it, and the follower answers once
//! its watch of the actors has applied that revision.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use etcd_client::{
    Compare, CompareOp, DeleteOptions, KeyValue, KvClient, Txn, TxnOp, TxnOpResponse, TxnResponse,
};

use super::batch::{Batcher, Outcome, Write};
use super::values::{ActorValue, AlarmValue, TemplateValue, decode, failed};
use super::{Etcd, get_one, retry};
use stasis_contract::directory::{ActorRead, ActorRow, Directory, TemplateRow};
use stasis_contract::error::ApiError;
use stasis_contract::labels::{LabelPatch, Labels};

mod rewrite;

use rewrite::Step;

/// How many times a placement re-reads and retries after losing a race to
/// another writer of the same actor or an etcd error (each retry re-checks
/// the epoch).
const PLACE_ATTEMPTS: usize = 8;

/// Pause before re-reading after a placement transaction failed in transit.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// The directory in etcd. Build it with [`Etcd::directory`] (reads, and
/// tests) or [`Etcd::leader_directory`] (a leader's fenced writes).
pub struct EtcdDirectory {
    pub(super) etcd: Etcd,
    /// The leader's lease its writes are fenced by (see the module doc).
    fence: Option<Fence>,
    /// The etcd revision of the newest actor record written through this
    /// directory (0: none yet); see the module doc.
    actors_revision: AtomicI64,
    /// Group commit of actor inserts, placements and deletes (fenced
    /// like every write here).
    batch: Batcher,
}

/// A leader's fence: `key` (`<prefix>/leader`) must be under `lease`,
/// which `valid` tells this process may still believe in.
#[derive(Clone)]
struct Fence {
    key: String,
    lease: i64,
    valid: super::lease::LeaseCheck,
}

impl Fence {
    fn compare(&self) -> Compare {
        Compare::lease(self.key.clone(), CompareOp::Equal, self.lease)
    }

    /// After a write's transaction failed its compares: a 503 if the
    /// fence is what failed (the leader key is gone or under another
    /// lease), else `Ok`.
    async fn check(&self, kv: KvClient) -> Result<(), ApiError> {
        let found = get_one(&kv, &self.key).await?;
        if found.is_some_and(|kv| kv.lease() == self.lease) {
            return Ok(());
        }
        Err(ApiError::unavailable(
            "this replica no longer leads the cluster (its leader lease ended); nothing was written; retry",
        ))
    }
}

/// The answer to a write whose batch failed the leader's fence
/// ([`Outcome::Unfenced`]): nothing of it applied.
async fn unfenced(fence: Option<&Fence>, kv: KvClient, what: &str) -> ApiError {
    if let Some(fence) = fence
        && let Err(e) = fence.check(kv).await
    {
        return e;
    }
    ApiError::unavailable(format!(
        "{what}: the leader's fence failed meanwhile; nothing was written; retry"
    ))
}

impl Etcd {
    /// The [`Directory`] on this connection, its writes unfenced.
    pub fn directory(&self) -> Arc<EtcdDirectory> {
        Arc::new(EtcdDirectory {
            etcd: self.clone(),
            fence: None,
            actors_revision: AtomicI64::new(0),
            batch: Batcher::start(self, None),
        })
    }

    /// The [`Directory`] of the leader holding `leadership`: each write
    /// applies only while `<prefix>/leader` is under its lease, and fails
    /// with a 503 otherwise (see the module doc).
    pub fn leader_directory(&self, leadership: &super::Leadership) -> Arc<EtcdDirectory> {
        let fence = Fence {
            key: self.leader_key(),
            lease: leadership.lease_id(),
            valid: leadership.check(),
        };
        Arc::new(EtcdDirectory {
            etcd: self.clone(),
            batch: Batcher::start(self, Some(fence.compare())),
            fence: Some(fence),
            actors_revision: AtomicI64::new(0),
        })
    }
}

/// Puts `value` at `key` only if the key does not exist (and `fence`
/// holds). A key already holding exactly `value` counts as success: a
/// retried write of ours whose first answer was lost (or an identical one,
/// which is harmless). Returns etcd's revision of the value: of the put,
/// or of the identical value found.
///
/// # Errors
/// 409 naming `what` if the key holds something else; 503 if `fence` no
/// longer holds; 500 if etcd fails.
async fn put_if_absent(
    kv: KvClient,
    fence: Option<Fence>,
    key: String,
    value: Vec<u8>,
    what: String,
) -> Result<i64, ApiError> {
    let mut compares = vec![Compare::create_revision(key.clone(), CompareOp::Equal, 0)];
    compares.extend(fence.as_ref().map(Fence::compare));
    let txn = Txn::new()
        .when(compares)
        .and_then([TxnOp::put(key.clone(), value.clone(), None)])
        .or_else([TxnOp::get(key.clone(), None)]);
    let resp = retry(|| {
        let (mut kv, txn) = (kv.clone(), txn.clone());
        async move { kv.txn(txn).await }
    })
    .await
    .map_err(failed)?;
    if resp.succeeded() {
        return Ok(revision_of(&resp));
    }
    let same = resp.op_responses().iter().find_map(|op| match op {
        TxnOpResponse::Get(got) => got
            .kvs()
            .first()
            .filter(|kv| kv.value() == value)
            .map(KeyValue::mod_revision),
        _ => None,
    });
    if let Some(revision) = same {
        return Ok(revision);
    }
    if let Some(fence) = &fence {
        fence.check(kv).await?;
    }
    Err(ApiError::conflict(format!("{what} is taken")))
}

/// The revision etcd answered `resp` at (that of its writes, for a
/// transaction that wrote).
fn revision_of(resp: &TxnResponse) -> i64 {
    resp.header()
        .map_or(0, etcd_client::ResponseHeader::revision)
}

impl EtcdDirectory {
    /// The compare-and-set of `place_actor` (and `place_actor_as`): see
    /// [`EtcdDirectory::rewrite`]; a placement finds the actor gone or at `epoch` or later
    /// with a 409, and its own placement (when a write's answer was lost)
    /// as success.
    fn place(
        &self,
        name: &str,
        worker: &str,
        epoch: u64,
        template: Option<String>,
    ) -> Result<(), ApiError> {
        let (actor, worker) = (name.to_owned(), worker.to_owned());
        let gone = move || {
            ApiError::conflict(format!(
                "actor {actor} was deleted or placed at epoch {epoch} or later meanwhile"
            ))
        };
        self.rewrite(
            name,
            format!("placing actor {name} at epoch {epoch}"),
            move |found, maybe_applied| {
                let Some(v) = found else {
                    return Err(gone());
                };
                if maybe_applied && v.epoch == epoch && v.worker == worker {
                    return Ok(Step::Already);
                }
                if v.epoch >= epoch {
                    return Err(gone());
                }
                v.worker.clone_from(&worker);
                v.epoch = epoch;
                if let Some(template) = &template {
                    v.template.clone_from(template);
                }
                Ok(Step::Write)
            },
        )
        .map(|_| ())
    }

    /// Actor writes submitted to the group commit and not answered yet.
    #[cfg(test)]
    pub(crate) fn unanswered_writes(&self) -> usize {
        self.batch.unanswered()
    }

    /// Notes that an actor's record was written at etcd's `revision`.
    fn wrote_actor(&self, revision: i64) {
        self.actors_revision.fetch_max(revision, Ordering::SeqCst);
    }

    fn kv(&self) -> KvClient {
        self.etcd.client().kv_client()
    }

    fn template_key(&self, name: &str) -> String {
        self.etcd.key(&format!("templates/{name}"))
    }

    fn actor_key(&self, name: &str) -> String {
        self.etcd.key(&format!("actors/{name}"))
    }

    fn delete(&self, key: String) -> Result<bool, ApiError> {
        let kv = self.kv();
        let Some(fence) = self.fence.clone() else {
            return self.etcd.run_blocking("a delete", async move {
                let resp = retry(|| {
                    let (mut kv, key) = (kv.clone(), key.clone());
                    async move { kv.delete(key, None::<DeleteOptions>).await }
                })
                .await
                .map_err(failed)?;
                Ok(resp.deleted() > 0)
            });
        };
        self.etcd.run_blocking("a delete", async move {
            let txn = Txn::new()
                .when([fence.compare()])
                .and_then([TxnOp::delete(key.clone(), None)]);
            let resp = retry(|| {
                let (mut kv, txn) = (kv.clone(), txn.clone());
                async move { kv.txn(txn).await }
            })
            .await
            .map_err(failed)?;
            if !resp.succeeded() {
                fence.check(kv).await?;
                return Err(failed(format!(
                    "deleting {key}: the transaction failed although this replica leads"
                )));
            }
            Ok(resp.op_responses().iter().any(|op| match op {
                TxnOpResponse::Delete(deleted) => deleted.deleted() > 0,
                _ => false,
            }))
        })
    }

    fn alarm_key(&self, name: &str) -> String {
        self.etcd.key(&format!("alarms/{name}"))
    }

    /// Runs `ops` in one transaction when `compares` (and the leader's
    /// fence) hold: `Some` answer if it applied, `None` if a compare of
    /// `compares` failed.
    ///
    /// # Errors
    /// 503 if the fence failed; 500 if etcd did.
    pub(super) fn fenced_txn(
        &self,
        what: &'static str,
        mut compares: Vec<Compare>,
        ops: Vec<TxnOp>,
    ) -> Result<Option<TxnResponse>, ApiError> {
        let kv = self.kv();
        let fence = self.fence.clone();
        compares.extend(fence.as_ref().map(Fence::compare));
        self.etcd.run_blocking(what, async move {
            let txn = Txn::new().when(compares).and_then(ops);
            let resp = retry(|| {
                let (mut kv, txn) = (kv.clone(), txn.clone());
                async move { kv.txn(txn).await }
            })
            .await
            .map_err(failed)?;
            if resp.succeeded() {
                return Ok(Some(resp));
            }
            if let Some(fence) = &fence {
                fence.check(kv).await?;
            }
            Ok(None)
        })
    }
}

impl Directory for EtcdDirectory {
    /// A leader's directory: while its lease holds by this process's clock
    /// (see the lease module); a follower's reads only and may act.
    fn may_act(&self) -> bool {
        self.fence.as_ref().is_none_or(|f| f.valid.is_valid())
    }

    fn insert_template(&self, row: &TemplateRow) -> Result<(), ApiError> {
        let value = serde_json::to_vec(&TemplateValue {
            digest: row.digest.clone(),
            bytes: row.bytes,
            env: row.env.clone(),
            durability: row.durability,
        })
        .map_err(failed)?;
        let fut = put_if_absent(
            self.kv(),
            self.fence.clone(),
            self.template_key(&row.name),
            value,
            format!("template name {}", row.name),
        );
        self.etcd.run_blocking("a template insert", fut).map(|_| ())
    }

    fn template(&self, name: &str) -> Result<Option<TemplateRow>, ApiError> {
        let kv = self.kv();
        let key = self.template_key(name);
        let name = name.to_string();
        self.etcd.run_blocking("a template read", async move {
            let Some(found) = get_one(&kv, &key).await? else {
                return Ok(None);
            };
            let v: TemplateValue = decode(found.key(), found.value())?;
            Ok(Some(TemplateRow {
                name,
                digest: v.digest,
                bytes: v.bytes,
                env: v.env,
                durability: v.durability,
            }))
        })
    }

    fn templates(&self) -> Result<Vec<TemplateRow>, ApiError> {
        let etcd = self.etcd.clone();
        let dir = self.etcd.key("templates/");
        self.etcd.run_blocking("the template listing", async move {
            let (kvs, _) = retry(|| etcd.list(&dir)).await.map_err(failed)?;
            kvs.iter()
                .map(|kv| {
                    let v: TemplateValue = decode(kv.key(), kv.value())?;
                    Ok(TemplateRow {
                        name: String::from_utf8_lossy(&kv.key()[dir.len()..]).into_owned(),
                        digest: v.digest,
                        bytes: v.bytes,
                        env: v.env,
                        durability: v.durability,
                    })
                })
                .collect()
        })
    }

    fn delete_template(&self, name: &str) -> Result<bool, ApiError> {
        self.delete(self.template_key(name))
    }

    fn insert_actor(&self, row: &ActorRow) -> Result<(), ApiError> {
        let value = serde_json::to_vec(&ActorValue {
            template: row.template.clone(),
            worker: row.worker.clone(),
            epoch: row.epoch,
            created_ms: row.created_at_unix_ms,
            labels: row.labels.clone(),
        })
        .map_err(failed)?;
        let (kv, fence, batch) = (self.kv(), self.fence.clone(), self.batch.clone());
        let write = Write::Insert {
            key: self.actor_key(&row.name),
            value: value.clone(),
        };
        let name = row.name.clone();
        let revision = self.etcd.run_blocking("an actor insert", async move {
            // A retried insert whose first answer was lost finds its own
            // value: success (as in `put_if_absent`).
            match retry(|| batch.submit(write.clone()))
                .await
                .map_err(failed)?
            {
                Outcome::Applied { revision, .. } => Ok(revision),
                Outcome::Refused(Some(found)) if found.value() == value => Ok(found.mod_revision()),
                Outcome::Refused(_) => {
                    Err(ApiError::conflict(format!("actor name {name} is taken")))
                }
                Outcome::Unfenced => Err(unfenced(fence.as_ref(), kv, "an actor insert").await),
            }
        })?;
        self.wrote_actor(revision);
        Ok(())
    }

    fn place_actor(&self, name: &str, worker: &str, epoch: u64) -> Result<(), ApiError> {
        self.place(name, worker, epoch, None)
    }

    fn place_actor_as(
        &self,
        name: &str,
        worker: &str,
        epoch: u64,
        template: &str,
    ) -> Result<(), ApiError> {
        self.place(name, worker, epoch, Some(template.to_owned()))
    }

    fn patch_labels(&self, name: &str, patch: &LabelPatch) -> Result<Labels, ApiError> {
        let (actor, patch) = (name.to_owned(), patch.clone());
        let (_, value) = self.rewrite(
            name,
            format!("changing the labels of actor {name}"),
            move |found, _| {
                let Some(v) = found else {
                    return Err(ApiError::not_found(format!("no actor named {actor:?}")));
                };
                let labels = patch.apply(&v.labels)?;
                if labels == v.labels {
                    return Ok(Step::Already);
                }
                v.labels = labels;
                Ok(Step::Write)
            },
        )?;
        Ok(value.labels)
    }

    fn actors(&self) -> Result<Vec<ActorRow>, ApiError> {
        let etcd = self.etcd.clone();
        let dir = self.etcd.key("actors/");
        self.etcd.run_blocking("the actor listing", async move {
            let (kvs, _) = retry(|| etcd.list(&dir)).await.map_err(failed)?;
            kvs.iter()
                .map(|kv| {
                    let v: ActorValue = decode(kv.key(), kv.value())?;
                    Ok(v.row(&String::from_utf8_lossy(&kv.key()[dir.len()..])))
                })
                .collect()
        })
    }

    /// The record and the actor's alarm, in one write of the batch.
    fn actor(&self, name: &str, at_least: i64) -> Result<ActorRead, ApiError> {
        let (etcd, name) = (self.etcd.clone(), name.to_owned());
        self.etcd.run_blocking("an actor read", async move {
            etcd.read_actor(&name, at_least).await
        })
    }

    fn delete_actor(&self, name: &str) -> Result<(), ApiError> {
        let (kv, fence, batch) = (self.kv(), self.fence.clone(), self.batch.clone());
        let write = Write::Delete {
            key: self.actor_key(name),
            also: self.alarm_key(name),
        };
        let removed = self.etcd.run_blocking("an actor delete", async move {
            match retry(|| batch.submit(write.clone()))
                .await
                .map_err(failed)?
            {
                // Only a delete that removed the actor's record is an
                // event of the actors' watch (one that found nothing wrote
                // no revision).
                Outcome::Applied { revision, deleted } => Ok(deleted.then_some(revision)),
                Outcome::Refused(_) => Err(failed("a delete without compare was refused")),
                Outcome::Unfenced => Err(unfenced(fence.as_ref(), kv, "an actor delete").await),
            }
        })?;
        if let Some(revision) = removed {
            self.wrote_actor(revision);
        }
        Ok(())
    }

    fn set_alarm(&self, name: &str, at_unix_ms: u64) -> Result<(), ApiError> {
        let op = TxnOp::put(self.alarm_key(name), AlarmValue::bytes(at_unix_ms)?, None);
        self.fenced_txn("an alarm write", Vec::new(), vec![op])?
            .map(|_| ())
            .ok_or_else(|| {
                failed(format!(
                    "setting actor {name}'s alarm: the transaction failed"
                ))
            })
    }

    fn clear_alarm(&self, name: &str, only_at: Option<u64>) -> Result<bool, ApiError> {
        let key = self.alarm_key(name);
        let compares = match only_at {
            Some(at) => vec![Compare::value(
                key.clone(),
                CompareOp::Equal,
                AlarmValue::bytes(at)?,
            )],
            None => Vec::new(),
        };
        let op = TxnOp::delete(key, None);
        Ok(self
            .fenced_txn("an alarm delete", compares, vec![op])?
            .is_some_and(|resp| {
                resp.op_responses().iter().any(|op| match op {
                    TxnOpResponse::Delete(deleted) => deleted.deleted() > 0,
                    _ => false,
                })
            }))
    }

    fn alarm(&self, name: &str) -> Result<Option<u64>, ApiError> {
        let kv = self.kv();
        let key = self.alarm_key(name);
        self.etcd.run_blocking("an alarm read", async move {
            let Some(found) = get_one(&kv, &key).await? else {
                return Ok(None);
            };
            let v: AlarmValue = decode(found.key(), found.value())?;
            Ok(Some(v.at_unix_ms))
        })
    }

    fn actors_revision(&self) -> Option<i64> {
        Some(self.actors_revision.load(Ordering::SeqCst))
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn alarms(&self) -> Result<Vec<(String, u64)>, ApiError> {
        let etcd = self.etcd.clone();
        let dir = self.etcd.key("alarms/");
        self.etcd.run_blocking("the alarm listing", async move {
            let (kvs, _) = retry(|| etcd.list(&dir)).await.map_err(failed)?;
            kvs.iter()
                .map(|kv| {
                    let v: AlarmValue = decode(kv.key(), kv.value())?;
                    let name = String::from_utf8_lossy(&kv.key()[dir.len()..]).into_owned();
                    Ok((name, v.at_unix_ms))
                })
                .collect()
        })
    }
}
