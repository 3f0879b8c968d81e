//! The runtime's side of the ABI 2 host functions
//! (`stasis_host_api::imports`): what `call`, `send`, the alarm functions
//! and `fetch` do for an actor.
//!
//! Rooms: this file (the worker-wide [`HostCalls`]: how calls are routed,
//! the metrics); [`services`] (one actor's [`services::ActorHostServices`],
//! the [`stasis_core::host::ActorServices`] its instance calls, with the
//! chain of callers and the deadline of its current request); [`route`]
//! (the two ways a call travels: through the in-process control plane, or
//! from a remote worker through the control plane's internal API);
//! [`outbound`] (`fetch`: the `--allow-outbound` list and the HTTP(S)
//! client).
//!
//! # The chain of callers
//!
//! Every request an actor's `call` makes carries the header
//! [`CALL_CHAIN_HEADER`]: the comma-separated names of the actors waiting
//! on it, outermost first, ending with the caller. The host sets it (a
//! guest's own value is replaced; a `send` carries none, as nobody waits
//! on a message), the ingress router strips it from requests from
//! outside, and a call to an actor already in the chain is refused at once
//! with `LoopDetected` (HTTP 508): a call cycle would otherwise wait on a
//! mailbox that never opens until the deadline. Two independent requests
//! that call each other's actors at the same moment (A's request calls B
//! while B's calls A) are not one chain: they wait until the first
//! deadline, which answers `Deadline` to that caller.

pub mod outbound;
pub mod route;
pub mod services;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use stasis_host_api::{Request, Response};

use crate::error::ApiError;

/// Header carrying the chain of callers of a request made by `call` or
/// `send` (module docs).
pub const CALL_CHAIN_HEADER: &str = "stasis-call-chain";

/// How a call or a message reaches another actor by name.
#[async_trait]
pub trait CallRouter: Send + Sync {
    /// Routes `request` to `actor` and waits for its answer, as the
    /// ingress router would (placement, gate, resume on demand).
    ///
    /// # Errors
    /// 404 for an unknown actor; otherwise the worker's or guest's failure.
    async fn call(&self, actor: &str, request: Request) -> Result<Response, ApiError>;

    /// Routes `request` to `actor` one-way: returns once it is accepted for
    /// delivery (the actor exists); delivery failures are counted in
    /// `stasis_sends_failed_total` and logged.
    ///
    /// # Errors
    /// 404 for an unknown actor; 503 if it cannot be accepted.
    async fn send(&self, actor: &str, request: Request) -> Result<(), ApiError>;
}

/// Label `{outcome}` of the host-call counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `ok`, or the `HostError` (snake case) the guest got.
    pub outcome: String,
}

/// The host-call metrics.
#[derive(Debug, Default, Clone)]
pub struct HostCallMetrics {
    /// `stasis_calls_total{outcome}`: actor-to-actor calls.
    pub calls: Family<OutcomeLabel, Counter>,
    /// `stasis_sends_total`: one-way messages accepted.
    pub sends: Counter,
    /// `stasis_sends_failed_total`: messages refused, or accepted but not
    /// delivered.
    pub sends_failed: Counter,
    /// `stasis_fetches_total{outcome}`: outbound requests.
    pub fetches: Family<OutcomeLabel, Counter>,
}

impl HostCallMetrics {
    /// The metrics, registered in `registry`.
    #[must_use]
    pub fn register(registry: &mut Registry) -> Self {
        let this = Self::default();
        registry.register(
            "stasis_calls",
            "Actor-to-actor calls (the call host function), by outcome",
            this.calls.clone(),
        );
        registry.register(
            "stasis_sends",
            "One-way messages accepted for delivery (the send host function)",
            this.sends.clone(),
        );
        registry.register(
            "stasis_sends_failed",
            "One-way messages refused, or accepted but not delivered",
            this.sends_failed.clone(),
        );
        registry.register(
            "stasis_fetches",
            "Outbound requests (the fetch host function), by outcome",
            this.fetches.clone(),
        );
        this
    }
}

/// Counts one outcome in `family`.
pub(crate) fn count(family: &Family<OutcomeLabel, Counter>, outcome: &str) {
    family
        .get_or_create(&OutcomeLabel {
            outcome: outcome.to_owned(),
        })
        .inc();
}

/// What every actor of one worker shares for its host functions.
pub struct HostCalls {
    router: OnceLock<Arc<dyn CallRouter>>,
    outbound: Arc<outbound::Outbound>,
    metrics: HostCallMetrics,
    request_timeout: Duration,
    max_body: usize,
    alarms: OnceLock<Arc<dyn crate::alarms::AlarmRouter>>,
}

impl HostCalls {
    /// Host calls under `request_timeout` (the deadline of a request that
    /// did not come with one) and `max_body` (bytes of a request body),
    /// fetching from the hosts of `allow`, counted in `metrics`. Calls fail
    /// as unavailable until [`HostCalls::set_router`].
    #[must_use]
    pub fn new(
        metrics: HostCallMetrics,
        request_timeout: Duration,
        max_body: usize,
        allow: outbound::AllowList,
    ) -> Self {
        Self {
            router: OnceLock::new(),
            outbound: outbound::Outbound::new(allow, max_body),
            metrics,
            request_timeout,
            max_body,
            alarms: OnceLock::new(),
        }
    }

    /// Sets how calls are routed (once; later calls are ignored).
    pub fn set_router(&self, router: Arc<dyn CallRouter>) {
        let _ = self.router.set(router);
    }

    /// The router, if set.
    #[must_use]
    pub fn router(&self) -> Option<&Arc<dyn CallRouter>> {
        self.router.get()
    }

    /// Sets how the alarm functions reach the scheduler (once).
    pub fn set_alarm_router(&self, alarms: Arc<dyn crate::alarms::AlarmRouter>) {
        let _ = self.alarms.set(alarms);
    }

    /// The alarm router, if set.
    #[must_use]
    pub fn alarm_router(&self) -> Option<&Arc<dyn crate::alarms::AlarmRouter>> {
        self.alarms.get()
    }
}
