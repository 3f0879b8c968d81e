//! Cluster benchmarks (issue 4, "Performance"), against the real `stasis`
//! binary on loopback, over real HTTP:
//!
//! * `migrate_downtime/<actor>/<pair>`: one move of a running actor, the
//!   `counter` and a `kv` actor filled with random bytes until its linear
//!   memory is ≥ 16 MiB, back and forth between `worker-1` and `worker-2`
//!   (both in the `serve` process: `in-process`) or between `worker-1` and a
//!   `stasis worker run` process (`remote`). The time criterion records is
//!   the **server-reported** `downtime_ms` (gate closed → open) of each
//!   `POST /v1/actors/{name}/migrate`; the client-observed latency of that
//!   call is recorded too. p50/p99 of every move made (warm-up included)
//!   are printed as `downtime-summary:` lines.
//! * `load_16_clients/<steady|rebalancing>/<pair>`: the load of issue 4's
//!   scale test — 16 concurrent clients, each sending its share of POSTs
//!   spread over 20 counter actors through the ingress (`Host:
//!   <actor>.actors.localhost`) — without moves, and with a background task
//!   that keeps forcing imbalance (every actor migrated to `worker-1`) and
//!   calling `POST /v1/rebalance`. Criterion reports requests/s; per-request
//!   p50/p99, moves made and errors are printed as `load-summary:` lines, and
//!   every actor's final count is checked against the 200s it got (a lost or
//!   doubled request fails the bench).
//! * with `STASIS_BENCH_WRK=1` (and `wrk` on the `PATH`), a 10 s `wrk` run
//!   of POSTs against one counter (2 threads, 16 connections), printed.
//!
//! In criterion's test mode (`cargo test --benches`, or any run without
//! `--bench`) each benchmark runs once and a load round is 16 × 10 requests,
//! so CI stays cheap; `cargo bench --bench cluster` runs 16 × 200.
//! Results: `docs/benchmarks/cluster-density.md`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use serde_json::{Value, json};
use stasis_test_util::admin::{self, call_ok, wait_worker_ready};
use stasis_test_util::bench::{self, test_mode};
use stasis_test_util::data::random_bytes;
use stasis_test_util::demos::count_in;
use stasis_test_util::http::{Http, actor_host, client, send};
use stasis_test_util::stats::summary;
use stasis_test_util::{Artifacts, artifacts};
use tokio::runtime::Runtime;

/// The `stasis` binary and the demo actors.
const STASIS: Artifacts = artifacts!();

const MIB: u64 = 1 << 20;
const KV_TARGET_MEMORY: u64 = 16 * MIB;
const KV_VALUE_BYTES: usize = 64 << 10;
const LOAD_ACTORS: usize = 20;
const LOAD_CLIENTS: usize = 16;

// ---- HTTP -------------------------------------------------------------------

/// Pushes the demo actor `name` as a template of the same name.
async fn push(client: &Http, admin_addr: SocketAddr, name: &str) {
    admin::push_template(client, admin_addr, name, STASIS.demo_wasm(name)).await;
}

async fn create(client: &Http, admin_addr: SocketAddr, actor: &str, template: &str) {
    let reply = admin::create_actor(client, admin_addr, actor, template).await;
    let _ = reply.ok(&format!("create {actor}"));
}

async fn actor_info(client: &Http, admin_addr: SocketAddr, actor: &str) -> Value {
    call_ok(
        client,
        admin_addr,
        "GET",
        &format!("/v1/actors/{actor}"),
        None,
    )
    .await
}

/// One move; (server-reported downtime, client-observed latency), in ms.
async fn migrate(client: &Http, admin_addr: SocketAddr, actor: &str, to: &str) -> (f64, f64) {
    let started = Instant::now();
    let answer = call_ok(
        client,
        admin_addr,
        "POST",
        &format!("/v1/actors/{actor}/migrate"),
        Some(&json!({ "to": to })),
    )
    .await;
    let client_ms = started.elapsed().as_secs_f64() * 1e3;
    assert_eq!(answer["worker"], to, "{answer}");
    let downtime = answer["downtime_ms"].as_f64().expect("downtime_ms");
    (downtime, client_ms)
}

/// POST to a counter through the ingress; the count it answers.
async fn post_count(client: &Http, ingress: SocketAddr, actor: &str) -> (u16, u64) {
    let reply = send(
        client,
        ingress,
        "POST",
        &actor_host(actor),
        "/",
        Bytes::new(),
    )
    .await;
    (reply.status, count_of(&reply.body))
}

/// The count a counter answered, 0 if none (a failed request).
fn count_of(body: &[u8]) -> u64 {
    count_in(&String::from_utf8_lossy(body)).unwrap_or(0)
}

// ---- statistics -------------------------------------------------------------

/// `ms` milliseconds as a duration (negative as zero).
fn ms_duration(ms: f64) -> Duration {
    Duration::from_secs_f64(ms.max(0.0) / 1e3)
}

// ---- one-move downtime ------------------------------------------------------

#[derive(Default)]
struct Moves {
    downtime_ms: Vec<f64>,
    client_ms: Vec<f64>,
}

fn bench_downtime(c: &mut Criterion, rt: &Runtime) {
    let tmp = tempfile::Builder::new()
        .prefix("stasis-bench-cluster-")
        .tempdir()
        .expect("tempdir");
    let serve = bench::serve(&STASIS, &tmp.path().join("serve"), &["--workers", "2"]);
    let admin_addr = serve.addr("admin=");
    let ingress = serve.addr("ingress=");
    let client = client();
    // The remote worker joins before any actor exists, so its join
    // rebalance moves nothing.
    let remote = bench::worker(&STASIS, admin_addr, "w-b", &tmp.path().join("w-b"));
    rt.block_on(async {
        wait_worker_ready(&client, admin_addr, "w-b").await;
        push(&client, admin_addr, "counter").await;
        push(&client, admin_addr, "kv").await;
        create(&client, admin_addr, "mv-counter", "counter").await;
        create(&client, admin_addr, "mv-kv", "kv").await;
        for _ in 0..3 {
            assert_eq!(post_count(&client, ingress, "mv-counter").await.0, 200);
        }
        let mut keys = 0u64;
        loop {
            let info = actor_info(&client, admin_addr, "mv-kv").await;
            let memory = info["memory_bytes"].as_u64().expect("memory_bytes");
            if memory >= KV_TARGET_MEMORY {
                break;
            }
            for _ in 0..16 {
                let body = Bytes::from(random_bytes(keys, KV_VALUE_BYTES));
                let reply = send(
                    &client,
                    ingress,
                    "PUT",
                    "mv-kv.actors.localhost",
                    &format!("/k{keys}"),
                    body,
                )
                .await;
                assert_eq!(reply.status, 201, "PUT /k{keys}");
                keys += 1;
            }
        }
        let checkpoint = call_ok(
            &client,
            admin_addr,
            "POST",
            "/v1/actors/mv-kv/checkpoint",
            None,
        )
        .await;
        println!(
            "kv-fill: {keys} keys of {KV_VALUE_BYTES} random bytes; memory_bytes={} snapshot_bytes={}",
            checkpoint["memory_bytes"], checkpoint["snapshot_bytes"]
        );
    });

    let mut group = c.benchmark_group("migrate_downtime");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(100);
    group.warm_up_time(Duration::from_secs(1));
    for (actor, label, measure) in [("mv-counter", "counter", 3), ("mv-kv", "kv-16MiB", 8)] {
        group.measurement_time(Duration::from_secs(measure));
        for (pair, a, b) in [
            ("in-process", "worker-1", "worker-2"),
            ("remote", "worker-1", "w-b"),
        ] {
            let moves = Arc::new(Mutex::new(Moves::default()));
            let at = Arc::new(Mutex::new(String::new()));
            rt.block_on(async {
                // Start on `a`, and prime both directions (the remote worker
                // compiles the template on its first restore).
                let info = actor_info(&client, admin_addr, actor).await;
                if info["worker"] != a {
                    migrate(&client, admin_addr, actor, a).await;
                }
                for _ in 0..2 {
                    migrate(&client, admin_addr, actor, b).await;
                    migrate(&client, admin_addr, actor, a).await;
                }
            });
            *at.lock().unwrap() = a.to_owned();
            group.bench_function(BenchmarkId::new(label, pair), |bencher| {
                bencher.to_async(rt).iter_custom(|iters| {
                    let client = client.clone();
                    let moves = moves.clone();
                    let at = at.clone();
                    async move {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            let to = if *at.lock().unwrap() == a { b } else { a };
                            let (downtime, client_ms) =
                                migrate(&client, admin_addr, actor, to).await;
                            *at.lock().unwrap() = to.to_owned();
                            total += ms_duration(downtime);
                            let mut moves = moves.lock().unwrap();
                            moves.downtime_ms.push(downtime);
                            moves.client_ms.push(client_ms);
                        }
                        total
                    }
                });
            });
            let moves = moves.lock().unwrap();
            println!(
                "downtime-summary: {label}/{pair} downtime_ms {} | client_ms {}",
                summary(&moves.downtime_ms),
                summary(&moves.client_ms)
            );
        }
    }
    group.finish();
    // The counter kept its state through every move.
    rt.block_on(async {
        let (status, count) = post_count(&client, ingress, "mv-counter").await;
        assert_eq!((status, count), (200, 4), "counter state after the moves");
    });
    drop(remote);
    drop(serve);
}

// ---- throughput under load, with and without rebalancing -------------------

struct Load {
    client: Http,
    ingress: SocketAddr,
    actors: Arc<Vec<String>>,
    per_client: usize,
    latencies_ms: Mutex<Vec<f64>>,
    errors: AtomicU64,
    ok_per_actor: Vec<AtomicU64>,
}

impl Load {
    /// One round: `LOAD_CLIENTS` tasks, each sending `per_client` POSTs in
    /// sequence, spread over the actors as in issue 4's test.
    async fn round(self: &Arc<Self>) -> Duration {
        let started = Instant::now();
        let mut tasks = Vec::with_capacity(LOAD_CLIENTS);
        for k in 0..LOAD_CLIENTS {
            let load = self.clone();
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(load.per_client);
                for i in 0..load.per_client {
                    let index = (k * 7 + i) % load.actors.len();
                    let sent = Instant::now();
                    let (status, _) =
                        post_count(&load.client, load.ingress, &load.actors[index]).await;
                    latencies.push(sent.elapsed().as_secs_f64() * 1e3);
                    if status == 200 {
                        load.ok_per_actor[index].fetch_add(1, Ordering::Relaxed);
                    } else {
                        load.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                latencies
            }));
        }
        let mut all = Vec::with_capacity(LOAD_CLIENTS * self.per_client);
        for task in tasks {
            all.extend(task.await.expect("client task"));
        }
        let elapsed = started.elapsed();
        self.latencies_ms.lock().unwrap().extend(all);
        elapsed
    }
}

/// Keeps moves running until `stop`: every actor not on `home` is migrated
/// there (forced imbalance), then `POST /v1/rebalance` spreads them again.
async fn rebalancer(
    client: Http,
    admin_addr: SocketAddr,
    home: &'static str,
    stop: Arc<AtomicBool>,
) -> (Vec<f64>, u64) {
    let mut downtimes = Vec::new();
    let mut failed = 0;
    while !stop.load(Ordering::Relaxed) {
        let list = call_ok(&client, admin_addr, "GET", "/v1/actors", None).await;
        for actor in list.as_array().into_iter().flatten() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if actor["worker"] != home {
                let name = actor["name"].as_str().expect("name");
                let path = format!("/v1/actors/{name}/migrate");
                let reply = admin::call(
                    &client,
                    admin_addr,
                    "POST",
                    &path,
                    Some(&json!({ "to": home })),
                )
                .await;
                match reply.json()["downtime_ms"].as_f64() {
                    Some(d) if reply.status == 200 => downtimes.push(d),
                    _ => failed += 1,
                }
            }
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let report = call_ok(&client, admin_addr, "POST", "/v1/rebalance", None).await;
        for m in report["moves"].as_array().into_iter().flatten() {
            match m["downtime_ms"].as_f64() {
                Some(d) if m["error"].is_null() => downtimes.push(d),
                _ => failed += 1,
            }
        }
    }
    (downtimes, failed)
}

fn bench_load(c: &mut Criterion, rt: &Runtime) {
    let per_client = if test_mode() { 10 } else { 200 };
    let mut group = c.benchmark_group("load_16_clients");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(2));
    group.measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements((LOAD_CLIENTS * per_client) as u64));
    for (pair, other) in [("in-process", "worker-2"), ("remote", "w-b")] {
        let tmp = tempfile::Builder::new()
            .prefix("stasis-bench-load-")
            .tempdir()
            .expect("tempdir");
        let workers = if pair == "in-process" { "2" } else { "1" };
        let serve = bench::serve(&STASIS, &tmp.path().join("serve"), &["--workers", workers]);
        let admin_addr = serve.addr("admin=");
        let ingress = serve.addr("ingress=");
        let client = client();
        let remote = (pair == "remote")
            .then(|| bench::worker(&STASIS, admin_addr, other, &tmp.path().join(other)));
        let actors: Vec<String> = (0..LOAD_ACTORS).map(|i| format!("load-{i}")).collect();
        rt.block_on(async {
            wait_worker_ready(&client, admin_addr, other).await;
            push(&client, admin_addr, "counter").await;
            for actor in &actors {
                create(&client, admin_addr, actor, "counter").await;
            }
        });
        let load = Arc::new(Load {
            client: client.clone(),
            ingress,
            ok_per_actor: actors.iter().map(|_| AtomicU64::new(0)).collect(),
            actors: Arc::new(actors),
            per_client,
            latencies_ms: Mutex::new(Vec::new()),
            errors: AtomicU64::new(0),
        });
        for mode in ["steady", "rebalancing"] {
            load.latencies_ms.lock().unwrap().clear();
            let errors_before = load.errors.load(Ordering::Relaxed);
            let stop = Arc::new(AtomicBool::new(false));
            let mover = (mode == "rebalancing").then(|| {
                rt.spawn(rebalancer(
                    client.clone(),
                    admin_addr,
                    "worker-1",
                    stop.clone(),
                ))
            });
            let started = Instant::now();
            group.bench_function(BenchmarkId::new(mode, pair), |bencher| {
                bencher.to_async(rt).iter_custom(|iters| {
                    let load = load.clone();
                    async move {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            total += load.round().await;
                        }
                        total
                    }
                });
            });
            let wall = started.elapsed().as_secs_f64();
            stop.store(true, Ordering::Relaxed);
            let (downtimes, failed) = match mover {
                Some(task) => rt.block_on(task).expect("rebalancer"),
                None => (Vec::new(), 0),
            };
            let latencies = load.latencies_ms.lock().unwrap().clone();
            let errors = load.errors.load(Ordering::Relaxed) - errors_before;
            println!(
                "load-summary: {mode}/{pair} requests={} errors={errors} latency_ms {} | moves={} ({:.1}/s) failed_moves={failed} move_downtime_ms {}",
                latencies.len(),
                summary(&latencies),
                downtimes.len(),
                downtimes.len() as f64 / wall,
                summary(&downtimes),
            );
            assert_eq!(errors, 0, "every request of the load must get 200");
        }
        // Exact counts: every actor counted each 200 it answered once.
        rt.block_on(async {
            for (index, actor) in load.actors.iter().enumerate() {
                let reply = send(
                    &client,
                    ingress,
                    "GET",
                    &actor_host(actor),
                    "/",
                    Bytes::new(),
                )
                .await;
                assert_eq!(reply.status, 200);
                let expected = load.ok_per_actor[index].load(Ordering::Relaxed);
                assert_eq!(
                    count_of(&reply.body),
                    expected,
                    "{actor}: a duplicate or a gap in its count"
                );
            }
        });
        println!("load-check: {pair}: every actor's count equals the 200s it answered");
        if pair == "in-process" && !test_mode() && std::env::var_os("STASIS_BENCH_WRK").is_some() {
            run_wrk(rt, &client, admin_addr, ingress, tmp.path());
        }
        drop(remote);
        drop(serve);
    }
    group.finish();
}

/// `wrk` against one counter for 10 s (POSTs, 2 threads, 16 connections).
fn run_wrk(rt: &Runtime, client: &Http, admin_addr: SocketAddr, ingress: SocketAddr, dir: &Path) {
    rt.block_on(create(client, admin_addr, "wrk-counter", "counter"));
    let script = dir.join("post.lua");
    std::fs::write(&script, "wrk.method = \"POST\"\n").expect("write wrk script");
    let out = Command::new("wrk")
        .args(["-t2", "-c16", "-d10s", "--latency", "-s"])
        .arg(&script)
        .args(["-H", "Host: wrk-counter.actors.localhost"])
        .arg(format!("http://{ingress}/"))
        .output();
    match out {
        Ok(out) => {
            println!("wrk: {}", String::from_utf8_lossy(&out.stdout));
            let (status, count) = rt.block_on(async {
                let host = actor_host("wrk-counter");
                let reply = send(client, ingress, "GET", &host, "/", Bytes::new()).await;
                (reply.status, count_of(&reply.body))
            });
            println!("wrk: final count of wrk-counter: {count} (status {status})");
        }
        Err(e) => println!("wrk: not run ({e})"),
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let started = Instant::now();
    let rt = stasis_test_util::bench::runtime();
    bench_downtime(&mut c, &rt);
    bench_load(&mut c, &rt);
    c.final_summary();
    println!(
        "cluster benches finished in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
