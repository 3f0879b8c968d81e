//! Labels, filters and pages of the actors list (issue 49, item 2),
//! through the real binary: actors are created and forked with labels and
//! relabelled (`actor label`), the labels survive a restart (SQLite) and
//! live in etcd (cluster mode, through a follower); `actor list` selects
//! by label, template and state; pages of 10,000 actors return each actor
//! that lives through the listing exactly once while others are created
//! and deleted; bad labels, limits and tokens are 400s that name the rule.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use stasis_test_util::admin::call;
use stasis_test_util::http::Http;

use crate::replicas::{ONE_CLUSTER, deployment};
use crate::support::{Server, client, names_in};

/// How many actors the paging test holds.
const ACTORS: usize = 10_000;

/// Creates `name` from `template` with `labels` over the admin API.
async fn create(c: &Http, server: &Server, name: &str, template: &str, labels: &Value) {
    let body = json!({ "name": name, "template": template, "labels": labels });
    let reply = call(c, server.admin, "POST", "/v1/actors", Some(&body)).await;
    assert_eq!(reply.status, 201, "{name}: {}", reply.text());
}

/// Every page of `GET /v1/actors?{query}` with `limit`, in order, with the
/// names of each; `between` runs after each page (the listing goes on
/// while it changes the actors).
async fn pages(
    c: &Http,
    server: &Server,
    query: &str,
    limit: usize,
    mut between: impl AsyncFnMut(usize),
) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut path = format!("/v1/actors?limit={limit}");
        if !query.is_empty() {
            path = format!("{path}&{query}");
        }
        if let Some(token) = &token {
            path = format!("{path}&continue={token}");
        }
        let reply = call(c, server.admin, "GET", &path, None).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.text());
        let page: Value = serde_json::from_slice(&reply.body).expect("JSON");
        let names = names_in(&page);
        assert!(names.len() <= limit, "{path}: {} actors", names.len());
        out.push(names);
        between(out.len()).await;
        token = reply
            .headers
            .get("stasis-continue")
            .map(|v| v.to_str().expect("ascii").to_owned());
        if token.is_none() {
            return out;
        }
    }
}

/// 10,000 actors, a third labelled `tier=gold`: pages of 700 through the
/// label's index and pages of 1,000 through all of them each return every
/// actor that lives through the listing exactly once, in name order, while
/// actors are created and deleted between pages; filters by template and
/// state select exactly their actors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_return_each_actor_once_while_actors_come_and_go() {
    let server = Server::start(&["--workers", "1", "--max-live", "64"]);
    server.push("counter");
    server.push("kv");
    let c = client();
    let mut creates = tokio::task::JoinSet::new();
    let gold = |i: usize| i.is_multiple_of(3);
    let names: Vec<String> = (0..ACTORS).map(|i| format!("a-{i:05}")).collect();
    for chunk in names.chunks(ACTORS / 16) {
        let (c, admin, chunk) = (c.clone(), server.admin, chunk.to_vec());
        creates.spawn(async move {
            for name in chunk {
                let i: usize = name[2..].parse().expect("number");
                let labels = json!({ "tier": if gold(i) { "gold" } else { "free" }, "shard": (i % 10).to_string() });
                let template = if i.is_multiple_of(500) { "kv" } else { "counter" };
                let body = json!({ "name": name, "template": template, "labels": labels });
                let reply = call(&c, admin, "POST", "/v1/actors", Some(&body)).await;
                assert_eq!(reply.status, 201, "{name}: {}", reply.text());
            }
        });
    }
    creates.join_all().await;

    // Between pages: delete three of the label's actors (some already
    // listed, some not yet) and create three gold ones.
    let doomed: Vec<String> = (0..ACTORS)
        .filter(|i| gold(*i) && i.is_multiple_of(97))
        .map(|i| format!("a-{i:05}"))
        .collect();
    let mut deleted = BTreeSet::new();
    let mut created = BTreeSet::new();
    let gold_pages = pages(&c, &server, "label=tier%3Dgold", 700, async |page| {
        for name in doomed.iter().skip(page * 3).take(3) {
            let reply = call(
                &c,
                server.admin,
                "DELETE",
                &format!("/v1/actors/{name}"),
                None,
            )
            .await;
            assert_eq!(reply.status, 204, "{name}: {}", reply.text());
            deleted.insert(name.clone());
        }
        for k in 0..3 {
            let name = format!("b-{page}-{k}");
            create(&c, &server, &name, "counter", &json!({ "tier": "gold" })).await;
            created.insert(name);
        }
    })
    .await;
    let listed: Vec<String> = gold_pages.concat();
    let unique: BTreeSet<&String> = listed.iter().collect();
    assert_eq!(unique.len(), listed.len(), "an actor listed twice");
    assert!(listed.windows(2).all(|w| w[0] < w[1]), "not in name order");
    let lived: BTreeSet<String> = (0..ACTORS)
        .filter(|i| gold(*i))
        .map(|i| format!("a-{i:05}"))
        .filter(|n| !deleted.contains(n))
        .collect();
    let listed_set: BTreeSet<String> = listed.iter().cloned().collect();
    assert!(
        lived.is_subset(&listed_set),
        "missing: {:?}",
        lived.difference(&listed_set).take(5).collect::<Vec<_>>()
    );
    let allowed: BTreeSet<String> = lived
        .iter()
        .chain(&deleted)
        .chain(&created)
        .cloned()
        .collect();
    assert!(
        listed_set.is_subset(&allowed),
        "listed what it should not: {:?}",
        listed_set.difference(&allowed).take(5).collect::<Vec<_>>()
    );

    // All actors, a thousand a page, none changing: each exactly once.
    let all: Vec<String> = pages(&c, &server, "", 1000, async |_| {}).await.concat();
    let expected: BTreeSet<String> = names
        .iter()
        .filter(|n| !deleted.contains(*n))
        .chain(&created)
        .cloned()
        .collect();
    assert_eq!(all.len(), expected.len());
    assert_eq!(all.iter().cloned().collect::<BTreeSet<_>>(), expected);

    // Filters: two labels, a template, a state.
    let both = pages(
        &c,
        &server,
        "label=tier%3Dgold&label=shard%3D3",
        5000,
        async |_| {},
    )
    .await
    .concat();
    let want: Vec<String> = (0..ACTORS)
        .filter(|i| gold(*i) && i % 10 == 3)
        .map(|i| format!("a-{i:05}"))
        .filter(|n| !deleted.contains(n))
        .collect();
    assert_eq!(both, want);
    let kv = pages(&c, &server, "template=kv", 5000, async |_| {})
        .await
        .concat();
    let want: Vec<String> = (0..ACTORS)
        .step_by(500)
        .map(|i| format!("a-{i:05}"))
        .filter(|n| !deleted.contains(n))
        .collect();
    assert_eq!(kv, want);
    let reply = call(&c, server.admin, "POST", "/v1/actors/a-00001/pause", None).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let paused = pages(
        &c,
        &server,
        "state=paused&label=shard%3D1&template=counter",
        3,
        async |_| {},
    )
    .await;
    assert!(
        paused.concat().contains(&"a-00001".to_owned()),
        "{paused:?}"
    );
    assert!(paused.iter().all(|p| p.len() <= 3));
}

/// Labels through the CLI: create and fork with labels, `actor label`
/// sets and removes, `actor list` filters and pages and shows VERSION and
/// LABELS; bad labels, limits, states and tokens are refused naming the
/// rule; the labels survive a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_are_set_listed_and_kept_across_a_restart() {
    let server = Server::start(&["--workers", "1"]);
    server.push("counter");
    server.cli_ok(&[
        "actor",
        "create",
        "c1",
        "--template",
        "counter",
        "--label",
        "tier=gold",
        "--label",
        "team=a",
    ]);
    server.cli_ok(&[
        "actor",
        "create",
        "c2",
        "--template",
        "counter",
        "--label",
        "tier=free",
    ]);
    server.cli_ok(&["actor", "create", "c3", "--template", "counter"]);
    let labels = server.cli_json(&["actor", "label", "c1", "tier-", "beta=1"]);
    assert_eq!(labels, json!({ "beta": "1", "team": "a" }));
    let fork = server.cli_json(&[
        "actor", "fork", "c1", "f1", "--label", "team-", "--label", "copy=yes",
    ]);
    assert_eq!(
        fork["labels"],
        json!({ "beta": "1", "copy": "yes" }),
        "{fork}"
    );
    let beta = server.cli_json(&["actor", "list", "--label", "beta=1"]);
    assert_eq!(names_in(&beta), ["c1", "f1"]);
    let table = server.cli_ok(&["actor", "list", "--label", "team=a"]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().expect("header").split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME", "TEMPLATE", "VERSION", "STATE", "WORKER", "EPOCH", "SNAPSHOT", "RESUMES",
            "LABELS"
        ]
    );
    let row: Vec<&str> = lines.next().expect("c1").split_whitespace().collect();
    assert_eq!(
        (row[0], row[2], row[8]),
        ("c1", "1", "beta=1,team=a"),
        "{table}"
    );
    assert!(lines.next().is_none(), "{table}");

    // One page at a time: the token is printed on stderr.
    let first = server.cli(&["actor", "list", "--limit", "2", "-o", "json"]);
    assert!(first.status.success());
    let page: Value = serde_json::from_slice(&first.stdout).expect("JSON");
    assert_eq!(names_in(&page), ["c1", "c2"]);
    let stderr = String::from_utf8_lossy(&first.stderr);
    let token = stderr
        .trim()
        .strip_prefix("more actors: repeat with --continue ")
        .unwrap_or_else(|| panic!("{stderr}"));
    let rest = server.cli_json(&["actor", "list", "--limit", "2", "--continue", token]);
    assert_eq!(names_in(&rest), ["c3", "f1"]);
    // Without --limit the CLI pages through all of them.
    assert_eq!(
        names_in(&server.cli_json(&["actor", "list"])),
        ["c1", "c2", "c3", "f1"]
    );

    // Refusals name what is wrong and change nothing.
    for (args, says) in [
        (vec!["actor", "label", "c2", "bad key=1"], "only a-z"),
        (vec!["actor", "list", "--state", "asleep"], "is not one of"),
        (
            vec!["actor", "list", "--limit", "5", "--continue", "xyz"],
            "not a token",
        ),
        (
            vec!["actor", "list", "--limit", "5001"],
            "largest page, 5000",
        ),
        (vec!["actor", "label", "nope", "a=1"], "no actor named"),
    ] {
        let out = server.cli(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(says),
            "{args:?}: {stderr}"
        );
    }
    let c = client();
    let many: BTreeMap<String, String> =
        (0..17).map(|i| (format!("k{i}"), "v".to_owned())).collect();
    let reply = call(
        &c,
        server.admin,
        "PATCH",
        "/v1/actors/c2/labels",
        Some(&json!(many)),
    )
    .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(
        reply.text().contains("at most 16 labels"),
        "{}",
        reply.text()
    );
    let body = json!({ "name": "c9", "template": "counter", "labels": { "-x": "1" } });
    let reply = call(&c, server.admin, "POST", "/v1/actors", Some(&body)).await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(
        reply
            .text()
            .contains("must start and end with a letter or digit"),
        "{}",
        reply.text()
    );
    assert_eq!(
        server.cli_json(&["actor", "get", "c2"])["labels"],
        json!({ "tier": "free" })
    );
    assert_eq!(
        server.cli(&["actor", "get", "c9"]).status.code(),
        Some(1),
        "no c9 was made"
    );

    let server = server.restart(&["--workers", "1"]);
    assert_eq!(
        server.cli_json(&["actor", "get", "c1"])["labels"],
        json!({ "beta": "1", "team": "a" })
    );
    assert_eq!(
        names_in(&server.cli_json(&["actor", "list", "--label", "copy=yes"])),
        ["f1"]
    );
}

/// Cluster mode: labels set through a follower are kept in etcd, and the
/// follower's listing (answered by the leader) selects by them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_live_in_etcd_and_list_through_a_follower() {
    let _one = ONE_CLUSTER.lock().await;
    let d = deployment(1, 2, 1, &[]);
    d.push_counter(0);
    let leader = d.leader();
    let follower = 1 - leader;
    for (name, tier) in [("x1", "gold"), ("x2", "free"), ("x3", "gold")] {
        d.cli_ok(
            follower,
            &[
                "actor",
                "create",
                name,
                "--template",
                "counter",
                "--label",
                &format!("tier={tier}"),
            ],
        );
    }
    d.cli_ok(follower, &["actor", "label", "x3", "tier=free"]);
    assert_eq!(
        names_in(&d.cli_json(follower, &["actor", "list", "--label", "tier=gold"])),
        ["x1"]
    );
    assert_eq!(
        names_in(&d.cli_json(
            leader,
            &["actor", "list", "--label", "tier=free", "--limit", "1"]
        )),
        ["x2"]
    );
    assert_eq!(
        d.cli_json(follower, &["actor", "get", "x3"])["labels"],
        json!({ "tier": "free" })
    );
}
