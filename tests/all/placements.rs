//! A follower replica's placement cache (`--placement-cache`), through the
//! real binary against real etcd: a follower started over a directory of
//! 100,000 actors reads only the placements its requests need, concurrent
//! misses for one actor share one read (forced by freezing etcd with
//! SIGSTOP while they arrive), and a cached placement follows a move.

use std::time::Duration;

use stasis_test_util::cluster::PREFIX;
use stasis_test_util::wait;

use crate::replicas::{ONE_CLUSTER, deployment, served, signal};
use crate::support::{client, send};

/// The value of the metric line `series` in the `/metrics` of the replica
/// whose admin API is at `admin` (0 when absent).
async fn metric(admin: std::net::SocketAddr, series: &str) -> f64 {
    let text = send(&client(), admin, "GET", "localhost", "/metrics", Vec::new())
        .await
        .body;
    crate::support::metric_in(&text, series)
}

const CACHED: &str = "stasis_placements_cached";
const READS: &str = "stasis_placement_reads_total";
const MISSES: &str = "stasis_placement_cache_misses_total";

#[tokio::test(flavor = "multi_thread")]
async fn a_follower_started_over_100000_actors_reads_only_the_placements_it_needs() {
    let _one = ONE_CLUSTER.lock().await;
    let mut d = deployment(1, 1, 1, &[]);
    d.push_counter(0);
    d.cli_json(0, &["actor", "create", "real", "--template", "counter"]);
    assert_eq!(served(&d, 0, "real").await, 1);
    // 100,000 more actors in the directory, each a copy of real's record.
    let record = d
        .etcd
        .get(&format!("{PREFIX}/actors/real"))
        .await
        .expect("real's record");
    let seeded = (0..100_000).map(|i| (format!("{PREFIX}/actors/seeded-{i:06}"), record.clone()));
    d.etcd.put_many(seeded).await;

    let follower = d
        .start_replica(&["--placement-cache", "1000"])
        .expect("the follower starts");
    d.replicas.push(Some(follower));
    let f = d.replicas.len() - 1;
    let admin = d.replica(f).admin;
    assert_eq!(metric(admin, CACHED).await, 0.0, "nothing loaded at start");
    assert_eq!(metric(admin, READS).await, 0.0, "nothing read at start");
    assert_eq!(served(&d, f, "real").await, 2);
    assert_eq!(metric(admin, READS).await, 1.0);
    assert_eq!(metric(admin, CACHED).await, 1.0);
    assert_eq!(served(&d, f, "real").await, 3);
    assert_eq!(
        metric(admin, READS).await,
        1.0,
        "the second request hit the cache"
    );

    // A move: the follower's cached placement follows it (by its watch,
    // or read again when the old worker refuses the stale epoch).
    d.add_worker("w2");
    d.wait_for_workers(2);
    d.cli_json(0, &["actor", "migrate", "real", "--to", "w2"]);
    assert_eq!(served(&d, f, "real").await, 4);
    let listed = d.cli_json(f, &["actor", "get", "real"]);
    assert_eq!(listed["worker"], "w2", "{listed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_misses_for_one_actor_share_one_read() {
    let _one = ONE_CLUSTER.lock().await;
    let d = deployment(1, 2, 1, &[]);
    let leader = d.leader();
    let f = 1 - leader;
    d.push_counter(leader);
    d.cli_json(leader, &["actor", "create", "x", "--template", "counter"]);
    let (ingress, admin) = (d.replica(f).ingress, d.replica(f).admin);
    assert_eq!(metric(admin, MISSES).await, 0.0);
    // etcd is frozen while 20 requests for x, not yet cached, arrive.
    let etcd = d.etcd.pid(0);
    signal(etcd, "STOP");
    let c = client();
    let requests: Vec<_> = (0..20)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { crate::replicas::try_post(&c, ingress, "x").await })
        })
        .collect();
    // etcd is thawed however this ends, a timed-out wait's panic included.
    struct Thaw(u32);
    impl Drop for Thaw {
        fn drop(&mut self) {
            signal(self.0, "CONT");
        }
    }
    let thaw = Thaw(etcd);
    wait::until_else_async(
        "the 20 requests to all miss the cache",
        Duration::from_secs(10),
        async || {
            let misses = metric(admin, MISSES).await;
            if misses >= 20.0 {
                Ok(())
            } else {
                Err(format!("{misses} misses"))
            }
        },
    )
    .await;
    let reads = metric(admin, READS).await;
    drop(thaw);
    assert_eq!(reads, 1.0, "20 concurrent misses made {reads} reads");
    let mut counts = Vec::new();
    for request in requests {
        let (status, body) = request.await.expect("task").expect("an answer");
        assert_eq!(status, 200, "{body}");
        counts.push(stasis_test_util::demos::count_in(&body).expect("a count"));
    }
    counts.sort_unstable();
    assert_eq!(counts, (1..=20).collect::<Vec<u64>>());
    assert_eq!(metric(admin, READS).await, 1.0);
}
