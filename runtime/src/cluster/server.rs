//! The server half of the worker protocol, `stasis worker run`: a worker in
//! its own process. It joins the control plane, heartbeats, serves the
//! internal worker API (see [`super::proto`]) and streams every snapshot it
//! writes to the control plane's store before acknowledging it.
//!
//! Fencing: if no heartbeat has been answered for the heartbeat timeout T,
//! the worker stops serving and drops its instances by itself; the control
//! plane only declares it lost after 2T, so at no instant do two workers
//! run the same actor.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;

use super::client::Peer;
use super::proto::{
    ControlPath, EPOCH_HEADER, InstallSpec, JoinAnswer, JoinRequest, LIVE_HEADER, Op,
    ResumeRequest, SEQ_HEADER, SPEC_HEADER, WorkerPath,
};
use crate::auth::authorize;
use crate::client_gone::ClientGone;
use crate::error::ApiError;
use crate::http::{Body, collect_body, json, json_error};
use crate::metrics::Metrics;
use crate::worker::actor::{ActorSettings, Replicator};
use crate::worker::templates::{FetchTemplate, TemplateDir};
use crate::worker::{HostSpec, Worker, WorkerSettings};
use stasis_core::engine::{Limits, StasisEngine};
use stasis_core::module::ModuleCache;
use stasis_core::snapshot_files::LocalSnapshotStore;
use stasis_core::snapshot_objects::{ObjectSnapshotStore, StoreUrl};
use stasis_core::snapshot_store::SnapshotStore;

use super::etcd::{Etcd, EtcdOptions, NameTaken, WorkerLease};
use super::shared::StoreTemplates;

/// Flags of `stasis worker run`.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// How the worker finds its cluster: the control plane's admin URL
    /// (`--join`, embedded mode) or etcd (`--directory etcd://...`).
    pub membership: Membership,
    /// Where the internal worker API listens (`--listen`).
    pub listen: SocketAddr,
    /// The worker's name (`--name`, an RFC 1123 label).
    pub name: String,
    /// Its data dir (`--data-dir`).
    pub data_dir: PathBuf,
    /// Bearer token for the control plane and for this worker's API.
    pub token: Option<String>,
}

/// How a worker joins its cluster.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant, reason = "one value per process")]
pub enum Membership {
    /// Embedded mode: join the control plane at this admin URL, heartbeat
    /// to it, stream snapshots to its store.
    Join(String),
    /// Cluster mode: register in etcd under a lease and write snapshots to
    /// the shared store.
    Registered(Box<RegisteredOptions>),
}

/// Cluster-mode settings of a worker.
#[derive(Debug, Clone)]
pub struct RegisteredOptions {
    /// The etcd cluster (`--directory etcd://...`, `--etcd-*`).
    pub etcd: EtcdOptions,
    /// The shared snapshot store (`--snapshot-store file://... | s3://...`).
    pub store: StoreUrl,
    /// TTL of the worker's lease (`--lease-ttl`).
    pub lease_ttl: Duration,
    /// Address others reach this worker's API at (`--advertise`).
    pub advertise: Option<String>,
}

/// Streams snapshots to the control plane.
struct ControlReplicator {
    control: Peer,
}

impl Replicator for ControlReplicator {
    fn replicate(
        &self,
        actor: &str,
        seq: u64,
        bytes: Arc<Vec<u8>>,
    ) -> Pin<Box<dyn Future<Output = Result<(), ApiError>> + Send>> {
        let control = self.control.clone();
        let path = ControlPath::Snapshot(actor, &seq.to_string()).to_path();
        Box::pin(async move {
            // Sent from the snapshot's own buffer, not a copy.
            let body = Bytes::from_owner(SharedBytes(bytes));
            control
                .send(Method::PUT, &path, &[], body)
                .await
                .map(|_| ())
        })
    }
}

/// A snapshot buffer shared with the actor task, as a request body.
struct SharedBytes(Arc<Vec<u8>>);

impl AsRef<[u8]> for SharedBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

/// Fetches template modules from the control plane.
struct ControlTemplates {
    control: Peer,
}

#[async_trait]
impl FetchTemplate for ControlTemplates {
    async fn fetch(&self, digest: &str) -> Result<Bytes, ApiError> {
        let path = ControlPath::Template(digest).to_path();
        let answer = self
            .control
            .send(Method::GET, &path, &[], Bytes::new())
            .await?;
        Ok(answer.body)
    }
}

struct RemoteWorker {
    worker: Arc<Worker>,
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
        lease: std::sync::RwLock<Option<Arc<WorkerLease>>>,
    },
}

/// Runs a remote worker until `shutdown` resolves; then, unless the control
/// plane already drained it, asks the control plane to drain it (every
/// actor moves to another worker) before exiting.
///
/// # Errors
/// If the data dir is locked, the listener cannot be bound, or the API
/// would be exposed beyond loopback without a token.
pub async fn run(
    options: WorkerOptions,
    shutdown: impl Future<Output = ()> + Send,
    ready: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    crate::error::check_label("worker", &options.name).map_err(|e| anyhow::anyhow!("{e}"))?;
    if !options.listen.ip().is_loopback() && options.token.is_none() {
        anyhow::bail!(
            "refusing to expose the worker API on {} without a token: set --admin-token or STASIS_ADMIN_TOKEN, or listen on loopback",
            options.listen
        );
    }
    if options.data_dir.join("stasis.db").exists() {
        anyhow::bail!(
            "{} is a control plane's data dir (it holds stasis.db); give the worker a folder of its own",
            options.data_dir.display()
        );
    }
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
    let (cluster, answer, store, fetch): (
        Cluster,
        JoinAnswer,
        Arc<dyn SnapshotStore>,
        Box<dyn FetchTemplate>,
    ) = match &options.membership {
        Membership::Join(url) => {
            let snapshots = options.data_dir.join("snapshots");
            // The control plane's store is authoritative: local copies
            // from an earlier run are stale.
            if snapshots.exists() {
                std::fs::remove_dir_all(&snapshots)
                    .with_context(|| format!("clearing {}", snapshots.display()))?;
            }
            let control = Peer::new(url, options.token.as_deref(), "control plane")
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let join = JoinRequest {
                name: options.name.clone(),
                address: bound.to_string(),
            };
            let answer = join_until_admitted(&control, &join)
                .await
                .map_err(|e| anyhow::anyhow!("the control plane refused this worker: {e}"))?;
            let store = Arc::new(LocalSnapshotStore::open(&snapshots, None)?);
            let fetch = Box::new(ControlTemplates {
                control: control.clone(),
            });
            (
                Cluster::Joined {
                    control: Box::new(control),
                    join,
                },
                answer,
                store,
                fetch,
            )
        }
        Membership::Registered(registered) => {
            let etcd = Etcd::connect(&registered.etcd).await?;
            let answer = settings_when_written(&etcd).await;
            let mine = registered.store.to_string();
            if let Some(theirs) = answer.snapshot_store.as_ref().filter(|s| **s != mine) {
                anyhow::bail!(
                    "refusing to start: --snapshot-store is {mine} here but {theirs} in the cluster's settings; every process of a cluster shares one store"
                );
            }
            let cache = options.data_dir.join("snapshot-cache");
            let url = registered.store.clone();
            let shared =
                tokio::task::spawn_blocking(move || ObjectSnapshotStore::open(&url, &cache, None))
                    .await?
                    .map_err(|e| {
                        anyhow::anyhow!("--snapshot-store {}: {}", registered.store, e.detail())
                    })?;
            let shared = Arc::new(shared);
            let address = match &registered.advertise {
                Some(address) => address.clone(),
                None => bound.to_string(),
            };
            let cluster = Cluster::Registered {
                etcd,
                address,
                lease_ttl: registered.lease_ttl,
                lease: std::sync::RwLock::new(None),
            };
            let fetch = Box::new(StoreTemplates::new(shared.clone()));
            (cluster, answer, shared, fetch)
        }
    };
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
    let template_dir = TemplateDir::new(
        ModuleCache::new(
            engine.engine().clone(),
            engine.linker().clone(),
            Some(options.data_dir.join("cache")),
        ),
        templates,
        Some(fetch),
    );
    let replicator: Option<Arc<dyn Replicator>> = match &cluster {
        Cluster::Joined { control, .. } => Some(Arc::new(ControlReplicator {
            control: Peer::clone(control),
        })),
        Cluster::Registered { .. } => None,
    };
    let worker = Worker::new(
        &options.name,
        engine.clone(),
        store,
        Arc::new(Metrics::default()),
        WorkerSettings {
            max_held: answer.max_held,
            hold_timeout: ms(answer.hold_timeout_ms),
            actor: ActorSettings {
                keep_snapshots: answer.keep_snapshots,
                checkpoint_every: answer.checkpoint_every,
            },
            max_live: answer.max_live,
        },
        replicator,
        Arc::new(template_dir),
    );
    let remote = Arc::new(RemoteWorker {
        worker,
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
            .keep_membership(ms(answer.heartbeat_timeout_ms)),
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let api = remote.clone();
    let server = tokio::spawn(crate::http::serve(
        listener,
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
    tracing::info!("shutting down: asking the control plane to drain this worker");
    match remote.drain_me(&options.name).await {
        Ok(()) => tracing::info!("drained"),
        Err(e) => {
            // Not moved: keep what was acknowledged by pausing every actor
            // here (its snapshot goes to the store, or to the control
            // plane), so that it comes back from that snapshot wherever it
            // is placed next.
            tracing::warn!(
                "drain refused or failed ({e}); pausing every actor here before exiting"
            );
            remote.pause_all().await;
        }
    }
    membership.abort();
    remote.leave().await;
    let _ = stop_tx.send(true);
    let _ = server.await;
    Ok(())
}

/// Waits until the first replica has written the cluster's settings.
async fn settings_when_written(etcd: &Etcd) -> JoinAnswer {
    let mut wait = Duration::from_millis(100);
    loop {
        match etcd.settings::<JoinAnswer>().await {
            Ok(Some(answer)) => return answer,
            Ok(None) => {
                tracing::info!("no cluster settings in etcd yet (no replica has started); waiting")
            }
            Err(e) => tracing::warn!("reading the cluster settings from etcd: {e:#}; retrying"),
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(2));
    }
}

/// 503: this worker holds no valid lease (cluster mode).
fn lease_lost(worker: &str) -> ApiError {
    ApiError::unavailable(format!(
        "worker {worker} holds no valid lease in etcd; it serves nothing until it registers again"
    ))
}

/// Joins the control plane, retrying while it cannot be reached or is not
/// ready.
///
/// # Errors
/// The control plane's refusal for good (400 bad name, 401/403 token, 409
/// the name is taken or the cluster takes no `--join` workers).
async fn join_until_admitted(control: &Peer, join: &JoinRequest) -> Result<JoinAnswer, ApiError> {
    let mut wait = Duration::from_millis(100);
    loop {
        match control
            .json::<JoinAnswer>(Method::POST, &ControlPath::Join.to_path(), join)
            .await
        {
            Ok(answer) => {
                tracing::info!(control = control.base(), name = %join.name, "joined");
                return Ok(answer);
            }
            Err(e) if matches!(e.status, 400 | 401 | 403 | 409) => return Err(e),
            Err(e) => {
                tracing::warn!(
                    "joining {} failed: {e}; retrying in {wait:?}",
                    control.base()
                );
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
        }
    }
}

impl RemoteWorker {
    /// Keeps this worker a member: heartbeats (embedded mode) or its lease
    /// (cluster mode). Runs until aborted.
    async fn keep_membership(self: Arc<Self>, heartbeat_timeout: Duration) {
        match &self.cluster {
            Cluster::Joined { control, join } => {
                let (control, join) = (Peer::clone(control), join.clone());
                self.heartbeat(control, join, heartbeat_timeout).await;
            }
            Cluster::Registered { .. } => self.keep_lease().await,
        }
    }

    /// Cluster mode: registers under a lease and serves while the lease is
    /// valid. When it is not (keep-alives unanswered until the deadline,
    /// see [`WorkerLease::is_valid`]) the worker stops serving and drops
    /// every instance before etcd expires the lease, that is before the
    /// leader can re-place its actors; then it registers again as a new,
    /// empty incarnation.
    async fn keep_lease(&self) {
        let Cluster::Registered { lease, .. } = &self.cluster else {
            return;
        };
        let mut held = lease.read().unwrap_or_else(|p| p.into_inner()).clone();
        loop {
            let granted = match held.take() {
                Some(granted) => granted,
                None => match self.register(false).await {
                    Ok(granted) => granted,
                    Err(e) => {
                        tracing::error!("registering in etcd: {e:#}");
                        return;
                    }
                },
            };
            *lease.write().unwrap_or_else(|p| p.into_inner()) = Some(granted.clone());
            self.worker.set_serving(true);
            granted.expired().await;
            tracing::error!(
                lease = granted.id(),
                "the lease could not be renewed in time; stopping to serve and dropping every instance"
            );
            self.worker.set_serving(false);
            *lease.write().unwrap_or_else(|p| p.into_inner()) = None;
            self.drop_all().await;
        }
    }

    /// Cluster mode: the first registration, before the worker says it is
    /// ready (a no-op in embedded mode).
    ///
    /// # Errors
    /// If another live worker holds the name (see [`RemoteWorker::register`]).
    async fn register_at_start(&self) -> anyhow::Result<()> {
        let Cluster::Registered { lease, .. } = &self.cluster else {
            return Ok(());
        };
        let granted = self.register(true).await?;
        *lease.write().unwrap_or_else(|p| p.into_inner()) = Some(granted);
        Ok(())
    }

    /// Registers this worker in etcd, retrying etcd failures. While another
    /// lease holds the name it waits for that lease to end (an earlier run
    /// of this worker, killed, leaves its registration until its TTL).
    /// `give_up`: if the holder's registration outlives its lease's TTL
    /// (it is renewed: a live worker of the same name), fail rather than
    /// wait on.
    ///
    /// # Errors
    /// Only with `give_up`: the name is held by a live worker.
    async fn register(&self, give_up: bool) -> anyhow::Result<Arc<WorkerLease>> {
        let Cluster::Registered {
            etcd,
            address,
            lease_ttl,
            ..
        } = &self.cluster
        else {
            anyhow::bail!("not a cluster-mode worker");
        };
        let name = self.worker.name().to_owned();
        let mut wait = Duration::from_millis(100);
        // The holder seen first, and when.
        let mut holder: Option<(i64, Instant)> = None;
        loop {
            match etcd.register_worker(&name, address, *lease_ttl).await {
                Ok(granted) => {
                    tracing::info!(lease = granted.id(), %address, "registered in etcd; serving");
                    return Ok(Arc::new(granted));
                }
                Err(e) => match e.downcast_ref::<NameTaken>() {
                    Some(taken) => {
                        let since = match holder {
                            Some((lease, since)) if lease == taken.record.lease => since,
                            _ => {
                                let now = Instant::now();
                                holder = Some((taken.record.lease, now));
                                now
                            }
                        };
                        // Its lease would have expired by now unless renewed.
                        let patience = taken.granted_ttl + Duration::from_secs(2);
                        if give_up && since.elapsed() > patience {
                            anyhow::bail!(
                                "refusing to start: --name {name} is taken: another live worker at {} keeps its registration in etcd (lease {:x}); stop it, or give this worker another --name",
                                taken.record.address,
                                taken.record.lease
                            );
                        }
                        tracing::warn!(
                            "{taken}; waiting for that lease to end (an earlier run of this worker?)"
                        );
                    }
                    None => {
                        tracing::warn!("registering in etcd failed: {e:#}; retrying in {wait:?}")
                    }
                },
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(1));
        }
    }

    /// Whether this worker may serve now: always in embedded mode (the
    /// heartbeat task fences it), only under a valid lease in cluster mode.
    fn may_serve(&self) -> bool {
        match &self.cluster {
            Cluster::Joined { .. } => true,
            Cluster::Registered { lease, .. } => lease
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .is_some_and(|l| l.is_valid()),
        }
    }

    /// Asks the control plane (in cluster mode: the leader replica) to
    /// drain worker `name`.
    async fn drain_me(&self, name: &str) -> Result<(), ApiError> {
        let drain_path = ControlPath::Drain(name).to_path();
        let control = match &self.cluster {
            Cluster::Joined { control, .. } => Peer::clone(control),
            Cluster::Registered { etcd, .. } => {
                let leader = etcd
                    .leader()
                    .await
                    .map_err(|e| ApiError::unavailable(format!("finding the leader: {e:#}")))?
                    .ok_or_else(|| ApiError::unavailable("no leader replica"))?;
                Peer::new(
                    &format!("http://{}", leader.admin),
                    self.token.as_deref(),
                    "leader replica",
                )?
            }
        };
        control
            .send(Method::POST, &drain_path, &[], Bytes::new())
            .await
            .map(|_| ())
    }

    /// Cluster mode: gives the lease back, so the registration goes at
    /// once rather than after the TTL.
    async fn leave(&self) {
        if let Cluster::Registered { lease, .. } = &self.cluster {
            let held = lease.write().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(held) = held.and_then(|l| Arc::try_unwrap(l).ok())
                && let Err(e) = held.revoke().await
            {
                tracing::warn!("revoking the lease: {e:#}; it expires after its TTL");
            }
        }
    }

    /// Heartbeats every T/4. Unanswered for T: stop serving and drop every
    /// instance. Told it is unknown or lost: drop every actor and join again.
    async fn heartbeat(&self, control: Peer, join: JoinRequest, timeout: Duration) {
        let path = ControlPath::Heartbeat(&join.name).to_path();
        let mut last_ok = Instant::now();
        loop {
            tokio::time::sleep(timeout / 4).await;
            match control.send(Method::POST, &path, &[], Bytes::new()).await {
                Ok(_) => {
                    last_ok = Instant::now();
                    if !self.worker.is_serving() {
                        tracing::info!("control plane reachable again; serving");
                        self.worker.set_serving(true);
                    }
                }
                Err(e) if e.status == 404 || e.status == 410 => {
                    tracing::warn!("control plane: {e}; dropping every actor and joining again");
                    self.drop_all().await;
                    match join_until_admitted(&control, &join).await {
                        Ok(_) => {
                            last_ok = Instant::now();
                            self.worker.set_serving(true);
                        }
                        Err(e) => tracing::error!("the control plane refused this worker: {e}"),
                    }
                }
                Err(e) => {
                    if last_ok.elapsed() >= timeout && self.worker.is_serving() {
                        tracing::error!(
                            "no heartbeat answered for {:?} ({e}); stopping to serve",
                            last_ok.elapsed()
                        );
                        self.worker.set_serving(false);
                        self.drop_all().await;
                    }
                }
            }
        }
    }

    /// Pauses every actor this worker hosts (at shutdown, when no drain
    /// took them), logging each outcome.
    async fn pause_all(&self) {
        for name in self.worker.actor_names() {
            match self.worker.pause(&name).await {
                Ok(report) => {
                    tracing::info!(actor = %name, seq = report.seq, "paused for shutdown")
                }
                Err(e) => tracing::error!(actor = %name, "pausing for shutdown failed: {e}"),
            }
        }
    }

    /// Drops every actor (and, in embedded mode, its local snapshot
    /// copies; a shared store is the cluster's, never this worker's to
    /// delete from).
    async fn drop_all(&self) {
        for name in self.worker.actor_names() {
            self.remove_actor(&name).await;
        }
    }

    async fn remove_actor(&self, name: &str) {
        self.worker.remove(name).await;
        if matches!(self.cluster, Cluster::Joined { .. }) {
            let _ = self.worker.store().remove_actor(name);
        }
    }

    async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        if request.uri().path() == "/healthz" {
            return json(
                StatusCode::OK,
                &serde_json::json!({"worker": self.worker.name()}),
            );
        }
        if let Err(refused) = authorize(&request, self.token.as_deref()) {
            return *refused;
        }
        if !self.may_serve() {
            return json_error(&lease_lost(self.worker.name()));
        }
        let answer = self.route(request).await;
        // An answer computed while the lease ran out is not given: the
        // actor may already be re-placed elsewhere.
        if !self.may_serve() {
            return json_error(&lease_lost(self.worker.name()));
        }
        match answer {
            Ok(response) => response,
            Err(e) => json_error(&e),
        }
    }

    async fn route(&self, request: Request<Incoming>) -> Result<Response<Body>, ApiError> {
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let (parts, body) = request.into_parts();
        let limit = usize::try_from(self.worker.engine().limits().max_memory)
            .unwrap_or(usize::MAX)
            .saturating_add(16 << 20);
        let body = collect_body(
            &parts,
            body,
            limit,
            "the snapshot size limit (--max-memory plus 16 MiB)",
        )
        .await?;
        let header = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let w = &self.worker;
        let route = WorkerPath::parse(&path);
        if let Some(WorkerPath::Actor(name) | WorkerPath::Op(name, _)) = route {
            crate::error::check_label("actor", name)?;
        }
        match (&method, route) {
            (&Method::GET, Some(WorkerPath::Actors)) => Ok(json(StatusCode::OK, &w.statuses())),
            (&Method::GET, Some(WorkerPath::Actor(name))) => {
                let status = w.status(name).ok_or_else(|| {
                    ApiError::not_found(format!("actor {name} is not on worker {}", w.name()))
                })?;
                Ok(json(StatusCode::OK, &status))
            }
            (&Method::DELETE, Some(WorkerPath::Actor(name))) => {
                self.remove_actor(name).await;
                Ok(json(StatusCode::OK, &serde_json::json!({})))
            }
            (&Method::POST, Some(WorkerPath::Op(name, Ok(op)))) => {
                self.actor_op(name, op, header, body).await
            }
            (&Method::POST, Some(WorkerPath::Op(_, Err(op)))) => {
                Err(ApiError::not_found(format!("no worker operation {op:?}")))
            }
            _ => Err(ApiError::not_found(format!(
                "no worker route {method} {path}"
            ))),
        }
    }

    async fn actor_op(
        &self,
        name: &str,
        op: Op,
        header: impl Fn(&str) -> Option<String>,
        body: Bytes,
    ) -> Result<Response<Body>, ApiError> {
        let w: &dyn crate::worker::WorkerApi = self.worker.as_ref();
        match op {
            Op::Create => {
                let spec: HostSpec = serde_json::from_slice(&body)
                    .map_err(|e| ApiError::bad_request(format!("bad actor spec: {e}")))?;
                Ok(json(StatusCode::OK, &w.create(name, &spec).await?))
            }
            Op::Install => {
                let text = header(SPEC_HEADER)
                    .ok_or_else(|| ApiError::bad_request(format!("missing {SPEC_HEADER}")))?;
                let spec: InstallSpec = serde_json::from_str(&text)
                    .map_err(|e| ApiError::bad_request(format!("bad actor spec: {e}")))?;
                if let Some(delay) = self.install_delay {
                    tracing::warn!("failpoint: install of {name} waits {delay:?}");
                    tokio::time::sleep(delay).await;
                }
                let bytes = (!body.is_empty()).then_some(body);
                w.install(name, &spec.host, spec.seq, bytes, spec.resume)
                    .await?;
                Ok(json(StatusCode::OK, &w.status(name).await?))
            }
            Op::Call => {
                let epoch = header(EPOCH_HEADER)
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| ApiError::bad_request(format!("missing {EPOCH_HEADER}")))?;
                let request = stasis_host_api::decode_request(&body)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                // Never cancelled: when the router's forward is dropped, this
                // serving loop drops the call, which gives the request up.
                let response = w
                    .call(name, epoch, Arc::new(request), &ClientGone::new())
                    .await?;
                let bytes =
                    stasis_host_api::encode_response(&response).map_err(ApiError::internal)?;
                Ok(Response::new(Full::new(Bytes::from(bytes))))
            }
            Op::Pause => Ok(json(StatusCode::OK, &w.pause(name).await?)),
            Op::Checkpoint => Ok(json(StatusCode::OK, &w.checkpoint(name).await?)),
            Op::Resume => {
                let req: ResumeRequest = if body.is_empty() {
                    ResumeRequest::default()
                } else {
                    serde_json::from_slice(&body)
                        .map_err(|e| ApiError::bad_request(e.to_string()))?
                };
                w.resume(name, req.source()?).await?;
                Ok(json(StatusCode::OK, &serde_json::json!({})))
            }
            Op::Capture => {
                // The snapshot is already in the control plane's store
                // (replicated before it was acknowledged): only its
                // sequence number travels.
                let captured = w.capture(name).await?;
                let mut response = Response::new(Full::new(Bytes::new()));
                let h = response.headers_mut();
                h.insert(SEQ_HEADER, captured.seq.into());
                h.insert(
                    LIVE_HEADER,
                    hyper::header::HeaderValue::from_static(if captured.live {
                        "true"
                    } else {
                        "false"
                    }),
                );
                Ok(response)
            }
            Op::CancelMove => {
                w.cancel_move(name).await;
                Ok(json(StatusCode::OK, &serde_json::json!({})))
            }
        }
    }
}
