//! Scale benchmark (issue 13, "What must be shown", second bullet): how the
//! cost of pausing, waking and forking an actor grows with its memory,
//! through the real `stasis serve --workers 1` on loopback, client-observed.
//! One run compares a small `kv` actor (template pushed without preload,
//! about 1 MiB of linear memory) with a big one (`KV_PRELOAD=1000000`,
//! about 110 MiB):
//!
//! * `scale/first_request_after_pause/<small|big>`: the actor is paused
//!   through the admin API (untimed), then one `GET` over the ingress is
//!   timed: it resumes the actor and reads back the value last `PUT`;
//! * `scale/pause_after_one_key_change/<small|big>`: one key is `PUT`
//!   (untimed; it wakes the actor), then `POST /v1/actors/NAME/pause` is
//!   timed;
//! * `scale/fork/big`: `POST /v1/actors/big/fork` of the paused big actor
//!   (every iteration makes a new paused actor `f-big-<n>`).
//!
//! Before criterion runs, a warm-up of `STASIS_SCALE_SAMPLES` samples per
//! case (interleaving small and big) prints `scale-ratio:` lines: the
//! medians and the big/small ratios of the first two cases, the big actor's
//! median `bytes_written` (what its pause wrote, from the pause answer) as a
//! percentage of its `memory_bytes` (while running), and the fork's median,
//! each beside the target: first request after pause ≤ 2×, pause
//! after a one-key change ≤ 5×, `bytes_written` ≤ 2 % of memory, fork of
//! the big actor ≤ 50 ms. The bench checks status codes and read-back
//! values, never timings.
//!
//! Knobs: `STASIS_SCALE_PRELOAD` (keys of the big actor: 1000000, or 10000
//! in criterion's test mode) and `STASIS_SCALE_SAMPLES` (warm-up samples
//! per case: 20, or 3 in test mode). Results: BENCHMARKS.md, section 15.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, SamplingMode};
use serde_json::{Value, json};
use stasis_test_util::admin::{self, call_ok};
use stasis_test_util::bench::{self, test_mode};
use stasis_test_util::http::{Http, actor_host, client, send};
use stasis_test_util::stats::percentile;
use stasis_test_util::{Artifacts, artifacts};

/// The `stasis` binary and the demo actors.
const STASIS: Artifacts = artifacts!();

const MIB: f64 = (1 << 20) as f64;

/// The key every `PUT` changes and every timed `GET` reads.
const KEY: &str = "/scale-key";

/// The targets.
const FIRST_REQUEST_RATIO: f64 = 2.0;
const PAUSE_RATIO: f64 = 5.0;
const WRITTEN_PERCENT: f64 = 2.0;
const FORK_MS: f64 = 50.0;

/// A numeric knob from the environment (`_` allowed as a separator), or
/// `default`.
fn knob(name: &str, default: usize) -> usize {
    std::env::var(name).ok().map_or(default, |v| {
        v.replace('_', "")
            .parse()
            .unwrap_or_else(|e| panic!("{name}={v}: {e}"))
    })
}

/// One of the two actors (template and actor share the name), with the
/// value its key holds now.
struct Actor {
    name: &'static str,
    value: Mutex<String>,
    puts: AtomicUsize,
}

impl Actor {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            value: Mutex::new(String::new()),
            puts: AtomicUsize::new(0),
        }
    }
}

/// The server's addresses and the client talking to them.
struct Scale {
    client: Http,
    ingress: SocketAddr,
    admin: SocketAddr,
    forks: AtomicUsize,
}

impl Scale {
    /// `POST /v1/actors/NAME/pause`, asserting 200 and `paused`; the answer
    /// and how long it took.
    async fn pause(&self, actor: &Actor) -> (Value, Duration) {
        let path = format!("/v1/actors/{}/pause", actor.name);
        let started = Instant::now();
        let reply = admin::call(&self.client, self.admin, "POST", &path, None).await;
        let took = started.elapsed();
        let answer = reply.ok(&format!("pause {}", actor.name)).json();
        assert_eq!(answer["state"], "paused", "pause {}: {answer}", actor.name);
        (answer, took)
    }

    /// `PUT KEY` with a new 32-byte value (the key's size never changes),
    /// asserting 200 or 201.
    async fn put(&self, actor: &Actor) {
        let n = actor.puts.fetch_add(1, Ordering::Relaxed);
        let value = format!("{n:032}");
        let host = actor_host(actor.name);
        let body = Bytes::from(value.clone());
        let reply = send(&self.client, self.ingress, "PUT", &host, KEY, body).await;
        assert!(
            reply.status == 200 || reply.status == 201,
            "PUT {} {KEY}: {} {}",
            actor.name,
            reply.status,
            reply.text()
        );
        *actor.value.lock().expect("value") = value;
    }

    /// `GET KEY`, timed, asserting 200 and the value last put.
    async fn get(&self, actor: &Actor) -> Duration {
        let host = actor_host(actor.name);
        let started = Instant::now();
        let reply = send(&self.client, self.ingress, "GET", &host, KEY, Bytes::new()).await;
        let took = started.elapsed();
        assert_eq!(
            reply.status,
            200,
            "GET {} {KEY}: {}",
            actor.name,
            reply.text()
        );
        let expected = actor.value.lock().expect("value").clone();
        assert_eq!(reply.text(), expected, "GET {} {KEY} read back", actor.name);
        took
    }

    /// The actor's `memory_bytes` now (0 when paused).
    async fn memory_bytes(&self, actor: &Actor) -> u64 {
        let path = format!("/v1/actors/{}", actor.name);
        let view = call_ok(&self.client, self.admin, "GET", &path, None).await;
        view["memory_bytes"].as_u64().expect("memory_bytes")
    }

    /// Case 1: pause (untimed), then the timed first request.
    async fn first_request_after_pause(&self, actor: &Actor) -> Duration {
        self.pause(actor).await;
        self.get(actor).await
    }

    /// Case 2: one key changed (untimed), then the timed pause; its time,
    /// `bytes_written` and, if `measure_memory`, the running actor's
    /// `memory_bytes` (0 otherwise).
    async fn pause_after_one_key_change(
        &self,
        actor: &Actor,
        measure_memory: bool,
    ) -> (Duration, u64, u64) {
        self.put(actor).await;
        let memory = if measure_memory {
            self.memory_bytes(actor).await
        } else {
            0
        };
        let (answer, took) = self.pause(actor).await;
        let written = answer["bytes_written"].as_u64().expect("bytes_written");
        (took, written, memory)
    }

    /// Case 3: a fork of the paused `src` as a new actor, timed (201).
    async fn fork(&self, src: &Actor) -> Duration {
        let n = self.forks.fetch_add(1, Ordering::Relaxed);
        let path = format!("/v1/actors/{}/fork", src.name);
        let body = json!({ "name": format!("f-{}-{n}", src.name) });
        let started = Instant::now();
        let reply = admin::call(&self.client, self.admin, "POST", &path, Some(&body)).await;
        let took = started.elapsed();
        assert_eq!(reply.status, 201, "fork {}: {}", src.name, reply.text());
        took
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(samples: &[f64]) -> f64 {
    percentile(samples, 50.0)
}

/// `met` or `MISSED` for a figure against its upper bound.
fn verdict(value: f64, target: f64) -> &'static str {
    if value <= target { "met" } else { "MISSED" }
}

/// The warm-up: `samples` of each case (small and big interleaved), then
/// the `scale-ratio:` lines.
async fn warm_up(scale: &Scale, small: &Actor, big: &Actor, samples: usize, preload: usize) {
    let (mut first, mut pause) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    let (mut written, mut memory) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    for _ in 0..samples {
        for (i, actor) in [small, big].into_iter().enumerate() {
            first[i].push(ms(scale.first_request_after_pause(actor).await));
        }
    }
    for _ in 0..samples {
        for (i, actor) in [small, big].into_iter().enumerate() {
            let (took, bytes, mem) = scale.pause_after_one_key_change(actor, true).await;
            pause[i].push(ms(took));
            written[i].push(bytes as f64);
            memory[i].push(mem as f64);
        }
    }
    let mut forks = Vec::new();
    for _ in 0..samples {
        forks.push(ms(scale.fork(big).await));
    }
    let [first_small, first_big] = first.map(|s| median(&s));
    let [pause_small, pause_big] = pause.map(|s| median(&s));
    let [memory_small, memory_big] = memory.map(|s| median(&s));
    let written_max_big = percentile(&written[1], 100.0);
    let [written_small, written_big] = written.map(|s| median(&s));
    let first_ratio = first_big / first_small;
    let pause_ratio = pause_big / pause_small;
    let written_percent = 100.0 * written_big / memory_big;
    let fork = median(&forks);
    println!(
        "scale-ratio: setup: small memory_bytes={:.1} MiB, big memory_bytes={:.1} MiB \
         (KV_PRELOAD={preload}), {samples} warm-up samples per case",
        memory_small / MIB,
        memory_big / MIB,
    );
    println!(
        "scale-ratio: first_request_after_pause: small={first_small:.3} ms big={first_big:.3} ms \
         ratio={first_ratio:.2}x (target <= {FIRST_REQUEST_RATIO}x: {})",
        verdict(first_ratio, FIRST_REQUEST_RATIO),
    );
    println!(
        "scale-ratio: pause_after_one_key_change: small={pause_small:.3} ms big={pause_big:.3} ms \
         ratio={pause_ratio:.2}x (target <= {PAUSE_RATIO}x: {})",
        verdict(pause_ratio, PAUSE_RATIO),
    );
    println!(
        "scale-ratio: bytes_written: big median={written_big:.0} B = {written_percent:.3} % of \
         memory_bytes {memory_big:.0} (target <= {WRITTEN_PERCENT} %: {}); \
         big max={written_max_big:.0} B, small median={written_small:.0} B",
        verdict(written_percent, WRITTEN_PERCENT),
    );
    println!(
        "scale-ratio: fork/big: median={fork:.3} ms (target <= {FORK_MS} ms: {})",
        verdict(fork, FORK_MS),
    );
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let preload = knob(
        "STASIS_SCALE_PRELOAD",
        if test_mode() { 10_000 } else { 1_000_000 },
    );
    let samples = knob("STASIS_SCALE_SAMPLES", if test_mode() { 3 } else { 20 }).max(1);
    let rt = stasis_test_util::bench::runtime();
    let tmp = tempfile::Builder::new()
        .prefix("stasis-scale-")
        .tempdir()
        .expect("tempdir");
    // The big actor's preload runs inside its create, past the default
    // 1 s of guest time on a loaded machine.
    let serve = bench::serve(
        &STASIS,
        &tmp.path().join("data"),
        &["--workers", "1", "--cpu-limit", "30s"],
    );
    let scale = Scale {
        client: {
            let _guard = rt.enter();
            client()
        },
        ingress: serve.addr("ingress="),
        admin: serve.addr("admin="),
        forks: AtomicUsize::new(0),
    };
    let (small, big) = (Actor::new("small"), Actor::new("big"));
    rt.block_on(async {
        let (http, addr) = (&scale.client, scale.admin);
        admin::push_template(http, addr, small.name, STASIS.demo_wasm("kv")).await;
        let env = [("KV_PRELOAD", preload.to_string())];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        admin::push_template_env(http, addr, big.name, STASIS.demo_wasm("kv"), &env).await;
        for actor in [&small, &big] {
            let reply = admin::create_actor(http, addr, actor.name, actor.name).await;
            let _ = reply.ok(&format!("create {}", actor.name));
            // The first key and a first (full) snapshot, outside every
            // sample.
            scale.put(actor).await;
            scale.get(actor).await;
            scale.pause(actor).await;
        }
        warm_up(&scale, &small, &big, samples, preload).await;
    });

    let mut group = c.benchmark_group("scale");
    group.sampling_mode(SamplingMode::Flat);
    for actor in [&small, &big] {
        let id = BenchmarkId::new("first_request_after_pause", actor.name);
        group.bench_function(id, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += scale.first_request_after_pause(actor).await;
                    }
                    total
                })
            });
        });
    }
    for actor in [&small, &big] {
        let id = BenchmarkId::new("pause_after_one_key_change", actor.name);
        group.bench_function(id, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += scale.pause_after_one_key_change(actor, false).await.0;
                    }
                    total
                })
            });
        });
    }
    // The last case left `big` paused; pausing again is a no-op.
    rt.block_on(scale.pause(&big));
    group.bench_function(BenchmarkId::new("fork", big.name), |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += scale.fork(&big).await;
                }
                total
            })
        });
    });
    group.finish();
    println!(
        "scale: {} actors forked",
        scale.forks.load(Ordering::Relaxed)
    );
    drop(serve);
    c.final_summary();
}
