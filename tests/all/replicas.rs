//! Cluster mode against real parts on loopback: a real etcd cluster
//! (Debian's `etcd-server`), a real S3-compatible server (`s3s-fs`), and
//! the real `stasis` binary as replicas (`serve --workers 0 --directory
//! etcd://...`) and workers (`worker run --directory etcd://...`).
//!
//! These tests take one lock between them: each starts a whole cluster, and
//! leases of a couple of seconds must not expire only because the two cores
//! are busy with another cluster.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use stasis_test_util::cluster::{Deployment, Setup};
use stasis_test_util::http::Http;
use stasis_test_util::wait;

use crate::support::{STASIS, actor_host, client, count, to_actor};

/// One cluster test at a time (see the module doc).
pub(crate) static ONE_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Lease TTL of the test clusters: short, so failover is quick.
pub(crate) const LEASE_TTL: &str = "2s";

pub(crate) fn echo() -> bool {
    std::env::var_os("STASIS_TEST_LOG").is_some()
}

/// `members` etcd members, an S3 server, `replicas` replicas and workers
/// `w1..=workers`, every `stasis` process started with `flags` too
/// (replicas only take the serve flags), leases of [`LEASE_TTL`].
pub(crate) fn deployment(
    members: usize,
    replicas: usize,
    workers: usize,
    flags: &[&str],
) -> Deployment {
    let mut setup = Setup::new(members, replicas, workers);
    setup.lease_ttl = Some(LEASE_TTL.to_owned());
    setup.flags = flags.iter().map(|f| (*f).to_owned()).collect();
    setup.echo = echo();
    Deployment::start(STASIS, setup)
}

/// A POST to actor `actor` at `addr` that never panics: `Some((status,
/// body))`, or `None` if no answer came (refused, reset, timed out).
pub(crate) async fn try_post(
    client: &Http,
    addr: SocketAddr,
    actor: &str,
) -> Option<(u16, String)> {
    let request = hyper::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}/"))
        .header("host", actor_host(actor))
        .body(Full::new(Bytes::new()))
        .ok()?;
    let exchange = async {
        let response = client.request(request).await.ok()?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.ok()?.to_bytes();
        Some((status, String::from_utf8_lossy(&body).into_owned()))
    };
    tokio::time::timeout(Duration::from_secs(15), exchange)
        .await
        .ok()
        .flatten()
}

/// POSTs to `actor` through the replicas at `ingresses` as a client behind
/// a load balancer would: a replica that refuses connections is left for
/// the next; a 503 (which says when to retry) is retried after a short
/// pause; at most 40 attempts or 20 s. The count acknowledged, or `None`
/// when none was, including an answer of unknown outcome (a worker lost
/// while it held the request: the increment may or may not have been
/// applied, so it is neither retried nor counted as acknowledged).
pub(crate) async fn post_retrying(
    client: &Http,
    ingresses: &[SocketAddr],
    actor: &str,
) -> Option<u64> {
    let started = Instant::now();
    let mut next = 0;
    for _ in 0..40 {
        if started.elapsed() > Duration::from_secs(20) {
            break;
        }
        let addr = ingresses[next % ingresses.len()];
        match try_post(client, addr, actor).await {
            Some((200, body)) => return stasis_test_util::demos::count_in(&body),
            // sleep: retry backoff after a 503 (the retry gives up with None, no panic).
            Some((503, _)) => tokio::time::sleep(Duration::from_millis(150)).await,
            Some((500, body)) if body.contains("may or may not have been applied") => return None,
            Some((status, body)) => panic!("POST to {actor} via {addr}: {status} {body}"),
            None => next += 1,
        }
    }
    None
}

/// Waits until `actor` answers a POST through replica `i`, and returns
/// the count.
pub(crate) async fn served(d: &Deployment, i: usize, actor: &str) -> u64 {
    post_retrying(&client(), &[d.replica(i).ingress], actor)
        .await
        .unwrap_or_else(|| panic!("{actor} is not served through replica {i}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn every_replica_serves_and_a_follower_takes_over_from_a_killed_leader() {
    let _one = ONE_CLUSTER.lock().await;
    let mut d = deployment(1, 2, 2, &[]);
    d.push_counter(1);
    d.cli_json(0, &["actor", "create", "c1", "--template", "counter"]);
    let c = client();
    // Both replicas route to the same actor: one count.
    for (i, expected) in [(0, 1), (1, 2), (0, 3), (1, 4)] {
        let answer = to_actor(&c, d.replica(i).ingress, "c1", "POST", "/").await;
        assert_eq!(count(&answer), expected, "via replica {i}");
    }
    // Pause through one replica, resume by a request through the other.
    let paused = d.cli_json(1, &["actor", "pause", "c1"]);
    assert_eq!(paused["state"], "paused", "{paused}");
    let info = d.cli_json(0, &["actor", "get", "c1"]);
    assert_eq!(info["state"], "paused", "{info}");
    let answer = to_actor(&c, d.replica(0).ingress, "c1", "POST", "/").await;
    assert_eq!(count(&answer), 5);
    // Kill the leader: the other replica is elected within the TTL and
    // serves the same actor with the same state.
    let leader = d.leader();
    let survivor = 1 - leader;
    d.replicas[leader]
        .as_mut()
        .expect("leader runs")
        .process
        .kill();
    d.replicas[leader] = None;
    let killed = Instant::now();
    let next = served(&d, survivor, "c1").await;
    assert_eq!(next, 6, "the count survives the leader");
    assert!(
        killed.elapsed() < Duration::from_secs(15),
        "failover took {:?}",
        killed.elapsed()
    );
    assert_eq!(d.leader(), survivor);
    let healthz = crate::support::send(
        &c,
        d.replica(survivor).admin,
        "GET",
        "localhost",
        "/healthz",
        Vec::new(),
    )
    .await;
    assert!(healthz.body.starts_with("ok (leader "), "{healthz:?}");
    // A new replica joins as a follower and forwards to the new leader.
    let late = d.start_replica(&[]).expect("a third replica starts");
    let answer = to_actor(&c, late.ingress, "c1", "POST", "/").await;
    assert_eq!(count(&answer), 7);
    let healthz =
        crate::support::send(&c, late.admin, "GET", "localhost", "/healthz", Vec::new()).await;
    assert!(healthz.body.contains("follower"), "{healthz:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_with_conflicting_settings_refuses_to_start_and_names_the_flag() {
    let _one = ONE_CLUSTER.lock().await;
    let d = deployment(1, 0, 0, &[]);
    let _first = d
        .start_replica(&["--checkpoint-every", "1"])
        .expect("the first replica starts");
    let refused = match d.start_replica(&["--checkpoint-every", "5"]) {
        Ok(_) => panic!("a replica with another --checkpoint-every started"),
        Err(stderr) => stderr,
    };
    assert!(refused.contains("--checkpoint-every"), "{refused}");
    assert!(refused.contains("refusing to start"), "{refused}");
    // The same values are fine.
    d.start_replica(&["--checkpoint-every", "1"])
        .expect("a replica with the cluster's settings starts");
    // Workers need --directory or --join, and --join is not for etcd mode.
    let out = STASIS
        .command()
        .args([
            "worker",
            "run",
            "--name",
            "x",
            "--data-dir",
            "/nonexistent/x",
        ])
        .output()
        .expect("run stasis");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--join") && stderr.contains("--directory"),
        "{stderr}"
    );
    let out = STASIS
        .command()
        .args([
            "serve",
            "--directory",
            "etcd://127.0.0.1:1",
            "--snapshot-store",
            "local",
        ])
        .output()
        .expect("run stasis");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--snapshot-store"), "{stderr}");
}

/// Sends `signal` to process `pid`.
pub(crate) fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_cut_off_from_etcd_past_its_lease_never_serves_its_old_actors() {
    let _one = ONE_CLUSTER.lock().await;
    let d = deployment(1, 1, 2, &["--checkpoint-every", "1"]);
    d.push_counter(0);
    d.cli_json(0, &["actor", "create", "p1", "--template", "counter"]);
    let c = client();
    for expected in 1..=3 {
        assert_eq!(
            count(&to_actor(&c, d.replica(0).ingress, "p1", "POST", "/").await),
            expected
        );
    }
    let info = d.cli_json(0, &["actor", "get", "p1"]);
    let owner = info["worker"].as_str().expect("worker").to_owned();
    let epoch = info["epoch"].as_u64().unwrap_or(1);
    let frozen = d.worker(&owner);
    // Frozen past its lease: the leader re-places the actor elsewhere,
    // from the newest acknowledged snapshot.
    signal(frozen.process.pid(), "STOP");
    let stopped = Instant::now();
    // A request sent before the worker is declared lost is answered as of
    // unknown outcome (tests/all/fencing.rs); one sent after re-places the
    // actor.
    crate::fencing::wait_for_actor(&d, "p1", "saw its worker lost", |info| {
        info["worker_state"] == "lost" || info["worker"] != owner.as_str()
    });
    let next = served(&d, 0, "p1").await;
    assert_eq!(
        next, 4,
        "every acknowledged request survives the frozen worker"
    );
    let now_on = d.cli_json(0, &["actor", "get", "p1"])["worker"]
        .as_str()
        .expect("worker")
        .to_owned();
    assert_ne!(now_on, owner, "re-placed");
    assert!(
        stopped.elapsed() >= Duration::from_secs(2),
        "re-placed before the lease ran out"
    );
    signal(frozen.process.pid(), "CONT");
    // Woken, the old worker does not serve the actor at its old epoch:
    // asked directly, with the old epoch, it refuses.
    let request = stasis_host_api::Request {
        method: "POST".into(),
        uri: "/".into(),
        ..Default::default()
    };
    let body = stasis_host_api::encode_request(&request).expect("encode");
    let answer = stasis_test_util::http::send_with(
        &c,
        frozen.listen,
        "POST",
        "localhost",
        "/internal/v1/actors/p1/call",
        &[("stasis-epoch", &epoch.to_string())],
        Bytes::from(body),
    )
    .await;
    assert_ne!(
        answer.status,
        200,
        "a fenced worker served: {}",
        answer.text()
    );
    // Its log says it stopped serving when the lease could not be renewed.
    frozen
        .process
        .wait_for_log("stopping to serve", Duration::from_secs(10));
    // And the count goes on where it was, on the new owner.
    assert_eq!(
        count(&to_actor(&c, d.replica(0).ingress, "p1", "POST", "/").await),
        5
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_verb_works_through_a_follower() {
    let _one = ONE_CLUSTER.lock().await;
    let d = deployment(1, 2, 2, &[]);
    let leader = d.leader();
    let f = 1 - leader;
    d.push_counter(f);
    let templates = d.cli_json(f, &["template", "list"]);
    assert_eq!(templates[0]["name"], "counter", "{templates}");
    for name in ["v1", "v2", "v3", "v4"] {
        d.cli_json(f, &["actor", "create", name, "--template", "counter"]);
    }
    let c = client();
    for name in ["v1", "v2", "v3", "v4"] {
        assert_eq!(
            count(&to_actor(&c, d.replica(f).ingress, name, "POST", "/").await),
            1
        );
    }
    let listed = d.cli_json(f, &["actor", "list"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(4), "{listed}");
    // The answered request's state is a journal entry in the store (a
    // cluster worker at level `request` ships it); the checkpoint writes
    // snapshot 1.
    let checkpoint = d.cli_json(f, &["actor", "checkpoint", "v1"]);
    assert_eq!(checkpoint["snapshot"]["seq"], 1, "{checkpoint}");
    // Migrate v1 to the other worker.
    let from = d.cli_json(f, &["actor", "get", "v1"])["worker"]
        .as_str()
        .expect("worker")
        .to_owned();
    let to = if from == "w1" { "w2" } else { "w1" };
    d.cli_json(f, &["actor", "migrate", "v1", "--to", to]);
    assert_eq!(d.cli_json(f, &["actor", "get", "v1"])["worker"], to);
    assert_eq!(
        count(&to_actor(&c, d.replica(leader).ingress, "v1", "POST", "/").await),
        2
    );
    // Drain w1: everything lands on w2 and keeps its count.
    d.cli_json(f, &["worker", "drain", "w1"]);
    for name in ["v1", "v2", "v3", "v4"] {
        assert_eq!(
            d.cli_json(f, &["actor", "get", name])["worker"],
            "w2",
            "{name}"
        );
    }
    assert_eq!(
        count(&to_actor(&c, d.replica(f).ingress, "v1", "POST", "/").await),
        3
    );
    assert_eq!(
        count(&to_actor(&c, d.replica(f).ingress, "v4", "POST", "/").await),
        2
    );
    d.cli_ok(f, &["rebalance"]);
    d.cli_ok(f, &["gc"]);
    let paused = d.cli_json(f, &["actor", "pause", "v2"]);
    assert_eq!(paused["state"], "paused", "{paused}");
    d.cli_ok(f, &["actor", "resume", "v2"]);
    assert_eq!(
        count(&to_actor(&c, d.replica(f).ingress, "v2", "POST", "/").await),
        2
    );
    d.cli_ok(f, &["actor", "delete", "v3"]);
    let gone = to_actor(&c, d.replica(f).ingress, "v3", "POST", "/").await;
    assert_eq!(gone.status, 404, "{gone:?}");
    let metrics_of =
        |addr| crate::support::send(&c, addr, "GET", "localhost", "/metrics", Vec::new());
    let metrics = metrics_of(d.replica(f).admin).await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics.body.contains("stasis_requests_total"),
        "{}",
        metrics.body
    );
    // Each worker serves its own: the actors it runs, its resumes.
    let metrics = metrics_of(d.worker("w2").listen).await;
    assert_eq!(metrics.status, 200);
    let value = |series: &str| {
        metrics
            .body
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {series} in {}", metrics.body))
    };
    assert_eq!(value("stasis_actors{state=\"running\"}"), 3.0);
    assert!(value("stasis_resumes_total{worker=\"w2\"}") >= 1.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn no_split_brain_and_no_lost_acknowledged_request_under_faults() {
    let _one = ONE_CLUSTER.lock().await;
    const ACTORS: usize = 12;
    const CLIENTS: usize = 8;
    const POSTS: usize = 100;
    let mut d = deployment(3, 2, 3, &["--checkpoint-every", "1"]);
    d.push_counter(0);
    let names: Vec<String> = (0..ACTORS).map(|i| format!("k{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        d.cli_json(i % 2, &["actor", "create", name, "--template", "counter"]);
    }
    let ingresses: Vec<SocketAddr> = (0..2).map(|i| d.replica(i).ingress).collect();
    // Requests the clients have had answered (acknowledged or failed):
    // the faults below are spaced by the clients' progress.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|k| {
            let names = names.clone();
            let done = done.clone();
            // Each client starts at its own replica.
            let mut order = ingresses.clone();
            order.rotate_left(k % 2);
            tokio::spawn(async move {
                let c = client();
                let mut acked = Vec::new();
                let mut failed = 0;
                for i in 0..POSTS {
                    let actor = &names[(k + i) % names.len()];
                    match post_retrying(&c, &order, actor).await {
                        Some(n) => acked.push((actor.clone(), n)),
                        None => failed += 1,
                    }
                    done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    // sleep: paces each client among the faults.
                    tokio::time::sleep(Duration::from_millis(40)).await;
                }
                (acked, failed)
            })
        })
        .collect();
    // The faults, while the clients run: the leader replica, one etcd
    // member and one worker are killed; a fourth worker joins. Each comes
    // once the clients have had another sixth of their requests answered
    // since the one before, so every fault lands on a cluster under load
    // that got through the previous one.
    let step = CLIENTS * POSTS / 6;
    let progress = async |what: &str, past: usize| {
        wait::until_async(what, Duration::from_secs(60), async || {
            let now = done.load(std::sync::atomic::Ordering::SeqCst);
            (now >= past).then_some(now)
        })
        .await
    };
    let at = progress("requests before the first fault", step).await;
    let leader = d.leader();
    d.replicas[leader].as_mut().expect("leader").process.kill();
    d.replicas[leader] = None;
    let at = progress("requests after the leader's kill", at + step).await;
    d.etcd.kill(2);
    let at = progress("requests after an etcd member's kill", at + step).await;
    let victim = d.workers[0].as_mut().expect("w1");
    victim.process.kill();
    d.workers[0] = None;
    progress("requests after a worker's kill", at + step).await;
    d.add_worker("w4");
    let mut acked: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut failed = 0;
    for task in clients {
        let (mine, lost) = task.await.expect("client");
        failed += lost;
        for (actor, n) in mine {
            acked.entry(actor).or_default().push(n);
        }
    }
    let total = CLIENTS * POSTS;
    let acknowledged: usize = acked.values().map(Vec::len).sum();
    eprintln!("faults: {acknowledged} of {total} requests acknowledged, {failed} failed");
    assert!(
        failed * 10 <= total,
        "{failed} of {total} requests failed (more than 10 %)"
    );
    // No split brain: no count was acknowledged twice for one actor. No
    // acknowledged increment lost: each actor's count now is past every
    // count it acknowledged.
    let survivor = d.any_replica();
    for name in &names {
        let counts = acked.get(name).cloned().unwrap_or_default();
        let distinct: HashSet<u64> = counts.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            counts.len(),
            "{name} acknowledged a count twice: {counts:?}"
        );
        let now = served(&d, survivor, name).await;
        let highest = counts.iter().copied().max().unwrap_or(0);
        assert!(
            now > highest,
            "{name}: now {now}, but {highest} was acknowledged"
        );
        assert!(
            now as usize > counts.len(),
            "{name}: now {now}, {} acknowledged",
            counts.len()
        );
    }
    // The new worker took actors, the dead one holds none.
    let workers = d.wait_for_workers(3);
    assert!(workers.contains(&"w4".to_owned()), "{workers:?}");
    let list = d.cli_json(survivor, &["actor", "list"]);
    for actor in list.as_array().expect("list") {
        assert_ne!(actor["worker"], "w1", "{actor}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_on_an_etcd_that_requires_tls_client_certificates() {
    let _one = ONE_CLUSTER.lock().await;
    let mut setup = Setup::new(1, 1, 1);
    setup.lease_ttl = Some(LEASE_TTL.to_owned());
    setup.tls = true;
    setup.echo = echo();
    let d = Deployment::start(STASIS, setup);
    d.push_counter(0);
    d.cli_json(0, &["actor", "create", "t1", "--template", "counter"]);
    let c = client();
    for expected in 1..=2 {
        assert_eq!(
            count(&to_actor(&c, d.replica(0).ingress, "t1", "POST", "/").await),
            expected
        );
    }
    // Without the TLS flags a replica cannot connect, and says which flags
    // would help.
    let dir = tempfile::tempdir().expect("tempdir");
    let out = STASIS
        .command()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .args(["--directory", &d.etcd.url("/stasis-test")])
        .args(["--snapshot-store", &d.store_url])
        .arg("--data-dir")
        .arg(dir.path())
        .envs(d.env())
        .output()
        .expect("run stasis");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("connecting to etcd at") && stderr.contains("--etcd-ca"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_on_another_store_than_the_clusters_refuses_to_start() {
    let _one = ONE_CLUSTER.lock().await;
    let d = deployment(1, 1, 0, &[]);
    // A worker on another store than the cluster's refuses to start.
    let dir = tempfile::tempdir().expect("tempdir");
    let out = STASIS
        .command()
        .args(["worker", "run", "--name", "w9", "--listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--directory", &d.etcd.url("/stasis-test")])
        .arg("--snapshot-store")
        .arg(format!("file://{}", dir.path().display()))
        .output()
        .expect("run stasis");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--snapshot-store") && stderr.contains("cluster's settings"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_last_worker_stopped_with_sigterm_pauses_its_actors_first() {
    let _one = ONE_CLUSTER.lock().await;
    let mut d = deployment(1, 1, 1, &[]);
    d.push_counter(0);
    d.cli_json(0, &["actor", "create", "s1", "--template", "counter"]);
    let c = client();
    for expected in 1..=3 {
        assert_eq!(
            count(&to_actor(&c, d.replica(0).ingress, "s1", "POST", "/").await),
            expected
        );
    }
    // No other worker to drain to: the worker pauses its actors (their
    // snapshots go to the shared store) before it exits.
    let last = d.workers[0].as_mut().expect("w1");
    let status = last.process.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status:?}");
    let log = last.process.log();
    assert!(log.contains("paused for shutdown"), "{log}");
    d.workers[0] = None;
    d.add_worker("w2");
    assert_eq!(
        served(&d, 0, "s1").await,
        4,
        "the count survives the last worker's SIGTERM"
    );
}
