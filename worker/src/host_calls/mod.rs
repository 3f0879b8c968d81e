//! The runtime's side of the ABI 2 host functions
//! (`stasis_host_api::imports`): what `call`, `send`, the alarm functions
//! and `fetch` do for an actor.
//!
//! Rooms: this file (the worker-wide [`HostCalls`]: the control plane the
//! calls and alarms go to, as a [`ControlApi`], and the metrics);
//! [`services`] (one actor's [`services::ActorHostServices`], the
//! [`stasis_core::host::ActorServices`] its instance calls, with the chain
//! of callers and the deadline of its current request); [`outbound`]
//! (`fetch`: the `--allow-outbound` list and the HTTP(S) client).
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
pub mod services;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use stasis_contract::control_api::ControlApi;
pub use stasis_contract::headers::CALL_CHAIN_HEADER;
use stasis_contract::metrics::{HostCallMetrics, OutcomeLabel};

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
    control: OnceLock<Arc<dyn ControlApi>>,
    outbound: Arc<outbound::Outbound>,
    metrics: HostCallMetrics,
    request_timeout: Duration,
    max_body: usize,
}

impl HostCalls {
    /// Host calls under `request_timeout` (the deadline of a request that
    /// did not come with one) and `max_body` (bytes of a request body),
    /// fetching from the hosts of `allow`, counted in `metrics`. Calls and
    /// alarms fail as unavailable until [`HostCalls::set_control`].
    #[must_use]
    pub fn new(
        metrics: HostCallMetrics,
        request_timeout: Duration,
        max_body: usize,
        allow: outbound::AllowList,
    ) -> Self {
        Self {
            control: OnceLock::new(),
            outbound: outbound::Outbound::new(allow, max_body),
            metrics,
            request_timeout,
            max_body,
        }
    }

    /// Sets the control plane calls, messages and alarms go to (once;
    /// later calls are ignored).
    pub fn set_control(&self, control: Arc<dyn ControlApi>) {
        let _ = self.control.set(control);
    }

    /// The control plane, if set.
    #[must_use]
    pub fn control(&self) -> Option<&Arc<dyn ControlApi>> {
        self.control.get()
    }
}
