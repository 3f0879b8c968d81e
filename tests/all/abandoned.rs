//! Issue 11 input 1: requests whose clients gave up. A request whose client
//! is gone before the guest starts it is dropped (never executed) and
//! counted in `stasis_requests_abandoned_total`; one already running
//! finishes and is counted in `stasis_requests_total`. The same while the
//! request waits for a `--max-live` slot. Real binary, loopback.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;

use crate::support::{self, RemoteWorker, Server, actor_host, client, count};
use stasis_test_util::wait;

/// Sends `method path` to `actor` over a raw HTTP/1.1 connection and closes
/// the connection after `patience`, before any answer (as a client with a
/// timeout does).
pub(crate) async fn leave_after(
    addr: SocketAddr,
    actor: &str,
    method: &str,
    path: &str,
    patience: Duration,
) {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\n\r\n",
        actor_host(actor)
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    // sleep: the client's patience, the time it waits before it leaves.
    tokio::time::sleep(patience).await;
    drop(stream);
}

/// The same over HTTP/2 (h2c): the client gives the stream up after
/// `patience` (`RST_STREAM`) and then closes the connection.
async fn leave_after_h2(addr: SocketAddr, actor: &str, path: &str, patience: Duration) {
    let (mut sender, conn) = crate::support::h2c(addr).await;
    let req = hyper::Request::post(format!("http://{}{path}", actor_host(actor)))
        .body(Full::new(Bytes::new()))
        .expect("request");
    let answered = tokio::time::timeout(patience, sender.send_request(req)).await;
    assert!(answered.is_err(), "answered before the client left");
    drop(sender);
    conn.abort();
}

/// The value of the metric line starting with `series ` in `server`'s
/// `/metrics` (0 if absent).
pub(crate) async fn metric(server: &Server, series: &str) -> u64 {
    server
        .metrics()
        .await
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |v| v.trim().parse().expect("metric value"))
}

const ABANDONED: &str = "stasis_requests_abandoned_total";
const OK: &str = "stasis_requests_total{template=\"faulty\",status=\"200\"}";

/// 12 clients send `POST /sleep?ms=3000` and leave after 1 s; a patient
/// `GET /` sent 3 s later is answered as soon as the one sleep that had
/// started ends (before the fix: 503 after 30 s, the hold timeout, with
/// 11 × 3 s of abandoned sleeps still queued).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_left_free_the_actor() {
    let server = Server::start(&[]);
    server.push("faulty");
    server.create("slow", "faulty");
    let start = Instant::now();
    let leavers: Vec<_> = (0..12)
        .map(|_| {
            let addr = server.ingress;
            tokio::spawn(async move {
                leave_after(
                    addr,
                    "slow",
                    "POST",
                    "/sleep?ms=3000",
                    Duration::from_secs(1),
                )
                .await;
            })
        })
        .collect();
    for leaver in leavers {
        leaver.await.expect("client");
    }
    // sleep: the patient GET is sent 3 s after the leavers, as the input says.
    tokio::time::sleep(Duration::from_secs(3).saturating_sub(start.elapsed())).await;
    let sent = Instant::now();
    let patient = support::to_actor(&client(), server.ingress, "slow", "GET", "/").await;
    let waited = sent.elapsed();
    assert_eq!(count(&patient), 0, "{patient:?}");
    assert!(
        waited < Duration::from_secs(3),
        "the patient GET waited {waited:?} behind abandoned requests"
    );
    assert_eq!(metric(&server, ABANDONED).await, 11, "11 never started");
    // The sleep that had started ran to its end and is counted, with the
    // GET (its count is recorded after its answer, which nobody waits
    // for: wait for the count, not for a time).
    wait::until_else_async(
        "the sleep and the GET counted",
        Duration::from_secs(10),
        async || {
            let ok = metric(&server, OK).await;
            if ok >= 2 { Ok(()) } else { Err(ok) }
        },
    )
    .await;
    assert_eq!(metric(&server, OK).await, 2);
}

/// While `POST /sleep?ms=2000` runs, 5 `POST /` whose clients leave after
/// 0.5 s (3 over HTTP/1.1, 2 over h2c) are not applied (the count stays
/// 0) and are counted as abandoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_abandoned_before_they_start_are_never_applied() {
    let server = Server::start(&[]);
    server.push("faulty");
    server.create("c", "faulty");
    let addr = server.ingress;
    let sleeper = tokio::spawn(async move {
        support::to_actor(&client(), addr, "c", "POST", "/sleep?ms=2000").await
    });
    server.wait_for_log_async("sleeping 2000 ms").await;
    let half = Duration::from_millis(500);
    let mut leavers = Vec::new();
    for i in 0..5 {
        leavers.push(tokio::spawn(async move {
            if i < 3 {
                leave_after(addr, "c", "POST", "/", half).await;
            } else {
                leave_after_h2(addr, "c", "/", half).await;
            }
        }));
    }
    for leaver in leavers {
        leaver.await.expect("client");
    }
    let slept = sleeper.await.expect("sleeper");
    assert_eq!(slept.status, 200, "{slept:?}");
    let after = support::to_actor(&client(), addr, "c", "GET", "/").await;
    assert_eq!(count(&after), 0, "abandoned POSTs were applied: {after:?}");
    assert_eq!(metric(&server, ABANDONED).await, 5);
    assert_eq!(metric(&server, OK).await, 2, "the sleep and the GET");
}

/// `--max-live 1`: a request for a paused actor waits for the one slot,
/// which a running `POST /sleep` holds; its client leaves, so it is given
/// up while waiting and never applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waiting_for_a_live_slot_is_abandoned_with_its_client() {
    let server = Server::start(&["--workers", "1", "--max-live", "1"]);
    server.push("faulty");
    server.create("a", "faulty");
    server.create("b", "faulty");
    let addr = server.ingress;
    let sleeper = tokio::spawn(async move {
        support::to_actor(&client(), addr, "a", "POST", "/sleep?ms=2000").await
    });
    server.wait_for_log_async("sleeping 2000 ms").await;
    leave_after(addr, "b", "POST", "/", Duration::from_millis(500)).await;
    let slept = sleeper.await.expect("sleeper");
    assert_eq!(slept.status, 200, "{slept:?}");
    let after = support::to_actor(&client(), addr, "b", "GET", "/").await;
    assert_eq!(
        count(&after),
        0,
        "the abandoned POST was applied: {after:?}"
    );
    assert_eq!(metric(&server, ABANDONED).await, 1);
}

/// The same through a remote worker: when the client leaves, the router
/// drops its forward, and the worker's serving loop, seeing that
/// connection close, gives the request up before the guest runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_to_a_remote_worker_is_abandoned_with_its_client() {
    let server = Server::start(&["--workers", "0"]);
    let worker = RemoteWorker::start(&server, "w1", &[]);
    server.push("faulty");
    server.create("r", "faulty");
    assert_eq!(server.worker_of("r"), "w1");
    let addr = server.ingress;
    let sleeper = tokio::spawn(async move {
        support::to_actor(&client(), addr, "r", "POST", "/sleep?ms=2000").await
    });
    worker.wait_for_log_async("sleeping 2000 ms").await;
    let leavers: Vec<_> = (0..3)
        .map(|_| {
            tokio::spawn(async move {
                leave_after(addr, "r", "POST", "/", Duration::from_millis(500)).await;
            })
        })
        .collect();
    for leaver in leavers {
        leaver.await.expect("client");
    }
    let slept = sleeper.await.expect("sleeper");
    assert_eq!(slept.status, 200, "{slept:?}");
    let after = support::to_actor(&client(), addr, "r", "GET", "/").await;
    assert_eq!(
        count(&after),
        0,
        "abandoned POSTs ran on the worker: {after:?}"
    );
    assert_eq!(metric(&server, ABANDONED).await, 3);
}

/// A request held at a moving actor's closed gate: the move waits for the
/// running `POST /sleep` to finish before it closes the gate, and a request
/// arriving meanwhile waits at the gate; its client leaves, so it is given
/// up there and never applied, on either worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_held_at_a_closed_gate_is_abandoned_with_its_client() {
    let server = Server::start(&["--workers", "2"]);
    server.push("faulty");
    server.create("g", "faulty");
    let to = if server.worker_of("g") == "worker-1" {
        "worker-2"
    } else {
        "worker-1"
    };
    let addr = server.ingress;
    let sleeper = tokio::spawn(async move {
        support::to_actor(&client(), addr, "g", "POST", "/sleep?ms=2000").await
    });
    server.wait_for_log_async("sleeping 2000 ms").await;
    let migrate = server.migrate_in_background("g", to);
    // sleep: lets the move reach the running request (it logs nothing then).
    tokio::time::sleep(Duration::from_millis(300)).await;
    leave_after(addr, "g", "POST", "/", Duration::from_millis(500)).await;
    let slept = sleeper.await.expect("sleeper");
    assert_eq!(slept.status, 200, "{slept:?}");
    let moved = migrate.await.expect("migrate");
    assert!(moved.status.success(), "{moved:?}");
    assert_eq!(server.worker_of("g"), to);
    let after = support::to_actor(&client(), addr, "g", "GET", "/").await;
    assert_eq!(
        count(&after),
        0,
        "the abandoned POST was applied: {after:?}"
    );
    assert_eq!(metric(&server, ABANDONED).await, 1);
}
