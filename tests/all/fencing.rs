//! Fencing that covers the store (cluster mode, real etcd and s3s-fs): a
//! worker woken after its lease ended changes nothing of the actors it
//! hosted — no snapshot made visible, nothing deleted — and tells each of
//! its clients the truth about their requests; a leader replica woken after
//! its lease delivers no alarm.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use stasis_test_util::wait;

use crate::alarms::{fired_at, set_alarm_at, wait_fired_at};
use crate::replicas::{LEASE_TTL, ONE_CLUSTER, deployment, served, signal};
use crate::support::{STASIS, client, count, to_actor};

/// Every object name under `snapshots/<actor>/` of the store in `bucket`.
fn objects_of(bucket: &Path, actor: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![bucket.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.parent().and_then(Path::file_name) == Some(actor.as_ref())
                && path.to_string_lossy().contains("/snapshots/")
            {
                found.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
    }
    found.sort();
    found
}

/// `(seq, epoch)` of a snapshot object name `<seq:020>-<epoch:020>.snap`.
fn seq_epoch(name: &str) -> Option<(u64, u64)> {
    let (seq, epoch) = name.strip_suffix(".snap")?.split_once('-')?;
    Some((seq.parse().ok()?, epoch.parse().ok()?))
}

/// Waits until `actor get` through replica 0 satisfies `ready`.
pub(crate) fn wait_for_actor(
    d: &stasis_test_util::cluster::Deployment,
    actor: &str,
    what: &str,
    ready: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let what = format!("{actor} {what}");
    stasis_test_util::wait::until_else(&what, Duration::from_secs(30), || {
        let out = d.cli(0, &["actor", "get", actor, "-o", "json"]);
        let info = serde_json::from_slice::<serde_json::Value>(&out.stdout).ok();
        match info {
            Some(info) if out.status.success() && ready(&info) => Ok(info),
            info => Err(format!("{info:?}")),
        }
    })
}

/// The input: worker `w1` runs a slow request on `f1` with five
/// more in its mailbox, and is frozen (SIGSTOP) past its lease; `f1` is
/// re-placed on `w2`, which answers two requests. Thawed, `w1` must run
/// none of the five, write nothing the store keeps, delete none of `w2`'s
/// snapshots, and answer every client with the truth: after `kill -9` of
/// `w2` the actor comes back with exactly the requests answered 200.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_woken_after_its_lease_changes_nothing_and_answers_the_truth() {
    let _one = ONE_CLUSTER.lock().await;
    assert_eq!(LEASE_TTL, "2s");
    // Held requests wait as long as the test needs (no hold timeout).
    let mut d = deployment(1, 1, 1, &["--hold-timeout", "120s"]);
    let faulty = STASIS.demo("faulty");
    let faulty = faulty.to_str().expect("utf-8 path");
    d.cli_json(0, &["template", "push", "faulty", faulty]);
    d.cli_json(0, &["actor", "create", "f1", "--template", "faulty"]);
    let c = client();
    let ingress = d.replica(0).ingress;
    for expected in 1..=3 {
        assert_eq!(
            count(&to_actor(&c, ingress, "f1", "POST", "/").await),
            expected
        );
    }
    d.add_worker("w2");
    d.wait_for_workers(2);
    // A slow request, then five that wait behind it in f1's mailbox.
    let slow = {
        let c = c.clone();
        tokio::spawn(async move { to_actor(&c, ingress, "f1", "POST", "/sleep?ms=1500").await })
    };
    d.worker("w1")
        .process
        .wait_for_log("sleeping 1500 ms", Duration::from_secs(30));
    let mut queued = Vec::new();
    for _ in 0..5 {
        let c = c.clone();
        queued.push(tokio::spawn(async move {
            to_actor(&c, ingress, "f1", "POST", "/").await
        }));
    }
    wait_for_actor(&d, "f1", "had five requests in its mailbox", |info| {
        info["mailbox"].as_u64() == Some(5)
    });
    let w1 = d.worker("w1").process.pid();
    signal(w1, "STOP");
    // Its worker seen lost, or the actor already placed on another (a
    // loss places its actors lazily at once).
    wait_for_actor(&d, "f1", "saw its worker lost", |info| {
        info["worker_state"] == "lost" || info["worker"] != "w1"
    });
    // Its next request re-places it on w2, from the newest snapshot.
    let mut acknowledged = BTreeSet::new();
    for expected in 4..=5 {
        let n = served(&d, 0, "f1").await;
        assert_eq!(n, expected, "w2 continues from the acknowledged count");
        acknowledged.insert(n);
    }
    let info = d.cli_json(0, &["actor", "get", "f1"]);
    assert_eq!(info["worker"], "w2", "{info}");
    // The calls w1 held were given up when it was declared lost (so the
    // re-placement did not wait for them), each with an answer that does
    // not claim an outcome nobody knows.
    let slow = slow.await.expect("slow request");
    assert_eq!(slow.status, 500, "{slow:?}");
    assert!(slow.body.contains("may or may not"), "{slow:?}");
    for answer in queued {
        let answer = answer.await.expect("queued request");
        assert_eq!(answer.status, 500, "{answer:?}");
        assert!(answer.body.contains("may or may not"), "{answer:?}");
    }
    // Thawed, w1 finds its lease gone: it runs none of what it held and
    // writes nothing (its log says so for the request that was running).
    signal(w1, "CONT");
    wait::until("w1 to register again", Duration::from_secs(20), || {
        let log = d.worker("w1").process.log();
        (log.matches("registered in etcd; serving").count() >= 2).then_some(())
    });
    // The store holds no snapshot w1 wrote after w2 took over, and every
    // snapshot w2 wrote is still there.
    let bucket = d.s3.as_ref().expect("s3").bucket_dir();
    let names = objects_of(&bucket, "f1");
    let snapshots: Vec<(u64, u64)> = names.iter().filter_map(|n| seq_epoch(n)).collect();
    let w2_epoch = snapshots.iter().map(|&(_, e)| e).max().expect("snapshots");
    let first_of_w2 = snapshots
        .iter()
        .filter(|&&(_, e)| e == w2_epoch)
        .map(|&(s, _)| s)
        .min()
        .expect("w2's snapshots");
    let late: Vec<&(u64, u64)> = snapshots
        .iter()
        .filter(|&&(s, e)| e < w2_epoch && s >= first_of_w2)
        .collect();
    assert!(
        late.is_empty(),
        "w1 wrote after its lease: {late:?} in {names:?}"
    );
    // Lost with its disk, w2's actor comes back on w1 (registered anew)
    // with exactly the acknowledged requests.
    let log_of_w1 = d.worker("w1").process.log();
    d.kill_worker("w2");
    let back = served(&d, 0, "f1").await;
    let newest = acknowledged.iter().max().copied().unwrap_or(3);
    assert_eq!(
        back,
        newest + 1,
        "after w2's loss the actor has every acknowledged request and no other"
    );
    assert!(
        log_of_w1.contains("holds no valid lease for actor f1"),
        "{log_of_w1}"
    );
}

/// The input 5: the leader replica frozen (SIGSTOP) past its lease
/// while an alarm is pending. Another replica leads and fires the alarm
/// once; woken, the old leader must not deliver its own copy before it
/// notices that it no longer leads (it did, once per freeze).
#[tokio::test(flavor = "multi_thread")]
async fn a_leader_woken_after_its_lease_delivers_no_alarm() {
    let _one = ONE_CLUSTER.lock().await;
    let d = deployment(1, 2, 1, &[]);
    let alarm = STASIS.demo("alarm");
    d.cli_json(
        0,
        &["template", "push", "alarm", alarm.to_str().expect("utf-8")],
    );
    d.cli_json(0, &["actor", "create", "t1", "--template", "alarm"]);
    let old = d.leader();
    let new = 1 - old;
    set_alarm_at(d.replica(new).ingress, "t1", 1_500, "").await;
    let pid = d.replica(old).process.pid();
    signal(pid, "STOP");
    // The new leader fires it (due 1.5 s after it was set; the lease is
    // 2 s, so it fires once the new leader has taken over).
    wait_fired_at(d.replica(new).ingress, "t1", 1, Duration::from_secs(20)).await;
    assert!(
        d.replica(new)
            .process
            .log()
            .contains("serving as the leader"),
        "{}",
        d.replica(new).process.log()
    );
    // The alarm is due on the old leader's clock too: woken, its scheduler
    // finds it due at once.
    signal(pid, "CONT");
    d.replica(old)
        .process
        .wait_for_log("serving as a follower", Duration::from_secs(15));
    assert_eq!(
        fired_at(d.replica(new).ingress, "t1").await,
        1,
        "the deposed leader delivered its stale copy: {}",
        d.replica(old).process.log()
    );
}
