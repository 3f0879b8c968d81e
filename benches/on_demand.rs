//! Actors created on first use against `actor create` (issue 49, item 1:
//! the bench "on-demand create latency vs `actor create`"), against the
//! real `stasis` binary on loopback: one plain embedded `stasis serve`
//! (SQLite, its data dir, 2 in-process workers), the `counter` demo pushed
//! as template `counter`, and `PUT /v1/namespaces/default/on-demand` with
//! `{"template": "counter"}`. Each actor is a new name, measured one of
//! two ways:
//!
//! * on-demand: the first `POST /` with `Host: <new-name>.actors.localhost`
//!   to a name that does not exist yet, timed until its `200` answer (the
//!   ingress creates the actor, then delivers the request to it);
//! * explicit: `POST /v1/actors` (admin create) and then the first `POST /`
//!   to the actor made, timed as a whole (`create + first request`) and in
//!   parts (`create` alone, `first request` alone).
//!
//! Every answer must be `200` with `count: 1` (the actor was made once and
//! the request applied once); after each batch, one more request to its
//! first actor must count 2 (not made again), then the batch's actors are
//! deleted (untimed), so each batch starts from the same directory.
//!
//! Rounds (`STASIS_ON_DEMAND_ROUNDS`, default 3) of
//! `STASIS_ON_DEMAND_ACTORS` (default 300) actors each way, for each number
//! in flight of `STASIS_ON_DEMAND_IN_FLIGHT` (default `1,8`); within a round
//! the two modes alternate which goes first, so drift of a shared machine
//! hits both. Printed: `on-demand-round:` per round, mode and number in
//! flight, and `on-demand-summary:` with p50/p99/mean over all rounds per
//! mode and the ratio on-demand / explicit. Without `--bench` (as under
//! `cargo test --benches`) one round of 8 actors each way runs, with the
//! same checks. Results: BENCHMARKS.md, section 38.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use serde_json::json;
use stasis_test_util::admin::{self, call_ok};
use stasis_test_util::bench::{self, env_usize, test_mode};
use stasis_test_util::demos::count_in;
use stasis_test_util::http::{Http, actor_host, client, send};
use stasis_test_util::stats::percentile;
use stasis_test_util::{Artifacts, Proc, artifacts};

/// The `stasis` binary and the demo actors.
const STASIS: Artifacts = artifacts!();

/// The two ways a new actor is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The first request creates it.
    OnDemand,
    /// `POST /v1/actors`, then the first request.
    Explicit,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::OnDemand => "on-demand",
            Mode::Explicit => "explicit",
        }
    }

    /// Its prefix of actor names (`od-…`, `ex-…`).
    fn prefix(self) -> &'static str {
        match self {
            Mode::OnDemand => "od",
            Mode::Explicit => "ex",
        }
    }
}

/// One actor's times, in ms: until the first answer (create included), the
/// create alone (0 on demand).
#[derive(Debug, Clone, Copy)]
struct Sample {
    total: f64,
    create: f64,
}

/// Where the calls go.
#[derive(Debug, Clone, Copy)]
struct Target {
    admin: std::net::SocketAddr,
    ingress: std::net::SocketAddr,
}

/// What the bench runs: rounds, actors per batch, numbers in flight.
struct Plan {
    rounds: usize,
    actors: usize,
    in_flight: Vec<usize>,
}

impl Plan {
    fn from_env() -> Self {
        let in_flight: Vec<usize> = std::env::var("STASIS_ON_DEMAND_IN_FLIGHT")
            .ok()
            .map_or_else(
                || vec![1, 8],
                |v| {
                    v.split(',')
                        .map(|n| {
                            let n: usize = n
                                .trim()
                                .parse()
                                .unwrap_or_else(|e| panic!("STASIS_ON_DEMAND_IN_FLIGHT={v}: {e}"));
                            n.max(1)
                        })
                        .collect()
                },
            );
        if test_mode() {
            return Self {
                rounds: 1,
                actors: 8,
                in_flight,
            };
        }
        Self {
            rounds: env_usize("STASIS_ON_DEMAND_ROUNDS", 3),
            actors: env_usize("STASIS_ON_DEMAND_ACTORS", 300).max(1),
            in_flight,
        }
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// `POST /` to `actor`; asserts `200` and the count `expected`.
async fn request(client: &Http, t: Target, actor: &str, expected: u64) {
    let reply = send(
        client,
        t.ingress,
        "POST",
        &actor_host(actor),
        "/",
        Bytes::new(),
    )
    .await;
    assert_eq!(reply.status, 200, "{actor}: {}", reply.text());
    assert_eq!(
        count_in(&reply.text()),
        Some(expected),
        "{actor}: {}",
        reply.text()
    );
}

/// Reaches the new actor `actor` the `mode` way; its times.
async fn reach(client: &Http, t: Target, mode: Mode, actor: &str) -> Sample {
    let started = Instant::now();
    let create = match mode {
        Mode::OnDemand => 0.0,
        Mode::Explicit => {
            let _ = admin::create_actor(client, t.admin, actor, "counter")
                .await
                .ok(&format!("create {actor}"));
            ms(started)
        }
    };
    request(client, t, actor, 1).await;
    Sample {
        total: ms(started),
        create,
    }
}

/// `n` calls of `one(i)`, `in_flight` at a time; their results in the
/// order of `i`, and the wall time in seconds.
async fn run<T, F, Fut>(n: usize, in_flight: usize, one: F) -> (Vec<T>, f64)
where
    T: Send + 'static,
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = T> + Send,
{
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let out: Arc<Mutex<Vec<Option<T>>>> = Arc::new(Mutex::new((0..n).map(|_| None).collect()));
    let one = Arc::new(one);
    let started = Instant::now();
    let tasks: Vec<_> = (0..in_flight.min(n))
        .map(|_| {
            let (next, one, out) = (next.clone(), one.clone(), out.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let result = one(i).await;
                    out.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(result);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("bench task");
    }
    let took = started.elapsed().as_secs_f64();
    let out = std::mem::take(&mut *out.lock().unwrap_or_else(|p| p.into_inner()));
    (
        out.into_iter()
            .map(|r| r.expect("every call ran"))
            .collect(),
        took,
    )
}

/// One batch: `n` new actors `<prefix>-<tag>-<i>` reached the `mode` way,
/// `in_flight` at a time; checked and deleted after. Its samples and
/// actors per second.
async fn batch(
    client: &Http,
    t: Target,
    mode: Mode,
    tag: &str,
    n: usize,
    in_flight: usize,
) -> (Vec<Sample>, f64) {
    let names: Arc<Vec<String>> = Arc::new(
        (0..n)
            .map(|i| format!("{}-{tag}-{i}", mode.prefix()))
            .collect(),
    );
    let (c, all) = (client.clone(), names.clone());
    let (samples, took) = run(n, in_flight, move |i| {
        let (c, all) = (c.clone(), all.clone());
        async move { reach(&c, t, mode, &all[i]).await }
    })
    .await;
    // Made once: a second request counts 2, and the actor has the
    // template.
    request(client, t, &names[0], 2).await;
    let info = call_ok(
        client,
        t.admin,
        "GET",
        &format!("/v1/actors/{}", names[0]),
        None,
    )
    .await;
    assert_eq!(info["template"], "counter", "{info}");
    remove(client, t, names).await;
    (samples, n as f64 / took)
}

/// Deletes `names`, 8 at a time; asserts each is gone.
async fn remove(client: &Http, t: Target, names: Arc<Vec<String>>) {
    let c = client.clone();
    let n = names.len();
    run(n, 8, move |i| {
        let (c, names) = (c.clone(), names.clone());
        async move {
            let path = format!("/v1/actors/{}", names[i]);
            let reply = admin::call(&c, t.admin, "DELETE", &path, None).await;
            assert_eq!(reply.status, 204, "DELETE {path}: {}", reply.text());
        }
    })
    .await;
}

/// `p50 … p99 … mean …` of `samples` in ms.
fn figures(samples: &[f64]) -> [f64; 3] {
    let mean = samples.iter().sum::<f64>() / samples.len().max(1) as f64;
    [percentile(samples, 50.0), percentile(samples, 99.0), mean]
}

fn shown(f: [f64; 3]) -> String {
    format!(
        "p50 {:.2} ms, p99 {:.2} ms, mean {:.2} ms",
        f[0], f[1], f[2]
    )
}

/// What one number in flight gathered over all rounds.
#[derive(Default)]
struct Gathered {
    on_demand: Vec<f64>,
    explicit: Vec<f64>,
    create: Vec<f64>,
    first: Vec<f64>,
    rates: [Vec<f64>; 2],
}

impl Gathered {
    fn add(&mut self, mode: Mode, samples: &[Sample], rate: f64) {
        match mode {
            Mode::OnDemand => {
                self.on_demand.extend(samples.iter().map(|s| s.total));
                self.rates[0].push(rate);
            }
            Mode::Explicit => {
                self.explicit.extend(samples.iter().map(|s| s.total));
                self.create.extend(samples.iter().map(|s| s.create));
                self.first
                    .extend(samples.iter().map(|s| s.total - s.create));
                self.rates[1].push(rate);
            }
        }
    }

    fn print(&self, in_flight: usize, rounds: usize) {
        let head = format!("on-demand-summary: {in_flight} in flight");
        let od = figures(&self.on_demand);
        let ex = figures(&self.explicit);
        let cr = figures(&self.create);
        let n = self.on_demand.len();
        println!("{head}: on-demand first request: {} (n={n})", shown(od));
        println!(
            "{head}: explicit create + first request: {} (n={})",
            shown(ex),
            self.explicit.len()
        );
        println!("{head}: explicit create alone: {}", shown(cr));
        println!(
            "{head}: explicit first request alone: {}",
            shown(figures(&self.first))
        );
        println!(
            "{head}: ratio on-demand / (create + first request): p50 {:.2}, p99 {:.2}, mean {:.2}",
            od[0] / ex[0],
            od[1] / ex[1],
            od[2] / ex[2]
        );
        println!(
            "{head}: ratio on-demand / create alone: p50 {:.2}, p99 {:.2}, mean {:.2}",
            od[0] / cr[0],
            od[1] / cr[1],
            od[2] / cr[2]
        );
        println!(
            "{head}: actors/s, median of {rounds} rounds: on-demand {:.0}, explicit {:.0}",
            percentile(&self.rates[0], 50.0),
            percentile(&self.rates[1], 50.0)
        );
    }
}

/// Unmeasured: a few actors each way at every number in flight, so that
/// connections, compiled code and caches are warm for both modes.
async fn warm_up(client: &Http, t: Target, in_flight: &[usize]) {
    for (k, &f) in in_flight.iter().enumerate() {
        for mode in [Mode::OnDemand, Mode::Explicit] {
            let _ = batch(client, t, mode, &format!("warm{k}"), f.max(4), f).await;
        }
    }
}

fn main() {
    let plan = Plan::from_env();
    let rt = bench::runtime();
    let client = {
        let _guard = rt.enter();
        client()
    };
    let dir = tempfile::Builder::new()
        .prefix("stasis-bench-on-demand-")
        .tempdir()
        .expect("tempdir");
    let server: Proc = bench::serve(&STASIS, &dir.path().join("data"), &[]);
    let t = Target {
        admin: server.addr("admin="),
        ingress: server.addr("ingress="),
    };
    let mut gathered: Vec<Gathered> = plan.in_flight.iter().map(|_| Gathered::default()).collect();
    rt.block_on(async {
        admin::push_template(&client, t.admin, "counter", STASIS.demo_wasm("counter")).await;
        let set = call_ok(
            &client,
            t.admin,
            "PUT",
            "/v1/namespaces/default/on-demand",
            Some(&json!({ "template": "counter" })),
        )
        .await;
        assert_eq!(set["on_demand"], "counter", "{set}");
        warm_up(&client, t, &plan.in_flight).await;
        for round in 0..plan.rounds {
            for (k, &in_flight) in plan.in_flight.iter().enumerate() {
                let order = if (round + k) % 2 == 0 {
                    [Mode::OnDemand, Mode::Explicit]
                } else {
                    [Mode::Explicit, Mode::OnDemand]
                };
                for mode in order {
                    let tag = format!("r{round}f{in_flight}");
                    let (samples, rate) = batch(&client, t, mode, &tag, plan.actors, in_flight).await;
                    let totals: Vec<f64> = samples.iter().map(|s| s.total).collect();
                    println!(
                        "on-demand-round: {round} {} {in_flight} in flight: {} actors, {}, {rate:.0} actors/s",
                        mode.label(),
                        plan.actors,
                        shown(figures(&totals))
                    );
                    gathered[k].add(mode, &samples, rate);
                }
            }
        }
    });
    for (k, &in_flight) in plan.in_flight.iter().enumerate() {
        gathered[k].print(in_flight, plan.rounds);
    }
    drop(server);
}
