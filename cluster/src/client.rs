//! The client half of the worker protocol: [`Peer`] (the shared HTTP
//! client core with the cluster's error conventions) and [`WorkerClient`],
//! the [`WorkerApi`] of a `stasis worker run` process.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use hyper::Method;
use serde::{Deserialize, Serialize};
use stasis_host_api::{Request, Response};

use stasis_contract::alarm::AlarmOutcome;
use stasis_contract::client_gone::ClientGone;
use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::logs::{LogLine, LogQuery};
use stasis_contract::proto::{
    CALL_HEADER, CONNECT_TIMEOUT, EPOCH_HEADER, EventNote, InstallSpec, LIVE_HEADER, Op,
    PEER_TIMEOUT, ResumeRequest, SEQ_HEADER, SPEC_HEADER, STATUS_TIMEOUT, WorkerPath,
};
use stasis_contract::status::{ActorStatus, Captured, Created, ResumeFrom, SnapshotReport};
use stasis_contract::worker_api::{HostSpec, Location, WorkerApi};
use stasis_host_api::sockets::SocketEvent;
use stasis_http::client::{Answer, HttpClient, Unanswered};
use stasis_http::mtls::InternalTls;

/// An HTTP client for one peer of the cluster (a worker, or the control
/// plane): a non-2xx answer becomes the [`ApiError`] it carries, a peer
/// that does not answer a 503 naming it.
#[derive(Debug, Clone)]
pub struct Peer {
    http: HttpClient,
    what: String,
}

impl Peer {
    /// A client for `base` (e.g. `http://127.0.0.1:7071`), named `what` in
    /// errors, sending `token` as a bearer token.
    ///
    /// # Errors
    /// 400 if the token cannot be a header value.
    pub fn new(base: &str, token: Option<&str>, what: &str) -> Result<Self, ApiError> {
        Self::with_identity(base, token, what, None)
    }

    /// [`Peer::new`] with mutual TLS for an `https://` base: this process
    /// presents its certificate and accepts the peer's only from the
    /// internal CA (see [`stasis_http::mtls`]).
    ///
    /// # Errors
    /// As [`Peer::new`].
    pub fn with_identity(
        base: &str,
        token: Option<&str>,
        what: &str,
        identity: Option<&InternalTls>,
    ) -> Result<Self, ApiError> {
        Ok(Self {
            http: HttpClient::with_identity(base, token, CONNECT_TIMEOUT, identity)?,
            what: what.to_owned(),
        })
    }

    /// The base URL.
    #[must_use]
    pub fn base(&self) -> &str {
        self.http.base()
    }

    /// Sends a request and waits at most [`PEER_TIMEOUT`].
    ///
    /// # Errors
    /// The peer's error answer; 503 if it does not answer.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Answer, ApiError> {
        self.send_within(PEER_TIMEOUT, method, path, headers, body)
            .await
    }

    /// [`Peer::send`] with its own bound on the exchange.
    ///
    /// # Errors
    /// As [`Peer::send`].
    pub async fn send_within(
        &self,
        timeout: Duration,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Answer, ApiError> {
        self.exchange(timeout, method, path, headers, body, false)
            .await
    }

    /// [`Peer::send`] of a delivery to an actor (a request, an alarm, a
    /// socket event), which is not safe to send twice: a connection that
    /// breaks off or an answer that does not come after the delivery was
    /// sent is a 500 saying it may or may not have been applied, never a
    /// 503 that a client would read as "not applied, try again". A
    /// connection refused is still [`ErrorKind::Unreachable`] (never
    /// delivered: held and sent again).
    ///
    /// # Errors
    /// As [`Peer::send`], with that difference.
    pub async fn deliver(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Answer, ApiError> {
        self.exchange(PEER_TIMEOUT, Method::POST, path, headers, body, true)
            .await
    }

    async fn exchange(
        &self,
        timeout: Duration,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
        delivery: bool,
    ) -> Result<Answer, ApiError> {
        self.http
            .exchange(method, path, headers, body, Some(timeout))
            .await
            .map_err(|e| {
                let message = format!(
                    "{} unreachable ({}): {}{e}",
                    self.what,
                    self.base(),
                    tls_failure(self.base(), &e)
                );
                match e {
                    // Refused before anything was sent: nothing ran there.
                    Unanswered::Connect(_) => ApiError::new(ErrorKind::Unreachable, message),
                    _ if delivery => ApiError::internal(format!(
                        "{message}; the delivery was sent, so it may or may not have been applied"
                    )),
                    _ => ApiError::unavailable(message),
                }
            })?
            .success()
            .map_err(|e| {
                // An answer was delivered: whatever the far side could not
                // reach, this request reached it.
                if e.is(ErrorKind::Unreachable) {
                    ApiError::unavailable(e.message())
                } else {
                    e
                }
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
        let answer = self
            .send(
                method,
                path,
                &[("content-type", "application/json")],
                body.into(),
            )
            .await?;
        self.decode(&answer.body)
    }

    fn decode<T: for<'de> Deserialize<'de>>(&self, body: &[u8]) -> Result<T, ApiError> {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_gateway(format!("bad answer from {}: {e}", self.what)))
    }
}

/// What a failure to reach an `https://` peer says first when its TLS
/// handshake failed: a certificate the other side refused, or one from
/// another CA.
fn tls_failure(base: &str, e: &Unanswered) -> &'static str {
    let text = e.to_string().to_lowercase();
    if !base.starts_with("https://") {
        ""
    } else if text.contains("certificate") || text.contains("alert") {
        "TLS handshake failed (do both sides have certificates from the same --internal-ca?): "
    } else if text.contains("corrupt message") {
        "TLS handshake failed (does the peer serve TLS, with --internal-ca?): "
    } else {
        ""
    }
}

/// The [`WorkerApi`] of a remote worker, over its internal HTTP API.
pub struct WorkerClient {
    name: String,
    address: String,
    peer: Peer,
}

impl WorkerClient {
    /// A client of worker `name` at `address` (`host:port`), sending
    /// `token` as a bearer token; over mutual TLS (`https://`) with
    /// `identity`, else plain HTTP.
    ///
    /// # Errors
    /// 400 if the token cannot be a header value.
    pub fn new(
        name: &str,
        address: &str,
        token: Option<&str>,
        identity: Option<&InternalTls>,
    ) -> Result<Self, ApiError> {
        let scheme = if identity.is_some() { "https" } else { "http" };
        // Its certificate must name it: another of the CA's cannot
        // stand in for it.
        let identity = identity
            .map(|i| i.for_peer(name))
            .transpose()
            .map_err(ApiError::bad_request)?;
        let identity = identity.as_ref();
        Ok(Self {
            name: name.to_owned(),
            address: address.to_owned(),
            peer: Peer::with_identity(
                &format!("{scheme}://{address}"),
                token,
                &format!("worker {name}"),
                identity,
            )?,
        })
    }

    async fn op(&self, actor: &str, op: Op, headers: &[(&str, &str)]) -> Result<Answer, ApiError> {
        let path = WorkerPath::Op(actor, Ok(op)).to_path();
        self.peer
            .send(Method::POST, &path, headers, Bytes::new())
            .await
    }

    async fn json_op<T: for<'de> Deserialize<'de>>(
        &self,
        actor: &str,
        op: Op,
        body: &impl Serialize,
    ) -> Result<T, ApiError> {
        let path = WorkerPath::Op(actor, Ok(op)).to_path();
        self.peer.json(Method::POST, &path, body).await
    }
}

#[async_trait]
impl WorkerApi for WorkerClient {
    fn name(&self) -> &str {
        &self.name
    }

    fn location(&self) -> Location {
        Location::Remote(self.address.clone())
    }

    async fn create(&self, actor: &str, spec: &HostSpec) -> Result<Created, ApiError> {
        self.json_op(actor, Op::Create, spec).await
    }

    async fn install(
        &self,
        actor: &str,
        spec: &HostSpec,
        seq: u64,
        bytes: Option<Bytes>,
        resume: bool,
    ) -> Result<(), ApiError> {
        let spec = InstallSpec {
            host: spec.clone(),
            seq,
            resume,
        };
        let spec = serde_json::to_string(&spec).map_err(ApiError::internal)?;
        let path = WorkerPath::Op(actor, Ok(Op::Install)).to_path();
        self.peer
            .send(
                Method::POST,
                &path,
                &[(SPEC_HEADER, &spec)],
                bytes.unwrap_or_default(),
            )
            .await
            .map(|_| ())
    }

    async fn call(
        &self,
        actor: &str,
        epoch: u64,
        request: Arc<Request>,
        gone: &ClientGone,
    ) -> Result<Response, ApiError> {
        let body = stasis_host_api::encode_request(&request)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let path = WorkerPath::Op(actor, Ok(Op::Call)).to_path();
        let epoch = epoch.to_string();
        let call = call_id();
        let headers = [(EPOCH_HEADER, epoch.as_str()), (CALL_HEADER, call.as_str())];
        let forward = self.peer.deliver(&path, &headers, body.into());
        tokio::pin!(forward);
        let answer = tokio::select! {
            biased;
            answer = &mut forward => answer,
            () = gone.cancelled() => {
                // The client left. The worker decides: it drops the call
                // unless the guest already runs it, and the call's answer
                // says which (ABANDONED, or the response, counted with its
                // status), so that only requests that never ran count as
                // abandoned. A worker that cannot be told (frozen,
                // unreachable) is not waited for: the forward is dropped
                // (which gives the call up too, once the worker sees the
                // connection close), releasing the actor's gate, and the
                // outcome is unknown.
                let abandon = WorkerPath::Op(actor, Ok(Op::Abandon)).to_path();
                let notice = [(CALL_HEADER, call.as_str())];
                match self
                    .peer
                    .send_within(STATUS_TIMEOUT, Method::POST, &abandon, &notice, Bytes::new())
                    .await
                {
                    Ok(_) => forward.await,
                    Err(e) => Err(ApiError::new(
                        ErrorKind::OutcomeUnknown,
                        format!(
                            "the client left and worker {} could not be told: {}",
                            self.name, e.message()
                        ),
                    )),
                }
            }
        }?;
        stasis_host_api::decode_response(&answer.body)
            .map_err(|e| ApiError::bad_gateway(format!("worker {}: {e}", self.name)))
    }

    async fn alarm(
        &self,
        actor: &str,
        epoch: u64,
        setter: Option<&str>,
    ) -> Result<AlarmOutcome, ApiError> {
        let path = WorkerPath::Op(actor, Ok(Op::Alarm)).to_path();
        let epoch = epoch.to_string();
        let mut headers = vec![(EPOCH_HEADER, epoch.as_str())];
        if let Some(setter) = setter {
            headers.push((stasis_contract::trace::TRACEPARENT, setter));
        }
        let answer = self.peer.deliver(&path, &headers, Bytes::new()).await?;
        serde_json::from_slice(&answer.body).map_err(|e| {
            ApiError::bad_gateway(format!("worker {}: bad alarm answer: {e}", self.name))
        })
    }

    async fn socket_event(
        &self,
        actor: &str,
        epoch: u64,
        event: SocketEvent,
    ) -> Result<(), ApiError> {
        let path = WorkerPath::Op(actor, Ok(Op::SocketEvent)).to_path();
        let epoch = epoch.to_string();
        let body = stasis_host_api::sockets::encode_event(&event).map_err(|e| {
            ApiError::new(stasis_contract::error::ErrorKind::TooLarge, e.to_string())
        })?;
        self.peer
            .deliver(&path, &[(EPOCH_HEADER, epoch.as_str())], Bytes::from(body))
            .await
            .map(|_| ())
    }

    async fn pause(&self, actor: &str) -> Result<SnapshotReport, ApiError> {
        self.json_op(actor, Op::Pause, &()).await
    }

    async fn checkpoint(&self, actor: &str) -> Result<SnapshotReport, ApiError> {
        self.json_op(actor, Op::Checkpoint, &()).await
    }

    async fn resume(&self, actor: &str, from: ResumeFrom) -> Result<(), ApiError> {
        let _: serde_json::Value = self
            .json_op(actor, Op::Resume, &ResumeRequest::from(from))
            .await?;
        Ok(())
    }

    async fn capture(&self, actor: &str) -> Result<Captured, ApiError> {
        let answer = self.op(actor, Op::Capture, &[]).await?;
        let seq = answer
            .header(SEQ_HEADER)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                ApiError::bad_gateway(format!("worker {} sent no {SEQ_HEADER}", self.name))
            })?;
        let live = answer.header(LIVE_HEADER) == Some("true");
        Ok(Captured { seq, live })
    }

    async fn cancel_move(&self, actor: &str) {
        let _ = self.op(actor, Op::CancelMove, &[]).await;
    }

    async fn event(&self, actor: &str, text: &str) -> Result<(), ApiError> {
        let note = EventNote {
            text: text.to_owned(),
        };
        let _: serde_json::Value = self.json_op(actor, Op::Event, &note).await?;
        Ok(())
    }

    async fn hand_over(
        &self,
        actor: &str,
        spec: &HostSpec,
        seq: u64,
    ) -> Result<SnapshotReport, ApiError> {
        let spec = InstallSpec {
            host: spec.clone(),
            seq,
            resume: true,
        };
        self.json_op(actor, Op::HandOver, &spec).await
    }

    async fn remove(&self, actor: &str) {
        let path = WorkerPath::Actor(actor).to_path();
        if let Err(e) = self
            .peer
            .send(Method::DELETE, &path, &[], Bytes::new())
            .await
        {
            tracing::warn!(worker = %self.name, actor, "remove failed: {e}");
        }
    }

    async fn status(&self, actor: &str) -> Result<ActorStatus, ApiError> {
        let path = WorkerPath::Actor(actor).to_path();
        let answer = self
            .peer
            .send_within(STATUS_TIMEOUT, Method::GET, &path, &[], Bytes::new())
            .await?;
        self.peer.decode(&answer.body)
    }

    async fn logs(&self, actor: &str, query: &LogQuery) -> Result<Vec<LogLine>, ApiError> {
        let path = WorkerPath::Op(actor, Ok(Op::Logs)).to_path();
        let body = serde_json::to_vec(query).map_err(ApiError::internal)?;
        let wait = query.wait().unwrap_or_default();
        let answer = self
            .peer
            .send_within(
                STATUS_TIMEOUT + wait,
                Method::POST,
                &path,
                &[("content-type", "application/json")],
                body.into(),
            )
            .await?;
        self.peer.decode(&answer.body)
    }

    async fn statuses(&self) -> Result<Vec<(String, ActorStatus)>, ApiError> {
        let path = WorkerPath::Actors.to_path();
        let answer = self
            .peer
            .send_within(STATUS_TIMEOUT, Method::GET, &path, &[], Bytes::new())
            .await?;
        serde_json::from_slice(&answer.body).map_err(|e| {
            ApiError::bad_gateway(format!("worker {}: bad actor list: {e}", self.name()))
        })
    }

    /// One `POST` of the names to the actors' path: the worker answers the
    /// statuses of those it hosts.
    async fn statuses_of(&self, names: &[String]) -> Result<Vec<(String, ActorStatus)>, ApiError> {
        let path = WorkerPath::Actors.to_path();
        let body = Bytes::from(serde_json::to_vec(names).map_err(ApiError::internal)?);
        let answer = match self
            .peer
            .send_within(STATUS_TIMEOUT, Method::POST, &path, &[], body)
            .await
        {
            Ok(answer) => answer,
            // A worker of an earlier version has no such route: all its
            // statuses, then.
            Err(e) if e.is(ErrorKind::MethodNotAllowed) || e.is(ErrorKind::NotFound) => {
                let all = self.statuses().await?;
                return Ok(stasis_contract::worker_api::statuses_among(all, names));
            }
            Err(e) => return Err(e),
        };
        serde_json::from_slice(&answer.body).map_err(|e| {
            ApiError::bad_gateway(format!("worker {}: bad actor list: {e}", self.name()))
        })
    }
}

/// A call id unique among the calls any worker receives: this process's
/// random key and a counter.
fn call_id() -> String {
    use std::hash::BuildHasher as _;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static KEY: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let key = KEY.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0_u8));
    format!("{key:016x}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// How a control plane reaches a joining remote worker: a
/// [`WorkerClient`] presenting the cluster's bearer token, and its
/// certificate over mutual TLS when the cluster has an internal CA.
pub struct Connector {
    token: Option<String>,
    identity: Option<Arc<InternalTls>>,
}

impl Connector {
    /// Clients that present `token` (the internal or admin token, if any)
    /// and, with `identity`, reach workers over mutual TLS.
    #[must_use]
    pub fn new(token: Option<String>, identity: Option<Arc<InternalTls>>) -> Self {
        Self { token, identity }
    }
}

impl stasis_contract::worker_api::ConnectWorker for Connector {
    fn connect(&self, name: &str, address: &str) -> Result<Arc<dyn WorkerApi>, ApiError> {
        Ok(Arc::new(WorkerClient::new(
            name,
            address,
            self.token.as_deref(),
            self.identity.as_deref(),
        )?))
    }
}
