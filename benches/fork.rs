//! Fork benchmark (issue 13, item 3): `POST /v1/actors/SRC/fork` against
//! the real `stasis serve --workers 1` on loopback, for a `kv` actor of
//! about 1 MiB (no preload: the baseline) and one of about 110 MiB
//! (`KV_PRELOAD=1000000`), client-observed:
//!
//! * `fork/paused/<size>`: a fork of the paused source (the snapshot file
//!   is hard-linked: its cost should not depend on the size);
//! * `fork/running/<size>`: a fork of the running source, which takes a
//!   checkpoint through the actor's mailbox first (a full snapshot write
//!   today, so it grows with the size; incremental snapshots will shrink
//!   it).
//!
//! Every iteration makes a new actor (`f-<size>-<n>`, paused). Before the
//! measurements the bench prints `fork-summary:` lines: the source's
//! memory, its snapshot's size and the snapshot file's link count after
//! the forks. Knob: `STASIS_FORK_PRELOAD` (keys of the big actor; 1000000,
//! or 10000 in criterion's test mode). The target is a fork of the
//! 110 MiB actor in ≤ 50 ms. Results: BENCHMARKS.md, section 11.

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, SamplingMode};
use serde_json::json;
use stasis_test_util::admin::{self, call_ok};
use stasis_test_util::bench::{self, test_mode};
use stasis_test_util::http::{Http, actor_host, client, send, send_with};
use stasis_test_util::{Artifacts, artifacts};

/// The `stasis` binary and the demo actors.
const STASIS: Artifacts = artifacts!();

const MIB: f64 = (1 << 20) as f64;

/// Pushes `kv` as template `name` with `KV_PRELOAD=preload` (none if 0).
async fn push_kv(client: &Http, admin_addr: SocketAddr, name: &str, preload: usize) {
    let path = if preload == 0 {
        format!("/v1/templates/{name}")
    } else {
        format!("/v1/templates/{name}?env=KV_PRELOAD%3D{preload}")
    };
    let headers = [("content-type", "application/wasm")];
    let wasm = Bytes::from(STASIS.demo_wasm("kv"));
    let reply = send_with(
        client,
        admin_addr,
        "PUT",
        "localhost",
        &path,
        &headers,
        wasm,
    )
    .await;
    assert!(reply.status < 300, "push {name}: {}", reply.text());
}

/// One fork of `src` as `new`, timed from request to answer (201).
async fn fork_once(client: &Http, admin_addr: SocketAddr, src: &str, new: &str) -> Duration {
    let path = format!("/v1/actors/{src}/fork");
    let body = json!({ "name": new });
    let started = Instant::now();
    let reply = admin::call(client, admin_addr, "POST", &path, Some(&body)).await;
    let took = started.elapsed();
    assert_eq!(reply.status, 201, "fork {src} {new}: {}", reply.text());
    took
}

/// Wakes `actor` with a read (its count of keys is not needed).
async fn wake(client: &Http, ingress: SocketAddr, actor: &str) {
    let reply = send(
        client,
        ingress,
        "GET",
        &actor_host(actor),
        "/k0",
        Bytes::new(),
    )
    .await;
    assert!(
        reply.status == 200 || reply.status == 404,
        "{}",
        reply.text()
    );
}

/// `(snapshot seq, bytes)` of the newest snapshot in an actor's JSON.
fn newest(actor: &serde_json::Value) -> (u64, u64) {
    let snapshot = &actor["snapshot"];
    (
        snapshot["seq"].as_u64().expect("seq"),
        snapshot["bytes"].as_u64().expect("bytes"),
    )
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let preload = std::env::var("STASIS_FORK_PRELOAD")
        .ok()
        .map_or(if test_mode() { 10_000 } else { 1_000_000 }, |v| {
            v.replace('_', "").parse().expect("STASIS_FORK_PRELOAD")
        });
    let rt = stasis_test_util::bench::runtime();
    let tmp = tempfile::Builder::new()
        .prefix("stasis-fork-")
        .tempdir()
        .expect("tempdir");
    let data = tmp.path().join("data");
    let serve = bench::serve(&STASIS, &data, &["--workers", "1"]);
    let (ingress, admin_addr) = (serve.addr("ingress="), serve.addr("admin="));
    let client = {
        let _guard = rt.enter();
        client()
    };
    let sizes = [("small", 0), ("big", preload)];
    for (label, keys) in sizes {
        rt.block_on(async {
            push_kv(&client, admin_addr, label, keys).await;
            let body = json!({ "name": format!("src-{label}"), "template": label });
            call_ok(&client, admin_addr, "POST", "/v1/actors", Some(&body)).await;
        });
    }
    let mut group = c.benchmark_group("fork");
    group.sampling_mode(SamplingMode::Flat);
    let made = AtomicUsize::new(0);
    for (mode, running) in [("paused", false), ("running", true)] {
        for (label, _) in sizes {
            let src = format!("src-{label}");
            let get = format!("/v1/actors/{src}");
            let actor = rt.block_on(async {
                let path = format!("{get}/pause");
                if !running {
                    call_ok(&client, admin_addr, "POST", &path, None).await;
                }
                call_ok(&client, admin_addr, "GET", &get, None).await
            });
            let id = BenchmarkId::new(mode, label);
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    rt.block_on(async {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            if running {
                                wake(&client, ingress, &src).await;
                            }
                            let n = made.fetch_add(1, Ordering::Relaxed);
                            let new = format!("f-{label}-{n}");
                            total += fork_once(&client, admin_addr, &src, &new).await;
                        }
                        total
                    })
                });
            });
            let after = rt.block_on(call_ok(&client, admin_addr, "GET", &get, None));
            let (seq, bytes) = newest(&after);
            let file = data
                .join("snapshots")
                .join(&src)
                .join(format!("{seq:020}.snap"));
            let links = Path::new(&file).metadata().map_or(0, |m| m.nlink());
            println!(
                "fork-summary: {mode} {label} memory_mib={:.1} snapshot_mib={:.1} \
                 newest_snapshot_links={links}",
                actor["memory_bytes"]
                    .as_u64()
                    .unwrap_or(0)
                    .max(after["memory_bytes"].as_u64().unwrap_or(0)) as f64
                    / MIB,
                bytes as f64 / MIB,
            );
        }
    }
    group.finish();
    println!("fork: {} actors forked", made.load(Ordering::Relaxed));
    drop(serve);
    c.final_summary();
}
