//! Creates and moves per second with several calls in flight, cluster mode
//! against embedded mode in the same run (issue 32, item 1: batched
//! directory writes), against the real `stasis` binary on loopback.
//!
//! * embedded (the baseline): plain `stasis serve` (SQLite, its data dir,
//!   2 in-process workers `worker-1`, `worker-2`);
//! * cluster: one etcd member (`stasis_test_util::etcd`), one replica
//!   (`serve --workers 0 --directory etcd://...`), two workers `w1`, `w2`
//!   (`worker run`), every process with the same `--snapshot-store
//!   file:///...` (`STASIS_BATCH_STORE=s3` takes a real `s3s-fs` instead).
//!
//! Each round times `STASIS_BATCH_CREATES` (default 400) `POST /v1/actors`
//! of new counters, `STASIS_BATCH_IN_FLIGHT` (default 8) at a time, then
//! `STASIS_BATCH_MOVES` (default 400) `POST /v1/actors/{name}/migrate` of
//! paused counters between the two workers, as many in flight (each call
//! moves another actor: 64 movers, round robin). Rounds alternate between
//! the modes (`STASIS_BATCH_ROUNDS`, default 3), so drift of a shared
//! machine hits both. Printed: `batch-round:` per round and mode, and
//! `batch-summary:` with the medians of the rounds and the ratio of cluster
//! to embedded. Without `--bench` (as under `cargo test --benches`) one
//! round of 16 creates and 16 moves runs. A failed call panics the bench
//! (after the calls in flight end). After the rounds, each mode drains its
//! first worker (`POST /v1/workers/{name}/drain`, every actor there paused)
//! and undrains it: `batch-drain:` prints how many actors moved in how
//! long (issue 50, item 4). Results: BENCHMARKS.md, sections 21 and 36.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use serde_json::json;
use stasis_test_util::admin::{self, call_ok};
use stasis_test_util::bench::{self, test_mode};
use stasis_test_util::cluster::{Deployment, Setup, Store};
use stasis_test_util::http::{Http, actor_host, client, send};
use stasis_test_util::stats::percentile;
use stasis_test_util::{Artifacts, Proc, artifacts};

/// The `stasis` binary and the demo actors.
const STASIS: Artifacts = artifacts!();

/// Paused counters the moves go round.
const MOVERS: usize = 64;

fn setting(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Where the calls go.
struct Target {
    label: &'static str,
    admin: std::net::SocketAddr,
    ingress: std::net::SocketAddr,
    workers: [&'static str; 2],
}

/// `n` calls of `one(i)`, `in_flight` at a time; calls per second.
async fn run<F, Fut>(n: usize, in_flight: usize, one: F) -> f64
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let one = Arc::new(one);
    let started = Instant::now();
    let tasks: Vec<_> = (0..in_flight)
        .map(|_| {
            let (next, one) = (next.clone(), one.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    one(i).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("bench task");
    }
    n as f64 / started.elapsed().as_secs_f64()
}

async fn creates(client: &Http, t: &Target, round: usize, n: usize, in_flight: usize) -> f64 {
    let (client, admin, label) = (client.clone(), t.admin, t.label);
    run(n, in_flight, move |i| {
        let client = client.clone();
        async move {
            let _ = admin::create_actor(&client, admin, &format!("c{round}-{i}"), "counter")
                .await
                .ok(&format!("create on {label}"));
        }
    })
    .await
}

/// Creates the movers, each served once and paused; their workers.
async fn movers(client: &Http, t: &Target) -> Vec<String> {
    let mut at = Vec::new();
    for i in 0..MOVERS {
        let actor = format!("mv-{i}");
        let info = admin::create_actor(client, t.admin, &actor, "counter")
            .await
            .ok("create a mover")
            .json();
        let reply = send(
            client,
            t.ingress,
            "POST",
            &actor_host(&actor),
            "/",
            Bytes::new(),
        )
        .await;
        assert_eq!(reply.status, 200, "{actor}: {}", reply.text());
        let paused = call_ok(
            client,
            t.admin,
            "POST",
            &format!("/v1/actors/{actor}/pause"),
            None,
        )
        .await;
        assert_eq!(paused["state"], "paused");
        at.push(info["worker"].as_str().expect("worker").to_owned());
    }
    at
}

/// `n` moves of paused movers, each to the other worker; moves/s.
async fn moves(
    client: &Http,
    t: &Target,
    at: &Arc<std::sync::Mutex<Vec<String>>>,
    n: usize,
    in_flight: usize,
) -> f64 {
    // Call i moves mover i % MOVERS; in-flight calls never share a mover
    // (in_flight <= MOVERS), and a mover's next call starts after its
    // earlier one ended (calls start in order, MOVERS apart).
    assert!(in_flight <= MOVERS);
    let (client, admin, workers, at) = (client.clone(), t.admin, t.workers, at.clone());
    let busy = Arc::new(std::sync::Mutex::new(vec![false; MOVERS]));
    run(n, in_flight, move |i| {
        let (client, at, busy) = (client.clone(), at.clone(), busy.clone());
        async move {
            let m = i % MOVERS;
            loop {
                let taken = {
                    let mut busy = busy.lock().unwrap_or_else(|p| p.into_inner());
                    !std::mem::replace(&mut busy[m], true)
                };
                if taken {
                    break;
                }
                tokio::task::yield_now().await;
            }
            // Freed even if this move panics, so the other calls go on and
            // the panic reaches `main` when its task is joined.
            let _free = Free(busy.clone(), m);
            let to = {
                let at = at.lock().expect("at");
                if at[m] == workers[0] {
                    workers[1]
                } else {
                    workers[0]
                }
            };
            let answer = call_ok(
                &client,
                admin,
                "POST",
                &format!("/v1/actors/mv-{m}/migrate"),
                Some(&json!({ "to": to })),
            )
            .await;
            assert_eq!(answer["worker"], to, "move of mv-{m}: {answer}");
            assert_eq!(answer["state"], "paused", "move of mv-{m}: {answer}");
            at.lock().expect("at")[m] = to.to_owned();
        }
    })
    .await
}

/// Drains `t`'s first worker and undrains it; prints and returns how
/// many actors the drain moved and how long it took (seconds).
async fn drain(client: &Http, t: &Target) -> (usize, f64) {
    let worker = t.workers[0];
    // Its running actors paused first (not timed).
    let listed = call_ok(client, t.admin, "GET", "/v1/actors?limit=5000", None).await;
    let (mut actors, mut running) = (0, Vec::new());
    for a in listed.as_array().into_iter().flatten() {
        if a["worker"] == worker {
            actors += 1;
            if a["state"] != "paused" {
                running.push(a["name"].as_str().unwrap_or_default().to_owned());
            }
        }
    }
    let (c, admin, running) = (client.clone(), t.admin, Arc::new(running));
    let n = running.len();
    run(n, 16, move |i| {
        let (c, running) = (c.clone(), running.clone());
        async move {
            let path = format!("/v1/actors/{}/pause", running[i]);
            call_ok(&c, admin, "POST", &path, None).await;
        }
    })
    .await;
    let started = Instant::now();
    let path = format!("/v1/workers/{worker}/drain");
    let drained = call_ok(client, t.admin, "POST", &path, None).await;
    let took = started.elapsed().as_secs_f64();
    assert_eq!(drained["state"], "drained", "{drained}");
    assert_eq!(drained["actors"], 0, "{drained}");
    let path = format!("/v1/workers/{worker}/undrain");
    call_ok(client, t.admin, "POST", &path, None).await;
    println!(
        "batch-drain: {}: {actors} paused actors moved off {worker} in {took:.2} s ({:.0}/s)",
        t.label,
        actors as f64 / took
    );
    (actors, took)
}

/// Marks mover `.1` free again when dropped.
struct Free(Arc<std::sync::Mutex<Vec<bool>>>, usize);

impl Drop for Free {
    fn drop(&mut self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner())[self.1] = false;
    }
}

fn main() {
    let quick = test_mode();
    let rounds = if quick {
        1
    } else {
        setting("STASIS_BATCH_ROUNDS", 3)
    };
    let n_creates = if quick {
        16
    } else {
        setting("STASIS_BATCH_CREATES", 400)
    };
    let n_moves = if quick {
        16
    } else {
        setting("STASIS_BATCH_MOVES", 400)
    };
    let in_flight = setting("STASIS_BATCH_IN_FLIGHT", 8).clamp(1, MOVERS);
    let store = match std::env::var("STASIS_BATCH_STORE").as_deref() {
        Ok("s3") => Store::S3,
        _ => Store::File,
    };
    let rt = stasis_test_util::bench::runtime();
    let client = {
        let _guard = rt.enter();
        client()
    };
    let dir = tempfile::Builder::new()
        .prefix("stasis-bench-batch-")
        .tempdir()
        .expect("tempdir");
    let embedded: Proc = bench::serve(&STASIS, &dir.path().join("data"), &[]);
    let deployment = {
        let mut setup = Setup::new(1, 1, 2);
        setup.store = store;
        let level = std::env::var(bench::LOG_VAR).ok();
        setup.echo = level.is_some();
        setup.log = level.unwrap_or_else(|| "warn".to_owned());
        Deployment::start(STASIS, setup)
    };
    let targets = [
        Target {
            label: "embedded",
            admin: embedded.addr("admin="),
            ingress: embedded.addr("ingress="),
            workers: ["worker-1", "worker-2"],
        },
        Target {
            label: "cluster",
            admin: deployment.replica(0).admin,
            ingress: deployment.replica(0).ingress,
            workers: ["w1", "w2"],
        },
    ];
    let mut figures: Vec<[Vec<f64>; 2]> = vec![[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    rt.block_on(async {
        let mut placed = Vec::new();
        for t in &targets {
            admin::push_template(&client, t.admin, "counter", STASIS.demo_wasm("counter")).await;
            placed.push(Arc::new(std::sync::Mutex::new(movers(&client, t).await)));
        }
        for round in 0..rounds {
            for (m, t) in targets.iter().enumerate() {
                let c = creates(&client, t, round, n_creates, in_flight).await;
                let mv = moves(&client, t, &placed[m], n_moves, in_flight).await;
                println!(
                    "batch-round: {round} {}: creates {c:.0}/s, moves {mv:.0}/s ({n_creates} creates, {n_moves} moves, {in_flight} in flight)",
                    t.label
                );
                figures[m][0].push(c);
                figures[m][1].push(mv);
            }
        }
        for t in &targets {
            drain(&client, t).await;
        }
        // Every mover kept its state: one more request counts 2.
        for t in &targets {
            let reply = send(&client, t.ingress, "POST", &actor_host("mv-0"), "/", Bytes::new()).await;
            assert_eq!(reply.status, 200);
            let count = stasis_test_util::demos::count_in(&reply.text());
            assert_eq!(count, Some(2), "{}: mv-0 lost its state", t.label);
        }
    });
    for (k, what) in ["creates", "moves"].iter().enumerate() {
        let e = percentile(&figures[0][k], 50.0);
        let c = percentile(&figures[1][k], 50.0);
        println!(
            "batch-summary: {what}/s median of {rounds} rounds: embedded {e:.0}, cluster ({store:?} store, 1 etcd member) {c:.0}, ratio {:.2}x",
            c / e
        );
    }
}
