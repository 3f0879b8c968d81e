//! Creates through the worker journal (issue 29, item 5) through the real
//! binary: at level `request` (the default) a new actor's snapshot 0 is a
//! journal entry, durable before the create's 201, and no file yet. Every
//! actor answered 201 is there after `kill -9` and a restart, in its
//! initial state (the start-up replay writes its snapshot 0 to the store);
//! an actor deleted before the kill stays deleted; a created actor can be
//! paused, checkpointed, forked, resumed from snapshot 0 and moved at once,
//! running or parked by `--max-live`; listings show its snapshot 0.

use std::path::Path;

use stasis_test_util::admin;

use crate::support::{Server, client, count, to_actor};

/// `snapshots/<actor>/` of the data dir `dir`: the actor's snapshot files.
fn snapshot_file(dir: &Path, actor: &str, seq: u64) -> std::path::PathBuf {
    dir.join(format!("snapshots/{actor}/{seq:020}.snap"))
}

async fn read(server: &Server, actor: &str) -> u64 {
    let answer = to_actor(&client(), server.ingress, actor, "GET", "/").await;
    assert_eq!(answer.status, 200, "{actor}: {answer:?}");
    count(&answer)
}

async fn post(server: &Server, actor: &str) -> u64 {
    let answer = to_actor(&client(), server.ingress, actor, "POST", "/").await;
    assert_eq!(answer.status, 200, "{actor}: {answer:?}");
    count(&answer)
}

/// Creates `names` from `template` over the admin API, all at once (so
/// their journal entries share group commits); asserts each is 201 and
/// returns the state each answer gave.
async fn create_all(server: &Server, names: &[String], template: &str) -> Vec<String> {
    let http = client();
    let creates: Vec<_> = names
        .iter()
        .map(|name| {
            let (http, admin, name) = (http.clone(), server.admin, name.clone());
            let template = template.to_owned();
            tokio::spawn(async move { admin::create_actor(&http, admin, &name, &template).await })
        })
        .collect();
    let mut states = Vec::new();
    for (name, create) in names.iter().zip(creates) {
        let reply = create.await.expect("create task");
        assert_eq!(
            reply.status,
            201,
            "{name}: {}",
            String::from_utf8_lossy(&reply.body)
        );
        let created: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
        states.push(created["state"].as_str().expect("state").to_owned());
    }
    states
}

/// 24 actors created at once, then `kill -9` right after their 201s: no
/// file was written for them (snapshot 0 is in the journal), and after a
/// restart every one exists, answers its initial count, and has its
/// snapshot 0 in the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_actors_survive_kill_nine_right_after_their_201s() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("data");
    let mut server = Server::start_in(&dir, &[]).expect("serve starts");
    server.push("counter");
    let names: Vec<String> = (0..24).map(|i| format!("new-{i}")).collect();
    let states = create_all(&server, &names, "counter").await;
    assert!(states.iter().all(|s| s == "running"), "{states:?}");
    let listed = server.cli_json(&["actor", "get", "new-0"]);
    assert_eq!(listed["durability"], "request", "{listed}");
    assert_eq!(listed["snapshot"]["seq"], 0, "{listed}");
    assert_eq!(
        listed["snapshots"].as_array().map(Vec::len),
        Some(1),
        "snapshot 0 is listed while it is in the journal: {listed}"
    );
    // Far below a journal segment: no segment rolled, so nothing asked the
    // actors to write their entries to the store.
    for name in &names {
        assert!(
            !snapshot_file(&dir, name, 0).exists(),
            "{name}: snapshot 0 was written as a file, not journaled"
        );
    }
    server.kill();
    let server = Server::start_in(&dir, &[]).expect("restart");
    for name in &names {
        assert!(
            snapshot_file(&dir, name, 0).exists(),
            "{name}: not replayed"
        );
        assert_eq!(read(&server, name).await, 0, "{name}");
    }
    server.wait_for_log("journal replayed");
    let listed = server.cli_json(&["actor", "list"]);
    assert_eq!(
        listed.as_array().map(Vec::len),
        Some(names.len()),
        "{listed}"
    );
    // They work on from there.
    assert_eq!(post(&server, "new-7").await, 1);
}

/// An actor created and deleted before `kill -9` does not come back after
/// the restart (its delete's forget is durable before the 204), and one
/// created, deleted and created again comes back once, as the new actor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_then_deleted_actor_stays_deleted_after_kill_nine() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("data");
    let mut server = Server::start_in(&dir, &[]).expect("serve starts");
    server.push("counter");
    server.push("kv");
    for name in ["kept", "gone", "again"] {
        server.create(name, "counter");
    }
    server.cli_ok(&["actor", "delete", "gone"]);
    server.cli_ok(&["actor", "delete", "again"]);
    // The same name, another template: which one came back is visible.
    server.create("again", "kv");
    server.kill();
    let server = Server::start_in(&dir, &[]).expect("restart");
    let gone = server.cli(&["actor", "get", "gone"]);
    assert!(!gone.status.success(), "a deleted actor came back");
    assert!(
        !dir.join("snapshots/gone").exists(),
        "the deleted actor's snapshot 0 was replayed into the store"
    );
    assert_eq!(read(&server, "kept").await, 0);
    assert_eq!(
        server.cli_json(&["actor", "get", "again"])["template"],
        "kv"
    );
    let keys = to_actor(&client(), server.ingress, "again", "GET", "/").await;
    assert_eq!(
        keys.status, 200,
        "the re-created kv actor answers: {keys:?}"
    );
    // The name can be taken again.
    server.create("gone", "counter");
    assert_eq!(read(&server, "gone").await, 0);
}

/// Creates `name` from `counter`; checks that the answer's state is
/// `state` and that its snapshot 0 is listed, and journaled: no file.
fn create_journaled(server: &Server, name: &str, state: &str) {
    let created = server.create(name, "counter");
    assert_eq!(created["state"], state, "{created}");
    assert_eq!(created["snapshot"]["seq"], 0, "{created}");
    assert_eq!(created["snapshots"][0]["seq"], 0, "{created}");
    assert!(
        !snapshot_file(&server.data_dir, name, 0).exists(),
        "{name}: snapshot 0 was written as a file, not journaled"
    );
}

/// What each of [`operations`] is done to: one fresh actor per name.
const OPERATIONS: [&str; 6] = ["pause", "checkpoint", "fork", "fork0", "resume0", "move"];

/// The operations of [`OPERATIONS`], each on actor `<prefix>-<op>`, whose
/// snapshot 0 is still only a journal entry (`parked`: the actor has no
/// instance, a full `--max-live` left it paused at its create).
async fn operations(server: &Server, prefix: &str, parked: bool) {
    let actor = |op: &str| format!("{prefix}-{op}");

    let a = actor("pause");
    let paused = server.cli_json(&["actor", "pause", &a]);
    assert_eq!(paused["snapshot"]["seq"], 0, "{paused}");
    assert_eq!(paused["state"], "paused", "{paused}");
    // A live one is written to the store at its pause; one already paused
    // is left as it is (its snapshot 0 is durable in the journal), and
    // its pause writes nothing.
    let written = snapshot_file(&server.data_dir, &a, 0).exists();
    assert_eq!(written, !parked, "{a}: {paused}");
    if parked {
        assert_eq!(paused["bytes_written"], 0, "{paused}");
    }
    // Its first request writes it to the store first, and builds on it.
    assert_eq!(post(server, &a).await, 1, "{a}");
    assert!(snapshot_file(&server.data_dir, &a, 0).exists(), "{a}");

    let a = actor("checkpoint");
    let checkpoint = server.cli_json(&["actor", "checkpoint", &a]);
    assert_eq!(checkpoint["snapshot"]["seq"], 0, "{checkpoint}");
    assert!(snapshot_file(&server.data_dir, &a, 0).exists(), "{a}");
    assert_eq!(post(server, &a).await, 1, "{a}");

    let a = actor("fork");
    let copy = format!("{a}-copy");
    server.cli_ok(&["actor", "fork", &a, &copy]);
    assert_eq!(read(server, &copy).await, 0, "{copy}");
    assert_eq!(post(server, &a).await, 1, "{a}");

    let a = actor("fork0");
    let copy = format!("{a}-copy");
    server.cli_ok(&["actor", "fork", &a, &copy, "--from-snapshot", "0"]);
    assert_eq!(read(server, &copy).await, 0, "{copy}");

    let a = actor("resume0");
    server.cli_ok(&["actor", "resume", &a, "--from-snapshot", "0"]);
    assert_eq!(post(server, &a).await, 1, "{a}");

    let a = actor("move");
    let to = if server.worker_of(&a) == "worker-1" {
        "worker-2"
    } else {
        "worker-1"
    };
    server.cli_ok(&["actor", "migrate", &a, "--to", to]);
    assert_eq!(server.worker_of(&a), to);
    assert_eq!(post(server, &a).await, 1, "{a}");
}

/// Right after their creates, with snapshot 0 still a journal entry, on
/// running actors: pause, checkpoint, fork (from the newest and from
/// snapshot 0), resume from snapshot 0, a first request and a move all
/// work; a trap in the first request rolls back to snapshot 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_actor_can_be_paused_forked_resumed_and_moved_at_once() {
    let server = Server::start(&["--workers", "2"]);
    server.push("counter");
    server.push("faulty");
    for op in OPERATIONS {
        create_journaled(&server, &format!("run-{op}"), "running");
    }
    operations(&server, "run", false).await;
    server.create("trap", "faulty");
    let trapped = to_actor(&client(), server.ingress, "trap", "POST", "/trap").await;
    assert_eq!(trapped.status, 500, "{trapped:?}");
    assert_eq!(read(&server, "trap").await, 0);
    assert_eq!(post(&server, "trap").await, 1);
}

/// The same operations on actors that a full `--max-live` left paused at
/// their create (no instance, snapshot 0 only in the journal), and two
/// such actors untouched until `kill -9` come back after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_left_paused_by_max_live_can_be_paused_forked_resumed_and_moved() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("data");
    // `--max-live 64` keeps one slot free: a create that finds only that
    // one free leaves its actor paused. 63 running per worker (placement
    // goes by actor count), created one after the other.
    let flags = ["--workers", "2", "--max-live", "64"];
    let mut server = Server::start_in(&dir, &flags).expect("serve starts");
    server.push("counter");
    let http = client();
    for i in 0..126 {
        let reply = admin::create_actor(&http, server.admin, &format!("hog-{i}"), "counter").await;
        assert_eq!(reply.status, 201, "{reply:?}");
    }
    for op in OPERATIONS {
        create_journaled(&server, &format!("parked-{op}"), "paused");
    }
    for idle in ["idle-1", "idle-2"] {
        create_journaled(&server, idle, "paused");
    }
    operations(&server, "parked", true).await;
    server.kill();
    let server = Server::start_in(&dir, &flags).expect("restart");
    for idle in ["idle-1", "idle-2"] {
        assert_eq!(read(&server, idle).await, 0, "{idle}");
    }
    assert_eq!(read(&server, "parked-fork-copy").await, 0);
    assert_eq!(read(&server, "parked-move").await, 1);
}
