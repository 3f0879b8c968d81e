//! The worker tested in process: a real [`Worker`] with a snapshot store
//! in a temporary folder, the data dir's journal (its group commit held
//! and released by the test through its `on_sync` hook, [`CommitGate`]),
//! a fake control plane ([`fakes::RefusingControl`]) and small WAT guests,
//! with tokio's paused time where time matters. The mailbox/park race,
//! the output gate, a trap's rollback and a capture during deliveries are
//! driven here without a process, a socket or a sleep.

mod fakes;
mod scenarios;

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use stasis_contract::client_gone::ClientGone;
use stasis_contract::error::ApiError;
use stasis_contract::metrics::Metrics;
use stasis_contract::settings::{Durability, WorkerSettings};
use stasis_core::engine::Limits;
use stasis_core::journal::Journal;
use stasis_core::snapshot_files::LocalSnapshotStore;
use stasis_core::snapshot_store::SnapshotStore;
use stasis_host_api::Request;
use tokio::sync::mpsc;

use crate::{ActorSpec, Worker};

/// The actor every test drives.
const ACTOR: &str = "counter-1";

/// Its placement epoch.
const EPOCH: u64 = 1;

/// A request whose encoding is longer than this traps (module docs of
/// [`counter_guest`]).
const TRAP_ABOVE: usize = 256;

/// A counter in WAT: each call adds one to the `i64` at 8192 and answers
/// it as its 8-byte body (little-endian); a call whose encoded request is
/// longer than [`TRAP_ABOVE`] bytes adds one and then traps, so only a
/// rollback takes the count back.
fn counter_guest() -> Vec<u8> {
    let text = format!(
        r#"(module
  (@custom "stasis-abi" "\01\00\00\00")
  (memory 2)
  (data (i32.const 16) "\c8\00\08")
  (func (export "stasis_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "stasis_handle") (param $ptr i32) (param $len i32) (result i64)
    (i64.store (i32.const 8192) (i64.add (i64.load (i32.const 8192)) (i64.const 1)))
    (if (i32.gt_u (local.get $len) (i32.const {TRAP_ABOVE})) (then unreachable))
    (i64.store (i32.const 19) (i64.load (i32.const 8192)))
    (i64.const 0x100000000b)))"#
    );
    wat::parse_str(&text).expect("test WAT")
}

/// Holds the journal's group commits while closed: its `on_sync` hook
/// (called after a commit's `fdatasync`, before its entries are marked
/// durable) waits here, and says so on `entered`.
#[derive(Default)]
struct CommitGate {
    closed: Mutex<bool>,
    opened: Condvar,
    entered: Mutex<Option<mpsc::UnboundedSender<()>>>,
}

impl CommitGate {
    /// The journal's hook: blocks its writer thread while closed.
    fn on_sync(&self) {
        let mut closed = self.closed.lock().unwrap();
        if *closed {
            if let Some(entered) = &*self.entered.lock().unwrap() {
                let _ = entered.send(());
            }
            while *closed {
                closed = self.opened.wait(closed).unwrap();
            }
        }
    }

    /// Closes the gate; the receiver hears of each commit held.
    fn close(&self) -> mpsc::UnboundedReceiver<()> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.entered.lock().unwrap() = Some(tx);
        *self.closed.lock().unwrap() = true;
        rx
    }

    fn open(&self) {
        *self.closed.lock().unwrap() = false;
        self.opened.notify_all();
    }
}

/// A worker hosting [`ACTOR`] (created), and what the test drives it by.
struct Harness {
    worker: Arc<Worker>,
    store: Arc<dyn SnapshotStore>,
    /// The journal's commit hook (level `request` only).
    commits: Arc<CommitGate>,
    _dir: tempfile::TempDir,
}

/// A worker at `durability` (level `request` with the data dir's journal)
/// with a hold timeout of `hold_timeout`, and [`ACTOR`] created on it.
async fn harness(durability: Durability, hold_timeout: Duration) -> Harness {
    let dir = tempfile::tempdir().expect("temp dir");
    let engine = stasis_test_util::engine::engine(Limits::default());
    let store: Arc<dyn SnapshotStore> = Arc::new(
        LocalSnapshotStore::open(dir.path().join("snapshots"), None).expect("snapshot store"),
    );
    let mut settings = WorkerSettings {
        hold_timeout,
        ..WorkerSettings::default()
    };
    settings.actor.durability = durability;
    let worker = Worker::new(
        "worker-1",
        engine.clone(),
        store.clone(),
        Arc::new(Metrics::default()),
        settings,
        None,
        Arc::new(fakes::NoTemplates),
    );
    worker.set_control(Arc::new(fakes::RefusingControl));
    let commits = Arc::new(CommitGate::default());
    if durability == Durability::Request {
        let hook = commits.clone();
        let (journal, _) = Journal::open(
            &dir.path().join("journal"),
            store.as_ref(),
            Box::new(move || hook.on_sync()),
        )
        .expect("journal");
        worker.set_journal(Arc::new(journal));
    }
    let spec = ActorSpec {
        name: ACTOR.to_owned(),
        template: stasis_test_util::engine::load(&engine, &counter_guest()),
        env: Vec::new(),
        durability: None,
    };
    worker.create(&spec, EPOCH).await.expect("create");
    Harness {
        worker,
        store,
        commits,
        _dir: dir,
    }
}

impl Harness {
    /// One request to [`ACTOR`]: the count it answers.
    async fn post(&self) -> Result<u64, ApiError> {
        call(&self.worker, Vec::new()).await
    }

    /// A request that traps after adding one.
    async fn post_trapping(&self) -> Result<u64, ApiError> {
        call(&self.worker, vec![b'x'; TRAP_ABOVE * 2]).await
    }
}

/// A request with `body` to [`ACTOR`] on `worker`: the count it answers.
async fn call(worker: &Worker, body: Vec<u8>) -> Result<u64, ApiError> {
    let request = Request {
        method: "POST".into(),
        uri: "/".into(),
        body,
        ..Request::default()
    };
    let response = worker
        .call(ACTOR, EPOCH, request, &ClientGone::new())
        .await?;
    assert_eq!(response.status, 200, "{response:?}");
    let count: [u8; 8] = response.body.as_slice().try_into().expect("an 8-byte body");
    Ok(u64::from_le_bytes(count))
}

/// Lets every task that can run do so (a current-thread runtime runs
/// them in turn), a bounded number of times.
async fn settle() {
    for _ in 0..64 {
        tokio::task::yield_now().await;
    }
}
