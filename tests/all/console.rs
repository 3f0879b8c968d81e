//! The web console (issue 33, item 5) in a real browser: Debian's headless
//! Chromium, driven over the DevTools protocol (a WebSocket), against the
//! real binary. The actor list shows the actors with their state; an
//! actor's page shows its fields and follows its log; the pause, resume,
//! fork and delete buttons work; with `--admin-token` the page asks for
//! the token and shows nothing without it. A screenshot is taken. The
//! namespace chooser switches the lists and pages to a namespace. The
//! dashboard's charts, filters, pages and templates are
//! tests/all/console_dashboard.rs; the browser is tests/all/chromium.rs.

use std::time::Duration;

use serde_json::Value;
use stasis_test_util::wait;

use crate::support::{Server, client, to_actor};

// The browser the console's tests drive (tests/all/console_dashboard.rs
// uses it too).
#[path = "chromium.rs"]
pub(crate) mod chromium;

use chromium::{Browser, chromium_installed};

/// Polls the admin API until `actor` is in `state` (15 s; not found yet
/// counts as not).
async fn until_state(server: &Server, actor: &str, state: &str) {
    let state_of = || {
        let out = server.cli(&["actor", "get", actor, "-o", "json"]);
        serde_json::from_slice::<Value>(&out.stdout)
            .ok()
            .map(|v| v["state"].clone())
    };
    wait::until_async(
        &format!("{actor} {state}"),
        Duration::from_secs(15),
        async || (state_of() == Some(Value::from(state))).then_some(()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_lists_actors_follows_a_log_and_its_buttons_work() {
    if !chromium_installed() {
        return;
    }
    let server = Server::start(&["--workers", "1"]);
    server.push("counter");
    server.push("faulty");
    server.create("c1", "counter");
    server.create("loud", "faulty");
    for _ in 0..3 {
        let answer = to_actor(&client(), server.ingress, "c1", "POST", "/").await;
        assert_eq!(answer.status, 200);
    }
    let mut browser = Browser::open(&format!("http://{}/ui/", server.admin)).await;
    // The list: both actors with their state.
    browser
        .until("!!document.querySelector('tr[data-actor=c1]') && !!document.querySelector('tr[data-actor=loud]')")
        .await;
    let state = browser
        .eval("document.querySelector('tr[data-actor=c1] td:nth-child(2)').textContent")
        .await;
    assert_eq!(state, "running");
    // An actor's page: its fields, and its log as it prints.
    browser.eval("location.hash = '#/actor/loud'").await;
    browser
        .until("document.querySelector('[data-field=state]')?.textContent === 'running'")
        .await;
    let printed = to_actor(
        &client(),
        server.ingress,
        "loud",
        "POST",
        "/print?text=hello-console",
    )
    .await;
    assert_eq!(printed.status, 200);
    browser
        .until("document.getElementById('log').textContent.includes('hello-console')")
        .await;
    // Pause and resume.
    browser
        .eval("document.getElementById('pause').click()")
        .await;
    until_state(&server, "loud", "paused").await;
    browser
        .until("document.querySelector('[data-field=state]').textContent === 'paused'")
        .await;
    browser
        .eval("document.getElementById('resume').click()")
        .await;
    until_state(&server, "loud", "running").await;
    // Fork into a new actor.
    browser
        .eval("document.getElementById('fork-name').value = 'loud-copy'; document.getElementById('fork').click()")
        .await;
    wait::until_else_async("the fork", Duration::from_secs(15), async || {
        if server.cli(&["actor", "get", "loud-copy"]).status.success() {
            return Ok(());
        }
        let status = browser
            .eval("document.getElementById('status').textContent")
            .await;
        Err(format!("the page says {status}"))
    })
    .await;
    // The dashboard's test keeps its screenshot (docs/console.png); this
    // one checks that the actor's page can be taken.
    browser.screenshot().await;
    // Delete asks once more, then the actor is gone.
    browser
        .eval("document.getElementById('delete').click()")
        .await;
    browser
        .eval("document.getElementById('confirm-delete').click()")
        .await;
    wait::until_async("the delete", Duration::from_secs(15), async || {
        let both = server.cli(&["actor", "get", "loud-copy"]).status.success()
            && server.cli(&["actor", "get", "loud"]).status.success();
        (!both).then_some(())
    })
    .await;
    assert!(!server.cli(&["actor", "get", "loud"]).status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_console_shows_nothing_until_it_is_given() {
    if !chromium_installed() {
        return;
    }
    let token = "console-test-token-0123456789";
    let server = Server::start(&["--workers", "1", "--admin-token", token]);
    let cli = |args: &[&str]| {
        let out = crate::support::STASIS
            .command()
            .args(args)
            .env("STASIS_ADMIN", server.admin_url())
            .env("STASIS_ADMIN_TOKEN", token)
            .output()
            .expect("run stasis");
        assert!(out.status.success(), "{args:?}: {out:?}");
    };
    let counter = crate::support::demo("counter");
    cli(&[
        "template",
        "push",
        "counter",
        counter.to_str().expect("utf-8"),
    ]);
    cli(&["actor", "create", "secret", "--template", "counter"]);
    let mut browser = Browser::open(&format!("http://{}/ui/", server.admin)).await;
    browser
        .until("!document.getElementById('login').hidden")
        .await;
    let shown = browser.eval("document.body.innerText").await;
    assert!(
        !shown.as_str().unwrap_or_default().contains("secret"),
        "{shown}"
    );
    browser
        .eval(&format!(
            "document.getElementById('token').value = '{token}'; \
             document.getElementById('login').requestSubmit()"
        ))
        .await;
    browser
        .until("!!document.querySelector('tr[data-actor=secret]')")
        .await;
}

/// The namespace chooser: the lists show the namespace it names (the
/// namespaces there are suggested), and an actor's page of another
/// namespace reads and acts on that actor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_the_namespace_chosen() {
    if !chromium_installed() {
        return;
    }
    let server = Server::start(&["--workers", "1"]);
    server.push("counter");
    server.create("c1", "counter");
    let counter = crate::support::demo("counter");
    let counter = counter.to_str().expect("utf-8");
    server.cli_ok(&["-n", "team-a", "template", "push", "counter", counter]);
    server.cli_ok(&[
        "-n",
        "team-a",
        "actor",
        "create",
        "c2",
        "--template",
        "counter",
    ]);
    let mut browser = Browser::open(&format!("http://{}/ui/", server.admin)).await;
    browser
        .until("!!document.querySelector('tr[data-actor=c1]')")
        .await;
    browser
        .until("[...document.querySelectorAll('#namespaces option')].some((o) => o.value === 'team-a')")
        .await;
    browser
        .eval("const n = document.getElementById('namespace'); n.value = 'team-a'; n.dispatchEvent(new Event('change'))")
        .await;
    browser
        .until("!!document.querySelector('tr[data-actor=\"c2.team-a\"]') && !document.querySelector('tr[data-actor=c1]')")
        .await;
    // Its page, through the namespace's routes: the pause button works.
    browser.eval("location.hash = '#/actor/c2.team-a'").await;
    browser
        .until("!!document.querySelector('[data-field=state]')?.textContent")
        .await;
    browser
        .eval("document.getElementById('pause').click()")
        .await;
    browser
        .until("document.querySelector('[data-field=state]').textContent === 'paused'")
        .await;
    let out = server.cli(&["-n", "team-a", "actor", "get", "c2", "-o", "json"]);
    let got: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(got["state"], "paused", "{got}");
}
