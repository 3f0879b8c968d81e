//! Rollouts and rollbacks of a template version (issue 31, item 3):
//! every actor of a template (running, paused, forked) moves to the new
//! version with its state; canaries go first and the rollout stops after
//! `--max-failures` failures, naming each failed actor and why; a rollout
//! carries on after a `kill -9` of the control plane; a rollback returns
//! every upgraded actor to its version with the state it has now.
//!
//! The guests are the small WAT counters of `upgrade.rs`: each request
//! adds one to a mutable global and answers one byte, that count plus an
//! offset that tells the versions' code apart; versions declaring the same
//! `stasis-layout` are carry-over compatible.

use std::time::Duration;

use stasis_test_util::wait;

use crate::support::{Server, client, one_byte, send};

/// A counter guest declaring `layout`, answering `count + offset`.
fn guest(layout: &str, offset: u8) -> Vec<u8> {
    let wat = format!(
        r#"(module
  (@custom "stasis-abi" "\02\00\00\00")
  (@custom "stasis-layout" "{layout}")
  (memory 1)
  (global $calls (mut i32) (i32.const 0))
  (data (i32.const 16) "\c8\00\01\00")
  (func (export "stasis_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "stasis_handle") (param i32 i32) (result i64)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (i32.store8 (i32.const 19) (i32.add (global.get $calls) (i32.const {offset})))
    (i64.const 0x1000000004)))"#
    );
    wat::parse_str(&wat).expect("WAT")
}

/// `method path` on the admin API with a JSON body; asserts a 2xx.
async fn admin(server: &Server, method: &str, path: &str, body: serde_json::Value) {
    let body = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    let reply = send(&client(), server.admin, method, "localhost", path, body).await;
    assert!(
        (200..300).contains(&reply.status),
        "{method} {path}: {reply:?}"
    );
}

/// Creates actor `name` of `template` through the admin API.
pub(crate) async fn create(server: &Server, name: &str, template: &str) {
    let body = serde_json::json!({ "name": name, "template": template });
    admin(server, "POST", "/v1/actors", body).await;
}

/// Pauses actor `name`.
pub(crate) async fn pause(server: &Server, name: &str) {
    let path = format!("/v1/actors/{name}/pause");
    admin(server, "POST", &path, serde_json::Value::Null).await;
}

/// The template version actor `name` runs.
fn version(server: &Server, name: &str) -> u64 {
    server.cli_json(&["actor", "get", name])["template_version"]
        .as_u64()
        .expect("template_version")
}

/// The actor's state (`running`, `paused`, ...).
fn state(server: &Server, name: &str) -> String {
    server.cli_json(&["actor", "get", name])["state"]
        .as_str()
        .expect("state")
        .to_owned()
}

/// Waits (30 s at most) until `template rollout-status` shows `state`;
/// that status.
fn wait_for_state(server: &Server, template: &str, state: &str) -> serde_json::Value {
    let what = format!("the rollout of {template} to become {state}");
    stasis_test_util::wait::until_else(&what, Duration::from_secs(30), || {
        let status = server.cli_json(&["template", "rollout-status", template]);
        if status["state"] == state {
            Ok(status)
        } else {
            Err(status)
        }
    })
}

/// `(total, upgraded, failed, pending)` of a status.
fn counts(status: &serde_json::Value) -> (u64, u64, u64, u64) {
    let n = |k: &str| {
        status[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k}: {status}"))
    };
    (n("total"), n("upgraded"), n("failed"), n("pending"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollout_upgrades_every_actor_and_a_rollback_returns_each_with_its_state() {
    const ACTORS: usize = 200;
    const PAUSED: usize = 50;
    let server = Server::start(&["--workers", "2"]);
    assert_eq!(server.push_module("wc", &guest("wc-1", 0)), 1);
    let names: Vec<String> = (0..ACTORS).map(|i| format!("a{i:03}")).collect();
    // Actor i has counted i % 5 + 1 requests; the first PAUSED are paused.
    let mut counts_of = std::collections::BTreeMap::new();
    for (i, name) in names.iter().enumerate() {
        create(&server, name, "wc").await;
        let n = (i % 5 + 1) as u8;
        for expected in 1..=n {
            assert_eq!(one_byte(&server, name).await, expected);
        }
        counts_of.insert(name.clone(), n);
    }
    for name in &names[..PAUSED] {
        pause(&server, name).await;
    }
    // A fork (paused, the count of its source) is an actor like any other.
    server.cli_ok(&["actor", "fork", "a199", "fork"]);
    counts_of.insert("fork".to_owned(), counts_of["a199"]);
    assert_eq!(server.push_module("wc", &guest("wc-1", 100)), 2);

    // Running actors move now, canaries first (the first 3 by name,
    // paused or not); other paused ones (and the fork) wait for their
    // next resume.
    let status = server.cli_json(&[
        "template",
        "rollout",
        "wc",
        "--to-version",
        "2",
        "--canary",
        "3",
    ]);
    assert_eq!(status["state"], "running", "{status}");
    assert_eq!(status["canary"], 3, "{status}");
    let deferred = PAUSED as u64 - 3 + 1;
    assert_eq!(
        counts(&status),
        (
            ACTORS as u64 + 1,
            ACTORS as u64 - PAUSED as u64 + 3,
            0,
            deferred
        ),
        "{status}"
    );
    assert_eq!(status["deferred"], deferred, "{status}");
    let log = server.log();
    let first = log
        .find("rollout upgraded actor")
        .expect("an upgrade logged");
    let line = log[first..].lines().next().unwrap_or("");
    assert!(line.contains("a000"), "canaries first: {line}");
    assert_eq!(
        (version(&server, "a000"), state(&server, "a000").as_str()),
        (2, "paused")
    );
    assert_eq!(version(&server, "a003"), 1, "paused: not upgraded yet");
    assert_eq!(state(&server, "a003"), "paused");
    assert_eq!(version(&server, "a199"), 2);
    // Resuming a paused actor (a request, or `actor resume`) upgrades it
    // first.
    assert_eq!(one_byte(&server, "a003").await, counts_of["a003"] + 1 + 100);
    *counts_of.get_mut("a003").expect("a003") += 1;
    server.cli_ok(&["actor", "resume", "a004"]);
    assert_eq!(version(&server, "a004"), 2);
    for (name, count) in counts_of.iter_mut() {
        *count += 1;
        assert_eq!(
            one_byte(&server, name).await,
            *count + 100,
            "{name}: version 2's code with the count kept"
        );
    }
    let status = wait_for_state(&server, "wc", "finished");
    assert_eq!(
        counts(&status),
        (ACTORS as u64 + 1, ACTORS as u64 + 1, 0, 0),
        "{status}"
    );
    for name in counts_of.keys() {
        assert_eq!(version(&server, name), 2, "{name}");
    }

    // Rollback: every actor back on version 1, with the count it has now
    // (the requests made under version 2 stay counted).
    let status = server.cli_json(&["template", "rollback", "wc"]);
    assert_eq!(status["kind"], "rollback", "{status}");
    assert_eq!(status["state"], "finished", "{status}");
    assert_eq!(
        counts(&status),
        (ACTORS as u64 + 1, ACTORS as u64 + 1, 0, 0),
        "{status}"
    );
    for (name, count) in &mut counts_of {
        *count += 1;
        assert_eq!(one_byte(&server, name).await, *count, "{name}: version 1");
        assert_eq!(version(&server, name), 1);
    }
    // A second rollback has nothing to return.
    let again = server.cli(&["template", "rollback", "wc"]);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("rolled back already"),
        "{again:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_stops_after_max_failures_and_names_each_failed_actor() {
    let server = Server::start(&["--workers", "1"]);
    server.push_module("wc", &guest("wc-1", 0));
    // a0..a9 on version 1 (layout wc-1), b0..b3 on version 2 (layout
    // wc-2), then version 3 (layout wc-1 again): the b actors cannot move
    // to it by carry-over.
    for i in 0..10 {
        create(&server, &format!("a{i}"), "wc").await;
        assert_eq!(one_byte(&server, &format!("a{i}")).await, 1);
    }
    server.push_module("wc", &guest("wc-2", 50));
    for i in 0..4 {
        create(&server, &format!("b{i}"), "wc").await;
        assert_eq!(one_byte(&server, &format!("b{i}")).await, 51);
    }
    assert_eq!(server.push_module("wc", &guest("wc-1", 100)), 3);
    let out = server.cli(&[
        "template",
        "rollout",
        "wc",
        "--to-version",
        "3",
        "--canary",
        "1",
        "--max-failures",
        "2",
        "-o",
        "json",
    ]);
    assert!(!out.status.success(), "a stopped rollout fails the command");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("stopped") && stderr.contains("actors failed (--max-failures 2)"),
        "{stderr}"
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON status");
    assert_eq!(status["state"], "stopped", "{status}");
    let (total, upgraded, failed, pending) = counts(&status);
    assert_eq!((total, upgraded), (14, 10), "{status}");
    assert!(failed >= 2 && failed + pending == 4, "{status}");
    for failure in status["failures"].as_array().expect("failures") {
        let actor = failure["actor"].as_str().expect("actor");
        assert!(actor.starts_with('b'), "{status}");
        let reason = failure["reason"].as_str().expect("reason");
        assert!(
            reason.contains("layouts declared differ") && reason.contains("stays on version 2"),
            "{reason}"
        );
        assert!(stderr.contains(actor), "the stop names {actor}: {stderr}");
    }
    // The failed actors stay on their version with their state; the
    // others run version 3 with theirs.
    for i in 0..4 {
        assert_eq!(one_byte(&server, &format!("b{i}")).await, 52);
    }
    for i in 0..10 {
        assert_eq!(one_byte(&server, &format!("a{i}")).await, 102);
    }
    // The table view names each failure too.
    let table = server.cli_ok(&["template", "rollout-status", "wc"]);
    assert!(table.contains("failed b0: "), "{table}");
    // A failed canary stops the rollout at once.
    server.push_module("wc", &guest("wc-3", 0));
    let out = server.cli(&[
        "template",
        "rollout",
        "wc",
        "--to-version",
        "4",
        "--canary",
        "1",
        "--max-failures",
        "100",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("canary a0 failed"),
        "{stderr}"
    );
    let status = server.cli_json(&["template", "rollout-status", "wc"]);
    assert_eq!(counts(&status), (14, 0, 1, 13), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_actor_whose_upgrade_fails_at_its_resume_is_served_by_its_version() {
    let server = Server::start(&["--workers", "1"]);
    // x on version 1 (layout wc-1), y on version 2 (layout wc-2), both
    // paused; version 3 declares wc-1: y cannot move to it.
    server.push_module("wc", &guest("wc-1", 0));
    create(&server, "x", "wc").await;
    assert_eq!(one_byte(&server, "x").await, 1);
    server.push_module("wc", &guest("wc-2", 50));
    create(&server, "y", "wc").await;
    assert_eq!(one_byte(&server, "y").await, 51);
    pause(&server, "x").await;
    pause(&server, "y").await;
    server.push_module("wc", &guest("wc-1", 100));
    let status = server.cli_json(&[
        "template",
        "rollout",
        "wc",
        "--to-version",
        "3",
        "--max-failures",
        "5",
    ]);
    assert_eq!(status["state"], "running", "{status}");
    assert_eq!(
        (counts(&status), &status["deferred"]),
        ((2, 0, 0, 2), &2.into())
    );
    // y's request upgrades it first: refused, so its own version serves
    // it, and the failure is recorded with its reason.
    assert_eq!(one_byte(&server, "y").await, 52);
    assert_eq!(version(&server, "y"), 2);
    let status = server.cli_json(&["template", "rollout-status", "wc"]);
    assert_eq!(counts(&status), (2, 0, 1, 1), "{status}");
    assert_eq!(status["failures"][0]["actor"], "y", "{status}");
    let reason = status["failures"][0]["reason"].as_str().expect("reason");
    assert!(reason.contains("layouts declared differ"), "{reason}");
    // x's moves.
    assert_eq!(one_byte(&server, "x").await, 102);
    let status = wait_for_state(&server, "wc", "finished");
    assert_eq!(counts(&status), (2, 1, 1, 0), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actors_deleted_during_a_rollout_are_listed_as_skipped() {
    const ACTORS: usize = 20;
    // Each step waits 3 s first: the first 8 steps (k00..k07, by name)
    // are waiting while k15..k19 are deleted, long before their turn.
    let delay = [("STASIS_FAILPOINT_ROLLOUT_DELAY_MS", "3000")];
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = Server::start_in_env(&tmp.path().join("data"), &["--workers", "1"], &delay)
        .expect("serve starts");
    server.push_module("wc", &guest("wc-1", 0));
    for i in 0..ACTORS {
        create(&server, &format!("k{i:02}"), "wc").await;
    }
    server.push_module("wc", &guest("wc-1", 100));
    server.cli_json(&[
        "template",
        "rollout",
        "wc",
        "--to-version",
        "2",
        "--no-wait",
    ]);
    server.wait_for_log("failpoint: rollout step waits");
    for i in 15..ACTORS {
        server.cli_ok(&["actor", "delete", &format!("k{i:02}")]);
    }
    let status = wait_for_state(&server, "wc", "finished");
    assert_eq!(counts(&status), (20, 15, 0, 0), "{status}");
    assert_eq!(status["skipped"], 5, "{status}");
    let skips: Vec<(&str, &str)> = status["skips"]
        .as_array()
        .expect("skips")
        .iter()
        .map(|s| {
            (
                s["actor"].as_str().expect("actor"),
                s["reason"].as_str().expect("reason"),
            )
        })
        .collect();
    assert_eq!(
        skips,
        [
            ("k15", "gone"),
            ("k16", "gone"),
            ("k17", "gone"),
            ("k18", "gone"),
            ("k19", "gone")
        ],
        "{status}"
    );
    let table = server.cli_ok(&["template", "rollout-status", "wc"]);
    assert!(table.contains("skipped k17: gone"), "{table}");
    for i in 0..15 {
        assert_eq!(one_byte(&server, &format!("k{i:02}")).await, 101);
    }
}

/// How many times `text` is in the server's log.
fn occurrences(server: &Server, text: &str) -> usize {
    server.log().matches(text).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_carries_on_after_the_control_plane_is_killed() {
    const ACTORS: usize = 30;
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    // Each step of a rollout waits 1.5 s first: a wave of 8 upgrades takes
    // that long, so the test can kill the server between two waves.
    let delay = [("STASIS_FAILPOINT_ROLLOUT_DELAY_MS", "1500")];
    let mut server =
        Server::start_in_env(&data, &["--workers", "2"], &delay).expect("serve starts");
    server.push_module("wc", &guest("wc-1", 0));
    for i in 0..ACTORS {
        let name = format!("k{i:02}");
        create(&server, &name, "wc").await;
        assert_eq!(one_byte(&server, &name).await, 1);
        if i % 2 == 0 {
            pause(&server, &name).await;
        }
    }
    server.push_module("wc", &guest("wc-1", 100));
    let started = server.cli_json(&[
        "template",
        "rollout",
        "wc",
        "--to-version",
        "2",
        "--eager",
        "--no-wait",
    ]);
    assert_eq!(started["state"], "running", "{started}");
    // The second wave has begun waiting once 9..16 steps are logged: the
    // first wave's upgrades are done, the second's not started.
    let waits = "failpoint: rollout step waits";
    wait::until_else("16 rollout steps waiting", Duration::from_secs(20), || {
        let log = server.log();
        if log.matches(waits).count() >= 16 {
            Ok(())
        } else {
            Err(log)
        }
    });
    server.kill();
    let before = occurrences(&server, "rollout upgraded actor");
    assert!(
        (8..ACTORS).contains(&before),
        "killed mid-rollout: {before}"
    );
    let server = Server::start_in(&data, &["--workers", "2"]).expect("restart");
    server.wait_for_log("rollout carried on");
    let status = wait_for_state(&server, "wc", "finished");
    assert_eq!(
        counts(&status),
        (ACTORS as u64, ACTORS as u64, 0, 0),
        "{status}"
    );
    assert_eq!(
        occurrences(&server, "rollout upgraded actor"),
        ACTORS - before,
        "the restarted control plane upgraded the rest, and only the rest"
    );
    for i in 0..ACTORS {
        assert_eq!(one_byte(&server, &format!("k{i:02}")).await, 102);
    }
}

/// The byte actor `actor` answers through replica `i` of `d` (retried
/// while the cluster settles: refused connections and 503s).
async fn cluster_answer(d: &stasis_test_util::cluster::Deployment, i: usize, actor: &str) -> u8 {
    let c = client();
    wait::until_else_async(
        &format!("{actor} to be served through replica {i}"),
        Duration::from_secs(15),
        async || match crate::replicas::try_post(&c, d.replica(i).ingress, actor).await {
            Some((200, body)) if body.len() == 1 => Ok(body.as_bytes()[0]),
            Some((200 | 503, body)) => Err(body),
            None => Err("no answer".to_owned()),
            Some((status, body)) => panic!("{actor}: {status} {body}"),
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rollout_carries_on_after_the_leader_is_killed() {
    const ACTORS: usize = 20;
    let _one = crate::replicas::ONE_CLUSTER.lock().await;
    let mut setup = stasis_test_util::cluster::Setup::new(1, 2, 2);
    setup.lease_ttl = Some(crate::replicas::LEASE_TTL.to_owned());
    setup.echo = crate::replicas::echo();
    // As in the single-process test: each step waits 1.5 s first.
    setup.env = vec![(
        "STASIS_FAILPOINT_ROLLOUT_DELAY_MS".to_owned(),
        "1500".to_owned(),
    )];
    let mut d = stasis_test_util::cluster::Deployment::start(crate::support::STASIS, setup);
    let leader = d.leader();
    let dir = tempfile::tempdir().expect("tempdir");
    for (tag, offset) in [("v1", 0), ("v2", 100)] {
        let path = dir.path().join(format!("wc-{tag}.wasm"));
        std::fs::write(&path, guest("wc-1", offset)).expect("write module");
        if tag == "v2" {
            for i in 0..ACTORS {
                let name = format!("c{i:02}");
                d.cli_json(leader, &["actor", "create", &name, "--template", "wc"]);
                assert_eq!(cluster_answer(&d, leader, &name).await, 1);
                if i % 2 == 0 {
                    d.cli_json(leader, &["actor", "pause", &name]);
                }
            }
        }
        d.cli_ok(
            leader,
            &["template", "push", "wc", path.to_str().expect("utf-8")],
        );
    }
    let started = d.cli_json(
        leader,
        &[
            "template",
            "rollout",
            "wc",
            "--to-version",
            "2",
            "--eager",
            "--no-wait",
        ],
    );
    assert_eq!(started["state"], "running", "{started}");
    let log = |d: &stasis_test_util::cluster::Deployment, i: usize| d.replica(i).process.log();
    wait::until_else("16 rollout steps waiting", Duration::from_secs(30), || {
        let text = log(&d, leader);
        if text.matches("failpoint: rollout step waits").count() >= 16 {
            Ok(())
        } else {
            Err(text)
        }
    });
    d.replicas[leader].as_mut().expect("leader").process.kill();
    let before = log(&d, leader).matches("rollout upgraded actor").count();
    assert!(
        (8..ACTORS).contains(&before),
        "killed mid-rollout: {before}"
    );
    d.replicas[leader] = None;
    let next = d.leader();
    let status = wait::until_else("the rollout to finish", Duration::from_secs(60), || {
        let status = d.cli_json(next, &["template", "rollout-status", "wc"]);
        if status["state"] == "finished" {
            Ok(status)
        } else {
            Err(format!("{status}\n{}", log(&d, next)))
        }
    });
    assert_eq!(
        counts(&status),
        (ACTORS as u64, ACTORS as u64, 0, 0),
        "{status}"
    );
    assert!(log(&d, next).contains("rollout carried on"));
    for i in 0..ACTORS {
        assert_eq!(cluster_answer(&d, next, &format!("c{i:02}")).await, 102);
    }
}
