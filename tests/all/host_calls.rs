//! The ABI 2 host functions through the real binary: the `caller` demo
//! calls and messages the `counter` demo, in one process and across two
//! worker processes, running and paused; call cycles answer 508.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use stasis_test_util::wait;

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
    let answer = via(&server, "front", "/call/front").await;
    assert_eq!(answer.status, 508, "{answer:?}");
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
    wait::until_else_async(
        "the message to arrive",
        Duration::from_secs(5),
        async || {
            let read = to_actor(&client(), server.ingress, "back", "GET", "/").await;
            if count(&read) == 1 {
                Ok(())
            } else {
                Err(format!("{read:?}"))
            }
        },
    )
    .await;
    let answer = via(&server, "front", "/send/nobody").await;
    assert_eq!(answer.status, 404, "{answer:?}");
    let text = server.metrics().await;
    assert!(text.contains("stasis_sends_total 1"), "{text}");
    assert!(text.contains("stasis_sends_failed_total 1"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_cycles_answer_508() {
    let server = Server::start(&["--workers", "2"]);
    server.push("caller");
    server.create("a", "caller");
    server.create("b", "caller");
    // a calls itself.
    let answer = via(&server, "a", "/call/a").await;
    assert_eq!(answer.status, 508, "{answer:?}");
    assert!(answer.body.contains("loop"), "{answer:?}");
    // a calls b, which calls a: b is told 508 and passes it back.
    let answer = via(&server, "a", "/call/b/call/a").await;
    assert_eq!(answer.status, 508, "{answer:?}");
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

/// What an [`origin_seen`] server has seen happen.
#[derive(Debug, Default)]
struct Seen {
    /// A request's head was read (its answer is `delay` away).
    request: AtomicBool,
    /// A request's `delay` ran out: its answer is being written.
    answering: AtomicBool,
}

/// A loopback HTTP server answering every request with `body` after
/// `delay`; returns its address. Serves until the test ends.
async fn origin(body: &'static str, delay: Duration) -> std::net::SocketAddr {
    origin_seen(body, delay).await.0
}

/// [`origin`], and what it has seen: when a request arrived, when its
/// answer began.
async fn origin_seen(body: &'static str, delay: Duration) -> (std::net::SocketAddr, Arc<Seen>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind origin");
    let addr = listener.local_addr().expect("origin address");
    let seen = Arc::new(Seen::default());
    let watch = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let seen = watch.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                seen.request.store(true, Ordering::SeqCst);
                // sleep: the origin holds its answer this long (the slow origin is the input).
                tokio::time::sleep(delay).await;
                seen.answering.store(true, Ordering::SeqCst);
                let answer = format!(
                    "HTTP/1.1 203 Non-Authoritative Information\r\ncontent-type: text/plain\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    (addr, seen)
}

async fn fetch(server: &Server, url: &str) -> crate::support::Answer {
    to_actor(
        &client(),
        server.ingress,
        "getter",
        "GET",
        &format!("/?url={url}"),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_reaches_listed_hosts_only() {
    let listed = origin("from the listed origin\n", Duration::ZERO).await;
    let unlisted = origin("never seen\n", Duration::ZERO).await;
    let allow = listed.to_string();
    let server = Server::start(&[
        "--workers",
        "1",
        "--allow-outbound",
        &allow,
        "--allow-outbound",
        "*.example.invalid",
    ]);
    server.push("fetch");
    server.create("getter", "fetch");
    let answer = fetch(&server, &format!("http://{listed}/x")).await;
    assert_eq!(answer.status, 203, "{answer:?}");
    assert_eq!(answer.body, "from the listed origin\n");
    let answer = fetch(&server, &format!("http://{unlisted}/x")).await;
    assert_eq!(answer.status, 502, "{answer:?}");
    assert!(
        answer.body.contains("not allowed by --allow-outbound"),
        "{answer:?}"
    );
    assert!(!answer.body.contains("never seen"), "{answer:?}");
    let answer = fetch(&server, "ftp://example.com/").await;
    assert_eq!(answer.status, 502, "{answer:?}");
    assert!(answer.body.contains("http"), "{answer:?}");
    let text = server.metrics().await;
    assert!(
        text.contains(r#"stasis_fetches_total{outcome="ok"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"stasis_fetches_total{outcome="refused"} 1"#),
        "{text}"
    );
    // A bad rule is refused at start-up, naming it.
    let tmp = tempfile::tempdir().expect("tempdir");
    let refused = Server::start_in(&tmp.path().join("d"), &["--allow-outbound", "bad host"]);
    let stderr = refused.err().expect("serve refuses a bad --allow-outbound");
    assert!(stderr.contains("--allow-outbound"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_waits_for_an_in_flight_fetch() {
    let (slow, seen) = origin_seen("slow answer\n", Duration::from_millis(1500)).await;
    let allow = slow.to_string();
    let server = Server::start(&["--workers", "1", "--allow-outbound", &allow]);
    server.push("fetch");
    server.create("getter", "fetch");
    let url = format!("http://{slow}/");
    let addr = server.ingress;
    let request = tokio::spawn(async move {
        to_actor(&client(), addr, "getter", "GET", &format!("/?url={url}")).await
    });
    // The fetch is in flight once the origin has its request; the origin
    // holds the answer 1.5 s.
    wait::until_async(
        "the fetch to reach the origin",
        Duration::from_secs(10),
        async || seen.request.load(Ordering::SeqCst).then_some(()),
    )
    .await;
    let pause = server.cli_in_background(&["actor", "pause", "getter", "-o", "json"]);
    let paused = pause.await.expect("pause verb");
    // Read as soon as the pause is done: the pause completed only after
    // the fetch did, so the origin had begun its answer by then.
    let answering_before_the_pause_ended = seen.answering.load(Ordering::SeqCst);
    assert!(
        paused.status.success(),
        "{}",
        String::from_utf8_lossy(&paused.stderr)
    );
    assert!(
        answering_before_the_pause_ended,
        "the pause finished while the origin still held the in-flight fetch's answer"
    );
    let answer = request.await.expect("fetch request");
    assert_eq!(answer.status, 203, "{answer:?}");
    assert_eq!(answer.body, "slow answer\n");
    assert_eq!(state(&server, "getter"), "paused");
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_and_sends_cross_workers_in_etcd_cluster_mode() {
    let _one = crate::replicas::ONE_CLUSTER.lock().await;
    let d = crate::replicas::deployment(1, 2, 2, &[]);
    let leader = d.leader();
    let follower = 1 - leader;
    for name in ["caller", "counter"] {
        let path = crate::support::STASIS.demo(name);
        let path = path.to_str().expect("utf-8 path");
        d.cli_ok(follower, &["template", "push", name, path]);
    }
    d.cli_json(
        follower,
        &["actor", "create", "front", "--template", "caller"],
    );
    d.cli_json(
        follower,
        &["actor", "create", "back", "--template", "counter"],
    );
    let worker_of = |actor: &str| {
        d.cli_json(follower, &["actor", "get", actor])["worker"]
            .as_str()
            .expect("worker")
            .to_owned()
    };
    let front_on = worker_of("front");
    if worker_of("back") == front_on {
        let other = if front_on == "w1" { "w2" } else { "w1" };
        d.cli_json(follower, &["actor", "migrate", "back", "--to", other]);
    }
    let back_on = worker_of("back");
    assert_ne!(back_on, front_on);
    let c = client();
    // A call from front's worker reaches back on the other worker, through
    // whichever replica the client came in by.
    for (i, expected) in [(follower, 1), (leader, 2)] {
        let answer = to_actor(&c, d.replica(i).ingress, "front", "POST", "/call/back").await;
        assert_eq!(count(&answer), expected, "via replica {i}: {answer:?}");
        assert!(
            answer.body.contains(&format!("hello from: {back_on} ")),
            "{answer:?}"
        );
    }
    // A paused callee is resumed by the call.
    d.cli_json(follower, &["actor", "pause", "back"]);
    let answer = to_actor(
        &c,
        d.replica(follower).ingress,
        "front",
        "POST",
        "/call/back",
    )
    .await;
    assert_eq!(count(&answer), 3, "{answer:?}");
    // Unknown actors and loops answer as in embedded mode.
    let answer = to_actor(
        &c,
        d.replica(leader).ingress,
        "front",
        "POST",
        "/call/nobody",
    )
    .await;
    assert_eq!(answer.status, 404, "{answer:?}");
    let answer = to_actor(
        &c,
        d.replica(leader).ingress,
        "front",
        "POST",
        "/call/front",
    )
    .await;
    assert_eq!(answer.status, 508, "{answer:?}");
    // A send is accepted and delivered.
    let answer = to_actor(
        &c,
        d.replica(follower).ingress,
        "front",
        "POST",
        "/send/back",
    )
    .await;
    assert_eq!(answer.status, 202, "{answer:?}");
    wait::until_else_async(
        "the message to arrive",
        Duration::from_secs(10),
        async || {
            let read = to_actor(&c, d.replica(leader).ingress, "back", "GET", "/").await;
            if count(&read) == 4 {
                Ok(())
            } else {
                Err(format!("{read:?}"))
            }
        },
    )
    .await;
}
