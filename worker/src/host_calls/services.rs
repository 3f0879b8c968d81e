//! One actor's host services ([`ActorHostServices`]): the
//! [`ActorServices`] its instances call, knowing the actor's name and the
//! chain of callers and deadline of the request it is running
//! ([`ActorHostServices::begin`]).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use stasis_contract::sockets::SocketOp;
use stasis_core::host::{ActorServices, ServiceError, ServiceFuture, SocketTarget};
use stasis_host_api::imports::HostError;
use stasis_host_api::{Request, Response};

use stasis_contract::control_api::ControlApi;
use stasis_contract::headers::is_host_only;

use super::{CALL_CHAIN_HEADER, HostCalls, count};
use stasis_contract::error::{ApiError, ErrorKind, is_label};

/// The request an actor is running: who waits on it, and until when.
#[derive(Debug, Clone)]
struct Scope {
    /// Callers outermost first, then the actor itself.
    chain: Vec<String>,
    deadline: Instant,
}

/// One actor's [`ActorServices`] (see the module docs).
pub struct ActorHostServices {
    actor: String,
    calls: Arc<HostCalls>,
    scope: Mutex<Scope>,
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
    /// The services of `actor`, sharing `calls` with its worker.
    #[must_use]
    pub fn new(actor: &str, calls: Arc<HostCalls>) -> Arc<Self> {
        Arc::new(Self {
            actor: actor.to_owned(),
            scope: Mutex::new(Scope {
                chain: vec![actor.to_owned()],
                deadline: Instant::now() + calls.request_timeout,
            }),
            calls,
        })
    }

    fn scope(&self) -> Scope {
        self.scope.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Called before the guest runs `request` (or, with `None`, a hook):
    /// its chain of callers is the request's plus this actor, its deadline
    /// the request timeout from now.
    pub fn begin(&self, request: Option<&Request>) {
        let mut chain = request.map(chain_of).unwrap_or_default();
        chain.push(self.actor.clone());
        *self.scope.lock().unwrap_or_else(|p| p.into_inner()) = Scope {
            chain,
            deadline: Instant::now() + self.calls.request_timeout,
        };
    }

    /// Checks the target and body, and gives the request to send with the
    /// chain set (for a call; none for a message), the router, and the
    /// deadline.
    fn prepare(
        &self,
        actor: &str,
        mut request: Request,
        check_loop: bool,
    ) -> Result<(Request, Arc<dyn ControlApi>, Instant), ServiceError> {
        let scope = self.scope();
        if !is_label(actor) {
            return Err(ServiceError::new(
                HostError::NotFound,
                format!("{actor:?} is not a valid actor name"),
            ));
        }
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
        // A message's handler has no caller waiting on it: it starts a
        // chain of its own.
        if check_loop {
            request.headers.push((
                CALL_CHAIN_HEADER.to_owned(),
                scope.chain.join(",").into_bytes(),
            ));
        }
        Ok((request, router, scope.deadline))
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
    } else {
        HostError::Unavailable
    };
    ServiceError::new(
        kind,
        format!("{actor}: {} ({})", e.message(), e.kind().status()),
    )
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
        let (request, router, deadline) = match self.prepare(&actor, request, true) {
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
            result
        })
    }

    fn send(&self, actor: String, request: Request) -> ServiceFuture<()> {
        let metrics = self.calls.metrics.clone();
        let (request, router, deadline) = match self.prepare(&actor, request, false) {
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
            match &result {
                Ok(()) => metrics.sends.inc(),
                Err(_) => metrics.sends_failed.inc(),
            };
            result
        })
    }

    fn set_alarm(&self, at_unix_ms: u64) -> ServiceFuture<()> {
        self.with_alarms(
            move |alarms, actor| async move { alarms.set_alarm(&actor, at_unix_ms).await },
        )
    }

    fn cancel_alarm(&self) -> ServiceFuture<()> {
        self.with_alarms(|alarms, actor| async move { alarms.cancel_alarm(&actor).await })
    }

    fn alarm(&self) -> ServiceFuture<Option<u64>> {
        self.with_alarms(|alarms, actor| async move { alarms.alarm(&actor).await })
    }

    fn socket_send(&self, target: SocketTarget, data: Vec<u8>, text: bool) -> ServiceFuture<()> {
        self.with_sockets(SocketOp::Send { target, data, text }, |_| ())
    }

    fn socket_close(&self, socket: u64, code: u16, reason: String) -> ServiceFuture<()> {
        self.with_sockets(
            SocketOp::Close {
                socket,
                code,
                reason,
            },
            |_| (),
        )
    }

    fn sockets(&self) -> ServiceFuture<Vec<u64>> {
        self.with_sockets(SocketOp::List, |ids| ids)
    }

    fn fetch(&self, request: Request) -> ServiceFuture<Response> {
        let (outbound, metrics) = (self.calls.outbound.clone(), self.calls.metrics.clone());
        let deadline = self.scope().deadline;
        Box::pin(async move {
            let result = outbound.fetch(request, deadline).await;
            count(&metrics.fetches, &outcome(&result));
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

    /// Carries out `op` on the actor's sockets through the control plane,
    /// under the current request's deadline, and gives `then` of its answer.
    fn with_sockets<T: Send + 'static>(
        &self,
        op: SocketOp,
        then: impl FnOnce(Vec<u64>) -> T + Send + 'static,
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
                    Ok(ids) => Ok(then(ids)),
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
