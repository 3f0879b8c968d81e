//! Request latency ([`RequestLatency`]): `stasis_request_duration_seconds`,
//! from the request's arrival at the ingress (or the host call's start) to
//! its answer, by template and status class.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The buckets of every latency histogram: 50 µs doubling to ~26 s.
pub(super) fn latency_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.000_05, 2.0, 20)
}

/// A latency histogram with [`latency_buckets`] (a family's constructor).
pub(super) fn histogram() -> Histogram {
    Histogram::new(latency_buckets())
}

/// A family of latency histograms.
pub(super) type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Labels `{template, class}` of `stasis_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    /// Template name of the actor that answered.
    pub template: String,
    /// The status class answered: `2xx`, `3xx`, `4xx` or `5xx`.
    pub class: &'static str,
}

/// `stasis_request_duration_seconds{template,class}`.
#[derive(Debug, Clone)]
pub struct RequestLatency {
    by_template: Histograms<LatencyLabels>,
}

impl RequestLatency {
    /// The family, registered in `registry`.
    #[must_use]
    pub fn register(registry: &mut Registry) -> Self {
        let this = Self {
            by_template: Family::new_with_constructor(histogram as fn() -> Histogram),
        };
        registry.register(
            "stasis_request_duration_seconds",
            "Request latency, ingress to answer, by template and status class",
            this.by_template.clone(),
        );
        this
    }

    /// Records one request of `template` answered `status` after `seconds`.
    pub fn observe(&self, template: &str, status: u16, seconds: f64) {
        self.by_template
            .get_or_create(&LatencyLabels {
                template: template.to_owned(),
                class: class(status),
            })
            .observe(seconds);
    }
}

/// `status`'s class (`1xx` answers are not final and never counted here;
/// anything out of range is `5xx`).
fn class(status: u16) -> &'static str {
    match status {
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}
