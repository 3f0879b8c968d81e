//! The class "HTTP strictness at the ingress" (issue 11): an authority
//! with an invalid port, an HTTP/2 request whose `Host` disagrees with its
//! `:authority` (RFC 9113 §8.3.1), and a repeated `Transfer-Encoding` are
//! each a 400, never a routed request (the actor's count does not move).
//! Raw HTTP/1.1 and h2c over loopback against the real binary.

use bytes::Bytes;
use http_body_util::Full;

use crate::support::{self, Server, client, count, raw, raw_status};

/// The actor's count, read without changing it.
async fn count_of(server: &Server, actor: &str) -> u64 {
    count(&support::to_actor(&client(), server.ingress, actor, "GET", "/").await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_400_and_never_routed() {
    let server = Server::start(&[]);
    server.push("faulty");
    server.create("s1", "faulty");
    let addr = server.ingress;
    let post =
        |head: &str| format!("POST {head}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    let cases = [
        post("/ HTTP/1.1\r\nHost: s1.actors.localhost:99999"),
        post("/ HTTP/1.1\r\nHost: s1.actors.localhost:8o"),
        post("/ HTTP/1.1\r\nHost: s1.actors.localhost:-1"),
        post("/ HTTP/1.1\r\nHost: 127.0.0.1:65536\r\nstasis-actor: s1"),
        post("http://s1.actors.localhost:70000/ HTTP/1.1\r\nHost: s1.actors.localhost"),
        "POST / HTTP/1.1\r\nHost: s1.actors.localhost\r\nTransfer-Encoding: chunked\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n1\r\nx\r\n0\r\n\r\n"
            .to_owned(),
        "POST / HTTP/1.1\r\nHost: s1.actors.localhost\r\nTransfer-Encoding: chunked, chunked\r\n\
         Connection: close\r\n\r\n1\r\nx\r\n0\r\n\r\n"
            .to_owned(),
    ];
    for case in &cases {
        let answer = raw(addr, case).await;
        assert_eq!(raw_status(&answer), 400, "{case:?} -> {answer}");
    }
    // A well-formed request with a port and with chunked framing is routed.
    let fine = raw(addr, &post("/ HTTP/1.1\r\nHost: s1.actors.localhost:8000")).await;
    assert_eq!(raw_status(&fine), 200, "{fine}");
    let chunked = raw(
        addr,
        "POST / HTTP/1.1\r\nHost: s1.actors.localhost\r\nTransfer-Encoding: chunked\r\n\
         Connection: close\r\n\r\n1\r\nx\r\n0\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&chunked), 200, "{chunked}");
    assert_eq!(
        count_of(&server, "s1").await,
        2,
        "only the two good POSTs ran"
    );

    // h2c: a Host header naming another actor (or port) than :authority.
    let (mut sender, _conn) = crate::support::h2c(addr).await;
    for (host, expected) in [
        ("other.actors.localhost", 400),
        ("s1.actors.localhost:81", 400),
        ("S1.actors.localhost.:80", 200),
    ] {
        let req = hyper::Request::post("http://s1.actors.localhost:80/")
            .header("host", host)
            .body(Full::new(Bytes::new()))
            .expect("request");
        let res = sender.send_request(req).await.expect("h2 request");
        assert_eq!(res.status(), expected, "h2 Host {host}");
    }
    assert_eq!(
        count_of(&server, "s1").await,
        3,
        "only the agreeing h2 POST ran"
    );
}

/// A WebSocket upgrade to an actor whose module does not take WebSockets
/// (no `stasis_on_socket` export) is refused with 501 naming why (issue
/// 30, item 10: it used to reach the actor as a plain GET and be answered
/// 200), and the actor's handler never sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_upgrade_is_refused_and_never_reaches_the_actor() {
    let server = Server::start(&["--workers", "1"]);
    server.push("counter");
    server.create("ws1", "counter");
    let upgrade = raw(
        server.ingress,
        "GET / HTTP/1.1\r\nHost: ws1.actors.localhost\r\nConnection: Upgrade\r\n\
         Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&upgrade), 501, "{upgrade}");
    assert!(upgrade.contains("does not take WebSockets"), "{upgrade}");
    let first = support::to_actor(&client(), server.ingress, "ws1", "POST", "/").await;
    assert_eq!(count(&first), 1, "the upgrade never ran: {first:?}");
}
