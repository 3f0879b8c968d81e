//! Cluster mode broken on purpose, as an attacker or an unlucky operator
//! would, on loopback with the real parts of `replicas` (its `Deployment`
//! harness): each test is a fault that once broke it.
//!
//! * flags that leak secrets or take nonsense (`--lease-ttl 0s`);
//! * a module over `--max-body` pushed through a follower;
//! * a second worker started under a name a live worker holds;
//! * etcd's quorum frozen past the lease TTL: every replica used to exit;
//! * a leader frozen in the middle of a move, woken after another replica
//!   took over: it used to switch the placement behind the new leader.
//!
//! Each holds [`ONE_CLUSTER`] like the tests of `replicas`.

use std::time::{Duration, Instant};

use stasis_test_util::Proc;
use stasis_test_util::wait;

use crate::replicas::{ONE_CLUSTER, deployment, echo, post_retrying, served, signal};
use crate::support::{STASIS, client, count, install_delay_line, send, to_actor};
use stasis_test_util::cluster::Deployment;

/// `stasis ARGS`' stderr, asserting that it failed within `within`.
fn fails(args: &[&str], env: &[(String, String)], within: Duration) -> String {
    let started = Instant::now();
    let out = STASIS
        .command()
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("run stasis");
    assert!(!out.status.success(), "stasis {args:?} started");
    assert!(
        started.elapsed() < within,
        "stasis {args:?} took {:?} to fail",
        started.elapsed()
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_cluster_flags_fail_fast_naming_the_flag_and_no_secret() {
    let _one = ONE_CLUSTER.lock().await;
    let d = deployment(1, 0, 0, &[]);
    let etcd = d.etcd.url("/stasis-faults");
    let store = d.s3.as_ref().expect("an S3 store").url("faults");
    let data = tempfile::tempdir().expect("tempdir");
    let data = data.path().to_str().expect("utf-8").to_owned();
    let serve = |extra: &[&str]| {
        let mut args = vec!["serve", "--workers", "0", "--data-dir", &data];
        args.extend(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]);
        args.extend(extra);
        args.iter()
            .map(|a| (*a).to_owned())
            .collect::<Vec<String>>()
    };
    let env = d.env();
    let quick = Duration::from_secs(15);
    let cases: Vec<(Vec<String>, &str)> = vec![
        // A zero or huge lease TTL: no lease, or failover after days.
        (
            serve(&[
                "--directory",
                &etcd,
                "--snapshot-store",
                &store,
                "--lease-ttl",
                "0s",
            ]),
            "--lease-ttl",
        ),
        (
            serve(&[
                "--directory",
                &etcd,
                "--snapshot-store",
                &store,
                "--lease-ttl",
                "400d",
            ]),
            "--lease-ttl",
        ),
        // Credentials in URLs are refused (they would show in logs).
        (
            serve(&[
                "--directory",
                "etcd://root:pw@127.0.0.1:1",
                "--snapshot-store",
                &store,
            ]),
            "--directory",
        ),
        (
            serve(&[
                "--directory",
                &etcd,
                "--snapshot-store",
                "s3://AKID:pw@bucket",
            ]),
            "--snapshot-store",
        ),
        // TLS flags naming missing files.
        (
            serve(&[
                "--directory",
                &etcd,
                "--snapshot-store",
                &store,
                "--etcd-ca",
                "/nonexistent/ca.pem",
            ]),
            "--etcd-ca",
        ),
        // A bucket that does not exist.
        (
            serve(&[
                "--directory",
                &etcd,
                "--snapshot-store",
                "s3://no-such-bucket",
            ]),
            "--snapshot-store",
        ),
    ];
    for (args, flag) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let stderr = fails(&args, &env, quick);
        // One error line (clap's or stasis's own) that names the flag.
        let said: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("error:") || l.starts_with("stasis:"))
            .collect();
        assert!(
            said.len() == 1 && said[0].contains(flag),
            "{args:?}: {stderr}"
        );
        assert!(
            !stderr.contains("hunter2"),
            "{args:?} shows the secret: {stderr}"
        );
    }
    // Wrong S3 credentials: named, the secret not shown.
    let wrong: Vec<(String, String)> = d
        .env()
        .into_iter()
        .map(|(k, v)| {
            if k == "AWS_SECRET_ACCESS_KEY" {
                (k, "hunter2-wrong".into())
            } else {
                (k, v)
            }
        })
        .collect();
    let args = serve(&["--directory", &etcd, "--snapshot-store", &store]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let stderr = fails(&args, &wrong, quick);
    assert!(stderr.contains("--snapshot-store"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_module_larger_than_max_body_is_pushed_through_a_follower() {
    let _one = ONE_CLUSTER.lock().await;
    let d = deployment(1, 2, 1, &["--max-body", "1MiB"]);
    let follower = 1 - d.leader();
    // The counter demo with a 3 MiB custom section: a valid module over
    // --max-body (which limits actor requests, not the admin API).
    let mut module = std::fs::read(crate::support::demo("counter")).expect("counter module");
    let name = b"padding";
    let mut payload = vec![u8::try_from(name.len()).expect("short name")];
    payload.extend_from_slice(name);
    payload.resize(payload.len() + (3 << 20), 0);
    module.push(0);
    let mut len = payload.len();
    loop {
        let byte = u8::try_from(len & 0x7f).expect("7 bits");
        len >>= 7;
        module.push(if len > 0 { byte | 0x80 } else { byte });
        if len == 0 {
            break;
        }
    }
    module.extend_from_slice(&payload);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.wasm");
    std::fs::write(&path, &module).expect("write module");
    d.cli_ok(
        follower,
        &["template", "push", "big", path.to_str().expect("utf-8")],
    );
    d.cli_json(follower, &["actor", "create", "b1", "--template", "big"]);
    let answer = to_actor(&client(), d.replica(follower).ingress, "b1", "POST", "/").await;
    assert_eq!(count(&answer), 1);
}

/// Starts `stasis worker run --name NAME` of deployment `d` with `env`;
/// Err(stderr) if it exits before it is ready.
pub(crate) fn start_worker(
    d: &Deployment,
    name: &str,
    env: &[(&str, &str)],
) -> Result<(Proc, tempfile::TempDir), String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut command = STASIS.command();
    command
        .args(["worker", "run", "--name", name, "--listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(d.cluster_args())
        .env("STASIS_LOG", "info")
        .envs(d.env())
        .envs(env.iter().copied());
    Proc::start(command, "stasis worker ready", name, echo()).map(|p| (p, dir))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_worker_under_a_live_name_refuses_and_a_restarted_one_comes_back() {
    let _one = ONE_CLUSTER.lock().await;
    let mut d = deployment(1, 1, 1, &["--checkpoint-every", "1"]);
    d.push_counter(0);
    d.cli_json(0, &["actor", "create", "n1", "--template", "counter"]);
    let c = client();
    assert_eq!(
        count(&to_actor(&c, d.replica(0).ingress, "n1", "POST", "/").await),
        1
    );
    // A second w1 while the first one lives: it refuses, naming --name,
    // within the lease TTL and a little more; the first keeps serving.
    let started = Instant::now();
    let refused = match start_worker(&d, "w1", &[]) {
        Ok(_) => panic!("a second worker named w1 started"),
        Err(stderr) => stderr,
    };
    assert!(refused.contains("--name w1"), "{refused}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(d.wait_for_workers(1), ["w1"]);
    assert_eq!(
        count(&to_actor(&c, d.replica(0).ingress, "n1", "POST", "/").await),
        2
    );
    // w1 killed and started again at once, its old lease still alive: it
    // waits for that lease to end, registers, and the actor serves on.
    d.workers[0].as_mut().expect("w1").process.kill();
    d.workers[0] = None;
    let (_again, _dir) = start_worker(&d, "w1", &[]).expect("the restarted w1 starts");
    d.wait_for_workers(1);
    let next = served(&d, 0, "n1").await;
    assert_eq!(next, 3, "every acknowledged count survives the restart");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_process_outlives_etcd_quorum_frozen_past_the_lease() {
    let _one = ONE_CLUSTER.lock().await;
    let d = deployment(3, 2, 2, &["--checkpoint-every", "1"]);
    d.push_counter(0);
    let names = ["q1", "q2", "q3", "q4"];
    for name in names {
        d.cli_json(0, &["actor", "create", name, "--template", "counter"]);
    }
    let c = client();
    for name in names {
        for i in 0..2 {
            assert_eq!(
                count(&to_actor(&c, d.replica(i).ingress, name, "POST", "/").await),
                i as u64 + 1
            );
        }
    }
    // Two of three members frozen for three lease TTLs: no quorum, no
    // lease renewed anywhere.
    for m in [1, 2] {
        signal(d.etcd.pid(m), "STOP");
    }
    // sleep: two members stay frozen for three lease TTLs.
    tokio::time::sleep(Duration::from_secs(6)).await;
    for m in [1, 2] {
        signal(d.etcd.pid(m), "CONT");
    }
    // Workers fenced themselves.
    for w in d.workers.iter().flatten() {
        w.process
            .wait_for_log("stopping to serve", Duration::from_secs(10));
    }
    // Nothing was restarted: every replica and worker still runs, and every
    // actor serves through both replicas with its count intact.
    // etcd elects a leader, the workers register again (each waits for its
    // old registration to expire), a replica leads and re-places every
    // actor from its newest snapshot: give it 40 s on two busy cores.
    let ingresses = [d.replica(0).ingress, d.replica(1).ingress];
    let deadline = Instant::now() + Duration::from_secs(40);
    for name in names {
        let now = loop {
            if let Some(now) = post_retrying(&c, &ingresses, name).await {
                break now;
            }
            assert!(
                Instant::now() < deadline,
                "{name} is not served after etcd came back: {}",
                d.replica(d.leader()).process.log()
            );
        };
        assert_eq!(now, 3, "{name}");
        let other = served(&d, 1, name).await;
        assert_eq!(other, 4, "{name} via replica 1");
    }
    for r in d.replicas.iter().flatten() {
        assert!(
            alive(r.process.pid()),
            "a replica exited: {}",
            r.process.log()
        );
    }
    for w in d.workers.iter().flatten() {
        assert!(alive(w.process.pid()), "worker {} exited", w.name);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_frozen_mid_move_cannot_switch_the_placement_once_another_leads() {
    let _one = ONE_CLUSTER.lock().await;
    let d = deployment(1, 2, 1, &["--checkpoint-every", "1"]);
    d.push_counter(0);
    d.cli_json(0, &["actor", "create", "z1", "--template", "counter"]);
    let c = client();
    for expected in 1..=3 {
        assert_eq!(
            count(&to_actor(&c, d.replica(0).ingress, "z1", "POST", "/").await),
            expected
        );
    }
    // w2 installs each moved actor only after 5 s: the move is long.
    let (w2, _dir) = start_worker(&d, "w2", &[("STASIS_FAILPOINT_INSTALL_DELAY_MS", "5000")])
        .expect("w2 starts");
    d.wait_for_workers(2);
    let old = d.leader();
    let new = 1 - old;
    let admin = format!("http://{}", d.replica(old).admin);
    let mover = std::thread::spawn(move || {
        STASIS
            .command()
            .args(["actor", "migrate", "z1", "--to", "w2"])
            .env("STASIS_ADMIN", admin)
            .output()
    });
    // Captured on w1, waiting for w2 (which logs the install it delays):
    // freeze the leader past its lease.
    w2.wait_for_log(&install_delay_line("z1"), Duration::from_secs(10));
    let pid = d.replica(old).process.pid();
    signal(pid, "STOP");
    wait::until_else("a new leader", Duration::from_secs(20), || {
        let log = d.replica(new).process.log();
        if log.contains("serving as the leader") {
            Ok(())
        } else {
            Err(log)
        }
    });
    // The new leader cancelled the move: the actor serves on w1.
    assert_eq!(served(&d, new, "z1").await, 4);
    // Woken after w2 installed its copy: the old leader's switch must
    // not land.
    // sleep: the old leader stays frozen until after w2 installed its copy.
    std::thread::sleep(Duration::from_secs(5));
    signal(pid, "CONT");
    let _ = mover.join();
    // sleep: the woken old leader gets time to (wrongly) land its switch.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for expected in 5..=8 {
        let via = if expected % 2 == 0 { new } else { old };
        let Some(n) =
            post_retrying(&c, &[d.replica(via).ingress, d.replica(new).ingress], "z1").await
        else {
            panic!("z1 is not served after the old leader woke");
        };
        assert_eq!(n, expected, "the count went astray (via replica {via})");
    }
    let info = d.cli_json(new, &["actor", "get", "z1"]);
    assert_eq!(info["worker"], "w1", "{info}");
    // The woken leader stepped down and runs on as a follower.
    d.replica(old)
        .process
        .wait_for_log("serving as a follower", Duration::from_secs(15));
    assert!(alive(pid), "the old leader exited");
}

/// Whether process `pid` runs (exists and is not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn racing_creates_and_a_delete_through_a_follower_under_load_stay_consistent() {
    let _one = ONE_CLUSTER.lock().await;
    let d = deployment(1, 2, 2, &["--checkpoint-every", "1"]);
    d.push_counter(0);
    // The same actor created through both replicas at once: one wins.
    let admins = [d.replica(0).admin, d.replica(1).admin];
    let creators: Vec<_> = admins
        .iter()
        .map(|admin| {
            let admin = format!("http://{admin}");
            std::thread::spawn(move || {
                STASIS
                    .command()
                    .args(["actor", "create", "dup", "--template", "counter"])
                    .env("STASIS_ADMIN", admin)
                    .output()
                    .expect("run stasis")
            })
        })
        .collect();
    let outcomes: Vec<_> = creators
        .into_iter()
        .map(|t| t.join().expect("creator"))
        .collect();
    let won = outcomes.iter().filter(|o| o.status.success()).count();
    assert_eq!(won, 1, "{outcomes:?}");
    let listed = d.cli_json(1, &["actor", "list"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    // Deleted through the follower while clients post to it through both
    // replicas: every answer is a count in order or a 404, never a 5xx
    // that stays, and the actor is gone everywhere afterwards.
    let follower = 1 - d.leader();
    let ingresses = [d.replica(0).ingress, d.replica(1).ingress];
    let posted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let posting = tokio::spawn({
        let posted = posted.clone();
        async move {
            let c = client();
            let mut counts = Vec::new();
            for i in 0..60 {
                match crate::replicas::try_post(&c, ingresses[i % 2], "dup").await {
                    Some((200, body)) => {
                        counts.push(stasis_test_util::demos::count_in(&body));
                        posted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    Some((404, _)) => return (counts, true),
                    Some((503, _)) | None => {}
                    Some((status, body)) => panic!("POST during the delete: {status} {body}"),
                }
                // sleep: paces the poster during the delete.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (counts, false)
        }
    });
    // The poster has had counts through both replicas before the delete.
    wait::until_async(
        "five counts before the delete",
        Duration::from_secs(30),
        async || (posted.load(std::sync::atomic::Ordering::SeqCst) >= 5).then_some(()),
    )
    .await;
    d.cli_ok(follower, &["actor", "delete", "dup"]);
    let (counts, gone) = posting.await.expect("poster");
    assert!(
        gone,
        "the actor still answered after its delete: {counts:?}"
    );
    let counts: Vec<u64> = counts.into_iter().map(|c| c.expect("a count")).collect();
    assert!(counts.windows(2).all(|w| w[1] == w[0] + 1), "{counts:?}");
    for i in 0..2 {
        let gone = to_actor(&client(), d.replica(i).ingress, "dup", "POST", "/").await;
        assert_eq!(gone.status, 404, "via replica {i}: {gone:?}");
    }
    // And the name can be taken again, from a fresh count.
    d.cli_json(
        follower,
        &["actor", "create", "dup", "--template", "counter"],
    );
    assert_eq!(served(&d, follower, "dup").await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_actor_created_or_deleted_through_a_follower_is_seen_by_it_at_once() {
    let _one = ONE_CLUSTER.lock().await;
    let d = deployment(1, 2, 1, &[]);
    d.push_counter(0);
    let follower = 1 - d.leader();
    let (admin, ingress) = (d.replica(follower).admin, d.replica(follower).ingress);
    let c = client();
    let started = Instant::now();
    // Read-your-writes through the follower: right after the create's
    // answer, its ingress routes to the new actor and its admin API shows
    // it; right after the delete's, the actor is gone there.
    for i in 0..25 {
        if started.elapsed() > Duration::from_secs(60) {
            break;
        }
        let name = format!("ryw{i}");
        let body = format!(r#"{{"name":"{name}","template":"counter"}}"#);
        let created = send(
            &c,
            admin,
            "POST",
            "localhost",
            "/v1/actors",
            body.into_bytes(),
        )
        .await;
        assert_eq!(created.status, 201, "create {name}: {created:?}");
        let answer = to_actor(&c, ingress, &name, "POST", "/").await;
        assert_eq!(
            count(&answer),
            1,
            "{name} through the follower right after its create"
        );
        let path = format!("/v1/actors/{name}");
        let got = send(&c, admin, "GET", "localhost", &path, Vec::new()).await;
        assert_eq!(got.status, 200, "get {name}: {got:?}");
        let deleted = send(&c, admin, "DELETE", "localhost", &path, Vec::new()).await;
        assert_eq!(deleted.status, 204, "delete {name}: {deleted:?}");
        let gone = to_actor(&c, ingress, &name, "POST", "/").await;
        assert_eq!(
            gone.status, 404,
            "{name} through the follower right after its delete: {gone:?}"
        );
    }
}

/// Issue 30, input 3: while a follower is frozen, an actor placed at epoch
/// 3 is deleted and created again through the leader (epoch 1 again). Woken,
/// the follower used to keep the old placement (epoch 3 > 1) and answer
/// `421 stale placement` for as long as nothing else changed; the actor's
/// generation (its record's etcd create revision) now tells the new actor
/// from the old one.
#[tokio::test(flavor = "multi_thread")]
async fn a_follower_frozen_across_a_delete_and_create_routes_to_the_new_actor() {
    let _one = ONE_CLUSTER.lock().await;
    let d = deployment(1, 2, 2, &[]);
    let leader = d.leader();
    let follower = 1 - leader;
    d.push_counter(leader);
    d.cli_json(leader, &["actor", "create", "x", "--template", "counter"]);
    let workers = d.wait_for_workers(2);
    // Two moves: epoch 3.
    for _ in 0..2 {
        let on = d.cli_json(leader, &["actor", "get", "x"])["worker"]
            .as_str()
            .expect("worker")
            .to_owned();
        let to = workers.iter().find(|w| **w != on).expect("another worker");
        d.cli_json(leader, &["actor", "migrate", "x", "--to", to]);
    }
    assert_eq!(d.cli_json(leader, &["actor", "get", "x"])["epoch"], 3);
    assert_eq!(served(&d, follower, "x").await, 1, "the follower routes x");
    let frozen = d.replica(follower).process.pid();
    signal(frozen, "STOP");
    d.cli_ok(leader, &["actor", "delete", "x"]);
    d.cli_json(leader, &["actor", "create", "x", "--template", "counter"]);
    assert_eq!(d.cli_json(leader, &["actor", "get", "x"])["epoch"], 1);
    signal(frozen, "CONT");
    // The follower's watch delivers the delete and the create at once;
    // its first answers may still come from before it applied them, but
    // once applied every answer is the new actor's (count from 1).
    let c = client();
    let mut last = None;
    wait::until_else_async(
        "the follower to serve x",
        Duration::from_secs(15),
        async || {
            let answer = to_actor(&c, d.replica(follower).ingress, "x", "POST", "/").await;
            if answer.status == 200 {
                return Ok(());
            }
            let seen = format!("{answer:?} (before: {last:?})");
            last = Some(answer);
            Err(seen)
        },
    )
    .await;
    assert_eq!(served(&d, leader, "x").await, 2, "one actor, both replicas");
}
