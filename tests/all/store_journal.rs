//! Cluster mode's shipped journal (issue 29, item 6): at levels `store`
//! and `request` a cluster worker group-commits its actors' entries into
//! the object store as journal segments, and a worker lost with its disk
//! (`kill -9`, its data dir never used again) loses no acknowledged
//! request: the actor's new owner replays its deliveries from the
//! segments on its newest snapshot.

use std::path::Path;
use std::time::Duration;

use stasis_test_util::cluster::{Deployment, Setup};

use crate::fencing::wait_for_actor;
use crate::replicas::{LEASE_TTL, ONE_CLUSTER, echo, served};
use crate::support::{STASIS, client, count, to_actor};

/// Journal segment objects (`journal/<worker>/<run>-<round>.seg`) under
/// the bucket folder.
fn segments(bucket: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![bucket.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "seg") {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

/// Three counters on two workers at `level`; entries are never folded
/// during the test (a failpoint), so what the new owner gets after the
/// kill can only come from the segments.
fn cluster_at(level: &str) -> Deployment {
    let mut setup = Setup::new(1, 1, 2);
    setup.lease_ttl = Some(LEASE_TTL.to_owned());
    setup.flags = vec!["--durability".to_owned(), level.to_owned()];
    setup.env = vec![(
        "STASIS_FAILPOINT_FOLD_AFTER_MS".to_owned(),
        "600000".to_owned(),
    )];
    setup.echo = echo();
    Deployment::start(STASIS, setup)
}

async fn lose_a_worker_and_keep_every_answer(level: &str) {
    let _one = ONE_CLUSTER.lock().await;
    let mut d = cluster_at(level);
    d.push_counter(0);
    let actors = ["j1", "j2", "j3", "j4"];
    for actor in actors {
        d.cli_json(0, &["actor", "create", actor, "--template", "counter"]);
    }
    let c = client();
    let ingress = d.replica(0).ingress;
    // Four clients at once, one per actor, 25 requests each: every 200 is
    // an acknowledged count.
    let mut runs = tokio::task::JoinSet::new();
    for actor in actors {
        let c = c.clone();
        runs.spawn(async move {
            let mut acknowledged = 0;
            for expected in 1..=25 {
                let answer = to_actor(&c, ingress, actor, "POST", "/").await;
                assert_eq!(answer.status, 200, "{actor}: {answer:?}");
                assert_eq!(count(&answer), expected, "{actor}");
                acknowledged = expected;
            }
            acknowledged
        });
    }
    let acknowledged: Vec<u64> = runs.join_all().await;
    assert_eq!(acknowledged, vec![25; 4]);
    // The requests wrote no snapshot: each actor's newest is its
    // snapshot 0, and its state is in segments.
    for actor in actors {
        let info = d.cli_json(0, &["actor", "get", actor]);
        assert_eq!(info["durability"], level, "{info}");
        assert_eq!(info["snapshot"]["seq"], 0, "{info}");
    }
    let bucket = d.s3.as_ref().expect("s3").bucket_dir();
    assert!(
        !segments(&bucket).is_empty(),
        "no journal segment in the store"
    );
    // Lose w1 with its disk.
    let on_w1: Vec<&str> = actors
        .into_iter()
        .filter(|actor| d.cli_json(0, &["actor", "get", actor])["worker"] == "w1")
        .collect();
    assert!(!on_w1.is_empty(), "the placement put nothing on w1");
    d.kill_worker("w1");
    // (Re-placed meanwhile is as good: its worker was seen lost.)
    for actor in &on_w1 {
        wait_for_actor(&d, actor, "saw its worker lost", |info| {
            info["worker_state"] == "lost" || info["worker"] == "w2"
        });
    }
    // Every actor answers the next count: none lost, none applied twice.
    for actor in actors {
        assert_eq!(served(&d, 0, actor).await, 26, "{actor}");
        assert_eq!(
            d.cli_json(0, &["actor", "get", actor])["worker"],
            "w2",
            "{actor}"
        );
    }
    d.worker("w2").process.wait_for_log(
        "journal entries recovered from the store",
        Duration::from_secs(10),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_lost_at_level_store_loses_no_acknowledged_request() {
    lose_a_worker_and_keep_every_answer("store").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_lost_at_level_request_loses_no_acknowledged_request() {
    lose_a_worker_and_keep_every_answer("request").await;
}
