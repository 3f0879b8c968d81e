//! Requests for the actors of a dead worker are held, not refused (issue
//! 32, item 2): after `kill -9` of a cluster worker its actors' requests
//! find the connection refused, then the worker declared lost and the
//! actors waiting for a host; each request waits (like one at a closed
//! gate, up to `--hold-timeout`) and is served once its actor is placed
//! again — never answered 503 while the re-placement is pending, never
//! applied twice.

use std::collections::BTreeMap;

use crate::fencing::wait_for_actor;
use crate::replicas::{ONE_CLUSTER, deployment};
use crate::support::{client, count, to_actor};

#[tokio::test(flavor = "multi_thread")]
async fn requests_for_a_dead_workers_actors_are_held_until_they_are_placed_again() {
    let _one = ONE_CLUSTER.lock().await;
    let mut d = deployment(1, 1, 2, &[]);
    d.push_counter(0);
    let names: Vec<String> = (1..=6).map(|i| format!("h{i}")).collect();
    for name in &names {
        d.cli_json(0, &["actor", "create", name, "--template", "counter"]);
    }
    let c = client();
    let ingress = d.replica(0).ingress;
    for name in &names {
        for expected in 1..=3 {
            let answer = to_actor(&c, ingress, name, "POST", "/").await;
            assert_eq!(count(&answer), expected, "{name}: {answer:?}");
        }
    }
    let on_w1: Vec<String> = names
        .iter()
        .filter(|name| d.cli_json(0, &["actor", "get", name])["worker"] == "w1")
        .cloned()
        .collect();
    assert!(!on_w1.is_empty(), "the placement put nothing on w1");
    d.kill_worker("w1");
    // Sent at once, while w1 is not yet declared lost (its lease runs for
    // 2 s): every one finds the connection refused first.
    let mut requests = tokio::task::JoinSet::new();
    for name in on_w1.clone() {
        let c = c.clone();
        requests.spawn(async move {
            let answer = to_actor(&c, ingress, &name, "POST", "/").await;
            (name, answer)
        });
    }
    let answers: BTreeMap<String, _> = requests.join_all().await.into_iter().collect();
    for (name, answer) in &answers {
        assert_eq!(answer.status, 200, "{name} was not held: {answer:?}");
        assert_eq!(count(answer), 4, "{name}: applied once, on top of 3");
    }
    for name in &on_w1 {
        let info = wait_for_actor(&d, name, "moved to w2", |info| info["worker"] == "w2");
        assert_eq!(info["worker"], "w2", "{info}");
    }
}
