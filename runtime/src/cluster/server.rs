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

/// Flags of `stasis worker run`.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The control plane's admin URL (`--join`).
    pub join: String,
    /// Where the internal worker API listens (`--listen`).
    pub listen: SocketAddr,
    /// The worker's name (`--name`, an RFC 1123 label).
    pub name: String,
    /// Its data dir (`--data-dir`).
    pub data_dir: PathBuf,
    /// Bearer token for the control plane and for this worker's API.
    pub token: Option<String>,
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
    control: Peer,
    token: Option<String>,
    install_delay: Option<Duration>,
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
    let snapshots = options.data_dir.join("snapshots");
    // The control plane's store is authoritative: local copies from an
    // earlier run are stale.
    if snapshots.exists() {
        std::fs::remove_dir_all(&snapshots)
            .with_context(|| format!("clearing {}", snapshots.display()))?;
    }
    let templates = options.data_dir.join("templates");
    std::fs::create_dir_all(&templates)?;
    std::fs::create_dir_all(options.data_dir.join("cache"))?;
    let listener = TcpListener::bind(options.listen)
        .await
        .with_context(|| format!("binding --listen {}", options.listen))?;
    let local = listener.local_addr()?;
    let advertised = if local.ip().is_unspecified() {
        SocketAddr::new([127, 0, 0, 1].into(), local.port())
    } else {
        local
    };
    let control = Peer::new(&options.join, options.token.as_deref(), "control plane")
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let join = JoinRequest {
        name: options.name.clone(),
        address: advertised.to_string(),
    };
    let answer = join_until_admitted(&control, &join).await;
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
    let store = Arc::new(LocalSnapshotStore::open(&snapshots, None)?);
    let template_dir = TemplateDir::new(
        ModuleCache::new(
            engine.engine().clone(),
            engine.linker().clone(),
            Some(options.data_dir.join("cache")),
        ),
        templates,
        Some(Box::new(ControlTemplates {
            control: control.clone(),
        })),
    );
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
        Some(Arc::new(ControlReplicator {
            control: control.clone(),
        })),
        Arc::new(template_dir),
    );
    let remote = Arc::new(RemoteWorker {
        worker,
        control: control.clone(),
        token: options.token.clone(),
        install_delay: std::env::var("STASIS_FAILPOINT_INSTALL_DELAY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_millis),
    });
    let heartbeat = tokio::spawn(
        remote
            .clone()
            .heartbeat(join, ms(answer.heartbeat_timeout_ms)),
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
    ready(advertised);
    shutdown.await;
    tracing::info!("shutting down: asking the control plane to drain this worker");
    let drain_path = ControlPath::Drain(&options.name).to_path();
    match control
        .send(Method::POST, &drain_path, &[], Bytes::new())
        .await
    {
        Ok(_) => tracing::info!("drained"),
        Err(e) => tracing::warn!("drain failed ({e}); exiting anyway"),
    }
    heartbeat.abort();
    let _ = stop_tx.send(true);
    let _ = server.await;
    Ok(())
}

async fn join_until_admitted(control: &Peer, join: &JoinRequest) -> JoinAnswer {
    let mut wait = Duration::from_millis(100);
    loop {
        match control
            .json::<JoinAnswer>(Method::POST, &ControlPath::Join.to_path(), join)
            .await
        {
            Ok(answer) => {
                tracing::info!(control = control.base(), name = %join.name, "joined");
                return answer;
            }
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
    /// Heartbeats every T/4. Unanswered for T: stop serving and drop every
    /// instance. Told it is unknown or lost: drop every actor and join again.
    async fn heartbeat(self: Arc<Self>, join: JoinRequest, timeout: Duration) {
        let path = ControlPath::Heartbeat(&join.name).to_path();
        let mut last_ok = Instant::now();
        loop {
            tokio::time::sleep(timeout / 4).await;
            match self
                .control
                .send(Method::POST, &path, &[], Bytes::new())
                .await
            {
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
                    join_until_admitted(&self.control, &join).await;
                    last_ok = Instant::now();
                    self.worker.set_serving(true);
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

    async fn drop_all(&self) {
        for name in self.worker.actor_names() {
            self.worker.remove(&name).await;
            let _ = self.worker.store().remove_actor(&name);
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
        match self.route(request).await {
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
                w.remove(name).await;
                w.store().remove_actor(name)?;
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
