//! The logical journal (docs/architecture.md, "The worker journal")
//! through the real binary: after `kill -9` an actor's acknowledged
//! deliveries are replayed on its newest snapshot without repeating their
//! outbound effects; a delivery that replays otherwise than it ran fails
//! its actor, naming the entry, until a repair; a record repeated in the
//! journal fails its actor alone, never rewinding or doubling it; an
//! `fdatasync` error answers the truth about the requests it caught.

use std::io::Write as _;
use std::sync::atomic::Ordering;

use crate::outbound::origin;
use crate::support::{Server, client, count, to_actor};

async fn send(server: &Server, actor: &str, method: &str, path: &str) -> crate::support::Answer {
    to_actor(&client(), server.ingress, actor, method, path).await
}

/// Three fetches through the `fetch` demo reach the origin three times;
/// after `kill -9` the restarted server replays the three deliveries (a
/// resume asks for it) with the origin's recorded answers and reaches it
/// no more; the next fetch reaches it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_fetch_does_not_reach_its_origin_again() {
    let (addr, seen) = origin("HTTP/1.1 200 OK", "hello\n").await;
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("data");
    let rule = addr.to_string();
    let flags = ["--allow-outbound", rule.as_str()];
    let mut server = Server::start_in(&dir, &flags).expect("serve starts");
    server.push("fetch");
    server.create("getter", "fetch");
    let path = format!("/?url=http://{addr}/");
    for n in 1..=3 {
        let answer = send(&server, "getter", "GET", &path).await;
        assert_eq!((answer.status, answer.body.as_str()), (200, "hello\n"));
        assert_eq!(seen.load(Ordering::SeqCst), n);
    }
    server.kill();
    let server = Server::start_in(&dir, &flags).expect("restart");
    server.cli_ok(&["actor", "resume", "getter"]);
    server.wait_for_log("journal entries replayed");
    assert_eq!(
        seen.load(Ordering::SeqCst),
        3,
        "a replayed fetch reached the origin"
    );
    let answer = send(&server, "getter", "GET", &path).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(seen.load(Ordering::SeqCst), 4);
}

/// A guest that replays otherwise than it ran — here `faulty`'s `/grow`,
/// which a restart with a smaller `--max-memory` refuses where it was
/// granted — is caught by the answer digest: the actor is failed with
/// the entry and both digests, and never serves the diverged state; a
/// resume from its snapshot repairs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_that_replays_otherwise_fails_its_actor_naming_the_entry() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("data");
    let mut server = Server::start_in(&dir, &["--max-memory", "64MiB"]).expect("serve starts");
    server.push("faulty");
    server.create("f", "faulty");
    assert_eq!(count(&send(&server, "f", "POST", "/").await), 1);
    for _ in 0..3 {
        let grown = send(&server, "f", "POST", "/grow?mib=8").await;
        assert_eq!(grown.status, 200, "{grown:?}");
    }
    server.kill();
    let server = Server::start_in(&dir, &["--max-memory", "24MiB"]).expect("restart");
    let answer = send(&server, "f", "GET", "/").await;
    assert!(answer.status >= 500, "a diverged state served: {answer:?}");
    let info = server.cli_json(&["actor", "get", "f"]);
    assert_eq!(info["state"], "failed", "{info}");
    let error = info["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("replaying journal entry 0.4") && error.contains("digest"),
        "{error}"
    );
    server.cli_ok(&["actor", "resume", "f", "--from-snapshot", "0"]);
    assert_eq!(count(&send(&server, "f", "GET", "/").await), 0);
}

/// The byte ranges of whole journal records in `bytes` whose kind is a
/// delivery (5): the record format of `core/src/journal/entry.rs`.
fn delivery_records(bytes: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 12 <= bytes.len() && bytes[at..at + 4] == *b"SJE1" {
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("len")) as usize;
        if bytes[at + 12] == 5 {
            out.push(at..at + 12 + len);
        }
        at += 12 + len;
    }
    out
}

/// Three acknowledged increments each of `faulty` actors `first` and
/// `second` (alternating, `first` first), then `kill -9`: the newest
/// journal segment's path and bytes, and the delivery records of each
/// actor in it ([`delivery_records`]; a record's actor name, as u16
/// length and bytes, follows its kind, epoch and sequence number).
async fn two_actors_killed(
    dir: &std::path::Path,
    first: &str,
    second: &str,
) -> (
    std::path::PathBuf,
    Vec<u8>,
    [Vec<std::ops::Range<usize>>; 2],
) {
    let mut server = Server::start_in(dir, &[]).expect("serve starts");
    server.push("faulty");
    server.create(first, "faulty");
    server.create(second, "faulty");
    for n in 1..=3 {
        assert_eq!(count(&send(&server, first, "POST", "/").await), n);
        assert_eq!(count(&send(&server, second, "POST", "/").await), n);
    }
    server.kill();
    let segment = std::fs::read_dir(dir.join("journal"))
        .expect("journal folder")
        .map(|e| e.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .max()
        .expect("a segment");
    let bytes = std::fs::read(&segment).expect("segment");
    let of = |actor: &str| -> Vec<_> {
        let mut name = (actor.len() as u16).to_le_bytes().to_vec();
        name.extend_from_slice(actor.as_bytes());
        delivery_records(&bytes)
            .into_iter()
            .filter(|range| bytes[range.start + 12 + 17..].starts_with(&name))
            .collect()
    };
    let records = [of(first), of(second)];
    (segment, bytes, records)
}

/// An older delivery record of actor `a` copied after the journal's end
/// (whole, its checksum valid) is not taken as `a`'s newest delivery: `a`
/// is failed, naming the entry out of order, and not rewound or doubled;
/// actor `b`, in the same segment, comes back with every increment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_record_fails_its_actor_and_the_others_start() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("data");
    let (segment, bytes, [a, _]) = two_actors_killed(&dir, "a", "b").await;
    let first = a.first().expect("a delivery record of a").clone();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .expect("open segment");
    file.write_all(&bytes[first]).expect("append");
    drop(file);
    let server = Server::start_in(&dir, &[]).expect("restart");
    assert_eq!(count(&send(&server, "b", "GET", "/").await), 3);
    let answer = send(&server, "a", "GET", "/").await;
    assert!(answer.status >= 500, "{answer:?}");
    let info = server.cli_json(&["actor", "get", "a"]);
    assert_eq!(info["state"], "failed", "{info}");
    let error = info["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("does not follow") && error.contains("repeated"),
        "{error}"
    );
}

/// `fdatasync` fails (EIO) under the journal: the request whose group
/// commit failed is answered as of unknown outcome, never as refused; the
/// next one is refused (the journal stopped) and not applied; after a
/// restart the counter holds the three acknowledged increments, plus the
/// fourth if its bytes reached the disk, never the fifth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_fdatasync_error_answers_the_truth() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("data");
    let shim = crate::preload::eio(tmp.path());
    let flag = tmp.path().join("fail-fdatasync");
    let env = [
        ("LD_PRELOAD", shim.to_str().expect("utf-8 path")),
        ("STASIS_TEST_EIO_FLAG", flag.to_str().expect("utf-8 path")),
    ];
    let mut server = Server::start_in_env(&dir, &[], &env).expect("serve starts");
    server.push("faulty");
    server.create("f", "faulty");
    for n in 1..=3 {
        assert_eq!(count(&send(&server, "f", "POST", "/").await), n);
    }
    std::fs::write(&flag, b"").expect("flag");
    let unknown = send(&server, "f", "POST", "/").await;
    assert_eq!(unknown.status, 503, "{unknown:?}");
    assert!(
        unknown.body.contains("may or may not have been applied"),
        "{unknown:?}"
    );
    let refused = send(&server, "f", "POST", "/").await;
    assert!(refused.status >= 500, "{refused:?}");
    server.kill();
    std::fs::remove_file(&flag).expect("unflag");
    let server = Server::start_in(&dir, &[]).expect("restart");
    let after = count(&send(&server, "f", "GET", "/").await);
    assert!(
        after == 3 || after == 4,
        "count {after} after the failed commit"
    );
}

/// A request names the worker it runs on to the guest (the counter
/// answers it), so its replay does too: an actor whose worker is gone
/// after a restart (`--workers 2`, then 1) replays on another worker the
/// deliveries it answered on `worker-2` — digests intact, nothing failed
/// — and then answers from its new worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_on_another_worker_names_the_worker_each_delivery_ran_on() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("data");
    let mut server = Server::start_in(&dir, &["--workers", "2"]).expect("serve starts");
    server.push("counter");
    let actor = (0..8)
        .map(|i| format!("c{i}"))
        .find(|name| server.create(name, "counter")["worker"] == "worker-2")
        .expect("an actor placed on worker-2");
    for n in 1..=3 {
        let answer = send(&server, &actor, "POST", "/").await;
        assert_eq!(
            answer.body,
            format!("hello from: worker-2 | preserved memory count: {n}\n")
        );
    }
    server.kill();
    let server = Server::start_in(&dir, &["--workers", "1"]).expect("restart");
    let answer = send(&server, &actor, "GET", "/").await;
    assert_eq!(
        answer.body, "hello from: worker-1 | preserved memory count: 3\n",
        "{answer:?}"
    );
    let info = server.cli_json(&["actor", "get", &actor]);
    assert_eq!(info["state"], "running", "{info}");
}

/// Found by trying to break it: a damaged record in the middle of the
/// journal (a flipped byte) that was an actor's last entry left nothing
/// after it to show a hole, and the actor came back one acknowledged
/// request short, `running`. The record's header still names its actor:
/// that actor is failed; the other, whose records are whole, comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_last_entry_fails_its_actor_instead_of_rewinding_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("data");
    let (segment, mut bytes, [b, _]) = two_actors_killed(&dir, "b", "a").await;
    // `b`'s last delivery, with `a`'s last after it: a byte of its body.
    let last = b.last().expect("a delivery record of b").clone();
    bytes[last.end - 2] ^= 0x20;
    std::fs::write(&segment, &bytes).expect("damage");
    let server = Server::start_in(&dir, &[]).expect("restart");
    assert_eq!(count(&send(&server, "a", "GET", "/").await), 3);
    let answer = send(&server, "b", "GET", "/").await;
    assert!(answer.status >= 500, "b rewound: {answer:?}");
    let info = server.cli_json(&["actor", "get", "b"]);
    assert_eq!(info["state"], "failed", "{info}");
    let error = info["error"].as_str().unwrap_or_default();
    assert!(error.contains("damaged"), "{error}");
}
