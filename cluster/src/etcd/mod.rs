//! Cluster mode's shared state in etcd (v3 API, through the `etcd-client`
//! crate): the durable [`EtcdDirectory`], the cluster-wide settings, worker
//! registrations under leases, and the control-plane leader election.
//!
//! # Key layout
//! Every key lives under the prefix `P` of the `--directory
//! etcd://HOST:PORT[,...][/P]` URL (default `/stasis`):
//!
//! | key | value (JSON) | written by |
//! | --- | --- | --- |
//! | `P/templates/<name>` | `{digest, bytes, env}` | [`EtcdDirectory`] |
//! | `P/actors/<name>` | `{template, worker, epoch}` | [`EtcdDirectory`] |
//! | `P/rollouts/<template>` | the template's rollout record | [`EtcdDirectory`] |
//! | `P/rollout-outcomes/<template>/<actor>` | an actor's outcome in it | [`EtcdDirectory`] |
//! | `P/settings` | the cluster's settings (first writer wins) | [`Etcd::settle_settings`] |
//! | `P/workers/<name>` | [`WorkerRecord`] `{address, lease}`, under the worker's lease | [`Etcd::register_worker`] |
//! | `P/leader` | [`LeaderRecord`] `{name, ingress, admin}`, under the leader's lease | [`Etcd::campaign`] |
//!
//! # Threads
//! An [`Etcd`] owns a small tokio runtime (2 threads, `stasis-etcd`) on
//! which the gRPC connections, the lease keep-alives and the watches run,
//! so they keep their timing whatever the caller's runtime is busy with.
//! The sync [`Directory`](stasis_contract::directory::Directory) calls run
//! their request on that runtime and wait for the answer on a channel with
//! a timeout (see [`Etcd::run_blocking`]); that is safe from async tasks of
//! a multi-thread runtime, from `spawn_blocking` threads and from plain
//! threads. Lease timing is argued in [`lease`].

mod batch;
mod changes;
mod directory;
mod election;
pub mod lease;
mod namespace_settings;
mod options;
mod rollouts;
mod settings;
mod tokens;
mod values;
mod watch;

#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod harness;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod watch_tests;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use etcd_client::{Client, GetOptions, KeyValue};

use stasis_contract::error::ApiError;
use values::failed;

pub use directory::EtcdDirectory;
pub use election::{LeaderRecord, Leadership};
pub use lease::{NameTaken, WorkerLease, WorkerRecord};
pub use options::{DEFAULT_PREFIX, EtcdOptions};

/// Keys per range request when listing a directory (etcd answers at most
/// this many; the listing continues after the last key).
const PAGE_KEYS: i64 = 1000;

/// How long a sync directory call waits for etcd before answering 500:
/// the request timeout plus room for one retry.
const BLOCKING_TIMEOUT: Duration = Duration::from_secs(12);

/// A connection to the etcd cluster, cheap to clone (all clones share the
/// connection and the background runtime, which stops when the last clone
/// is dropped).
#[derive(Clone)]
pub struct Etcd {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    prefix: String,
    endpoints: String,
    page_keys: AtomicI64,
    /// [`BLOCKING_TIMEOUT`] in ms (tests shorten it).
    blocking_timeout_ms: AtomicU64,
    background: Background,
}

/// The runtime the connection lives on. Dropping it never blocks (a
/// blocking drop would panic inside an async context).
struct Background(Option<tokio::runtime::Runtime>);

impl Background {
    fn handle(&self) -> &tokio::runtime::Handle {
        match &self.0 {
            Some(rt) => rt.handle(),
            None => unreachable!("the runtime is only taken on drop"),
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl Etcd {
    /// Connects to the cluster in `opts` and checks that it answers a
    /// linearizable read (so a quorum is up) within 6 s.
    ///
    /// # Errors
    /// Naming the endpoints: a PEM file that cannot be read, a malformed
    /// endpoint, refused credentials, or no quorum answering in time.
    pub async fn connect(opts: &EtcdOptions) -> anyhow::Result<Etcd> {
        let endpoints = opts.endpoints_text();
        let background = Background(Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("stasis-etcd")
                .enable_all()
                .build()
                .context("starting the etcd client's runtime")?,
        ));
        let options = opts.connect_options()?;
        let members = opts.endpoints.clone();
        let probe_key = format!("{}/", opts.prefix);
        // The client spawns its connection tasks where it is created: on
        // the background runtime.
        let connecting = background.handle().spawn(async move {
            let client = Client::connect(&members, Some(options)).await?;
            // A member that is down fails the requests sent its way until
            // the balancer has seen it refuse: retried, they reach another.
            // The probe reads one key (a count of the prefix would walk
            // every actor's key).
            retry(|| {
                let (mut client, key) = (client.clone(), probe_key.clone());
                async move { client.get(key, None).await }
            })
            .await?;
            Ok::<_, etcd_client::Error>(client)
        });
        let within = options::CONNECT_TIMEOUT + Duration::from_secs(1);
        let client = tokio::time::timeout(within, connecting)
            .await
            .map_err(|_| anyhow::anyhow!("etcd at {endpoints} did not answer within {within:?}"))?
            .context("the etcd connection task failed")?
            .with_context(|| {
                let hint = if opts.ca.is_none() {
                    " (is etcd up there? if it serves TLS, give --etcd-ca, and --etcd-cert with --etcd-key if it asks for client certificates)"
                } else {
                    ""
                };
                format!("connecting to etcd at {endpoints}{hint}")
            })?;
        Ok(Etcd {
            inner: Arc::new(Inner {
                client,
                prefix: opts.prefix.clone(),
                endpoints,
                page_keys: AtomicI64::new(PAGE_KEYS),
                blocking_timeout_ms: AtomicU64::new(
                    u64::try_from(BLOCKING_TIMEOUT.as_millis()).unwrap_or(u64::MAX),
                ),
                background,
            }),
        })
    }

    /// The key prefix (starts with `/`, no trailing `/`).
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The endpoints, comma-separated, for messages.
    pub(crate) fn endpoints(&self) -> &str {
        &self.inner.endpoints
    }

    /// A client handle (cheap clone of the shared connection).
    pub(crate) fn client(&self) -> Client {
        self.inner.client.clone()
    }

    /// `<prefix>/<rest>`.
    pub(crate) fn key(&self, rest: &str) -> String {
        format!("{}/{rest}", self.inner.prefix)
    }

    /// Sets the listing page size (tests cross pages with few keys).
    #[cfg(test)]
    pub(crate) fn set_page_keys(&self, keys: i64) {
        self.inner.page_keys.store(keys.max(1), Ordering::Relaxed);
    }

    /// Sets how long sync directory calls wait (tests of the time-out).
    #[cfg(test)]
    pub(crate) fn set_blocking_timeout(&self, timeout: Duration) {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.inner.blocking_timeout_ms.store(ms, Ordering::Relaxed);
    }

    /// Spawns `fut` on the background runtime.
    pub(crate) fn spawn<F>(&self, fut: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.inner.background.handle().spawn(fut)
    }

    /// Runs `fut` on the background runtime and blocks the calling thread
    /// until it answers, at most [`BLOCKING_TIMEOUT`] (12 s): the bridge from the
    /// sync directory trait. It never enters a runtime on the calling
    /// thread (no `block_on`), so it cannot panic inside an async context;
    /// like any sync I/O it blocks that thread for the call.
    ///
    /// # Errors
    /// `fut`'s error, or a 500 naming `what` and the endpoints if etcd did
    /// not answer in time.
    pub(crate) fn run_blocking<T, F>(&self, what: &str, fut: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, ApiError>> + Send + 'static,
    {
        let limit = Duration::from_millis(self.inner.blocking_timeout_ms.load(Ordering::Relaxed));
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.spawn(async move {
            let answer = tokio::time::timeout(limit, fut).await;
            let _ = tx.send(answer);
        });
        let late = || {
            ApiError::internal(format!(
                "directory: etcd at {} did not answer {what} within {limit:?}",
                self.endpoints(),
            ))
        };
        match rx.recv_timeout(limit + Duration::from_secs(1)) {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(late()),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                Err(ApiError::internal(format!(
                    "directory: the etcd client for {} shut down",
                    self.endpoints()
                )))
            }
        }
    }

    /// Every key-value under `dir` (a prefix ending in `/`), in key order,
    /// read page by page at one revision, and that revision.
    ///
    /// # Errors
    /// The first failed range request.
    pub(crate) async fn list(&self, dir: &str) -> Result<(Vec<KeyValue>, i64), etcd_client::Error> {
        let page = self.inner.page_keys.load(Ordering::Relaxed);
        let end = prefix_end(dir);
        let mut kv = self.client().kv_client();
        let mut out = Vec::new();
        let mut from = dir.as_bytes().to_vec();
        let mut revision = 0;
        loop {
            let mut options = GetOptions::new().with_range(end.clone()).with_limit(page);
            if revision > 0 {
                options = options.with_revision(revision);
            }
            let mut resp = kv.get(from.clone(), Some(options)).await?;
            if revision == 0 {
                revision = resp.header().map_or(0, |h| h.revision());
            }
            let more = resp.more();
            let kvs = resp.take_kvs();
            let Some(last) = kvs.last() else { break };
            // The next page starts right after the last key.
            from = last.key().to_vec();
            from.push(0);
            out.extend(kvs);
            if !more {
                break;
            }
        }
        Ok((out, revision))
    }
}

/// The smallest key above every key that starts with `prefix` (etcd's
/// range end for a prefix).
pub(crate) fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Sleeps for `backoff` and doubles it, up to 2 s (re-list and re-watch).
pub(crate) async fn back_off(backoff: &mut Duration) {
    tokio::time::sleep(*backoff).await;
    *backoff = (*backoff * 2).min(Duration::from_secs(2));
}

/// Attempts per request in [`retry`]; the pauses between them (50 ms
/// doubling) add up to about 3 s, enough for etcd to elect a new leader.
const ATTEMPTS: u32 = 7;

/// True for failures worth another attempt: the connection or the member
/// (a dead member, no leader yet, a timeout), not the request.
pub(crate) fn retryable(e: &etcd_client::Error) -> bool {
    use tonic::Code;
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(status) => matches!(
            status.code(),
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
        ),
        _ => false,
    }
}

/// `key` read with `options`, retried while etcd is unavailable.
async fn get(
    kv: &etcd_client::KvClient,
    key: &str,
    options: GetOptions,
) -> Result<etcd_client::GetResponse, ApiError> {
    retry(|| {
        let (mut kv, options) = (kv.clone(), options.clone());
        async move { kv.get(key, Some(options)).await }
    })
    .await
    .map_err(failed)
}

/// `key`'s record, if any (a linearizable read, retried).
pub(crate) async fn get_one(
    kv: &etcd_client::KvClient,
    key: &str,
) -> Result<Option<KeyValue>, ApiError> {
    Ok(get(kv, key, GetOptions::new())
        .await?
        .take_kvs()
        .into_iter()
        .next())
}

/// Runs `attempt` until it succeeds, fails for good, or [`ATTEMPTS`]
/// tries failed with [`retryable`] errors (then the last error). With
/// several endpoints a retry usually reaches a live member. Only for
/// requests that are safe to repeat (reads, and writes whose callers
/// recognise their own earlier success).
///
/// # Errors
/// The last error.
pub(crate) async fn retry<T, F, Fut>(mut attempt: F) -> Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let mut pause = Duration::from_millis(50);
    let mut tries = 1;
    loop {
        match attempt().await {
            Err(e) if tries < ATTEMPTS && retryable(&e) => {
                tracing::debug!("etcd request failed, retrying in {pause:?}: {e}");
                tokio::time::sleep(pause).await;
                pause *= 2;
                tries += 1;
            }
            answer => return answer,
        }
    }
}
