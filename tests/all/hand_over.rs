//! Live upgrade by state hand-over (issue 31, item 2): the `counter` demo
//! (state schema 1) moves to `counter-v2` (schema 2, one more field) with
//! its count, running or paused, under load, and across a restart; a
//! version that refuses the state, or traps taking it, leaves the actor
//! on its version with its state.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use stasis_test_util::wait;

use crate::support::{Server, client, count, demo, post, to_actor};

/// Pushes demo `which` as template `name` (`--env` pairs make another
/// version of the same module); returns the template's newest version.
fn push_demo(server: &Server, name: &str, which: &str, env: &[&str]) -> u64 {
    let path = demo(which);
    let mut args = vec!["template", "push", name, path.to_str().expect("utf-8")];
    for pair in env {
        args.extend(["--env", pair]);
    }
    server.cli_ok(&args);
    server.cli_json(&["template", "get", name])["version"]
        .as_u64()
        .expect("version")
}

/// A module that exports the hand-over pair and traps taking the state.
fn trapping_loader() -> Vec<u8> {
    wat::parse_str(
        r#"(module
  (@custom "stasis-abi" "\02\00\00\00")
  (memory 1)
  (func (export "stasis_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "stasis_handle") (param i32 i32) (result i64) (i64.const 0))
  (func (export "stasis_save_state") (result i64) (i64.const 0))
  (func (export "stasis_load_state") (param i32 i32) (result i32) unreachable))"#,
    )
    .expect("WAT")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_moves_to_counter_v2_with_its_count_and_a_refusal_changes_nothing() {
    // Snapshots of version 1 are kept for the resume at the end.
    let flags = ["--workers", "1", "--keep-snapshots", "10"];
    let server = Server::start(&flags);
    assert_eq!(push_demo(&server, "c", "counter", &[]), 1);
    server.create("run", "c");
    server.create("idle", "c");
    for n in 1..=3 {
        assert_eq!(count(&post(&server, "run").await), n);
        assert_eq!(count(&post(&server, "idle").await), n);
    }
    server.cli_ok(&["actor", "pause", "idle"]);
    server.cli_ok(&["actor", "checkpoint", "run"]);
    let v1 = server.cli_json(&["actor", "get", "run"])["snapshot"]["seq"]
        .as_u64()
        .expect("seq");
    assert_eq!(push_demo(&server, "c", "counter-v2", &[]), 2);

    // Running: the barrier, then version 2's code with the count.
    let upgraded = server.cli_json(&["actor", "upgrade", "run"]);
    assert_eq!(upgraded["path"], "hand_over", "{upgraded}");
    assert_eq!(upgraded["to_version"], 2, "{upgraded}");
    let answer = post(&server, "run").await;
    assert_eq!(count(&answer), 4);
    assert!(
        answer.body.contains("version 2 since count: 3"),
        "{answer:?}"
    );
    // Paused: resumed on version 1 for the hand-over, then version 2.
    let upgraded = server.cli_json(&["actor", "upgrade", "idle"]);
    assert_eq!(upgraded["path"], "hand_over", "{upgraded}");
    let answer = post(&server, "idle").await;
    assert_eq!(count(&answer), 4);
    assert!(
        answer.body.contains("version 2 since count: 3"),
        "{answer:?}"
    );

    // Back to version 1: its `load` reads schema 1 only and refuses.
    let refused = server.cli(&["actor", "upgrade", "run", "--to-version", "1"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("schema 2 cannot be loaded by schema 1")
            && stderr.contains("stays on version 2"),
        "{stderr}"
    );
    // A version that traps in `stasis_load_state`.
    let dir = tempfile::tempdir().expect("tempdir");
    let trap = dir.path().join("trap.wasm");
    std::fs::write(&trap, trapping_loader()).expect("write");
    server.cli_ok(&["template", "push", "c", trap.to_str().expect("utf-8")]);
    let refused = server.cli(&["actor", "upgrade", "run", "--to-version", "3"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("stasis_load_state") && stderr.contains("stays on version 2"),
        "{stderr}"
    );
    // Each refusal is an `upgrade_failed` event in the actor's history,
    // with both versions and the reason, after its capture and put-back.
    let failed: Vec<String> = server
        .cli_ok(&["actor", "events", "run", "-o", "json"])
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line"))
        .filter_map(|e| e["text"].as_str().map(str::to_owned))
        .filter(|t| t.starts_with("upgrade_failed: "))
        .collect();
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert!(
        failed[0].contains("from version 2 to version 1 of template c")
            && failed[0].contains("schema 2 cannot be loaded by schema 1")
            && failed[0].contains("stays on version 2"),
        "{failed:?}"
    );
    assert!(
        failed[1].contains("from version 2 to version 3")
            && failed[1].contains("stasis_load_state"),
        "{failed:?}"
    );
    // Both refusals left it on version 2 with its count, and a restart
    // keeps every actor on its version.
    assert_eq!(count(&post(&server, "run").await), 5);
    assert_eq!(
        server.cli_json(&["actor", "get", "run"])["template_version"],
        2
    );
    let server = server.restart(&flags);
    let answer = post(&server, "run").await;
    assert_eq!(count(&answer), 6);
    assert!(
        answer.body.contains("version 2 since count: 3"),
        "{answer:?}"
    );
    assert_eq!(count(&post(&server, "idle").await), 5);

    // History: the snapshot checkpointed under version 1 resumes in
    // version 1, the version that wrote it.
    let v1 = v1.to_string();
    let resumed = server.cli_json(&["actor", "resume", "run", "--from-snapshot", &v1]);
    assert_eq!(resumed["template_version"], 1, "{resumed}");
    let answer = post(&server, "run").await;
    assert_eq!(count(&answer), 4);
    assert!(!answer.body.contains("version 2"), "{answer:?}");
}

/// Eight clients post without pause while the actor is upgraded twice
/// (version 1 to 2 to 3): every request is answered 200, and the counts
/// answered are exactly 1 to N, none lost, none applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_during_upgrades_are_held_and_none_is_lost_or_doubled() {
    let server = Arc::new(Server::start(&["--workers", "1"]));
    push_demo(&server, "c", "counter", &[]);
    push_demo(&server, "c", "counter-v2", &[]);
    assert_eq!(push_demo(&server, "c", "counter-v2", &["V=3"]), 3);
    server.create("busy", "c");
    let sent = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for _ in 0..8 {
        let (server, sent, stop) = (server.clone(), sent.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let http = client();
            let mut counts = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let answer = to_actor(&http, server.ingress, "busy", "POST", "/").await;
                sent.fetch_add(1, Ordering::SeqCst);
                counts.push(count(&answer));
            }
            counts
        }));
    }
    // Some requests before, between and after the two upgrades (the
    // clients send hundreds a second; a minute is a generous bound).
    let at_least = |n: u64| {
        let sent = sent.clone();
        async move {
            wait::until_async(
                &format!("{n} requests sent"),
                std::time::Duration::from_secs(60),
                async || (sent.load(Ordering::SeqCst) >= n).then_some(()),
            )
            .await;
        }
    };
    at_least(50).await;
    let first = server.cli_json(&["actor", "upgrade", "busy", "--to-version", "2"]);
    assert_eq!(first["path"], "hand_over", "{first}");
    at_least(sent.load(Ordering::SeqCst) + 50).await;
    let second = server.cli_json(&["actor", "upgrade", "busy", "--to-version", "3"]);
    assert_eq!(second["path"], "hand_over", "{second}");
    at_least(sent.load(Ordering::SeqCst) + 50).await;
    stop.store(true, Ordering::SeqCst);
    let mut all = Vec::new();
    for c in clients {
        all.extend(c.await.expect("client"));
    }
    all.sort_unstable();
    let n = all.len() as u64;
    assert_eq!(all, (1..=n).collect::<Vec<_>>(), "counts 1 to {n}");
    let answer = post(&server, "busy").await;
    assert_eq!(count(&answer), n + 1);
    assert_eq!(
        server.cli_json(&["actor", "get", "busy"])["template_version"],
        3
    );
}

/// The C SDK's hand-over pair: the C counter hands its count to its next
/// version (the same module with another environment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_c_counter_hands_its_count_to_its_next_version() {
    if !crate::c_sdk::c_demos_built() {
        return;
    }
    let server = Server::start(&["--workers", "1"]);
    push_demo(&server, "cc", "counter-c", &[]);
    server.create("c", "cc");
    for n in 1..=3 {
        assert_eq!(count(&post(&server, "c").await), n);
    }
    assert_eq!(push_demo(&server, "cc", "counter-c", &["V=2"]), 2);
    let upgraded = server.cli_json(&["actor", "upgrade", "c"]);
    assert_eq!(upgraded["path"], "hand_over", "{upgraded}");
    assert_eq!(count(&post(&server, "c").await), 4);
}

/// Cluster mode (item 5): versions are rows in etcd, seen by every
/// replica; an actor is upgraded by hand-over through a follower on a
/// remote worker; after `kill -9` of that worker, its next owner runs the
/// new version with the count (the upgrade's snapshot is in the store).
#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_upgrade_through_a_follower_survives_the_workers_loss() {
    use crate::fencing::wait_for_actor;
    use crate::replicas::{ONE_CLUSTER, deployment, served};
    let _one = ONE_CLUSTER.lock().await;
    let mut d = deployment(1, 2, 2, &[]);
    d.push_counter(0);
    d.cli_json(0, &["actor", "create", "u1", "--template", "counter"]);
    for n in 1..=3 {
        assert_eq!(served(&d, 0, "u1").await, n);
    }
    let v2 = demo("counter-v2");
    d.cli_ok(
        1,
        &["template", "push", "counter", v2.to_str().expect("utf-8")],
    );
    assert_eq!(d.cli_json(0, &["template", "get", "counter"])["version"], 2);
    let upgraded = d.cli_json(1, &["actor", "upgrade", "u1"]);
    assert_eq!(upgraded["path"], "hand_over", "{upgraded}");
    assert_eq!(upgraded["template_version"], 2, "{upgraded}");
    let answer = to_actor(&client(), d.replica(0).ingress, "u1", "POST", "/").await;
    assert_eq!(count(&answer), 4);
    assert!(
        answer.body.contains("version 2 since count: 3"),
        "{answer:?}"
    );
    let host = d.cli_json(0, &["actor", "get", "u1"])["worker"]
        .as_str()
        .expect("worker")
        .to_owned();
    let other = if host == "w1" { "w2" } else { "w1" };
    d.kill_worker(&host);
    wait_for_actor(&d, "u1", "saw its worker lost", |info| {
        info["worker_state"] == "lost" || info["worker"] == other
    });
    assert_eq!(served(&d, 1, "u1").await, 5);
    let info = d.cli_json(0, &["actor", "get", "u1"]);
    assert_eq!(info["worker"], other, "{info}");
    assert_eq!(info["template_version"], 2, "{info}");
    let answer = to_actor(&client(), d.replica(1).ingress, "u1", "POST", "/").await;
    assert_eq!(count(&answer), 6);
    assert!(
        answer.body.contains("version 2 since count: 3"),
        "{answer:?}"
    );
}

/// A rollout by hand-over, then a rollback that version 1 cannot take
/// (its `load` reads state schema 1 only): the rollback finishes with the
/// actor failed, the command exits 1 saying so and names the actor with
/// its reason, and the actor keeps serving on version 2 with its state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_that_fails_for_an_actor_fails_the_command_and_keeps_the_actor() {
    let server = Server::start(&["--workers", "1"]);
    push_demo(&server, "c", "counter", &[]);
    server.create("a", "c");
    assert_eq!(count(&post(&server, "a").await), 1);
    push_demo(&server, "c", "counter-v2", &[]);
    let rolled = server.cli_json(&["template", "rollout", "c", "--to-version", "2"]);
    assert_eq!(rolled["upgraded"], 1, "{rolled}");
    let back = server.cli(&["template", "rollback", "c"]);
    assert!(!back.status.success(), "{back:?}");
    let stderr = String::from_utf8_lossy(&back.stderr);
    assert!(stderr.contains("1 actor(s) failed"), "{stderr}");
    let stdout = String::from_utf8_lossy(&back.stdout);
    assert!(
        stdout.contains("failed a:") && stdout.contains("schema 2 cannot be loaded"),
        "{stdout}"
    );
    let answer = post(&server, "a").await;
    assert_eq!(count(&answer), 2);
    assert!(
        answer.body.contains("version 2 since count: 1"),
        "{answer:?}"
    );
}
