//! Durability levels (docs/api.md, "Durability") through the real binary:
//! at the default level `request` an answered request survives a trap, a
//! `kill -9` and a restart, and is never applied twice; a torn journal tail
//! is ignored; level `pause` keeps the older rollback to the newest
//! snapshot.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::support::{Server, client, count, to_actor};

/// POSTs `path` to `actor` and returns the answer.
async fn post(server: &Server, actor: &str, path: &str) -> crate::support::Answer {
    to_actor(&client(), server.ingress, actor, "POST", path).await
}

async fn read(server: &Server, actor: &str) -> u64 {
    count(&to_actor(&client(), server.ingress, actor, "GET", "/").await)
}

/// Three acknowledged writes, then a request that traps: the three remain
/// (the actor rolls back to its newest acknowledged state, not to its
/// creation), and they remain after `kill -9` and a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_a_trap_and_kill_nine() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("data");
    let mut server = Server::start_in(&dir, &[]).expect("serve starts");
    server.push("faulty");
    server.create("f", "faulty");
    assert_eq!(
        server.cli_json(&["actor", "get", "f"])["durability"],
        "request"
    );
    for n in 1..=3 {
        assert_eq!(count(&post(&server, "f", "/").await), n);
    }
    let trapped = post(&server, "f", "/trap").await;
    assert_eq!(trapped.status, 500, "{trapped:?}");
    assert_eq!(
        read(&server, "f").await,
        3,
        "a trap undid answered requests"
    );
    // A later write builds on them.
    assert_eq!(count(&post(&server, "f", "/").await), 4);
    server.kill();
    let server = Server::start_in(&dir, &[]).expect("restart");
    assert_eq!(
        read(&server, "f").await,
        4,
        "kill -9 lost answered requests"
    );
    server.wait_for_log("journal replayed");
    assert_eq!(server.cli_json(&["actor", "get", "f"])["state"], "running");
}

/// Level `pause` is what Stasis did before: a trap rolls the actor back
/// to its newest snapshot (here its creation), so answered writes go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_level_pause_a_trap_rolls_back_to_the_newest_snapshot() {
    let server = Server::start(&["--durability", "pause"]);
    server.push("faulty");
    server.create("f", "faulty");
    assert_eq!(
        server.cli_json(&["actor", "get", "f"])["durability"],
        "pause"
    );
    for n in 1..=3 {
        assert_eq!(count(&post(&server, "f", "/").await), n);
    }
    assert_eq!(post(&server, "f", "/trap").await.status, 500);
    assert_eq!(read(&server, "f").await, 0);
    let template = server.cli_json(&["template", "get", "faulty"]);
    assert_eq!(template["durability"], "pause", "{template}");
}

/// A bad level is refused by name, listing the levels.
#[test]
fn an_unknown_level_is_refused_naming_the_levels() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Err(stderr) = Server::start_in(&tmp.path().join("d"), &["--durability", "always"]) else {
        panic!("serve started with --durability always");
    };
    assert!(
        stderr.contains("always") && stderr.contains("request, store, interval or pause"),
        "{stderr}"
    );
}

/// 16 actors, 64 concurrent clients incrementing, `kill -9` at a moment
/// drawn at random, 10 rounds: after each restart every actor's count is
/// at least the highest count it answered (nothing acknowledged lost) and
/// at most the number of increments sent to it (none applied twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_nine_under_load_loses_no_acknowledged_increment() {
    const ACTORS: usize = 16;
    const CLIENTS: usize = 64;
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("data");
    let names: Vec<String> = (0..ACTORS).map(|i| format!("c{i}")).collect();
    let mut acked: HashMap<String, u64> = HashMap::new();
    let mut sent: HashMap<String, u64> = HashMap::new();
    let mut rand = crate::support::xorshift(0x2545_f491_4f6c_dd1d);
    for round in 0..10 {
        let mut server = Server::start_in(&dir, &[]).expect("serve starts");
        if round == 0 {
            server.push("counter");
            for name in &names {
                server.create(name, "counter");
            }
        }
        for name in &names {
            let now = read(&server, name).await;
            let floor = acked.get(name).copied().unwrap_or(0);
            let ceiling = sent.get(name).copied().unwrap_or(0);
            assert!(
                now >= floor,
                "round {round}: {name} is at {now}, but answered {floor}"
            );
            assert!(
                now <= ceiling,
                "round {round}: {name} is at {now}, but only {ceiling} increments were sent"
            );
        }
        // Each client counts what it sends before sending, and records
        // the count each answer reports.
        let attempts: Arc<Vec<AtomicU64>> =
            Arc::new((0..ACTORS).map(|_| AtomicU64::new(0)).collect());
        let answered: Arc<Vec<AtomicU64>> =
            Arc::new((0..ACTORS).map(|_| AtomicU64::new(0)).collect());
        let mut clients = Vec::new();
        for c in 0..CLIENTS {
            let (attempts, answered) = (attempts.clone(), answered.clone());
            let (ingress, names) = (server.ingress, names.clone());
            clients.push(tokio::spawn(async move {
                let http = client();
                let mut i = c;
                loop {
                    let a = i % ACTORS;
                    attempts[a].fetch_add(1, Ordering::SeqCst);
                    let answer = to_actor(&http, ingress, &names[a], "POST", "/").await;
                    if answer.status == 200 {
                        answered[a].fetch_max(count(&answer), Ordering::SeqCst);
                    }
                    i += 7;
                }
            }));
        }
        // sleep: the kill lands at a random point of the load.
        tokio::time::sleep(Duration::from_millis(50 + rand(400))).await;
        server.kill();
        for c in clients {
            c.abort();
            let _ = c.await;
        }
        for (a, name) in names.iter().enumerate() {
            *sent.entry(name.clone()).or_default() += attempts[a].load(Ordering::SeqCst);
            let top = answered[a].load(Ordering::SeqCst);
            let floor = acked.entry(name.clone()).or_default();
            *floor = (*floor).max(top);
        }
    }
    let server = Server::start_in(&dir, &[]).expect("final start");
    let mut total = 0;
    for name in &names {
        let now = read(&server, name).await;
        assert!(now >= acked[name] && now <= sent[name], "{name}: {now}");
        total += acked[name];
    }
    assert!(total > 0, "no increment was answered in 10 rounds");
}

/// A journal whose last record was torn by the crash (a record's head
/// with half its payload, then zeros) starts: the torn record is ignored,
/// every whole one before it applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_journal_tail_is_ignored() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("data");
    let mut server = Server::start_in(&dir, &[]).expect("serve starts");
    server.push("faulty");
    server.create("f", "faulty");
    for n in 1..=3 {
        assert_eq!(count(&post(&server, "f", "/").await), n);
    }
    server.kill();
    let journal = dir.join("journal");
    // The newest segment (`<position>.log`; the folder also holds the
    // next one being zero-filled, `next.spare`).
    let segment = std::fs::read_dir(&journal)
        .expect("journal folder")
        .map(|e| e.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .max()
        .expect("a segment");
    let whole = std::fs::read(&segment).expect("segment");
    assert!(
        whole.len() > 4096,
        "entries were journaled: {}",
        whole.len()
    );
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .expect("open segment");
    // The start of a copy of the last record: the magic, a length and a
    // checksum that the bytes present cannot match.
    file.write_all(&whole[..64]).expect("append");
    file.write_all(&[0u8; 512]).expect("append");
    drop(file);
    let server = Server::start_in(&dir, &[]).expect("restart");
    assert_eq!(read(&server, "f").await, 3);
    server.wait_for_log("torn tail is ignored");
}

/// A template pushed with `--durability` overrides the server's level for
/// its actors (`template get`, `actor get`, and what a trap does); the
/// same module pushed again with another level is the template's next
/// version (its actors keep the level of theirs), and an unknown level is
/// refused before anything is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_overrides_the_servers_level() {
    let server = Server::start(&[]);
    let path = crate::support::demo("faulty");
    let file = path.to_str().expect("utf-8 path");
    server.cli_ok(&["template", "push", "fast", file, "--durability", "pause"]);
    assert_eq!(
        server.cli_json(&["template", "get", "fast"])["durability"],
        "pause"
    );
    server.create("f", "fast");
    assert_eq!(
        server.cli_json(&["actor", "get", "f"])["durability"],
        "pause"
    );
    for n in 1..=2 {
        assert_eq!(count(&post(&server, "f", "/").await), n);
    }
    assert_eq!(post(&server, "f", "/trap").await.status, 500);
    assert_eq!(
        read(&server, "f").await,
        0,
        "level pause rolls back to snapshot 0"
    );
    // The server's default for a template pushed without the flag.
    server.cli_ok(&["template", "push", "kept", file]);
    assert_eq!(
        server.cli_json(&["template", "get", "kept"])["durability"],
        "request"
    );
    server.cli_ok(&["template", "push", "fast", file, "--durability", "request"]);
    let fast = server.cli_json(&["template", "get", "fast"]);
    assert_eq!(
        (fast["version"].clone(), fast["durability"].clone()),
        (2.into(), "request".into()),
        "{fast}"
    );
    assert_eq!(
        server.cli_json(&["actor", "get", "f"])["durability"],
        "pause",
        "f stays on version 1"
    );
    let bad = server.cli(&["template", "push", "other", file, "--durability", "never"]);
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("request, store, interval or pause"),
        "{stderr}"
    );
}

/// `kill -9` while a large chained actor's journal entries are being
/// sealed into its chain and the chain merged (compaction), 10 rounds:
/// every acknowledged write is there after each restart, with its value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_nine_during_compaction_loses_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("data");
    let mut acked: HashMap<String, String> = HashMap::new();
    let mut rand = crate::support::xorshift(0x9e37_79b9_7f4a_7c15);
    for round in 0..10u64 {
        let mut server = Server::start_in(&dir, &[]).expect("serve starts");
        if round == 0 {
            let path = crate::support::demo("kv");
            let file = path.to_str().expect("utf-8 path");
            server.cli_ok(&["template", "push", "kv", file, "--env", "KV_PRELOAD=20000"]);
            server.create("big", "kv");
        }
        let http = client();
        for (key, value) in &acked {
            let answer = to_actor(&http, server.ingress, "big", "GET", &format!("/{key}")).await;
            assert_eq!(answer.status, 200, "round {round}: {key}: {answer:?}");
            assert_eq!(&answer.body, value, "round {round}: {key}");
        }
        let (ingress, admin) = (server.ingress, server.admin_url());
        let deadline = Duration::from_millis(100 + rand(400));
        let work = async {
            let mut i = 0u64;
            loop {
                let (key, value) = (format!("r{round}k{i}"), format!("v{round}-{i}"));
                let answer = crate::support::send(
                    &http,
                    ingress,
                    "PUT",
                    &crate::support::actor_host("big"),
                    &format!("/{key}"),
                    value.clone().into_bytes(),
                )
                .await;
                if matches!(answer.status, 200 | 201) {
                    acked.insert(key, value);
                }
                // Seals (pause, checkpoint) and with them merges.
                let op = ["pause", "checkpoint", "none"][(i % 3) as usize];
                if op != "none" {
                    let req = hyper::Request::post(format!("{admin}/v1/actors/big/{op}"))
                        .body(http_body_util::Full::new(bytes::Bytes::new()))
                        .expect("req");
                    let _ = http.request(req).await;
                }
                i += 1;
            }
        };
        let _ = tokio::time::timeout(deadline, work).await;
        server.kill();
    }
    assert!(
        acked.len() > 10,
        "only {} writes were answered",
        acked.len()
    );
    let server = Server::start_in(&dir, &[]).expect("final start");
    for (key, value) in &acked {
        let answer = to_actor(&client(), server.ingress, "big", "GET", &format!("/{key}")).await;
        assert_eq!(&answer.body, value, "{key}: {answer:?}");
    }
}
