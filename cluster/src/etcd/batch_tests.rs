//! Tests of the group commit of actor writes ([`super::batch`]) against a
//! real etcd: writes queued while etcd is frozen (SIGSTOP) share
//! transactions, each keeps its own verdict, and batches split at the
//! limits. The batching is forced, not hoped for: etcd is frozen until
//! every write is queued (the directory counts them).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::GetOptions;
use tokio::time::Instant;

use super::batch::{Limits, MAX_BYTES, MAX_WRITES, Pending, Write, take_batch};
use super::harness::etcd_test_with;
use super::tests::{actor, connect, etcd_test, record, signal_all};
use super::*;
use stasis_contract::directory::Directory;
use stasis_contract::error::ApiError;

/// Freezes every member, runs each of `writes` on a thread of its own,
/// waits until `queued` of them wait in the group commit (the first one
/// is in flight: it was sent before etcd froze), wakes etcd, and returns
/// every answer in the order of `writes`.
fn frozen_then_all(
    cluster: &stasis_test_util::etcd::EtcdCluster,
    dir: &Arc<EtcdDirectory>,
    writes: Vec<Job>,
) -> Vec<Result<(), ApiError>> {
    let n = writes.len();
    signal_all(cluster, libc::SIGSTOP);
    let threads: Vec<_> = writes
        .into_iter()
        .map(|w| {
            let d = dir.clone();
            std::thread::spawn(move || w(&d))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while dir.unanswered_writes() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} writes queued",
            dir.unanswered_writes()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    signal_all(cluster, libc::SIGCONT);
    threads
        .into_iter()
        .map(|t| t.join().expect("writer"))
        .collect()
}

/// The `mod_revision` of every actor record under `/p` with a name
/// starting with `prefix`.
async fn revisions(etcd: &Etcd, prefix: &str) -> BTreeSet<i64> {
    let mut kv = etcd.client().kv_client();
    let key = etcd.key(&format!("actors/{prefix}"));
    let resp = kv
        .get(key, Some(GetOptions::new().with_prefix()))
        .await
        .expect("get");
    resp.kvs()
        .iter()
        .map(etcd_client::KeyValue::mod_revision)
        .collect()
}

type Job = Box<dyn FnOnce(&EtcdDirectory) -> Result<(), ApiError> + Send>;

#[test]
fn queued_writes_share_a_transaction_and_a_conflict_fails_only_its_own() {
    etcd_test(Duration::from_secs(60), |cluster| async move {
        let etcd = connect(&cluster, "/batch").await;
        let dir = etcd.directory();
        for name in ["taken", "placed", "doomed", "stale"] {
            dir.insert_actor(&actor(name, "w1")).expect("insert");
        }
        dir.place_actor("stale", "w2", 5).expect("epoch 5");
        let mut jobs: Vec<Job> = Vec::new();
        for i in 0..40 {
            jobs.push(Box::new(move |d| {
                d.insert_actor(&actor(&format!("new{i:02}"), "w1"))
            }));
        }
        // Taken by another value: 409. Taken by the same value: ours.
        jobs.push(Box::new(|d| d.insert_actor(&actor("taken", "w9"))));
        jobs.push(Box::new(|d| d.insert_actor(&actor("taken", "w1"))));
        jobs.push(Box::new(|d| d.delete_actor("doomed")));
        jobs.push(Box::new(|d| d.delete_actor("never-was")));
        let answers = frozen_then_all(&cluster, &dir, jobs);
        let (inserts, rest) = answers.split_at(40);
        assert!(inserts.iter().all(Result::is_ok), "{inserts:?}");
        let conflict = rest[0].as_ref().expect_err("taken by another value");
        assert_eq!(conflict.kind().status(), 409, "{conflict:?}");
        assert!(rest[1].is_ok(), "our own value again: {:?}", rest[1]);
        assert!(rest[2].is_ok() && rest[3].is_ok(), "{rest:?}");
        // One transaction was in flight when etcd froze; the rest came in
        // at most one more (40 + 4 writes, under MAX_WRITES).
        let written = revisions(&etcd, "new").await;
        assert!(
            written.len() <= 2,
            "40 inserts in {} transactions",
            written.len()
        );
        let rows = dir.actors().expect("actors");
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert!(!names.contains(&"doomed"), "{names:?}");
        assert_eq!(rows.len(), 40 + 3, "{names:?}");
        let taken = rows.iter().find(|r| r.name == "taken").expect("taken");
        assert_eq!(taken.worker, "w1", "the refused insert changed nothing");

        // Placements: each decided by its own epoch, in batches with
        // others' (the reads before them are not batched).
        let placers: Vec<_> = (0..16)
            .map(|i| {
                let d = dir.clone();
                std::thread::spawn(move || d.place_actor(&format!("new{i:02}"), "w2", 2))
            })
            .chain([
                {
                    let d = dir.clone();
                    std::thread::spawn(move || d.place_actor("stale", "w3", 4))
                },
                {
                    let d = dir.clone();
                    std::thread::spawn(move || d.place_actor("gone", "w3", 2))
                },
            ])
            .collect();
        let placed: Vec<_> = placers
            .into_iter()
            .map(|t| t.join().expect("placer"))
            .collect();
        assert!(placed[..16].iter().all(Result::is_ok), "{placed:?}");
        for refused in &placed[16..] {
            let e = refused.as_ref().expect_err("older epoch or no actor");
            assert_eq!(e.kind().status(), 409, "{e:?}");
        }
        let rows = dir.actors().expect("actors");
        for r in &rows {
            let want = match r.name.as_str() {
                "stale" => ("w2", 5),
                n if n.starts_with("new") && n[3..].parse::<u32>().is_ok_and(|i| i < 16) => {
                    ("w2", 2)
                }
                _ => ("w1", 1),
            };
            assert_eq!((r.worker.as_str(), r.epoch), want, "{}", r.name);
        }
    });
}

#[test]
fn a_queue_past_the_limits_is_split_into_transactions_in_order() {
    etcd_test(Duration::from_secs(60), |cluster| async move {
        let etcd = connect(&cluster, "/split").await;
        let dir = etcd.directory();
        // 150 new names, a name inserted twice with one value (the second
        // finds its own value: both succeed) and twice with two values
        // (one wins): a key appears once per transaction.
        let mut jobs: Vec<Job> = (0..150)
            .map(|i| -> Job {
                Box::new(move |d| d.insert_actor(&actor(&format!("s{i:03}"), "w1")))
            })
            .collect();
        jobs.push(Box::new(|d| d.insert_actor(&actor("twice", "w1"))));
        jobs.push(Box::new(|d| d.insert_actor(&actor("twice", "w1"))));
        jobs.push(Box::new(|d| d.insert_actor(&actor("rival", "w1"))));
        jobs.push(Box::new(|d| d.insert_actor(&actor("rival", "w2"))));
        let answers = frozen_then_all(&cluster, &dir, jobs);
        assert!(answers[..152].iter().all(Result::is_ok), "{answers:?}");
        let rivals: Vec<_> = answers[152..].iter().filter(|a| a.is_ok()).collect();
        assert_eq!(rivals.len(), 1, "{answers:?}");
        let written = revisions(&etcd, "s").await;
        // 150 + 4 writes, at most MAX_WRITES a transaction, one of them
        // in flight alone when etcd froze.
        let least = 1 + (150_usize + 4 - 1).div_ceil(MAX_WRITES);
        assert!(
            (least - 1..=least + 1).contains(&written.len()),
            "150 inserts in {} transactions",
            written.len()
        );
        assert_eq!(dir.actors().expect("actors").len(), 152);
    });
}

/// The batch a queue gives: in order, each key once, within the limits.
#[test]
fn a_batch_takes_each_key_once_within_the_limits() {
    let pending = |key: String, value: usize| {
        let (answer, _) = tokio::sync::oneshot::channel();
        Pending {
            write: Write::Insert {
                key,
                value: vec![b'x'; value],
            },
            answer,
        }
    };
    let mut queue: std::collections::VecDeque<Pending> = (0..100)
        .map(|i| pending(format!("k{}", i % 70), 10))
        .collect();
    let first = take_batch(&mut queue, Limits::DEFAULT);
    let keys: Vec<String> = first.iter().map(|p| key_of(&p.write)).collect();
    assert_eq!(first.len(), MAX_WRITES);
    assert_eq!(
        keys,
        (0..MAX_WRITES).map(|i| format!("k{i}")).collect::<Vec<_>>()
    );
    // What was left keeps its order: k64..k69, then the second k0..k29.
    let second = take_batch(&mut queue, Limits::DEFAULT);
    let keys: Vec<String> = second.iter().map(|p| key_of(&p.write)).collect();
    let want: Vec<String> = (64..70).chain(0..30).map(|i| format!("k{i}")).collect();
    assert_eq!(keys, want);
    assert!(queue.is_empty());
    // Bytes: two writes of 600 KiB do not share a transaction; one alone
    // over the limit still goes (etcd answers for it).
    let mut queue: std::collections::VecDeque<Pending> = [
        pending("a".into(), 600 << 10),
        pending("b".into(), 600 << 10),
        pending("c".into(), MAX_BYTES + 1),
    ]
    .into_iter()
    .collect();
    for want in ["a", "b", "c"] {
        let batch = take_batch(&mut queue, Limits::DEFAULT);
        assert_eq!(
            batch.iter().map(|p| key_of(&p.write)).collect::<Vec<_>>(),
            [want]
        );
    }
}

fn key_of(write: &Write) -> String {
    match write {
        Write::Insert { key, .. } | Write::Place { key, .. } | Write::Delete { key, .. } => {
            key.clone()
        }
    }
}

#[test]
fn a_former_leaders_batch_applies_nothing() {
    etcd_test(Duration::from_secs(60), |cluster| async move {
        let ttl = Duration::from_secs(2);
        let a = connect(&cluster, "/fb").await;
        let b = connect(&cluster, "/fb").await;
        let lead_a = a.campaign(&record("a"), ttl).await.expect("a campaigns");
        let dir_a = a.leader_directory(&lead_a);
        dir_a.insert_actor(&actor("kept", "w1")).expect("a leads");
        lead_a.resign().await.expect("resign");
        let lead_b = b.campaign(&record("b"), ttl).await.expect("b campaigns");
        // Ten writes of a's directory share transactions: every one is
        // refused (503) and nothing of them applies.
        let mut jobs: Vec<Job> = (0..8)
            .map(|i| -> Job { Box::new(move |d| d.insert_actor(&actor(&format!("f{i}"), "w1"))) })
            .collect();
        jobs.push(Box::new(|d| d.delete_actor("kept")));
        jobs.push(Box::new(|d| d.delete_actor("f0")));
        let answers = frozen_then_all(&cluster, &dir_a, jobs);
        for answer in &answers {
            let e = answer.as_ref().expect_err("a no longer leads");
            assert_eq!(e.kind().status(), 503, "{}", e.message());
        }
        let rows = b.directory().actors().expect("actors");
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].name, "kept");
        lead_b.resign().await.expect("resign");
    });
}

/// Issue 47, input 6: an etcd whose limits are below the defaults
/// (`--max-txn-ops 16`, `--max-request-bytes 3000`) refuses a full batch
/// whole; the batch is split and every one of 60 concurrent inserts
/// succeeds, none applied twice.
#[test]
fn an_etcd_with_smaller_limits_gets_smaller_batches_and_every_write_succeeds() {
    let flags = ["--max-txn-ops=16", "--max-request-bytes=3000"];
    etcd_test_with(&flags, Duration::from_secs(60), |cluster| async move {
        let etcd = connect(&cluster, "/small").await;
        let dir = etcd.directory();
        let jobs: Vec<Job> = (0..60)
            .map(|i| -> Job {
                Box::new(move |d| d.insert_actor(&actor(&format!("s{i:02}"), "w1")))
            })
            .collect();
        let answers = frozen_then_all(&cluster, &dir, jobs);
        let failed: Vec<_> = answers.iter().filter(|a| a.is_err()).collect();
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(dir.actors().expect("actors").len(), 60);
        // More than one transaction after the in-flight one: split.
        assert!(revisions(&etcd, "s").await.len() > 2);
    });
}
