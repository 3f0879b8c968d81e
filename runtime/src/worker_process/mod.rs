//! The server half of the worker protocol, `stasis worker run`: a worker in
//! its own process. This module starts it; [`options`] are its flags;
//! [`storage`] its store and templates (the control plane's in embedded
//! mode, the shared store in cluster mode); [`membership`] keeps it a
//! member (joins and heartbeats, or its etcd lease) and leaves at shutdown
//! (drain, or pause every actor); [`api`] serves
//! the internal worker API (see [`stasis_contract::proto`]); [`joined`] is
//! what an embedded-mode worker takes from the control plane it joined
//! (snapshot replication, template modules); [`control_peer`] is how its
//! actors reach the control plane. The `Worker` itself is built as `stasis
//! serve` builds its in-process ones ([`crate::workers`]).
//!
//! Fencing: in embedded mode, if no heartbeat has been answered for the
//! heartbeat timeout T, the worker stops serving and drops its instances by
//! itself; the control plane only declares it lost after 2T. In cluster
//! mode the same holds of its lease (see [`stasis_cluster::etcd`]). So at
//! no instant do two workers run the same actor.

mod api;
mod calls;
pub mod control_peer;
mod joined;
mod membership;
pub mod options;
mod storage;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;

use crate::workers::WorkerBuilder;
use control_peer::ControlPeer;
use joined::ControlReplicator;
pub use options::{Membership, RegisteredOptions, WorkerOptions};
use stasis_cluster::client::Peer;
use stasis_cluster::etcd::{Etcd, WorkerLease};
use stasis_contract::metrics::Metrics;
use stasis_contract::proto::{JoinAnswer, JoinRequest};
use stasis_contract::settings::{ActorSettings, WorkerSettings};
use stasis_core::engine::{Limits, StasisEngine};
use stasis_core::journal::shipped::ShippedJournal;
use stasis_worker::Worker;
use stasis_worker::actor::Replicator;
use storage::Storage;

/// The worker of a `stasis worker run` process, as its API and its
/// membership see it.
struct RemoteWorker {
    worker: Arc<Worker>,
    /// What the worker counts (`GET /metrics`).
    metrics: Arc<Metrics>,
    /// The calls under way, for `abandon`.
    calls: calls::Calls,
    /// Set at SIGTERM: no actor is created or installed here after it.
    shutting_down: std::sync::atomic::AtomicBool,
    cluster: Cluster,
    token: Option<String>,
    install_delay: Option<Duration>,
}

/// The worker's tie to its cluster.
#[allow(clippy::large_enum_variant, reason = "one value per process")]
enum Cluster {
    /// Embedded mode: admitted by the control plane, kept by heartbeats.
    Joined {
        control: Box<Peer>,
        join: JoinRequest,
    },
    /// Cluster mode: registered in etcd under `lease` (none between an
    /// expiry and the next registration).
    Registered {
        etcd: Etcd,
        address: String,
        lease_ttl: Duration,
        lease: LeaseSlot,
    },
}

/// The lease a cluster-mode worker holds now (none between an expiry and
/// the next registration), shared with its store's fence.
type LeaseSlot = Arc<std::sync::RwLock<Option<Arc<WorkerLease>>>>;

/// Whether the lease in `slot` is one this worker may still believe in.
pub(super) fn lease_holds(slot: &LeaseSlot) -> bool {
    slot.read()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .is_some_and(|l| l.is_valid())
}

/// Runs a remote worker until `shutdown` resolves; then, unless the control
/// plane already drained it, asks the control plane to drain it (every
/// actor moves to another worker) before exiting.
///
/// # Errors
/// If the data dir is locked, the listener cannot be bound, or the API
/// would be exposed beyond loopback without a token or mutual TLS.
pub async fn run(
    options: WorkerOptions,
    shutdown: impl Future<Output = ()> + Send,
    ready: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    check(&options)?;
    let _lock = stasis_core::durable::lock_data_dir(&options.data_dir)?;
    let templates = options.data_dir.join("templates");
    std::fs::create_dir_all(&templates)?;
    std::fs::create_dir_all(options.data_dir.join("cache"))?;
    let listener = TcpListener::bind(options.listen)
        .await
        .with_context(|| format!("binding --listen {}", options.listen))?;
    let local = listener.local_addr()?;
    let bound = if local.ip().is_unspecified() {
        SocketAddr::new([127, 0, 0, 1].into(), local.port())
    } else {
        local
    };
    let (cluster, answer, storage) = match &options.membership {
        Membership::Join(url) => storage::joined(&options, url, bound).await?,
        Membership::Registered(registered) => {
            storage::registered(&options, registered, bound).await?
        }
    };
    let metrics = Arc::new(Metrics::default());
    let worker = build_worker(&options, &answer, &cluster, storage, &metrics)?;
    let remote = Arc::new(RemoteWorker {
        worker,
        metrics,
        calls: calls::Calls::default(),
        shutting_down: std::sync::atomic::AtomicBool::new(false),
        cluster,
        token: options.token.clone(),
        install_delay: std::env::var("STASIS_FAILPOINT_INSTALL_DELAY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_millis),
    });
    // Cluster mode: registered before it says it is ready, so that a
    // second worker of the same name refuses to start.
    remote.register_at_start().await?;
    let membership = tokio::spawn(
        remote
            .clone()
            .keep_membership(Duration::from_millis(answer.heartbeat_timeout_ms)),
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let api = remote.clone();
    let server = tokio::spawn(stasis_http::serve::serve_tls(
        listener,
        options.internal_tls.as_ref().map(|t| t.server()),
        move |req, _| {
            let api = api.clone();
            async move { api.handle(req).await }
        },
        async move {
            let mut rx = stop_rx;
            let _ = rx.wait_for(|s| *s).await;
        },
        Duration::from_secs(10),
    ));
    ready(bound);
    shutdown.await;
    if let Some(shipped) = remote.worker.shipped() {
        let stats = shipped.stats();
        tracing::info!(
            rounds = stats.rounds,
            lost_rounds = stats.lost_rounds,
            entries = stats.entries,
            shipped = stats.shipped,
            bytes = stats.bytes,
            "shipped journal: segments put since start"
        );
    }
    remote.leave_at_shutdown(&options.name).await;
    membership.abort();
    remote.leave().await;
    let _ = stop_tx.send(true);
    let _ = server.await;
    Ok(())
}

/// Refuses options that cannot make a worker: a name that is no label, an
/// API exposed beyond loopback without a token or mutual TLS, or a
/// control plane's data dir.
fn check(options: &WorkerOptions) -> anyhow::Result<()> {
    stasis_contract::names::check_label("worker", &options.name)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // Mutual TLS lets in only clients with a certificate from the
    // internal CA: that guards the API as a token does.
    if !options.listen.ip().is_loopback()
        && options.token.is_none()
        && options.internal_tls.is_none()
    {
        anyhow::bail!(
            "refusing to expose the worker API on {} without a token: set --internal-token (STASIS_INTERNAL_TOKEN) or --admin-token (STASIS_ADMIN_TOKEN), or --internal-ca with its certificates, or listen on loopback",
            options.listen
        );
    }
    if options.data_dir.join("stasis.db").exists() {
        anyhow::bail!(
            "{} is a control plane's data dir (it holds stasis.db); give the worker a folder of its own",
            options.data_dir.display()
        );
    }
    Ok(())
}

/// The worker of `options`, with what the control plane `answer`ed at
/// the join or registration: its engine, store, replicator (a joined
/// worker without a shared store), the control plane its actors reach,
/// and its shipped journal (cluster mode).
fn build_worker(
    options: &WorkerOptions,
    answer: &JoinAnswer,
    cluster: &Cluster,
    storage: Storage,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Arc<Worker>> {
    let Storage {
        store,
        fetch,
        segments,
    } = storage;
    let ms = Duration::from_millis;
    let limits = Limits {
        max_memory: answer.max_memory,
        cpu_limit: ms(answer.cpu_limit_ms),
        request_timeout: ms(answer.request_timeout_ms),
        max_body: usize::try_from(answer.max_body).unwrap_or(usize::MAX),
    };
    let engine = match answer.max_live {
        Some(slots) => StasisEngine::pooled(limits, slots)?,
        None => StasisEngine::new(limits)?,
    };
    let replicator: Option<Arc<dyn Replicator>> = match cluster {
        Cluster::Joined { control, .. } => Some(Arc::new(ControlReplicator {
            control: Peer::clone(control),
        })),
        Cluster::Registered { .. } => None,
    };
    let builder = WorkerBuilder::new(
        engine,
        store.clone(),
        metrics.clone(),
        WorkerSettings {
            max_held: answer.max_held,
            hold_timeout: ms(answer.hold_timeout_ms),
            actor: ActorSettings {
                keep_snapshots: answer.keep_snapshots,
                checkpoint_every: answer.checkpoint_every,
                durability: answer.durability,
            },
            max_live: answer.max_live,
            allow_outbound: options.allow_outbound.clone(),
        },
        &options.data_dir,
        Some(fetch),
    );
    let worker = builder.build(&options.name, replicator);
    // Its actors' calls and alarms go through the control plane it joined
    // (embedded mode), or through the leader replica found in etcd
    // (cluster mode).
    let control = match cluster {
        Cluster::Joined { control, .. } => ControlPeer::Joined(control.clone()),
        Cluster::Registered { etcd, .. } => ControlPeer::Leader {
            etcd: etcd.clone(),
            token: options.token.clone(),
        },
    };
    worker.set_control(Arc::new(control));
    if let Some(segments) = segments {
        // Tests lengthen the fold delay to find entries in segments.
        let fold_after = std::env::var("STASIS_FAILPOINT_FOLD_AFTER_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(
                stasis_core::journal::shipped::FOLD_AFTER,
                Duration::from_millis,
            );
        let shipped = ShippedJournal::start(store, segments, &options.name, fold_after)
            .context("starting the shipped journal")?;
        worker.set_shipped(Arc::new(shipped));
    }
    Ok(worker)
}
