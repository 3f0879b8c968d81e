//! Moves, drains, a lost worker and a leader change, through the control
//! plane's own entry points, against fake workers.

use std::time::Duration;

use stasis_contract::error::ErrorKind;
use stasis_contract::status::ActorState;
use stasis_contract::worker_api::WorkerApi as _;

use super::fakes::FakeWorker;
use super::{HEARTBEAT_TIMEOUT, Harness, TEMPLATE, harness, registered, row, until};
use crate::{Role, WorkerState};

/// Creates `a0` on one of two in-process workers: its worker's name, that
/// worker, and the other one.
async fn one_actor_and_another_worker(h: &Harness) -> (String, &FakeWorker, &FakeWorker) {
    h.control
        .create_actor("a0", TEMPLATE)
        .await
        .expect("create");
    let (from, _) = h.placed("a0").await;
    let (source, target) = if from == "worker-1" {
        (&*h.workers[0], &*h.workers[1])
    } else {
        (&*h.workers[1], &*h.workers[0])
    };
    (from, source, target)
}

/// Makes remote worker `w2` join beside `worker-1` and creates `a0` and
/// `a1` (the least-loaded worker takes each create: one actor each); the
/// one on `w2`.
async fn one_actor_on_a_remote_worker(h: &Harness) -> &'static str {
    let remote = h.join_remote("w2");
    h.control.join("w2", "w2.test:7071").expect("join");
    h.control
        .create_actor("a0", TEMPLATE)
        .await
        .expect("create");
    h.control
        .create_actor("a1", TEMPLATE)
        .await
        .expect("create");
    if remote.hosted("a0").is_some() {
        "a0"
    } else {
        "a1"
    }
}

#[tokio::test]
async fn a_request_reaches_the_actors_worker_under_its_epoch() {
    let h = harness(Role::Embedded, 1, &[]);
    h.control
        .create_actor("a0", TEMPLATE)
        .await
        .expect("create");
    assert_eq!(h.placed("a0").await, ("worker-1".to_owned(), 1));
    assert_eq!(
        h.post("a0").await.expect("call"),
        "worker-1 POST a0 epoch 1"
    );
    assert_eq!(h.workers[0].log(), ["create a0 epoch 1"]);
    let unknown = h.post("nobody").await.expect_err("unknown actor");
    assert!(unknown.is(ErrorKind::NotFound), "{unknown:?}");
}

#[tokio::test]
async fn a_move_switches_the_placement_once_and_the_old_worker_lets_go() {
    let h = harness(Role::Embedded, 2, &[]);
    let (from, source, target) = one_actor_and_another_worker(&h).await;
    let to = target.name().to_owned();
    let moved = h.control.migrate("a0", &to).await.expect("move");
    assert_eq!((moved.from.as_str(), moved.actor.epoch), (from.as_str(), 2));
    assert_eq!(h.placed("a0").await, (to.clone(), 2));
    let recorded = h.directory.actor("a0").expect("row");
    assert_eq!((recorded.worker.as_str(), recorded.epoch), (to.as_str(), 2));
    assert!(source.hosted("a0").is_none(), "{:?}", source.log());
    assert_eq!(
        source.log(),
        ["create a0 epoch 1", "capture a0", "remove a0"]
    );
    assert_eq!(target.log(), ["install a0 epoch 2 seq 0"]);
    assert_eq!(
        h.post("a0").await.expect("call after the move"),
        format!("{to} POST a0 epoch 2")
    );
}

#[tokio::test]
async fn a_move_the_target_refuses_rolls_back_and_keeps_the_epoch() {
    let h = harness(Role::Embedded, 2, &[]);
    let (from, source, target) = one_actor_and_another_worker(&h).await;
    target.refuse_installs();
    let refused = h
        .control
        .migrate("a0", target.name())
        .await
        .expect_err("the target refuses");
    assert!(refused.message().contains("rolled back"), "{refused}");
    assert_eq!(h.placed("a0").await, (from.clone(), 1));
    assert_eq!(h.directory.actor("a0").expect("row").epoch, 1);
    assert!(
        source.log().contains(&"cancel_move a0".to_owned()),
        "{:?}",
        source.log()
    );
    assert_eq!(
        source.hosted("a0").expect("still hosted").status.state,
        ActorState::Running
    );
    assert_eq!(
        h.post("a0").await.expect("served where it was"),
        format!("{from} POST a0 epoch 1")
    );
}

#[tokio::test]
async fn an_alarm_is_delivered_to_the_actors_current_owner() {
    let h = harness(Role::Embedded, 2, &[]);
    h.control
        .create_actor("a0", TEMPLATE)
        .await
        .expect("create");
    let (from, _) = h.placed("a0").await;
    let to = if from == "worker-1" {
        "worker-2"
    } else {
        "worker-1"
    };
    h.control.migrate("a0", to).await.expect("move");
    let route = h.control.route("a0").await.expect("route");
    let outcome = h.control.alarm(route, None).await.expect("delivered");
    assert_eq!(outcome, stasis_contract::alarm::AlarmOutcome::Ran);
    let target = h.workers.iter().find(|w| w.name() == to).expect("target");
    assert!(
        target.log().contains(&"alarm a0 epoch 2".to_owned()),
        "{:?}",
        target.log()
    );
    let source = h.workers.iter().find(|w| w.name() == from).expect("source");
    assert!(
        !source.log().iter().any(|l| l.starts_with("alarm")),
        "{:?}",
        source.log()
    );
}

#[tokio::test]
async fn a_drain_moves_every_actor_off_the_worker() {
    let h = harness(Role::Embedded, 2, &[]);
    for i in 0..6 {
        h.control
            .create_actor(&format!("a{i}"), TEMPLATE)
            .await
            .expect("create");
    }
    let drained = h.control.drain("worker-1").await.expect("drain");
    assert_eq!(drained.state, WorkerState::Drained);
    assert_eq!(drained.actors, 0);
    for i in 0..6 {
        let actor = format!("a{i}");
        let (worker, _) = h.placed(&actor).await;
        assert_eq!(worker, "worker-2", "{actor}");
        assert!(h.workers[0].hosted(&actor).is_none(), "{actor}");
        assert!(h.workers[1].hosted(&actor).is_some(), "{actor}");
    }
    let refused = h
        .control
        .migrate("a0", "worker-1")
        .await
        .expect_err("no move to a drained worker");
    assert!(!refused.is(ErrorKind::Internal), "{refused:?}");
}

#[tokio::test(start_paused = true)]
async fn a_silent_remote_worker_is_declared_lost_and_its_actors_come_back() {
    let h = harness(Role::Embedded, 1, &[]);
    let on_remote = one_actor_on_a_remote_worker(&h).await;
    assert_eq!(h.placed(on_remote).await, ("w2".to_owned(), 1));
    let detector = tokio::spawn(h.control.clone().run_failure_detector());
    // w2 never heartbeats: after twice the timeout it is lost, and its
    // actor comes back on worker-1 from its newest snapshot, paused:
    // placed there lazily at epoch 2, adopted at 3 (see `crate::adopt`).
    until(
        HEARTBEAT_TIMEOUT * 4,
        "the actor's re-placement",
        async || h.placed(on_remote).await == ("worker-1".to_owned(), 3),
    )
    .await;
    let workers = h.control.workers().await;
    let w2 = workers.iter().find(|w| w.name == "w2").expect("w2 listed");
    assert_eq!(w2.state, WorkerState::Lost);
    assert_eq!(
        h.workers[0]
            .hosted(on_remote)
            .expect("re-placed")
            .status
            .state,
        ActorState::Paused
    );
    assert_eq!(h.directory.actor(on_remote).expect("row").epoch, 3);
    assert_eq!(
        h.post(on_remote).await.expect("served again"),
        format!("worker-1 POST {on_remote} epoch 3")
    );
    // Its heartbeat, should it come back, is refused: it must drop every
    // actor and join again.
    let gone = h.control.heartbeat("w2").expect_err("lost");
    assert!(gone.is(ErrorKind::Gone), "{gone:?}");
    detector.abort();
}

#[tokio::test]
async fn a_heartbeating_remote_worker_keeps_its_actors() {
    tokio::time::pause();
    let h = harness(Role::Embedded, 1, &[]);
    let on_remote = one_actor_on_a_remote_worker(&h).await;
    let detector = tokio::spawn(h.control.clone().run_failure_detector());
    for _ in 0..20 {
        tokio::time::sleep(HEARTBEAT_TIMEOUT / 2).await;
        h.control.heartbeat("w2").expect("heartbeat");
    }
    assert_eq!(h.placed(on_remote).await, ("w2".to_owned(), 1));
    detector.abort();
}

#[tokio::test]
async fn a_new_leader_takes_placements_as_the_workers_report_them() {
    // The previous leader placed a0 on w1 (epoch 3) and a1 on w2 (epoch 5);
    // w2's lease is gone, and w1 holds a stray copy of a2 it does not own.
    let rows = [row("a0", "w1", 3), row("a1", "w2", 5), row("a2", "w1", 1)];
    let h = harness(Role::Leader, 0, &rows);
    h.store
        .write("a1", 0, 5, b"snapshot")
        .expect("a1's snapshot");
    h.store
        .write("a2", 0, 1, b"snapshot")
        .expect("a2's snapshot");
    let w1 = h.join_remote("w1");
    w1.host("a0", 3, ActorState::Running);
    w1.host("stray", 1, ActorState::Paused);
    h.control
        .take_over(&registered(&["w1"]))
        .await
        .expect("take over");
    // a0 stays where it is, at its epoch: no move, no install.
    assert_eq!(h.placed("a0").await, ("w1".to_owned(), 3));
    assert_eq!(
        h.post("a0").await.expect("served by its owner"),
        "w1 POST a0 epoch 3"
    );
    // a1's worker is gone and a2's does not hold it: both are re-placed
    // on w1 from their newest snapshots: placed lazily one epoch later,
    // adopted at the next (see `crate::adopt`).
    until(Duration::from_secs(10), "a1 and a2 re-placed", async || {
        h.placed("a1").await == ("w1".to_owned(), 7) && h.placed("a2").await == ("w1".to_owned(), 3)
    })
    .await;
    assert_eq!(h.directory.actor("a1").expect("row").epoch, 7);
    // The copy nobody owns is removed.
    assert!(w1.hosted("stray").is_none(), "{:?}", w1.log());
}

#[tokio::test(start_paused = true)]
async fn a_failed_re_placement_is_retried_until_it_succeeds_and_shown_meanwhile() {
    let h = harness(Role::Embedded, 1, &[]);
    let on_remote = one_actor_on_a_remote_worker(&h).await;
    // The survivor cannot install for a moment (its store is down, say).
    h.workers[0].refuse_next_installs(3);
    let detector = tokio::spawn(h.control.clone().run_failure_detector());
    until(HEARTBEAT_TIMEOUT * 4, "the failure shown", async || {
        h.control
            .actor(on_remote)
            .await
            .is_ok_and(|a| a.error.is_some_and(|e| e.contains("re-placement failed")))
    })
    .await;
    until(
        Duration::from_secs(60),
        "the retried re-placement",
        async || h.placed(on_remote).await == ("worker-1".to_owned(), 3),
    )
    .await;
    let info = h.control.actor(on_remote).await.expect("actor");
    assert_eq!(info.error, None, "{info:?}");
    let text = h.control.metrics().encode();
    assert!(
        text.contains("stasis_replacement_failures_total 3"),
        "{text}"
    );
    assert_eq!(
        h.post(on_remote).await.expect("served again"),
        format!("worker-1 POST {on_remote} epoch 3")
    );
    detector.abort();
}
