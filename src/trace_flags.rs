//! The tracing flags `stasis serve` and `stasis worker run` share
//! (`--otlp-endpoint`, `--trace-sample-ratio`), and installing the exporter
//! they ask for (see `stasis_runtime::telemetry`).

use clap::Args;
use stasis_runtime::contract::trace::Cidr;
use stasis_runtime::telemetry::Telemetry;

/// OpenTelemetry trace export.
#[derive(Debug, Clone, Args)]
pub(crate) struct TraceFlags {
    /// Export OpenTelemetry traces over OTLP/HTTP (protobuf) to this
    /// collector, e.g. http://127.0.0.1:4318 (spans go to its /v1/traces).
    /// Without it no span is recorded.
    #[arg(long, env = "STASIS_OTLP_ENDPOINT", value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// The share of traces started here that are sampled (0 to 1): a
    /// client's `traceparent` keeps its trace id and parent, but its sampled
    /// flag is not followed.
    #[arg(long, default_value_t = 1.0, value_parser = parse_ratio)]
    trace_sample_ratio: f64,
    /// A proxy in front of the ingress that samples already: requests from
    /// this network (ADDRESS/PREFIX or an address; repeatable) keep their
    /// `traceparent`'s sampled flag. From anyone else the flag is not
    /// followed.
    #[arg(long, value_name = "CIDR")]
    trace_trust_from: Vec<Cidr>,
}

fn parse_ratio(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("{s:?} is not a ratio from 0 to 1 (e.g. 0.01)")),
    }
}

impl TraceFlags {
    /// Installs the exporter if `--otlp-endpoint` was given; the spans
    /// still queued are flushed when the returned value is dropped.
    ///
    /// # Errors
    /// A bad endpoint.
    pub(crate) fn install(&self, service: &str) -> anyhow::Result<Option<Telemetry>> {
        stasis_runtime::contract::trace::set_trusted(self.trace_trust_from.clone());
        self.otlp_endpoint
            .as_deref()
            .map(|endpoint| Telemetry::install(endpoint, self.trace_sample_ratio, service))
            .transpose()
    }
}
