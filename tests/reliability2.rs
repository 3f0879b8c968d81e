//! Reliability round 2 (issue 11), against the real `stasis` binary over
//! loopback HTTP: static constructors run once per actor life.

mod support;

use support::{Answer, Server, client, send};

/// Sends `method path` to actor `actor` of `server`.
async fn to_actor(server: &Server, actor: &str, method: &str, path: &str) -> Answer {
    send(
        &client(),
        server.ingress,
        method,
        &format!("{actor}.actors.localhost"),
        path,
        Vec::new(),
    )
    .await
}

/// Input 6: a Rust guest built with the SDK is a reactor; its static
/// constructor runs once, at creation, never per call nor after a pause,
/// a trap rollback or a move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_guests_run_static_constructors_once() {
    let server = Server::start(&[]);
    server.push("faulty");
    let first = server.create("ctor", "faulty")["worker"]
        .as_str()
        .expect("worker")
        .to_owned();
    let constructors = |answer: Answer| {
        assert_eq!(answer.status, 200, "{answer:?}");
        answer.body
    };
    for i in 1..=5 {
        let answer = to_actor(&server, "ctor", "POST", "/").await;
        assert_eq!(answer.body, format!("count: {i}\n"));
    }
    let once = "constructors: 1\n";
    assert_eq!(
        constructors(to_actor(&server, "ctor", "GET", "/constructors").await),
        once
    );
    server.cli_ok(&["actor", "pause", "ctor"]);
    assert_eq!(
        to_actor(&server, "ctor", "POST", "/").await.body,
        "count: 6\n"
    );
    assert_eq!(
        constructors(to_actor(&server, "ctor", "GET", "/constructors").await),
        once
    );
    let trap = to_actor(&server, "ctor", "POST", "/trap").await;
    assert_eq!(trap.status, 500, "{trap:?}");
    assert_eq!(
        constructors(to_actor(&server, "ctor", "GET", "/constructors").await),
        once
    );
    let other = if first == "worker-1" {
        "worker-2"
    } else {
        "worker-1"
    };
    server.cli_ok(&["actor", "migrate", "ctor", "--to", other]);
    assert_eq!(
        constructors(to_actor(&server, "ctor", "GET", "/constructors").await),
        once
    );
    // The trap rolled the actor back to its pause snapshot (count 5).
    assert_eq!(
        to_actor(&server, "ctor", "GET", "/").await.body,
        "count: 5\n"
    );
}
