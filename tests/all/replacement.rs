//! Re-placement of a lost worker's paused actors at scale (issue 50, item
//! 2; the 10,000-actor bench scaled to 1,000 here): two workers, 1,000
//! paused actors, `kill -9` of the worker holding about half of them while
//! sixteen clients ask for every one of them through both replicas. Every
//! request is held and then served — none answered 503 — and applied once
//! (the count each answer gives is exactly one more than before: no
//! actor served by two workers, no request applied twice); afterwards
//! every actor is placed on the surviving worker. The time from the kill
//! to the last answer is printed (`STASIS_TEST_LOG=1` shows the leader's
//! log), for BENCHMARKS.md section 36.

use std::time::Instant;

use futures_util::StreamExt as _;
use stasis_test_util::admin;

use stasis_test_util::cluster::{Deployment, Setup, Store};

use crate::held::{busiest_worker, not_served, post_to_each};
use crate::replicas::{LEASE_TTL, ONE_CLUSTER, echo};
use crate::support::STASIS;
use crate::support::{client, count, send, to_actor};

/// Actors in the test (the 10,000, scaled down for the suite;
/// `STASIS_REPLACEMENT_ACTORS=10000` runs the figure).
fn actors() -> usize {
    std::env::var("STASIS_REPLACEMENT_ACTORS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000)
}
/// Clients asking for the lost actors at once.
const CLIENTS: usize = 16;
/// Creates and pauses in flight while the actors are set up.
const IN_FLIGHT: usize = 16;

/// Every actor, page after page (`GET /v1/actors?limit=5000`, then the
/// `stasis-continue` token).
async fn list(
    c: &stasis_test_util::http::Http,
    admin: std::net::SocketAddr,
) -> Vec<serde_json::Value> {
    let started = Instant::now();
    let (mut all, mut next) = (Vec::new(), None::<String>);
    loop {
        let path = match &next {
            Some(token) => format!("/v1/actors?limit=5000&continue={token}"),
            None => "/v1/actors?limit=5000".to_owned(),
        };
        let reply = admin::call(c, admin, "GET", &path, None).await;
        assert_eq!(reply.status, 200, "{path}: {reply:?}");
        let page: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
        all.extend(page.as_array().expect("a list").iter().cloned());
        next = reply
            .headers
            .get("stasis-continue")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if next.is_none() {
            break;
        }
    }
    eprintln!("listed {} actors in {:?}", all.len(), started.elapsed());
    all
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_paused_actors_of_a_lost_worker_are_all_served_once() {
    let _one = ONE_CLUSTER.lock().await;
    // A `file://` store: s3s-fs lists a prefix by walking the whole bucket,
    // which at this many objects (tens of ms a listing) would time the
    // server, not Stasis (the other cluster tests run on it).
    let mut setup = Setup::new(1, 2, 2);
    setup.store = Store::File;
    setup.lease_ttl = Some(LEASE_TTL.to_owned());
    setup.flags = vec!["--hold-timeout".to_owned(), "60s".to_owned()];
    setup.echo = echo();
    let mut d = Deployment::start(STASIS, setup);
    d.push_counter(0);
    let c = client();
    let admin = d.replica(0).admin;
    let ingress = d.replica(0).ingress;
    let names: Vec<String> = (0..actors()).map(|i| format!("r{i:05}")).collect();
    // Each actor created, asked once (count 1) and paused.
    let set_up = futures_util::stream::iter(names.clone())
        .map(|name| {
            let c = c.clone();
            async move {
                let reply = admin::create_actor(&c, admin, &name, "counter").await;
                assert_eq!(reply.status, 201, "{name}: {reply:?}");
                let answer = to_actor(&c, ingress, &name, "POST", "/").await;
                assert_eq!(count(&answer), 1, "{name}: {answer:?}");
                let pause = format!("/v1/actors/{name}/pause");
                let reply = send(&c, admin, "POST", "localhost", &pause, Vec::new()).await;
                assert_eq!(reply.status, 200, "{name}: {reply:?}");
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<()>>();
    set_up.await;
    let listed = list(&c, admin).await;
    let (victim, lost) = busiest_worker(&listed);
    assert!(
        lost.len() >= names.len() / 3,
        "{victim} holds {}",
        lost.len()
    );
    let ingresses = [d.replica(0).ingress, d.replica(1).ingress];
    let killed = Instant::now();
    d.kill_worker(&victim);
    let answers = post_to_each(&c, &lost, CLIENTS, ingresses, killed).await;
    let slowest = answers
        .iter()
        .map(|(_, _, at)| *at)
        .max()
        .unwrap_or_default();
    eprintln!(
        "{} actors of the lost worker {victim}: the last answered {slowest:?} after the kill",
        lost.len()
    );
    assert_eq!(answers.len(), lost.len());
    let refused = not_served(&answers);
    assert!(
        refused.is_empty(),
        "{} of {} lost actors were not served: {:#?}",
        refused.len(),
        lost.len(),
        &refused[..refused.len().min(20)]
    );
    for (name, answer, _) in &answers {
        assert_eq!(count(answer), 2, "{name}: applied once, on top of 1");
    }
    let listed = list(&c, admin).await;
    for actor in &listed {
        assert_ne!(actor["worker"], victim.as_str(), "{actor}");
    }
}
