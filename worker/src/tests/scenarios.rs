//! The worker's scenarios: each drives one actor through the real worker
//! (mailbox, task, instance, store, journal) and forces its interleaving
//! with a current-thread runtime, the journal's commit gate or paused time.

use std::time::Duration;

use stasis_contract::error::ErrorKind;
use stasis_contract::settings::Durability;
use stasis_contract::status::{ActorState, ResumeFrom};

use super::{ACTOR, harness, settle};

const HOLD: Duration = Duration::from_secs(30);

/// A trap rolls the actor back to its last acknowledged state: at level
/// `request` every answered request is acknowledged, so the count the
/// trapping request added is gone and nothing else is, after a pause and
/// resume too.
#[tokio::test]
async fn a_trap_rolls_back_to_the_last_acknowledged_state() {
    let h = harness(Durability::Request, HOLD).await;
    for expected in 1..=3 {
        assert_eq!(h.post().await.unwrap(), expected);
    }
    let trapped = h.post_trapping().await.unwrap_err();
    assert_eq!(trapped.kind(), ErrorKind::Internal, "{trapped:?}");
    assert_eq!(h.post().await.unwrap(), 4, "the trap's +1 stayed");
    h.worker.pause(ACTOR).await.unwrap();
    assert_eq!(h.post().await.unwrap(), 5);
}

/// At level `pause` the newest snapshot is the acknowledged state (the
/// documented loss bound): a trap rolls back to it, losing the requests
/// after it, and the actor serves on from there.
#[tokio::test]
async fn a_trap_at_level_pause_rolls_back_to_the_newest_snapshot() {
    let h = harness(Durability::Pause, HOLD).await;
    assert_eq!(h.post().await.unwrap(), 1);
    assert_eq!(h.post().await.unwrap(), 2);
    h.worker.checkpoint(ACTOR).await.unwrap();
    assert_eq!(h.post().await.unwrap(), 3);
    let trapped = h.post_trapping().await.unwrap_err();
    assert_eq!(trapped.kind(), ErrorKind::Internal, "{trapped:?}");
    assert_eq!(
        h.post().await.unwrap(),
        3,
        "not rolled back to the checkpoint"
    );
}

/// An answer at level `request` leaves only once its journal entry is
/// durable (the output gate): with the journal's commit held after its
/// `fdatasync`, the guest has run the request but the client hears
/// nothing; released, it hears the count.
#[tokio::test(flavor = "current_thread")]
async fn an_answer_waits_for_its_journal_entry_to_be_durable() {
    let h = std::sync::Arc::new(harness(Durability::Request, HOLD).await);
    assert_eq!(h.post().await.unwrap(), 1);
    let mut held = h.commits.close();
    let request = tokio::spawn({
        let h = h.clone();
        async move { h.post().await }
    });
    // The entry was appended and synced: its commit waits in the hook.
    tokio::task::spawn_blocking(move || held.blocking_recv())
        .await
        .unwrap()
        .expect("a commit held");
    settle().await;
    assert!(
        !request.is_finished(),
        "answered before its journal entry was durable"
    );
    h.commits.open();
    assert_eq!(request.await.unwrap().unwrap(), 2);
}

/// Deliveries that race the actor's parking (a pause leaves it with no
/// instance, so its task parks itself while new requests arrive) are all
/// run, once each and in order: none is lost with a closed mailbox.
#[tokio::test(flavor = "current_thread")]
async fn deliveries_racing_a_park_are_each_run_once() {
    let h = harness(Durability::Request, HOLD).await;
    let mut expected = 0;
    for _ in 0..20 {
        let (a, paused, b) = tokio::join!(h.post(), h.worker.pause(ACTOR), h.post());
        paused.unwrap();
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!((a, b), (expected + 1, expected + 2));
        expected += 2;
        assert_eq!(h.worker.status(ACTOR).unwrap().mailbox, 0);
    }
    // Parked and woken again: the count survived every round.
    h.worker.pause(ACTOR).await.unwrap();
    assert_eq!(h.post().await.unwrap(), expected + 1);
}

/// A capture for a move holds the deliveries that come after it (their
/// effect would be lost with this copy); a cancelled move runs them here,
/// in order.
#[tokio::test(flavor = "current_thread")]
async fn a_capture_holds_deliveries_until_the_move_is_cancelled() {
    let h = std::sync::Arc::new(harness(Durability::Request, HOLD).await);
    assert_eq!(h.post().await.unwrap(), 1);
    let captured = h.worker.capture(ACTOR).await.unwrap();
    assert!(captured.live);
    assert_eq!(h.worker.status(ACTOR).unwrap().state, ActorState::Migrating);
    let held: Vec<_> = (0..3)
        .map(|_| {
            let h = h.clone();
            tokio::spawn(async move { h.post().await })
        })
        .collect();
    settle().await;
    assert!(held.iter().all(|r| !r.is_finished()), "ran during a move");
    h.worker.cancel_move(ACTOR).await;
    let mut counts = Vec::new();
    for request in held {
        counts.push(request.await.unwrap().unwrap());
    }
    counts.sort_unstable();
    assert_eq!(counts, [2, 3, 4]);
    assert_eq!(h.worker.status(ACTOR).unwrap().state, ActorState::Running);
}

/// A delivery held for a move is given up at the hold timeout, never run:
/// after the move is cancelled the count shows it was not applied.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_delivery_held_past_the_hold_timeout_is_given_up_unapplied() {
    let hold = Duration::from_secs(5);
    let h = std::sync::Arc::new(harness(Durability::Pause, hold).await);
    assert_eq!(h.post().await.unwrap(), 1);
    h.worker.capture(ACTOR).await.unwrap();
    let held = tokio::spawn({
        let h = h.clone();
        async move { h.post().await }
    });
    settle().await;
    assert!(!held.is_finished());
    tokio::time::advance(hold + Duration::from_millis(1)).await;
    let refused = held.await.unwrap().unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Unavailable, "{refused:?}");
    assert!(refused.message().contains("hold timeout"), "{refused:?}");
    h.worker.cancel_move(ACTOR).await;
    assert_eq!(h.post().await.unwrap(), 2, "the given-up request ran");
}

/// A resume from a named snapshot (a repair) restores exactly that state:
/// what came after it is gone, and the actor serves from there.
#[tokio::test]
async fn a_resume_from_a_snapshot_restores_that_state() {
    let h = harness(Durability::Request, HOLD).await;
    assert_eq!(h.post().await.unwrap(), 1);
    let first = h.worker.checkpoint(ACTOR).await.unwrap().seq;
    assert_eq!(h.post().await.unwrap(), 2);
    h.worker.pause(ACTOR).await.unwrap();
    assert!(h.store.list(ACTOR).unwrap().iter().any(|s| s.seq > first));
    h.worker
        .resume(ACTOR, ResumeFrom::Snapshot(first))
        .await
        .unwrap();
    assert_eq!(h.post().await.unwrap(), 2);
}
