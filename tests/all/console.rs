//! The web console (issue 33, item 5) in a real browser: Debian's headless
//! Chromium, driven over the DevTools protocol (a WebSocket), against the
//! real binary. The actor list shows the actors with their state; an
//! actor's page shows its fields and follows its log; the pause, resume,
//! fork and delete buttons work; with `--admin-token` the page asks for
//! the token and shows nothing without it. A screenshot is taken
//! (`STASIS_CONSOLE_SCREENSHOT=PATH` keeps it, e.g. for docs/console.png).
//! The namespace chooser switches the lists and pages to a namespace.

use std::io::{BufRead as _, BufReader};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use stasis_test_util::wait;
use tokio_tungstenite::tungstenite::Message;

use crate::support::{Server, client, send, to_actor};

const CHROMIUM: &str = "/usr/bin/chromium";

/// Whether Chromium is installed; under CI its absence is a failure.
fn chromium_installed() -> bool {
    if std::path::Path::new(CHROMIUM).exists() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{CHROMIUM} is missing and CI is set (scripts/install-test-deps.sh installs it)"
    );
    eprintln!("skipped: {CHROMIUM} is not installed");
    false
}

/// A headless Chromium with one page, driven over the DevTools protocol.
struct Browser {
    child: Child,
    page: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn open(url: &str) -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let mut child = Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--window-size=1280,900",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // A group of its own: its renderers go with it (see `Drop`).
            .process_group(0)
            .spawn()
            .expect("start chromium");
        // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/ID";
        // the thread keeps draining stderr so that Chromium never blocks.
        let stderr = child.stderr.take().expect("stderr");
        let (found, port) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("ws://127.0.0.1:").nth(1)
                    && let Some(Ok(port)) = rest.split('/').next().map(str::parse::<u16>)
                {
                    let _ = found.send(port);
                }
            }
        });
        let port = port
            .recv_timeout(Duration::from_secs(30))
            .expect("chromium's DevTools address on its stderr");
        let debugger = format!("127.0.0.1:{port}").parse().expect("address");
        let page_url = wait::until_else_async(
            &format!("a page for {url}"),
            Duration::from_secs(20),
            async || {
                let list = send(
                    &client(),
                    debugger,
                    "GET",
                    // Chromium names the page's WebSocket after the Host.
                    &format!("127.0.0.1:{port}"),
                    "/json/list",
                    Vec::new(),
                )
                .await;
                let targets: Value = serde_json::from_str(&list.body).unwrap_or(Value::Null);
                let page = targets.as_array().into_iter().flatten().find(|t| {
                    t["type"] == "page" && t["url"].as_str().is_some_and(|u| u.starts_with(url))
                });
                match page {
                    Some(page) => Ok(page["webSocketDebuggerUrl"]
                        .as_str()
                        .expect("ws url")
                        .to_owned()),
                    None => Err(targets),
                }
            },
        )
        .await;
        let (page, _) = tokio_tungstenite::connect_async(page_url.as_str())
            .await
            .unwrap_or_else(|e| panic!("connect to the page at {page_url}: {e}"));
        Browser {
            child,
            page,
            next_id: 0,
            _profile: profile,
        }
    }

    /// Sends a DevTools command and returns its result.
    async fn command(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let message = json!({"id": id, "method": method, "params": params}).to_string();
        self.page.send(Message::text(message)).await.expect("send");
        loop {
            let reply = tokio::time::timeout(Duration::from_secs(20), self.page.next())
                .await
                .expect("a DevTools answer")
                .expect("open")
                .expect("message");
            let Message::Text(text) = reply else { continue };
            let reply: Value = serde_json::from_str(text.as_str()).expect("JSON");
            if reply["id"] == id {
                assert!(reply["error"].is_null(), "{method}: {reply}");
                return reply["result"].clone();
            }
        }
    }

    /// Evaluates `expression` in the page and returns its value.
    async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .command(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await;
        assert!(
            result["exceptionDetails"].is_null(),
            "{expression}: {result}"
        );
        result["result"]["value"].clone()
    }

    /// Waits until `expression` is true in the page (15 s at most; an
    /// exception, e.g. before the page has loaded, counts as false).
    async fn until(&mut self, expression: &str) {
        let guarded = format!(
            "(() => {{ try {{ return !!({expression}); }} catch (_) {{ return false; }} }})()"
        );
        wait::until_else_async(
            &format!("true in the page: {expression}"),
            Duration::from_secs(15),
            async || {
                if self.eval(&guarded).await == Value::Bool(true) {
                    return Ok(());
                }
                // Guarded too: before the page has loaded it has no body.
                let text = self
                    .eval("(() => { try { return document.body.innerText; } catch (_) { return null; } })()")
                    .await;
                Err(format!("the page says {text}"))
            },
        )
        .await;
    }
}

impl Drop for Browser {
    /// Kills Chromium's whole process group (the browser and the renderer
    /// and helper processes it started).
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
    let screenshot = browser
        .command("Page.captureScreenshot", json!({"format": "png"}))
        .await;
    let png = base64::engine::general_purpose::STANDARD
        .decode(screenshot["data"].as_str().expect("data"))
        .expect("base64");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    if let Some(path) = std::env::var_os("STASIS_CONSOLE_SCREENSHOT") {
        std::fs::write(path, &png).expect("keep the screenshot");
    }
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
