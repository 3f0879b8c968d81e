//! The ABI 2 host functions through the real binary: the `caller` demo
//! calls and messages the `counter` demo, in one process and across two
//! worker processes, running and paused; call cycles answer 508 at once.

use std::time::{Duration, Instant};

use crate::support::{RemoteWorker, Server, client, count, to_actor};

/// `POST /call/<target>` (or another path) to the caller actor `caller`.
async fn via(server: &Server, caller: &str, path: &str) -> crate::support::Answer {
    to_actor(&client(), server.ingress, caller, "POST", path).await
}

/// The counter's count after a call through `caller`, checked to be `n`.
async fn call_counts(server: &Server, caller: &str, counter: &str, n: u64) {
    let answer = via(server, caller, &format!("/call/{counter}")).await;
    assert_eq!(count(&answer), n, "{answer:?}");
}

fn state(server: &Server, actor: &str) -> String {
    server.cli_json(&["actor", "get", actor])["state"]
        .as_str()
        .expect("state")
        .to_owned()
}

/// The counter counts 1, 2, 3 through the caller with the callee running,
/// paused, and both paused.
async fn counts_running_and_paused(server: &Server) {
    call_counts(server, "front", "back", 1).await;
    server.cli_ok(&["actor", "pause", "back"]);
    assert_eq!(state(server, "back"), "paused");
    call_counts(server, "front", "back", 2).await;
    assert_eq!(state(server, "back"), "running");
    server.cli_ok(&["actor", "pause", "back"]);
    server.cli_ok(&["actor", "pause", "front"]);
    call_counts(server, "front", "back", 3).await;
    assert_eq!(state(server, "front"), "running");
    assert_eq!(state(server, "back"), "running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caller_counts_on_a_counter_running_and_paused() {
    let server = Server::start(&["--workers", "2"]);
    server.push("caller");
    server.push("counter");
    server.create("front", "caller");
    server.create("back", "counter");
    counts_running_and_paused(&server).await;
    // A guest's own answer passes through; an unknown actor is 404.
    let answer = via(&server, "front", "/call/nobody").await;
    assert_eq!(answer.status, 404, "{answer:?}");
    assert!(answer.body.contains("nobody"), "{answer:?}");
    let text = server.metrics().await;
    assert!(
        text.contains(r#"stasis_calls_total{outcome="ok"} 3"#),
        "{text}"
    );
    assert!(
        text.contains(r#"stasis_calls_total{outcome="notfound"} 1"#),
        "{text}"
    );
    // The callee's requests are counted as requests too.
    assert!(
        text.contains(r#"stasis_requests_total{template="counter",status="200"} 3"#),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_cross_two_worker_processes() {
    let server = Server::start(&["--workers", "0"]);
    let a = RemoteWorker::start(&server, "w-a", &[]);
    let b = RemoteWorker::start(&server, "w-b", &[]);
    server.push("caller");
    server.push("counter");
    server.create("front", "caller");
    server.create("back", "counter");
    let front_on = server.worker_of("front");
    if server.worker_of("back") == front_on {
        let other = if front_on == a.name { &b.name } else { &a.name };
        server.cli_ok(&["actor", "migrate", "back", "--to", other]);
    }
    assert_ne!(server.worker_of("back"), server.worker_of("front"));
    counts_running_and_paused(&server).await;
    // The callee's answer names the worker it ran on: the other process.
    let answer = via(&server, "front", "/call/back").await;
    assert_eq!(count(&answer), 4);
    let back_on = server.worker_of("back");
    assert!(
        answer.body.contains(&format!("hello from: {back_on} ")),
        "{answer:?}"
    );
    // Loops are caught across processes too.
    let started = Instant::now();
    let answer = via(&server, "front", "/call/front").await;
    assert_eq!(answer.status, 508, "{answer:?}");
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_is_delivered_and_answered_202() {
    let server = Server::start(&["--workers", "2"]);
    server.push("caller");
    server.push("counter");
    server.create("front", "caller");
    server.create("back", "counter");
    server.cli_ok(&["actor", "pause", "back"]);
    let answer = via(&server, "front", "/send/back").await;
    assert_eq!(answer.status, 202, "{answer:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let read = to_actor(&client(), server.ingress, "back", "GET", "/").await;
        if count(&read) == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the message never arrived: {read:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answer = via(&server, "front", "/send/nobody").await;
    assert_eq!(answer.status, 404, "{answer:?}");
    let text = server.metrics().await;
    assert!(text.contains("stasis_sends_total 1"), "{text}");
    assert!(text.contains("stasis_sends_failed_total 1"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_cycles_answer_508_within_a_second() {
    let server = Server::start(&["--workers", "2"]);
    server.push("caller");
    server.create("a", "caller");
    server.create("b", "caller");
    // a calls itself.
    let started = Instant::now();
    let answer = via(&server, "a", "/call/a").await;
    assert_eq!(answer.status, 508, "{answer:?}");
    assert!(answer.body.contains("loop"), "{answer:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // a calls b, which calls a: b is told 508 and passes it back.
    let started = Instant::now();
    let answer = via(&server, "a", "/call/b/call/a").await;
    assert_eq!(answer.status, 508, "{answer:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // A client cannot forge the chain to slip a cycle past the check, nor
    // to make a legitimate call look like a loop.
    // A client cannot forge the chain: with `b` claimed as a caller, a's
    // call to b would be a loop (508); the header is stripped, so b runs
    // (and answers its own 404 for `POST /`).
    let forged = crate::support::raw(
        server.ingress,
        "POST /call/b HTTP/1.1\r\nHost: a.actors.localhost\r\nstasis-call-chain: b\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(crate::support::raw_status(&forged), 404, "{forged}");
    assert!(forged.contains("use POST /call/"), "{forged}");
    let text = server.metrics().await;
    assert!(
        text.contains(r#"stasis_calls_total{outcome="loopdetected"} 2"#),
        "{text}"
    );
}
