//! The main job over HTTP: `stasis serve`, routing by actor host name,
//! pause/resume as a per-actor barrier, and bad input. Real binary, real
//! HTTP on 127.0.0.1, port 0.

use std::time::Duration;

use stasis_test_util::demos::echo_answer;

use crate::support::{self, Answer, Server, burst, client, count, post, raw, raw_status, send};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_session_survives_pause_resume_and_restart() {
    reference_session("counter", "my-counter-1").await;
}

/// The README's reference session with demo `template` (a counter: the
/// Rust one, or the C one) as actor `actor`: counts 1, 2 running, 3 after
/// a pause (its snapshot file on disk, a second pause a no-op), `actor
/// get` fields, pause + resume, 4 after a restart. Returns the restarted
/// server.
pub(crate) async fn reference_session(template: &str, actor: &str) -> Server {
    let server = Server::start(&[]);
    server.push(template);
    let created = server.create(actor, template);
    assert_eq!(created["state"], "running");
    assert_eq!(created["snapshot"]["seq"], 0);

    let first = post(&server, actor).await;
    assert_eq!(
        first.body,
        "hello from: worker-1 | preserved memory count: 1\n"
    );
    assert_eq!(
        first.headers.get("content-type").map(|v| v.as_bytes()),
        Some(&b"text/plain; charset=utf-8"[..])
    );
    assert_eq!(count(&post(&server, actor).await), 2);

    let paused = server.cli_json(&["actor", "pause", actor]);
    assert_eq!(paused["state"], "paused");
    let seq = paused["snapshot"]["seq"].as_u64().expect("seq");
    let bytes = paused["snapshot_bytes"].as_u64().expect("snapshot_bytes");
    assert!(paused["duration_ms"].as_f64().expect("duration_ms") > 0.0);
    let file = server
        .data_dir
        .join(format!("snapshots/{actor}/{seq:020}.snap"));
    assert_eq!(
        std::fs::metadata(&file).expect("snapshot file").len(),
        bytes
    );

    // A second pause is a no-op.
    let again = server.cli_json(&["actor", "pause", actor]);
    assert_eq!(again["snapshot"]["seq"].as_u64(), Some(seq));

    assert_eq!(count(&post(&server, actor).await), 3);
    let got = server.cli_json(&["actor", "get", actor]);
    assert_eq!(got["state"], "running");
    assert_eq!(got["resumes"], 1);
    for key in [
        "name",
        "template",
        "state",
        "worker",
        "epoch",
        "snapshot",
        "resumes",
        "last_pause_ms",
        "last_resume_ms",
    ] {
        assert!(got.get(key).is_some(), "actor get lacks {key}: {got}");
    }

    server.cli_ok(&["actor", "pause", actor]);
    let resumed = server.cli_json(&["actor", "resume", actor]);
    assert_eq!(resumed["state"], "running");

    let server = server.restart(&[]);
    assert_eq!(count(&post(&server, actor).await), 4);
    let list = server.cli_json(&["actor", "list"]);
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actors_of_one_template_are_separate_and_delete_is_clean() {
    let server = Server::start(&[]);
    server.push("counter");
    server.create("c-a", "counter");
    server.create("c-b", "counter");
    for _ in 0..3 {
        post(&server, "c-a").await;
    }
    assert_eq!(count(&post(&server, "c-b").await), 1);
    server.cli_ok(&["actor", "pause", "c-a"]);
    let folder = server.data_dir.join("snapshots/c-a");
    assert!(folder.is_dir());
    server.cli_ok(&["actor", "delete", "c-a"]);
    assert!(!folder.exists(), "delete must remove the snapshots folder");
    assert_eq!(post(&server, "c-a").await.status, 404);
    assert_eq!(count(&post(&server, "c-b").await), 2);
    let out = server.cli(&["actor", "get", "c-a"]);
    assert_eq!(out.status.code(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_to_a_paused_actor_resume_it_once() {
    let server = Server::start(&[]);
    server.push("counter");
    server.create("burst", "counter");
    assert_eq!(count(&post(&server, "burst").await), 1);
    server.cli_ok(&["actor", "pause", "burst"]);
    let before = server.cli_json(&["actor", "get", "burst"])["resumes"]
        .as_u64()
        .expect("resumes");
    let answers = burst(
        &client(),
        server.ingress,
        "POST",
        "burst.actors.localhost",
        "/",
        64,
    )
    .await;
    let mut counts: Vec<u64> = answers
        .into_iter()
        .map(|reply| count(&reply.into()))
        .collect();
    counts.sort_unstable();
    assert_eq!(counts, (2..=65).collect::<Vec<u64>>());
    let after = server.cli_json(&["actor", "get", "burst"])["resumes"]
        .as_u64()
        .expect("resumes");
    assert_eq!(after, before + 1, "exactly one resume for the burst");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_during_a_pause_are_held_and_served_in_order() {
    let server = Server::start(&[]);
    server.push("faulty");
    server.create("big", "faulty");
    // 96 MiB of touched memory makes the pause window tens of milliseconds.
    let grown = send(
        &client(),
        server.ingress,
        "POST",
        "big.actors.localhost",
        "/grow?mib=96",
        Vec::new(),
    )
    .await;
    assert_eq!(grown.status, 200, "{grown:?}");
    let admin = server.admin_url();
    let pause = tokio::spawn(async move {
        let c = client();
        let req = hyper::Request::post(format!("{admin}/v1/actors/big/pause"))
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .expect("request");
        c.request(req).await.expect("pause").status().as_u16()
    });
    // sleep: gives the pause a head start on the burst (nothing to observe yet).
    tokio::time::sleep(Duration::from_millis(5)).await;
    let answers = burst(
        &client(),
        server.ingress,
        "POST",
        "big.actors.localhost",
        "/",
        16,
    )
    .await;
    let mut counts = Vec::new();
    for answer in answers {
        let answer = Answer::from(answer);
        assert_eq!(answer.status, 200, "{answer:?}");
        let n: u64 = answer
            .body
            .trim()
            .strip_prefix("count: ")
            .and_then(|n| n.parse().ok())
            .expect("count");
        counts.push(n);
    }
    assert_eq!(pause.await.expect("pause task"), 200);
    counts.sort_unstable();
    assert_eq!(counts, (1..=16).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_over_real_http() {
    let server = Server::start(&["--domain", "example.test"]);
    server.push("counter");
    server.create("r1", "counter");
    let c = client();
    let addr = server.ingress;
    let status = |host: &'static str| {
        let c = c.clone();
        async move { send(&c, addr, "GET", host, "/", Vec::new()).await.status }
    };
    assert_eq!(status("r1.actors.example.test").await, 200);
    assert_eq!(status("R1.ACTORS.Example.Test:1234").await, 200);
    assert_eq!(status("r1.actors.example.test.").await, 200);
    assert_eq!(status("r1.actors.localhost").await, 404);
    assert_eq!(status("nobody.actors.example.test").await, 404);
    assert_eq!(status("x.r1.actors.example.test").await, 404);
    assert_eq!(status("r1actors.example.test").await, 404);
    let not_found = send(&c, addr, "GET", "zz.actors.example.test", "/", Vec::new()).await;
    assert!(
        not_found.body.contains("zz"),
        "404 names what was looked up: {not_found:?}"
    );

    // Raw HTTP/1.1 for what a well-behaved client never sends.
    let missing = raw(addr, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n").await;
    assert_eq!(raw_status(&missing), 400, "{missing}");
    let repeated = raw(
        addr,
        "GET / HTTP/1.1\r\nHost: r1.actors.example.test\r\nHost: r1.actors.example.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&repeated), 400, "{repeated}");
    let absolute = raw(
        addr,
        "GET http://r1.actors.example.test/ HTTP/1.1\r\nHost: other.example\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&absolute), 200, "{absolute}");
    let by_header = raw(
        addr,
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nstasis-actor: r1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&by_header), 200, "{by_header}");

    // h2c with prior knowledge: the :authority names the actor.
    let (mut sender, _conn) = crate::support::h2c(addr).await;
    let req = hyper::Request::post("http://r1.actors.example.test/")
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("request");
    let res = sender.send_request(req).await.expect("h2 request");
    assert_eq!(res.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_gets_method_path_query_and_body() {
    let server = Server::start(&[]);
    server.push("echo");
    server.create("e1", "echo");
    let body = vec![7u8; 100_000];
    let answer = send(
        &client(),
        server.ingress,
        "PUT",
        "e1.actors.localhost",
        "/a/b?c=d",
        body.clone(),
    )
    .await;
    let expected = echo_answer(&body);
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors_and_harms_nothing() {
    let server = Server::start(&["--max-body", "1KiB"]);
    // Malformed wasm: clear error, nothing registered.
    let junk = tempfile::NamedTempFile::new().expect("tmp");
    std::fs::write(junk.path(), b"\0asm\x01\0\0\0garbage").expect("write");
    let out = server.cli(&[
        "template",
        "push",
        "junk",
        junk.path().to_str().expect("path"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid wasm"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert_eq!(
        server.cli_json(&["template", "list"]),
        serde_json::json!([])
    );

    server.push("counter");
    // Same bytes again: no-op. Other bytes under the name: its next
    // version, which existing actors do not run.
    server.push("counter");
    let echo = support::demo("echo");
    let out = server.cli(&["template", "push", "counter", echo.to_str().expect("path")]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // The counter's bytes again: version 3, the counter new actors run.
    server.push("counter");
    assert_eq!(
        server.cli_json(&["template", "get", "counter"])["version"],
        3
    );

    let out = server.cli(&["actor", "create", "a1", "--template", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
    for bad in ["Bad_Name", "-x", "x-", &"a".repeat(64), "a.b"] {
        let out = server.cli(&["actor", "create", "--template", "counter", "--", bad]);
        assert_eq!(out.status.code(), Some(1), "{bad} must be refused");
    }
    server.create("a1", "counter");
    let out = server.cli(&["actor", "create", "a1", "--template", "counter"]);
    assert_eq!(out.status.code(), Some(1), "duplicate name");
    let out = server.cli(&["template", "delete", "counter"]);
    assert_eq!(out.status.code(), Some(1), "template in use");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("a1"),
        "names its users: {out:?}"
    );
    assert_eq!(count(&post(&server, "a1").await), 1);

    // Usage errors exit 2.
    assert_eq!(server.cli(&["actor", "frobnicate"]).status.code(), Some(2));

    // Body over --max-body: 413, actor unharmed.
    let big = send(
        &client(),
        server.ingress,
        "POST",
        "a1.actors.localhost",
        "/",
        vec![1; 2048],
    )
    .await;
    assert_eq!(big.status, 413);
    assert_eq!(count(&post(&server, "a1").await), 2);

    // A trap: 500 saying so (the reason is in `actor get`); the actor
    // continues from its last answered request (durability `request`), not
    // its newest snapshot.
    server.push("faulty");
    server.create("f1", "faulty");
    let c = client();
    let addr = server.ingress;
    for _ in 0..2 {
        send(&c, addr, "POST", "f1.actors.localhost", "/", Vec::new()).await;
    }
    server.cli_ok(&["actor", "pause", "f1"]);
    let three = send(&c, addr, "POST", "f1.actors.localhost", "/", Vec::new()).await;
    assert_eq!(three.body, "count: 3\n");
    let trap = send(&c, addr, "POST", "f1.actors.localhost", "/trap", Vec::new()).await;
    assert_eq!(trap.status, 500);
    assert!(trap.body.contains("actor f1 trapped"), "{trap:?}");
    let got = server.cli_json(&["actor", "get", "f1"]);
    assert!(
        got["error"]
            .as_str()
            .is_some_and(|e| e.contains("unreachable")),
        "{got}"
    );
    let after = send(&c, addr, "GET", "f1.actors.localhost", "/", Vec::new()).await;
    assert_eq!(
        after.body, "count: 3\n",
        "rolled back to the last answered request"
    );
    assert_eq!(count(&post(&server, "a1").await), 3, "neighbour unharmed");

    // A second serve on the same data dir is refused.
    let second = Server::start_in(&server.data_dir, &[]);
    let err = second.err().expect("second serve must fail");
    assert!(err.contains("in use"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_connections_survive_a_pause() {
    let server = Server::start(&[]);
    server.push("counter");
    server.create("ka", "counter");
    let stream = tokio::net::TcpStream::connect(server.ingress)
        .await
        .expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(conn);
    let post = || {
        hyper::Request::post("/")
            .header("host", "ka.actors.localhost")
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .expect("request")
    };
    use http_body_util::BodyExt as _;
    let body = |r: hyper::Response<hyper::body::Incoming>| async move {
        String::from_utf8(
            r.into_body()
                .collect()
                .await
                .expect("body")
                .to_bytes()
                .to_vec(),
        )
        .expect("utf-8")
    };
    let first = sender.send_request(post()).await.expect("first");
    assert!(body(first).await.ends_with("count: 1\n"));
    server.cli_ok(&["actor", "pause", "ka"]);
    sender.ready().await.expect("connection still open");
    let second = sender
        .send_request(post())
        .await
        .expect("same connection after the pause");
    assert_eq!(second.status(), 200);
    assert!(body(second).await.ends_with("count: 2\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_output_is_logged_with_the_actor_name() {
    let server = Server::start(&[]);
    server.push("faulty");
    server.create("chatty", "faulty");
    let answer = send(
        &client(),
        server.ingress,
        "POST",
        "chatty.actors.localhost",
        "/print?text=hello-from-the-guest",
        Vec::new(),
    )
    .await;
    assert_eq!(answer.status, 200);
    let log = stasis_test_util::wait::until_else(
        "the guest output in the log",
        Duration::from_secs(5),
        || {
            let log = server.log();
            let lines = log
                .lines()
                .filter(|l| l.contains("hello-from-the-guest"))
                .count();
            if lines >= 2 { Ok(log) } else { Err(log) }
        },
    );
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("hello-from-the-guest"))
        .collect();
    assert!(
        lines.iter().all(|l| l.contains("actor=chatty")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("stream=\"stdout\"") || l.contains("stream=stdout")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l.contains("stderr")), "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clock_never_goes_backwards_across_a_restart() {
    let server = Server::start(&[]);
    server.push("faulty");
    server.create("clock", "faulty");
    let read = |server: &Server| {
        let addr = server.ingress;
        async move {
            let body = send(
                &client(),
                addr,
                "GET",
                "clock.actors.localhost",
                "/clock",
                Vec::new(),
            )
            .await
            .body;
            body.split_whitespace()
                .find_map(|w| w.strip_prefix("monotonic="))
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no clock in {body:?}"))
        }
    };
    // Never stricter than sleeping 200 ms and reading once.
    stasis_test_util::wait::until_else_async(
        "the virtual clock to pass 200 ms",
        Duration::from_millis(200),
        async || {
            let now = read(&server).await;
            if now >= 200_000_000 { Ok(()) } else { Err(now) }
        },
    )
    .await;
    let before = read(&server).await;
    assert!(
        before >= 200_000_000,
        "the virtual clock runs while live: {before}"
    );
    server.cli_ok(&["actor", "pause", "clock"]);
    // A new process on the same data dir: the clock resumes where it stopped.
    let server = server.restart(&[]);
    let after = read(&server).await;
    assert!(
        after >= before,
        "monotonic clock went back: {before} -> {after}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_written_by_serve_restores_in_another_process() {
    use stasis_core::engine::Limits;
    use stasis_core::instance::InstanceConfig;
    use stasis_test_util::engine;
    let server = Server::start(&[]);
    server.push("counter");
    server.create("xproc", "counter");
    for _ in 0..5 {
        post(&server, "xproc").await;
    }
    let paused = server.cli_json(&["actor", "pause", "xproc"]);
    let seq = paused["snapshot"]["seq"].as_u64().expect("seq");
    let file = server
        .data_dir
        .join(format!("snapshots/xproc/{seq:020}.snap"));
    let bytes = std::fs::read(&file).expect("snapshot file");
    // This test process is the other process: a new engine, the template
    // from the demo file, the snapshot from serve's data dir.
    let engine = engine::engine(Limits::default());
    let template = engine::load(&engine, &support::STASIS.demo_wasm("counter"));
    let config = InstanceConfig::new("xproc", "test-process", Vec::new());
    let mut restored = engine::restore(&engine, template, &bytes, config).await;
    let request = engine::request("POST", "/", Vec::new());
    let response = restored.call(&request).await.expect("call");
    assert_eq!(
        String::from_utf8_lossy(&response.body),
        "hello from: test-process | preserved memory count: 6\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_compiled_cache_is_recompiled_not_trusted() {
    let server = Server::start(&[]);
    server.push("counter");
    server.create("cached", "counter");
    assert_eq!(count(&post(&server, "cached").await), 1);
    let mut server = server;
    let dir = server.stop();
    let mut corrupted = 0;
    for entry in std::fs::read_dir(dir.join("cache")).expect("cache dir") {
        let path = entry.expect("entry").path();
        let mut bytes = std::fs::read(&path).expect("read");
        let mid = bytes.len() / 2;
        for b in &mut bytes[mid..mid + 64] {
            *b = 0x0f;
        }
        std::fs::write(&path, bytes).expect("write");
        corrupted += 1;
    }
    assert!(corrupted >= 2, "spawn and resume variants are cached");
    let server = Server::start_in(&dir, &[]).expect("restart");
    assert_eq!(count(&post(&server, "cached").await), 2);
    drop(server);
    let worker = std::process::Command::new(env!("CARGO_BIN_EXE_stasis"))
        .args([
            "worker",
            "run",
            "--join",
            "http://127.0.0.1:9",
            "--name",
            "oops",
            "--data-dir",
        ])
        .arg(&dir)
        .output()
        .expect("run");
    assert_eq!(worker.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&worker.stderr).contains("stasis.db"),
        "{worker:?}"
    );
    assert!(
        dir.join("snapshots/cached").is_dir(),
        "the control plane's snapshots are untouched"
    );
}
