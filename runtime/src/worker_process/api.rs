//! The worker API a `stasis worker run` process serves (see
//! [`stasis_contract::proto`]): authorization, the lease check, and each
//! route and actor operation handed to the [`Worker`](stasis_worker::Worker),
//! and the worker's own `GET /metrics`.

use std::sync::Arc;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};

use super::RemoteWorker;
use super::membership::lease_lost;
use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::proto::{
    CALL_HEADER, EPOCH_HEADER, EventNote, InstallSpec, LIVE_HEADER, Op, ResumeRequest, SEQ_HEADER,
    SPEC_HEADER, WorkerPath,
};
use stasis_contract::worker_api::HostSpec;
use stasis_http::auth::authorize;
use stasis_http::serve::{
    Body, ClientCertified, METRICS_CONTENT_TYPE, collect_body, json, json_error, text,
};
use stasis_http::subject::CertRole;

impl RemoteWorker {
    pub(super) async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        if request.uri().path() == "/healthz" {
            return json(
                StatusCode::OK,
                &serde_json::json!({"worker": self.worker.name()}),
            );
        }
        if let Err(refused) = authorize(&request, self.token.as_deref()) {
            return *refused;
        }
        // Over mutual TLS the worker takes calls only from the control
        // plane's certificate: another worker's (of the same CA) never acts.
        if let Some(peer) = request.extensions().get::<ClientCertified>()
            && peer.cert_role() != Some(CertRole::Control)
        {
            return json_error(&ApiError::new(
                ErrorKind::Forbidden,
                format!(
                    "worker {} takes calls only from the control plane: this connection's client \
                     certificate is {} (issue the control plane's with `stasis ca issue --role \
                     control`)",
                    self.worker.name(),
                    match peer.cert_role() {
                        Some(CertRole::Worker) => "a worker's",
                        _ => "one without a role",
                    }
                ),
            ));
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
        if method == Method::GET && path == "/metrics" {
            let states = w.statuses().into_iter().map(|(_, s)| s.state);
            let body =
                self.metrics
                    .encode_at_scrape(states, w.held_requests(), w.store().used_bytes());
            return Ok(text(StatusCode::OK, body, METRICS_CONTENT_TYPE));
        }
        let route = WorkerPath::parse(&path);
        if let Some(WorkerPath::Actor(name) | WorkerPath::Op(name, _)) = route {
            stasis_contract::names::check_full_name("actor", name)?;
        }
        match (&method, route) {
            (&Method::GET, Some(WorkerPath::Actors)) => Ok(json(StatusCode::OK, &w.statuses())),
            (&Method::POST, Some(WorkerPath::Actors)) => {
                let names: Vec<String> = serde_json::from_slice(&body).map_err(|e| {
                    ApiError::bad_request(format!(
                        "the body is not a JSON list of actor names: {e}"
                    ))
                })?;
                Ok(json(StatusCode::OK, &w.statuses_of(&names)))
            }
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
        let w: &dyn stasis_contract::worker_api::WorkerApi = self.worker.as_ref();
        if matches!(op, Op::Create | Op::Install)
            && self.shutting_down.load(std::sync::atomic::Ordering::SeqCst)
        {
            // A move onto this worker rolls back; the actor stays put.
            return Err(ApiError::new(
                ErrorKind::Unavailable,
                format!(
                    "worker {} shutting down: it takes no actors",
                    self.worker.name()
                ),
            ));
        }
        match op {
            Op::Create => self.create(name, &body).await,
            Op::Install => self.install(name, &header, body).await,
            Op::Call => {
                let request = stasis_host_api::decode_request(&body)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                // Cancelled by `abandon` naming this call; and when the
                // router's forward is dropped, this serving loop drops the
                // call, which gives the request up too.
                let call = self.calls.enter(header(CALL_HEADER));
                let request = Arc::new(request);
                let response = w.call(name, epoch(&header)?, request, call.gone()).await?;
                let bytes =
                    stasis_host_api::encode_response(&response).map_err(ApiError::internal)?;
                Ok(Response::new(Body::new(Bytes::from(bytes))))
            }
            Op::Alarm => {
                let setter = header(stasis_contract::trace::TRACEPARENT);
                let outcome = w.alarm(name, epoch(&header)?, setter.as_deref()).await?;
                Ok(json(StatusCode::OK, &outcome))
            }
            Op::SocketEvent => {
                let event = stasis_host_api::sockets::decode_event(&body)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                w.socket_event(name, epoch(&header)?, event).await?;
                Ok(json(StatusCode::OK, &serde_json::json!({})))
            }
            Op::Abandon => {
                let id = header(CALL_HEADER)
                    .ok_or_else(|| ApiError::bad_request(format!("missing {CALL_HEADER}")))?;
                self.calls.abandon(&id);
                Ok(json(StatusCode::OK, &serde_json::json!({})))
            }
            Op::Logs => {
                let query: stasis_contract::logs::LogQuery = serde_json::from_slice(&body)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                Ok(json(StatusCode::OK, &w.logs(name, &query).await?))
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
                let mut response = Response::new(Body::new(Bytes::new()));
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
            Op::HandOver => {
                let spec: InstallSpec = serde_json::from_slice(&body)
                    .map_err(|e| ApiError::bad_request(format!("bad actor spec: {e}")))?;
                Ok(json(
                    StatusCode::OK,
                    &w.hand_over(name, &spec.host, spec.seq).await?,
                ))
            }
            Op::CancelMove => {
                w.cancel_move(name).await;
                Ok(json(StatusCode::OK, &serde_json::json!({})))
            }
            Op::Event => {
                let note: EventNote = serde_json::from_slice(&body)
                    .map_err(|e| ApiError::bad_request(format!("bad event: {e}")))?;
                w.event(name, &note.text).await?;
                Ok(json(StatusCode::OK, &serde_json::json!({})))
            }
        }
    }

    /// Creates actor `name` from the spec in `body`.
    async fn create(&self, name: &str, body: &[u8]) -> Result<Response<Body>, ApiError> {
        let spec: HostSpec = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("bad actor spec: {e}")))?;
        let w: &dyn stasis_contract::worker_api::WorkerApi = self.worker.as_ref();
        let started = std::time::Instant::now();
        let report = w.create(name, &spec).await?;
        tracing::debug!(
            target: "stasis_worker::timing",
            actor = name,
            total_ms = stasis_contract::status::ms(started.elapsed()),
            "create served"
        );
        Ok(json(StatusCode::OK, &report))
    }

    /// Installs actor `name` from the snapshot in `body` (or the shared
    /// store's, when `body` is empty) as the spec header says.
    async fn install(
        &self,
        name: &str,
        header: &impl Fn(&str) -> Option<String>,
        body: Bytes,
    ) -> Result<Response<Body>, ApiError> {
        let w: &dyn stasis_contract::worker_api::WorkerApi = self.worker.as_ref();
        let text = header(SPEC_HEADER)
            .ok_or_else(|| ApiError::bad_request(format!("missing {SPEC_HEADER}")))?;
        let spec: InstallSpec = serde_json::from_str(&text)
            .map_err(|e| ApiError::bad_request(format!("bad actor spec: {e}")))?;
        if let Some(delay) = self.install_delay {
            tracing::warn!("failpoint: install of {name} waits {delay:?}");
            tokio::time::sleep(delay).await;
        }
        let bytes = (!body.is_empty()).then_some(body);
        let started = std::time::Instant::now();
        w.install(name, &spec.host, spec.seq, bytes, spec.resume)
            .await?;
        tracing::debug!(
            target: "stasis_worker::timing",
            actor = name,
            total_ms = stasis_contract::status::ms(started.elapsed()),
            "install served"
        );
        Ok(json(StatusCode::OK, &w.status(name).await?))
    }
}

/// The placement epoch a delivery's header names.
///
/// # Errors
/// 400 when it is missing or not a number.
fn epoch(header: &impl Fn(&str) -> Option<String>) -> Result<u64, ApiError> {
    header(EPOCH_HEADER)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| ApiError::bad_request(format!("missing {EPOCH_HEADER}")))
}
