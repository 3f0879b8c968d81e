//! Control-plane leader election on one key, `<prefix>/leader`, holding the
//! leader's [`LeaderRecord`] under the leader's lease. A candidate creates
//! the key in a transaction that only succeeds if it does not exist
//! (`create_revision == 0`); otherwise it watches the key until it is
//! deleted (the leader resigned, or etcd expired its lease) and tries
//! again. A leader believes it leads exactly while it believes in its lease
//! (the deadline rule of [`lease`](super::lease)), so it stops acting as
//! leader before etcd deletes the key and another candidate can win.

use std::time::Duration;

use anyhow::Context as _;
use etcd_client::{
    Compare, CompareOp, EventType, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::lease::KeptLease;
use super::watch::Range;
use super::{Etcd, back_off, retry};

/// Who leads the control plane and where to reach it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderRecord {
    /// The node's name.
    pub name: String,
    /// Its ingress address (`host:port`).
    pub ingress: String,
    /// Its admin API address (`host:port`).
    pub admin: String,
}

/// This process's leadership, held while its lease is.
#[must_use = "dropping the Leadership stops its keep-alives; the leader key expires after the TTL"]
pub struct Leadership {
    lease: KeptLease,
}

impl Leadership {
    /// True while this process may act as leader: its lease's deadline
    /// (see [`lease`](super::lease)) has not passed; once false, false for
    /// good.
    pub fn is_leader(&self) -> bool {
        self.lease.is_valid()
    }

    /// Resolves once [`is_leader`](Self::is_leader) turned false (stop
    /// acting as leader then).
    pub async fn lost(&self) {
        self.lease.expired().await;
    }

    /// [`is_leader`](Self::is_leader), detached from this handle.
    pub(crate) fn check(&self) -> super::lease::LeaseCheck {
        self.lease.check()
    }

    /// The etcd lease the leader key is attached to.
    pub fn lease_id(&self) -> i64 {
        self.lease.id()
    }

    /// Steps down: revokes the lease, so etcd deletes the leader key at
    /// once and another candidate can win.
    ///
    /// # Errors
    /// If etcd does not answer (the key then expires after the TTL).
    pub async fn resign(self) -> anyhow::Result<()> {
        self.lease.revoke().await
    }
}

impl Etcd {
    /// `<prefix>/leader`.
    pub(super) fn leader_key(&self) -> String {
        self.key("leader")
    }

    /// Campaigns for leadership with a lease of `ttl` (whole seconds,
    /// rounded up) and resolves once this candidate leads. Cancel by
    /// dropping the future (the lease then expires after the TTL).
    ///
    /// # Errors
    /// If etcd does not grant the lease or answer the transaction, or the
    /// candidate's own lease expired while it waited (etcd unreachable).
    pub async fn campaign(&self, me: &LeaderRecord, ttl: Duration) -> anyhow::Result<Leadership> {
        let lease = KeptLease::grant(self, ttl).await?;
        let key = self.leader_key();
        let value = serde_json::to_vec(me).context("encoding the leader record")?;
        let mut backoff = Duration::from_millis(100);
        loop {
            anyhow::ensure!(
                lease.is_valid(),
                "campaigning for {key}: our lease expired (etcd at {} unreachable?)",
                self.endpoints()
            );
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.clone(),
                    value.clone(),
                    Some(PutOptions::new().with_lease(lease.id())),
                )])
                .or_else([TxnOp::get(key.clone(), None)]);
            let resp = retry(|| {
                let (mut client, txn) = (self.client(), txn.clone());
                async move { client.txn(txn).await }
            })
            .await
            .with_context(|| format!("campaigning for {key} in etcd at {}", self.endpoints()))?;
            // Ours already: an earlier attempt was applied but its answer lost.
            let ours = resp.op_responses().iter().any(|op| match op {
                TxnOpResponse::Get(got) => {
                    got.kvs().first().is_some_and(|kv| kv.lease() == lease.id())
                }
                _ => false,
            });
            if resp.succeeded() || ours {
                return Ok(Leadership { lease });
            }
            let revision = resp.header().map_or(0, |h| h.revision());
            tokio::select! {
                deleted = self.until_deleted(&key, revision) => {
                    if let Err(e) = deleted {
                        tracing::warn!("watching {key} failed, campaigning again: {e}");
                        back_off(&mut backoff).await;
                    }
                }
                () = lease.expired() => {}
            }
        }
    }

    /// Waits until `key` is deleted after `revision`.
    async fn until_deleted(&self, key: &str, revision: i64) -> anyhow::Result<()> {
        let options = WatchOptions::new().with_start_revision(revision + 1);
        let mut stream = self.client().watch(key, Some(options)).await?;
        loop {
            let Some(resp) = stream.message().await? else {
                anyhow::bail!("the watch stream ended");
            };
            if resp.canceled() || resp.compact_revision() > 0 {
                anyhow::bail!("the watch was cancelled: {}", resp.cancel_reason());
            }
            if resp
                .events()
                .iter()
                .any(|e| e.event_type() == EventType::Delete)
            {
                return Ok(());
            }
        }
    }

    /// The current leader, if any.
    ///
    /// # Errors
    /// If etcd fails, or the record does not decode.
    pub async fn leader(&self) -> anyhow::Result<Option<LeaderRecord>> {
        let key = self.leader_key();
        let resp = retry(|| {
            let (mut client, key) = (self.client(), key.clone());
            async move { client.get(key, None).await }
        })
        .await
        .with_context(|| format!("reading {key} from etcd at {}", self.endpoints()))?;
        resp.kvs()
            .first()
            .map(|kv| {
                serde_json::from_slice(kv.value()).with_context(|| format!("{key} does not decode"))
            })
            .transpose()
    }

    /// The current leader, kept current by a background task (`None`
    /// until the first read, and while no one leads). The task ends when
    /// every receiver is dropped.
    pub fn watch_leader(&self) -> watch::Receiver<Option<LeaderRecord>> {
        self.follow(
            Range::Key(self.leader_key()),
            |map: &std::collections::BTreeMap<String, super::watch::Versioned<LeaderRecord>>, _| {
                map.get("").map(|v| v.value.clone())
            },
            None,
        )
    }
}
