//! OpenTelemetry traces through the real binary (issue 33, item 4): `stasis
//! serve --otlp-endpoint` exports to an OTLP/HTTP receiver on loopback that
//! decodes the protocol's own messages (`opentelemetry-proto`), and the
//! tests check the spans it got: one trace from the ingress through a chain
//! of calls, each span under the right parent, the client's `traceparent`
//! kept as the root's parent; and a client's sampled flag that does not
//! make Stasis sample when it is configured not to.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message as _;
use stasis_test_util::wait;

use crate::support::{Server, client};

/// A span as the receiver decoded it.
#[derive(Debug, Clone)]
struct Got {
    name: String,
    /// The exporting process's `service.name`.
    service: String,
    trace: String,
    id: String,
    parent: String,
    attributes: BTreeMap<String, String>,
    /// The spans it links to: (trace id, span id).
    links: Vec<(String, String)>,
}

/// An OTLP/HTTP receiver on loopback: every span of every export request.
struct Receiver {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<Got>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

/// Decodes one `POST /v1/traces` body into `spans`.
fn decode(body: &[u8], spans: &Mutex<Vec<Got>>) -> Result<(), prost::DecodeError> {
    let request = ExportTraceServiceRequest::decode(body)?;
    let mut spans = spans.lock().expect("spans");
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.as_ref().and_then(|v| v.value.as_ref())))
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                spans.push(Got {
                    name: span.name,
                    service: service.clone(),
                    trace: hex::encode(span.trace_id),
                    id: hex::encode(span.span_id),
                    parent: hex::encode(span.parent_span_id),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| {
                            (
                                kv.key.clone(),
                                text(kv.value.as_ref().and_then(|v| v.value.as_ref())),
                            )
                        })
                        .collect(),
                    links: span
                        .links
                        .iter()
                        .map(|l| (hex::encode(&l.trace_id), hex::encode(&l.span_id)))
                        .collect(),
                });
            }
        }
    }
    Ok(())
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let spans = kept.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: hyper::Request<hyper::body::Incoming>| {
                            let spans = spans.clone();
                            async move {
                                let path = request.uri().path().to_owned();
                                let body = request.into_body().collect().await?.to_bytes();
                                let status = match (path.as_str(), decode(&body, &spans)) {
                                    ("/v1/traces", Ok(())) => 200,
                                    _ => 400,
                                };
                                let answer = ExportTraceServiceResponse::default().encode_to_vec();
                                Ok::<_, hyper::Error>(
                                    hyper::Response::builder()
                                        .status(status)
                                        .header("content-type", "application/x-protobuf")
                                        .body(Full::new(Bytes::from(answer)))
                                        .expect("response"),
                                )
                            }
                        },
                    );
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        Receiver { addr, spans, task }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn spans(&self) -> Vec<Got> {
        self.spans.lock().expect("spans").clone()
    }

    /// Waits (at most 20 s) until a span satisfies `want`.
    async fn wait_for(&self, what: &str, want: impl Fn(&Got) -> bool) -> Got {
        wait::until_else_async(
            &format!("a {what} span"),
            Duration::from_secs(20),
            async || {
                let spans = self.spans();
                match spans.iter().find(|s| want(s)) {
                    Some(span) => Ok(span.clone()),
                    None => Err(format!("{spans:#?}")),
                }
            },
        )
        .await
    }
}

/// The client's trace context: trace id, span id, sampled.
const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn traceparent() -> String {
    format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01")
}

/// `stasis serve` exporting to `receiver`, with `extra` flags; spans are
/// exported every 100 ms.
fn traced_server(receiver: &Receiver, extra: &[&str]) -> Server {
    let tmp = tempfile::tempdir().expect("tempdir");
    let url = receiver.url();
    let mut args = vec!["--otlp-endpoint", url.as_str()];
    args.extend_from_slice(extra);
    let server = Server::start_in_env(
        &tmp.path().join("data"),
        &args,
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
    )
    .expect("serve starts");
    std::mem::forget(tmp);
    server
}

/// `POST path` to `actor` with the client's `traceparent`.
async fn post_traced(server: &Server, actor: &str, path: &str) -> u16 {
    post_with_parent(server, actor, path, &traceparent()).await
}

/// `POST path` to `actor` with `traceparent: parent`.
async fn post_with_parent(server: &Server, actor: &str, path: &str, parent: &str) -> u16 {
    let c = client();
    let host = stasis_test_util::http::actor_host(actor);
    let parent = parent.to_owned();
    stasis_test_util::http::send_with(
        &c,
        server.ingress,
        "POST",
        &host,
        path,
        &[("traceparent", &parent)],
        Bytes::new(),
    )
    .await
    .status
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_through_a_call_chain_is_one_trace_under_the_clients_parent() {
    let receiver = Receiver::start().await;
    let server = traced_server(&receiver, &[]);
    server.push("caller");
    server.push("counter");
    server.create("a", "caller");
    server.create("b", "caller");
    server.create("c", "counter");
    server.cli_ok(&["actor", "pause", "a"]);
    // a calls b, which calls c.
    assert_eq!(post_traced(&server, "a", "/call/b/call/c").await, 200);

    let actor = |s: &Got, name: &str, who: &str| {
        s.name == name && s.attributes.get("stasis.actor").map(String::as_str) == Some(who)
    };
    let ingress = receiver
        .wait_for("ingress", |s| actor(s, "stasis.ingress", "a"))
        .await;
    let at_a = receiver
        .wait_for("a's request", |s| actor(s, "stasis.request", "a"))
        .await;
    let resume = receiver
        .wait_for("a's resume", |s| {
            s.name == "stasis.resume" && s.parent == at_a.id
        })
        .await;
    let a_calls = receiver
        .wait_for("a's call", |s| actor(s, "stasis.call", "a"))
        .await;
    let at_b = receiver
        .wait_for("b's request", |s| actor(s, "stasis.request", "b"))
        .await;
    let b_calls = receiver
        .wait_for("b's call", |s| actor(s, "stasis.call", "b"))
        .await;
    let at_c = receiver
        .wait_for("c's request", |s| actor(s, "stasis.request", "c"))
        .await;
    for span in [&ingress, &at_a, &resume, &a_calls, &at_b, &b_calls, &at_c] {
        assert_eq!(
            span.trace, CLIENT_TRACE,
            "one trace, the client's: {span:?}"
        );
    }
    assert_eq!(
        ingress.parent, CLIENT_SPAN,
        "the client's span is the root's parent"
    );
    assert_eq!(at_a.parent, ingress.id);
    assert_eq!(a_calls.parent, at_a.id);
    assert_eq!(a_calls.attributes["stasis.callee"], "b");
    assert_eq!(at_b.parent, a_calls.id);
    assert_eq!(b_calls.parent, at_b.id);
    assert_eq!(at_c.parent, b_calls.id);
    assert_eq!(ingress.attributes["http.response.status_code"], "200");

    // A move is a trace of its own.
    let from = server.cli_json(&["actor", "get", "c"])["worker"]
        .as_str()
        .expect("worker")
        .to_owned();
    let to = if from == "worker-1" {
        "worker-2"
    } else {
        "worker-1"
    };
    server.cli_ok(&["actor", "migrate", "c", "--to", to]);
    let moved = receiver
        .wait_for("the move", |s| actor(s, "stasis.move", "c"))
        .await;
    assert_ne!(moved.trace, CLIENT_TRACE);
    assert!(
        moved.parent.is_empty() || moved.parent == "0000000000000000",
        "{moved:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_clients_sampled_flag_does_not_force_sampling() {
    // Sampled at 1 (the default): the spans arrive by the time serve has
    // exited (it flushes them as it stops).
    let receiver = Receiver::start().await;
    let mut server = traced_server(&receiver, &[]);
    server.push("counter");
    server.create("n", "counter");
    assert_eq!(post_traced(&server, "n", "/").await, 200);
    server.stop();
    assert!(
        receiver.spans().iter().any(|s| s.trace == CLIENT_TRACE),
        "{:#?}",
        receiver.spans()
    );

    // Sampled at 0: the client's flag says sampled, Stasis says not.
    let receiver = Receiver::start().await;
    let mut server = traced_server(&receiver, &["--trace-sample-ratio", "0"]);
    server.push("counter");
    server.create("n", "counter");
    for _ in 0..5 {
        assert_eq!(post_traced(&server, "n", "/").await, 200);
    }
    server.stop();
    assert!(receiver.spans().is_empty(), "{:#?}", receiver.spans());
}

/// Issue 47, input 2: with `--trace-sample-ratio 0.5` a client whose trace
/// id's low 64 bits are zero (which an id-ratio rule always samples) gets
/// about half its requests sampled, its flag set or not: the draw is
/// Stasis' own. Requests from a trusted proxy (`--trace-trust-from`) keep
/// their flag, even at ratio 0.
#[tokio::test(flavor = "multi_thread")]
async fn neither_a_clients_flag_nor_its_trace_id_steers_sampling_unless_it_is_a_trusted_proxy() {
    let receiver = Receiver::start().await;
    let mut server = traced_server(&receiver, &["--trace-sample-ratio", "0.5"]);
    server.push("counter");
    server.create("n", "counter");
    let low = "00-4bf92f3577b34da60000000000000000-00f067aa0ba902b7-01";
    for _ in 0..40 {
        assert_eq!(post_with_parent(&server, "n", "/", low).await, 200);
    }
    server.stop();
    let sampled = receiver
        .spans()
        .iter()
        .filter(|s| s.name == "stasis.ingress")
        .count();
    assert!((4..=36).contains(&sampled), "{sampled} of 40 sampled");

    let receiver = Receiver::start().await;
    let mut server = traced_server(
        &receiver,
        &[
            "--trace-sample-ratio",
            "0",
            "--trace-trust-from",
            "127.0.0.0/8",
        ],
    );
    server.push("counter");
    server.create("n", "counter");
    let unsampled = traceparent().replace("-01", "-00");
    assert_eq!(post_with_parent(&server, "n", "/", &unsampled).await, 200);
    assert_eq!(post_traced(&server, "n", "/").await, 200);
    server.stop();
    let ingress: Vec<_> = receiver
        .spans()
        .into_iter()
        .filter(|s| s.name == "stasis.ingress")
        .collect();
    assert_eq!(ingress.len(), 1, "the proxy's flag decides: {ingress:#?}");
    assert_eq!(ingress[0].trace, CLIENT_TRACE);
}

/// Issue 47, input 3: an actor's `fetch` is a `stasis.fetch` client span
/// under its delivery, and the origin receives a `traceparent` naming that
/// span (not the caller's), so the origin's own spans join the trace.
#[tokio::test(flavor = "multi_thread")]
async fn a_fetch_is_a_client_span_and_carries_its_traceparent() {
    let receiver = Receiver::start().await;
    let (origin, heads) = crate::outbound::recording_origin("HTTP/1.1 200 OK", "ok\n").await;
    let rule = origin.to_string();
    let server = traced_server(&receiver, &["--allow-outbound", rule.as_str()]);
    server.push("fetch");
    server.create("getter", "fetch");
    let path = format!("/?url=http://{origin}/");
    let c = client();
    let answer = stasis_test_util::http::send_with(
        &c,
        server.ingress,
        "GET",
        &stasis_test_util::http::actor_host("getter"),
        &path,
        &[("traceparent", &traceparent())],
        Bytes::new(),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let delivery = receiver
        .wait_for("the delivery", |s| {
            s.name == "stasis.request" && s.trace == CLIENT_TRACE
        })
        .await;
    let fetch = receiver
        .wait_for("the fetch", |s| {
            s.name == "stasis.fetch" && s.trace == CLIENT_TRACE
        })
        .await;
    assert_eq!(fetch.parent, delivery.id, "{fetch:?}");
    assert_eq!(
        fetch.attributes["http.response.status_code"], "200",
        "{fetch:?}"
    );
    let heads = heads.lock().expect("heads").clone();
    assert_eq!(heads.len(), 1, "{heads:?}");
    let sent = format!("traceparent: 00-{CLIENT_TRACE}-{}-01", fetch.id);
    assert!(heads[0].contains(&sent), "{sent} not in {}", heads[0]);
}

/// Issue 47, input 3: an alarm's delivery is a trace of its own whose
/// `stasis.alarm` span links to the span of the delivery that set it.
#[tokio::test(flavor = "multi_thread")]
async fn an_alarms_span_links_to_the_request_that_set_it() {
    let receiver = Receiver::start().await;
    let server = traced_server(&receiver, &[]);
    server.push("alarm");
    server.create("waker", "alarm");
    assert_eq!(post_traced(&server, "waker", "/?in_ms=200").await, 202);
    let setter = receiver
        .wait_for("the setter", |s| {
            s.name == "stasis.request" && s.trace == CLIENT_TRACE
        })
        .await;
    let alarm = receiver
        .wait_for("the alarm", |s| s.name == "stasis.alarm")
        .await;
    assert_ne!(alarm.trace, CLIENT_TRACE, "a trace of its own: {alarm:?}");
    assert_eq!(
        alarm.links,
        [(CLIENT_TRACE.to_owned(), setter.id.clone())],
        "{alarm:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trace_crosses_from_a_replica_to_a_cluster_worker() {
    let _one = crate::replicas::ONE_CLUSTER.lock().await;
    let receiver = Receiver::start().await;
    let mut setup = stasis_test_util::cluster::Setup::new(1, 1, 1);
    // Replicas and workers alike: through the environment.
    setup.env = vec![
        ("STASIS_OTLP_ENDPOINT".to_owned(), receiver.url()),
        ("OTEL_BSP_SCHEDULE_DELAY".to_owned(), "100".to_owned()),
    ];
    let d = stasis_test_util::cluster::Deployment::start(crate::support::STASIS, setup);
    d.push_counter(0);
    d.cli_json(0, &["actor", "create", "x", "--template", "counter"]);
    let c = client();
    let parent = traceparent();
    let answer = stasis_test_util::http::send_with(
        &c,
        d.replica(0).ingress,
        "POST",
        &stasis_test_util::http::actor_host("x"),
        "/",
        &[("traceparent", &parent)],
        Bytes::new(),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    // The ingress span from the replica, the delivery's from worker w1.
    let ingress = receiver
        .wait_for("the replica's ingress", |s| {
            s.name == "stasis.ingress" && s.trace == CLIENT_TRACE
        })
        .await;
    let delivery = receiver
        .wait_for("w1's delivery", |s| {
            s.name == "stasis.request" && s.trace == CLIENT_TRACE
        })
        .await;
    assert_eq!(ingress.parent, CLIENT_SPAN);
    assert_eq!(delivery.parent, ingress.id);
    assert_eq!(delivery.attributes["stasis.worker"], "w1");
    assert_eq!(ingress.service, "stasis serve");
    assert_eq!(
        delivery.service, "stasis worker",
        "exported by the worker process"
    );
}
