//! Distributed tracing's contract: W3C Trace Context (`traceparent`,
//! `tracestate`) carried on the requests themselves, and spans made with
//! OpenTelemetry's API ([`tracer`]). Every part of the data flow starts its
//! spans here, so one trace follows a request from the ingress through its
//! actor, the actor's `call`s and `send`s, and their callees, across
//! processes (the header travels with the request).
//!
//! Sampling is Stasis' own decision, never a caller's: the ingress keeps a
//! client's trace id and parent but decides whether to sample by
//! `--trace-sample-ratio` ([`client_parent`]); every later hop carries a
//! context Stasis made, and follows its decision. Without an exporter
//! (`--otlp-endpoint`) the API's tracer is a no-op.
//!
//! Spans: `stasis.ingress` (the request at the ingress), `stasis.request`
//! (its delivery to the actor on its worker), `stasis.resume`,
//! `stasis.journal` and `stasis.checkpoint` (under the delivery),
//! `stasis.call` and `stasis.send` (a guest's host call; the callee's
//! delivery is their child), `stasis.alarm` (an alarm's delivery: a trace
//! of its own) and `stasis.move` (a move, in the control plane).

use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::{SpanContext, TraceContextExt as _, TraceFlags, TraceId};
use opentelemetry::{Context, global};
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// The W3C Trace Context header naming a request's trace and parent span.
pub const TRACEPARENT: &str = "traceparent";

/// The W3C Trace Context header with vendors' trace state.
pub const TRACESTATE: &str = "tracestate";

/// `--trace-sample-ratio` as the bits of an `f64` (1.0 until set).
static SAMPLE_RATIO: AtomicU64 = AtomicU64::new(0x3FF0_0000_0000_0000);

/// Sets the share of traces started at this process's ingress that are
/// sampled (`--trace-sample-ratio`, clamped to 0..=1).
pub fn set_sample_ratio(ratio: f64) {
    SAMPLE_RATIO.store(ratio.clamp(0.0, 1.0).to_bits(), Ordering::Relaxed);
}

/// The share of traces started here that are sampled.
#[must_use]
pub fn sample_ratio() -> f64 {
    f64::from_bits(SAMPLE_RATIO.load(Ordering::Relaxed))
}

/// Whether a trace of `trace_id` is sampled at `ratio`: the same rule as
/// OpenTelemetry's `TraceIdRatioBased` sampler (the low 63 bits of the id
/// against the ratio), so a root started here decides alike.
#[must_use]
pub fn sampled_at(trace_id: TraceId, ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    let bytes = trace_id.to_bytes();
    let mut low = [0; 8];
    low.copy_from_slice(&bytes[8..]);
    let bound = (ratio.max(0.0) * (1u64 << 63) as f64) as u64;
    (u64::from_be_bytes(low) >> 1) < bound
}

/// The tracer every span of Stasis is made with (the process's provider,
/// a no-op until an exporter is installed).
#[must_use]
pub fn tracer() -> global::BoxedTracer {
    global::tracer("stasis")
}

/// A request's headers as a propagator reads them.
struct Headers<'a>(&'a [(String, Vec<u8>)]);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(key))
            .and_then(|(_, value)| std::str::from_utf8(value).ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(name, _)| name.as_str()).collect()
    }
}

/// A request's headers as a propagator writes them (replacing any of the
/// same name).
struct HeadersMut<'a>(&'a mut Vec<(String, Vec<u8>)>);

impl Injector for HeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.retain(|(name, _)| !name.eq_ignore_ascii_case(key));
        // An empty `tracestate` is no header at all.
        if !value.is_empty() {
            self.0.push((key.to_owned(), value.into_bytes()));
        }
    }
}

/// The context a request of `headers` carries from another part of
/// Stasis (a delivery's parent: the ingress span, or a caller's `call`
/// span); empty if it carries none.
#[must_use]
pub fn parent_of(headers: &[(String, Vec<u8>)]) -> Context {
    TraceContextPropagator::new().extract(&Headers(headers))
}

/// The context of a client's request at the ingress: its trace and parent
/// span if it names one, sampled as `--trace-sample-ratio` decides for
/// that trace id whatever the client's flag says; empty otherwise (the
/// ingress span then starts a trace, sampled by the same ratio).
#[must_use]
pub fn client_parent(headers: &[(String, Vec<u8>)]) -> Context {
    let cx = parent_of(headers);
    let remote = cx.span().span_context().clone();
    if !remote.is_valid() {
        return Context::new();
    }
    let flags = if sampled_at(remote.trace_id(), sample_ratio()) {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let decided = SpanContext::new(
        remote.trace_id(),
        remote.span_id(),
        flags,
        true,
        remote.trace_state().clone(),
    );
    Context::new().with_remote_span_context(decided)
}

/// Writes the span of `cx` into `headers` as the parent of the next hop
/// (replacing a `traceparent` or `tracestate` already there); nothing if
/// `cx` has no valid span.
pub fn inject(cx: &Context, headers: &mut Vec<(String, Vec<u8>)>) {
    if cx.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(cx, &mut HeadersMut(headers));
    }
}

/// A context whose parent is the span `parent` (kept apart from its
/// `Context`, so that holding it does not keep the span open).
#[must_use]
pub fn under(parent: &SpanContext) -> Context {
    Context::new().with_remote_span_context(parent.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_clients_flag_does_not_decide_sampling() {
        let headers = vec![(TRACEPARENT.to_owned(), CLIENT.as_bytes().to_vec())];
        set_sample_ratio(0.0);
        let cx = client_parent(&headers);
        let span = cx.span().span_context().clone();
        assert_eq!(
            span.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(!span.is_sampled());
        set_sample_ratio(1.0);
        assert!(client_parent(&headers).span().span_context().is_sampled());
        // Another part of Stasis follows the flag it wrote itself.
        assert!(parent_of(&headers).span().span_context().is_sampled());
        // The next hop's parent replaces whatever the request carried, with
        // Stasis' decision (not sampled at 0).
        let mut next = vec![
            (TRACEPARENT.to_owned(), b"garbage".to_vec()),
            (TRACESTATE.to_owned(), b"k=v".to_vec()),
        ];
        inject(&cx, &mut next);
        let unsampled = CLIENT.replace("-01", "-00");
        assert_eq!(next, [(TRACEPARENT.to_owned(), unsampled.into_bytes())]);
    }

    #[test]
    fn no_or_a_malformed_traceparent_is_no_parent() {
        assert!(!client_parent(&[]).span().span_context().is_valid());
        let bad = vec![(TRACEPARENT.to_owned(), b"00-zz-yy-01".to_vec())];
        assert!(!client_parent(&bad).span().span_context().is_valid());
    }
}
