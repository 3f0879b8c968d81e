//! Namespaces through the real binary: `c.team-a.actors.<domain>` and
//! `c.actors.<domain>` are two actors with their own state; `-n/--namespace`
//! scopes the CLI (and `/v1/namespaces/NS/...` the API) to one namespace's
//! actors and templates; an actor calls the actors of its own namespace
//! (others only where they take its calls);
//! names that would reach another namespace's data (`..`, `%2e%2e`, `/`,
//! look-alike letters, a second namespace) are refused; a token made for a
//! namespace acts there only (and reads its own view of /metrics); a namespace's quota holds against
//! concurrent creates, and its request rate is refused with 429, never
//! applied.

use crate::support::{Server, client, count, demo, raw, raw_status, to_actor};

pub(crate) const ADMIN: &str = "ns-admin-secret";

/// `stasis -n NS ARGS` with the admin token.
pub(crate) fn in_ns(server: &Server, ns: &str, token: &str, args: &[&str]) -> std::process::Output {
    crate::support::STASIS
        .command()
        .args(["-n", ns])
        .args(args)
        .env("STASIS_ADMIN", server.admin_url())
        .env("STASIS_ADMIN_TOKEN", token)
        .output()
        .expect("run stasis")
}

/// `stasis -n NS ARGS` with the admin token, asserting success; stdout.
pub(crate) fn admin_ok(server: &Server, ns: &str, args: &[&str]) -> String {
    ok(
        &in_ns(server, ns, ADMIN, args),
        &format!("-n {ns} {args:?}"),
    )
}

/// Pushes the counter and creates actor `c` from it in each namespace.
pub(crate) fn counter_c_in(server: &Server, namespaces: &[&str]) {
    let counter = demo("counter");
    let counter = counter.to_str().expect("utf-8");
    for ns in namespaces {
        admin_ok(server, ns, &["template", "push", "counter", counter]);
        admin_ok(
            server,
            ns,
            &["actor", "create", "c", "--template", "counter"],
        );
    }
}

fn ok(out: &std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn failed(out: &std::process::Output, what: &str) -> String {
    assert!(!out.status.success(), "{what} passed");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The names in an `actor list -o json` answer.
fn names(list: &str) -> Vec<String> {
    let list: serde_json::Value = serde_json::from_str(list).expect("JSON");
    list.as_array()
        .expect("array")
        .iter()
        .map(|a| a["name"].as_str().expect("name").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_name_in_two_namespaces_is_two_actors_and_each_stays_in_its_own() {
    let server = Server::start(&["--admin-token", ADMIN]);
    let counter = demo("counter");
    let counter = counter.to_str().expect("utf-8");
    let caller = demo("caller");
    let caller = caller.to_str().expect("utf-8");
    counter_c_in(&server, &["default", "team-a"]);
    admin_ok(&server, "team-a", &["template", "push", "caller", caller]);
    admin_ok(
        &server,
        "team-a",
        &["actor", "create", "front", "--template", "caller"],
    );

    // Two counters, by host name and by header.
    let c = client();
    for expected in 1..=2 {
        assert_eq!(
            count(&to_actor(&c, server.ingress, "c.team-a", "POST", "/").await),
            expected
        );
    }
    assert_eq!(
        count(&to_actor(&c, server.ingress, "c", "POST", "/").await),
        1
    );
    let by_header = raw(
        server.ingress,
        "POST / HTTP/1.1\r\nHost: x\r\nstasis-actor: team-a/c\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(by_header.contains("count: 3"), "{by_header}");
    assert_eq!(
        count(&to_actor(&c, server.ingress, "c.default", "POST", "/").await),
        2
    );

    // Lists show one namespace's actors and templates, by full name.
    let listed = admin_ok(&server, "team-a", &["actor", "list", "-o", "json"]);
    assert_eq!(names(&listed), ["c.team-a", "front.team-a"]);
    let listed = admin_ok(&server, "default", &["actor", "list", "-o", "json"]);
    assert_eq!(names(&listed), ["c"]);
    let templates = admin_ok(&server, "team-a", &["template", "list", "-o", "json"]);
    assert_eq!(names(&templates), ["caller.team-a", "counter.team-a"]);
    // The short name and the full name are the same actor there.
    let got = admin_ok(
        &server,
        "team-a",
        &["actor", "get", "c.team-a", "-o", "json"],
    );
    assert!(got.contains("\"template\": \"counter.team-a\""), "{got}");
    // Each has its own files.
    admin_ok(&server, "team-a", &["actor", "pause", "c"]);
    assert!(server.data_dir.join("snapshots").join("c.team-a").is_dir());

    // A call goes to the caller's namespace: c.team-a counts 4, c stays.
    let answer = to_actor(&c, server.ingress, "front.team-a", "POST", "/call/c").await;
    assert_eq!(count(&answer), 4, "{answer:?}");
    assert_eq!(
        count(&to_actor(&c, server.ingress, "c", "POST", "/").await),
        3
    );
    // ... and leaves it only where another namespace takes its calls
    // (`namespace_policy`): the default namespace does not.
    let answer = to_actor(
        &c,
        server.ingress,
        "front.team-a",
        "POST",
        "/call/c.default",
    )
    .await;
    assert_eq!(answer.status, 403, "{answer:?}");
    assert!(
        answer
            .body
            .contains("does not take calls from namespace team-a"),
        "{answer:?}"
    );

    // A template of another namespace is not there.
    admin_ok(
        &server,
        "default",
        &["template", "push", "only-default", counter],
    );
    let refused = failed(
        &in_ns(
            &server,
            "team-a",
            ADMIN,
            &["actor", "create", "d", "--template", "only-default"],
        ),
        "create from another namespace's template",
    );
    assert!(refused.contains("404"), "{refused}");
    let refused = failed(
        &in_ns(
            &server,
            "team-a",
            ADMIN,
            &["actor", "create", "d", "--template", "counter.team-b"],
        ),
        "create naming another namespace",
    );
    assert!(
        refused.contains("namespace team-b, not team-a"),
        "{refused}"
    );

    // Deleting one leaves the other.
    admin_ok(&server, "team-a", &["actor", "delete", "c"]);
    assert_eq!(
        count(&to_actor(&c, server.ingress, "c", "POST", "/").await),
        4
    );
    let gone = to_actor(&c, server.ingress, "c.team-a", "POST", "/").await;
    assert_eq!(gone.status, 404, "{gone:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_would_reach_another_namespace_are_refused() {
    let server = Server::start(&["--admin-token", ADMIN]);
    for ns in ["..", ".", "a/b", "%2e%2e", "t\u{0435}am", "Team", "a.b"] {
        let stderr = failed(&in_ns(&server, ns, ADMIN, &["actor", "list"]), ns);
        assert!(stderr.contains("400"), "{ns:?}: {stderr}");
    }
    for name in ["..", "a/b", "c.team-a", "c.default", "%2e%2e"] {
        let stderr = failed(
            &in_ns(
                &server,
                "team-b",
                ADMIN,
                &["actor", "create", name, "--template", "t"],
            ),
            name,
        );
        assert!(
            stderr.contains("400") || stderr.contains("404"),
            "{name:?}: {stderr}"
        );
    }
    let auth = format!("Authorization: Bearer {ADMIN}\r\n");
    for path in [
        "/v1/namespaces/%2e%2e/actors",
        "/v1/namespaces/../actors",
        "/v1/namespaces/a/workers",
        "/v1/namespaces/a/actors/b.c",
        "/v1/actors/b.c",
    ] {
        let answer = raw(
            server.admin,
            &format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"),
        )
        .await;
        let status = raw_status(&answer);
        assert!(status == 400 || status == 404, "{path}: {answer}");
    }
    let c = client();
    for host in ["a.b.c", "a..b", "a.-b", "a.b_c"] {
        let answer = to_actor(&c, server.ingress, host, "GET", "/").await;
        assert_eq!(answer.status, 404, "{host}: {answer:?}");
    }
    let files: Vec<_> = std::fs::read_dir(server.data_dir.join("snapshots"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(files.is_empty(), "{files:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespaced_token_acts_in_its_namespace_only() {
    let server = Server::start(&["--admin-token", ADMIN]);
    counter_c_in(&server, &["team-a", "team-b"]);
    let token = |ns: &str, role: &str| {
        let made = ok(
            &in_ns(
                &server,
                ns,
                ADMIN,
                &["token", "create", "--role", role, "-o", "json"],
            ),
            "token create",
        );
        let made: serde_json::Value = serde_json::from_str(&made).expect("JSON");
        assert_eq!(made["namespace"], ns, "{made}");
        made["token"].as_str().expect("token").to_owned()
    };
    let a_admin = token("team-a", "namespace-admin");
    let a_reader = token("team-a", "reader");

    // The namespace-admin of team-a runs team-a.
    ok(
        &in_ns(&server, "team-a", &a_admin, &["actor", "pause", "c"]),
        "pause",
    );
    ok(
        &in_ns(
            &server,
            "team-a",
            &a_admin,
            &["actor", "create", "d", "--template", "counter"],
        ),
        "create",
    );
    // ... and cannot touch team-b, the default namespace, or the cluster.
    for (ns, args) in [
        ("team-b", &["actor", "pause", "c"][..]),
        ("team-b", &["actor", "list"]),
        ("default", &["actor", "list"]),
        ("team-a", &["gc"]),
        ("team-a", &["worker", "list"]),
        ("team-a", &["token", "list"]),
    ] {
        let stderr = failed(
            &in_ns(&server, ns, &a_admin, args),
            &format!("{ns} {args:?}"),
        );
        assert!(stderr.contains("403"), "{ns} {args:?}: {stderr}");
        assert!(stderr.contains("is for namespace team-a"), "{stderr}");
    }
    // The reader of team-a reads team-a only, and changes nothing.
    let listed = ok(
        &in_ns(
            &server,
            "team-a",
            &a_reader,
            &["actor", "list", "-o", "json"],
        ),
        "list",
    );
    assert_eq!(names(&listed), ["c.team-a", "d.team-a"]);
    let stderr = failed(
        &in_ns(&server, "team-a", &a_reader, &["actor", "delete", "c"]),
        "delete",
    );
    assert!(stderr.contains("needs role writer"), "{stderr}");
    // Its /metrics is team-a's view: team-a's templates' series, none of
    // team-b's or the server's own.
    let c = client();
    for actor in ["c.team-a", "c.team-b"] {
        count(&to_actor(&c, server.ingress, actor, "POST", "/").await);
    }
    let get = |path: &str, token: &str| {
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        );
        async move { raw(server.admin, &request).await }
    };
    let full = get("/metrics", ADMIN).await;
    assert!(full.contains("template=\"counter.team-b\""), "{full}");
    assert!(full.contains("\nstasis_actors{"), "{full}");
    for (path, token) in [
        ("/metrics", a_reader.as_str()),
        ("/v1/namespaces/team-a/metrics", ADMIN),
    ] {
        let seen = get(path, token).await;
        assert_eq!(raw_status(&seen), 200, "{path}: {seen}");
        assert!(
            seen.contains("template=\"counter.team-a\""),
            "{path}: {seen}"
        );
        assert!(!seen.contains("team-b"), "{path}: {seen}");
        assert!(!seen.contains("\nstasis_actors{"), "{path}: {seen}");
    }
    // The list of namespaces shows it its own only.
    let listed = get("/v1/namespaces", &a_reader).await;
    assert_eq!(raw_status(&listed), 200, "{listed}");
    assert!(
        listed.contains("\"team-a\"") && !listed.contains("team-b"),
        "{listed}"
    );
    let all = get("/v1/namespaces", ADMIN).await;
    assert!(
        all.contains("\"team-b\"") && all.contains("\"default\""),
        "{all}"
    );
    let other = get("/v1/namespaces/team-b/metrics", &a_reader).await;
    assert_eq!(raw_status(&other), 403, "{other}");
    // A bad name under its own namespace is a 400 saying so, as an
    // admin is told; under another namespace, still a 403.
    for token in [a_reader.as_str(), ADMIN] {
        let bad = get("/v1/namespaces/team-a/actors/c1.team-b", token).await;
        assert_eq!(raw_status(&bad), 400, "{bad}");
    }
    let foreign = get("/v1/namespaces/team-b/actors/c1.team-c", &a_reader).await;
    assert_eq!(raw_status(&foreign), 403, "{foreign}");

    // An admin token is for every namespace; a namespace-admin needs one.
    let stderr = failed(
        &in_ns(
            &server,
            "team-a",
            ADMIN,
            &["token", "create", "--role", "admin"],
        ),
        "admin in a namespace",
    );
    assert!(stderr.contains("namespace-admin"), "{stderr}");
    let out = crate::support::STASIS
        .command()
        .args(["token", "create", "--role", "namespace-admin"])
        .env("STASIS_ADMIN", server.admin_url())
        .env("STASIS_ADMIN_TOKEN", ADMIN)
        .output()
        .expect("run stasis");
    assert!(failed(&out, "namespace-admin without one").contains("needs its namespace"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_holds_against_concurrent_creates_and_a_rate_is_refused_unapplied() {
    let server = Server::start(&[]);
    let counter = demo("counter");
    let counter = counter.to_str().expect("utf-8");
    for ns in ["default", "team-q"] {
        server.cli_ok(&["-n", ns, "template", "push", "counter", counter]);
    }
    let set = server.cli_json(&["namespace", "quota", "team-q", "--max-actors", "10"]);
    assert_eq!(set["quota"]["max_actors"], 10, "{set}");
    // No limit and no --clear: refused, naming the flags; the quota stays
    // (issue 47, input 11: it used to be removed silently).
    let out = server.cli(&["namespace", "quota", "team-q"]);
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--max-actors") && stderr.contains("--clear"),
        "{stderr}"
    );
    let kept = server.cli_json(&["namespace", "get", "team-q"]);
    assert_eq!(kept["quota"]["max_actors"], 10, "{kept}");
    let out = server.cli(&[
        "namespace",
        "quota",
        "team-q",
        "--clear",
        "--max-actors",
        "3",
    ]);
    assert!(!out.status.success(), "--clear with a limit: {out:?}");
    let cleared = server.cli_json(&["namespace", "quota", "team-q", "--clear"]);
    assert!(cleared["quota"].get("max_actors").is_none(), "{cleared}");
    server.cli_json(&["namespace", "quota", "team-q", "--max-actors", "10"]);

    // 50 creates at once against a quota of 10: exactly 10.
    let c = client();
    let creates: Vec<_> = (0..50)
        .map(|i| {
            let c = c.clone();
            let admin = server.admin;
            tokio::spawn(async move {
                let body = serde_json::json!({"name": format!("a{i}"), "template": "counter"});
                let path = "/v1/namespaces/team-q/actors";
                stasis_test_util::admin::call(&c, admin, "POST", path, Some(&body)).await
            })
        })
        .collect();
    let mut created = 0;
    for create in creates {
        let reply = create.await.expect("create task");
        match reply.status {
            201 => created += 1,
            403 => assert!(
                reply.text().contains("quota of 10 actors"),
                "{}",
                reply.text()
            ),
            other => panic!("create answered {other}: {}", reply.text()),
        }
    }
    assert_eq!(created, 10);
    // A quota is an object: an array or an empty body changes nothing.
    for body in [Some(serde_json::json!([5, 7])), None] {
        let path = "/v1/namespaces/team-q/quota";
        let reply =
            stasis_test_util::admin::call(&c, server.admin, "PUT", path, body.as_ref()).await;
        assert_eq!(reply.status, 400, "{}", reply.text());
        assert!(reply.text().contains("JSON object"), "{}", reply.text());
    }
    let kept = server.cli_json(&["namespace", "get", "team-q"]);
    assert_eq!(kept["quota"]["max_actors"], 10, "{kept}");
    let shown = server.cli_json(&["namespace", "get", "team-q"]);
    assert_eq!(shown["actors"], 10, "{shown}");
    let listed = server.cli_json(&["-n", "team-q", "actor", "list"]);
    assert_eq!(listed.as_array().expect("list").len(), 10);
    // Its usage is its actors' as listed: the live ones, their memory,
    // their snapshots.
    let actors = listed.as_array().expect("list");
    let sum = |field: &dyn Fn(&serde_json::Value) -> u64| actors.iter().map(field).sum::<u64>();
    let live = sum(&|a| u64::from(a["state"] == "running"));
    let memory = sum(&|a| a["memory_bytes"].as_u64().expect("memory"));
    let snapshots = sum(&|a| {
        a["snapshots"]
            .as_array()
            .expect("snapshots")
            .iter()
            .map(|s| s["bytes"].as_u64().expect("bytes"))
            .sum()
    });
    assert!(live > 0 && memory > 0 && snapshots > 0, "{listed}");
    assert_eq!(shown["usage"]["live_actors"], live, "{shown}");
    assert_eq!(shown["usage"]["memory_bytes"], memory, "{shown}");
    assert_eq!(shown["usage"]["snapshot_bytes"], snapshots, "{shown}");
    // Forks count too; other namespaces do not.
    let out = server.cli(&["-n", "team-q", "actor", "fork", "a0", "one-more"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("403"));
    server.cli_ok(&["actor", "create", "free", "--template", "counter"]);

    // A rate of 5 a second: a burst of 30 gets some 429s, never applied.
    let name = listed[0]["name"].as_str().expect("name").to_owned();
    server.cli_json(&[
        "namespace",
        "quota",
        "team-q",
        "--max-actors",
        "10",
        "--max-requests-per-second",
        "5",
    ]);
    let (mut answered, mut refused) = (0, 0);
    for _ in 0..30 {
        let answer = to_actor(&c, server.ingress, &name, "POST", "/").await;
        match answer.status {
            200 => answered += 1,
            429 => {
                refused += 1;
                assert_eq!(answer.headers["retry-after"], "1", "{answer:?}");
                assert!(
                    answer.body.contains("max_requests_per_second"),
                    "{answer:?}"
                );
            }
            other => panic!("answered {other}: {answer:?}"),
        }
    }
    assert!(
        answered >= 5 && refused > 0,
        "{answered} answered, {refused} refused"
    );
    // The other namespace's actor is not held back.
    for expected in 1..=20 {
        assert_eq!(
            count(&to_actor(&c, server.ingress, "free", "POST", "/").await),
            expected
        );
    }
    // Once the bucket refills, the next request finds only the answered
    // ones applied.
    // sleep: the rate bucket refills with time.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let next = to_actor(&c, server.ingress, &name, "POST", "/").await;
    assert_eq!(count(&next), answered + 1);
    // The refused ones are counted, under their status.
    let metrics = stasis_test_util::admin::call(&c, server.admin, "GET", "/metrics", None).await;
    let line =
        format!("stasis_requests_total{{template=\"counter.team-q\",status=\"429\"}} {refused}");
    assert!(
        metrics.text().contains(&line),
        "{line} not in {}",
        metrics.text()
    );

    // A quota lowered below what a namespace holds says both numbers.
    server.cli_json(&["namespace", "quota", "team-q", "--max-actors", "8"]);
    let out = server.cli(&[
        "-n",
        "team-q",
        "actor",
        "create",
        "z",
        "--template",
        "counter",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("holds 10 actors, over its quota of 8 (max_actors); delete 3"),
        "{stderr}"
    );
}
