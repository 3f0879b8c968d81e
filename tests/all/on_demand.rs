//! Actors created on first use (issue 49, item 1): with `stasis namespace
//! on-demand NS --template T`, a request to an unknown actor of the
//! namespace creates it from T's newest version, exactly once however many
//! first requests race (each applied once on the one actor), within the
//! namespace's `max_actors`; without it (or after `--off`) an unknown
//! name is 404; a follower replica has the leader create it.

use std::collections::BTreeSet;

use crate::replicas::{ONE_CLUSTER, deployment};
use crate::support::{Server, client, count, names_in, to_actor};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_actors_are_created_on_first_use_once_within_the_quota() {
    let server = Server::start(&["--workers", "1"]);
    server.push("counter");
    let c = client();
    // Off: an unknown name is 404, and nothing is made.
    let unknown = to_actor(&c, server.ingress, "anything", "POST", "/").await;
    assert_eq!(unknown.status, 404, "{unknown:?}");
    // A template that does not exist, or neither flag: refused.
    let missing = server.cli(&["namespace", "on-demand", "default", "--template", "nope"]);
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        !missing.status.success() && stderr.contains("no template named \"nope\""),
        "{stderr}"
    );
    assert!(
        !server
            .cli(&["namespace", "on-demand", "default"])
            .status
            .success()
    );
    let set = server.cli_json(&["namespace", "on-demand", "default", "--template", "counter"]);
    assert_eq!(set["on_demand"], "counter", "{set}");
    assert_eq!(
        server.cli_json(&["namespace", "get", "default"])["on_demand"],
        "counter"
    );
    // `anything.actors.localhost` answers, and keeps its state.
    for expected in 1..=3 {
        let answer = to_actor(&c, server.ingress, "anything", "POST", "/").await;
        assert_eq!(count(&answer), expected, "{answer:?}");
    }
    let made = server.cli_json(&["actor", "get", "anything"]);
    assert_eq!(made["template"], "counter", "{made}");
    // Sixteen first requests at once to one new name: one actor, each
    // request applied once on it.
    let mut racing = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let c = c.clone();
        let ingress = server.ingress;
        racing.spawn(async move { to_actor(&c, ingress, "room-1", "POST", "/").await });
    }
    let counts: BTreeSet<u64> = racing.join_all().await.iter().map(count).collect();
    assert_eq!(counts, (1..=16).collect(), "each applied once on one actor");
    let names = names_in(&server.cli_json(&["actor", "list"]));
    assert_eq!(names, ["anything", "room-1"], "one actor per name");
    // A name that cannot be an actor's is refused as before, nothing made.
    let bad = to_actor(&c, server.ingress, "Bad_Name", "POST", "/").await;
    assert_eq!(bad.status, 404, "{bad:?}");
    assert!(
        bad.body.contains("is not an actor or namespace name"),
        "{bad:?}"
    );
    let listed = server.cli_json(&["actor", "list"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");
    // Within the namespace's quota: the third actor of team-q is 403.
    let counter = crate::support::demo("counter");
    server.cli_ok(&[
        "-n",
        "team-q",
        "template",
        "push",
        "counter",
        counter.to_str().expect("utf-8"),
    ]);
    server.cli_ok(&["namespace", "quota", "team-q", "--max-actors", "2"]);
    server.cli_ok(&["namespace", "on-demand", "team-q", "--template", "counter"]);
    for name in ["a.team-q", "b.team-q"] {
        assert_eq!(
            count(&to_actor(&c, server.ingress, name, "POST", "/").await),
            1
        );
    }
    let over = to_actor(&c, server.ingress, "c.team-q", "POST", "/").await;
    assert_eq!(over.status, 403, "{over:?}");
    assert!(
        over.body.contains("max_actors") || over.body.contains("max-actors"),
        "{over:?}"
    );
    // Off again: a new name is 404; those made stay.
    let off = server.cli_json(&["namespace", "on-demand", "default", "--off"]);
    assert!(off["on_demand"].is_null(), "{off}");
    wait_for_404(&server, "fresh").await;
    assert_eq!(
        count(&to_actor(&c, server.ingress, "anything", "POST", "/").await),
        4
    );
}

/// Waits (the policy is kept for a second) until `actor` is 404.
async fn wait_for_404(server: &Server, actor: &str) {
    let c = client();
    stasis_test_util::wait::until_async(
        "the setting to apply",
        std::time::Duration::from_secs(5),
        async || {
            (to_actor(&c, server.ingress, actor, "GET", "/").await.status == 404).then_some(())
        },
    )
    .await;
}

/// In a cluster a follower replica has the leader create the actor: first
/// requests through both replicas at once make one actor.
#[tokio::test(flavor = "multi_thread")]
async fn a_follower_has_the_leader_create_an_actor_on_first_use() {
    let _one = ONE_CLUSTER.lock().await;
    let d = deployment(1, 2, 1, &[]);
    d.push_counter(0);
    let leader = d.leader();
    let follower = 1 - leader;
    d.cli_ok(
        follower,
        &["namespace", "on-demand", "default", "--template", "counter"],
    );
    let c = client();
    let ingresses = [d.replica(0).ingress, d.replica(1).ingress];
    // The follower keeps the policy up to a second: its first answer may
    // still be 404 until then.
    stasis_test_util::wait::until_async(
        "the follower to create on first use",
        std::time::Duration::from_secs(5),
        async || {
            let answer = to_actor(&c, ingresses[follower], "first", "POST", "/").await;
            (answer.status == 200).then_some(())
        },
    )
    .await;
    let mut racing = tokio::task::JoinSet::new();
    for i in 0..12 {
        let c = c.clone();
        let ingress = ingresses[i % 2];
        racing.spawn(async move { to_actor(&c, ingress, "shared", "POST", "/").await });
    }
    let counts: BTreeSet<u64> = racing.join_all().await.iter().map(count).collect();
    assert_eq!(counts, (1..=12).collect(), "each applied once on one actor");
    let listed = d.cli_json(leader, &["actor", "list"]);
    assert_eq!(names_in(&listed), ["first", "shared"], "{listed}");
}
