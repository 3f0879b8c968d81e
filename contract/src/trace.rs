//! Distributed tracing's contract: W3C Trace Context (`traceparent`,
//! `tracestate`) carried on the requests themselves, and spans made with
//! OpenTelemetry's API ([`tracer`]). Every part of the data flow starts its
//! spans here, so one trace follows a request from the ingress through its
//! actor, the actor's `call`s and `send`s, and their callees, across
//! processes (the header travels with the request).
//!
//! Sampling is Stasis' own decision, never a caller's: the ingress keeps a
//! client's trace id and parent but decides whether to sample by a random
//! draw at `--trace-sample-ratio` ([`client_parent`]) — neither the
//! client's sampled flag nor its trace id steers it — unless the client
//! is a trusted proxy (`--trace-trust-from CIDR`, [`set_trusted`]), whose
//! flag is followed. A `tracestate` over [`MAX_TRACESTATE`] bytes is
//! dropped, never forwarded. Every later hop carries a context Stasis
//! made, and follows its decision. Without an exporter (`--otlp-endpoint`)
//! the API's tracer is a no-op.
//!
//! Spans: `stasis.ingress` (the request at the ingress), `stasis.request`
//! (its delivery to the actor on its worker), `stasis.resume`,
//! `stasis.journal` and `stasis.checkpoint` (under the delivery),
//! `stasis.call` and `stasis.send` (a guest's host call; the callee's
//! delivery is their child), `stasis.fetch` (a guest's outbound fetch;
//! the origin gets its `traceparent`), `stasis.alarm` (an alarm's delivery: a trace
//! of its own, with a link to the span of the delivery that set it) and `stasis.move` (a move, in the control plane).

use std::net::IpAddr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::{SpanContext, TraceContextExt as _, TraceFlags, TraceId, TraceState};
use opentelemetry::{Context, global};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{IdGenerator as _, RandomIdGenerator};

/// The W3C Trace Context header naming a request's trace and parent span.
pub const TRACEPARENT: &str = "traceparent";

/// The W3C Trace Context header with vendors' trace state.
pub const TRACESTATE: &str = "tracestate";

/// The longest `tracestate` a client's request may carry on (the W3C
/// recommendation for what a vendor must propagate): a longer one is
/// dropped.
pub const MAX_TRACESTATE: usize = 512;

/// A network of addresses (`--trace-trust-from`): an address and the
/// length of its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` is in the network.
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match (self.addr, ip) {
            (IpAddr::V6(_), IpAddr::V4(v4)) => IpAddr::V6(v4.to_ipv6_mapped()),
            (IpAddr::V4(_), IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => return false,
            },
            _ => ip,
        };
        let (net, ip, bits) = match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(i)) => {
                (u128::from(n.to_bits()), u128::from(i.to_bits()), 32)
            }
            (IpAddr::V6(n), IpAddr::V6(i)) => (n.to_bits(), i.to_bits(), 128),
            _ => return false,
        };
        let prefix = u32::from(self.prefix);
        if prefix == 0 {
            return true;
        }
        let shift = bits - prefix;
        (net >> shift) == (ip >> shift)
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;

    /// `ADDRESS/PREFIX` or a bare address (the one host).
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{s:?} is not a network: give ADDRESS/PREFIX (10.0.0.0/8, fd00::/8) or an address"
            )
        };
        let (addr, prefix) = match s.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let most = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => most,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= most)
                .ok_or_else(bad)?,
        };
        Ok(Self { addr, prefix })
    }
}

/// The trusted proxies (`--trace-trust-from`), set once at start.
static TRUSTED: OnceLock<Vec<Cidr>> = OnceLock::new();

/// Sets the networks whose requests' sampled flag the ingress follows
/// (`--trace-trust-from`: a proxy that sampled already); once, at start.
pub fn set_trusted(networks: Vec<Cidr>) {
    let _ = TRUSTED.set(networks);
}

/// Whether a request from `peer` may decide its own sampling.
fn trusted(peer: Option<IpAddr>) -> bool {
    peer.is_some_and(|ip| {
        TRUSTED
            .get()
            .is_some_and(|nets| nets.iter().any(|net| net.contains(ip)))
    })
}

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

/// The context of a client's request at the ingress (from `peer`): its
/// trace and parent span if it names one, sampled by a random draw at
/// `--trace-sample-ratio` whatever its flag and trace id say (a trusted
/// proxy's flag is followed, [`set_trusted`]), its `tracestate` dropped
/// past [`MAX_TRACESTATE`] bytes; empty otherwise (the ingress span then
/// starts a trace, sampled by the same ratio).
#[must_use]
pub fn client_parent(headers: &[(String, Vec<u8>)], peer: Option<IpAddr>) -> Context {
    let cx = parent_of(headers);
    let remote = cx.span().span_context().clone();
    if !remote.is_valid() {
        return Context::new();
    }
    let sampled = if trusted(peer) {
        remote.is_sampled()
    } else {
        // A fresh random id's bits, not the client's: no trace id a
        // client picks is more likely to be sampled than another.
        sampled_at(RandomIdGenerator::default().new_trace_id(), sample_ratio())
    };
    let flags = if sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let oversized = headers
        .iter()
        .any(|(name, value)| name.eq_ignore_ascii_case(TRACESTATE) && value.len() > MAX_TRACESTATE);
    let state = if oversized {
        TraceState::default()
    } else {
        remote.trace_state().clone()
    };
    let decided = SpanContext::new(remote.trace_id(), remote.span_id(), flags, true, state);
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

/// Span context `span` as a `traceparent` value; `None` when it is not
/// valid.
#[must_use]
pub fn traceparent(span: &SpanContext) -> Option<String> {
    let mut headers = Vec::new();
    inject(&under(span), &mut headers);
    headers
        .into_iter()
        .find(|(name, _)| name == TRACEPARENT)
        .and_then(|(_, value)| String::from_utf8(value).ok())
}

/// The span context `traceparent` names (remote), if it is a valid one.
#[must_use]
pub fn span_context(traceparent: &str) -> Option<SpanContext> {
    let headers = [(TRACEPARENT.to_owned(), traceparent.as_bytes().to_vec())];
    let span = parent_of(&headers).span().span_context().clone();
    span.is_valid().then_some(span)
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
        let cx = client_parent(&headers, None);
        let span = cx.span().span_context().clone();
        assert_eq!(
            span.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(!span.is_sampled());
        set_sample_ratio(1.0);
        assert!(
            client_parent(&headers, None)
                .span()
                .span_context()
                .is_sampled()
        );
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

        // At 0.5 the trace id does not steer the draw: ids whose low bits
        // are zero (always sampled by an id-ratio rule) and high ones
        // (never) are each sampled about half the time, flag set or not.
        set_sample_ratio(0.5);
        for id in [
            "00-4bf92f3577b34da60000000000000000-00f067aa0ba902b7-00",
            "00-4bf92f3577b34da6ffffffffffffffff-00f067aa0ba902b7-01",
        ] {
            let headers = vec![(TRACEPARENT.to_owned(), id.as_bytes().to_vec())];
            let sampled = (0..400)
                .filter(|_| {
                    client_parent(&headers, None)
                        .span()
                        .span_context()
                        .is_sampled()
                })
                .count();
            assert!((100..=300).contains(&sampled), "{id}: {sampled} of 400");
        }
        // A trusted proxy's flag is followed; anyone else's is not.
        set_trusted(vec!["10.0.0.0/8".parse().expect("cidr")]);
        set_sample_ratio(0.0);
        let proxy = Some("10.1.2.3".parse().expect("ip"));
        let stranger = Some("192.0.2.1".parse().expect("ip"));
        assert!(
            client_parent(&headers, proxy)
                .span()
                .span_context()
                .is_sampled()
        );
        assert!(
            !client_parent(&headers, stranger)
                .span()
                .span_context()
                .is_sampled()
        );
        set_sample_ratio(1.0);
        let unsampled_client = vec![(TRACEPARENT.to_owned(), unsampled_bytes())];
        assert!(
            !client_parent(&unsampled_client, proxy)
                .span()
                .span_context()
                .is_sampled()
        );
        // An oversized tracestate is dropped; a small one kept.
        for (state, kept) in [
            ("k=v".to_owned(), true),
            (format!("k={}", "v".repeat(600)), false),
        ] {
            let mut headers = headers.clone();
            headers.push((TRACESTATE.to_owned(), state.clone().into_bytes()));
            let cx = client_parent(&headers, None);
            let carried = cx.span().span_context().trace_state().header();
            assert_eq!(!carried.is_empty(), kept, "{carried}");
        }
    }

    fn unsampled_bytes() -> Vec<u8> {
        CLIENT.replace("-01", "-00").into_bytes()
    }

    #[test]
    fn networks_contain_their_addresses() {
        let net: Cidr = "10.0.0.0/8".parse().expect("cidr");
        assert!(net.contains("10.255.0.1".parse().expect("ip")));
        assert!(!net.contains("11.0.0.1".parse().expect("ip")));
        assert!(net.contains("::ffff:10.0.0.1".parse().expect("ip")));
        let one: Cidr = "fd00::1".parse().expect("host");
        assert!(one.contains("fd00::1".parse().expect("ip")));
        assert!(!one.contains("fd00::2".parse().expect("ip")));
        let all: Cidr = "0.0.0.0/0".parse().expect("all");
        assert!(all.contains("203.0.113.9".parse().expect("ip")));
        for bad in ["10.0.0.0/33", "example.com", "10.0.0/8", ""] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn no_or_a_malformed_traceparent_is_no_parent() {
        assert!(!client_parent(&[], None).span().span_context().is_valid());
        let bad = vec![(TRACEPARENT.to_owned(), b"00-zz-yy-01".to_vec())];
        assert!(!client_parent(&bad, None).span().span_context().is_valid());
    }
}
