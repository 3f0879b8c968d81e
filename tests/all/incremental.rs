//! Incremental snapshots through the real binary: a pause after a small
//! change of a large actor writes a small delta (`bytes_written`), the
//! chain restores exactly after a resume, a restart and a move between
//! workers, an unchanged pause writes nothing, the data dir keeps every
//! base retention needs, and a small actor keeps writing full snapshots.

use serde_json::Value;

use crate::support::{RemoteWorker, Server, client, demo, send, to_actor};

/// Keys the `kv` template starts with: about 2.4 MiB of linear memory,
/// above the 1 MiB full snapshot a chain needs.
const PRELOAD: &str = "20000";

/// `server` with `kv` pushed under `template` with `KV_PRELOAD=preload`,
/// and actor `actor` created from it.
fn kv_actor(server: &Server, template: &str, preload: &str, actor: &str) {
    let path = demo("kv");
    let env = format!("KV_PRELOAD={preload}");
    server.cli_ok(&[
        "template",
        "push",
        template,
        path.to_str().expect("utf-8 path"),
        "--env",
        &env,
    ]);
    server.create(actor, template);
}

async fn put(server: &Server, actor: &str, key: &str, value: &str) {
    let host = format!("{actor}.actors.localhost");
    let answer = send(
        &client(),
        server.ingress,
        "PUT",
        &host,
        &format!("/{key}"),
        value.as_bytes().to_vec(),
    )
    .await;
    assert!(matches!(answer.status, 200 | 201), "PUT {key}: {answer:?}");
}

async fn get(server: &Server, actor: &str, key: &str) -> String {
    let answer = to_actor(&client(), server.ingress, actor, "GET", &format!("/{key}")).await;
    assert_eq!(answer.status, 200, "GET {key}: {answer:?}");
    answer.body
}

fn pause(server: &Server, actor: &str) -> Value {
    server.cli_json(&["actor", "pause", actor])
}

fn field(v: &Value, name: &str) -> u64 {
    v[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {name} in {v}"))
}

/// The format version of snapshot `seq` of `actor` in the data dir.
fn version(server: &Server, actor: &str, seq: u64) -> u32 {
    let path = server
        .data_dir
        .join("snapshots")
        .join(actor)
        .join(format!("{seq:020}.snap"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_small_change_of_a_large_actor_pauses_as_a_small_delta_and_restores_exactly() {
    let server = Server::start(&["--workers", "2"]);
    kv_actor(&server, "kvbig", PRELOAD, "big");
    // The create wrote snapshot 0 in full. The first pause after it is a
    // delta already: the preload's pages were all written since the
    // instance was made, but hold what snapshot 0 holds.
    put(&server, "big", "k0", "zero").await;
    let first = pause(&server, "big");
    let snapshots = first["snapshots"].as_array().expect("snapshots");
    assert_eq!(snapshots[0]["seq"], 0, "{first}");
    let full_bytes = snapshots[0]["bytes"].as_u64().expect("bytes");
    assert!(
        full_bytes > 1 << 20,
        "a full snapshot 0 over 1 MiB: {first}"
    );
    assert_eq!(version(&server, "big", 0), 1);
    assert_eq!(version(&server, "big", 1), 2, "{first}");
    assert!(field(&first, "bytes_written") * 50 <= full_bytes, "{first}");
    assert_eq!(
        field(&first, "bytes_written"),
        field(&first, "snapshot_bytes")
    );
    let memory = {
        assert_eq!(get(&server, "big", "k0").await, "zero");
        field(&server.cli_json(&["actor", "get", "big"]), "memory_bytes")
    };
    let mut values = vec![("k0".to_owned(), "zero".to_owned())];
    let mut written = Vec::new();
    for round in 1..=4 {
        let (key, value) = (format!("k{round}"), format!("value {round}"));
        put(&server, "big", &key, &value).await;
        values.push((key, value));
        let paused = pause(&server, "big");
        let seq = paused["snapshot"]["seq"].as_u64().expect("seq");
        let written_now = field(&paused, "bytes_written");
        written.push(written_now);
        assert!(
            written_now * 50 <= memory,
            "round {round}: pause wrote {written_now} bytes of a {memory}-byte memory: {paused}"
        );
        assert_eq!(written_now, field(&paused, "snapshot_bytes"));
        assert_eq!(version(&server, "big", seq), 2, "snapshot {seq} is a delta");
        for (key, value) in &values {
            assert_eq!(&get(&server, "big", key).await, value, "round {round}");
        }
    }
    // Resumed and paused with no request in between: nothing written,
    // though the resume copied the deltas' pages in (they are compared
    // with the chain's files, not counted as changes).
    let after_reads = pause(&server, "big");
    assert!(
        field(&after_reads, "bytes_written") * 50 <= memory,
        "{after_reads}"
    );
    server.cli_ok(&["actor", "resume", "big"]);
    let again = pause(&server, "big");
    assert_eq!(field(&again, "bytes_written"), 0, "{again}");
    // Deltas do not grow along the chain: each holds what its round
    // changed, not the earlier deltas' pages again.
    assert!(
        written[3] <= written[0] + 4096,
        "deltas grew along the chain: {written:?}"
    );

    // A move to the other worker (same store) restores the chain there.
    let from = server.cli_json(&["actor", "get", "big"])["worker"]
        .as_str()
        .expect("worker")
        .to_owned();
    let to = if from == "worker-1" {
        "worker-2"
    } else {
        "worker-1"
    };
    server.cli_ok(&["actor", "migrate", "big", "--to", to]);
    for (key, value) in &values {
        assert_eq!(&get(&server, "big", key).await, value, "after the move");
    }

    // A restart: the new process reads (and checksums) the chain from disk.
    let server = server.restart(&["--workers", "2"]);
    for (key, value) in &values {
        assert_eq!(&get(&server, "big", key).await, value, "after a restart");
    }
    // A delta on the chain the earlier process wrote. (A key before
    // every other splits B-tree nodes: some 30 pages, more than a round.)
    put(&server, "big", "after", "restart").await;
    let paused = pause(&server, "big");
    let seq = paused["snapshot"]["seq"].as_u64().expect("seq");
    assert_eq!(version(&server, "big", seq), 2, "{paused}");
    assert!(
        field(&paused, "bytes_written") * 10 <= full_bytes,
        "{paused}"
    );
    assert_eq!(get(&server, "big", "after").await, "restart");
}

#[tokio::test(flavor = "multi_thread")]
async fn chains_are_bounded_and_retention_keeps_their_bases() {
    let server = Server::start(&["--keep-snapshots", "1"]);
    kv_actor(&server, "kvbig", PRELOAD, "big");
    put(&server, "big", "k", "0").await;
    pause(&server, "big");
    let mut versions = Vec::new();
    for round in 1..=10 {
        put(&server, "big", "k", &round.to_string()).await;
        let paused = pause(&server, "big");
        let seq = paused["snapshot"]["seq"].as_u64().expect("seq");
        versions.push(version(&server, "big", seq));
        // Every file of the newest chain is still there: it restores.
        assert_eq!(get(&server, "big", "k").await, round.to_string());
    }
    // Eight deltas at most on one full snapshot, then a full one again.
    let deltas_in_a_row = versions
        .split(|v| *v == 1)
        .map(<[u32]>::len)
        .max()
        .unwrap_or(0);
    assert!(deltas_in_a_row <= 8, "{versions:?}");
    assert!(
        versions.contains(&1) && versions.contains(&2),
        "{versions:?}"
    );
    // --keep-snapshots 1 kept the newest snapshot's chain, nothing older.
    let list = server.cli_json(&["actor", "get", "big"]);
    let snapshots = list["snapshots"].as_array().expect("snapshots").len();
    let newest_depth = versions.iter().rev().take_while(|v| **v == 2).count();
    assert_eq!(snapshots, newest_depth + 1, "{list}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_small_actor_keeps_writing_full_snapshots() {
    let server = Server::start(&[]);
    kv_actor(&server, "kvsmall", "0", "small");
    for round in 0..3 {
        put(&server, "small", "k", &round.to_string()).await;
        let paused = pause(&server, "small");
        let seq = paused["snapshot"]["seq"].as_u64().expect("seq");
        assert_eq!(version(&server, "small", seq), 1, "{paused}");
        assert_eq!(
            field(&paused, "bytes_written"),
            field(&paused, "snapshot_bytes")
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chained_actor_moves_to_a_worker_with_its_own_store_as_one_full_snapshot() {
    let server = Server::start(&["--workers", "1"]);
    kv_actor(&server, "kvbig", PRELOAD, "big");
    let mut values = Vec::new();
    for round in 0..3 {
        let (key, value) = (format!("k{round}"), format!("value {round}"));
        put(&server, "big", &key, &value).await;
        values.push((key, value));
        let paused = pause(&server, "big");
        let seq = paused["snapshot"]["seq"].as_u64().expect("seq");
        assert_eq!(version(&server, "big", seq), 2, "round {round}: {paused}");
    }
    // The remote worker keeps its own data dir: the control plane ships
    // the chain flattened, and the worker replicates full snapshots back.
    let remote = RemoteWorker::start(&server, "w-far", &[]);
    server.cli_ok(&["actor", "migrate", "big", "--to", &remote.name]);
    assert_eq!(server.worker_of("big"), remote.name);
    for (key, value) in &values {
        assert_eq!(&get(&server, "big", key).await, value, "after the move");
    }
    put(&server, "big", "far", "away").await;
    let paused = pause(&server, "big");
    let seq = paused["snapshot"]["seq"].as_u64().expect("seq");
    assert_eq!(version(&server, "big", seq), 1, "replicated full: {paused}");
    assert_eq!(get(&server, "big", "far").await, "away");
    for (key, value) in &values {
        assert_eq!(&get(&server, "big", key).await, value, "after the resume");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_during_pauses_of_a_chained_actor_leaves_a_restorable_state() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("data");
    let mut server = Server::start_in(&dir, &[]).expect("serve");
    kv_actor(&server, "kvbig", PRELOAD, "big");
    put(&server, "big", "k", "0").await;
    pause(&server, "big");
    let mut durable = 0u32;
    for round in 1..=6u32 {
        put(&server, "big", "k", &round.to_string()).await;
        // The pause (a delta) is killed somewhere between its start and a
        // little after its answer.
        let pausing = server.cli_in_background(&["actor", "pause", "big", "-o", "json"]);
        tokio::time::sleep(std::time::Duration::from_micros(u64::from(round) * 700)).await;
        server.kill();
        let answered = pausing.await.expect("cli").status.success();
        server = Server::start_in(&dir, &[]).expect("restart after kill -9");
        let value: u32 = get(&server, "big", "k").await.parse().expect("a number");
        // The newest snapshot is the old state or the new one, never
        // anything else, and an answered pause was durable.
        assert!(
            value == durable || value == round,
            "round {round}: read {value}, durable was {durable}"
        );
        assert!(
            !answered || value == round,
            "round {round}: answered but lost"
        );
        durable = value;
        let state = server.cli_json(&["actor", "get", "big"]);
        assert_ne!(state["state"], "failed", "{state}");
    }
}
