//! Actor-to-actor call latency (issue 14) through the real `stasis` binary
//! on loopback, client-observed with a keep-alive hyper client, one request
//! in flight. One deployment: `stasis serve --workers 1` (the in-process
//! worker `worker-1`) plus two `stasis worker run` processes (`w-a`,
//! `w-b`); every actor is moved to the worker its case names before the
//! measurements. In group `calls`:
//!
//! * `direct/in-process`: `POST /` to a `counter` on `worker-1` (the
//!   baseline of `call/same-worker`);
//! * `call/same-worker`: `POST /call/<counter>` to a `caller` on
//!   `worker-1` calling a counter on `worker-1` (the call goes through the
//!   serve process's own control plane);
//! * `direct/remote`: `POST /` to a counter on `w-b` (the baseline of the
//!   remote cases: ingress → control plane → worker process);
//! * `call/same-remote-worker`: a caller on `w-a` calling a counter on
//!   `w-a` (the call still travels `w-a` → control plane → `w-a`);
//! * `call/two-workers`: a caller on `w-a` calling a counter on `w-b`.
//!
//! Besides criterion's estimates, every latency is recorded and printed as
//! a `latency:` line (ms, p50/p99/max). Results: BENCHMARKS.md, section 14.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, SamplingMode};
use serde_json::json;
use stasis_test_util::admin::{self, call_ok, wait_worker_ready};
use stasis_test_util::bench;
use stasis_test_util::demos::count_in;
use stasis_test_util::http::{Http, actor_host, client, send};
use stasis_test_util::stats::summary;
use stasis_test_util::{Artifacts, artifacts};

/// The `stasis` binary and the demo actors.
const STASIS: Artifacts = artifacts!();

/// The serve process's in-process worker (`--workers 1`).
const LOCAL: &str = "worker-1";
/// The two worker processes.
const REMOTE_A: &str = "w-a";
const REMOTE_B: &str = "w-b";

/// One measured case: the request sent to `actor` (whose answer is the
/// counter's), and the worker the counter must answer from.
struct Case {
    group: &'static str,
    label: &'static str,
    actor: &'static str,
    path: &'static str,
    counter_on: &'static str,
}

/// The actors, their template and the worker each is moved to.
const ACTORS: [(&str, &str, &str); 5] = [
    ("local-front", "caller", LOCAL),
    ("local-back", "counter", LOCAL),
    ("a-front", "caller", REMOTE_A),
    ("a-back", "counter", REMOTE_A),
    ("b-back", "counter", REMOTE_B),
];

const CASES: [Case; 5] = [
    Case {
        group: "direct",
        label: "in-process",
        actor: "local-back",
        path: "/",
        counter_on: LOCAL,
    },
    Case {
        group: "call",
        label: "same-worker",
        actor: "local-front",
        path: "/call/local-back",
        counter_on: LOCAL,
    },
    Case {
        group: "direct",
        label: "remote",
        actor: "b-back",
        path: "/",
        counter_on: REMOTE_B,
    },
    Case {
        group: "call",
        label: "same-remote-worker",
        actor: "a-front",
        path: "/call/a-back",
        counter_on: REMOTE_A,
    },
    Case {
        group: "call",
        label: "two-workers",
        actor: "a-front",
        path: "/call/b-back",
        counter_on: REMOTE_B,
    },
];

/// One request of `case`, asserting the counter answered 200 from the
/// expected worker; its latency.
async fn request(client: &Http, ingress: SocketAddr, case: &Case) -> Duration {
    let started = Instant::now();
    let reply = send(
        client,
        ingress,
        "POST",
        &actor_host(case.actor),
        case.path,
        Bytes::new(),
    )
    .await;
    let took = started.elapsed();
    let text = reply.text();
    assert_eq!(reply.status, 200, "{} {}: {text}", case.actor, case.path);
    assert!(count_in(&text).is_some(), "not a count: {text}");
    took
}

/// Moves `actor` to `worker` unless it is there already.
async fn place(client: &Http, admin_addr: SocketAddr, actor: &str, worker: &str) {
    let get = format!("/v1/actors/{actor}");
    let info = call_ok(client, admin_addr, "GET", &get, None).await;
    if info["worker"] != worker {
        let path = format!("{get}/migrate");
        let body = json!({ "to": worker });
        let moved = call_ok(client, admin_addr, "POST", &path, Some(&body)).await;
        assert_eq!(moved["worker"], worker, "{moved}");
    }
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .without_plots()
        .configure_from_args();
    let started = Instant::now();
    let rt = stasis_test_util::bench::runtime();
    let tmp = tempfile::Builder::new()
        .prefix("stasis-bench-calls-")
        .tempdir()
        .expect("tempdir");
    let serve = bench::serve(&STASIS, &tmp.path().join("serve"), &["--workers", "1"]);
    let (ingress, admin_addr) = (serve.addr("ingress="), serve.addr("admin="));
    let client = {
        let _guard = rt.enter();
        client()
    };
    // The worker processes join before any actor exists: their join
    // rebalance moves nothing.
    let workers: Vec<_> = [REMOTE_A, REMOTE_B]
        .into_iter()
        .map(|name| bench::worker(&STASIS, admin_addr, name, &tmp.path().join(name)))
        .collect();
    rt.block_on(async {
        for name in [REMOTE_A, REMOTE_B] {
            wait_worker_ready(&client, admin_addr, name).await;
        }
        for name in ["caller", "counter"] {
            admin::push_template(&client, admin_addr, name, STASIS.demo_wasm(name)).await;
        }
        for (actor, template, worker) in ACTORS {
            let reply = admin::create_actor(&client, admin_addr, actor, template).await;
            let _ = reply.ok(&format!("create {actor}"));
            place(&client, admin_addr, actor, worker).await;
        }
        // Every case answers from the worker it names (the counter's
        // answer is `hello from: <worker> | ...`).
        for case in &CASES {
            let reply = send(
                &client,
                ingress,
                "POST",
                &actor_host(case.actor),
                case.path,
                Bytes::new(),
            )
            .await;
            let text = reply.text();
            assert_eq!(reply.status, 200, "{text}");
            let from = format!("hello from: {} ", case.counter_on);
            assert!(text.contains(&from), "{}: {text}", case.label);
        }
    });
    println!(
        "calls-setup: 3 workers, {} actors, {:.1} s",
        ACTORS.len(),
        started.elapsed().as_secs_f64()
    );
    let mut group = c.benchmark_group("calls");
    group.sampling_mode(SamplingMode::Flat);
    for case in &CASES {
        let mut all_ms = Vec::new();
        group.bench_function(BenchmarkId::new(case.group, case.label), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let took = request(&client, ingress, case).await;
                        all_ms.push(took.as_secs_f64() * 1e3);
                        total += took;
                    }
                    total
                })
            });
        });
        println!(
            "latency: calls/{}/{} (ms) {}",
            case.group,
            case.label,
            summary(&all_ms)
        );
    }
    group.finish();
    drop(workers);
    drop(serve);
    c.final_summary();
    println!(
        "calls benches finished in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
