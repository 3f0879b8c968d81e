//! Headless Chromium for the console's tests (tests/all/console.rs and
//! tests/all/console_dashboard.rs): Debian's `/usr/bin/chromium`, started
//! with a page and driven over the DevTools protocol (a WebSocket):
//! evaluate an expression in the page, wait until one holds, take a
//! screenshot. Its whole process group is killed on drop.

use std::io::{BufRead as _, BufReader};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use stasis_test_util::wait;
use tokio_tungstenite::tungstenite::Message;

use crate::support::{client, send};

const CHROMIUM: &str = "/usr/bin/chromium";

/// Whether Chromium is installed; under CI its absence is a failure.
pub(crate) fn chromium_installed() -> bool {
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
pub(crate) struct Browser {
    child: Child,
    page: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub(crate) async fn open(url: &str) -> Browser {
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
    pub(crate) async fn command(&mut self, method: &str, params: Value) -> Value {
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
    pub(crate) async fn eval(&mut self, expression: &str) -> Value {
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
    pub(crate) async fn until(&mut self, expression: &str) {
        self.until_within(expression, Duration::from_secs(15)).await;
    }

    /// [`Browser::until`] with another limit.
    pub(crate) async fn until_within(&mut self, expression: &str, limit: Duration) {
        let guarded = format!(
            "(() => {{ try {{ return !!({expression}); }} catch (_) {{ return false; }} }})()"
        );
        wait::until_else_async(
            &format!("true in the page: {expression}"),
            limit,
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

    /// A PNG of the page as it is shown.
    pub(crate) async fn screenshot(&mut self) -> Vec<u8> {
        let shot = self
            .command("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("data"))
            .expect("base64");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        png
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
