//! Placement racing restarts and re-joins (issue 11 inputs 7, 8 and 9):
//! one durable placement decision per actor with a new epoch, whatever
//! restarts or re-joins meanwhile; listings that never hide an actor; and
//! drains that never place on a draining worker. Real processes on
//! loopback.

use std::time::{Duration, Instant};

use stasis_test_util::wait;

use crate::support::{RemoteWorker, Server, client, count, post, send, to_actor};

/// A loopback address whose port was free a moment ago and lies outside
/// the range outgoing connections take theirs from (the server binds it
/// twice, across a restart).
fn free_addr() -> String {
    format!("127.0.0.1:{}", stasis_test_util::ports::reserved_port())
}

/// The actors remote worker `worker` hosts, by asking its internal API.
async fn hosted(worker: &RemoteWorker) -> String {
    send(
        &client(),
        worker.listen,
        "GET",
        "localhost",
        "/internal/v1/actors",
        Vec::new(),
    )
    .await
    .body
}

/// Input 7: `serve --workers 0` with remote workers w1 and w2 and a large
/// checkpointed kv actor (its install takes a while); kill -9 `serve` and
/// start it again on the same data dir and ports. Both workers re-join; the
/// actor must be placed on exactly one of them, and every acknowledged
/// update is read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_restart_places_each_actor_once() {
    let data = tempfile::tempdir().expect("tempdir");
    let (admin, ingress) = (free_addr(), free_addr());
    // The 400,000-key preload runs inside the create; on a loaded 2-core
    // CI machine it took more than the default 1 s of guest time.
    let args = [
        "--workers",
        "0",
        "--admin-listen",
        &admin,
        "--listen",
        &ingress,
        "--cpu-limit",
        "20s",
    ];
    let mut server = Server::start_in(data.path(), &args).expect("serve");
    let w1 = RemoteWorker::start(&server, "w1", &[]);
    let w2 = RemoteWorker::start(&server, "w2", &[]);
    server.cli_ok(&[
        "template",
        "push",
        "kv",
        crate::support::demo("kv").to_str().expect("utf-8"),
        "--env",
        "KV_PRELOAD=400000",
    ]);
    server.create("big", "kv");
    let http = client();
    for i in 1..=5 {
        let put = send(
            &http,
            server.ingress,
            "PUT",
            "big.actors.localhost",
            "/n",
            i.to_string().into_bytes(),
        )
        .await;
        assert!(put.status == 200 || put.status == 201, "{put:?}");
    }
    server.cli_ok(&["actor", "checkpoint", "big"]);

    server.kill();
    let server = Server::start_in(data.path(), &args).expect("serve again");
    // Both workers notice the new control plane (their heartbeat gets 404),
    // drop what they held and join again.
    server.wait_for_worker("w1", "ready");
    server.wait_for_worker("w2", "ready");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = 5;
    while Instant::now() < deadline {
        let read = to_actor(&http, server.ingress, "big", "GET", "/n").await;
        if read.status == 200 {
            let value: u64 = read.body.trim().parse().expect("a number");
            assert_eq!(value, last, "an acknowledged update was lost");
            last += 1;
            let put = send(
                &http,
                server.ingress,
                "PUT",
                "big.actors.localhost",
                "/n",
                last.to_string().into_bytes(),
            )
            .await;
            assert_eq!(put.status, 200, "{put:?}");
        }
        if last >= 25 {
            break;
        }
        // The 20 read-and-write rounds are spread over 2 s or more, so
        // that they run across the re-placements the two joins trigger.
        // sleep: paces the client's rounds (the spread is the point).
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(last >= 25, "the actor did not serve after the restart");
    // Re-placements triggered by either join have settled by now; exactly
    // one worker holds the actor.
    // sleep: re-placements triggered by either join get time to settle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (on1, on2) = (hosted(&w1).await, hosted(&w2).await);
    let holders = [&on1, &on2]
        .iter()
        .filter(|l| l.contains("\"big\""))
        .count();
    assert_eq!(holders, 1, "w1 hosts {on1}, w2 hosts {on2}");
    let epoch = server.cli_json(&["actor", "get", "big"])["epoch"]
        .as_u64()
        .expect("epoch");
    // One re-placement: placed lazily at epoch 2 when a worker joined,
    // adopted at 3 (an adoption installs at an epoch no placement names
    // yet, then switches to it; see control/src/adopt.rs).
    assert_eq!(epoch, 3, "one re-placement: placed at 2, adopted at 3");
}

/// Input 8: between a remote worker's kill -9 and its being declared
/// `lost`, listings still show its actors (with the worker's state).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actors_of_an_unreachable_worker_stay_listed() {
    // Every answered request is checkpointed, so the re-placement after the
    // loss restores it.
    let server = Server::start(&["--workers", "0", "--checkpoint-every", "1"]);
    let mut w1 = RemoteWorker::start(&server, "w1", &[]);
    server.push("counter");
    for name in ["u-1", "u-2"] {
        server.create(name, "counter");
        assert_eq!(count(&post(&server, name).await), 1);
    }
    w1.kill();
    let listed = server.cli_json(&["actor", "list"]);
    assert_eq!(
        crate::support::names_in(&listed),
        ["u-1", "u-2"],
        "{listed}"
    );
    for actor in listed.as_array().expect("a list") {
        assert_eq!(actor["worker"], "w1", "{actor}");
    }
    let text = server.cli_ok(&["actor", "list"]);
    assert!(text.contains("u-1") && text.contains("u-2"), "{text}");
    // Once lost, they come back (paused) on the next worker to join.
    let _w2 = RemoteWorker::start(&server, "w2", &[]);
    let answer = wait::until_else_async("u-1 to serve", Duration::from_secs(20), async || {
        let answer = post(&server, "u-1").await;
        if answer.status == 200 {
            Ok(answer)
        } else {
            Err(format!("{answer:?}"))
        }
    })
    .await;
    assert_eq!(count(&answer), 2);
}

/// Input 9: SIGTERM to two remote workers at once: each asks to be
/// drained, and no drain places an actor on the other, draining worker.
/// Every actor ends on the in-process worker with its live state, and both
/// workers report their drain done (exit 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_drains_never_place_on_a_draining_worker() {
    let server = Server::start(&["--workers", "1"]);
    let mut a = RemoteWorker::start(&server, "w-a", &[]);
    let mut b = RemoteWorker::start(&server, "w-b", &[]);
    server.push("counter");
    let mut names = Vec::new();
    for i in 0..6 {
        let name = format!("d-{i}");
        server.create(&name, "counter");
        let to = if i % 2 == 0 { "w-a" } else { "w-b" };
        if server.worker_of(&name) != to {
            server.cli_ok(&["actor", "migrate", &name, "--to", to]);
        }
        assert_eq!(count(&post(&server, &name).await), 1);
        names.push(name);
    }
    let (ta, tb) = std::thread::scope(|s| {
        let ta = s.spawn(|| a.terminate());
        let tb = s.spawn(|| b.terminate());
        (ta.join().expect("join"), tb.join().expect("join"))
    });
    assert!(ta.success(), "w-a exit: {ta}");
    assert!(tb.success(), "w-b exit: {tb}");
    for name in &names {
        assert_eq!(server.worker_of(name), "worker-1", "{name}");
        assert_eq!(count(&post(&server, name).await), 2, "{name}");
    }
}
