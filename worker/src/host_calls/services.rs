//! One actor's host services ([`ActorHostServices`]): the
//! [`ActorServices`] its instances call, knowing the actor's name and the
//! chain of callers and deadline of the request it is running
//! ([`ActorHostServices::begin`]).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use stasis_contract::sockets::{SocketAnswer, SocketOp};
use stasis_core::host::{ActorServices, ServiceError, ServiceFuture, SocketTarget};
use stasis_core::journal::Durable;
use stasis_host_api::imports::HostError;
use stasis_host_api::{Request, Response};

use opentelemetry::trace::{SpanContext, SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};
use stasis_contract::control_api::ControlApi;
use stasis_contract::headers::is_host_only;
use stasis_contract::trace;

use super::{CALL_CHAIN_HEADER, HostCalls, count};
use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::headers::CALLER_HEADER;
use stasis_contract::names::{call_target, namespace_of};

/// The request an actor is running: who waits on it, until when, and the
/// span its host calls are children of.
#[derive(Debug, Clone)]
struct Scope {
    /// Callers outermost first, then the actor itself.
    chain: Vec<String>,
    deadline: Instant,
    /// The delivery's span (see [`stasis_contract::trace`]).
    trace: SpanContext,
}

/// A call's or message's request as it leaves: the request, where it goes
/// through, its deadline, and its span.
type Prepared = (Request, Arc<dyn ControlApi>, Instant, Context);

/// One actor's [`ActorServices`] (see the module docs).
pub struct ActorHostServices {
    actor: String,
    calls: Arc<HostCalls>,
    scope: Mutex<Scope>,
    /// The current delivery's socket writes, held for the output gate.
    outbox: Arc<Mutex<Outbox>>,
    /// The task that releases them in order (started at the first).
    flusher: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<Released>>,
}

/// One delivery's socket writes, and the host's list of the actor's
/// sockets as fetched for it.
#[derive(Default)]
struct Outbox {
    ops: Vec<SocketOp>,
    known: Option<SocketAnswer>,
}

/// A delivery's socket writes with the gate they wait for.
type Released = (Option<Durable>, Vec<SocketOp>);

/// Releases each delivery's socket writes once its gate resolves, in
/// delivery order.
async fn flush(
    actor: String,
    control: Arc<dyn ControlApi>,
    mut released: tokio::sync::mpsc::UnboundedReceiver<Released>,
) {
    while let Some((gate, ops)) = released.recv().await {
        if let Some(gate) = gate
            && let Err(e) = gate.wait().await
        {
            tracing::warn!(
                actor,
                "socket writes dropped: their effect is not durable: {e}"
            );
            continue;
        }
        for op in ops {
            if let Err(e) = control.socket(&actor, op).await {
                tracing::debug!(actor, "a socket write was not delivered: {}", e.message());
            }
        }
    }
}

impl std::fmt::Debug for ActorHostServices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActorHostServices")
            .field("actor", &self.actor)
            .finish_non_exhaustive()
    }
}

/// The chain of callers a request carries (empty for one from outside).
#[must_use]
pub fn chain_of(request: &Request) -> Vec<String> {
    request
        .header(CALL_CHAIN_HEADER)
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn ready<T: Send + 'static>(result: Result<T, ServiceError>) -> ServiceFuture<T> {
    Box::pin(std::future::ready(result))
}

impl ActorHostServices {
    /// The full name actor `name` stands for, called from this actor
    /// ([`call_target`]); the callee takes the call only if its policy lets
    /// this namespace in (checked by the control plane). `None` for
    /// anything else.
    fn target(&self, name: &str) -> Option<String> {
        call_target(namespace_of(&self.actor), name)
    }

    /// The services of `actor`, sharing `calls` with its worker.
    #[must_use]
    pub fn new(actor: &str, calls: Arc<HostCalls>) -> Arc<Self> {
        Arc::new(Self {
            actor: actor.to_owned(),
            scope: Mutex::new(Scope {
                chain: vec![actor.to_owned()],
                deadline: Instant::now() + calls.request_timeout,
                trace: SpanContext::empty_context(),
            }),
            calls,
            outbox: Arc::default(),
            flusher: std::sync::OnceLock::new(),
        })
    }

    fn scope(&self) -> Scope {
        self.scope.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Called before the guest runs `request` (or, with `None`, a hook):
    /// its chain of callers is the request's plus this actor, its deadline
    /// the request timeout from now, and `trace` (the delivery's span) the
    /// parent of its calls' and messages' spans.
    pub fn begin(&self, request: Option<&Request>, trace: SpanContext) {
        let mut chain = request.map(chain_of).unwrap_or_default();
        chain.push(self.actor.clone());
        *self.scope.lock().unwrap_or_else(|p| p.into_inner()) = Scope {
            chain,
            deadline: Instant::now() + self.calls.request_timeout,
            trace,
        };
        // A new delivery: the list of sockets is fetched afresh, and
        // writes of a failed one are gone.
        *self.outbox() = Outbox::default();
    }

    /// Checks the target and body, and gives the request to send with the
    /// chain set (for a call; none for a message) and its span
    /// (`stasis.call` or `stasis.send`) as the callee's parent, the router,
    /// the deadline, and the span.
    fn prepare(
        &self,
        actor: &str,
        mut request: Request,
        check_loop: bool,
    ) -> Result<Prepared, ServiceError> {
        let scope = self.scope();
        let Some(actor) = &self.target(actor) else {
            return Err(ServiceError::new(
                HostError::NotFound,
                format!(
                    "{actor:?} is not an actor name (NAME for an actor of this namespace, \
                     NAME.NAMESPACE for another namespace's)"
                ),
            ));
        };
        if check_loop && scope.chain.iter().any(|a| a == actor) {
            return Err(ServiceError::new(
                HostError::LoopDetected,
                format!(
                    "calling {actor} from {} would wait on itself (chain: {} -> {actor})",
                    self.actor,
                    scope.chain.join(" -> ")
                ),
            ));
        }
        if request.body.len() > self.calls.max_body {
            return Err(ServiceError::new(
                HostError::TooLarge,
                format!(
                    "request body of {} bytes exceeds --max-body ({} bytes)",
                    request.body.len(),
                    self.calls.max_body
                ),
            ));
        }
        let router = self.calls.control().cloned().ok_or_else(|| {
            ServiceError::new(
                HostError::Unavailable,
                "this worker has no route to other actors",
            )
        })?;
        // The host-only headers are the host's to set, never a guest's.
        request.headers.retain(|(name, _)| !is_host_only(name));
        request
            .headers
            .push((CALLER_HEADER.to_owned(), self.actor.clone().into_bytes()));
        // A message's handler has no caller waiting on it: it starts a
        // chain of its own.
        if check_loop {
            request.headers.push((
                CALL_CHAIN_HEADER.to_owned(),
                scope.chain.join(",").into_bytes(),
            ));
        }
        let (name, kind) = if check_loop {
            ("stasis.call", SpanKind::Client)
        } else {
            ("stasis.send", SpanKind::Producer)
        };
        let tracer = trace::tracer();
        let span = tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes([
                KeyValue::new("stasis.actor", self.actor.clone()),
                KeyValue::new("stasis.callee", actor.to_owned()),
            ])
            .start_with_context(&tracer, &trace::under(&scope.trace));
        let cx = Context::new().with_span(span);
        trace::inject(&cx, &mut request.headers);
        Ok((request, router, scope.deadline, cx))
    }
}

/// Runs `work` until `deadline`.
async fn until<T>(
    deadline: Instant,
    what: &str,
    work: impl Future<Output = Result<T, ServiceError>>,
) -> Result<T, ServiceError> {
    match tokio::time::timeout_at(deadline.into(), work).await {
        Ok(result) => result,
        Err(_) => Err(ServiceError::new(
            HostError::Deadline,
            format!("{what}: the request's time ran out first"),
        )),
    }
}

/// The error the guest gets for a routing failure: 404 is "no such actor",
/// anything else "unavailable".
fn routing_error(actor: &str, e: &ApiError) -> ServiceError {
    let kind = if e.is(ErrorKind::NotFound) {
        HostError::NotFound
    } else if e.is(ErrorKind::Forbidden) {
        // The callee's namespace does not take it (a message across
        // namespaces; a call answers 403 as the callee would).
        HostError::Refused
    } else {
        HostError::Unavailable
    };
    ServiceError::new(
        kind,
        format!("{actor}: {} ({})", e.message(), e.kind().status()),
    )
}

/// Ends a call's or message's span, with its error if it failed.
fn end_span<T>(cx: &Context, result: &Result<T, ServiceError>) {
    if let Err(e) = result {
        cx.span().set_status(Status::error(e.message.clone()));
    }
    cx.span().end();
}

fn outcome(result: &Result<impl Sized, ServiceError>) -> String {
    match result {
        Ok(_) => "ok".to_owned(),
        Err(e) => format!("{:?}", e.kind).to_ascii_lowercase(),
    }
}

impl ActorServices for ActorHostServices {
    fn call(&self, actor: String, request: Request) -> ServiceFuture<Response> {
        let metrics = self.calls.metrics.clone();
        let given = actor;
        let actor = self.target(&given).unwrap_or_else(|| given.clone());
        let (request, router, deadline, cx) = match self.prepare(&given, request, true) {
            Ok(prepared) => prepared,
            Err(e) => {
                count(&metrics.calls, &outcome(&Err::<(), _>(e.clone())));
                return ready(Err(e));
            }
        };
        Box::pin(async move {
            let work = async {
                match router.call(&actor, request).await {
                    Ok(response) => Ok(response),
                    // The callee exists but could not answer: the caller
                    // gets the answer an HTTP client would.
                    Err(e) if !e.is(ErrorKind::NotFound) => Ok(Response::text(
                        e.kind().status(),
                        format!("{}\n", e.message()),
                    )),
                    Err(e) => Err(routing_error(&actor, &e)),
                }
            };
            let result = until(deadline, &format!("call {actor}"), work).await;
            count(&metrics.calls, &outcome(&result));
            end_span(&cx, &result);
            result
        })
    }

    fn send(&self, actor: String, request: Request) -> ServiceFuture<()> {
        let metrics = self.calls.metrics.clone();
        let given = actor;
        let actor = self.target(&given).unwrap_or_else(|| given.clone());
        let (request, router, deadline, cx) = match self.prepare(&given, request, false) {
            Ok(prepared) => prepared,
            Err(e) => {
                metrics.sends_failed.inc();
                return ready(Err(e));
            }
        };
        Box::pin(async move {
            let work = async {
                router
                    .send(&actor, request)
                    .await
                    .map_err(|e| routing_error(&actor, &e))
            };
            let result = until(deadline, &format!("send to {actor}"), work).await;
            end_span(&cx, &result);
            match &result {
                Ok(()) => metrics.sends.inc(),
                Err(_) => metrics.sends_failed.inc(),
            };
            result
        })
    }

    fn set_alarm(&self, at_unix_ms: u64) -> ServiceFuture<()> {
        // The delivery's span: the alarm's span links to it.
        let setter = trace::traceparent(&self.scope().trace);
        self.with_alarms(move |alarms, actor| async move {
            alarms.set_alarm(&actor, at_unix_ms, setter).await
        })
    }

    fn cancel_alarm(&self) -> ServiceFuture<()> {
        self.with_alarms(|alarms, actor| async move { alarms.cancel_alarm(&actor).await })
    }

    fn alarm(&self) -> ServiceFuture<Option<u64>> {
        self.with_alarms(|alarms, actor| async move { alarms.alarm(&actor).await })
    }

    fn socket_send(&self, target: SocketTarget, data: Vec<u8>, text: bool) -> ServiceFuture<()> {
        let len = data.len();
        let socket = match target {
            SocketTarget::One(id) => Some(id),
            SocketTarget::All => None,
        };
        self.hold_socket_op(socket, Some(len), SocketOp::Send { target, data, text })
    }

    fn socket_close(&self, socket: u64, code: u16, reason: String) -> ServiceFuture<()> {
        let op = SocketOp::Close {
            socket,
            code,
            reason,
        };
        self.hold_socket_op(Some(socket), None, op)
    }

    fn sockets(&self) -> ServiceFuture<Vec<u64>> {
        self.with_sockets(SocketOp::List, |answer| answer.ids)
    }

    fn fetch(&self, mut request: Request) -> ServiceFuture<Response> {
        let (outbound, metrics) = (self.calls.outbound.clone(), self.calls.metrics.clone());
        let scope = self.scope();
        // A client span under the delivery, and its context on the request
        // (replacing a `traceparent` the guest copied from its own
        // request): the origin continues the trace under the fetch.
        let host = request
            .uri
            .parse::<hyper::Uri>()
            .ok()
            .and_then(|uri| uri.host().map(str::to_owned))
            .unwrap_or_default();
        let tracer = trace::tracer();
        let span = tracer
            .span_builder("stasis.fetch")
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new("stasis.actor", self.actor.clone()),
                KeyValue::new("http.request.method", request.method.clone()),
                KeyValue::new("server.address", host),
            ])
            .start_with_context(&tracer, &trace::under(&scope.trace));
        let cx = Context::new().with_span(span);
        trace::inject(&cx, &mut request.headers);
        Box::pin(async move {
            let result = outbound.fetch(request, scope.deadline).await;
            count(&metrics.fetches, &outcome(&result));
            if let Ok(response) = &result {
                cx.span().set_attribute(KeyValue::new(
                    "http.response.status_code",
                    i64::from(response.status),
                ));
            }
            end_span(&cx, &result);
            result
        })
    }
}

impl ActorHostServices {
    /// The actor's name.
    #[must_use]
    pub fn actor(&self) -> &str {
        &self.actor
    }

    /// Checks a write to the actor's sockets (`socket`: the one it names,
    /// `len`: a message's length) against the host's list, fetched once
    /// per delivery, and holds it until the delivery's effect is durable
    /// (the output gate: [`ActorHostServices::release_socket_ops`]).
    fn hold_socket_op(
        &self,
        socket: Option<u64>,
        len: Option<usize>,
        op: SocketOp,
    ) -> ServiceFuture<()> {
        let known = self.outbox().known.clone();
        let me = self.outbox.clone();
        let listed = match known {
            Some(known) => ready(Ok(known)),
            None => self.with_sockets(SocketOp::List, |answer| answer),
        };
        Box::pin(async move {
            let known = listed.await?;
            let mut outbox = me.lock().unwrap_or_else(|p| p.into_inner());
            let known = outbox.known.get_or_insert(known);
            if let Some(len) = len.filter(|&len| len > known.max_message) {
                return Err(ServiceError::new(
                    HostError::TooLarge,
                    format!(
                        "a message of {len} bytes is over --max-socket-message ({} bytes)",
                        known.max_message
                    ),
                ));
            }
            if let Some(id) = socket {
                // Closing a socket that is no longer open (its client
                // closed it, and this may be the handler of that close
                // event) does nothing.
                if !known.ids.contains(&id) && matches!(op, SocketOp::Close { .. }) {
                    return Ok(());
                }
                if !known.ids.contains(&id) {
                    return Err(ServiceError::new(
                        HostError::NotFound,
                        format!("no open socket {id}"),
                    ));
                }
                if matches!(op, SocketOp::Close { .. }) {
                    known.ids.retain(|&open| open != id);
                }
            }
            outbox.ops.push(op);
            Ok(())
        })
    }

    fn outbox(&self) -> std::sync::MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Releases the socket writes the delivery that just ran made, once
    /// `gate` (its effect's durability) resolves; in order with every
    /// earlier delivery's. A failed gate drops them: the effect they
    /// depend on may not survive, so no client is told of it.
    pub fn release_socket_ops(&self, gate: Option<Durable>) {
        let ops = std::mem::take(&mut self.outbox().ops);
        if ops.is_empty() {
            return;
        }
        let Some(control) = self.calls.control().cloned() else {
            return;
        };
        let sender = self.flusher.get_or_init(|| {
            let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
            tokio::spawn(flush(self.actor.clone(), control, receiver));
            sender
        });
        let _ = sender.send((gate, ops));
    }

    /// Drops the socket writes of a delivery that failed (its effect was
    /// rolled back).
    pub fn discard_socket_ops(&self) {
        self.outbox().ops.clear();
    }

    /// Carries out `op` on the actor's sockets through the control plane,
    /// under the current request's deadline, and gives `then` of its answer.
    fn with_sockets<T: Send + 'static>(
        &self,
        op: SocketOp,
        then: impl FnOnce(SocketAnswer) -> T + Send + 'static,
    ) -> ServiceFuture<T> {
        let Some(control) = self.calls.control().cloned() else {
            return ready(Err(ServiceError::new(
                HostError::NotEnabled,
                "sockets are not enabled on this worker (it has no control plane)",
            )));
        };
        let deadline = self.scope().deadline;
        let actor = self.actor.clone();
        Box::pin(async move {
            let work = async {
                match control.socket(&actor, op).await {
                    Ok(answer) => Ok(then(answer)),
                    Err(e) => {
                        let kind = match e.kind() {
                            ErrorKind::NotFound => HostError::NotFound,
                            ErrorKind::TooLarge => HostError::TooLarge,
                            ErrorKind::BadRequest => HostError::BadInput,
                            _ => HostError::Unavailable,
                        };
                        Err(ServiceError::new(kind, e.message().to_owned()))
                    }
                }
            };
            until(deadline, "socket", work).await
        })
    }

    /// Runs `work` with this worker's alarm router and the actor's name,
    /// under the current request's deadline; a routing failure is
    /// `Unavailable` to the guest.
    fn with_alarms<T, F, Fut>(&self, work: F) -> ServiceFuture<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<dyn ControlApi>, String) -> Fut,
        Fut: Future<Output = Result<T, ApiError>> + Send + 'static,
    {
        let Some(alarms) = self.calls.control().cloned() else {
            return ready(Err(ServiceError::new(
                HostError::NotEnabled,
                "alarms are not enabled on this worker (it has no control plane)",
            )));
        };
        let deadline = self.scope().deadline;
        let work = work(alarms, self.actor.clone());
        Box::pin(async move {
            let work = async {
                work.await.map_err(|e| {
                    ServiceError::new(
                        HostError::Unavailable,
                        format!("alarm: {} ({})", e.message(), e.kind().status()),
                    )
                })
            };
            until(deadline, "alarm", work).await
        })
    }
}
