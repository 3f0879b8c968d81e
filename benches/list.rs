//! Actor listing benchmark (issue 49, item 2): what a page of the actors
//! list costs as the actors grow, through the real `stasis serve
//! --workers 1 --max-live 64` on loopback, client-observed.
//!
//! One run creates `STASIS_LIST_BASE` actors (1,000), times the pages,
//! then creates more up to `STASIS_LIST_ACTORS` (100,000) and times the
//! same pages again: the first page of 1,000 (`?limit=1000`), a page from
//! the middle (`&continue=` the token of the actor halfway), and the
//! first page of a label that 1 % of the actors have
//! (`?label=tier=gold&limit=1000`, served from the label index). Each is
//! the median of `STASIS_LIST_SAMPLES` (15) requests; `list-ratio:` lines
//! give the big/base ratios beside the target (the first page of
//! 1,000 out of 100,000 in ≤ 100 ms). The whole unpaged list (`GET
//! /v1/actors`, every actor in one answer) is timed once at each size
//! for comparison. The bench checks status codes and page sizes, never
//! timings. With `STASIS_LIST_CLUSTER=1` the same run goes to a cluster
//! (one etcd member, one replica, one worker, a `file://` store) through
//! the replica. Results: BENCHMARKS.md, section 34.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde_json::json;
use stasis_test_util::admin::{self, call};
use stasis_test_util::bench::{self, env_usize, test_mode};
use stasis_test_util::cluster::{Deployment, Setup, Store};
use stasis_test_util::http::{Http, client};
use stasis_test_util::stats::percentile;
use stasis_test_util::{Artifacts, artifacts};

const STASIS: Artifacts = artifacts!();

/// Actor `i`'s name (names sort as their numbers).
fn name(i: usize) -> String {
    format!("a-{i:06}")
}

/// Creates actors `from..to` (1 % labelled `tier=gold`), 16 at a time.
async fn create(c: &Http, admin: SocketAddr, from: usize, to: usize) {
    let next = Arc::new(AtomicUsize::new(from));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (c, next) = (c.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= to {
                        return;
                    }
                    let tier = if i % 100 == 7 { "gold" } else { "free" };
                    let body = json!({ "name": name(i), "template": "counter", "labels": { "tier": tier } });
                    let reply = call(&c, admin, "POST", "/v1/actors", Some(&body)).await;
                    assert_eq!(reply.status, 201, "{}: {}", name(i), reply.text());
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("creates");
    }
}

/// Milliseconds of one `GET path`, checking it answers `expect` actors.
async fn timed(c: &Http, admin: SocketAddr, path: &str, expect: usize) -> f64 {
    let started = Instant::now();
    let reply = call(c, admin, "GET", path, None).await;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(reply.status, 200, "{path}: {}", reply.text());
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&reply.body).expect("JSON list");
    assert_eq!(listed.len(), expect, "{path}");
    ms
}

/// The medians (ms) of the three pages at `actors` actors, and the whole
/// list's one time.
async fn measure(c: &Http, admin: SocketAddr, actors: usize, samples: usize) -> [f64; 4] {
    let middle = stasis_runtime::contract::listing::continue_token(&name(actors / 2));
    let pages = [
        ("/v1/actors?limit=1000".to_owned(), 1000.min(actors)),
        (
            format!("/v1/actors?limit=1000&continue={middle}"),
            1000.min(actors - actors / 2 - 1),
        ),
        (
            "/v1/actors?label=tier%3Dgold&limit=1000".to_owned(),
            (actors / 100).min(1000),
        ),
    ];
    let mut out = [0.0; 4];
    for (k, (path, expect)) in pages.iter().enumerate() {
        let mut times = Vec::new();
        for _ in 0..samples {
            times.push(timed(c, admin, path, *expect).await);
        }
        out[k] = percentile(&times, 50.0);
    }
    out[3] = timed(c, admin, "/v1/actors", actors).await;
    out
}

fn main() {
    let (base, actors, samples) = if test_mode() {
        (200, 400, 3)
    } else {
        (
            env_usize("STASIS_LIST_BASE", 1000),
            env_usize("STASIS_LIST_ACTORS", 100_000),
            env_usize("STASIS_LIST_SAMPLES", 15),
        )
    };
    let rt = bench::runtime();
    let c = {
        let _guard = rt.enter();
        client()
    };
    let tmp = tempfile::Builder::new()
        .prefix("stasis-list-")
        .tempdir()
        .expect("tempdir");
    // `STASIS_LIST_CLUSTER=1`: one etcd member, one replica, one worker,
    // a `file://` store, the pages asked of the replica.
    let cluster = std::env::var_os("STASIS_LIST_CLUSTER").is_some();
    let (_serve, _deployment, admin_addr) = if cluster {
        let mut setup = Setup::new(1, 1, 1);
        setup.store = Store::File;
        setup.log = "warn".to_owned();
        setup.flags = vec!["--max-live".to_owned(), "64".to_owned()];
        let deployment = Deployment::start(STASIS, setup);
        deployment.push_counter(0);
        let admin = deployment.replica(0).admin;
        (None, Some(deployment), admin)
    } else {
        let serve = bench::serve(
            &STASIS,
            &tmp.path().join("data"),
            &["--workers", "1", "--max-live", "64"],
        );
        let admin = serve.addr("admin=");
        rt.block_on(admin::push_template(
            &c,
            admin,
            "counter",
            STASIS.demo_wasm("counter"),
        ));
        (Some(serve), None, admin)
    };
    let mode = if cluster { "cluster" } else { "embedded" };
    let started = Instant::now();
    rt.block_on(create(&c, admin_addr, 0, base));
    let small = rt.block_on(measure(&c, admin_addr, base, samples));
    rt.block_on(create(&c, admin_addr, base, actors));
    let created_s = started.elapsed().as_secs_f64();
    let big = rt.block_on(measure(&c, admin_addr, actors, samples));
    println!("list-summary: {mode}: {actors} actors created in {created_s:.0} s");
    for (k, what) in [
        "first page of 1000",
        "middle page of 1000",
        "label page (1 %)",
        "whole list, unpaged",
    ]
    .iter()
    .enumerate()
    {
        println!(
            "list-ratio: {mode}: {what}: {base} actors {:.1} ms, {actors} actors {:.1} ms, ratio {:.2}x{}",
            small[k],
            big[k],
            big[k] / small[k],
            if k == 0 {
                " (target: <= 100 ms at 100,000)"
            } else {
                ""
            }
        );
    }
}
