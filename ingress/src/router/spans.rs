//! The router's span of each request (`stasis.ingress`): started from the
//! client's trace context, ended with the request's status.

use opentelemetry::Context;
use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt as _, Tracer as _};
use stasis_contract::error::ApiError;
use stasis_contract::trace;

/// Starts the `stasis.ingress` span of a request to `actor` (see
/// [`stasis_contract::trace`]): a child of the client's `traceparent` if it
/// sent one (sampled as Stasis decides, or as a trusted proxy at `peer`
/// did), the root of a trace otherwise; the request then carries it as its
/// parent.
pub(super) fn ingress_span(
    actor: &str,
    guest: &mut stasis_host_api::Request,
    peer: std::net::IpAddr,
) -> Context {
    let parent = trace::client_parent(&guest.headers, Some(peer));
    let tracer = trace::tracer();
    let span = tracer
        .span_builder("stasis.ingress")
        .with_kind(SpanKind::Server)
        .with_attributes([
            KeyValue::new("stasis.actor", actor.to_owned()),
            KeyValue::new("http.request.method", guest.method.clone()),
            KeyValue::new("url.path", guest.path().to_owned()),
        ])
        .start_with_context(&tracer, &parent);
    let cx = parent.with_span(span);
    trace::inject(&cx, &mut guest.headers);
    cx
}

/// Ends the span of `cx` with the request's status, or its error.
pub(super) fn end_span(cx: &Context, answer: Result<u16, &ApiError>) {
    let span = cx.span();
    match answer {
        Ok(status) => span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        )),
        Err(e) => {
            span.set_attribute(KeyValue::new(
                "http.response.status_code",
                i64::from(e.kind().status()),
            ));
            span.set_status(Status::error(e.message().to_owned()));
        }
    }
    span.end();
}
