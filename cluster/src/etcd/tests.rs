//! Tests of the etcd building blocks against a real etcd cluster of three
//! members (stasis-test-util's `EtcdCluster`), one cluster per test, run
//! one at a time (each freezes, kills or loads etcd), each bounded in time.

use std::collections::BTreeSet;
use std::time::Duration;

use stasis_test_util::etcd::EtcdCluster;
use tokio::time::{Instant, timeout};

pub(super) use super::harness::{connect, etcd_test};
use super::*;
use stasis_contract::directory::{ActorRow, Directory, TemplateRow};

fn template(name: &str, digest: &str) -> TemplateRow {
    TemplateRow {
        name: name.into(),
        digest: digest.into(),
        bytes: 3,
        env: vec![("K".into(), "V".into())],
        durability: None,
    }
}

/// The leader record of a replica named `name` (its addresses made up).
pub(super) fn record(name: &str) -> LeaderRecord {
    LeaderRecord {
        name: name.into(),
        ingress: format!("{name}:80"),
        admin: format!("{name}:81"),
    }
}

pub(super) fn actor(name: &str, worker: &str) -> ActorRow {
    ActorRow {
        name: name.into(),
        template: "t".into(),
        worker: worker.into(),
        epoch: 1,
        created_at_unix_ms: None,
        labels: Default::default(),
    }
}

pub(super) fn signal_all(cluster: &EtcdCluster, signal: libc::c_int) {
    for i in 0..3 {
        let pid = libc::pid_t::try_from(cluster.pid(i)).expect("pid");
        // SAFETY: kill(2) on a child process we started; no memory involved.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal})");
    }
}

#[test]
fn a_connection_to_nothing_fails_naming_the_endpoints() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let opts = EtcdOptions::parse(&format!("etcd://127.0.0.1:{port}")).expect("url");
    let started = std::time::Instant::now();
    let e = rt
        .block_on(Etcd::connect(&opts))
        .err()
        .expect("nothing listens there");
    assert!(
        format!("{e:#}").contains(&format!("127.0.0.1:{port}")),
        "{e:#}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn the_directory_inserts_once_places_by_epoch_and_pages() {
    etcd_test(Duration::from_secs(60), |cluster| async move {
        let etcd = connect(&cluster, "/dir").await;
        etcd.set_page_keys(7);
        let dir = etcd.directory();
        // From an async task of a multi-thread runtime (this one).
        dir.insert_template(&template("t", "aa"))
            .expect("insert template");
        dir.insert_template(&template("t", "aa"))
            .expect("the same row again is our own retried write");
        let taken = dir
            .insert_template(&template("t", "bb"))
            .expect_err("name taken");
        assert_eq!(taken.kind().status(), 409, "{taken:?}");
        assert_eq!(dir.template("t").expect("read"), Some(template("t", "aa")));
        assert_eq!(dir.template("nope").expect("read"), None);

        // 30 actors cross pages of 7, from spawn_blocking and plain threads.
        let d = dir.clone();
        tokio::task::spawn_blocking(move || {
            for i in 0..15 {
                d.insert_actor(&actor(&format!("a{i:02}"), "w1"))
                    .expect("insert");
            }
        })
        .await
        .expect("spawn_blocking");
        let d = dir.clone();
        std::thread::spawn(move || {
            for i in 15..30 {
                d.insert_actor(&actor(&format!("a{i:02}"), "w1"))
                    .expect("insert");
            }
        })
        .join()
        .expect("thread");
        let taken = dir.insert_actor(&actor("a00", "w9")).expect_err("taken");
        assert_eq!(taken.kind().status(), 409);
        let rows = dir.actors().expect("actors");
        let names: Vec<String> = rows.iter().map(|r| r.name.clone()).collect();
        let want: Vec<String> = (0..30).map(|i| format!("a{i:02}")).collect();
        assert_eq!(names, want, "every actor once, in name order, across pages");
        for i in 0..12 {
            dir.insert_template(&template(&format!("u{i:02}"), "cc"))
                .expect("insert");
        }
        assert_eq!(dir.templates().expect("templates").len(), 13);

        // Eight deciders race for each epoch: each epoch is taken once.
        for epoch in 2..5u64 {
            let winners: Vec<String> = (0..8)
                .map(|w| {
                    let d = dir.clone();
                    std::thread::spawn(move || {
                        let worker = format!("w{w}");
                        match d.place_actor("a00", &worker, epoch) {
                            Ok(()) => Some(worker),
                            Err(e) => {
                                assert_eq!(e.kind().status(), 409, "{e:?}");
                                None
                            }
                        }
                    })
                })
                .collect::<Vec<_>>()
                .into_iter()
                .filter_map(|h| h.join().expect("decider"))
                .collect();
            assert_eq!(winners.len(), 1, "epoch {epoch}: {winners:?}");
            let row = dir.actors().expect("actors").remove(0);
            assert_eq!(
                (row.worker.as_str(), row.epoch),
                (winners[0].as_str(), epoch)
            );
        }
        assert_eq!(
            dir.place_actor("a00", "w1", 4)
                .expect_err("taken")
                .kind()
                .status(),
            409
        );
        assert_eq!(
            dir.place_actor("a00", "w1", 1)
                .expect_err("older")
                .kind()
                .status(),
            409
        );
        assert_eq!(
            dir.place_actor("gone", "w1", 9)
                .expect_err("gone")
                .kind()
                .status(),
            409
        );

        dir.delete_actor("a00").expect("delete");
        assert_eq!(dir.actors().expect("actors").len(), 29);
        assert!(dir.delete_template("u00").expect("delete"));
        assert!(!dir.delete_template("u00").expect("delete"));
        // Another prefix is another directory.
        assert!(
            connect(&cluster, "/other")
                .await
                .directory()
                .actors()
                .expect("actors")
                .is_empty()
        );
    });
}

#[test]
fn the_first_settings_win() {
    etcd_test(Duration::from_secs(30), |cluster| async move {
        let a = connect(&cluster, "/s").await;
        let b = connect(&cluster, "/s").await;
        assert_eq!(a.settings::<Vec<u32>>().await.expect("read"), None);
        assert_eq!(
            a.settle_settings(&vec![1u32, 2]).await.expect("settle"),
            vec![1, 2]
        );
        assert_eq!(
            b.settle_settings(&vec![3u32]).await.expect("settle"),
            vec![1, 2]
        );
        assert_eq!(
            b.settings::<Vec<u32>>().await.expect("read"),
            Some(vec![1, 2])
        );
        let c = connect(&cluster, "/s2").await;
        assert_eq!(c.settings::<Vec<u32>>().await.expect("read"), None);
    });
}

#[test]
fn a_registered_worker_is_watched_until_it_revokes() {
    etcd_test(Duration::from_secs(30), |cluster| async move {
        let etcd = connect(&cluster, "/w").await;
        let mut workers = etcd.watch_workers();
        let lease = etcd
            .register_worker("w1", "127.0.0.1:7001", Duration::from_secs(2))
            .await
            .expect("register");
        assert!(lease.is_valid());
        let seen = workers
            .wait_for(|m| m.contains_key("w1"))
            .await
            .expect("watch")
            .clone();
        assert_eq!(
            seen.get("w1"),
            Some(&WorkerRecord {
                address: "127.0.0.1:7001".into(),
                lease: lease.id()
            })
        );
        // Keep-alives hold it past its TTL.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(lease.is_valid());
        assert!(workers.borrow().contains_key("w1"));
        lease.revoke().await.expect("revoke");
        workers
            .wait_for(|m| !m.contains_key("w1"))
            .await
            .expect("watch");
    });
}

#[test]
fn a_lease_without_answers_expires_in_process_before_etcd_drops_it() {
    etcd_test(Duration::from_secs(60), |cluster| async move {
        let etcd = connect(&cluster, "/l").await;
        let ttl = Duration::from_secs(2);
        let lease = etcd
            .register_worker("w1", "127.0.0.1:7001", ttl)
            .await
            .expect("register");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(lease.is_valid());
        let deadline = lease.deadline();
        signal_all(&cluster, libc::SIGSTOP);
        let frozen = Instant::now();
        // etcd cannot delete anything while frozen, so the key is still
        // there when the process stops believing.
        timeout(ttl, lease.expired())
            .await
            .expect("expired() within the TTL of the last answered keep-alive");
        let at = Instant::now();
        assert!(!lease.is_valid());
        assert!(at >= deadline, "expired only at the deadline");
        assert!(at - frozen <= ttl, "{:?}", at - frozen);
        // A directory call meanwhile times out with a clear 500.
        etcd.set_blocking_timeout(Duration::from_secs(2));
        let dir = etcd.directory();
        let asked = Instant::now();
        let e = tokio::task::spawn_blocking(move || dir.actors())
            .await
            .expect("spawn_blocking")
            .expect_err("etcd is frozen");
        assert_eq!(e.kind().status(), 500);
        assert!(e.message().contains("did not answer"), "{e:?}");
        assert!(
            asked.elapsed() < Duration::from_secs(4),
            "{:?}",
            asked.elapsed()
        );
        signal_all(&cluster, libc::SIGCONT);
        // No keep-alive follows: etcd drops the registration by itself.
        let mut client = etcd.client();
        let key = etcd.key("workers/w1");
        let gone = async {
            loop {
                if let Ok(r) = client.get(key.as_str(), None).await
                    && r.kvs().is_empty()
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        };
        timeout(Duration::from_secs(20), gone)
            .await
            .expect("etcd expires the lease");
        assert!(!lease.is_valid(), "an expired lease stays expired");
    });
}

#[test]
fn the_directory_and_watches_survive_a_member_death() {
    etcd_test(Duration::from_secs(90), |mut cluster| async move {
        let etcd = connect(&cluster, "/k").await;
        let dir = etcd.directory();
        let mut workers = etcd.watch_workers();
        dir.insert_template(&template("t", "aa")).expect("insert");
        let _w1 = etcd
            .register_worker("w1", "127.0.0.1:7001", Duration::from_secs(3))
            .await
            .expect("register");
        workers
            .wait_for(|m| m.contains_key("w1"))
            .await
            .expect("watch");
        for victim in [0, 1] {
            cluster.kill(victim);
            for i in 0..5 {
                let name = format!("v{victim}-{i}");
                dir.insert_actor(&actor(&name, "w1"))
                    .expect("insert with a member dead");
                dir.place_actor(&name, "w2", 2)
                    .expect("place with a member dead");
            }
            let worker = format!("x{victim}");
            let lease = etcd
                .register_worker(&worker, "127.0.0.1:7002", Duration::from_secs(3))
                .await
                .expect("register with a member dead");
            workers
                .wait_for(|m| m.contains_key(&worker))
                .await
                .expect("the watch converges after a member died");
            lease.revoke().await.expect("revoke");
            workers
                .wait_for(|m| !m.contains_key(&worker))
                .await
                .expect("watch");
            cluster.restart(victim);
        }
        let names: BTreeSet<String> = dir
            .actors()
            .expect("actors")
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names.len(), 10);
        assert!(
            workers.borrow().contains_key("w1"),
            "w1 kept its lease throughout"
        );
    });
}

#[test]
fn one_candidate_leads_and_the_next_takes_over() {
    etcd_test(Duration::from_secs(60), |cluster| async move {
        let ttl = Duration::from_secs(2);
        let a = connect(&cluster, "/e").await;
        let b = connect(&cluster, "/e").await;
        let c = connect(&cluster, "/e").await;
        let mut seen = c.watch_leader();
        assert_eq!(a.leader().await.expect("leader"), None);
        let lead_a = a.campaign(&record("a"), ttl).await.expect("a campaigns");
        assert!(lead_a.is_leader());
        seen.wait_for(|l| l.as_ref().is_some_and(|l| l.name == "a"))
            .await
            .expect("watch");

        let b2 = b.clone();
        let rec_b = record("b");
        let mut campaign_b = tokio::spawn(async move { b2.campaign(&rec_b, ttl).await });
        assert!(
            timeout(Duration::from_millis(800), &mut campaign_b)
                .await
                .is_err(),
            "b must not lead while a does"
        );
        assert_eq!(b.leader().await.expect("leader"), Some(record("a")));
        let resigned = Instant::now();
        lead_a.resign().await.expect("resign");
        let lead_b = timeout(ttl, campaign_b)
            .await
            .expect("b leads within the TTL")
            .expect("join")
            .expect("b campaigns");
        assert!(resigned.elapsed() < ttl);
        assert!(lead_b.is_leader());
        seen.wait_for(|l| l.as_ref().is_some_and(|l| l.name == "b"))
            .await
            .expect("watch");

        // b's process-side lease stops (dropped, no resign): c takes over
        // once etcd expires it, within about a TTL.
        let c2 = c.clone();
        let rec_c = record("c");
        let campaign_c = tokio::spawn(async move { c2.campaign(&rec_c, ttl).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let stopped = Instant::now();
        drop(lead_b);
        let lead_c = timeout(ttl * 3, campaign_c)
            .await
            .expect("c leads after b's lease expires")
            .expect("join")
            .expect("c campaigns");
        assert!(
            stopped.elapsed() >= ttl / 2,
            "c waited for b's lease: {:?}",
            stopped.elapsed()
        );
        assert!(lead_c.is_leader());
        seen.wait_for(|l| l.as_ref().is_some_and(|l| l.name == "c"))
            .await
            .expect("watch");
        lead_c.resign().await.expect("resign");
        seen.wait_for(Option::is_none).await.expect("watch");
    });
}

#[test]
fn user_and_password_auth_is_applied_and_a_refusal_is_named() {
    etcd_test(Duration::from_secs(60), |cluster| async move {
        // Enable auth through a plain connection: a root user, then auth.
        let admin = connect(&cluster, "/auth").await;
        let mut client = admin.client();
        client
            .user_add("root", "r00t-pw", None)
            .await
            .expect("add root");
        client
            .user_grant_role("root", "root")
            .await
            .expect("grant root");
        client.auth_enable().await.expect("enable auth");
        let mut opts = EtcdOptions::parse(&cluster.url("/auth")).expect("url");
        opts.user = Some(("root".into(), "r00t-pw".into()));
        let etcd = Etcd::connect(&opts)
            .await
            .expect("connect with the password");
        let directory = etcd.directory();
        let inserted = tokio::task::spawn_blocking(move || {
            directory.insert_template(&template("t", "00"))?;
            directory.template("t")
        })
        .await
        .expect("join")
        .expect("directory works under auth");
        assert_eq!(inserted.map(|t| t.digest), Some("00".to_owned()));
        opts.user = Some(("root".into(), "wrong".into()));
        let refused = Etcd::connect(&opts)
            .await
            .err()
            .expect("a wrong password is refused");
        let text = format!("{refused:#}");
        assert!(text.contains("connecting to etcd at"), "{text}");
        assert!(
            !text.contains("wrong"),
            "the password is never shown: {text}"
        );
    });
}

#[test]
fn a_former_leaders_directory_writes_nothing_once_another_leads() {
    etcd_test(Duration::from_secs(30), |cluster| async move {
        let ttl = Duration::from_secs(2);
        let a = connect(&cluster, "/f").await;
        let b = connect(&cluster, "/f").await;
        let lead_a = a.campaign(&record("a"), ttl).await.expect("a campaigns");
        let dir_a = a.leader_directory(&lead_a);
        dir_a.insert_template(&template("t", "aa")).expect("insert");
        dir_a.insert_actor(&actor("x", "w1")).expect("insert");
        dir_a.place_actor("x", "w2", 2).expect("a leads: placed");
        lead_a.resign().await.expect("resign");
        let lead_b = b.campaign(&record("b"), ttl).await.expect("b campaigns");
        // Every write of a's directory is refused (503), nothing changes.
        let refused = dir_a
            .place_actor("x", "w3", 3)
            .expect_err("a no longer leads");
        assert_eq!(refused.kind().status(), 503, "{}", refused.message());
        let refused = dir_a.insert_actor(&actor("y", "w1")).expect_err("insert");
        assert_eq!(refused.kind().status(), 503, "{}", refused.message());
        let refused = dir_a.delete_actor("x").expect_err("delete");
        assert_eq!(refused.kind().status(), 503, "{}", refused.message());
        let rows = b.directory().actors().expect("actors");
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].worker.as_str(), rows[0].epoch), ("w2", 2));
        // b's directory writes.
        let dir_b = b.leader_directory(&lead_b);
        dir_b.place_actor("x", "w3", 3).expect("b leads: placed");
        dir_b.delete_actor("x").expect("b deletes");
        assert!(b.directory().actors().expect("actors").is_empty());
        lead_b.resign().await.expect("resign");
    });
}

#[test]
fn a_worker_name_held_by_a_live_lease_is_not_taken_over() {
    etcd_test(Duration::from_secs(30), |cluster| async move {
        let etcd = connect(&cluster, "/n").await;
        let ttl = Duration::from_secs(2);
        let first = etcd
            .register_worker("w1", "127.0.0.1:7001", ttl)
            .await
            .expect("register");
        let taken = etcd
            .register_worker("w1", "127.0.0.1:7002", ttl)
            .await
            .err()
            .expect("the name is held");
        let taken = taken.downcast_ref::<NameTaken>().expect("NameTaken");
        assert_eq!(taken.record.lease, first.id());
        assert_eq!(taken.record.address, "127.0.0.1:7001");
        assert!(taken.granted_ttl >= ttl, "{:?}", taken.granted_ttl);
        first.revoke().await.expect("revoke");
        let second = etcd
            .register_worker("w1", "127.0.0.1:7002", ttl)
            .await
            .expect("free again");
        second.revoke().await.expect("revoke");
    });
}

#[test]
fn alarms_are_kept_one_per_actor_fenced_and_deleted_with_the_actor() {
    etcd_test(Duration::from_secs(30), |cluster| async move {
        let ttl = Duration::from_secs(2);
        let a = connect(&cluster, "/al").await;
        let b = connect(&cluster, "/al").await;
        let lead_a = a.campaign(&record("a"), ttl).await.expect("a campaigns");
        let dir_a = a.leader_directory(&lead_a);
        dir_a.insert_template(&template("t", "aa")).expect("insert");
        dir_a.insert_actor(&actor("x", "w1")).expect("insert");
        assert_eq!(dir_a.alarm("x").expect("read"), None);
        dir_a.set_alarm("x", 1_000).expect("set");
        dir_a.set_alarm("x", 2_000).expect("replace");
        assert_eq!(dir_a.alarm("x").expect("read"), Some(2_000));
        // Clearing a fired alarm that was replaced meanwhile keeps the new one.
        assert!(!dir_a.clear_alarm("x", Some(1_000)).expect("stale clear"));
        assert_eq!(
            b.directory().alarms().expect("listing"),
            vec![("x".to_owned(), 2_000)]
        );
        lead_a.resign().await.expect("resign");
        let lead_b = b.campaign(&record("b"), ttl).await.expect("b campaigns");
        // A former leader writes no alarm.
        let refused = dir_a.set_alarm("x", 3_000).expect_err("a no longer leads");
        assert_eq!(refused.kind().status(), 503, "{}", refused.message());
        let refused = dir_a.clear_alarm("x", None).expect_err("a no longer leads");
        assert_eq!(refused.kind().status(), 503, "{}", refused.message());
        let dir_b = b.leader_directory(&lead_b);
        assert_eq!(dir_b.alarm("x").expect("read"), Some(2_000));
        assert!(dir_b.clear_alarm("x", Some(2_000)).expect("fired, cleared"));
        dir_b.set_alarm("x", 4_000).expect("set");
        dir_b.delete_actor("x").expect("delete");
        assert!(dir_b.alarms().expect("listing").is_empty());
        lead_b.resign().await.expect("resign");
    });
}
