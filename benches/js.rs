//! JavaScript counter against Rust counter (issue 36): the real `stasis
//! serve --workers 1` on loopback, the same run, client-observed:
//!
//! * `js/create/<lang>`: `POST /v1/actors` of a new actor (each deleted,
//!   untimed, after);
//! * `js/request/<lang>`: `POST /` to a running actor;
//! * `js/wake/<lang>`: the first `POST /` after a pause (the resume
//!   included; the pause is untimed).
//!
//! `<lang>` is `rust` (`demos/counter`) or `js` (`demos-js/counter.js`,
//! pushed with the CLI, which pre-initialises it). Before the measurements
//! the bench prints `js-summary:` lines: the module sizes, the push time
//! of the script (the engine's start-up and the script's top level, which
//! pre-initialisation takes out of every create), and each paused actor's
//! snapshot size and memory. Results: BENCHMARKS.md, section 24.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, SamplingMode};
use stasis_test_util::admin::{self, call, call_ok};
use stasis_test_util::bench;
use stasis_test_util::http::{Http, actor_host, client, send};
use stasis_test_util::{Artifacts, artifacts};

/// The `stasis` binary and the demo actors.
const STASIS: Artifacts = artifacts!();

const KIB: f64 = 1024.0;

/// `POST /` to `actor`, timed; asserts a 200.
async fn post(client: &Http, ingress: SocketAddr, actor: &str) -> Duration {
    let started = Instant::now();
    let reply = send(
        client,
        ingress,
        "POST",
        &actor_host(actor),
        "/",
        Bytes::new(),
    )
    .await;
    let took = started.elapsed();
    assert_eq!(reply.status, 200, "{actor}: {}", reply.text());
    took
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let rt = stasis_test_util::bench::runtime();
    let tmp = tempfile::Builder::new()
        .prefix("stasis-js-")
        .tempdir()
        .expect("tempdir");
    let serve = bench::serve(&STASIS, &tmp.path().join("data"), &["--workers", "1"]);
    let (ingress, admin_addr) = (serve.addr("ingress="), serve.addr("admin="));
    let client = {
        let _guard = rt.enter();
        client()
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("demos-js/counter.js");
    if std::fs::metadata(STASIS.demo("js-engine")).map_or(0, |m| m.len()) == 0 {
        println!("js-summary: SKIPPED: the JavaScript engine was not built");
        return;
    }
    let started = Instant::now();
    let pushed = STASIS
        .command()
        .args(["template", "push", "js", script.to_str().expect("utf-8")])
        .args(["--admin", &format!("http://{admin_addr}")])
        .output()
        .expect("run stasis template push");
    let push_ms = started.elapsed().as_secs_f64() * 1000.0;
    assert!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    rt.block_on(admin::push_template(
        &client,
        admin_addr,
        "rust",
        STASIS.demo_wasm("counter"),
    ));
    let langs = ["rust", "js"];
    for lang in langs {
        let template = rt.block_on(call_ok(
            &client,
            admin_addr,
            "GET",
            &format!("/v1/templates/{lang}"),
            None,
        ));
        println!(
            "js-summary: template {lang} module_kib={:.0}",
            template["bytes"].as_u64().unwrap_or(0) as f64 / KIB
        );
    }
    println!(
        "js-summary: push of counter.js (engine start-up + top level + upload) ms={push_ms:.0}"
    );
    for lang in langs {
        let actor = format!("{lang}-1");
        let paused = rt.block_on(async {
            call_ok(
                &client,
                admin_addr,
                "POST",
                "/v1/actors",
                Some(&serde_json::json!({
                    "name": actor, "template": lang
                })),
            )
            .await;
            post(&client, ingress, &actor).await;
            let path = format!("/v1/actors/{actor}/pause");
            call_ok(&client, admin_addr, "POST", &path, None).await
        });
        println!(
            "js-summary: {lang} paused after one request: snapshot_kib={:.0} memory_kib={:.0}",
            paused["snapshot_bytes"].as_u64().unwrap_or(0) as f64 / KIB,
            paused["memory_bytes"].as_u64().unwrap_or(0) as f64 / KIB,
        );
    }

    let mut group = c.benchmark_group("js");
    group.sampling_mode(SamplingMode::Flat);
    let made = AtomicUsize::new(0);
    for lang in langs {
        group.bench_function(BenchmarkId::new("create", lang), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let name = format!("c-{lang}-{}", made.fetch_add(1, Ordering::Relaxed));
                        let started = Instant::now();
                        let reply = admin::create_actor(&client, admin_addr, &name, lang).await;
                        total += started.elapsed();
                        assert_eq!(reply.status, 201, "{}", reply.text());
                        let path = format!("/v1/actors/{name}");
                        call(&client, admin_addr, "DELETE", &path, None).await;
                    }
                    total
                })
            });
        });
    }
    for lang in langs {
        let actor = format!("{lang}-1");
        group.bench_function(BenchmarkId::new("request", lang), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += post(&client, ingress, &actor).await;
                    }
                    total
                })
            });
        });
    }
    for lang in langs {
        let actor = format!("{lang}-1");
        let pause = format!("/v1/actors/{actor}/pause");
        group.bench_function(BenchmarkId::new("wake", lang), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        call_ok(&client, admin_addr, "POST", &pause, None).await;
                        total += post(&client, ingress, &actor).await;
                    }
                    total
                })
            });
        });
    }
    group.finish();
    drop(serve);
    c.final_summary();
}
