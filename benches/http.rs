//! HTTP benchmarks on loopback (issue 5, items 5 and 6), against the real
//! `stasis serve` binary, with a keep-alive hyper client:
//!
//! * `http_resume/<actor>/…`: a request to a running actor (the baseline),
//!   the first request after a pause (resume on demand + the request), the
//!   pause alone (admin API) and pause + first request, for `counter` and a
//!   `kv` actor holding 16 MiB; each pause + request is paired with a
//!   write + fsync of the snapshot's size just before it, and the difference is
//!   printed (the target is "under 1 ms beyond one fsync"); plus a plain
//!   write + fsync and `SnapshotStore::write` of the counter snapshot's size
//!   on the server's filesystem;
//! * `throughput/…`: `POST /` to a running counter through the router
//!   versus the same call on a worker in this process (`Worker::call`), with
//!   1 and 8 requests in flight.
//!
//! Besides criterion's estimates (medians of sample means), every request
//! latency is recorded and printed as `latency:` lines with p50/p90/p99.
//! The long-run throughput figure comes from `wrk`: see `benches/wrk.sh`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, SamplingMode, Throughput};
use stasis_core::engine::Limits;
use stasis_core::snapshot_files::LocalSnapshotStore;
use stasis_core::snapshot_store::SnapshotStore as _;
use stasis_host_api::Request;
use stasis_runtime::contract::client_gone::ClientGone;
use stasis_runtime::contract::metrics::Metrics;
use stasis_runtime::contract::settings::WorkerSettings;
use stasis_runtime::contract::templates::TemplateDir;
use stasis_runtime::worker::{ActorSpec, Worker};
use stasis_test_util::admin::{self, call_ok};
use stasis_test_util::data::{random_bytes, write_fsync};
use stasis_test_util::http::{Http, client, send};
use stasis_test_util::stats::percentile;
use stasis_test_util::{Artifacts, Proc, artifacts, bench, engine};

/// The `stasis` binary and the demo actors.
const STASIS: Artifacts = artifacts!();

const KV_BLOBS: usize = 4;
const KV_BLOB: usize = 4 << 20;

/// A `stasis serve` on a temporary data dir; killed on drop (before the
/// directory is removed: fields drop in order).
struct Server {
    _process: Proc,
    ingress: SocketAddr,
    admin: SocketAddr,
    dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("stasis-bench-http-")
            .tempdir()
            .expect("temp dir");
        // Logging per request would be part of the measurement: the wrapper
        // runs it at `warn` unless STASIS_BENCH_LOG says otherwise.
        let process = bench::serve(&STASIS, &dir.path().join("data"), &[]);
        Self {
            ingress: process.addr("ingress="),
            admin: process.addr("admin="),
            _process: process,
            dir,
        }
    }
}

/// An actor on the server and the request the benchmark sends it.
struct Target {
    name: &'static str,
    method: &'static str,
    path: &'static str,
}

impl Target {
    fn host(&self) -> String {
        format!("{}.actors.localhost", self.name)
    }
}

struct Ctx {
    rt: tokio::runtime::Runtime,
    client: Http,
    server: Server,
    /// Size of each actor's snapshot file, by actor name.
    snapshot_bytes: HashMap<&'static str, usize>,
}

impl Ctx {
    /// A bodiless admin call, asserting 2xx; its JSON answer.
    fn admin(&self, method: &str, path: &str) -> serde_json::Value {
        let call = call_ok(&self.client, self.server.admin, method, path, None);
        self.rt.block_on(call)
    }

    async fn request(&self, target: &Target) {
        let reply = send(
            &self.client,
            self.server.ingress,
            target.method,
            &target.host(),
            target.path,
            Bytes::new(),
        )
        .await;
        assert_eq!(reply.status, 200, "{} {}", target.method, target.path);
    }

    fn pause(&self, target: &Target) -> serde_json::Value {
        self.admin("POST", &format!("/v1/actors/{}/pause", target.name))
    }
}

/// [`write_fsync`] of `bytes` to `path`, timed; the file is removed after
/// (untimed).
fn timed_write_fsync(path: &Path, bytes: &[u8]) -> Duration {
    let start = Instant::now();
    write_fsync(path, bytes);
    let d = start.elapsed();
    std::fs::remove_file(path).expect("remove");
    d
}

/// Prints p50/p90/p99/max of `samples_us` (microseconds) as a `latency:`
/// line.
fn report_us(name: &str, samples_us: &[f64]) {
    if samples_us.is_empty() {
        return;
    }
    let at = |p: f64| percentile(samples_us, p);
    println!(
        "latency: {name} n={} p50={:.1}us p90={:.1}us p99={:.1}us max={:.1}us",
        samples_us.len(),
        at(50.0),
        at(90.0),
        at(99.0),
        at(100.0)
    );
}

/// Prints percentiles of signed differences (seconds) as a `latency:` line.
fn report_signed(name: &str, all: &[f64]) {
    let us: Vec<f64> = all.iter().map(|s| s * 1e6).collect();
    report_us(name, &us);
}

/// The server-side pause time a pause answer reports.
fn server_duration(pause: &serde_json::Value) -> Duration {
    Duration::from_secs_f64(pause["duration_ms"].as_f64().expect("duration_ms") / 1e3)
}

/// Individual latencies of one benchmark, printed as percentiles.
#[derive(Default)]
struct Latencies(Mutex<Vec<Duration>>);

impl Latencies {
    fn add(&self, d: Duration) {
        self.0.lock().expect("latencies").push(d);
    }

    fn report(&self, name: &str) {
        let all = std::mem::take(&mut *self.0.lock().expect("latencies"));
        let us: Vec<f64> = all.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        report_us(name, &us);
    }
}

fn setup() -> Ctx {
    let rt = stasis_test_util::bench::runtime();
    let client = {
        let _guard = rt.enter();
        client()
    };
    let mut ctx = Ctx {
        rt,
        client,
        server: Server::start(),
        snapshot_bytes: HashMap::new(),
    };
    let (http, admin_addr) = (&ctx.client, ctx.server.admin);
    ctx.rt.block_on(async {
        for name in ["counter", "kv"] {
            admin::push_template(http, admin_addr, name, STASIS.demo_wasm(name)).await;
        }
        for (name, template) in [("counter", "counter"), ("kv16", "kv")] {
            let reply = admin::create_actor(http, admin_addr, name, template).await;
            let _ = reply.ok(&format!("create {name}"));
        }
    });
    // 16 MiB of incompressible values, plus a small key to read back.
    ctx.rt.block_on(async {
        for i in 0..KV_BLOBS {
            let reply = send(
                &ctx.client,
                ctx.server.ingress,
                "PUT",
                "kv16.actors.localhost",
                &format!("/blob{i}"),
                random_bytes(i as u64 + 7, KV_BLOB),
            )
            .await;
            assert_eq!(reply.status, 201);
        }
        let reply = send(
            &ctx.client,
            ctx.server.ingress,
            "PUT",
            "kv16.actors.localhost",
            "/probe",
            Bytes::from_static(b"x"),
        )
        .await;
        assert_eq!(reply.status, 201);
    });
    for name in ["counter", "kv16"] {
        let actor = ctx.admin("GET", &format!("/v1/actors/{name}"));
        let pause = ctx.admin("POST", &format!("/v1/actors/{name}/pause"));
        println!(
            "snapshot-size: case=http-{name} memory_bytes={} file_bytes={} pause_ms={}",
            actor["memory_bytes"], pause["snapshot_bytes"], pause["duration_ms"]
        );
        let bytes = pause["snapshot_bytes"].as_u64().expect("snapshot_bytes");
        ctx.snapshot_bytes.insert(name, bytes as usize);
    }
    ctx
}

const COUNTER: Target = Target {
    name: "counter",
    method: "POST",
    path: "/",
};
const KV16: Target = Target {
    name: "kv16",
    method: "GET",
    path: "/probe",
};

fn bench_resume(c: &mut Criterion, ctx: &Ctx) {
    let mut group = c.benchmark_group("http_resume");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(20)
        .measurement_time(Duration::from_secs(2));
    for target in [COUNTER, KV16] {
        let lat = Latencies::default();
        group.bench_function(format!("{}/running", target.name), |b| {
            ctx.rt.block_on(ctx.request(&target));
            b.iter_custom(|iters| {
                ctx.rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let start = Instant::now();
                        ctx.request(&target).await;
                        let d = start.elapsed();
                        lat.add(d);
                        total += d;
                    }
                    total
                })
            });
        });
        lat.report(&format!("http_resume/{}/running", target.name));
        group.bench_function(format!("{}/request_after_pause", target.name), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    ctx.pause(&target);
                    let start = Instant::now();
                    ctx.rt.block_on(ctx.request(&target));
                    let d = start.elapsed();
                    lat.add(d);
                    total += d;
                }
                total
            });
        });
        lat.report(&format!("http_resume/{}/request_after_pause", target.name));
        // The pause alone (admin API round trip), and the server's own
        // account of it (`duration_ms`: on_pause, capture, durable write).
        let server = Latencies::default();
        group.bench_function(format!("{}/pause", target.name), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    ctx.rt.block_on(ctx.request(&target));
                    let start = Instant::now();
                    let pause = ctx.pause(&target);
                    let d = start.elapsed();
                    lat.add(d);
                    server.add(server_duration(&pause));
                    total += d;
                }
                total
            });
        });
        lat.report(&format!("http_resume/{}/pause", target.name));
        server.report(&format!(
            "http_resume/{}/pause:server_duration_ms",
            target.name
        ));
        // Each pause + request is paired with a write + fsync of as many
        // bytes as the actor's snapshot, just before it (untimed for
        // criterion), so that "beyond one fsync" compares the two under the
        // same disk conditions.
        let fsync = Latencies::default();
        let mut beyond = Vec::new();
        group.bench_function(format!("{}/pause_and_request", target.name), |b| {
            let bytes = random_bytes(5, ctx.snapshot_bytes[target.name]);
            let path = ctx.server.dir.path().join("paired-fsync");
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    ctx.rt.block_on(ctx.request(&target));
                    let f = timed_write_fsync(&path, &bytes);
                    let start = Instant::now();
                    ctx.pause(&target);
                    ctx.rt.block_on(ctx.request(&target));
                    let d = start.elapsed();
                    lat.add(d);
                    fsync.add(f);
                    beyond.push(d.as_secs_f64() - f.as_secs_f64());
                    total += d;
                }
                total
            });
        });
        lat.report(&format!("http_resume/{}/pause_and_request", target.name));
        fsync.report(&format!(
            "http_resume/{}/pause_and_request:paired_write_fsync",
            target.name
        ));
        report_signed(
            &format!(
                "http_resume/{}/pause_and_request:minus_paired_write_fsync",
                target.name
            ),
            &beyond,
        );
    }
    // Baselines, on the data dir's filesystem, with the counter snapshot's
    // size: one durable write (create, write, fsync), and the snapshot
    // store's whole protocol (temp file, write, fsync, rename, fsync folder).
    let bytes = random_bytes(3, ctx.snapshot_bytes["counter"]);
    let lat = Latencies::default();
    group.bench_function("counter_snapshot_size/write_fsync", |b| {
        let path = ctx.server.dir.path().join("fsync-probe");
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let d = timed_write_fsync(&path, &bytes);
                lat.add(d);
                total += d;
            }
            total
        });
    });
    lat.report("http_resume/counter_snapshot_size/write_fsync");
    group.bench_function("counter_snapshot_size/snapshot_store_write", |b| {
        let store = LocalSnapshotStore::open(ctx.server.dir.path().join("store-probe"), None)
            .expect("store");
        let mut seq = 0;
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                seq += 1;
                let start = Instant::now();
                store.write("probe", seq, 0, &bytes).expect("write");
                let d = start.elapsed();
                lat.add(d);
                total += d;
                store.remove("probe", seq).expect("remove");
            }
            total
        });
    });
    lat.report("http_resume/counter_snapshot_size/snapshot_store_write");
    group.finish();
}

/// Placement epoch of the in-process counter (any value, used consistently).
const EPOCH: u64 = 1;

/// A counter on a worker in this process, as the router would reach it.
struct Direct {
    worker: Arc<Worker>,
    _tmp: tempfile::TempDir,
}

fn direct(ctx: &Ctx) -> Direct {
    let tmp = tempfile::Builder::new()
        .prefix("stasis-bench-worker-")
        .tempdir()
        .expect("temp dir");
    let engine = engine::engine(Limits::default());
    let template = engine::load(&engine, &STASIS.demo_wasm("counter"));
    let templates = TemplateDir::new(
        engine::module_cache(&engine),
        tmp.path().join("templates"),
        None,
    );
    let store =
        Arc::new(LocalSnapshotStore::open(tmp.path().join("snapshots"), None).expect("store"));
    let worker = Worker::new(
        "worker-1",
        engine,
        store,
        Arc::new(Metrics::default()),
        WorkerSettings::default(),
        None,
        Arc::new(templates),
    );
    let spec = ActorSpec {
        name: "counter".into(),
        template,
        env: Vec::new(),
        durability: None,
    };
    ctx.rt
        .block_on(worker.create(&spec, EPOCH))
        .expect("create counter");
    Direct { worker, _tmp: tmp }
}

fn post_request() -> Request {
    Request {
        method: "POST".into(),
        uri: "/".into(),
        headers: vec![("host".into(), b"counter.actors.localhost".to_vec())],
        ..Request::default()
    }
}

/// Runs `iters` calls of `call` with `in_flight` of them outstanding at once;
/// returns the wall time.
fn closed_loop<F, Fut>(ctx: &Ctx, iters: u64, in_flight: u64, call: F) -> Duration
where
    F: Fn() -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = ()> + Send,
{
    ctx.rt.block_on(async {
        let start = Instant::now();
        let tasks: Vec<_> = (0..in_flight)
            .map(|i| {
                let n = iters / in_flight + u64::from(i < iters % in_flight);
                let call = call.clone();
                tokio::spawn(async move {
                    for _ in 0..n {
                        call().await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("task");
        }
        start.elapsed()
    })
}

fn bench_throughput(c: &mut Criterion, ctx: &Ctx) {
    let direct = direct(ctx);
    let mut group = c.benchmark_group("throughput");
    group
        .throughput(Throughput::Elements(1))
        .measurement_time(Duration::from_secs(2));
    // The counter must be running (a paused one would be resumed first).
    ctx.rt.block_on(ctx.request(&COUNTER));
    for in_flight in [1u64, 8] {
        group.bench_function(format!("router/{in_flight}-in-flight"), |b| {
            let client = ctx.client.clone();
            let ingress = ctx.server.ingress;
            b.iter_custom(|iters| {
                let client = client.clone();
                closed_loop(ctx, iters, in_flight, move || {
                    let client = client.clone();
                    async move {
                        let reply = send(
                            &client,
                            ingress,
                            "POST",
                            "counter.actors.localhost",
                            "/",
                            Bytes::new(),
                        )
                        .await;
                        assert_eq!(reply.status, 200);
                    }
                })
            });
        });
        group.bench_function(format!("worker_direct/{in_flight}-in-flight"), |b| {
            let worker = direct.worker.clone();
            b.iter_custom(|iters| {
                let worker = worker.clone();
                closed_loop(ctx, iters, in_flight, move || {
                    let worker = worker.clone();
                    async move {
                        let response = worker
                            .call("counter", EPOCH, post_request(), &ClientGone::new())
                            .await
                            .expect("call");
                        assert_eq!(response.status, 200);
                    }
                })
            });
        });
    }
    group.finish();
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .nresamples(20_000)
        .without_plots()
        .configure_from_args();
    let started = Instant::now();
    let ctx = setup();
    bench_resume(&mut c, &ctx);
    bench_throughput(&mut c, &ctx);
    c.final_summary();
    println!(
        "http benches finished in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
