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

/// The file of snapshot `seq` of `actor` in the data dir.
fn snapshot_file(server: &Server, actor: &str, seq: u64) -> Vec<u8> {
    let path = server
        .data_dir
        .join("snapshots")
        .join(actor)
        .join(format!("{seq:020}.snap"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A full snapshot's format version: the demo templates' data segments
/// sit at constant offsets, so their full snapshots are taken on the
/// module's initial image (version 3, `core/src/snapshot/format.rs`).
const FULL: u32 = 3;

/// The format version of snapshot `seq` of `actor` in the data dir.
fn version(server: &Server, actor: &str, seq: u64) -> u32 {
    let bytes = snapshot_file(server, actor, seq);
    u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_small_change_of_a_large_actor_pauses_as_a_small_delta_and_restores_exactly() {
    let server = Server::start(&["--workers", "2"]);
    kv_actor(&server, "kvbig", PRELOAD, "big");
    // The create wrote snapshot 0 in full (on the module's image). The first pause after it is a
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
    assert_eq!(version(&server, "big", 0), FULL);
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

/// The delta depth of snapshot `seq` of `actor` (0 for a full snapshot).
fn depth(server: &Server, actor: &str, seq: u64) -> u32 {
    let bytes = snapshot_file(server, actor, seq);
    let header = stasis_core::snapshot::peek_header(&bytes).expect("a snapshot header");
    header.base.map_or(0, |base| base.depth)
}

#[tokio::test(flavor = "multi_thread")]
async fn chains_are_bounded_and_retention_keeps_their_bases() {
    let server = Server::start(&["--keep-snapshots", "1"]);
    kv_actor(&server, "kvbig", PRELOAD, "big");
    put(&server, "big", "k", "0").await;
    pause(&server, "big");
    let mut depths = Vec::new();
    for round in 1..=10 {
        put(&server, "big", "k", &round.to_string()).await;
        let paused = pause(&server, "big");
        let seq = paused["snapshot"]["seq"].as_u64().expect("seq");
        assert_eq!(version(&server, "big", seq), 2, "a delta: {paused}");
        depths.push(depth(&server, "big", seq));
        // Every file of the newest chain is still there: it restores.
        assert_eq!(get(&server, "big", "k").await, round.to_string());
    }
    // Eight deltas at most on one full snapshot (the first pause before
    // the loop wrote depth 1); then the chain is compacted by merging its
    // deltas into one on the same root (the ninth pause writes depth 1),
    // never by a full snapshot.
    assert_eq!(depths, [2, 3, 4, 5, 6, 7, 8, 1, 2, 3], "{depths:?}");
    // --keep-snapshots 1 kept the newest snapshot's chain, nothing older.
    let list = server.cli_json(&["actor", "get", "big"]);
    let snapshots = list["snapshots"].as_array().expect("snapshots").len();
    let newest_depth = *depths.last().expect("ten pauses") as usize;
    assert_eq!(snapshots, newest_depth + 1, "{list}");
    // gc applies the same retention: it deletes no base of the chain, and
    // the actor still restores from it.
    let gc = server.cli_json(&["gc"]);
    assert_eq!(gc["removed_files"], 0, "{gc}");
    server.cli_ok(&["actor", "resume", "big"]);
    assert_eq!(get(&server, "big", "k").await, "10");
    let files = std::fs::read_dir(server.data_dir.join("snapshots").join("big"))
        .expect("the actor's folder")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".snap"))
        .count();
    assert_eq!(files, snapshots, "files on disk are the listed snapshots");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_small_actor_keeps_writing_full_snapshots() {
    // At level `request` its pauses write its newest journal entry, a
    // delta on any chain (docs/architecture.md, "The worker journal").
    let server = Server::start(&["--durability", "pause"]);
    kv_actor(&server, "kvsmall", "0", "small");
    for round in 0..3 {
        put(&server, "small", "k", &round.to_string()).await;
        let paused = pause(&server, "small");
        let seq = paused["snapshot"]["seq"].as_u64().expect("seq");
        assert_eq!(version(&server, "small", seq), FULL, "{paused}");
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
    assert_eq!(
        version(&server, "big", seq),
        FULL,
        "replicated full: {paused}"
    );
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
        // sleep: the kill lands at a different point of the pause each round.
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

/// The sizes of `actor`'s snapshot files on disk, by sequence number.
fn files_on_disk(server: &Server, actor: &str) -> Vec<(u64, u64)> {
    let dir = server.data_dir.join("snapshots").join(actor);
    let mut files: Vec<(u64, u64)> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let seq = name.strip_suffix(".snap")?.parse().ok()?;
                    Some((seq, e.metadata().ok()?.len()))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort_unstable();
    files
}

/// Flips byte `at` of snapshot `seq` of `actor` in place.
fn flip(server: &Server, actor: &str, seq: u64, at: usize) {
    let path = server
        .data_dir
        .join("snapshots")
        .join(actor)
        .join(format!("{seq:020}.snap"));
    let mut bytes = std::fs::read(&path).expect("snapshot");
    bytes[at] ^= 0x40;
    std::fs::write(&path, bytes).expect("write in place");
}

/// Found by trying to break it: a damaged header of the newest delta made
/// retention (after a pause, and gc) read it as a full snapshot and delete
/// its whole good chain.
#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_newest_delta_never_makes_retention_delete_its_chain() {
    let server = Server::start(&["--keep-snapshots", "1"]);
    kv_actor(&server, "kvbig", PRELOAD, "big");
    for round in 1..=5 {
        put(&server, "big", "k", &format!("v{round}")).await;
        pause(&server, "big");
    }
    let before = files_on_disk(&server, "big");
    assert_eq!(before.len(), 6, "0 full, 1..5 deltas: {before:?}");
    // Its magic, then (a second case) a byte of its header's base field.
    flip(&server, "big", 5, 2);
    let gc = server.cli_json(&["gc"]);
    assert_eq!(gc["removed_files"], 0, "{gc}");
    assert_eq!(files_on_disk(&server, "big"), before);
    let answer = to_actor(&client(), server.ingress, "big", "GET", "/k").await;
    assert_eq!(answer.status, 503, "{answer:?}");
    assert!(answer.body.contains("snapshot 5"), "{answer:?}");
    // Repair from the delta before it: its chain is all there.
    server.cli_ok(&["actor", "resume", "big", "--from-snapshot", "4"]);
    assert_eq!(get(&server, "big", "k").await, "v4");
}

/// Found by trying to break it: a live actor's pause wrote a delta on a
/// chain whose file had been removed or replaced meanwhile (answering 200),
/// and the state was lost. The live instance holds the whole state: the
/// pause writes it as a full snapshot instead.
#[tokio::test(flavor = "multi_thread")]
async fn a_pause_on_a_chain_broken_under_a_live_actor_writes_a_full_snapshot() {
    let server = Server::start(&[]);
    kv_actor(&server, "kvbig", PRELOAD, "big");
    for round in 1..=3 {
        put(&server, "big", "k", &format!("v{round}")).await;
        pause(&server, "big");
    }
    assert_eq!(get(&server, "big", "k").await, "v3", "live again");
    let root = server
        .data_dir
        .join("snapshots/big/00000000000000000000.snap");
    let aside = server.data_dir.join("root-aside.snap");
    std::fs::rename(&root, &aside).expect("move the chain's root away");
    put(&server, "big", "k", "v4").await;
    let paused = pause(&server, "big");
    let seq = paused["snapshot"]["seq"].as_u64().expect("seq");
    assert_eq!(
        version(&server, "big", seq),
        FULL,
        "a full snapshot: {paused}"
    );
    assert_eq!(
        field(&paused, "bytes_written"),
        field(&paused, "snapshot_bytes")
    );
    assert_eq!(get(&server, "big", "k").await, "v4");
    // The same with the base replaced by another valid file (the old
    // root: same module, an older state).
    put(&server, "big", "k", "v5").await;
    pause(&server, "big");
    put(&server, "big", "k", "v6").await;
    let base = server
        .data_dir
        .join(format!("snapshots/big/{seq:020}.snap"));
    // By rename, as stores replace files (a write in place would change
    // the pages the live instance maps).
    std::fs::rename(&aside, &base).expect("replace the base by another valid file");
    let paused = pause(&server, "big");
    let seq = paused["snapshot"]["seq"].as_u64().expect("seq");
    assert_eq!(
        version(&server, "big", seq),
        FULL,
        "a full snapshot: {paused}"
    );
    assert_eq!(get(&server, "big", "k").await, "v6");
}

/// Found by trying to break it: a fork that failed half-way (over the
/// quota) left hard links under the new name, and a later actor of that
/// name served the source's data after a restart. Snapshots left under a
/// new actor's name are never adopted.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_fork_leaves_nothing_a_later_actor_could_adopt() {
    let server = Server::start(&[]);
    kv_actor(&server, "kvbig", PRELOAD, "src");
    put(&server, "src", "k", "secret-of-src").await;
    pause(&server, "src");
    // A delta of some 110 KiB, so a quota can let the root's link through
    // and refuse the delta's.
    put(&server, "src", "big", &"x".repeat(110 << 10)).await;
    pause(&server, "src");
    let files = files_on_disk(&server, "src");
    let used: u64 = files.iter().map(|(_, len)| len).sum();
    let (root, delta) = (files[0].1, files[files.len() - 1].1);
    assert!(delta > 64 << 10, "{files:?}");
    let quota = (used + root + delta / 2).to_string();
    let server = server.restart(&["--snapshot-quota", &quota]);
    let out = server.cli(&["actor", "fork", "src", "dst"]);
    assert!(!out.status.success(), "the fork is over the quota");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--snapshot-quota"), "{stderr}");
    assert_eq!(files_on_disk(&server, "dst"), [], "nothing of dst is left");
    // A file left under a new name by other means is not adopted either.
    let dst = server.data_dir.join("snapshots/dst");
    std::fs::create_dir_all(&dst).expect("dst folder");
    let last = files[files.len() - 2].0;
    std::fs::copy(
        server
            .data_dir
            .join(format!("snapshots/src/{:020}.snap", files[0].0)),
        dst.join(format!("{:020}.snap", last + 5)),
    )
    .expect("plant a stray snapshot");
    server.cli_ok(&["actor", "delete", "src"]);
    server.create("dst", "kvbig");
    let server = server.restart(&[]);
    let answer = to_actor(&client(), server.ingress, "dst", "GET", "/k").await;
    assert_eq!(answer.status, 404, "dst starts fresh: {answer:?}");
}

/// Found by trying to break it: with `--checkpoint-every 1` (at level
/// `pause`: a checkpoint per request) a request whose checkpoint failed (over the quota) still answered 200, and a
/// kill -9 then lost it. Now it is undone and answers the quota's 507.
#[tokio::test(flavor = "multi_thread")]
async fn with_checkpoint_every_1_a_request_whose_checkpoint_fails_is_undone() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("data");
    let args = [
        "--durability",
        "pause",
        "--checkpoint-every",
        "1",
        "--keep-snapshots",
        "1",
        "--snapshot-quota",
        "3MiB",
    ];
    let mut server = Server::start_in(&dir, &args).expect("serve");
    kv_actor(&server, "kvbig", PRELOAD, "big");
    let host = "big.actors.localhost";
    let mut acknowledged = None;
    for round in 1..=3 {
        let value = format!("v{round}");
        let answer = send(
            &client(),
            server.ingress,
            "PUT",
            host,
            "/k",
            value.as_bytes().to_vec(),
        )
        .await;
        assert!(matches!(answer.status, 200 | 201), "{answer:?}");
        acknowledged = Some(value);
    }
    // A 2 MiB value changes more than half the actor's pages: its
    // checkpoint is a full snapshot, and two do not fit in 3 MiB.
    let big = "x".repeat(2 << 20);
    let refused = send(
        &client(),
        server.ingress,
        "PUT",
        host,
        "/k",
        big.into_bytes(),
    )
    .await;
    assert_eq!(refused.status, 507, "{refused:?}");
    assert!(
        refused.body.contains("undone") && refused.body.contains("--snapshot-quota"),
        "{refused:?}"
    );
    let acknowledged = acknowledged.expect("some requests fit");
    // The refused PUT was not applied.
    assert_eq!(get(&server, "big", "k").await, acknowledged);
    // What survives a kill -9 is every acknowledged PUT, and nothing else.
    server.kill();
    let server = Server::start_in(&dir, &[]).expect("restart after kill -9");
    assert_eq!(get(&server, "big", "k").await, acknowledged);
}

/// Found by a new user: the docs left open whether a checkpoint with no
/// change writes. It does (a checkpoint is asked for a new snapshot): an
/// empty delta, one page, whose `bytes_written` says so; a pause then
/// writes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_checkpoint_with_nothing_changed_writes_an_empty_delta_and_a_pause_nothing() {
    let server = Server::start(&[]);
    kv_actor(&server, "kvbig", PRELOAD, "big");
    put(&server, "big", "k", "v").await;
    let first = server.cli_json(&["actor", "checkpoint", "big"]);
    let again = server.cli_json(&["actor", "checkpoint", "big"]);
    let (seq1, seq2) = (
        first["snapshot"]["seq"].as_u64().expect("seq"),
        again["snapshot"]["seq"].as_u64().expect("seq"),
    );
    assert_eq!(seq2, seq1 + 1, "{again}");
    assert_eq!(version(&server, "big", seq2), 2);
    assert_eq!(field(&again, "bytes_written"), 4096 + 4, "{again}");
    let paused = pause(&server, "big");
    assert_eq!(field(&paused, "bytes_written"), 0, "{paused}");
    assert_eq!(get(&server, "big", "k").await, "v");
}
