//! Behaviours the docs promise (docs/api.md, docs/operations.md,
//! docs/architecture.md and the `serve` flag help) that no other test
//! pinned: a template's environment reaches the guest, `--rebalance-by
//! memory` evens out memory rather than count, `--max-concurrent-moves`
//! bounds the moves under way, a remote worker told `410` by its heartbeat
//! drops every actor and joins again, `cache/` is safe to delete,
//! `STASIS_LOG` filters the log, deleting `clock.mark` loses nothing but
//! the clock guarantee, and a guest that reads no clock writes no mark.
//! Real processes on loopback.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{RemoteWorker, STASIS, Server, client, count, post, send, to_actor};
use stasis_test_util::wait;

/// [`wait::until_async`] for a yes/no probe: until `done` holds; panics
/// with `what` after `limit`.
async fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    wait::until_async(what, limit, async || done().then_some(())).await;
}

/// `GET /v1/actors` on the admin API, as a JSON array of Actor.
async fn actors(server: &Server) -> Vec<Value> {
    let answer = send(
        &client(),
        server.admin,
        "GET",
        "localhost",
        "/v1/actors",
        Vec::new(),
    )
    .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let list: Value = serde_json::from_str(&answer.body).expect("actor list is JSON");
    list.as_array().cloned().expect("actor list is an array")
}

/// Sends `signal` (e.g. `STOP`, `CONT`) to process `pid` with kill(1).
fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}: {status}");
}

/// docs/api.md: a template has "a fixed WASI environment" set with
/// `?env=K%3DV` (the CLI's `template push --env K=V`), shown as `"env"` in
/// the Template. The kv demo reads `KV_PRELOAD=N` and starts with keys
/// `k0..k{N-1}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_env_reaches_the_guest() {
    let server = Server::start(&["--workers", "1"]);
    let kv = crate::support::demo("kv");
    let pushed = server.cli_json(&[
        "template",
        "push",
        "kv-cli",
        kv.to_str().expect("utf-8 path"),
        "--env",
        "KV_PRELOAD=3",
    ]);
    assert_eq!(pushed["env"], serde_json::json!({"KV_PRELOAD": "3"}));
    // The same through the HTTP route's `?env=`.
    let answer = send(
        &client(),
        server.admin,
        "PUT",
        "localhost",
        "/v1/templates/kv-http?env=KV_PRELOAD%3D2",
        STASIS.demo_wasm("kv"),
    )
    .await;
    assert_eq!(answer.status, 201, "{answer:?}");
    let template: Value = serde_json::from_str(&answer.body).expect("Template JSON");
    assert_eq!(template["env"], serde_json::json!({"KV_PRELOAD": "2"}));

    let http = client();
    for (actor, template, keys) in [
        ("env-cli", "kv-cli", "k0\nk1\nk2\n"),
        ("env-http", "kv-http", "k0\nk1\n"),
    ] {
        server.create(actor, template);
        let listed = to_actor(&http, server.ingress, actor, "GET", "/").await;
        assert_eq!(
            (listed.status, listed.body.as_str()),
            (200, keys),
            "{actor}"
        );
    }
    // Without an env the guest sees none: no preloaded keys.
    server.push("kv");
    server.create("env-none", "kv");
    let listed = to_actor(&http, server.ingress, "env-none", "GET", "/").await;
    assert_eq!((listed.status, listed.body.as_str()), (200, ""));
}

/// docs/architecture.md: "Rebalance evens out actor count (or memory,
/// `--rebalance-by memory`) ...; a join triggers one." One large kv actor
/// and four small counters on worker-1: by memory the large one alone
/// moves to the joining worker (by count two actors would move).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebalance_by_memory_evens_out_memory_not_count() {
    let server = Server::start(&["--workers", "1", "--rebalance-by", "memory"]);
    server.push("kv");
    server.push("counter");
    let http = client();
    server.create("big", "kv");
    let value = vec![b'x'; 1 << 20];
    for i in 0..12 {
        let put = send(
            &http,
            server.ingress,
            "PUT",
            &crate::support::actor_host("big"),
            &format!("/key-{i}"),
            value.clone(),
        )
        .await;
        assert_eq!(put.status, 201, "{put:?}");
    }
    let small: Vec<String> = (0..4).map(|i| format!("small-{i}")).collect();
    for name in &small {
        server.create(name, "counter");
        assert_eq!(count(&post(&server, name).await), 1);
    }
    let memory = |actor: &str| {
        server.cli_json(&["actor", "get", actor])["memory_bytes"]
            .as_u64()
            .expect("memory_bytes")
    };
    let small_total: u64 = small.iter().map(|a| memory(a)).sum();
    let big = memory("big");
    assert!(
        big > small_total + (4 << 20),
        "precondition: big ({big} B) outweighs the counters ({small_total} B)"
    );

    let _joined = RemoteWorker::start(&server, "w-mem", &[]);
    // The join's rebalance moves the large actor; wait for it to land.
    wait_until(Duration::from_secs(15), "big to move to w-mem", || {
        server.worker_of("big") == "w-mem"
    })
    .await;
    let report = server.cli_json(&["rebalance"]);
    assert_eq!(
        report["moves"],
        serde_json::json!([]),
        "memory is already as even as a move can make it"
    );
    assert_eq!(server.worker_of("big"), "w-mem");
    for name in &small {
        assert_eq!(server.worker_of(name), "worker-1", "{name} stayed");
        assert_eq!(
            count(&post(&server, name).await),
            2,
            "{name} kept its state"
        );
    }
    let got = to_actor(&http, server.ingress, "big", "GET", "/key-11").await;
    assert_eq!((got.status, got.body.len()), (200, 1 << 20));
}

/// `serve --max-concurrent-moves N` ("Moves a rebalance or drain runs at
/// once"; docs/architecture.md: "at most `--max-concurrent-moves` moves at
/// once"): with N = 1, sampling the actor list while worker-1 drains six
/// actors never shows two of them `migrating` (the state an actor has
/// between its capture and its switch to the target).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrent_moves_bounds_the_moves_of_a_drain() {
    let server = Server::start(&["--workers", "1", "--max-concurrent-moves", "1"]);
    let _target = RemoteWorker::start(&server, "w-target", &[]);
    server.push("kv");
    let http = client();
    let names: Vec<String> = (0..6).map(|i| format!("mv-{i}")).collect();
    let value = vec![b'y'; 1 << 20];
    for name in &names {
        server.create(name, "kv");
        if server.worker_of(name) != "worker-1" {
            server.cli_ok(&["actor", "migrate", name, "--to", "worker-1"]);
        }
        let put = send(
            &http,
            server.ingress,
            "PUT",
            &crate::support::actor_host(name),
            "/data",
            value.clone(),
        )
        .await;
        assert_eq!(put.status, 201, "{put:?}");
    }
    let drain = server.cli_in_background(&["worker", "drain", "worker-1", "-o", "json"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut most, mut seen, mut samples) = (0, 0, 0);
    while !drain.is_finished() {
        assert!(Instant::now() < deadline, "drain did not finish in 20 s");
        let migrating = actors(&server)
            .await
            .iter()
            .filter(|a| a["state"] == "migrating")
            .count();
        most = most.max(migrating);
        seen += usize::from(migrating > 0);
        samples += 1;
    }
    let out = drain.await.expect("drain task");
    assert!(
        out.status.success(),
        "drain failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        most <= 1,
        "{most} actors were migrating at once with --max-concurrent-moves 1"
    );
    eprintln!("max-concurrent-moves: {samples} samples, {seen} saw a move under way");
    for name in &names {
        assert_eq!(server.worker_of(name), "w-target", "{name} moved");
        let got = to_actor(&http, server.ingress, name, "GET", "/data").await;
        assert_eq!((got.status, got.body.len()), (200, 1 << 20), "{name}");
    }
}

/// docs/api.md: a heartbeat answered `410` means "declared lost (drop every
/// actor, join again)"; docs/operations.md: after 2 × `--heartbeat-timeout`
/// a frozen worker is `lost` and its actors are re-placed. A worker frozen
/// (SIGSTOP) past that and thawed (SIGCONT) hears `410` on its next
/// heartbeat (its log says so), joins again with no actors (`GET
/// /internal/v1/actors` is empty), and its actor serves from worker-1 with
/// its paused state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_declared_lost_drops_its_actors_and_joins_again() {
    let server = Server::start(&["--workers", "1", "--heartbeat-timeout", "500ms"]);
    let frozen = RemoteWorker::start(&server, "w-frozen", &[]);
    server.push("counter");
    server.create("thawed", "counter");
    if server.worker_of("thawed") != "w-frozen" {
        server.cli_ok(&["actor", "migrate", "thawed", "--to", "w-frozen"]);
    }
    assert_eq!(count(&post(&server, "thawed").await), 1);
    assert_eq!(count(&post(&server, "thawed").await), 2);
    server.cli_ok(&["actor", "pause", "thawed"]);
    let internal = |worker: &RemoteWorker| {
        let addr = worker.listen;
        async move {
            let answer = send(
                &client(),
                addr,
                "GET",
                "localhost",
                "/internal/v1/actors",
                Vec::new(),
            )
            .await;
            assert_eq!(answer.status, 200, "{answer:?}");
            serde_json::from_str::<Value>(&answer.body).expect("statuses are JSON")
        }
    };
    let before = internal(&frozen).await;
    assert!(
        before.to_string().contains("thawed"),
        "precondition: w-frozen hosts the actor: {before}"
    );

    signal(frozen.pid(), "STOP");
    server.wait_for_worker("w-frozen", "lost");
    wait_until(Duration::from_secs(10), "thawed to be re-placed", || {
        server.worker_of("thawed") == "worker-1"
    })
    .await;
    signal(frozen.pid(), "CONT");
    server.wait_for_worker("w-frozen", "ready");
    let after = internal(&frozen).await;
    let empty = match &after {
        Value::Array(list) => list.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    };
    assert!(empty, "w-frozen kept actors after joining again: {after}");
    // It was the heartbeat's 410 that made it drop and join again.
    wait_until(Duration::from_secs(5), "the worker to log the 410", || {
        let log = frozen.log();
        log.contains("was declared lost") && log.matches("joined").count() >= 2
    })
    .await;
    assert_eq!(server.worker_of("thawed"), "worker-1");
    let answer = post(&server, "thawed").await;
    assert_eq!(
        answer.body,
        "hello from: worker-1 | preserved memory count: 3\n"
    );
}

/// docs/operations.md, data dir: `cache/` holds compiled code behind a
/// digest and is safe to delete: a restart recompiles and every actor
/// keeps its state.
#[tokio::test(flavor = "multi_thread")]
async fn deleting_the_compiled_cache_costs_only_a_recompile() {
    let server = Server::start(&["--workers", "1"]);
    server.push("counter");
    server.create("cc", "counter");
    assert_eq!(count(&post(&server, "cc").await), 1);
    let mut server = server;
    let dir = server.stop();
    let cache = dir.join("cache");
    assert!(
        std::fs::read_dir(&cache).expect("cache/").next().is_some(),
        "compiled code was cached"
    );
    std::fs::remove_dir_all(&cache).expect("delete cache/");
    let server = Server::start_in(&dir, &["--workers", "1"]).expect("restart without cache/");
    assert_eq!(count(&post(&server, "cc").await), 2);
    assert!(
        std::fs::read_dir(&cache)
            .expect("cache/ again")
            .next()
            .is_some(),
        "recompiled code is cached again"
    );
}

/// docs/operations.md, logs: `STASIS_LOG` filters what goes to stderr.
#[tokio::test(flavor = "multi_thread")]
async fn stasis_log_filters_the_log() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let start = |level: &str, dir: &str| {
        let mut command = STASIS.serve(&tmp.path().join(dir), &["--workers", "1"]);
        command.env("STASIS_LOG", level);
        stasis_test_util::Proc::start(command, "stasis ready", "serve", false).expect("serve")
    };
    let quiet = start("warn", "quiet");
    let chatty = start("stasis_runtime=debug", "chatty");
    for process in [&quiet, &chatty] {
        let admin = process.addr("admin=");
        stasis_test_util::admin::push_template(
            &client(),
            admin,
            "counter",
            std::fs::read(crate::support::demo("counter")).expect("counter module"),
        )
        .await;
    }
    // The log threads drain stderr as it comes: wait until the chatty
    // server's line for the push has come through (the quiet server would
    // have written its own at the same point).
    wait_until(Duration::from_secs(10), "the push in the debug log", || {
        chatty.log().contains("template pushed")
    })
    .await;
    let (quiet, chatty) = (quiet.log(), chatty.log());
    assert!(!quiet.contains("INFO"), "warn hides info lines: {quiet}");
    assert!(!quiet.contains("template pushed"), "{quiet}");
    assert!(chatty.contains("template pushed"), "{chatty}");
    assert!(
        chatty.contains("DEBUG") || chatty.contains("INFO"),
        "{chatty}"
    );
}

/// docs/operations.md: deleting `clock.mark` drops the clock guarantee for
/// the actor's next restore and nothing else: a paused actor restarts from
/// its snapshot's exact reading and keeps its state.
#[tokio::test(flavor = "multi_thread")]
async fn deleting_the_clock_mark_of_a_paused_actor_loses_nothing_else() {
    let server = Server::start(&["--workers", "1"]);
    server.push("faulty");
    server.create("cm", "faulty");
    let c = client();
    assert_eq!(
        count(&to_actor(&c, server.ingress, "cm", "POST", "/").await),
        1
    );
    let clock = |answer: &crate::support::Answer| -> u64 {
        answer
            .body
            .split_whitespace()
            .find_map(|w| w.strip_prefix("monotonic="))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no clock in {answer:?}"))
    };
    let before = clock(&to_actor(&c, server.ingress, "cm", "GET", "/clock").await);
    server.cli_ok(&["actor", "pause", "cm"]);
    let mark = server.data_dir.join("snapshots/cm/clock.mark");
    assert!(mark.exists(), "a pause writes the mark");
    std::fs::remove_file(&mark).expect("delete clock.mark");
    let after = clock(&to_actor(&c, server.ingress, "cm", "GET", "/clock").await);
    assert!(
        after >= before,
        "the clock went back: {before} then {after}"
    );
    assert_eq!(
        count(&to_actor(&c, server.ingress, "cm", "POST", "/").await),
        2
    );
}

/// docs/operations.md: the mark is written when a guest reading passes it,
/// not before each call: an actor whose guest never reads the clock (the
/// counter) writes no mark when it is created, wakes, serves or pauses
/// (none written at all; before, each wake leased and each pause wrote).
#[tokio::test(flavor = "multi_thread")]
async fn a_guest_that_reads_no_clock_writes_no_clock_mark() {
    let server = Server::start(&["--workers", "1"]);
    server.push("counter");
    server.create("nc", "counter");
    let c = client();
    let mark = server.data_dir.join("snapshots/nc/clock.mark");
    let read_mark = || std::fs::read(&mark).ok();
    assert_eq!(
        count(&to_actor(&c, server.ingress, "nc", "POST", "/").await),
        1
    );
    server.cli_ok(&["actor", "pause", "nc"]);
    let first = read_mark();
    assert_eq!(first, None, "a create and a pause wrote a clock mark");
    for n in 2..=4 {
        // A wake, a request and a pause: a lease would have put the mark
        // 60 s ahead and the pause would have written another reading.
        assert_eq!(
            count(&to_actor(&c, server.ingress, "nc", "POST", "/").await),
            n
        );
        server.cli_ok(&["actor", "pause", "nc"]);
        assert_eq!(read_mark(), first, "after wake {n}");
    }
}

/// A create removes whatever an earlier actor left under its name, a lone
/// `clock.mark` too: the new actor's clock is known to have no mark, and a
/// guest that reads no clock (the counter) would never overwrite it, so a
/// restart would start the new actor's clock at the old one's value.
#[tokio::test(flavor = "multi_thread")]
async fn a_create_removes_a_clock_mark_left_under_its_name() {
    let server = Server::start(&["--workers", "1"]);
    server.push("counter");
    let folder = server.data_dir.join("snapshots/lm");
    std::fs::create_dir_all(&folder).expect("folder");
    let old: u64 = 9_000_000_000_000_000_000;
    std::fs::write(folder.join("clock.mark"), format!("{old:020}\n")).expect("mark");
    server.create("lm", "counter");
    let mark = || {
        std::fs::read_to_string(folder.join("clock.mark"))
            .ok()
            .map(|m| m.trim().parse::<u64>().expect("a number"))
    };
    assert_eq!(mark(), None, "the old mark is kept");
    assert_eq!(
        count(&to_actor(&client(), server.ingress, "lm", "POST", "/").await),
        1
    );
    server.cli_ok(&["actor", "pause", "lm"]);
    let server = server.restart(&["--workers", "1"]);
    assert_eq!(
        count(&to_actor(&client(), server.ingress, "lm", "POST", "/").await),
        2
    );
    assert_eq!(mark(), None, "a mark appeared");
}

/// Longer than any listing that gave up on a frozen worker at its 3 s
/// status bound, far shorter than a call's 120 s bound: a listing still
/// unanswered by then waits like a call (a hang, not a slow answer).
const LISTING_GIVES_UP: Duration = Duration::from_secs(30);

/// Waits (5 s at most) until every thread of process `pid` is stopped
/// (`T` in `/proc/PID/task/*/stat`): a SIGSTOP takes effect as each thread
/// is next scheduled, which on a loaded machine is not at once.
async fn wait_until_stopped(pid: u32) {
    let all_stopped = || {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return false;
        };
        tasks.flatten().all(|task| {
            std::fs::read_to_string(task.path().join("stat"))
                .ok()
                .and_then(|stat| {
                    let state = stat.rsplit_once(") ")?.1.chars().next()?;
                    Some(state == 'T' || state == 't')
                })
                .unwrap_or(true)
        })
    };
    wait_until(Duration::from_secs(5), "the worker to stop", all_stopped).await;
}

/// docs/operations.md, failures: "a remote worker stops answering (frozen,
/// partitioned): status queries give up after 3 s, calls after 120 s". A
/// worker frozen with SIGSTOP (and a heartbeat timeout long enough that it
/// is not declared lost meanwhile): a listing gives up on it and answers,
/// showing its actor `unknown` with the reason; a request to that actor is
/// not given up at the status bound but waits, and is answered once the
/// worker thaws. How fast the listing answers is not asserted (speed is
/// for the benches); [`LISTING_GIVES_UP`] only tells a listing that gave
/// up from one that waits like a call. The 120 s call bound itself is a
/// constant (`PEER_TIMEOUT`, not configurable), so the test checks that
/// calls outlive the status bound rather than waiting two minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_worker_is_listed_unknown_and_calls_wait() {
    let server = Server::start(&["--workers", "0", "--heartbeat-timeout", "60s"]);
    let frozen = RemoteWorker::start(&server, "w-ice", &[]);
    server.push("counter");
    server.create("cold", "counter");
    assert_eq!(count(&post(&server, "cold").await), 1);

    signal(frozen.pid(), "STOP");
    wait_until_stopped(frozen.pid()).await;
    let listed = tokio::time::timeout(LISTING_GIVES_UP, actors(&server))
        .await
        .expect("a listing gives up on the frozen worker and answers");
    let cold = listed
        .iter()
        .find(|a| a["name"] == "cold")
        .unwrap_or_else(|| panic!("the actor is still listed: {listed:?}"));
    assert_eq!(cold["state"], "unknown", "{cold}");
    assert_eq!(cold["worker"], "w-ice", "{cold}");
    let reason = cold["error"].as_str().unwrap_or_default();
    assert!(reason.contains("did not answer"), "{cold}");
    // `worker list` gives up on it the same way.
    let listing = server.cli_in_background(&["worker", "list", "-o", "json"]);
    let out = tokio::time::timeout(LISTING_GIVES_UP, listing)
        .await
        .expect("worker list gives up on the frozen worker and answers")
        .expect("worker list task");
    assert!(
        out.status.success(),
        "worker list failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let workers: Value = serde_json::from_slice(&out.stdout).expect("worker list JSON");
    assert!(workers.to_string().contains("w-ice"), "{workers}");

    // A call waits for the frozen worker rather than failing at 3 s.
    let ingress = server.ingress;
    let call = tokio::spawn(async move { to_actor(&client(), ingress, "cold", "POST", "/").await });
    wait::holds_for_async(
        "the call waiting (it gave up at the status bound)",
        Duration::from_secs(5),
        async || !call.is_finished(),
    )
    .await;
    signal(frozen.pid(), "CONT");
    let answer = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("answered once the worker thawed")
        .expect("join");
    assert_eq!(count(&answer), 2, "{answer:?}");
}
