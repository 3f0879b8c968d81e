//! Request throughput with tracing off and on, and with logs captured
//! (issue 33): the real `stasis serve --workers 1` on loopback, one running
//! actor, `STASIS_TRACING_IN_FLIGHT` (8) requests in flight for
//! `STASIS_TRACING_SECONDS` (3) per case, rounds alternating between the
//! cases (`STASIS_TRACING_ROUNDS`, 3; the median is printed):
//!
//! * `counter`, `POST /`: no `--otlp-endpoint` (the baseline); exporting to
//!   an OTLP/HTTP sink on loopback with `--trace-sample-ratio 0` (spans
//!   made and dropped) and `1` (every request's spans exported, four a
//!   request: ingress, delivery, journal and, every so often, checkpoint);
//! * `faulty`, `POST /print` (two 80-byte log lines a request, kept in the
//!   actor's log) against `faulty`, `POST /` (nothing printed).
//!
//! `cargo bench --bench tracing`; results in BENCHMARKS.md, section 28.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use stasis_test_util::bench::{rate, serve};
use stasis_test_util::http::{actor_host, client, send};
use stasis_test_util::{Artifacts, admin, artifacts};

/// The `stasis` binary and the demo actors.
const STASIS: Artifacts = artifacts!();

/// One case: its name, the template and path, and serve's extra flags
/// (`SINK` is replaced by the sink's URL).
struct Case {
    name: &'static str,
    template: &'static str,
    path: &'static str,
    flags: &'static [&'static str],
}

const CASES: [Case; 5] = [
    Case {
        name: "counter, tracing off",
        template: "counter",
        path: "/",
        flags: &[],
    },
    Case {
        name: "counter, sampled 0 %",
        template: "counter",
        path: "/",
        flags: &["--otlp-endpoint", "SINK", "--trace-sample-ratio", "0"],
    },
    Case {
        name: "counter, sampled 100 %",
        template: "counter",
        path: "/",
        flags: &["--otlp-endpoint", "SINK", "--trace-sample-ratio", "1"],
    },
    Case {
        name: "faulty, no line",
        template: "faulty",
        path: "/",
        flags: &[],
    },
    Case {
        name: "faulty, two log lines",
        template: "faulty",
        path: "/print?text=a-line-of-eighty-bytes-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        flags: &[],
    },
];

/// An OTLP/HTTP sink on loopback: reads each export and answers 200; counts
/// the bytes.
async fn sink(received: Arc<AtomicU64>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let received = received.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: hyper::Request<hyper::body::Incoming>| {
                        let received = received.clone();
                        async move {
                            let body = request.into_body().collect().await?.to_bytes();
                            received.fetch_add(body.len() as u64, Ordering::Relaxed);
                            Ok::<_, hyper::Error>(hyper::Response::new(Full::new(Bytes::new())))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// Requests per second of `case` on a fresh server.
async fn run(case: &Case, sink: SocketAddr, in_flight: usize, seconds: u64) -> f64 {
    let tmp = tempfile::tempdir().expect("tempdir");
    let url = format!("http://{sink}");
    let mut flags = vec!["--workers", "1"];
    flags.extend(
        case.flags
            .iter()
            .map(|f| if *f == "SINK" { url.as_str() } else { f }),
    );
    let server = serve(&STASIS, &tmp.path().join("data"), &flags);
    let admin_addr = server.addr("admin=");
    let ingress = server.addr("ingress=");
    let c = client();
    admin::push_template(
        &c,
        admin_addr,
        case.template,
        STASIS.demo_wasm(case.template),
    )
    .await;
    let created = admin::create_actor(&c, admin_addr, "bench", case.template).await;
    assert!(created.status < 300, "create: {}", created.text());
    let host = actor_host("bench");
    for _ in 0..200 {
        let reply = send(&c, ingress, "POST", &host, case.path, Bytes::new()).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    let path = case.path;
    rate(in_flight, seconds, move || {
        let (c, host) = (c.clone(), host.clone());
        async move {
            let reply = send(&c, ingress, "POST", &host, path, Bytes::new()).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
        }
    })
    .await
}

fn main() {
    let stasis_test_util::bench::Rounds {
        rounds,
        seconds,
        in_flight,
    } = stasis_test_util::bench::Rounds::from_env("STASIS_TRACING");
    let rt = stasis_test_util::bench::runtime();
    rt.block_on(async {
        let received = Arc::new(AtomicU64::new(0));
        let sink = sink(received.clone()).await;
        let mut rates = vec![Vec::new(); CASES.len()];
        for round in 0..rounds {
            for (i, case) in CASES.iter().enumerate() {
                let rate = run(case, sink, in_flight, seconds).await;
                println!(
                    "tracing-run: round {round}, {}: {rate:.0} requests/s",
                    case.name
                );
                rates[i].push(rate);
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let medians: Vec<f64> = rates.iter_mut().map(median).collect();
        for (i, case) in CASES.iter().enumerate() {
            let baseline = if i < 3 { medians[0] } else { medians[3] };
            println!(
                "tracing-summary: {:<24} {:>8.0} requests/s  {:.2}x of its baseline",
                case.name,
                medians[i],
                medians[i] / baseline
            );
        }
        println!(
            "tracing-summary: the sink received {} KiB of spans",
            received.load(Ordering::Relaxed) / 1024
        );
    });
}
