//! Alarms: each actor's one durable alarm (ABI 2 `set_alarm`,
//! `cancel_alarm`, `alarm`) and their delivery.
//!
//! Rooms: this file (the alarm request marker, the metrics, and
//! [`AlarmRouter`], how an actor's host functions reach the alarms);
//! [`scheduler`] (the control plane's [`scheduler::Scheduler`]: pending
//! alarms in time order, firing, retries with backoff); [`deliver`] (how a
//! due alarm reaches the actor: through the placement, gate and mailbox,
//! and how the actor task runs it); [`route`] (the two ways an actor's
//! alarm call reaches the scheduler: in process, or from a remote worker
//! through the control plane's internal API).
//!
//! # Semantics
//!
//! The alarm lives in the directory (`alarms` table of `stasis.db`, or
//! `<prefix>/alarms/<actor>` in etcd), never only in memory; the control
//! plane (the leader, in a cluster) loads every pending alarm when it
//! starts. At its time the alarm is delivered as a request in the actor's
//! mailbox — so it waits behind requests in flight, resumes a paused
//! actor, is never in the middle of a pause or a snapshot, and follows the
//! actor to whatever worker holds it — and the actor task calls the guest's
//! `stasis_on_alarm` export. Delivery is at least once: a handler that
//! traps rolls the actor back as a trapped request does and is retried
//! after [`RETRY_FIRST`], doubling each time up to [`RETRY_CAP`], until it
//! succeeds, the alarm is cancelled or replaced, or the actor is deleted.
//! After a success the alarm is removed unless the handler set a new one.
//! A module without the export gets its alarm removed and
//! `stasis_alarms_without_hook_total` counted.

pub mod deliver;
pub mod route;
pub mod scheduler;

use std::time::Duration;

use async_trait::async_trait;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use stasis_host_api::Request;

use crate::error::ApiError;

/// Header marking the request that delivers an alarm. The host sets it;
/// the ingress router and the `call`/`send` host functions strip it from
/// every other request, so neither a client nor a guest can forge one.
pub const ALARM_HEADER: &str = "stasis-alarm";

/// The value of [`ALARM_HEADER`] in the answer when the handler ran.
pub const RAN: &[u8] = b"ran";

/// The value of [`ALARM_HEADER`] in the answer when the module has no
/// `stasis_on_alarm` export.
pub const NO_HOOK: &[u8] = b"no-hook";

/// The first retry of a failed alarm comes this long after the failure.
pub const RETRY_FIRST: Duration = Duration::from_millis(500);

/// Retries back off by doubling up to this pause, then keep it.
pub const RETRY_CAP: Duration = Duration::from_secs(60);

/// The pause before retry number `attempt` (1 for the first retry):
/// [`RETRY_FIRST`] × 2^(attempt − 1), at most [`RETRY_CAP`].
#[must_use]
pub fn backoff(attempt: u32) -> Duration {
    let doublings = attempt.saturating_sub(1).min(16);
    RETRY_FIRST.saturating_mul(1 << doublings).min(RETRY_CAP)
}

/// The request that delivers an alarm (`POST /` with [`ALARM_HEADER`]).
#[must_use]
pub fn alarm_request() -> Request {
    let mut request = Request::new("POST", "/");
    request
        .headers
        .push((ALARM_HEADER.to_owned(), b"1".to_vec()));
    request
}

/// Whether `request` delivers an alarm.
#[must_use]
pub fn is_alarm(request: &Request) -> bool {
    request.header(ALARM_HEADER).is_some()
}

/// How an actor's alarm host functions reach the directory and the
/// scheduler (the control plane's, wherever the actor runs).
#[async_trait]
pub trait AlarmRouter: Send + Sync {
    /// Sets `actor`'s alarm to `at_unix_ms` (Unix ms), replacing any.
    ///
    /// # Errors
    /// 503 when the control plane cannot be reached or no longer leads;
    /// 500 on a directory failure.
    async fn set(&self, actor: &str, at_unix_ms: u64) -> Result<(), ApiError>;

    /// Removes `actor`'s alarm (fine when none is set).
    ///
    /// # Errors
    /// As [`AlarmRouter::set`].
    async fn cancel(&self, actor: &str) -> Result<(), ApiError>;

    /// `actor`'s pending alarm (Unix ms), if any.
    ///
    /// # Errors
    /// As [`AlarmRouter::set`].
    async fn get(&self, actor: &str) -> Result<Option<u64>, ApiError>;
}

/// The alarm metrics.
#[derive(Debug, Default, Clone)]
pub struct AlarmMetrics {
    /// `stasis_alarms_fired_total`: handlers that ran to completion.
    pub fired: Counter,
    /// `stasis_alarm_failures_total`: deliveries that failed (the handler
    /// trapped, or the actor could not be reached); each is retried.
    pub failures: Counter,
    /// `stasis_alarms_without_hook_total`: alarms removed because the
    /// module has no `stasis_on_alarm` export.
    pub without_hook: Counter,
    /// `stasis_alarms_pending`: alarms the scheduler holds.
    pub pending: Gauge,
}

impl AlarmMetrics {
    /// The metrics, registered in `registry`.
    #[must_use]
    pub fn register(registry: &mut Registry) -> Self {
        let this = Self::default();
        registry.register(
            "stasis_alarms_fired",
            "Alarm handlers (stasis_on_alarm) that ran to completion",
            this.fired.clone(),
        );
        registry.register(
            "stasis_alarm_failures",
            "Alarm deliveries that failed (handler trapped or actor unreachable); each is retried with backoff",
            this.failures.clone(),
        );
        registry.register(
            "stasis_alarms_without_hook",
            "Alarms removed because the module does not export stasis_on_alarm",
            this.without_hook.clone(),
        );
        registry.register(
            "stasis_alarms_pending",
            "Alarms pending in the control plane's scheduler",
            this.pending.clone(),
        );
        this
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_half_a_second_up_to_a_minute() {
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(2), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(2));
        assert_eq!(backoff(8), Duration::from_secs(60));
        assert_eq!(backoff(u32::MAX), RETRY_CAP);
    }
}
