//! Credentials, through the real binary. A separate internal credential
//! (`--internal-token`): workers and the control plane authenticate to
//! each other with it, never with the admin token; the admin token is
//! refused on the internal API (the admin port's `/internal/` routes and a
//! worker's API) and the internal token on the admin API (with a real
//! `worker run`). Scoped tokens (`stasis token`): each role opens only its
//! routes (403 beyond), a revoked or expired token is refused (by every
//! replica of a cluster within the documented bound), none opens the
//! internal API, and the server keeps no token's text.

use std::time::{Duration, Instant};

use stasis_test_util::process::Proc;

use crate::support::{STASIS, Server, count, raw, raw_status, to_actor};

const ADMIN: &str = "admin-secret";
const INTERNAL: &str = "internal-secret";

/// `stasis ARGS` against `server` with bearer token `token`.
fn cli(server: &Server, token: &str, args: &[&str]) -> std::process::Output {
    STASIS
        .command()
        .args(args)
        .env("STASIS_ADMIN", server.admin_url())
        .env("STASIS_ADMIN_TOKEN", token)
        .output()
        .expect("run stasis")
}

fn cli_ok(server: &Server, args: &[&str]) -> String {
    let out = cli(server, ADMIN, args);
    assert!(
        out.status.success(),
        "stasis {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A `worker run` joining `server` with `env` (its tokens).
fn worker(
    server: &Server,
    dir: &std::path::Path,
    name: &str,
    env: &[(&str, &str)],
) -> Result<Proc, String> {
    let mut command = STASIS.worker(&server.admin_url(), name, &dir.join(name));
    command.env_remove("STASIS_ADMIN_TOKEN");
    command.envs(env.iter().copied());
    Proc::start(command, "stasis worker ready", name, false)
}

/// The status of `GET path` at `addr` with bearer `token`.
async fn status(addr: std::net::SocketAddr, path: &str, token: &str) -> u16 {
    raw_status(
        &raw(
            addr,
            &format!(
                "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
            ),
        )
        .await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_internal_token_and_the_admin_token_each_open_only_their_api() {
    let server = Server::start(&[
        "--workers",
        "0",
        "--admin-token",
        ADMIN,
        "--internal-token",
        INTERNAL,
    ]);
    let dir = tempfile::tempdir().expect("tempdir");

    // A worker holding only the admin token cannot join.
    let joined = worker(
        &server,
        dir.path(),
        "w-admin",
        &[("STASIS_ADMIN_TOKEN", ADMIN)],
    );
    let Err(refused) = joined else {
        panic!("a worker with the admin token joined");
    };
    assert!(refused.contains("wrong bearer token"), "{refused}");

    let w = worker(
        &server,
        dir.path(),
        "w1",
        &[("STASIS_INTERNAL_TOKEN", INTERNAL)],
    )
    .expect("a worker with the internal token joins");
    stasis_test_util::wait::until_else("w1 to become ready", Duration::from_secs(10), || {
        let list = cli_ok(&server, &["worker", "list"]);
        if list.contains("ready") {
            Ok(())
        } else {
            Err(list)
        }
    });

    // The control plane reaches the worker with the internal token.
    counter_c(&server);
    let client = crate::support::client();
    assert_eq!(
        count(&to_actor(&client, server.ingress, "c", "POST", "/").await),
        1
    );

    // The internal token opens no admin route, the admin token no
    // internal one.
    let as_internal = cli(&server, INTERNAL, &["actor", "list"]);
    assert!(!as_internal.status.success());
    assert!(
        String::from_utf8_lossy(&as_internal.stderr).contains("401"),
        "{}",
        String::from_utf8_lossy(&as_internal.stderr)
    );
    assert_eq!(status(server.admin, "/v1/actors", INTERNAL).await, 401);
    assert_eq!(status(server.admin, "/v1/actors", ADMIN).await, 200);
    assert_eq!(
        status(server.admin, "/internal/v1/workers", ADMIN).await,
        401
    );
    assert_ne!(
        status(server.admin, "/internal/v1/workers", INTERNAL).await,
        401
    );
    let listen = w.addr("listen=");
    assert_eq!(status(listen, "/internal/v1/actors", ADMIN).await, 401);
    assert_eq!(status(listen, "/internal/v1/actors", INTERNAL).await, 200);
}

#[test]
fn an_internal_token_equal_to_the_admin_token_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Err(stderr) = Server::start_in(
        &dir.path().join("data"),
        &["--admin-token", "same", "--internal-token", "same"],
    ) else {
        panic!("serve started with one token for both");
    };
    assert!(stderr.contains("--internal-token must differ"), "{stderr}");
}

/// Pushes the counter demo and creates actor `c` from it.
fn counter_c(server: &Server) {
    let module = crate::support::demo("counter");
    let module = module.to_str().expect("utf-8");
    cli_ok(server, &["template", "push", "counter", module]);
    cli_ok(server, &["actor", "create", "c", "--template", "counter"]);
}

/// `stasis ARGS -o json` with `token`, asserting success.
fn json_with(server: &Server, token: &str, args: &[&str]) -> serde_json::Value {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    let out = cli(server, token, &args);
    assert!(
        out.status.success(),
        "stasis {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// `stasis ARGS` with `token`, asserting it fails; its stderr.
fn refused(server: &Server, token: &str, args: &[&str]) -> String {
    let out = cli(server, token, args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "stasis {args:?} passed: {stderr}");
    stderr
}

/// A new token of `role` made with the admin token: (id, text).
fn new_token(server: &Server, role: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec!["token", "create", "--role", role];
    args.extend(extra);
    let made = json_with(server, ADMIN, &args);
    assert_eq!(made["role"], role, "{made}");
    let token = made["token"].as_str().expect("the token is shown once");
    let id = made["id"].as_str().expect("id");
    assert!(token.starts_with(&format!("stasis_{id}_")), "{made}");
    (id.to_owned(), token.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_opens_only_its_routes_and_a_revoked_token_nothing() {
    let server = Server::start(&["--admin-token", ADMIN]);
    let module = crate::support::demo("counter");
    let module = module.to_str().expect("utf-8");
    cli_ok(&server, &["template", "push", "counter", module]);
    cli_ok(&server, &["actor", "create", "c", "--template", "counter"]);
    let (reader_id, reader) = new_token(&server, "reader", &["--description", "dashboards"]);
    let (_, writer) = new_token(&server, "writer", &[]);
    let (_, scoped_admin) = new_token(&server, "admin", &[]);

    // A reader reads: lists, one actor, metrics, logs.
    assert_eq!(
        json_with(&server, &reader, &["actor", "list"])[0]["name"],
        "c"
    );
    json_with(&server, &reader, &["actor", "get", "c"]);
    json_with(&server, &reader, &["template", "list"]);
    assert_eq!(status(server.admin, "/metrics", &reader).await, 200);
    assert_eq!(
        status(server.admin, "/v1/actors/c/logs", &reader).await,
        200
    );
    // ... and changes nothing, told which role it lacks.
    for args in [
        &["actor", "pause", "c"][..],
        &["actor", "delete", "c"],
        &["actor", "create", "d", "--template", "counter"],
        &["template", "push", "other", module],
    ] {
        let stderr = refused(&server, &reader, args);
        assert!(stderr.contains("403"), "{args:?}: {stderr}");
        assert!(stderr.contains("needs role writer"), "{args:?}: {stderr}");
    }
    assert!(refused(&server, &reader, &["token", "list"]).contains("needs role admin"));
    assert!(!cli_ok(&server, &["actor", "get", "c"]).contains("paused"));

    // A writer changes actors and templates, not the cluster or tokens.
    json_with(&server, &writer, &["actor", "pause", "c"]);
    json_with(&server, &writer, &["actor", "resume", "c"]);
    json_with(
        &server,
        &writer,
        &["actor", "create", "d", "--template", "counter"],
    );
    for args in [
        &["gc"][..],
        &["rebalance"],
        &["token", "create", "--role", "reader"],
    ] {
        let stderr = refused(&server, &writer, args);
        assert!(stderr.contains("needs role admin"), "{args:?}: {stderr}");
    }
    // A scoped admin does everything on the admin API, nothing inside.
    json_with(&server, &scoped_admin, &["gc"]);
    json_with(&server, &scoped_admin, &["token", "list"]);
    assert_eq!(
        status(server.admin, "/internal/v1/workers", &scoped_admin).await,
        401
    );

    // The list shows ids, roles and descriptions, never a token or digest.
    let listed = cli_ok(&server, &["token", "list"]);
    assert!(
        listed.contains(&reader_id) && listed.contains("dashboards"),
        "{listed}"
    );
    let listed_json = json_with(&server, ADMIN, &["token", "list"]).to_string();
    for text in [&reader, &writer, &scoped_admin] {
        let secret = text.rsplit('_').next().expect("secret");
        assert!(!listed_json.contains(secret), "{listed_json}");
    }
    assert!(!listed_json.contains("sha256"), "{listed_json}");
    // Nor does the data dir hold any token's text.
    let db = std::fs::read(server.data_dir.join("stasis.db")).expect("stasis.db");
    let secret = reader.rsplit('_').next().expect("secret");
    assert!(!String::from_utf8_lossy(&db).contains(secret));

    // A right id with a wrong secret, a made-up token: 401.
    let forged = format!("stasis_{reader_id}_{}", "0".repeat(64));
    assert_eq!(status(server.admin, "/v1/actors", &forged).await, 401);
    assert_eq!(status(server.admin, "/v1/actors", "stasis_x_y").await, 401);

    // Revoked: refused at once here, and again is 404.
    let revoked = cli_ok(&server, &["token", "revoke", &reader_id]);
    assert_eq!(revoked.trim(), format!("token {reader_id} revoked"));
    assert_eq!(status(server.admin, "/v1/actors", &reader).await, 401);
    // Saying so (issue 47, input 11), unlike a request with no token.
    let stderr = refused(&server, &reader, &["actor", "list"]);
    assert!(
        stderr.contains("401") && stderr.contains(&format!("token {reader_id} is revoked")),
        "{stderr}"
    );
    let bare = crate::support::raw(
        server.admin,
        "GET /v1/actors HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        bare.starts_with("HTTP/1.1 401") && bare.contains("no bearer token"),
        "{bare}"
    );
    assert!(refused(&server, ADMIN, &["token", "revoke", &reader_id]).contains("404"));

    // Expired: refused, saying so.
    let (_, brief) = new_token(&server, "reader", &["--expires", "1s"]);
    assert_eq!(status(server.admin, "/v1/actors", &brief).await, 200);
    // Never stricter than sleeping 1.1 s and looking once.
    stasis_test_util::wait::until_async(
        "the brief token to expire",
        Duration::from_millis(1100),
        async || (status(server.admin, "/v1/actors", &brief).await == 401).then_some(()),
    )
    .await;
    let stderr = refused(&server, &brief, &["actor", "list"]);
    assert!(
        stderr.contains("401") && stderr.contains("expired at"),
        "{stderr}"
    );

    // Tokens outlive a restart of serve (they are in stasis.db).
    let server = server.restart(&["--admin-token", ADMIN]);
    json_with(&server, &writer, &["actor", "pause", "d"]);
    assert_eq!(status(server.admin, "/v1/actors", &reader).await, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_token_requests_are_refused_by_name() {
    // Without --admin-token the API is open, and a scoped token would
    // guard nothing: refused, saying why.
    let open = Server::start(&[]);
    let out = open.cli(&["token", "create", "--role", "reader"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("--admin-token"), "{stderr}");

    let server = Server::start(&["--admin-token", ADMIN]);
    let stderr = refused(&server, ADMIN, &["token", "create", "--role", "root"]);
    assert!(
        stderr.contains("reader") && stderr.contains("admin"),
        "{stderr}"
    );
    // Bad expiries and descriptions, each refused by name (a description
    // that would print as something else too).
    let long = "x".repeat(201);
    for (extra, said) in [
        (["--expires", "soon"], "--expires"),
        (["--description", long.as_str()], "200 characters"),
        (["--expires", "100000d"], "ten years"),
        (["--description", "ci \u{202E}nimda"], "U+202E"),
    ] {
        let mut args = vec!["token", "create", "--role", "reader"];
        args.extend(extra);
        let stderr = refused(&server, ADMIN, &args);
        assert!(stderr.contains(said), "{extra:?}: {stderr}");
    }
    // Ten years, as the CLI counts them, are within the limit.
    let made = json_with(
        &server,
        ADMIN,
        &["token", "create", "--role", "reader", "--expires", "10y"],
    );
    assert!(made["expires_at"].is_string(), "{made}");
    let stderr = refused(&server, ADMIN, &["token", "revoke", "../../stasis.db"]);
    assert!(
        stderr.contains("400") && stderr.contains("lowercase hex"),
        "{stderr}"
    );
    // (The CLI names its own verb; the server's answer echoes nothing.)
    let answer = stderr.split_once("400").map_or("", |(_, a)| a);
    assert!(!answer.contains("stasis.db"), "echoed: {stderr}");
    let listed = cli_ok(&server, &["token", "list"]);
    assert_eq!(
        listed.lines().count(),
        2,
        "only the ten-year token: {listed}"
    );
    // A token's whole text given to `token revoke`: the CLI sends only its
    // id; the API refuses the text without echoing it.
    let (_, held) = new_token(&server, "reader", &[]);
    let secret = held.rsplit('_').next().expect("secret").to_owned();
    let answer = raw(
        server.admin,
        &format!(
            "DELETE /v1/tokens/{held} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\nConnection: close\r\n\r\n"
        ),
    )
    .await;
    assert_eq!(raw_status(&answer), 400, "{answer}");
    assert!(!answer.contains(&secret), "echoed: {answer}");
    assert_eq!(status(server.admin, "/v1/actors", &held).await, 200);
    // Most of a token (cut short, say): neither sent nor echoed.
    let cut = &held[..held.len() - 8];
    let stderr = refused(&server, ADMIN, &["token", "revoke", cut]);
    assert!(
        stderr.contains("neither a whole token nor a token id"),
        "{stderr}"
    );
    assert!(!stderr.contains(&secret[..20]), "echoed: {stderr}");
    let revoked = cli_ok(&server, &["token", "revoke", &format!("  {held} ")]);
    assert!(!revoked.contains(&secret), "{revoked}");
    assert_eq!(status(server.admin, "/v1/actors", &held).await, 401);
}

/// In a cluster every admin request but `/metrics` goes through the
/// leader; a replica answers `/metrics` itself. A token revoked through
/// one replica is refused by every replica, on both kinds of route, once
/// the documented bound (1 s) has passed, and at once by the replica it was
/// revoked through (issue 47, input 11), a follower included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_is_refused_by_every_replica_within_the_bound() {
    let _one = crate::replicas::ONE_CLUSTER.lock().await;
    let mut setup = stasis_test_util::cluster::Setup::new(1, 2, 0);
    setup.env = vec![("STASIS_ADMIN_TOKEN".to_owned(), ADMIN.to_owned())];
    let d = stasis_test_util::cluster::Deployment::start(crate::support::STASIS, setup);
    let made = d.cli_json(1, &["token", "create", "--role", "reader"]);
    let (id, token) = (
        made["id"].as_str().expect("id").to_owned(),
        made["token"].as_str().expect("token").to_owned(),
    );
    for i in 0..2 {
        let admin = d.replica(i).admin;
        assert_eq!(status(admin, "/metrics", &token).await, 200, "replica {i}");
        assert_eq!(
            status(admin, "/v1/actors", &token).await,
            200,
            "replica {i}"
        );
        assert_eq!(status(admin, "/v1/gc", &token).await, 403, "replica {i}");
    }
    // Revoked through the follower (which forwards it to the leader): that
    // replica refuses the token at once, also on the route it answers
    // itself, not only once its kept record is a second old.
    let follower = 1 - d.leader();
    d.cli_ok(follower, &["token", "revoke", &id]);
    let admin = d.replica(follower).admin;
    assert_eq!(status(admin, "/metrics", &token).await, 401, "at once");
    // Never stricter than sleeping the bound and looking once.
    stasis_test_util::wait::until_async(
        "the revocation on both replicas",
        stasis_runtime::ingress::access::REVOCATION_BOUND,
        async || {
            for i in 0..2 {
                if status(d.replica(i).admin, "/metrics", &token).await != 401 {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    for i in 0..2 {
        let admin = d.replica(i).admin;
        assert_eq!(status(admin, "/metrics", &token).await, 401, "replica {i}");
        assert_eq!(
            status(admin, "/v1/actors", &token).await,
            401,
            "replica {i}"
        );
    }
}

/// A followed log (`logs?follow=1`, one streamed answer) opened with a
/// token ends once the token is revoked, within the revocation bound
/// (checked again while the stream waits), rather than streaming on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_log_ends_when_its_token_is_revoked() {
    use http_body_util::BodyExt as _;
    let server = Server::start(&["--admin-token", ADMIN]);
    counter_c(&server);
    // Its events so far (created, resumed) are the stream's first answer.
    let client = crate::support::client();
    assert_eq!(
        count(&to_actor(&client, server.ingress, "c", "POST", "/").await),
        1
    );
    let (id, reader) = new_token(&server, "reader", &[]);
    let request = hyper::Request::get(format!(
        "http://{}/v1/actors/c/logs?follow=1&stream=event",
        server.admin
    ))
    .header("host", "localhost")
    .header("authorization", format!("Bearer {reader}"))
    .body(http_body_util::Full::new(bytes::Bytes::new()))
    .expect("request");
    let response = client.request(request).await.expect("follow");
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    // The stream is open: its first answer (the events so far) came.
    let first = body.frame().await.expect("a first chunk").expect("frame");
    let first = first.into_data().unwrap_or_default();
    assert!(
        String::from_utf8_lossy(&first).contains("\"event\""),
        "{first:?}"
    );
    cli_ok(&server, &["token", "revoke", &id]);
    // It ends (a clean end of the body) well before the 30 s a follow
    // request waits for a new line: without the check it would not.
    let revoked = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(frame) = body.frame().await {
            frame.expect("frame");
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream outlived its token");
    assert!(
        revoked.elapsed() < Duration::from_secs(5),
        "{:?}",
        revoked.elapsed()
    );
}
