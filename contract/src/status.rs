//! What a worker reports of an actor: its state and status, the outcome
//! of a pause or checkpoint, where a resume starts from, and what a
//! capture for a move hands back.

use std::time::{Duration, Instant};

use serde::Serialize;
use stasis_core::snapshot_store::SnapshotEntry;

/// Lower-case actor states, as in the JSON API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActorState {
    /// Being created (first instance, snapshot seq 0).
    Creating,
    /// Has a live instance.
    Running,
    /// A pause is in progress.
    Pausing,
    /// No live instance; the newest snapshot is its state.
    Paused,
    /// A resume is in progress.
    Resuming,
    /// Being moved to another worker.
    Migrating,
    /// Its snapshot could not be restored; requests get 503 with the reason.
    Failed,
    /// Its worker does not answer right now, so its state there is not
    /// known (shown by listings; a worker never reports it itself).
    Unknown,
}

impl ActorState {
    /// The lower-case name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ActorState::Creating => "creating",
            ActorState::Running => "running",
            ActorState::Pausing => "pausing",
            ActorState::Paused => "paused",
            ActorState::Resuming => "resuming",
            ActorState::Migrating => "migrating",
            ActorState::Failed => "failed",
            ActorState::Unknown => "unknown",
        }
    }

    /// All states a worker reports, for metrics ([`ActorState::Unknown`] is
    /// the control plane's, for an unreachable worker).
    pub const ALL: [ActorState; 7] = [
        ActorState::Creating,
        ActorState::Running,
        ActorState::Pausing,
        ActorState::Paused,
        ActorState::Resuming,
        ActorState::Migrating,
        ActorState::Failed,
    ];
}

/// What the API reports of an actor's life on its worker.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ActorStatus {
    /// Current state.
    pub state: ActorState,
    /// The newest snapshot.
    pub snapshot: Option<SnapshotEntry>,
    /// Restores into a fresh instance (resumes, rollbacks, moves in).
    pub resumes: u64,
    /// Duration of the last pause, in milliseconds.
    pub last_pause_ms: Option<f64>,
    /// Duration of the last resume, in milliseconds.
    pub last_resume_ms: Option<f64>,
    /// Why the actor is `failed`, or the last trap.
    pub error: Option<String>,
    /// Linear memory of the live instance, in bytes (0 when paused).
    pub memory_bytes: u64,
    /// Requests answered by the guest.
    pub requests: u64,
    /// Alarms the guest ran (its `on_alarm` export), on this worker.
    #[serde(default)]
    pub alarms: u64,
    /// When the guest last ran an alarm, in ms since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_alarm_at_unix_ms: Option<u64>,
    /// When `error` was set, in ms since the Unix epoch.
    #[serde(default)]
    pub error_at_unix_ms: Option<u64>,
    /// When its requests' effects are durable on its worker (`request`,
    /// `interval` or `pause`; `None` while no worker hosts it).
    #[serde(default)]
    pub durability: Option<String>,
    /// Deliveries waiting in its mailbox (requests, alarms and commands
    /// not yet taken by its task), when its worker reported the status.
    #[serde(default)]
    pub mailbox: usize,
    /// `snapshot` is a create's snapshot 0 that its worker keeps in the
    /// journal (durable there) and has not written to the snapshot store
    /// yet: listings show it, and an operation that needs it in the store
    /// (a fork from it) has the worker write it first.
    #[serde(default)]
    pub snapshot_journaled: bool,
    /// When the guest last ran a request, in ms since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_request_at_unix_ms: Option<u64>,
    /// When `snapshot` was written (or journaled), in ms since the Unix
    /// epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_snapshot_at_unix_ms: Option<u64>,
    /// When the last pause ended, in ms since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pause_at_unix_ms: Option<u64>,
    /// When the last resume ended, in ms since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_resume_at_unix_ms: Option<u64>,
    /// When the actor last ran a request or command (not serialized:
    /// idle pauses and `--max-live` eviction read it).
    #[serde(skip)]
    pub last_active: Option<Instant>,
}

impl ActorStatus {
    /// Records `error` (why the actor failed, or its last trap), now.
    pub fn set_error(&mut self, error: String) {
        self.error = Some(error);
        self.error_at_unix_ms = now_unix_ms();
    }

    /// A fresh status in `state`, active now.
    #[must_use]
    pub fn new(state: ActorState) -> Self {
        Self {
            state,
            snapshot: None,
            resumes: 0,
            last_pause_ms: None,
            last_resume_ms: None,
            error: None,
            memory_bytes: 0,
            requests: 0,
            alarms: 0,
            last_alarm_at_unix_ms: None,
            mailbox: 0,
            snapshot_journaled: false,
            error_at_unix_ms: None,
            durability: None,
            last_request_at_unix_ms: None,
            last_snapshot_at_unix_ms: None,
            last_pause_at_unix_ms: None,
            last_resume_at_unix_ms: None,
            last_active: Some(Instant::now()),
        }
    }

    /// The status of an actor that no worker hosts right now.
    #[must_use]
    pub fn waiting(reason: &str) -> Self {
        let mut status = Self::new(ActorState::Paused);
        status.error = Some(reason.to_owned());
        status.last_active = None;
        status
    }

    /// The status of an actor whose worker did not answer, with the reason.
    #[must_use]
    pub fn unknown(reason: &str) -> Self {
        let mut status = Self::waiting(reason);
        status.state = ActorState::Unknown;
        status
    }

    /// The status of an actor that cannot be hosted, with the reason.
    #[must_use]
    pub fn failed(reason: &str) -> Self {
        let mut status = Self::waiting(reason);
        status.state = ActorState::Failed;
        status
    }

    /// When the actor last served a request or was created/resumed.
    #[must_use]
    pub fn last_active(&self) -> Option<Instant> {
        self.last_active
    }
}

/// The outcome of a pause or checkpoint.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize)]
pub struct SnapshotReport {
    /// Sequence number of the new snapshot (or of the newest, if nothing
    /// was written because the actor was already paused).
    pub seq: u64,
    /// Its size in bytes (of its file: a delta's, for an incremental
    /// snapshot).
    pub snapshot_bytes: u64,
    /// Bytes this pause or checkpoint wrote to the store: the new file's
    /// size, or 0 when nothing was written (already paused, or unchanged
    /// since the newest snapshot). Absent in answers of older workers.
    #[serde(default)]
    pub bytes_written: u64,
    /// Time from the command's start to the snapshot being durable and
    /// (for a pause) the instance dropped, in milliseconds.
    pub duration_ms: f64,
    /// False when the actor was already paused (idempotent pause).
    pub changed: bool,
}

/// What a worker answers to a create: snapshot 0's report and the
/// actor's status right after it, so the control plane shows the new actor
/// without asking the worker again. `status` is absent in answers of
/// older workers (the caller asks for it then).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Created {
    /// Snapshot 0.
    #[serde(flatten)]
    pub report: SnapshotReport,
    /// The actor's status once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ActorStatus>,
}

/// Where a resume takes the actor's state from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResumeFrom {
    /// The newest snapshot.
    Newest,
    /// A given snapshot (an operator's repair of a failed actor).
    Snapshot(u64),
    /// A fresh instance of the template (state discarded, operator's choice).
    Template,
}

/// An actor captured for a move: its snapshot is durable in the control
/// plane's store (written there by an in-process worker, replicated there
/// by a remote one), so only its sequence number travels.
#[derive(Debug, Clone, Copy)]
pub struct Captured {
    /// The snapshot's sequence number.
    pub seq: u64,
    /// Whether the actor had a live instance (a running actor is restored
    /// on the target at once; a paused one stays paused).
    pub live: bool,
}

/// A duration in milliseconds rounded to the microsecond, for reports and
/// statuses (JSON shows `28.248653`, never `28.248652999999997`: the
/// quotient of a whole number of microseconds by 1000 is the double
/// nearest to that decimal, which prints as it).
#[must_use]
pub fn ms(d: Duration) -> f64 {
    // u128 microseconds fit an f64 exactly below 2^53 µs (285 years).
    d.as_micros() as f64 / 1000.0
}

/// Now, in ms since the Unix epoch (`None` on a clock before 1970).
#[must_use]
pub fn now_unix_ms() -> Option<u64> {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_millis()).ok())
}

/// `unix_ms` (ms since the Unix epoch) as an RFC 3339 UTC timestamp with
/// milliseconds (`2026-12-04T22:10:05.123Z`), the form of every `*_at`
/// field of the API.
#[must_use]
pub fn rfc3339(unix_ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(unix_ms);
    humantime::format_rfc3339_millis(at).to_string()
}
