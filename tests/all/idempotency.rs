//! Idempotent retries (docs/api.md, "Idempotent retries") through the
//! real binary: a POST to a counter carrying an `Idempotency-Key`,
//! retried after its answer was lost (a proxy that drops it), after
//! `kill -9` of `serve` (the key re-derived by the journal's replay, then
//! read from a snapshot), after a pause and resume, and after moves
//! between in-process workers and between worker processes, and after a
//! cluster worker is lost with its disk (failover: the new owner replays
//! the shipped journal), is applied once and answered with its first
//! answer; the same key with another body is 422, a key past the limit
//! 400.

use bytes::Bytes;
use std::net::SocketAddr;

use stasis_test_util::cluster::{Deployment, Setup};
use stasis_test_util::fault_proxy::{Fault, FaultProxy};
use stasis_test_util::http::send_with;

use crate::fencing::wait_for_actor;
use crate::replicas::{LEASE_TTL, ONE_CLUSTER, echo};

use crate::support::{
    Answer, RemoteWorker, Server, actor_host, client, count, raw, raw_status, to_actor,
};

/// POSTs `body` to actor `actor` through `server`'s ingress with
/// `Idempotency-Key: key`.
async fn keyed(server: &Server, actor: &str, key: &str, body: &str) -> Answer {
    keyed_at(server.ingress, actor, key, body).await
}

/// [`keyed`] through the ingress at `ingress`.
async fn keyed_at(ingress: SocketAddr, actor: &str, key: &str, body: &str) -> Answer {
    send_with(
        &client(),
        ingress,
        "POST",
        &actor_host(actor),
        "/",
        &[("idempotency-key", key)],
        Bytes::from(body.to_owned()),
    )
    .await
    .into()
}

/// The count `actor` holds now (a GET applies nothing).
async fn now(server: &Server, actor: &str) -> u64 {
    count(&to_actor(&client(), server.ingress, actor, "GET", "/").await)
}

/// Whether `answer` was given again for a retry.
fn replayed(answer: &Answer) -> bool {
    answer
        .headers
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

/// `retry` is `first` given again: same status, body and content type,
/// marked as a replay.
fn same_answer(first: &Answer, retry: &Answer) {
    assert_eq!(retry.status, first.status, "{retry:?}");
    assert_eq!(retry.body, first.body, "{retry:?}");
    assert_eq!(
        retry.headers.get("content-type"),
        first.headers.get("content-type")
    );
    assert!(replayed(retry), "{retry:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_lost_answer_is_applied_once_and_gets_the_first_answer() {
    let server = Server::start(&[]);
    server.push("counter");
    server.create("c", "counter");
    assert_eq!(count(&keyed(&server, "c", "warm-up", "").await), 1);
    let proxy = FaultProxy::start(server.ingress);
    proxy.on("POST", "/", Fault::LoseAnswer, 1);
    let lost = raw(
        proxy.addr(),
        "POST / HTTP/1.1\r\nHost: c.actors.localhost\r\nIdempotency-Key: order-17\r\n\
         Content-Length: 2\r\nConnection: close\r\n\r\nhi",
    )
    .await;
    assert!(lost.is_empty(), "the answer was not lost: {lost:?}");
    assert_eq!(proxy.fired().len(), 1);
    assert_eq!(now(&server, "c").await, 2, "the lost request was applied");
    // The retry: the first answer, not applied again.
    let retry = keyed(&server, "c", "order-17", "hi").await;
    assert_eq!(retry.status, 200, "{retry:?}");
    assert_eq!(count(&retry), 2, "{retry:?}");
    assert!(replayed(&retry), "{retry:?}");
    let again = keyed(&server, "c", "order-17", "hi").await;
    same_answer(&retry, &again);
    assert_eq!(now(&server, "c").await, 2);
    // The same key with another body: 422, not applied.
    let other = keyed(&server, "c", "order-17", "another body").await;
    assert_eq!(other.status, 422, "{other:?}");
    assert!(other.body.contains("another request"), "{other:?}");
    // A key past the limit: 400 naming it, not applied.
    let long = "k".repeat(256);
    let refused = keyed(&server, "c", &long, "hi").await;
    assert_eq!(refused.status, 400, "{refused:?}");
    assert!(refused.body.contains("255"), "{refused:?}");
    let bad = raw(
        server.ingress,
        "POST / HTTP/1.1\r\nHost: c.actors.localhost\r\nIdempotency-Key: two words\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&bad), 400, "{bad}");
    assert_eq!(now(&server, "c").await, 2);
    // A new key is a new request.
    assert_eq!(count(&keyed(&server, "c", "order-18", "hi").await), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_kill_nine_pause_and_resume_gets_the_first_answer() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("data");
    let mut server = Server::start_in(&dir, &[]).expect("serve starts");
    server.push("counter");
    server.create("c", "counter");
    let first = keyed(&server, "c", "k-1", "one").await;
    assert_eq!(count(&first), 1);
    assert!(!replayed(&first));
    assert_eq!(count(&keyed(&server, "c", "k-2", "two").await), 2);
    // kill -9: the key comes back with its delivery from the journal.
    server.kill();
    let mut server = Server::start_in(&dir, &[]).expect("restart");
    same_answer(&first, &keyed(&server, "c", "k-1", "one").await);
    assert_eq!(now(&server, "c").await, 2);
    // A pause writes a snapshot, which holds the keys: kill -9 again, and
    // they come back from the snapshot.
    server.cli_ok(&["actor", "pause", "c"]);
    same_answer(&first, &keyed(&server, "c", "k-1", "one").await);
    server.cli_ok(&["actor", "pause", "c"]);
    server.kill();
    let server = Server::start_in(&dir, &[]).expect("restart");
    server.cli_ok(&["actor", "resume", "c"]);
    same_answer(&first, &keyed(&server, "c", "k-1", "one").await);
    let second = keyed(&server, "c", "k-2", "two").await;
    assert_eq!(count(&second), 2);
    assert!(replayed(&second));
    assert_eq!(
        keyed(&server, "c", "k-2", "not two").await.status,
        422,
        "the key's request is remembered across restarts"
    );
    assert_eq!(now(&server, "c").await, 2, "a retry was applied again");
    assert_eq!(count(&keyed(&server, "c", "k-3", "three").await), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_move_between_workers_gets_the_first_answer() {
    let server = Server::start(&["--workers", "2"]);
    server.push("counter");
    server.create("c", "counter");
    let from = server.worker_of("c");
    let first = keyed(&server, "c", "move-1", "").await;
    assert_eq!(count(&first), 1);
    let to = if from == "worker-1" {
        "worker-2"
    } else {
        "worker-1"
    };
    server.cli_ok(&["actor", "migrate", "c", "--to", to]);
    assert_eq!(server.worker_of("c"), to);
    let retry = keyed(&server, "c", "move-1", "").await;
    same_answer(&first, &retry);
    assert!(
        retry.body.contains(&from),
        "the first answer names {from}: {retry:?}"
    );
    assert_eq!(now(&server, "c").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_move_between_worker_processes_gets_the_first_answer() {
    let server = Server::start(&["--workers", "0"]);
    let a = RemoteWorker::start(&server, "w-a", &[]);
    let b = RemoteWorker::start(&server, "w-b", &[]);
    server.push("counter");
    server.create("c", "counter");
    let from = server.worker_of("c");
    let first = keyed(&server, "c", "far-1", "x").await;
    assert_eq!(count(&first), 1);
    // More requests: the snapshot shipped is a delta chain, flattened.
    for n in 2..=3 {
        assert_eq!(
            count(&keyed(&server, "c", &format!("far-{n}"), "x").await),
            n
        );
    }
    let to = if from == a.name { &b.name } else { &a.name };
    server.cli_ok(&["actor", "migrate", "c", "--to", to]);
    let retry = keyed(&server, "c", "far-1", "x").await;
    same_answer(&first, &retry);
    assert!(retry.body.contains(&from), "{retry:?}");
    assert_eq!(now(&server, "c").await, 3);
    // Paused, and back: the paused snapshot keeps them too.
    server.cli_ok(&["actor", "pause", "c"]);
    server.cli_ok(&["actor", "migrate", "c", "--to", &from]);
    same_answer(&first, &keyed(&server, "c", "far-1", "x").await);
    assert_eq!(count(&keyed(&server, "c", "far-4", "x").await), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_after_failover_of_a_lost_cluster_worker_gets_the_first_answer() {
    let _one = ONE_CLUSTER.lock().await;
    let mut setup = Setup::new(1, 1, 2);
    setup.lease_ttl = Some(LEASE_TTL.to_owned());
    // Entries are not folded into snapshots: the new owner has the keys
    // from the shipped journal's segments only.
    setup.env = vec![(
        "STASIS_FAILPOINT_FOLD_AFTER_MS".to_owned(),
        "600000".to_owned(),
    )];
    setup.echo = echo();
    let mut d = Deployment::start(crate::support::STASIS, setup);
    d.push_counter(0);
    d.cli_json(0, &["actor", "create", "i1", "--template", "counter"]);
    let ingress = d.replica(0).ingress;
    let first = keyed_at(ingress, "i1", "pay-1", "10 EUR").await;
    assert_eq!(count(&first), 1, "{first:?}");
    assert_eq!(count(&keyed_at(ingress, "i1", "pay-2", "5 EUR").await), 2);
    let from = d.cli_json(0, &["actor", "get", "i1"])["worker"]
        .as_str()
        .expect("worker")
        .to_owned();
    let to = if from == "w1" { "w2" } else { "w1" };
    d.kill_worker(&from);
    wait_for_actor(&d, "i1", "saw its worker lost", |info| {
        info["worker_state"] == "lost" || info["worker"] == to
    });
    // Held at the router until the actor is placed again (503 only past
    // the hold timeout: asked again then).
    let mut retry = keyed_at(ingress, "i1", "pay-1", "10 EUR").await;
    for _ in 0..5 {
        if retry.status != 503 {
            break;
        }
        retry = keyed_at(ingress, "i1", "pay-1", "10 EUR").await;
    }
    same_answer(&first, &retry);
    assert!(retry.body.contains(&from), "{retry:?}");
    assert_eq!(d.cli_json(0, &["actor", "get", "i1"])["worker"], to);
    let third = keyed_at(ingress, "i1", "pay-3", "1 EUR").await;
    assert_eq!(count(&third), 3, "pay-1 was applied again: {third:?}");
}
