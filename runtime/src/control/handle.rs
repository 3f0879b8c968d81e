//! One abstraction over the two kinds of worker the control plane places
//! actors on: in-process ([`Worker`]) and remote (a `stasis worker run`
//! process reached over its internal HTTP API). The router and the control
//! plane only ever talk to a [`WorkerEntry`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use stasis_host_api::{Request, Response};

use crate::client::{self, ClientGone};
use crate::error::ApiError;
use crate::worker::actor::{ActorStatus, Captured, ResumeFrom, SnapshotReport};
use crate::worker::{ActorSpec, Worker};

/// Lifecycle of a worker as the control plane sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerState {
    /// Takes new actors.
    Ready,
    /// Its actors are being moved off.
    Draining,
    /// Holds no actors and takes none.
    Drained,
    /// Missed heartbeats for twice the timeout; its actors were re-placed.
    Lost,
}

impl WorkerState {
    /// The lower-case name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Ready => "ready",
            WorkerState::Draining => "draining",
            WorkerState::Drained => "drained",
            WorkerState::Lost => "lost",
        }
    }
}

/// What a remote worker needs to host an actor: the template by digest (it
/// fetches the bytes from the control plane) and the template's environment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RemoteSpec {
    /// SHA-256 hex of the template module.
    pub digest: String,
    /// The template's WASI environment.
    pub env: Vec<(String, String)>,
    /// Placement epoch.
    pub epoch: u64,
    /// For `install`: the snapshot's sequence number.
    #[serde(default)]
    pub seq: u64,
    /// For `install`: restore at once (true) or stay paused.
    #[serde(default)]
    pub resume: bool,
}

/// Body of a resume request (docs/api.md).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResumeRequest {
    /// Restore this snapshot.
    #[serde(default)]
    pub from_snapshot: Option<u64>,
    /// Start fresh from the template.
    #[serde(default)]
    pub from_template: bool,
}

impl ResumeRequest {
    /// The request for `from`.
    #[must_use]
    pub fn from(from: ResumeFrom) -> Self {
        match from {
            ResumeFrom::Newest => Self::default(),
            ResumeFrom::Snapshot(seq) => Self {
                from_snapshot: Some(seq),
                from_template: false,
            },
            ResumeFrom::Template => Self {
                from_snapshot: None,
                from_template: true,
            },
        }
    }

    /// Which source it names.
    ///
    /// # Errors
    /// 400 if both are given.
    pub fn source(&self) -> Result<ResumeFrom, ApiError> {
        match (self.from_snapshot, self.from_template) {
            (Some(_), true) => Err(ApiError::bad_request(
                "give from_snapshot or from_template, not both",
            )),
            (Some(seq), false) => Ok(ResumeFrom::Snapshot(seq)),
            (None, true) => Ok(ResumeFrom::Template),
            (None, false) => Ok(ResumeFrom::Newest),
        }
    }
}

/// Header carrying the placement epoch of a call.
pub const EPOCH_HEADER: &str = "stasis-epoch";
/// Header carrying a [`RemoteSpec`] (JSON) on `install`.
pub const SPEC_HEADER: &str = "stasis-spec";
/// Header carrying a snapshot's sequence number.
pub const SEQ_HEADER: &str = "stasis-seq";
/// Header saying whether a captured actor was live (`true`/`false`).
pub const LIVE_HEADER: &str = "stasis-live";

/// Longest wait for a peer's answer head. Every worker operation is bounded
/// well below it (hold timeout + request timeout); a peer that says nothing
/// for this long is treated as unreachable.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(120);

/// Bound on status queries, which answer from memory: a worker that cannot
/// say how its actors are within this is treated as unreachable, so listings
/// and metrics never hang on a sick worker.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(3);

/// An HTTP client for one peer (a worker, or the control plane).
#[derive(Clone)]
pub struct Peer {
    base: String,
    token: Option<String>,
    client: Client<HttpConnector, Full<Bytes>>,
    what: String,
}

/// An answer from a peer: status, headers, body.
pub type PeerAnswer = (StatusCode, hyper::HeaderMap, Bytes);

impl Peer {
    /// A client for `base` (e.g. `http://127.0.0.1:7071`), named `what` in
    /// errors, sending `token` as a bearer token.
    #[must_use]
    pub fn new(base: &str, token: Option<String>, what: &str) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        connector.set_nodelay(true);
        Self {
            base: base.trim_end_matches('/').to_owned(),
            token,
            client: Client::builder(TokioExecutor::new()).build(connector),
            what: what.to_owned(),
        }
    }

    /// The base URL.
    #[must_use]
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends a request; a non-2xx answer becomes an [`ApiError`] with the
    /// peer's status and message, an unreachable peer a 503.
    ///
    /// # Errors
    /// As described.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> Result<PeerAnswer, ApiError> {
        self.send_within(PEER_TIMEOUT, method, path, headers, body)
            .await
    }

    /// [`Peer::send`] with its own bound on the wait for the answer.
    ///
    /// # Errors
    /// As [`Peer::send`].
    pub async fn send_within(
        &self,
        timeout: Duration,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> Result<PeerAnswer, ApiError> {
        let mut builder = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            builder = builder.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        for (name, value) in headers {
            builder = builder.header(*name, value);
        }
        let request = builder
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| ApiError::internal(format!("building a request to {}: {e}", self.what)))?;
        let unreachable = |e: String| {
            ApiError::unavailable(format!("{} unreachable ({}): {e}", self.what, self.base))
        };
        let response = tokio::time::timeout(timeout, self.client.request(request))
            .await
            .map_err(|_| unreachable(format!("no answer within {timeout:?}")))?
            .map_err(|e| unreachable(e.to_string()))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| unreachable(e.to_string()))?
            .to_bytes();
        if status.is_success() {
            return Ok((status, headers, body));
        }
        #[derive(Deserialize)]
        struct ErrorBody {
            error: String,
        }
        let message = serde_json::from_slice::<ErrorBody>(&body)
            .map(|e| e.error)
            .unwrap_or_else(|_| String::from_utf8_lossy(&body).trim().to_owned());
        let retry_after = headers
            .get(hyper::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        Err(ApiError {
            status: status.as_u16(),
            message,
            retry_after,
        })
    }

    /// Sends JSON and decodes a JSON answer.
    ///
    /// # Errors
    /// As [`Peer::send`], or 502 for an undecodable answer.
    pub async fn json<T: for<'de> Deserialize<'de>>(
        &self,
        method: Method,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ApiError> {
        let body = serde_json::to_vec(body).map_err(ApiError::internal)?;
        let (_, _, answer) = self
            .send(
                method,
                path,
                &[("content-type", "application/json".into())],
                body,
            )
            .await?;
        serde_json::from_slice(&answer)
            .map_err(|e| ApiError::new(502, format!("bad answer from {}: {e}", self.what)))
    }
}

/// How the control plane reaches a worker.
pub enum WorkerKind {
    /// Same process.
    Local(Arc<Worker>),
    /// A `stasis worker run` process.
    Remote(Box<Peer>),
}

/// A worker known to the control plane.
pub struct WorkerEntry {
    /// The worker's name.
    pub name: String,
    /// How to reach it.
    pub kind: WorkerKind,
    /// Which admission this is (0 for in-process workers; each join of a
    /// remote worker gets a new number).
    pub incarnation: u64,
    state: Mutex<WorkerState>,
    last_heartbeat: Mutex<Instant>,
}

fn actor_path(actor: &str, op: &str) -> String {
    if op.is_empty() {
        format!("/internal/v1/actors/{actor}")
    } else {
        format!("/internal/v1/actors/{actor}/{op}")
    }
}

impl WorkerEntry {
    /// An in-process worker.
    #[must_use]
    pub fn local(worker: Arc<Worker>) -> Self {
        Self::new(worker.name().to_owned(), WorkerKind::Local(worker), 0)
    }

    /// A remote worker at `address` (`host:port`).
    #[must_use]
    pub fn remote(name: &str, address: &str, token: Option<String>, incarnation: u64) -> Self {
        let peer = Peer::new(
            &format!("http://{address}"),
            token,
            &format!("worker {name}"),
        );
        Self::new(
            name.to_owned(),
            WorkerKind::Remote(Box::new(peer)),
            incarnation,
        )
    }

    fn new(name: String, kind: WorkerKind, incarnation: u64) -> Self {
        Self {
            name,
            kind,
            incarnation,
            state: Mutex::new(WorkerState::Ready),
            last_heartbeat: Mutex::new(Instant::now()),
        }
    }

    /// Its state.
    #[must_use]
    pub fn state(&self) -> WorkerState {
        *self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets its state.
    pub fn set_state(&self, state: WorkerState) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }

    /// Sets its state to `to` if it is `from`; whether it was.
    #[must_use]
    pub fn swap_state(&self, from: WorkerState, to: WorkerState) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let swapped = *state == from;
        if swapped {
            *state = to;
        }
        swapped
    }

    /// Records a heartbeat now.
    pub fn heartbeat(&self) {
        *self
            .last_heartbeat
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// Time since the last heartbeat (zero for in-process workers).
    #[must_use]
    pub fn silence(&self) -> Duration {
        match self.kind {
            WorkerKind::Local(_) => Duration::ZERO,
            WorkerKind::Remote(_) => self
                .last_heartbeat
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .elapsed(),
        }
    }

    /// `in-process`, or the remote base URL.
    #[must_use]
    pub fn address(&self) -> String {
        match &self.kind {
            WorkerKind::Local(_) => "in-process".to_owned(),
            WorkerKind::Remote(peer) => peer.base().trim_start_matches("http://").to_owned(),
        }
    }

    /// Creates an actor (first instance, snapshot seq 0).
    ///
    /// # Errors
    /// The worker's failure.
    pub async fn create(
        &self,
        local: impl FnOnce() -> Result<ActorSpec, ApiError>,
        remote: RemoteSpec,
        name: &str,
    ) -> Result<SnapshotReport, ApiError> {
        match &self.kind {
            WorkerKind::Local(w) => w.create(&local()?, remote.epoch).await,
            WorkerKind::Remote(p) => {
                p.json(Method::POST, &actor_path(name, "create"), &remote)
                    .await
            }
        }
    }

    /// Installs an actor from snapshot bytes (see [`Worker::install`]).
    ///
    /// # Errors
    /// The worker's failure.
    pub async fn install(
        &self,
        local: impl FnOnce() -> Result<ActorSpec, ApiError>,
        remote: RemoteSpec,
        name: &str,
        bytes: Vec<u8>,
    ) -> Result<(), ApiError> {
        match &self.kind {
            WorkerKind::Local(w) => w
                .install(&local()?, remote.epoch, remote.seq, bytes, remote.resume)
                .await
                .map(|_| ()),
            WorkerKind::Remote(p) => {
                let spec = serde_json::to_string(&remote).map_err(ApiError::internal)?;
                p.send(
                    Method::POST,
                    &actor_path(name, "install"),
                    &[(SPEC_HEADER, spec)],
                    bytes,
                )
                .await
                .map(|_| ())
            }
        }
    }

    /// Hands a request to the actor. When `gone` is cancelled first, a
    /// local worker gives the request up unless the guest runs it (see
    /// [`crate::client`]); the forward to a remote worker is dropped, so
    /// that worker's serving loop sees its client leave and decides the
    /// same way.
    ///
    /// # Errors
    /// The actor's, guest's or transport's failure;
    /// [`crate::client::ABANDONED`] when the client left first.
    pub async fn call(
        &self,
        actor: &str,
        epoch: u64,
        request: Request,
        gone: &ClientGone,
    ) -> Result<Response, ApiError> {
        match &self.kind {
            WorkerKind::Local(w) => w.call(actor, epoch, request, gone).await,
            WorkerKind::Remote(p) => {
                let body = stasis_host_api::encode_request(&request)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                let path = actor_path(actor, "call");
                let headers = [(EPOCH_HEADER, epoch.to_string())];
                let forward = p.send(Method::POST, &path, &headers, body);
                let (_, _, answer) = client::unless_gone(gone, actor, forward).await?;
                stasis_host_api::decode_response(&answer)
                    .map_err(|e| ApiError::new(502, format!("worker {}: {e}", self.name)))
            }
        }
    }

    /// Pauses the actor.
    ///
    /// # Errors
    /// The worker's failure.
    pub async fn pause(&self, actor: &str) -> Result<SnapshotReport, ApiError> {
        match &self.kind {
            WorkerKind::Local(w) => w.pause(actor).await,
            WorkerKind::Remote(p) => p.json(Method::POST, &actor_path(actor, "pause"), &()).await,
        }
    }

    /// Checkpoints the actor.
    ///
    /// # Errors
    /// The worker's failure.
    pub async fn checkpoint(&self, actor: &str) -> Result<SnapshotReport, ApiError> {
        match &self.kind {
            WorkerKind::Local(w) => w.checkpoint(actor).await,
            WorkerKind::Remote(p) => {
                p.json(Method::POST, &actor_path(actor, "checkpoint"), &())
                    .await
            }
        }
    }

    /// Resumes the actor.
    ///
    /// # Errors
    /// The worker's failure.
    pub async fn resume(&self, actor: &str, from: ResumeFrom) -> Result<(), ApiError> {
        match &self.kind {
            WorkerKind::Local(w) => w.resume(actor, from).await,
            WorkerKind::Remote(p) => {
                let body = ResumeRequest::from(from);
                let _: serde_json::Value = p
                    .json(Method::POST, &actor_path(actor, "resume"), &body)
                    .await?;
                Ok(())
            }
        }
    }

    /// Captures the actor for a move.
    ///
    /// # Errors
    /// The worker's failure.
    pub async fn capture(&self, actor: &str) -> Result<Captured, ApiError> {
        match &self.kind {
            WorkerKind::Local(w) => w.capture(actor).await,
            WorkerKind::Remote(p) => {
                let (_, headers, body) = p
                    .send(Method::POST, &actor_path(actor, "capture"), &[], Vec::new())
                    .await?;
                let seq = headers
                    .get(SEQ_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| {
                        ApiError::new(502, format!("worker {} sent no {SEQ_HEADER}", self.name))
                    })?;
                let live = headers
                    .get(LIVE_HEADER)
                    .is_some_and(|v| v.as_bytes() == b"true");
                Ok(Captured {
                    bytes: body.to_vec(),
                    seq,
                    live,
                })
            }
        }
    }

    /// Ends a rolled-back move on the source.
    pub async fn cancel_move(&self, actor: &str) {
        match &self.kind {
            WorkerKind::Local(w) => w.cancel_move(actor).await,
            WorkerKind::Remote(p) => {
                let _ = p
                    .send(
                        Method::POST,
                        &actor_path(actor, "cancel-move"),
                        &[],
                        Vec::new(),
                    )
                    .await;
            }
        }
    }

    /// Stops hosting the actor. A remote worker also deletes its local copy
    /// of the actor's snapshots (the control plane's store keeps them).
    pub async fn remove(&self, actor: &str) {
        match &self.kind {
            WorkerKind::Local(w) => w.remove(actor).await,
            WorkerKind::Remote(p) => {
                if let Err(e) = p
                    .send(Method::DELETE, &actor_path(actor, ""), &[], Vec::new())
                    .await
                {
                    tracing::warn!(worker = %self.name, actor, "remove failed: {e}");
                }
            }
        }
    }

    /// The actor's status on this worker.
    ///
    /// # Errors
    /// 404 if it does not host the actor; 503 if unreachable.
    pub async fn status(&self, actor: &str) -> Result<ActorStatus, ApiError> {
        match &self.kind {
            WorkerKind::Local(w) => w.status(actor).ok_or_else(|| {
                ApiError::not_found(format!("actor {actor} is not on worker {}", self.name))
            }),
            WorkerKind::Remote(p) => {
                if self.state() == WorkerState::Lost {
                    return Err(ApiError::unavailable(format!(
                        "worker {} is lost",
                        self.name
                    )));
                }
                let (_, _, body) = p
                    .send_within(
                        STATUS_TIMEOUT,
                        Method::GET,
                        &actor_path(actor, ""),
                        &[],
                        Vec::new(),
                    )
                    .await?;
                serde_json::from_slice(&body).map_err(|e| ApiError::new(502, e.to_string()))
            }
        }
    }

    /// Statuses of every actor it hosts (empty if unreachable).
    pub async fn statuses(&self) -> Vec<(String, ActorStatus)> {
        match &self.kind {
            WorkerKind::Local(w) => w.statuses(),
            WorkerKind::Remote(_) if self.state() == WorkerState::Lost => Vec::new(),
            WorkerKind::Remote(p) => match p
                .send_within(
                    STATUS_TIMEOUT,
                    Method::GET,
                    "/internal/v1/actors",
                    &[],
                    Vec::new(),
                )
                .await
            {
                Ok((_, _, body)) => serde_json::from_slice(&body).unwrap_or_default(),
                Err(_) => Vec::new(),
            },
        }
    }
}

/// What the control plane tells a joining worker: the settings every worker
/// of the cluster must share (the engine's limits in particular: a snapshot
/// must restore on any worker).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinAnswer {
    /// Heartbeat timeout T, ms: heartbeat every T/4; stop serving after T
    /// without an answer.
    pub heartbeat_timeout_ms: u64,
    /// Per-actor linear memory limit, bytes.
    pub max_memory: u64,
    /// CPU limit per request, ms.
    pub cpu_limit_ms: u64,
    /// Wall-clock limit per request, ms.
    pub request_timeout_ms: u64,
    /// Body limit, bytes.
    pub max_body: u64,
    /// Mailbox size per actor.
    pub max_held: usize,
    /// Hold timeout, ms.
    pub hold_timeout_ms: u64,
    /// Snapshots kept per actor.
    pub keep_snapshots: usize,
    /// Checkpoint after this many requests (0 = never).
    pub checkpoint_every: u64,
    /// Live instances per worker (`--max-live`).
    #[serde(default)]
    pub max_live: Option<usize>,
}

/// What a worker sends to join.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinRequest {
    /// Worker name (an RFC 1123 label).
    pub name: String,
    /// Where its internal API listens (`host:port`).
    pub address: String,
}
