//! `stasis actor fork` through the real binary: forks of paused and
//! running actors diverge, `--from-snapshot` picks an older state, the
//! snapshot file is shared (one inode) in the data dir, either actor
//! outlives the other, host randomness differs between forks, the error
//! codes, and a fork in cluster mode (etcd directory, S3 snapshots).

use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;

use serde_json::{Value, json};
use stasis_test_util::admin;

use crate::replicas::{ONE_CLUSTER, deployment, served};
use crate::support::{Server, client, count, post, to_actor};

/// `stasis actor fork SRC NEW [ARGS...] -o json`.
fn fork(server: &Server, src: &str, new: &str, args: &[&str]) -> Value {
    let mut all = vec!["actor", "fork", src, new];
    all.extend_from_slice(args);
    server.cli_json(&all)
}

/// POSTs to `actor` `n` times; the last count.
async fn post_n(server: &Server, actor: &str, n: usize) -> u64 {
    let mut last = 0;
    for _ in 0..n {
        last = count(&post(server, actor).await);
    }
    last
}

/// The data dir's file of snapshot `seq` of `actor`.
fn snapshot_file(server: &Server, actor: &str, seq: u64) -> PathBuf {
    server
        .data_dir
        .join("snapshots")
        .join(actor)
        .join(format!("{seq:020}.snap"))
}

/// The newest snapshot's sequence number in an actor's JSON.
fn newest(actor: &Value) -> u64 {
    actor["snapshot"]["seq"]
        .as_u64()
        .unwrap_or_else(|| panic!("no snapshot in {actor}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn fork_of_paused_and_running_counters_starts_at_the_source_then_diverges() {
    let server = Server::start(&[]);
    server.push("counter");
    server.create("c1", "counter");
    assert_eq!(post_n(&server, "c1", 3).await, 3);
    let paused = server.cli_json(&["actor", "pause", "c1"]);
    let seq = newest(&paused);

    // A paused source: no instance needed, the newest snapshot is shared.
    let c2 = fork(&server, "c1", "c2", &[]);
    assert_eq!(c2["name"], "c2");
    assert_eq!(c2["template"], "counter");
    assert_eq!(c2["state"], "paused");
    assert_eq!(newest(&c2), seq, "the fork keeps the sequence number");
    let (a, b) = (
        snapshot_file(&server, "c1", seq).metadata().unwrap(),
        snapshot_file(&server, "c2", seq).metadata().unwrap(),
    );
    assert_eq!(a.ino(), b.ino(), "one inode for both actors");
    assert!(a.nlink() >= 2, "nlink {}", a.nlink());
    // The answer has the shape of `actor get`.
    let got = server.cli_json(&["actor", "get", "c2"]);
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&c2), keys(&got));

    assert_eq!(count(&post(&server, "c2").await), 4);
    assert_eq!(post_n(&server, "c1", 3).await, 6);
    assert_eq!(count(&post(&server, "c2").await), 5, "c2 diverged from c1");

    // A running source is checkpointed first: the fork has its latest count.
    let c1 = server.cli_json(&["actor", "get", "c1"]);
    assert_eq!(c1["state"], "running");
    let c3 = fork(&server, "c1", "c3", &[]);
    assert!(newest(&c3) > seq, "a new checkpoint: {c3}");
    assert_eq!(server.cli_json(&["actor", "get", "c1"])["state"], "running");
    assert_eq!(count(&post(&server, "c3").await), 7);
    assert_eq!(count(&post(&server, "c1").await), 7);
    assert_eq!(count(&post(&server, "c3").await), 8);
    assert_eq!(count(&post(&server, "c2").await), 6);
    let list = server.cli_json(&["actor", "list"]);
    assert_eq!(list.as_array().map(Vec::len), Some(3));
}

#[tokio::test(flavor = "multi_thread")]
async fn fork_from_snapshot_picks_the_older_state() {
    let server = Server::start(&["--keep-snapshots", "5"]);
    server.push("counter");
    server.create("c1", "counter");
    post_n(&server, "c1", 2).await;
    let older = newest(&server.cli_json(&["actor", "checkpoint", "c1"]));
    post_n(&server, "c1", 3).await;
    let newer = newest(&server.cli_json(&["actor", "checkpoint", "c1"]));
    assert!(newer > older);
    let old = fork(
        &server,
        "c1",
        "old",
        &["--from-snapshot", &older.to_string()],
    );
    assert_eq!(newest(&old), older);
    assert_eq!(count(&post(&server, "old").await), 3, "from the count of 2");
    let new = fork(
        &server,
        "c1",
        "new",
        &["--from-snapshot", &newer.to_string()],
    );
    assert_eq!(newest(&new), newer);
    assert_eq!(count(&post(&server, "new").await), 6, "from the count of 5");
    assert_eq!(count(&post(&server, "c1").await), 6);
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_either_side_of_a_fork_keeps_the_other() {
    let server = Server::start(&[]);
    server.push("counter");
    server.create("c1", "counter");
    post_n(&server, "c1", 2).await;
    let seq = newest(&fork(&server, "c1", "c2", &[]));
    server.cli_ok(&["actor", "delete", "c1"]);
    let kept = snapshot_file(&server, "c2", seq).metadata().unwrap();
    assert_eq!(
        kept.nlink(),
        1,
        "the source's name is gone, the inode stays"
    );
    assert_eq!(count(&post(&server, "c2").await), 3);
    // The reverse: the fork's source (c2) deleted, its fork (c3) lives on,
    // across a restart too.
    fork(&server, "c2", "c3", &[]);
    server.cli_ok(&["actor", "delete", "c2"]);
    assert_eq!(count(&post(&server, "c3").await), 4);
    let server = server.restart(&[]);
    assert_eq!(count(&post(&server, "c3").await), 5);
    // The name is free again: a new c1 is a fresh counter.
    server.create("c1", "counter");
    assert_eq!(count(&post(&server, "c1").await), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn forks_draw_different_host_randomness() {
    let server = Server::start(&[]);
    server.push("faulty");
    server.create("f1", "faulty");
    let c = client();
    let random = |actor: &'static str| {
        let c = c.clone();
        let addr = server.ingress;
        async move {
            let answer = to_actor(&c, addr, actor, "GET", "/random").await;
            assert_eq!(answer.status, 200, "{answer:?}");
            let hex = answer.body.trim().to_owned();
            assert_eq!(hex.len(), 32, "{hex:?}");
            assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{hex:?}");
            hex
        }
    };
    random("f1").await;
    server.cli_json(&["actor", "pause", "f1"]);
    // Two forks of one snapshot, and the source restored from it.
    fork(&server, "f1", "f2", &[]);
    fork(&server, "f1", "f3", &[]);
    let drawn = [
        random("f1").await,
        random("f2").await,
        random("f3").await,
        random("f2").await,
    ];
    for (i, a) in drawn.iter().enumerate() {
        for b in &drawn[i + 1..] {
            assert_ne!(a, b, "random bytes repeat: {drawn:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn fork_answers_the_codes_of_create() {
    let server = Server::start(&[]);
    server.push("counter");
    server.create("c1", "counter");
    server.create("c2", "counter");
    let c = client();
    let status = |path: &str, body: Value| {
        let (c, addr, path) = (c.clone(), server.admin, path.to_owned());
        async move { admin::call(&c, addr, "POST", &path, Some(&body)).await }
    };
    let fork_c1 = "/v1/actors/c1/fork";
    let created = status(fork_c1, json!({"name": "c3"})).await;
    assert_eq!(created.status, 201, "{}", created.text());
    assert_eq!(created.json()["name"], "c3");
    for (path, body, expected) in [
        ("/v1/actors/nope/fork", json!({"name": "c4"}), 404),
        (fork_c1, json!({"name": "c4", "from_snapshot": 99}), 404),
        (fork_c1, json!({"name": "c2"}), 409),
        (fork_c1, json!({"name": "c1"}), 409),
        (fork_c1, json!({"name": "Bad_Name"}), 400),
        (fork_c1, json!({"name": "c4", "from": 1}), 400),
        (fork_c1, json!({}), 400),
    ] {
        let reply = status(path, body.clone()).await;
        assert_eq!(reply.status, expected, "{path} {body}: {}", reply.text());
        assert!(reply.json()["error"].is_string(), "{}", reply.text());
    }
    let names: Vec<Value> = server
        .cli_json(&["actor", "list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].clone())
        .collect();
    assert_eq!(names, [json!("c1"), json!("c2"), json!("c3")], "no c4");
    assert!(!server.data_dir.join("snapshots/c4").exists());
    // The CLI says what failed and exits non-zero.
    let out = server.cli(&["actor", "fork", "c1", "c2"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("actor fork c1 c2"), "{stderr}");
    assert!(stderr.contains("already exists"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn fork_works_across_the_object_store_in_cluster_mode() {
    let _one = ONE_CLUSTER.lock().await;
    let d = deployment(1, 1, 2, &[]);
    d.push_counter(0);
    d.cli_json(0, &["actor", "create", "c1", "--template", "counter"]);
    for expected in 1..=3 {
        assert_eq!(served(&d, 0, "c1").await, expected);
    }
    // A running source on a worker: checkpointed there, copied in the store.
    let c2 = d.cli_json(0, &["actor", "fork", "c1", "c2"]);
    assert_eq!(c2["name"], "c2");
    assert_eq!(served(&d, 0, "c2").await, 4);
    assert_eq!(served(&d, 0, "c1").await, 4);
    assert_eq!(served(&d, 0, "c2").await, 5);
    // Paused, then deleted: the fork keeps its own object.
    d.cli_json(0, &["actor", "pause", "c1"]);
    d.cli_json(0, &["actor", "fork", "c1", "c3"]);
    d.cli_ok(0, &["actor", "delete", "c1"]);
    assert_eq!(served(&d, 0, "c3").await, 5);
    assert_eq!(served(&d, 0, "c2").await, 6);
    let reply = d.cli(0, &["actor", "fork", "c1", "c4"]);
    assert!(!reply.status.success(), "c1 is gone");
}
