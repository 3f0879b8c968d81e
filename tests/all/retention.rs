//! Retention and repairs (issue 11, input 5): a repair deletes the
//! snapshots known to be corrupt before it writes the repaired state, so
//! `--keep-snapshots` keeps the snapshot the repair came from rather than a
//! corrupt one, and every kept snapshot can be restored. Real binary.

use crate::support::{Server, count, post};

/// The sequence numbers of `actor`'s snapshot files, ascending.
fn kept(server: &Server, actor: &str) -> Vec<u64> {
    let folder = server.data_dir.join(format!("snapshots/{actor}"));
    let mut seqs: Vec<u64> = std::fs::read_dir(&folder)
        .expect("snapshot folder")
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".snap")?.parse().ok()
        })
        .collect();
    seqs.sort_unstable();
    seqs
}

/// Pauses `actor` and returns the sequence number of its new snapshot.
fn pause(server: &Server, actor: &str) -> u64 {
    server.cli_json(&["actor", "pause", actor])["snapshot"]["seq"]
        .as_u64()
        .expect("seq")
}

/// Writes garbage into the middle of snapshot `seq` of `actor`.
fn corrupt(server: &Server, actor: &str, seq: u64) {
    let path = server
        .data_dir
        .join(format!("snapshots/{actor}/{seq:020}.snap"));
    let mut bytes = std::fs::read(&path).expect("read snapshot");
    let mid = bytes.len() / 2;
    bytes[mid..mid + 16].copy_from_slice(b"garbage!garbage!");
    std::fs::write(&path, bytes).expect("corrupt snapshot");
}

/// Resumes `actor` from snapshot `seq` and returns the count of its next
/// request.
async fn resume_from(server: &Server, actor: &str, seq: u64) -> u64 {
    let out = server.cli_json(&[
        "actor",
        "resume",
        actor,
        "--from-snapshot",
        &seq.to_string(),
    ]);
    assert_eq!(out["state"], "running", "resume from {seq}: {out}");
    count(&post(server, actor).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_keeps_its_source_and_drops_the_corrupt_snapshot() {
    let server = Server::start(&["--keep-snapshots", "2"]);
    server.push("counter");
    server.create("a", "counter");
    assert_eq!(count(&post(&server, "a").await), 1);
    let good = pause(&server, "a");
    assert_eq!(count(&post(&server, "a").await), 2);
    let bad = pause(&server, "a");
    assert_eq!(kept(&server, "a"), vec![good, bad]);
    corrupt(&server, "a", bad);
    // Resuming from the newest finds the corruption: the actor fails.
    assert_eq!(post(&server, "a").await.status, 503);
    assert_eq!(server.cli_json(&["actor", "get", "a"])["state"], "failed");

    // The repair from the good snapshot: the corrupt one goes, the source
    // stays, and the repaired state is the newest.
    let out = server.cli_json(&["actor", "resume", "a", "--from-snapshot", &good.to_string()]);
    assert_eq!(out["state"], "running", "{out}");
    let after = kept(&server, "a");
    assert_eq!(after.len(), 2, "--keep-snapshots 2: {after:?}");
    assert_eq!(after[0], good, "the repair's source is kept: {after:?}");
    assert!(after[1] > bad, "the repaired state is newest: {after:?}");
    assert!(!after.contains(&bad), "the corrupt snapshot is gone");
    let listed = server.cli_json(&["actor", "get", "a"]);
    assert_eq!(
        listed["snapshots"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );
    assert_eq!(count(&post(&server, "a").await), 2);

    // Every kept snapshot restores (both hold count 1). Each repair writes
    // a new newest snapshot, which pushes the oldest out: the source first,
    // then the repaired one, which is still there when it is tried.
    for seq in [after[0], after[1]] {
        assert_eq!(resume_from(&server, "a", seq).await, 2, "snapshot {seq}");
    }
    assert_eq!(kept(&server, "a").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_from_the_template_drops_corrupt_snapshots() {
    let server = Server::start(&["--keep-snapshots", "3"]);
    server.push("counter");
    server.create("t", "counter");
    assert_eq!(count(&post(&server, "t").await), 1);
    let good = pause(&server, "t");
    assert_eq!(count(&post(&server, "t").await), 2);
    let bad = pause(&server, "t");
    corrupt(&server, "t", bad);
    let before = kept(&server, "t");
    assert!(
        before.contains(&good) && before.contains(&bad),
        "{before:?}"
    );
    let out = server.cli_json(&["actor", "resume", "t", "--from-template"]);
    assert_eq!(out["state"], "running", "{out}");
    let after = kept(&server, "t");
    assert!(
        !after.contains(&bad),
        "the corrupt snapshot is gone: {after:?}"
    );
    assert!(after.contains(&good), "good snapshots stay: {after:?}");
    assert_eq!(count(&post(&server, "t").await), 1);
    assert_eq!(resume_from(&server, "t", good).await, 2);
}
