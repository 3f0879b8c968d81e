//! Requests for the actors of a dead worker are held, not refused (issue
//! 32, item 2): after `kill -9` of a cluster worker its actors' requests
//! find the connection refused, then the worker declared lost and the
//! actors waiting for a host; each request waits (like one at a closed
//! gate, up to `--hold-timeout`) and is served once its actor is placed
//! again — never answered 503 while the re-placement is pending, never
//! applied twice.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use stasis_test_util::http::Http;

use crate::fencing::wait_for_actor;
use crate::replicas::{ONE_CLUSTER, deployment};
use crate::support::{Answer, client, count, send, to_actor};

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

/// Issue 47, input 9: three workers, `kill -9` of one holding a third of
/// 120 paused actors while twelve clients keep asking for them, through
/// the leader and through a follower: every request is held and then
/// served, each applied once (none answered 503, none lost), within a
/// hold timeout of 8 s (the lease is 2 s). A wave re-places the lost
/// worker's actors a few at a time, those with requests waiting first, and
/// a request held on the leader places its own actor at once; before, all
/// of them were re-placed at once and each was done only near the end of
/// the wave, past the hold timeout for some.
#[tokio::test(flavor = "multi_thread")]
async fn every_request_for_a_lost_workers_paused_actors_is_held_and_served() {
    const ACTORS: usize = 120;
    const CLIENTS: usize = 12;
    let _one = ONE_CLUSTER.lock().await;
    let mut d = deployment(1, 2, 3, &["--hold-timeout", "12s"]);
    d.push_counter(0);
    let c = client();
    let admin = d.replica(0).admin;
    let names: Vec<String> = (0..ACTORS).map(|i| format!("p{i:03}")).collect();
    for name in &names {
        let body = serde_json::json!({ "name": name, "template": "counter" });
        let reply = send(
            &c,
            admin,
            "POST",
            "localhost",
            "/v1/actors",
            body.to_string().into(),
        )
        .await;
        assert_eq!(reply.status, 201, "{name}: {reply:?}");
        let answer = to_actor(&c, d.replica(0).ingress, name, "POST", "/").await;
        assert_eq!(count(&answer), 1, "{name}: {answer:?}");
        let pause = format!("/v1/actors/{name}/pause");
        let reply = send(&c, admin, "POST", "localhost", &pause, Vec::new()).await;
        assert_eq!(reply.status, 200, "{name}: {reply:?}");
    }
    let listed = d.cli_json(0, &["actor", "list"]);
    let (victim, lost) = busiest_worker(listed.as_array().expect("a list"));
    assert!(lost.len() >= ACTORS / 4, "{victim} holds {lost:?}");
    let ingresses = [d.replica(0).ingress, d.replica(1).ingress];
    d.kill_worker(&victim);
    let answers = post_to_each(&c, &lost, CLIENTS, ingresses, Instant::now()).await;
    assert_eq!(answers.len(), lost.len());
    let refused = not_served(&answers);
    assert!(
        refused.is_empty(),
        "{} of {} lost actors were not served: {refused:#?}",
        refused.len(),
        lost.len()
    );
    for (name, answer, _) in &answers {
        assert_eq!(count(answer), 2, "{name}: applied once, on top of 1");
    }
}

/// The worker holding the most of the `listed` actors (`GET /v1/actors`
/// or `actor list -o json`, each asserted paused), and those actors.
pub(crate) fn busiest_worker(listed: &[serde_json::Value]) -> (String, Vec<String>) {
    let mut by_worker: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for actor in listed {
        assert_eq!(actor["state"], "paused", "{actor}");
        let worker = actor["worker"].as_str().expect("worker").to_owned();
        let name = actor["name"].as_str().expect("name").to_owned();
        by_worker.entry(worker).or_default().push(name);
    }
    by_worker
        .into_iter()
        .max_by_key(|(_, names)| names.len())
        .expect("placed actors")
}

/// `clients` clients POST once to each of `names` between them, each to its
/// share one after the other, alternating between the two `ingresses`;
/// each answer with how long after `since` it came.
pub(crate) async fn post_to_each(
    c: &Http,
    names: &[String],
    clients: usize,
    ingresses: [SocketAddr; 2],
    since: Instant,
) -> Vec<(String, Answer, Duration)> {
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..clients {
        let (c, share): (_, Vec<String>) = (
            c.clone(),
            names.iter().skip(k).step_by(clients).cloned().collect(),
        );
        tasks.spawn(async move {
            let mut answers = Vec::new();
            for (i, name) in share.into_iter().enumerate() {
                let ingress = ingresses[(k + i) % 2];
                let answer = to_actor(&c, ingress, &name, "POST", "/").await;
                answers.push((name, answer, since.elapsed()));
            }
            answers
        });
    }
    tasks.join_all().await.into_iter().flatten().collect()
}

/// "name: status body" of each answer of [`post_to_each`] that is not a 200.
pub(crate) fn not_served(answers: &[(String, Answer, Duration)]) -> Vec<String> {
    answers
        .iter()
        .filter(|(_, a, _)| a.status != 200)
        .map(|(name, a, _)| format!("{name}: {} {}", a.status, a.body))
        .collect()
}
