//! Faults against cluster mode's shipped journal (issue 29, item 6),
//! through the real binary with real etcd and s3s-fs: what a hostile
//! operator or bad luck does to the journal segments a lost worker left
//! in the store.

use stasis_test_util::cluster::{Deployment, Setup};
use stasis_test_util::wait;

use crate::fencing::wait_for_actor;
use crate::replicas::{LEASE_TTL, ONE_CLUSTER, echo, served};
use crate::support::{STASIS, client, count, to_actor};

/// Counters on `workers` workers at level `store`; entries are never
/// folded during the test (a failpoint), so an actor's acknowledged state
/// lives in journal segments only.
fn cluster(workers: usize) -> Deployment {
    let mut setup = Setup::new(1, 1, workers);
    setup.lease_ttl = Some(LEASE_TTL.to_owned());
    setup.flags = vec!["--durability".to_owned(), "store".to_owned()];
    setup.env = vec![(
        "STASIS_FAILPOINT_FOLD_AFTER_MS".to_owned(),
        "600000".to_owned(),
    )];
    setup.echo = echo();
    Deployment::start(STASIS, setup)
}

/// Creates counter `actor` and gets its counts 1 to 5 acknowledged (in
/// segments only, at level `store`); returns the client and ingress.
async fn create_and_count_to_five(
    d: &Deployment,
    actor: &str,
) -> (stasis_test_util::http::Http, std::net::SocketAddr) {
    d.cli_json(0, &["actor", "create", actor, "--template", "counter"]);
    let c = client();
    let ingress = d.replica(0).ingress;
    for expected in 1..=5 {
        let answer = to_actor(&c, ingress, actor, "POST", "/").await;
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_eq!(count(&answer), expected);
    }
    (c, ingress)
}

fn worker_of(d: &Deployment, actor: &str) -> String {
    d.cli_json(0, &["actor", "get", actor])["worker"]
        .as_str()
        .expect("worker")
        .to_owned()
}

/// Kills `actor`'s worker with its disk and waits until the control plane
/// sees it lost.
fn lose_worker_of(d: &mut Deployment, actor: &str) -> String {
    let worker = worker_of(d, actor);
    d.kill_worker(&worker);
    // Its worker seen lost, or the actor already placed on another (a loss
    // places its actors lazily at once).
    wait_for_actor(d, actor, "saw its worker lost", |info| {
        info["worker_state"] == "lost" || info["worker"] != worker.as_str()
    });
    worker
}

/// An actor acknowledged 5 counts on w_a (in segments only), w_a is lost
/// with its disk, the operator deletes the actor and creates a new one of
/// the same name (epoch 1 again, a snapshot 0 byte-identical to the old
/// one: the same template). When the new actor is later re-placed, its
/// new owner must not recover the deleted actor's entry from w_a's
/// segments: the new actor counts from 1.
#[tokio::test(flavor = "multi_thread")]
async fn a_re_created_actor_does_not_recover_the_deleted_ones_state_from_a_lost_workers_segments() {
    let _one = ONE_CLUSTER.lock().await;
    let mut d = cluster(3);
    d.push_counter(0);
    create_and_count_to_five(&d, "rz").await;
    let first = lose_worker_of(&mut d, "rz");
    // Gone for good: a brand-new actor of the same name.
    d.cli_ok(0, &["actor", "delete", "rz"]);
    d.cli_json(0, &["actor", "create", "rz", "--template", "counter"]);
    let second = worker_of(&d, "rz");
    assert_ne!(second, first);
    // Re-place the new actor (its worker lost too) before it takes any
    // request: its new owner recovers from the segments in the store.
    lose_worker_of(&mut d, "rz");
    assert_eq!(
        served(&d, 0, "rz").await,
        1,
        "the re-created actor got the deleted one's state"
    );
}

/// What one client saw of its actor: the counts answered 200 in order,
/// and the requests whose outcome nobody knows (any other answer, or
/// none).
#[derive(Debug, Default, Clone)]
struct Seen {
    acked: Vec<u64>,
    /// Unknown outcomes after the last 200.
    unknown_since: u64,
}

/// 24 actors, one client each posting without pause at level `store`;
/// once every actor has 3 acknowledged counts, w1 is killed with its
/// disk in the middle of the load, and the clients go on until every
/// actor has 3 more. Every 200 count of an actor is above the one before
/// (none lost), and the count the actor comes back with is its last 200
/// plus at most the requests answered otherwise after it (none applied
/// twice, none invented).
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_under_concurrent_load_at_level_store_keeps_exactly_the_acknowledged_counts() {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    let _one = ONE_CLUSTER.lock().await;
    let mut d = cluster(2);
    d.push_counter(0);
    let actors: Vec<String> = (0..24).map(|i| format!("load{i:02}")).collect();
    for actor in &actors {
        d.cli_json(0, &["actor", "create", actor, "--template", "counter"]);
    }
    let on_w1: Vec<String> = actors
        .iter()
        .filter(|a| worker_of(&d, a) == "w1")
        .cloned()
        .collect();
    assert!(!on_w1.is_empty(), "the placement put nothing on w1");
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::new(Mutex::new(vec![Seen::default(); actors.len()]));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let c = client();
    let ingress = d.replica(0).ingress;
    let mut clients = tokio::task::JoinSet::new();
    for (i, actor) in actors.iter().enumerate() {
        let (c, seen, stop, actor) = (c.clone(), seen.clone(), stop.clone(), actor.clone());
        clients.spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let answer = crate::replicas::try_post(&c, ingress, &actor).await;
                let settled = {
                    let mut seen = seen.lock().expect("seen");
                    let s = &mut seen[i];
                    match answer {
                        Some((200, body)) => {
                            let n = stasis_test_util::demos::count_in(&body).expect("count");
                            assert!(
                                s.acked.last().is_none_or(|&last| n > last),
                                "{actor}: 200 with count {n} after {:?}",
                                s.acked
                            );
                            s.acked.push(n);
                            s.unknown_since = 0;
                            true
                        }
                        Some((status, body)) => {
                            assert!(status >= 500, "{actor}: {status} {body}");
                            s.unknown_since += 1;
                            false
                        }
                        None => {
                            s.unknown_since += 1;
                            false
                        }
                    }
                };
                if !settled {
                    // sleep: paces the client until its last request settles.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        });
    }
    let wait_until = |min: &[usize], what: &str| {
        wait::until_else(what, Duration::from_secs(40), || {
            let done = seen
                .lock()
                .expect("seen")
                .iter()
                .zip(min)
                .all(|(s, &min)| s.acked.len() >= min);
            if done {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            }
        });
    };
    wait_until(&vec![3; actors.len()], "3 acknowledged counts per actor");
    // Mid-load: every actor's client has a request in flight or about to.
    let before: Vec<usize> = seen
        .lock()
        .expect("seen")
        .iter()
        .map(|s| s.acked.len())
        .collect();
    d.kill_worker("w1");
    let after: Vec<usize> = before.iter().map(|n| n + 3).collect();
    wait_until(
        &after,
        "3 more acknowledged counts per actor after the kill",
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    while let Some(run) = clients.join_next().await {
        run.expect("client");
    }
    let seen = seen.lock().expect("seen").clone();
    for (actor, s) in actors.iter().zip(&seen) {
        let last = s.acked.last().copied().expect("acked");
        let next = served(&d, 0, actor).await;
        assert!(
            next > last && next <= last + 1 + s.unknown_since,
            "{actor} (on w1 before: {}): came back with {next} after its last 200 of {last} \
             and {} unknown outcomes after it",
            on_w1.contains(actor),
            s.unknown_since
        );
    }
}

/// At level `store`, the owner of an actor is frozen (SIGSTOP) past its
/// lease after 5 acknowledged counts: the other worker takes the actor
/// over from the segments and acknowledges 2 more. Thawed, the old owner
/// must ship nothing that wins: after `kill -9` of the new owner the
/// actor comes back on the old one (registered anew) with exactly 7.
#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_owner_woken_after_its_lease_ships_nothing_that_wins_at_level_store() {
    use std::time::Duration;

    use crate::replicas::signal;

    let _one = ONE_CLUSTER.lock().await;
    let mut d = cluster(2);
    d.push_counter(0);
    create_and_count_to_five(&d, "fz").await;
    let first = worker_of(&d, "fz");
    let pid = d.worker(&first).process.pid();
    signal(pid, "STOP");
    wait_for_actor(&d, "fz", "saw its worker lost", |info| {
        info["worker_state"] == "lost" || info["worker"] != first.as_str()
    });
    for expected in 6..=7 {
        assert_eq!(served(&d, 0, "fz").await, expected, "the new owner");
    }
    let second = worker_of(&d, "fz");
    assert_ne!(second, first);
    signal(pid, "CONT");
    wait::until(
        &format!("{first} to register again"),
        Duration::from_secs(20),
        || {
            let log = d.worker(&first).process.log();
            (log.matches("registered in etcd; serving").count() >= 2).then_some(())
        },
    );
    assert_eq!(lose_worker_of(&mut d, "fz"), second);
    assert_eq!(
        served(&d, 0, "fz").await,
        8,
        "after the new owner's loss the actor has every acknowledged count and no other"
    );
    assert_eq!(worker_of(&d, "fz"), first);
}

/// At level `store`, the object store drops every PUT of a journal
/// segment (the fault proxy in front of S3, for the worker only) while a
/// count is posted and then read: both answers are 503 "may or may not".
/// With the store back, the same read again changes no page, so it
/// appends no entry; it must not be answered 200 with that count unless
/// the state it shows is in the store: when the worker is then lost with
/// its disk, the actor's next count is above every count a 200 showed.
#[tokio::test(flavor = "multi_thread")]
async fn a_read_after_a_lost_round_shows_no_state_the_store_does_not_hold() {
    use std::time::Duration;

    use stasis_test_util::fault_proxy::{Fault, FaultProxy};

    let _one = ONE_CLUSTER.lock().await;
    let mut setup = Setup::new(1, 1, 0);
    setup.lease_ttl = Some(LEASE_TTL.to_owned());
    setup.flags = vec!["--durability".to_owned(), "store".to_owned()];
    setup.env = vec![(
        "STASIS_FAILPOINT_FOLD_AFTER_MS".to_owned(),
        "600000".to_owned(),
    )];
    setup.echo = echo();
    let mut d = Deployment::start(STASIS, setup);
    let proxy = FaultProxy::start(d.s3.as_ref().expect("s3").addr());
    let through_proxy = [("AWS_ENDPOINT_URL".to_owned(), proxy.endpoint())];
    d.add_worker_with("w1", &through_proxy);
    d.wait_for_workers(1);
    d.push_counter(0);
    d.cli_json(0, &["actor", "create", "lr", "--template", "counter"]);
    let c = client();
    let ingress = d.replica(0).ingress;
    for expected in 1..=2 {
        let answer = to_actor(&c, ingress, "lr", "POST", "/").await;
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_eq!(count(&answer), expected);
    }
    // Every segment PUT dropped until the round is given up.
    proxy.on("PUT", "journal", Fault::DropRequest, 1_000);
    let lost = to_actor(&c, ingress, "lr", "POST", "/").await;
    assert_eq!(lost.status, 503, "{lost:?}");
    assert!(lost.body.contains("may or may not"), "{lost:?}");
    assert!(
        proxy.wait_fired(1, Duration::from_secs(1)),
        "no segment PUT went through the proxy"
    );
    // A read while the store still drops them: its entry (the same count,
    // the stack the call left) is lost too.
    let lost_read = to_actor(&c, ingress, "lr", "GET", "/").await;
    assert_eq!(lost_read.status, 503, "{lost_read:?}");
    proxy.clear();
    // The same read again, the store back: the same memory as the lost
    // read's entry, so no new entry.
    let read = to_actor(&c, ingress, "lr", "GET", "/").await;
    let shown = if read.status == 200 { count(&read) } else { 2 };
    // Lose w1 with its disk; w2 takes the actor over from the store.
    d.add_worker("w2");
    d.wait_for_workers(2);
    lose_worker_of(&mut d, "lr");
    let next = served(&d, 0, "lr").await;
    assert!(
        next > shown,
        "a GET answered 200 with count {shown} after a lost round, but the actor came back \
         from the store with {} (its next count {next})",
        next - 1
    );
}

/// At level `store`, an actor with 5 acknowledged counts (in segments
/// only) is moved to the other worker right after them, answers one
/// more there, is paused and resumed, answers one more, and its new
/// owner is then lost with its disk: the actor comes back on the first
/// worker with exactly 7 counts.
#[tokio::test(flavor = "multi_thread")]
async fn a_move_and_a_pause_right_after_acknowledged_counts_keep_them_at_level_store() {
    let _one = ONE_CLUSTER.lock().await;
    let mut d = cluster(2);
    d.push_counter(0);
    let (c, ingress) = create_and_count_to_five(&d, "mv").await;
    let first = worker_of(&d, "mv");
    let to = if first == "w1" { "w2" } else { "w1" };
    d.cli_json(0, &["actor", "migrate", "mv", "--to", to]);
    assert_eq!(worker_of(&d, "mv"), to);
    assert_eq!(count(&to_actor(&c, ingress, "mv", "POST", "/").await), 6);
    d.cli_json(0, &["actor", "pause", "mv"]);
    d.cli_json(0, &["actor", "resume", "mv"]);
    assert_eq!(count(&to_actor(&c, ingress, "mv", "POST", "/").await), 7);
    assert_eq!(lose_worker_of(&mut d, "mv"), to);
    assert_eq!(served(&d, 0, "mv").await, 8);
    assert_eq!(worker_of(&d, "mv"), first);
}

/// At level `store`, an actor with 5 acknowledged counts (in segments
/// only) is deleted while its worker is alive and re-created under the
/// same name; its worker is then lost before it takes a request: the
/// new owner finds the old entry and the forget after it, and the new
/// actor counts from 1.
#[tokio::test(flavor = "multi_thread")]
async fn a_re_created_actor_does_not_recover_the_deleted_ones_state_from_a_live_workers_segments() {
    let _one = ONE_CLUSTER.lock().await;
    let mut d = cluster(2);
    d.push_counter(0);
    create_and_count_to_five(&d, "rl").await;
    d.cli_ok(0, &["actor", "delete", "rl"]);
    d.cli_json(0, &["actor", "create", "rl", "--template", "counter"]);
    lose_worker_of(&mut d, "rl");
    assert_eq!(
        served(&d, 0, "rl").await,
        1,
        "the re-created actor got the deleted one's state"
    );
}
