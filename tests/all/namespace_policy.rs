//! What a namespace lets in, through the real binary. Ingress auth
//! (`stasis namespace ingress-auth NS token`): a namespace that requires a token answers its
//! actors' requests only with `Authorization: Bearer` of role invoker or
//! above for that namespace (401 without one, with `WWW-Authenticate`;
//! 403 for a reader or another namespace's token), and a refused request
//! is never applied; the header never reaches the guest; other namespaces
//! stay public; the setting outlives a restart; a server with no
//! `--admin-token` refuses to turn it on. Calls across namespaces
//! (`stasis namespace calls-from NS FROM...`): refused (403, a message
//! `Refused`) and never delivered until the callee's namespace lists the
//! caller's, then delivered.

use stasis_test_util::wait;

use crate::namespaces::{ADMIN, admin_ok, counter_c_in, failed, in_ns};
use crate::support::{STASIS, Server, count, raw, raw_status};

/// `POST /` to actor `actor` (a full name) with `authorization` (none when
/// empty); the raw answer.
async fn post_as(server: &Server, actor: &str, authorization: &str) -> String {
    post_path(server, actor, "/", authorization).await
}

/// `POST path` to actor `actor` with `authorization`; the raw answer.
async fn post_path(server: &Server, actor: &str, path: &str, authorization: &str) -> String {
    let header = if authorization.is_empty() {
        String::new()
    } else {
        format!("Authorization: {authorization}\r\n")
    };
    raw(
        server.ingress,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: {actor}.actors.localhost\r\n{header}Content-Length: 0\r\nConnection: close\r\n\r\n"
        ),
    )
    .await
}

/// A token of `role` made with `-n NS` (all namespaces when `ns` is
/// `None`); its text.
fn token(server: &Server, ns: Option<&str>, role: &str) -> String {
    let mut command = STASIS.command();
    if let Some(ns) = ns {
        command.args(["-n", ns]);
    }
    let out = command
        .args(["token", "create", "--role", role, "-o", "json"])
        .env("STASIS_ADMIN", server.admin_url())
        .env("STASIS_ADMIN_TOKEN", ADMIN)
        .output()
        .expect("run stasis");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let made: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    made["token"].as_str().expect("token").to_owned()
}

/// The count in a raw 200 answer of the counter.
fn counted(answer: &str) -> u64 {
    assert_eq!(raw_status(answer), 200, "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    count(&crate::support::Answer {
        status: 200,
        body: body.to_owned(),
        headers: Default::default(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_that_requires_a_token_answers_only_its_invokers() {
    let server = Server::start(&["--admin-token", ADMIN]);
    counter_c_in(&server, &["team-a", "team-b"]);
    // Public until told otherwise; an Authorization header is the guest's.
    assert_eq!(counted(&post_as(&server, "c.team-a", "").await), 1);

    let shown = admin_ok(
        &server,
        "default",
        &["namespace", "ingress-auth", "team-a", "token"],
    );
    assert!(shown.contains("token"), "{shown}");
    let invoker_a = token(&server, Some("team-a"), "invoker");
    let reader_a = token(&server, Some("team-a"), "reader");
    let invoker_b = token(&server, Some("team-b"), "invoker");
    let writer_all = token(&server, None, "writer");

    // No token: 401 with a challenge, and the request was not applied.
    let refused = post_as(&server, "c.team-a", "").await;
    assert_eq!(raw_status(&refused), 401, "{refused}");
    assert!(
        refused
            .to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
        "{refused}"
    );
    // A made-up token, a reader, another namespace's invoker: refused.
    let forged = format!("Bearer stasis_{}_{}", "1".repeat(16), "2".repeat(64));
    assert_eq!(
        raw_status(&post_as(&server, "c.team-a", &forged).await),
        401
    );
    let reader = post_as(&server, "c.team-a", &format!("Bearer {reader_a}")).await;
    assert_eq!(raw_status(&reader), 403, "{reader}");
    assert!(reader.contains("needs role invoker"), "{reader}");
    let other = post_as(&server, "c.team-a", &format!("Bearer {invoker_b}")).await;
    assert_eq!(raw_status(&other), 403, "{other}");
    assert!(other.contains("namespace team-b"), "{other}");
    // The actor's own name is not given away to a stranger: an unknown
    // actor of the namespace is 401 too, not 404.
    assert_eq!(
        raw_status(&post_as(&server, "nobody.team-a", "").await),
        401
    );

    // The namespace's invoker, a writer of every namespace, the bootstrap
    // token: served, and none of the refused requests counted.
    for authorization in [
        format!("Bearer {invoker_a}"),
        format!("bearer {writer_all}"),
        format!("Bearer {ADMIN}"),
    ] {
        let _ = counted(&post_as(&server, "c.team-a", &authorization).await);
    }
    assert_eq!(
        counted(&post_as(&server, "c.team-a", &format!("Bearer {invoker_a}")).await),
        5
    );
    // team-b is still public, its invoker token not needed.
    assert_eq!(counted(&post_as(&server, "c.team-b", "").await), 1);
    // `namespace get` shows it; a team-a reader may read, not change it.
    let get = admin_ok(&server, "default", &["namespace", "get", "team-a"]);
    assert!(get.contains("token"), "{get}");
    let out = in_ns(
        &server,
        "team-a",
        &reader_a,
        &["namespace", "ingress-auth", "team-a", "none"],
    );
    assert!(failed(&out, "a reader's ingress-auth").contains("403"));

    // The credential is the ingress's: the guest never sees it, while a
    // public namespace's guest gets the header as it came.
    if crate::js::engine_built() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("headers.js");
        std::fs::write(&script, HEADERS_JS).expect("write the script");
        for ns in ["team-a", "team-b"] {
            let script = script.to_str().expect("utf-8");
            admin_ok(&server, ns, &["template", "push", "headers", script]);
            admin_ok(
                &server,
                ns,
                &["actor", "create", "h", "--template", "headers"],
            );
        }
        let checked = post_as(&server, "h.team-a", &format!("Bearer {invoker_a}")).await;
        assert_eq!(raw_status(&checked), 200, "{checked}");
        assert!(checked.ends_with("authorization: none"), "{checked}");
        let passed = post_as(&server, "h.team-b", "Bearer guest-own-scheme").await;
        assert!(
            passed.ends_with("authorization: Bearer guest-own-scheme"),
            "{passed}"
        );
    }

    // The setting outlives a restart (it is in stasis.db).
    let server = server.restart(&["--admin-token", ADMIN]);
    assert_eq!(raw_status(&post_as(&server, "c.team-a", "").await), 401);
    // And without --admin-token the namespace stays closed, not open.
    let server = server.restart(&[]);
    let closed = post_as(&server, "c.team-a", "").await;
    assert_eq!(raw_status(&closed), 401, "{closed}");
    assert!(closed.contains("no --admin-token"), "{closed}");
    // Turning it off opens it again; turning it on there is refused.
    admin_ok(
        &server,
        "default",
        &["namespace", "ingress-auth", "team-a", "none"],
    );
    assert_eq!(counted(&post_as(&server, "c.team-a", "").await), 6);
    let out = in_ns(
        &server,
        "default",
        "",
        &["namespace", "ingress-auth", "team-a", "token"],
    );
    let refused = failed(&out, "ingress-auth token without --admin-token");
    assert!(refused.contains("--admin-token"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_cross_namespaces_only_where_the_callee_takes_them() {
    let server = Server::start(&["--admin-token", ADMIN]);
    counter_c_in(&server, &["team-b", "default"]);
    let caller = crate::support::demo("caller");
    let caller = caller.to_str().expect("utf-8");
    admin_ok(&server, "team-a", &["template", "push", "caller", caller]);
    admin_ok(
        &server,
        "team-a",
        &["actor", "create", "a", "--template", "caller"],
    );
    let c = crate::support::client();
    let via_a = |path: String| {
        let c = c.clone();
        async move { crate::support::to_actor(&c, server.ingress, "a.team-a", "POST", &path).await }
    };

    // Closed by default: 403 naming both namespaces, nothing delivered.
    for target in ["c.team-b", "c.default"] {
        let refused = via_a(format!("/call/{target}")).await;
        assert_eq!(refused.status, 403, "{refused:?}");
        assert!(
            refused
                .body
                .contains("does not take calls from namespace team-a"),
            "{refused:?}"
        );
    }
    let refused = via_a("/send/c.team-b".into()).await;
    assert_eq!(refused.status, 502, "{refused:?}");
    assert!(
        refused.body.contains("send to c.team-b failed"),
        "{refused:?}"
    );
    // A plain name is the caller's own namespace's (no c there).
    assert_eq!(via_a("/call/c".into()).await.status, 404);

    // team-b takes calls from team-a: delivered; the default namespace
    // still does not.
    let set = admin_ok(
        &server,
        "default",
        &["namespace", "calls-from", "team-b", "team-a", "-o", "json"],
    );
    let set: serde_json::Value = serde_json::from_str(&set).expect("json");
    assert_eq!(set["calls_from"], serde_json::json!(["team-a"]), "{set}");
    assert_eq!(count(&via_a("/call/c.team-b".into()).await), 1);
    assert_eq!(via_a("/call/c.default".into()).await.status, 403);
    assert_eq!(via_a("/send/c.team-b".into()).await.status, 202);
    // The refused requests were never applied: c.team-b counts the call
    // and the message only (GET reads; the message lands on its own time,
    // so it is read until it has, within a bound).
    let seen = wait::until_else_async(
        "c.team-b to count one call and one message",
        std::time::Duration::from_secs(5),
        async || {
            let seen =
                count(&crate::support::to_actor(&c, server.ingress, "c.team-b", "GET", "/").await);
            if seen >= 2 { Ok(seen) } else { Err(seen) }
        },
    )
    .await;
    assert_eq!(seen, 2, "one call and one message");

    // Bad lists are refused by name; [] closes it again.
    for (args, said) in [
        (vec!["team-b", "team-b"], "its own actors"),
        (vec!["team-b", "Team-A"], "namespace"),
    ] {
        let mut all = vec!["namespace", "calls-from"];
        all.extend(args);
        let out = in_ns(&server, "default", ADMIN, &all);
        let stderr = failed(&out, "a bad calls-from");
        assert!(stderr.contains("400") && stderr.contains(said), "{stderr}");
    }
    admin_ok(&server, "default", &["namespace", "calls-from", "team-b"]);
    assert_eq!(via_a("/call/c.team-b".into()).await.status, 403);
}

/// A stream opened through the ingress with a namespace's token ends
/// once the token is revoked (within the revocation bound), rather than
/// carrying on: its credential is checked again while it lasts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_ends_when_the_token_that_opened_it_is_revoked() {
    use http_body_util::BodyExt as _;
    let server = Server::start(&["--admin-token", ADMIN]);
    let chat = crate::support::demo("chat");
    let chat = chat.to_str().expect("utf-8");
    admin_ok(&server, "team-a", &["template", "push", "chat", chat]);
    admin_ok(
        &server,
        "team-a",
        &["actor", "create", "ch", "--template", "chat"],
    );
    admin_ok(
        &server,
        "default",
        &["namespace", "ingress-auth", "team-a", "token"],
    );
    let made = admin_ok(
        &server,
        "team-a",
        &["token", "create", "--role", "invoker", "-o", "json"],
    );
    let made: serde_json::Value = serde_json::from_str(&made).expect("json");
    let (id, token) = (
        made["id"].as_str().expect("id"),
        made["token"].as_str().expect("token"),
    );
    let request = hyper::Request::get(format!("http://{}/events", server.ingress))
        .header("host", "ch.team-a.actors.localhost")
        .header("accept", "text/event-stream")
        .header("authorization", format!("Bearer {token}"))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("request");
    let response = crate::support::client()
        .request(request)
        .await
        .expect("stream");
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    // Open and carrying what is said.
    let said = post_path(&server, "ch.team-a", "/say", &format!("Bearer {token}")).await;
    assert_eq!(raw_status(&said), 202, "{said}");
    let mut text = String::new();
    while !text.contains("data:") {
        let frame = tokio::time::timeout(std::time::Duration::from_secs(10), body.frame())
            .await
            .expect("an event within 10 s")
            .expect("not ended")
            .expect("frame");
        text.push_str(&String::from_utf8_lossy(
            &frame.into_data().unwrap_or_default(),
        ));
    }
    admin_ok(&server, "default", &["token", "revoke", id]);
    // It ends, well within what an idle stream would wait.
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while let Some(frame) = body.frame().await {
            if frame.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream outlived its token");
}

/// A JavaScript actor that answers with the `Authorization` header it was
/// given.
const HEADERS_JS: &str = r#"
export default {
  async fetch(request) {
    return new Response("authorization: " + (request.headers.get("authorization") || "none"));
  }
};
"#;
