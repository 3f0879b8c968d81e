//! Issue 30, item 7: a snapshot file changed under a copy-on-write mapping
//! (docs/operations.md, "Snapshot files are Stasis's"). A kv actor with
//! 20 000 preloaded keys is paused and resumed, so its memory is mapped
//! from its snapshot files; then they are truncated, overwritten in place,
//! or replaced by a rename. `stasis serve` keeps running, the actor fails
//! with the reason (and writes no snapshot) until it is repaired, and a
//! replaced file changes nothing for the running actor.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;

use crate::support::{Answer, Server, client, send, to_actor};

/// The value the kv demo preloads for key `k{i}`.
fn preloaded(i: usize) -> String {
    format!("{i:032}")
}

/// A server with a paused-and-resumed kv actor `big` (memory mapped from
/// its snapshot files) and a counter `other`.
async fn resumed_big() -> Server {
    let server = Server::start(&["--workers", "1"]);
    let kv = crate::support::demo("kv");
    server.cli_ok(&[
        "template",
        "push",
        "kv-big",
        kv.to_str().expect("utf-8 path"),
        "--env",
        "KV_PRELOAD=20000",
    ]);
    server.create("big", "kv-big");
    server.push("counter");
    server.create("other", "counter");
    server.cli_json(&["actor", "pause", "big"]);
    server.cli_json(&["actor", "resume", "big"]);
    let got = get(&server, "big", "/k7").await;
    assert_eq!(
        (got.status, got.body.as_str()),
        (200, preloaded(7).as_str())
    );
    server
}

async fn get(server: &Server, actor: &str, path: &str) -> Answer {
    to_actor(&client(), server.ingress, actor, "GET", path).await
}

/// The snapshot files of `actor`, sorted.
fn snapshot_files(server: &Server, actor: &str) -> Vec<PathBuf> {
    let dir = server.data_dir.join("snapshots").join(actor);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("snapshot folder")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "snap"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no snapshot of {actor}");
    files
}

/// `other` still answers: the process is alive and its workers too.
async fn others_still_answer(server: &Server) {
    let answer = to_actor(&client(), server.ingress, "other", "POST", "/").await;
    assert_eq!(answer.status, 200, "{answer:?}");
}

fn assert_failed_for_mapping(answer: &Answer, server: &Server) {
    assert_eq!(answer.status, 503, "{answer:?}");
    assert!(
        answer.body.contains("changed under its mapping"),
        "{answer:?}"
    );
    let dir = server.data_dir.to_string_lossy();
    assert!(
        !answer.body.contains(dir.as_ref()),
        "a server path: {answer:?}"
    );
}

/// Repairs `big` from its template and checks it answers again.
async fn repair(server: &Server) {
    server.cli_json(&["actor", "resume", "big", "--from-template"]);
    let got = get(server, "big", "/k19999").await;
    assert_eq!(
        (got.status, got.body.as_str()),
        (200, preloaded(19_999).as_str())
    );
}

/// (a) `truncate -s 0` of the mapped files: the next read answers 503 with
/// the reason instead of killing the process with SIGBUS; another actor
/// answers; a repair brings the actor back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_mapped_file_fails_the_actor_not_the_process() {
    let server = resumed_big().await;
    for file in snapshot_files(&server, "big") {
        File::options()
            .write(true)
            .open(&file)
            .expect("open")
            .set_len(0)
            .expect("truncate");
    }
    let answer = get(&server, "big", "/k19999").await;
    assert_failed_for_mapping(&answer, &server);
    others_still_answer(&server).await;
    // Failed until repaired, with the reason in `actor get`.
    let again = get(&server, "big", "/k1").await;
    assert_eq!(again.status, 503, "{again:?}");
    let status = server.cli_json(&["actor", "get", "big"]);
    assert_eq!(status["state"], "failed", "{status}");
    repair(&server).await;
    others_still_answer(&server).await;
}

/// (b) The next pause of an actor whose mapped file was truncated writes
/// no snapshot: it fails, and the folder holds what it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_over_a_truncated_mapped_file_writes_no_snapshot() {
    let server = resumed_big().await;
    let files = snapshot_files(&server, "big");
    for file in &files {
        File::options()
            .write(true)
            .open(file)
            .expect("open")
            .set_len(0)
            .expect("truncate");
    }
    let out = server.cli(&["actor", "pause", "big"]);
    assert!(!out.status.success(), "the pause must fail");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("changed under its mapping"), "{stderr}");
    assert_eq!(snapshot_files(&server, "big"), files, "no new snapshot");
    for file in &files {
        assert_eq!(std::fs::metadata(file).expect("meta").len(), 0);
    }
    let answer = get(&server, "big", "/k3").await;
    assert_eq!(answer.status, 503, "{answer:?}");
    others_still_answer(&server).await;
    repair(&server).await;
}

/// (c) A file overwritten in place (`dd conv=notrunc`): the next pause is
/// refused, the actor fails, and no new valid snapshot appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mapped_file_overwritten_in_place_is_never_captured() {
    let server = resumed_big().await;
    let files = snapshot_files(&server, "big");
    let before: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(f).expect("read"))
        .collect();
    for (file, bytes) in files.iter().zip(&before) {
        let mut open = File::options().write(true).open(file).expect("open");
        // Same length, other bytes, no truncation (dd conv=notrunc).
        let at = bytes.len() as u64 / 2;
        open.seek(SeekFrom::Start(at)).expect("seek");
        open.write_all(&[0x5a; 8192]).expect("overwrite");
    }
    let out = server.cli(&["actor", "pause", "big"]);
    assert!(!out.status.success(), "the pause must be refused");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("changed under its mapping"), "{stderr}");
    assert_eq!(snapshot_files(&server, "big"), files, "no new snapshot");
    let answer = get(&server, "big", "/k3").await;
    assert_eq!(answer.status, 503, "{answer:?}");
    assert!(answer.body.contains("failed"), "{answer:?}");
    others_still_answer(&server).await;
    repair(&server).await;
}

/// (d) A file replaced by a rename (a new inode under the old name, as `cp`
/// to a temporary name and `mv` make) changes nothing for the running
/// actor: it keeps its mapping of the old inode and its state, and pauses
/// and resumes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mapped_file_replaced_by_rename_changes_nothing() {
    let server = resumed_big().await;
    for file in snapshot_files(&server, "big") {
        let mut bytes = std::fs::read(&file).expect("read");
        let mid = bytes.len() / 2;
        for b in &mut bytes[mid..mid + 4096] {
            *b ^= 0xff;
        }
        let tmp = file.with_extension("replacement");
        std::fs::write(&tmp, &bytes).expect("write");
        std::fs::rename(&tmp, &file).expect("rename over");
    }
    for i in [0, 123, 10_000, 19_999] {
        let got = get(&server, "big", &format!("/k{i}")).await;
        assert_eq!(
            (got.status, got.body.as_str()),
            (200, preloaded(i).as_str())
        );
    }
    let put = send(
        &client(),
        server.ingress,
        "PUT",
        &crate::support::actor_host("big"),
        "/new",
        b"value".to_vec(),
    )
    .await;
    assert_eq!(put.status, 201, "{put:?}");
    server.cli_json(&["actor", "pause", "big"]);
    server.cli_json(&["actor", "resume", "big"]);
    let got = get(&server, "big", "/new").await;
    assert_eq!((got.status, got.body.as_str()), (200, "value"));
    let got = get(&server, "big", "/k4567").await;
    assert_eq!(
        (got.status, got.body.as_str()),
        (200, preloaded(4567).as_str())
    );
}
