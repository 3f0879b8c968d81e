//! WebSockets and streamed responses (issue 35), through the real binary
//! with real clients: Python's `websockets` (tests/all/ws_client.py) for
//! sockets, hyper reading a body frame by frame for server-sent events.
//! Echo and broadcast across three clients, hibernation by
//! `--idle-timeout` with the clients connected, a move with sockets open
//! (forced into the move's window by the install-delay failpoint), the
//! limits and their close codes, and an SSE stream that arrives event by
//! event across a pause.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Buf as _;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use stasis_test_util::wait;

use crate::support::{
    RemoteWorker, Server, client, install_delay_line, raw, raw_status, send, to_actor,
};

/// The Python clients of tests/all/ws_client.py, one process for all.
struct Clients {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    port: u16,
}

impl Clients {
    fn new(server: &Server) -> Self {
        Self::on(server.ingress.port())
    }

    /// Clients of the ingress at loopback port `port`.
    fn on(port: u16) -> Self {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/all/ws_client.py");
        let mut child = Command::new("/usr/bin/python3")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 with websockets (scripts/install-test-deps.sh installs it)");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Self {
            child,
            stdin,
            stdout,
            port,
        }
    }

    fn ask(&mut self, command: Value) -> Value {
        writeln!(self.stdin, "{command}").expect("write a command");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read an answer");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?} for {command}"))
    }

    /// Opens `n` sockets to `actor`; their client numbers, or the refusal.
    fn open(&mut self, actor: &str, n: usize) -> Result<Vec<u64>, Value> {
        self.open_at(actor, "/", n)
    }

    /// [`Clients::open`] at `path`.
    fn open_at(&mut self, actor: &str, path: &str, n: usize) -> Result<Vec<u64>, Value> {
        let answer = self
            .ask(json!({"op": "open", "n": n, "port": self.port, "actor": actor, "path": path}));
        if answer["ok"] == true {
            Ok(answer["clients"]
                .as_array()
                .expect("ids")
                .iter()
                .map(|c| c.as_u64().expect("id"))
                .collect())
        } else {
            Err(answer)
        }
    }

    fn say(&mut self, client: u64, text: &str) {
        let answer = self.ask(json!({"op": "send", "client": client, "text": text}));
        assert_eq!(answer["ok"], true, "{answer}");
    }

    /// The next `count` messages `client` receives (within 10 s each).
    fn recv(&mut self, client: u64, count: usize) -> Vec<String> {
        let answer =
            self.ask(json!({"op": "recv", "client": client, "count": count, "timeout": 10}));
        assert_eq!(answer["ok"], true, "client {client}: {answer}");
        answer["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| m.as_str().expect("text").to_owned())
            .collect()
    }

    /// The close code and reason `client` got.
    fn closed(&mut self, client: u64) -> (u64, String) {
        let answer = self.ask(json!({"op": "wait_closed", "client": client, "timeout": 10}));
        assert_eq!(answer["ok"], true, "client {client}: {answer}");
        (
            answer["code"].as_u64().expect("code"),
            answer["reason"].as_str().unwrap_or_default().to_owned(),
        )
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn body_of(server: &Server, actor: &str, method: &str, path: &str) -> String {
    let answer = to_actor(&client(), server.ingress, actor, method, path).await;
    assert!(answer.status < 300, "{method} {path}: {answer:?}");
    answer.body
}

/// Polls `what` until it is true, at most 15 s.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    wait::until_async(what, Duration::from_secs(15), async || {
        check().await.then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clients_get_echoes_and_broadcasts_and_the_history_stays() {
    let server = Server::start(&["--workers", "1"]);
    server.push("chat");
    server.create("room", "chat");
    let mut ws = Clients::new(&server);
    let ids = ws.open("room", 3).expect("three sockets");
    ws.say(ids[0], "hello");
    for &id in &ids {
        assert_eq!(ws.recv(id, 1), ["hello"], "client {id}");
    }
    // An echo goes to its sender only: the next thing client 0 hears is
    // client 2's broadcast, not client 1's echo.
    ws.say(ids[1], "echo ping");
    assert_eq!(ws.recv(ids[1], 1), ["ping"]);
    ws.say(ids[2], "bye");
    assert_eq!(ws.recv(ids[0], 1), ["bye"]);
    assert_eq!(ws.recv(ids[1], 1), ["bye"]);
    assert_eq!(ws.recv(ids[2], 1), ["bye"]);
    // The host's list of the actor's sockets.
    ws.say(ids[0], "who");
    assert_eq!(ws.recv(ids[0], 1), ["sockets: 3"]);
    // An HTTP request reaches every socket too.
    let said = send(
        &client(),
        server.ingress,
        "POST",
        "room.actors.localhost",
        "/say",
        b"from http".to_vec(),
    )
    .await;
    assert_eq!(said.status, 202, "{said:?}");
    for &id in &ids {
        assert_eq!(ws.recv(id, 1), ["from http"], "client {id}");
    }
    assert_eq!(
        body_of(&server, "room", "GET", "/history").await,
        "hello\nbye\nfrom http\n"
    );
    // A client that leaves is an event for the actor.
    let answer = ws.ask(json!({"op": "close", "client": ids[2]}));
    assert_eq!(answer["ok"], true, "{answer}");
    eventually("the actor hears the close", async || {
        body_of(&server, "room", "GET", "/left").await == "left: 1\n"
    })
    .await;
    ws.say(ids[0], "who");
    assert_eq!(ws.recv(ids[0], 1), ["sockets: 2"]);
}

/// The output gate covers sockets: what an actor writes in a delivery
/// goes out only once its effect is durable, and not at all when the
/// delivery traps (its effect is rolled back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_from_a_delivery_that_traps_is_never_sent() {
    let server = Server::start(&["--workers", "1"]);
    server.push("chat");
    server.create("gated", "chat");
    let mut ws = Clients::new(&server);
    let ids = ws.open("gated", 2).expect("two sockets");
    ws.say(ids[0], "kept");
    for &id in &ids {
        assert_eq!(ws.recv(id, 1), ["kept"]);
    }
    // Says "lost" to everyone, then panics: the trap closes the sender's
    // socket with 1011 and nobody hears "lost".
    ws.say(ids[0], "crash lost");
    let (code, reason) = ws.closed(ids[0]);
    assert_eq!(code, 1011, "{reason}");
    // The next thing the other client hears is what comes after.
    ws.say(ids[1], "after");
    assert_eq!(ws.recv(ids[1], 1), ["after"]);
    assert_eq!(
        body_of(&server, "gated", "GET", "/history").await,
        "kept\nafter\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sockets_hibernate_with_their_actor_and_a_message_wakes_it() {
    let server = Server::start(&["--workers", "1", "--idle-timeout", "1s"]);
    server.push("chat");
    server.create("den", "chat");
    let mut ws = Clients::new(&server);
    let ids = ws.open("den", 3).expect("three sockets");
    ws.say(ids[0], "before");
    for &id in &ids {
        assert_eq!(ws.recv(id, 1), ["before"]);
    }
    // Nothing to do: the actor is paused while its clients stay connected.
    eventually("the actor is paused", async || {
        server.cli_json(&["actor", "get", "den"])["state"] == "paused"
    })
    .await;
    // The next message resumes it and everyone gets the broadcast.
    ws.say(ids[1], "after");
    for &id in &ids {
        assert_eq!(ws.recv(id, 1), ["after"], "client {id}");
    }
    let info = server.cli_json(&["actor", "get", "den"]);
    assert_eq!(info["state"], "running", "{info}");
    assert_eq!(
        body_of(&server, "den", "GET", "/history").await,
        "before\nafter\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_keeps_every_socket_open_and_loses_no_message() {
    let server = Server::start(&["--workers", "1"]);
    let target = RemoteWorker::start(
        &server,
        "w-ws",
        &[
            ("STASIS_FAILPOINT_INSTALL_DELAY_MS", "1500"),
            ("STASIS_LOG", "info"),
        ],
    );
    server.push("chat");
    server.create("hall", "chat");
    if server.worker_of("hall") != "worker-1" {
        server.cli_ok(&["actor", "migrate", "hall", "--to", "worker-1"]);
    }
    let mut ws = Clients::new(&server);
    let ids = ws.open("hall", 3).expect("three sockets");
    let migrate = server.migrate_in_background("hall", "w-ws");
    // Inside the move's window (the actor captured, its gate closed):
    // messages sent now are held, not dropped.
    target.wait_for_log(&install_delay_line("hall"));
    let sent: Vec<String> = (0..20).map(|i| format!("m{i}")).collect();
    for (i, text) in sent.iter().enumerate() {
        ws.say(ids[i % 3], text);
    }
    let out = migrate.await.expect("migrate");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(server.worker_of("hall"), "w-ws");
    // Sends from the three clients interleave; each client sees all of
    // them, in one order, which is the history's.
    let order = ws.recv(ids[0], sent.len());
    for &id in &ids[1..] {
        assert_eq!(ws.recv(id, sent.len()), order, "client {id}");
    }
    let mut sorted = order.clone();
    sorted.sort_unstable();
    let mut expected = sent.clone();
    expected.sort_unstable();
    assert_eq!(sorted, expected, "every message applied once");
    let history = body_of(&server, "hall", "GET", "/history").await;
    assert_eq!(history.lines().collect::<Vec<_>>(), order);
    // The sockets are still open, now served by the actor on w-ws.
    ws.say(ids[0], "who");
    assert_eq!(ws.recv(ids[0], 1), ["sockets: 3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_limits_are_enforced_with_clear_codes_and_harm_no_neighbour() {
    let server = Server::start(&[
        "--workers",
        "1",
        "--max-sockets",
        "2",
        "--max-socket-message",
        "1KiB",
    ]);
    server.push("chat");
    server.create("small", "chat");
    let mut ws = Clients::new(&server);
    let ids = ws.open("small", 2).expect("two sockets");
    // A third is refused before the handshake, naming the flag.
    let refused = ws.open("small", 1).expect_err("over --max-sockets");
    assert_eq!(refused["status"], 503, "{refused}");
    let upgrade = raw(
        server.ingress,
        "GET / HTTP/1.1\r\nHost: small.actors.localhost\r\nConnection: Upgrade\r\n\
         Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&upgrade), 503, "{upgrade}");
    assert!(upgrade.contains("--max-sockets 2"), "{upgrade}");
    // A message over the limit closes its socket with 1009, naming it.
    let answer = ws.ask(json!({"op": "send_bytes", "client": ids[0], "size": 2000}));
    assert_eq!(answer["ok"], true, "{answer}");
    let (code, reason) = ws.closed(ids[0]);
    assert_eq!(code, 1009, "{reason}");
    assert!(reason.contains("--max-socket-message"), "{reason}");
    // The other socket and the actor are unharmed.
    ws.say(ids[1], "still here");
    assert_eq!(ws.recv(ids[1], 1), ["still here"]);
    eventually("the actor hears of the closed socket", async || {
        body_of(&server, "small", "GET", "/left").await == "left: 1\n"
    })
    .await;
    // A bad handshake is a 400 that says what is wrong.
    let bad = raw(
        server.ingress,
        "GET / HTTP/1.1\r\nHost: small.actors.localhost\r\nConnection: Upgrade\r\n\
         Upgrade: websocket\r\nSec-WebSocket-Version: 8\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&bad), 400, "{bad}");
    assert!(bad.contains("Sec-WebSocket-Version: 13"), "{bad}");
    // So is a key that is not the base64 of a 16-byte nonce.
    let bad = raw(
        server.ingress,
        "GET / HTTP/1.1\r\nHost: small.actors.localhost\r\nConnection: Upgrade\r\n\
         Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: abc\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&bad), 400, "{bad}");
    assert!(bad.contains("Sec-WebSocket-Key"), "{bad}");
    assert!(bad.contains("16 bytes"), "{bad}");
}

/// A `GET path` to actor `actor` through the ingress at `ingress` that
/// accepts an event stream; the answer's head, asserted 200, its body
/// still to read.
async fn event_stream(
    ingress: std::net::SocketAddr,
    actor: &str,
    path: &str,
) -> hyper::Response<hyper::body::Incoming> {
    let request = hyper::Request::get(format!("http://{ingress}{path}"))
        .header("host", crate::support::actor_host(actor))
        .header("accept", "text/event-stream")
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("request");
    let response = client().request(request).await.expect("stream");
    assert_eq!(response.status(), 200);
    response
}

/// Reads an SSE stream of `ticker` frame by frame: each `tick K` with the
/// time it arrived, until the body ends; `during` runs once tick 10 is in.
async fn ticks(server: &Server, path: &str, during: impl AsyncFnOnce()) -> Vec<(u64, Instant)> {
    let response = event_stream(server.ingress, "tick", path).await;
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream",
        "{response:?}"
    );
    assert!(response.headers().get("stasis-stream").is_none());
    let mut during = Some(during);
    read_ticks(response.into_body(), async |seen| {
        if seen >= 10
            && let Some(during) = during.take()
        {
            during().await;
        }
    })
    .await
}

/// The `tick K` events of an SSE body, each with the time it arrived,
/// until the body ends; `each` runs after every frame with the count so
/// far.
async fn read_ticks<B>(mut body: B, mut each: impl AsyncFnMut(usize)) -> Vec<(u64, Instant)>
where
    B: hyper::body::Body + Unpin,
    B::Error: std::fmt::Debug,
{
    let (mut text, mut seen) = (String::new(), Vec::new());
    while let Some(frame) = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("a frame within 10 s")
    {
        let Ok(data) = frame.expect("frame").into_data() else {
            continue;
        };
        text.push_str(std::str::from_utf8(data.chunk()).expect("utf-8"));
        while let Some(end) = text.find("\n\n") {
            let record: String = text.drain(..end + 2).collect();
            if let Some(k) = record.trim().strip_prefix("data: tick ") {
                seen.push((k.parse().expect("tick number"), Instant::now()));
            }
        }
        each(seen.len()).await;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_stream_arrives_event_by_event_and_outlives_a_pause() {
    let server = Server::start(&["--workers", "1"]);
    server.push("ticker");
    server.create("tick", "ticker");
    let seen = ticks(&server, "/?count=100&every_ms=20", async || {
        // A pause while the stream is open: the stream stays, the next
        // alarm resumes the actor, and the ticks go on.
        let paused = server.cli_json(&["actor", "pause", "tick"]);
        assert_eq!(paused["state"], "paused", "{paused}");
    })
    .await;
    let numbers: Vec<u64> = seen.iter().map(|(k, _)| *k).collect();
    assert_eq!(numbers, (1..=100).collect::<Vec<_>>());
    // Incremental: the first event came long before the last (100 events
    // 20 ms apart), not all at once at the end.
    let spread = seen[99].1 - seen[0].1;
    assert!(spread >= Duration::from_millis(1000), "{spread:?}");
    assert_eq!(
        body_of(&server, "tick", "GET", "/").await,
        "streams: 0, ticks: 100\n"
    );
}

/// A JavaScript actor takes WebSockets through its default export's
/// `socket(event)` and the `stasis` module (`acceptWebSocket`,
/// `broadcast`); its sockets outlive a pause. A script without `socket`
/// never sees an upgrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_actor_takes_websockets_through_a_pause() {
    if !crate::js::engine_built() {
        return;
    }
    let server = Server::start(&["--workers", "1"]);
    server.push("chat-js");
    server.push("counter-js");
    server.create("room-js", "chat-js");
    server.create("count-js", "counter-js");
    let mut ws = Clients::new(&server);
    let ids = ws.open_at("room-js", "/ws", 2).expect("two sockets");
    let text_of = |message: &str| -> (String, String) {
        let message: Value = serde_json::from_str(message).expect("JSON");
        (
            message["from"].as_str().expect("from").to_owned(),
            message["text"].as_str().expect("text").to_owned(),
        )
    };
    ws.say(ids[0], r#"{"from": "ann", "text": "hi"}"#);
    for &id in &ids {
        assert_eq!(text_of(&ws.recv(id, 1)[0]), ("ann".into(), "hi".into()));
    }
    server.cli_ok(&["actor", "pause", "room-js"]);
    ws.say(ids[1], "back");
    for &id in &ids {
        assert_eq!(
            text_of(&ws.recv(id, 1)[0]),
            ("socket".into(), "back".into())
        );
    }
    let room: Value =
        serde_json::from_str(&body_of(&server, "room-js", "GET", "/").await).expect("JSON");
    assert_eq!(room["people"], json!({"ann": 1, "socket": 1}), "{room}");
    let refused = ws
        .open("count-js", 1)
        .expect_err("counter.js takes no socket");
    assert_eq!(refused["status"], 501, "{refused}");
}

/// Issue 47, input 7: a client that completed its WebSocket handshake and
/// then went silent (it never reads, so it never answers a ping: a frozen
/// process, a network gone) is pinged after `--socket-ping`, and closed
/// when no answer comes within as long again; the actor hears of it as a
/// close event. A live client (its library answers pings) stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_websocket_peer_is_pinged_and_closed_as_dead() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = Server::start(&["--workers", "1", "--socket-ping", "300ms"]);
    server.push("chat");
    server.create("room", "chat");
    let mut ws = Clients::new(&server);
    let live = ws.open("room", 1).expect("a live socket")[0];
    let mut silent = tokio::net::TcpStream::connect(server.ingress)
        .await
        .expect("connect");
    silent
        .write_all(
            b"GET / HTTP/1.1\r\nHost: room.actors.localhost\r\nUpgrade: websocket\r\n\
              Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
              Sec-WebSocket-Version: 13\r\n\r\n",
        )
        .await
        .expect("handshake");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        silent.read_exact(&mut byte).await.expect("read the answer");
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    // From here on the silent client reads nothing.
    eventually("the actor hears the dead peer's close", async || {
        body_of(&server, "room", "GET", "/left").await == "left: 1\n"
    })
    .await;
    ws.say(live, "still here");
    assert_eq!(ws.recv(live, 1), ["still here"]);
    let metrics = server.metrics().await;
    let metric = |name| crate::support::metric_in(&metrics, name);
    assert_eq!(metric("stasis_sockets_dead_total"), 1.0, "{metrics}");
    assert!(metric("stasis_socket_pings_total") >= 1.0, "{metrics}");
    assert_eq!(
        metric("stasis_sockets_open"),
        1.0,
        "the live one: {metrics}"
    );
    drop(silent);
}

/// Issue 47, input 7: an event stream silent for `--socket-ping` gets an
/// SSE comment (`: heartbeat`) each period, which clients skip: proxies
/// keep it open and a peer that is gone is noticed when a write fails.
/// Open sockets, pings and heartbeats are counted in `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_event_stream_gets_heartbeats_and_sockets_are_counted() {
    let server = Server::start(&["--workers", "1", "--socket-ping", "150ms"]);
    server.push("ticker");
    server.create("tick", "ticker");
    let response = event_stream(server.ingress, "tick", "/?count=3&every_ms=1000").await;
    let mut body = response.into_body();
    let mut text = String::new();
    let mut open_seen = None;
    while let Some(frame) = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("a frame within 10 s")
    {
        if let Ok(data) = frame.expect("frame").into_data() {
            text.push_str(std::str::from_utf8(data.chunk()).expect("utf-8"));
        }
        if open_seen.is_none() && text.contains(": heartbeat") {
            let metrics = server.metrics().await;
            open_seen = Some(crate::support::metric_in(&metrics, "stasis_sockets_open"));
        }
    }
    let ticks: Vec<&str> = text
        .split("\n\n")
        .filter(|r| r.starts_with("data: "))
        .collect();
    assert_eq!(
        ticks,
        ["data: tick 1", "data: tick 2", "data: tick 3"],
        "{text}"
    );
    // Two gaps of a second each, a heartbeat every 150 ms of silence.
    let beats = text.matches(": heartbeat\n\n").count();
    assert!(beats >= 4, "{beats} heartbeats in {text:?}");
    assert_eq!(open_seen, Some(1.0), "the open stream is counted");
    let metrics = server.metrics().await;
    assert!(
        crate::support::metric_in(&metrics, "stasis_stream_heartbeats_total") >= 4.0,
        "{metrics}"
    );
    assert_eq!(
        crate::support::metric_in(&metrics, "stasis_sockets_open"),
        0.0,
        "{metrics}"
    );
}

/// Issue 47, input 7: a graceful stop of `stasis serve` closes every
/// WebSocket with 1001 (going away) and a close frame, so clients
/// reconnect, rather than leaving them to see a lost connection (1006).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_closes_websockets_with_1001() {
    let mut server = Server::start(&["--workers", "1"]);
    server.push("chat");
    server.create("room", "chat");
    let mut ws = Clients::new(&server);
    let ids = ws.open("room", 2).expect("two sockets");
    ws.say(ids[0], "hello");
    assert_eq!(ws.recv(ids[1], 1), ["hello"]);
    server.stop();
    for id in ids {
        let (code, reason) = ws.closed(id);
        assert_eq!(code, 1001, "client {id}: {reason}");
        assert!(reason.contains("shutting down"), "{reason}");
    }
}

/// Issue 47, input 8: a JavaScript handler of a socket's close event that
/// closes that socket (already closed by its client) does not throw: the
/// close is a no-op, and the rest of the handler — its state change and
/// its broadcast to the other sockets — stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_socket_whose_close_is_being_handled_is_a_no_op_in_javascript() {
    if !crate::js::engine_built() {
        return;
    }
    let server = Server::start(&["--workers", "1"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("closer.js");
    std::fs::write(
        &path,
        r#"import { acceptWebSocket, broadcast, socketClose } from "stasis";
let closes = 0;
export default {
  fetch(request) {
    if (new URL(request.url).pathname === "/ws") return acceptWebSocket();
    return new Response(`closes: ${closes}\n`);
  },
  socket(event) {
    if (event.type !== "close") return;
    socketClose(event.socket, 1000, "bye");
    closes += 1;
    broadcast(`gone ${closes}`);
  },
};
"#,
    )
    .expect("write the script");
    server.cli_ok(&["template", "push", "closer", path.to_str().expect("utf-8")]);
    server.create("door", "closer");
    let mut ws = Clients::new(&server);
    let ids = ws.open_at("door", "/ws", 2).expect("two sockets");
    let answer = ws.ask(json!({"op": "close", "client": ids[0]}));
    assert_eq!(answer["ok"], true, "{answer}");
    assert_eq!(ws.recv(ids[1], 1), ["gone 1"]);
    assert_eq!(body_of(&server, "door", "GET", "/").await, "closes: 1\n");
    let info = server.cli_json(&["actor", "get", "door"]);
    assert!(info["error"].is_null(), "the handler threw: {info}");
}

/// Cluster mode: sockets through a follower replica are relayed to the
/// leader's ingress, whose control plane the actors' writes reach, so a
/// broadcast reaches clients of every replica, and a stream opened
/// through a follower arrives event by event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_through_a_follower_replica_reach_the_room() {
    let _one = crate::replicas::ONE_CLUSTER.lock().await;
    let d = crate::replicas::deployment(1, 2, 1, &[]);
    let leader = d.leader();
    let follower = 1 - leader;
    let chat = crate::support::demo("chat");
    d.cli_ok(
        0,
        &["template", "push", "chat", chat.to_str().expect("utf-8")],
    );
    d.cli_json(0, &["actor", "create", "plaza", "--template", "chat"]);
    let mut via_leader = Clients::on(d.replica(leader).ingress.port());
    let mut via_follower = Clients::on(d.replica(follower).ingress.port());
    let a = via_leader
        .open("plaza", 1)
        .expect("a socket via the leader")[0];
    let b = via_follower
        .open("plaza", 1)
        .expect("a socket via the follower")[0];
    via_follower.say(b, "from the follower");
    assert_eq!(via_leader.recv(a, 1), ["from the follower"]);
    assert_eq!(via_follower.recv(b, 1), ["from the follower"]);
    via_follower.say(b, "who");
    assert_eq!(via_follower.recv(b, 1), ["sockets: 2"]);
    // A stream opened through the follower gets what is said next.
    let response = event_stream(d.replica(follower).ingress, "plaza", "/events").await;
    let mut body = response.into_body();
    let mut text = String::new();
    while !text.contains(": joined") {
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("a frame")
            .expect("open")
            .expect("frame");
        text.push_str(std::str::from_utf8(&frame.into_data().unwrap_or_default()).expect("utf-8"));
    }
    via_leader.say(a, "to everyone");
    assert_eq!(via_follower.recv(b, 1), ["to everyone"]);
    while !text.contains("data: to everyone") {
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("the event within 10 s")
            .expect("open")
            .expect("frame");
        text.push_str(std::str::from_utf8(&frame.into_data().unwrap_or_default()).expect("utf-8"));
    }
}

/// Over HTTP/2 (h2c) a stream goes out as data frames as they come: the
/// ticks of `ticker` arrive one by one, well apart, on one HTTP/2 stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_stream_over_http2_arrives_frame_by_frame() {
    let server = Server::start(&["--workers", "1"]);
    server.push("ticker");
    server.create("tick2", "ticker");
    let (mut sender, _connection) = crate::support::h2c(server.ingress).await;
    let request = hyper::Request::get("http://tick2.actors.localhost/?count=20&every_ms=50")
        .header("accept", "text/event-stream")
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("request");
    let response = sender.send_request(request).await.expect("h2 answer");
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), hyper::Version::HTTP_2);
    let ticks = read_ticks(response.into_body(), async |_| {}).await;
    let numbers: Vec<u64> = ticks.iter().map(|(k, _)| *k).collect();
    assert_eq!(numbers, (1..=20).collect::<Vec<_>>());
    let spread = ticks[19].1 - ticks[0].1;
    assert!(spread >= Duration::from_millis(500), "{spread:?}");
}
