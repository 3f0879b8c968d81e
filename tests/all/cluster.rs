//! Scale out and in: remote worker processes, migration by the pause →
//! ship → resume barrier, failures during moves, lost workers. Real
//! processes on loopback.

use std::collections::HashMap;
use std::time::Duration;

use stasis_test_util::demos::{count_in, echo_answer};
use stasis_test_util::wait;

use crate::support::{
    RemoteWorker, Server, client, count, install_delay_line, post, send, to_actor,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_migrates_between_two_worker_processes() {
    let server = Server::start(&["--workers", "0"]);
    let a = RemoteWorker::start(&server, "w-a", &[]);
    let b = RemoteWorker::start(&server, "w-b", &[]);
    server.push("counter");
    server.create("mover", "counter");
    let first = server.worker_of("mover");
    for n in 1..=3 {
        assert_eq!(count(&post(&server, "mover").await), n);
    }
    let to = if first == a.name { &b.name } else { &a.name };
    let moved = server.cli_json(&["actor", "migrate", "mover", "--to", to]);
    assert_eq!(moved["worker"], to.as_str());
    assert_eq!(moved["epoch"], 2);
    // The move reports the time its gate was closed, in milliseconds
    // rounded to the microsecond: a capture, a ship to another process and
    // an install take far more than a microsecond, so 0 would mean the
    // downtime was never measured.
    let downtime = moved["downtime_ms"]
        .as_f64()
        .unwrap_or_else(|| panic!("downtime_ms is not a number: {moved}"));
    assert!(
        downtime.is_finite() && downtime > 0.0,
        "downtime_ms {downtime}: {moved}"
    );
    let answer = post(&server, "mover").await;
    assert_eq!(
        answer.body,
        format!("hello from: {to} | preserved memory count: 4\n")
    );
    // And back, paused this time: the paused state moves too.
    server.cli_ok(&["actor", "pause", "mover"]);
    server.cli_ok(&["actor", "migrate", "mover", "--to", &first]);
    let answer = post(&server, "mover").await;
    assert_eq!(
        answer.body,
        format!("hello from: {first} | preserved memory count: 5\n")
    );
    let text = server.metrics().await;
    assert!(
        text.contains("stasis_migration_downtime_seconds_count 2"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_survives_scale_out_and_scale_in_with_exact_counts() {
    let server = Server::start(&["--workers", "1"]);
    let old = RemoteWorker::start(&server, "w-old", &[]);
    server.push("counter");
    let actors: Vec<String> = (0..20).map(|i| format!("load-{i}")).collect();
    for a in &actors {
        server.create(a, "counter");
    }
    let c = client();
    let addr = server.ingress;
    // Answers the load has had so far: each step below waits for more of
    // them, so the scale-out and the drain each happen under load.
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut clients = Vec::new();
    for k in 0..16 {
        let c = c.clone();
        let actors = actors.clone();
        let answered = answered.clone();
        clients.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            for i in 0..200 {
                let actor = &actors[(k * 7 + i) % actors.len()];
                let answer = to_actor(&c, addr, actor, "POST", "/").await;
                answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                seen.push((actor.clone(), answer.status, answer.body));
            }
            seen
        }));
    }
    let answers_past = |n: usize| {
        let answered = answered.clone();
        async move {
            wait::until_async(
                &format!("{n} answers to the load"),
                Duration::from_secs(60),
                async || (answered.load(std::sync::atomic::Ordering::SeqCst) >= n).then_some(()),
            )
            .await;
        }
    };
    answers_past(400).await;
    let new = RemoteWorker::start(&server, "w-new", &[]);
    let joined_at = answered.load(std::sync::atomic::Ordering::SeqCst);
    answers_past(joined_at + 400).await;
    let drained = server.cli_json(&["worker", "drain", &old.name]);
    assert_eq!(drained["state"], "drained");
    let mut counts: HashMap<String, Vec<u64>> = HashMap::new();
    for task in clients {
        for (actor, status, body) in task.await.expect("client") {
            assert_eq!(status, 200, "{actor}: {body}");
            let n = count_in(&body).expect("count");
            counts.entry(actor).or_default().push(n);
        }
    }
    for (actor, mut seen) in counts {
        seen.sort_unstable();
        let expected: Vec<u64> = (1..=seen.len() as u64).collect();
        assert_eq!(
            seen, expected,
            "{actor}: duplicates mean double activation, gaps lost state"
        );
    }
    let workers = server.cli_json(&["worker", "list"]);
    let on_old = workers
        .as_array()
        .expect("list")
        .iter()
        .find(|w| w["name"] == "w-old")
        .expect("w-old");
    assert_eq!(on_old["actors"], 0);
    let on_new = workers
        .as_array()
        .expect("list")
        .iter()
        .find(|w| w["name"] == new.name.as_str())
        .expect("w-new");
    assert!(
        on_new["actors"].as_u64().expect("actors") > 0,
        "scale out moved actors: {workers}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_killed_mid_migration_rolls_back_to_the_source() {
    let server = Server::start(&["--workers", "1"]);
    let mut target = RemoteWorker::start(
        &server,
        "w-slow",
        &[
            ("STASIS_FAILPOINT_INSTALL_DELAY_MS", "3000"),
            ("STASIS_LOG", "info"),
        ],
    );
    server.push("counter");
    server.create("steady", "counter");
    // The only other worker is worker-1; make sure the actor is there.
    if server.worker_of("steady") != "worker-1" {
        server.cli_ok(&["actor", "migrate", "steady", "--to", "worker-1"]);
    }
    for n in 1..=3 {
        assert_eq!(count(&post(&server, "steady").await), n);
    }
    let migrate = server.migrate_in_background("steady", "w-slow");
    // Under way once the install reached the target: the gate is closed
    // for the 3 s the target delays it.
    target.wait_for_log(&install_delay_line("steady"));
    // A request during the move is held at the gate, then served.
    let held = tokio::spawn({
        let addr = server.ingress;
        async move {
            send(
                &client(),
                addr,
                "POST",
                "steady.actors.localhost",
                "/",
                Vec::new(),
            )
            .await
        }
    });
    // sleep: lets the move get under way before its target is killed.
    tokio::time::sleep(Duration::from_millis(200)).await;
    target.kill();
    let out = migrate.await.expect("migrate");
    assert_eq!(out.status.code(), Some(1), "the move must fail");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rolled back"),
        "{out:?}"
    );
    let held = held.await.expect("held");
    assert_eq!(count(&held), 4);
    assert_eq!(server.worker_of("steady"), "worker-1");
    assert_eq!(count(&post(&server, "steady").await), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_held_at_a_moving_actors_gate_count_against_max_held() {
    let server = Server::start(&["--workers", "1", "--max-held", "2"]);
    let target = RemoteWorker::start(
        &server,
        "w-slow",
        &[
            ("STASIS_FAILPOINT_INSTALL_DELAY_MS", "1500"),
            ("STASIS_LOG", "info"),
        ],
    );
    server.push("counter");
    server.create("gated", "counter");
    if server.worker_of("gated") != "worker-1" {
        server.cli_ok(&["actor", "migrate", "gated", "--to", "worker-1"]);
    }
    assert_eq!(count(&post(&server, "gated").await), 1);
    let migrate = server.migrate_in_background("gated", "w-slow");
    // Once the install reached the target, the gate stays closed for the
    // 1.5 s the target delays it: two requests wait there, the next three
    // are refused at once.
    target.wait_for_log(&install_delay_line("gated"));
    let c = client();
    let mut waiting = Vec::new();
    for _ in 0..5 {
        let (c, addr) = (c.clone(), server.ingress);
        waiting.push(tokio::spawn(async move {
            send(&c, addr, "POST", "gated.actors.localhost", "/", Vec::new()).await
        }));
        // sleep: spaces the five requests so they reach the gate in order.
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let mut served = Vec::new();
    let mut refused = 0;
    for answer in waiting {
        let answer = answer.await.expect("request");
        match answer.status {
            200 => served.push(count(&answer)),
            503 => {
                assert!(answer.body.contains("--max-held"), "{answer:?}");
                refused += 1;
            }
            other => panic!("unexpected {other}: {answer:?}"),
        }
    }
    assert_eq!(refused, 3, "served {served:?}");
    served.sort_unstable();
    assert_eq!(served, [2, 3]);
    let out = migrate.await.expect("migrate");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(server.worker_of("gated"), "w-slow");
    // The count is free again, and nothing was lost or repeated.
    assert_eq!(count(&post(&server, "gated").await), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undrained_worker_takes_actors_again() {
    let server = Server::start(&["--workers", "2"]);
    server.push("counter");
    for i in 0..4 {
        let name = format!("u-{i}");
        server.create(&name, "counter");
        assert_eq!(count(&post(&server, &name).await), 1);
    }
    let drained = server.cli_json(&["worker", "drain", "worker-1"]);
    assert_eq!(drained["state"], "drained");
    server.create("u-new", "counter");
    assert_eq!(server.worker_of("u-new"), "worker-2");

    let undrained = server.cli_json(&["worker", "undrain", "worker-1"]);
    assert_eq!(undrained["state"], "ready", "{undrained}");
    // Idempotent, and the worker takes new actors (it is the emptier one).
    assert_eq!(
        server.cli_json(&["worker", "undrain", "worker-1"])["state"],
        "ready"
    );
    server.create("u-back", "counter");
    assert_eq!(server.worker_of("u-back"), "worker-1");
    let moves = server.cli_json(&["rebalance"]);
    assert!(
        moves["moves"]
            .as_array()
            .is_some_and(|m| !m.is_empty() && m.iter().all(|m| m["to"] == "worker-1")),
        "rebalance moves actors back: {moves}"
    );
    for i in 0..4 {
        assert_eq!(count(&post(&server, &format!("u-{i}")).await), 2);
    }
    let out = server.cli(&["worker", "undrain", "worker-9"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("worker-9"),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_actors_of_a_killed_worker_resume_elsewhere() {
    let server = Server::start(&["--workers", "1", "--heartbeat-timeout", "500ms"]);
    let mut doomed = RemoteWorker::start(&server, "w-doomed", &[]);
    server.push("counter");
    let mut on_doomed = Vec::new();
    for i in 0..4 {
        let name = format!("p-{i}");
        server.create(&name, "counter");
        if server.worker_of(&name) != "w-doomed" {
            server.cli_ok(&["actor", "migrate", &name, "--to", "w-doomed"]);
        }
        for _ in 0..=i {
            post(&server, &name).await;
        }
        server.cli_ok(&["actor", "pause", &name]);
        on_doomed.push(name);
    }
    doomed.kill();
    server.wait_for_worker("w-doomed", "lost");
    // Declared lost, its actors are re-placed in the background: wait
    // until every one has landed on worker-1.
    wait::until_else_async(
        "the lost worker's actors to be re-placed",
        Duration::from_secs(10),
        async || {
            let elsewhere: Vec<&String> = on_doomed
                .iter()
                .filter(|name| server.worker_of(name) != "worker-1")
                .collect();
            if elsewhere.is_empty() {
                Ok(())
            } else {
                Err(format!("not on worker-1: {elsewhere:?}"))
            }
        },
    )
    .await;
    for (i, name) in on_doomed.iter().enumerate() {
        assert_eq!(server.worker_of(name), "worker-1");
        assert_eq!(
            count(&post(&server, name).await),
            i as u64 + 2,
            "{name} kept its paused state"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_sent_during_a_move_arrives_intact() {
    let server = Server::start(&["--workers", "1"]);
    let _w = RemoteWorker::start(
        &server,
        "w-echo",
        &[("STASIS_FAILPOINT_INSTALL_DELAY_MS", "300")],
    );
    server.push("echo");
    server.create("e", "echo");
    let to = if server.worker_of("e") == "worker-1" {
        "w-echo"
    } else {
        "worker-1"
    };
    let migrate = server.migrate_in_background("e", to);
    // sleep: lets the move get under way before the large request.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let body: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let answer = send(
        &client(),
        server.ingress,
        "POST",
        "e.actors.localhost",
        "/",
        body.clone(),
    )
    .await;
    let expected = echo_answer(&body);
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, expected);
    let out = migrate.await.expect("migrate");
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["worker"], to);
    assert!(json["downtime_ms"].is_number());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_restarted_under_the_same_name_gets_its_actors_back_from_snapshots() {
    let server = Server::start(&["--workers", "0", "--heartbeat-timeout", "10s"]);
    let mut first = RemoteWorker::start(&server, "w-same", &[]);
    server.push("counter");
    server.create("phoenix", "counter");
    assert_eq!(count(&post(&server, "phoenix").await), 1);
    server.cli_ok(&["actor", "pause", "phoenix"]);
    assert_eq!(count(&post(&server, "phoenix").await), 2);
    server.cli_ok(&["actor", "checkpoint", "phoenix"]);
    first.kill();
    // Long before the heartbeat timeout declares it lost, it joins again,
    // empty: the actor comes back from its newest snapshot, not as a 404.
    let _second = RemoteWorker::start(&server, "w-same", &[]);
    // Until then a 503 (nothing applied), and nothing else.
    let answer = wait::until_else_async(
        "phoenix to serve again",
        Duration::from_secs(5),
        async || {
            let answer = post(&server, "phoenix").await;
            if answer.status == 200 {
                return Ok(answer);
            }
            assert_eq!(answer.status, 503, "{answer:?}");
            Err(format!("{answer:?}"))
        },
    )
    .await;
    assert_eq!(count(&answer), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_a_remote_worker_before_it_exits() {
    let server = Server::start(&["--workers", "1"]);
    let mut leaving = RemoteWorker::start(&server, "w-leaving", &[]);
    server.push("counter");
    for i in 0..3 {
        let name = format!("t-{i}");
        server.create(&name, "counter");
        if server.worker_of(&name) != "w-leaving" {
            server.cli_ok(&["actor", "migrate", &name, "--to", "w-leaving"]);
        }
        assert_eq!(count(&post(&server, &name).await), 1);
    }
    let status = leaving.terminate();
    assert!(status.success(), "worker exit: {status}");
    server.wait_for_worker("w-leaving", "drained");
    for i in 0..3 {
        let name = format!("t-{i}");
        assert_eq!(server.worker_of(&name), "worker-1");
        assert_eq!(
            count(&post(&server, &name).await),
            2,
            "{name} kept its live state"
        );
    }
}
