//! The memory of the actors' log buffers (issue 33, item 1): the real
//! `stasis serve --workers 1 --max-live 64` on loopback with
//! `STASIS_LOGS_ACTORS` `faulty` actors (100,000; 200 in test mode). It
//! prints `logs-summary:` lines: the serve process's `VmRSS` after the
//! creates (no actor has written a line), after each actor printed one
//! 80-byte line on stdout and stderr (`POST /print`, so two log lines per
//! actor; most actors are paused again by `--max-live`), the difference
//! per actor, and how much the store (where the log files are kept beside
//! the snapshots) grew. Requests go
//! `STASIS_LOGS_CONCURRENCY` (16) at a time.
//!
//! `STASIS_LOGS_ACTORS=100000 cargo bench --bench logs`; results in
//! BENCHMARKS.md, section 26.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use stasis_test_util::admin;
use stasis_test_util::bench::{self, env_usize, rss, test_mode};
use stasis_test_util::http::{actor_host, client, send};
use stasis_test_util::{Artifacts, artifacts};

/// The `stasis` binary and the demo actors.
const STASIS: Artifacts = artifacts!();

const MIB: f64 = (1 << 20) as f64;

/// Bytes of the files under `dir`.
fn disk(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn main() {
    let actors = if test_mode() {
        200
    } else {
        env_usize("STASIS_LOGS_ACTORS", 100_000)
    };
    let concurrency = env_usize("STASIS_LOGS_CONCURRENCY", 16);
    let rt = stasis_test_util::bench::runtime();
    let tmp = tempfile::Builder::new()
        .prefix("stasis-logs-")
        .tempdir()
        .expect("tempdir");
    let data = tmp.path().join("data");
    let serve = bench::serve(&STASIS, &data, &["--workers", "1", "--max-live", "64"]);
    let (ingress, admin_addr) = (serve.addr("ingress="), serve.addr("admin="));
    let client = {
        let _guard = rt.enter();
        client()
    };
    let names: Arc<Vec<String>> = Arc::new((0..actors).map(|i| format!("log-{i}")).collect());
    let run_all = |work: &'static str| {
        let next = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        rt.block_on(async {
            let tasks: Vec<_> = (0..concurrency)
                .map(|_| {
                    let (next, names, client) = (next.clone(), names.clone(), client.clone());
                    tokio::spawn(async move {
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(name) = names.get(i) else { return };
                            let status = if work == "request" {
                                send(
                                    &client,
                                    ingress,
                                    "POST",
                                    &actor_host(name),
                                    "/",
                                    Bytes::new(),
                                )
                                .await
                                .status
                            } else if work == "create" {
                                admin::create_actor(&client, admin_addr, name, "faulty")
                                    .await
                                    .status
                            } else {
                                let text = format!("{name}-{}", "x".repeat(70));
                                let path = format!("/print?text={text}");
                                send(
                                    &client,
                                    ingress,
                                    "POST",
                                    &actor_host(name),
                                    &path,
                                    Bytes::new(),
                                )
                                .await
                                .status
                            };
                            assert!(status < 300, "{work} {name}: {status}");
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.expect(work);
            }
        });
        started.elapsed().as_secs_f64()
    };
    rt.block_on(admin::push_template(
        &client,
        admin_addr,
        "faulty",
        STASIS.demo_wasm("faulty"),
    ));
    let empty = rss(serve.pid());
    let create_s = run_all("create");
    let created = rss(serve.pid());
    // A request that prints nothing first, so that what the print adds is
    // its log lines, not the actor's first request. The log files are
    // kept beside the actors' snapshots.
    run_all("request");
    let requested = rss(serve.pid());
    let store_requested = disk(&data.join("snapshots"));
    let print_s = run_all("print");
    let printed = rss(serve.pid());
    let store_printed = disk(&data.join("snapshots"));
    let per_actor = |bytes: u64| bytes as f64 / actors as f64;
    println!(
        "logs-summary: actors={actors} creates_per_s={:.0} prints_per_s={:.0}",
        actors as f64 / create_s,
        actors as f64 / print_s
    );
    println!(
        "logs-summary: rss_mib empty={:.1} after_creates={:.1} after_a_request_each={:.1} \
         after_a_print_each={:.1}",
        empty as f64 / MIB,
        created as f64 / MIB,
        requested as f64 / MIB,
        printed as f64 / MIB
    );
    println!(
        "logs-summary: per actor bytes: created={:.0} first_request={:.0} print={:.0} \
         store_growth_of_the_print={:.0}",
        per_actor(created.saturating_sub(empty)),
        per_actor(requested.saturating_sub(created)),
        per_actor(printed.saturating_sub(requested)),
        per_actor(store_printed.saturating_sub(store_requested))
    );
}
