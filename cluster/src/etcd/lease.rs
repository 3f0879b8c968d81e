//! Leases that this process keeps alive, and what it may believe about
//! them: worker registrations ([`Etcd::register_worker`], [`WorkerLease`])
//! and, through the same keeper, the leader's lease
//! ([`Leadership`](super::Leadership)).
//!
//! # Timing: the process gives up its lease before etcd does
//! A lease of TTL `T` (whole seconds, as etcd granted it) is kept alive by
//! a background task that sends a keep-alive every `T/3` on one gRPC
//! stream and pairs each answer with the request it answers. The process
//! believes in its lease until its *deadline*:
//!
//! ```text
//! deadline = (monotonic instant the last answered keep-alive was SENT)
//!          + (TTL that answer granted) − margin,   margin = max(T/10, 100 ms)
//! ```
//!
//! etcd restarts a lease's TTL when its leader *receives* the keep-alive
//! (directly or forwarded by a follower), which is after this process sent
//! it; so etcd's expiry of the
//! lease is at the earliest `receive + T ≥ send + T`, and the process's
//! deadline comes at least `margin` earlier. The margin covers the drift
//! between the two machines' monotonic clock rates over one TTL (far
//! below 10 % on any working clock). etcd only ever postpones an expiry
//! (a new etcd leader extends every lease by an election timeout), never
//! advances it, so the argument holds across etcd leader changes. An
//! unanswered keep-alive teaches nothing and moves nothing: if no answer
//! arrives (etcd down, partitioned, or frozen), the deadline passes,
//! [`WorkerLease::is_valid`] turns false and stays false, and
//! [`WorkerLease::expired`] resolves — while etcd still holds the key. A
//! lease etcd reports as gone (TTL ≤ 0 in an answer, or "not found") is
//! expired at once. The check is against the monotonic clock of this
//! process ([`tokio::time::Instant`]), never wall time.
//!
//! So a worker that stops serving when `expired()` resolves (and checks
//! `is_valid()` before acting, since the keeper task notices the deadline
//! only when the runtime schedules it) has stopped before its registration
//! disappears from etcd, and before any control plane watching
//! `<prefix>/workers/` can see it gone and place its actors elsewhere.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use etcd_client::{
    Compare, CompareOp, LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn, TxnOp, TxnOpResponse,
};

use tokio::sync::watch;
use tokio::time::Instant;

use super::{Etcd, retry};

/// Retry pause after a failed keep-alive round (the stream is reopened).
const RETRY_PAUSE: Duration = Duration::from_millis(200);

pub use stasis_contract::directory::WorkerRecord;

/// The safety margin for a lease of `ttl`: a tenth, at least 100 ms.
pub(crate) fn margin(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(100))
}

/// A TTL in whole seconds for etcd, rounded up, at least 1.
pub(crate) fn ttl_seconds(ttl: Duration) -> i64 {
    let s = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(s.max(1)).unwrap_or(i64::MAX)
}

/// What this process may believe about one of its leases.
struct Belief {
    deadline: Mutex<Instant>,
    expired: watch::Sender<bool>,
}

impl Belief {
    fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_valid(&self) -> bool {
        !*self.expired.borrow() && Instant::now() < self.deadline()
    }

    fn expire(&self) {
        self.expired.send_replace(true);
    }
}

/// [`KeptLease::is_valid`], detached from the lease's handle (a leader's
/// directory asks it before acting).
#[derive(Clone)]
pub(crate) struct LeaseCheck(Arc<Belief>);

impl LeaseCheck {
    /// Whether the lease is still valid by this process's clock.
    pub(crate) fn is_valid(&self) -> bool {
        self.0.is_valid()
    }
}

/// A lease granted by etcd and kept alive by a task on the background
/// runtime until it expires, is revoked, or this value is dropped (then
/// etcd expires it after its TTL).
pub(crate) struct KeptLease {
    id: i64,
    ttl: Duration,
    belief: Arc<Belief>,
    keeper: tokio::task::JoinHandle<()>,
    etcd: Etcd,
}

impl KeptLease {
    /// Grants a lease of `ttl` (rounded up to whole seconds) and starts
    /// keeping it alive.
    ///
    /// # Errors
    /// If etcd does not grant it.
    pub(crate) async fn grant(etcd: &Etcd, ttl: Duration) -> anyhow::Result<KeptLease> {
        let sent = Instant::now();
        let granted = retry(|| {
            let mut client = etcd.client();
            async move { client.lease_grant(ttl_seconds(ttl), None).await }
        })
        .await
        .with_context(|| format!("granting a lease from etcd at {}", etcd.endpoints()))?;
        let granted_ttl = Duration::from_secs(u64::try_from(granted.ttl()).unwrap_or(1).max(1));
        let (expired, _) = watch::channel(false);
        let belief = Arc::new(Belief {
            deadline: Mutex::new(sent + granted_ttl - margin(granted_ttl)),
            expired,
        });
        let keeper = etcd.spawn(keep_alive(
            etcd.clone(),
            granted.id(),
            granted_ttl,
            belief.clone(),
        ));
        Ok(KeptLease {
            id: granted.id(),
            ttl: granted_ttl,
            belief,
            keeper,
            etcd: etcd.clone(),
        })
    }

    pub(crate) fn id(&self) -> i64 {
        self.id
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.belief.deadline()
    }

    pub(crate) fn is_valid(&self) -> bool {
        self.belief.is_valid()
    }

    /// A check of this lease's validity that can outlive this handle.
    pub(crate) fn check(&self) -> LeaseCheck {
        LeaseCheck(self.belief.clone())
    }

    pub(crate) async fn expired(&self) {
        let mut rx = self.belief.expired.subscribe();
        // The sender lives in `self.belief`, so this only ends on `true`.
        let _ = rx.wait_for(|expired| *expired).await;
    }

    /// Stops the keep-alives, stops believing, and revokes the lease (etcd
    /// deletes its keys at once).
    pub(crate) async fn revoke(&self) -> anyhow::Result<()> {
        self.keeper.abort();
        self.belief.expire();
        retry(|| {
            let mut client = self.etcd.client();
            async move { client.lease_revoke(self.id).await }
        })
        .await
        .with_context(|| {
            format!(
                "revoking lease {:x} in etcd at {}",
                self.id,
                self.etcd.endpoints()
            )
        })?;
        Ok(())
    }
}

impl Drop for KeptLease {
    fn drop(&mut self) {
        self.keeper.abort();
        self.belief.expire();
    }
}

/// What one keep-alive round learned.
enum Round {
    /// Answered with this TTL (seconds).
    Alive(i64),
    /// etcd says the lease is gone.
    Gone,
    /// No answer (connection or stream failure): reopen and retry.
    Failed(String),
}

async fn one_round(
    etcd: &Etcd,
    id: i64,
    granted_ttl: Duration,
    stream: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
) -> Round {
    let Some((keeper, answers)) = stream else {
        // Opening the stream sends the first keep-alive and waits for its
        // answer (etcd-client keeps its TTL to itself: it is the granted one).
        return match etcd.client().lease_client().keep_alive(id).await {
            Ok(opened) => {
                *stream = Some(opened);
                Round::Alive(i64::try_from(granted_ttl.as_secs()).unwrap_or(1))
            }
            Err(etcd_client::Error::LeaseKeepAliveError(e)) if e.contains("not found") => {
                Round::Gone
            }
            Err(e) => Round::Failed(e.to_string()),
        };
    };
    if let Err(e) = keeper.keep_alive().await {
        return Round::Failed(e.to_string());
    }
    match answers.message().await {
        Ok(Some(answer)) if answer.ttl() <= 0 => Round::Gone,
        Ok(Some(answer)) => Round::Alive(answer.ttl()),
        Ok(None) => Round::Failed("the keep-alive stream closed".into()),
        Err(e) => Round::Failed(e.to_string()),
    }
}

/// The keeper task: a keep-alive every TTL/3, moving the deadline on each
/// answer; expires the belief when the deadline passes or etcd says the
/// lease is gone, then ends.
async fn keep_alive(etcd: Etcd, id: i64, granted_ttl: Duration, belief: Arc<Belief>) {
    let interval = granted_ttl / 3;
    let mut stream = None;
    loop {
        let sent = Instant::now();
        let deadline = belief.deadline();
        let round =
            tokio::time::timeout_at(deadline, one_round(&etcd, id, granted_ttl, &mut stream));
        let next = match round.await {
            Err(_) => break,
            Ok(Round::Gone) => {
                tracing::warn!(lease = id, "etcd reports the lease gone");
                break;
            }
            Ok(Round::Alive(ttl_s)) => {
                let ttl = Duration::from_secs(u64::try_from(ttl_s).unwrap_or(0));
                let new_deadline = (sent + ttl).checked_sub(margin(ttl)).unwrap_or(sent);
                *belief.deadline.lock().unwrap_or_else(|p| p.into_inner()) = new_deadline;
                sent + interval
            }
            Ok(Round::Failed(e)) => {
                tracing::warn!(lease = id, "keep-alive failed, retrying: {e}");
                stream = None;
                Instant::now() + RETRY_PAUSE.min(interval)
            }
        };
        let deadline = belief.deadline();
        tokio::time::sleep_until(next.min(deadline)).await;
        if Instant::now() >= deadline {
            break;
        }
    }
    belief.expire();
}

/// A worker's registration at `<prefix>/workers/<name>`, alive while its
/// lease is (see the module doc for what [`WorkerLease::is_valid`] means).
/// Dropping it stops the keep-alives; etcd then removes the registration
/// after the TTL. Use [`WorkerLease::revoke`] for a clean exit.
#[must_use = "dropping the WorkerLease stops its keep-alives"]
pub struct WorkerLease {
    lease: KeptLease,
}

impl WorkerLease {
    /// The etcd lease ID.
    pub fn id(&self) -> i64 {
        self.lease.id()
    }

    /// The TTL etcd granted (whole seconds).
    pub fn ttl(&self) -> Duration {
        self.lease.ttl()
    }

    /// Until when this process may believe in the lease (monotonic): the
    /// send instant of the last answered keep-alive plus its TTL, minus
    /// the margin (max(TTL/10, 100 ms)).
    pub fn deadline(&self) -> Instant {
        self.lease.deadline()
    }

    /// True while now < [`deadline`](Self::deadline) and the lease was not
    /// found gone; once false, false for good.
    pub fn is_valid(&self) -> bool {
        self.lease.is_valid()
    }

    /// Resolves once [`is_valid`](Self::is_valid) turned false (the worker
    /// must stop serving then).
    pub async fn expired(&self) {
        self.lease.expired().await;
    }

    /// Revokes the lease: etcd deletes the registration at once.
    ///
    /// # Errors
    /// If etcd does not answer (the lease then expires after its TTL).
    pub async fn revoke(self) -> anyhow::Result<()> {
        self.lease.revoke().await
    }
}

/// Why [`Etcd::register_worker`] did not register: another lease holds
/// the name (a live worker of the same name, or an earlier run of this one
/// whose lease has not expired yet).
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "worker name {name} is registered in etcd by the worker at {} (lease {:x}, TTL {granted_ttl:?})",
    record.address,
    record.lease
)]
pub struct NameTaken {
    /// The worker name.
    pub name: String,
    /// The registration that holds it.
    pub record: WorkerRecord,
    /// The TTL its lease was granted (zero if the lease is already gone):
    /// a registration still there this long after it was first seen is
    /// being renewed, by a live process.
    pub granted_ttl: Duration,
}

impl Etcd {
    /// Registers worker `name` at `address` (`host:port`): grants a lease
    /// of `ttl` (whole seconds, rounded up; etcd may raise it to its
    /// minimum), creates `<prefix>/workers/<name>` = [`WorkerRecord`] under
    /// it if no other lease holds the name, and keeps it alive every
    /// TTL/3 in the background.
    ///
    /// # Errors
    /// [`NameTaken`] (downcast the error) if another lease holds the name;
    /// otherwise if etcd does not grant the lease or take the record.
    pub async fn register_worker(
        &self,
        name: &str,
        address: &str,
        ttl: Duration,
    ) -> anyhow::Result<WorkerLease> {
        let lease = KeptLease::grant(self, ttl).await?;
        let record = WorkerRecord {
            address: address.to_string(),
            lease: lease.id(),
        };
        let value = serde_json::to_vec(&record).context("encoding the worker record")?;
        let key = self.key(&format!("workers/{name}"));
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                value,
                Some(PutOptions::new().with_lease(lease.id())),
            )])
            .or_else([TxnOp::get(key.clone(), None)]);
        let resp = retry(|| {
            let (mut client, txn) = (self.client(), txn.clone());
            async move { client.txn(txn).await }
        })
        .await
        .with_context(|| format!("registering {key} in etcd at {}", self.endpoints()))?;
        let holder = resp.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(got) => got
                .kvs()
                .first()
                .and_then(|kv| serde_json::from_slice::<WorkerRecord>(kv.value()).ok()),
            _ => None,
        });
        if resp.succeeded() {
            return Ok(WorkerLease { lease });
        }
        match holder {
            // Ours: an earlier attempt was applied but its answer lost.
            Some(holder) if holder.lease == lease.id() => Ok(WorkerLease { lease }),
            Some(holder) => {
                if let Err(e) = lease.revoke().await {
                    tracing::debug!("revoking an unused lease: {e:#}");
                }
                let granted_ttl = self.granted_ttl(holder.lease).await;
                Err(anyhow::Error::new(NameTaken {
                    name: name.to_owned(),
                    record: holder,
                    granted_ttl,
                }))
            }
            None => anyhow::bail!("{key} in etcd holds no valid worker record; delete it"),
        }
    }

    /// The TTL lease `id` was granted; zero if it is gone or etcd does not
    /// answer.
    async fn granted_ttl(&self, id: i64) -> Duration {
        let answer = retry(|| {
            let mut client = self.client();
            async move { client.lease_time_to_live(id, None).await }
        })
        .await;
        match answer {
            Ok(info) if info.ttl() > 0 => {
                Duration::from_secs(u64::try_from(info.granted_ttl()).unwrap_or(0))
            }
            _ => Duration::ZERO,
        }
    }
}
