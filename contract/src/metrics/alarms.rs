//! The alarm scheduler's metrics ([`AlarmMetrics`]).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

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
    /// `stasis_alarms_given_up_total`: alarms removed after
    /// `--alarm-retries` failed deliveries.
    pub given_up: Counter,
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
            "Alarm deliveries that failed (handler trapped or actor unreachable); each is retried with backoff, up to --alarm-retries",
            this.failures.clone(),
        );
        registry.register(
            "stasis_alarms_without_hook",
            "Alarms removed because the module does not export stasis_on_alarm",
            this.without_hook.clone(),
        );
        registry.register(
            "stasis_alarms_given_up",
            "Alarms removed after --alarm-retries failed deliveries",
            this.given_up.clone(),
        );
        registry.register(
            "stasis_alarms_pending",
            "Alarms pending in the control plane's scheduler",
            this.pending.clone(),
        );
        this
    }
}
