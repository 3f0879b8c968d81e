//! What the admin API shows: the JSON views of templates, actors,
//! workers, moves and gc (docs/api.md). Plain data, filled by the control
//! plane's operations.

use serde::{Deserialize, Serialize};

use stasis_contract::status::ActorState;
use stasis_core::snapshot_store::SnapshotEntry;

/// A template as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct TemplateInfo {
    /// Name.
    pub name: String,
    /// The newest version (the one new actors run; 1 for a template
    /// pushed once).
    pub version: u64,
    /// SHA-256 hex of the newest version's module (as every field below
    /// but `actors` and `versions`).
    pub digest: String,
    /// Module size in bytes.
    pub bytes: u64,
    /// WASI environment.
    pub env: std::collections::BTreeMap<String, String>,
    /// Actors using it, of every version.
    pub actors: usize,
    /// When its actors' requests are durable (`--durability`).
    pub durability: String,
    /// Every version, oldest first.
    pub versions: Vec<TemplateVersionInfo>,
}

/// One version of a template as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct TemplateVersionInfo {
    /// Its number: 1, 2, ...
    pub version: u64,
    /// SHA-256 hex of its module.
    pub digest: String,
    /// Module size in bytes.
    pub bytes: u64,
    /// Actors running it.
    pub actors: usize,
    /// When its actors' requests are durable (`--durability`).
    pub durability: String,
}

/// An actor as the API shows it (docs/api.md, "Actor").
#[derive(Debug, Clone, Serialize)]
pub struct ActorInfo {
    /// Name.
    pub name: String,
    /// Template name.
    pub template: String,
    /// The version of its template it runs.
    pub template_version: u64,
    /// State.
    pub state: ActorState,
    /// Owning worker.
    pub worker: String,
    /// The owning worker's state as the control plane sees it (`ready`,
    /// `draining`, `drained`, `lost`); absent while no worker hosts it.
    pub worker_state: Option<WorkerState>,
    /// Placement epoch.
    pub epoch: u64,
    /// Newest snapshot.
    pub snapshot: Option<SnapshotEntry>,
    /// All stored snapshots, oldest first.
    pub snapshots: Vec<SnapshotEntry>,
    /// Restores into fresh instances.
    pub resumes: u64,
    /// Last pause, ms.
    pub last_pause_ms: Option<f64>,
    /// Last resume, ms.
    pub last_resume_ms: Option<f64>,
    /// Requests answered by the guest.
    pub requests: u64,
    /// Alarms the guest ran, on its worker since it hosts the actor.
    pub alarms: u64,
    /// When the guest last ran an alarm (RFC 3339), on its worker.
    pub last_alarm_at: Option<String>,
    /// Live linear memory, bytes.
    pub memory_bytes: u64,
    /// Deliveries waiting in its mailbox.
    pub mailbox: usize,
    /// Why it failed, or the last trap.
    pub error: Option<String>,
    /// When `error` was set, ms since the Unix epoch.
    pub error_at_unix_ms: Option<u64>,
    /// When its requests' effects are durable (docs/api.md, "Durability"):
    /// `request`, `interval` or `pause`; absent while no worker hosts it.
    pub durability: Option<String>,
    /// When the guest last ran a request (RFC 3339, UTC, ms), as its
    /// worker saw it since it hosts the actor.
    pub last_request_at: Option<String>,
    /// When its newest snapshot was written (RFC 3339), on its worker.
    pub last_snapshot_at: Option<String>,
    /// When its last pause ended (RFC 3339), on its worker.
    pub last_pause_at: Option<String>,
    /// When its last resume ended (RFC 3339), on its worker.
    pub last_resume_at: Option<String>,
    /// When `error` was set (RFC 3339): `error_at_unix_ms` as a time.
    pub last_error_at: Option<String>,
    /// When it was created (RFC 3339), as the directory keeps it (`null`
    /// for an actor created before the directory kept it); a fork's is
    /// when the fork was made.
    pub created_at: Option<String>,
    /// Its labels (`{}` for none).
    pub labels: stasis_contract::labels::Labels,
    /// When its pending alarm fires (RFC 3339): in `actor get` only, and
    /// absent there when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alarm_at: Option<String>,
}

/// The answer to a pause or checkpoint: the actor plus the snapshot.
#[derive(Debug, Clone, Serialize)]
pub struct PauseInfo {
    /// The actor after the operation.
    #[serde(flatten)]
    pub actor: ActorInfo,
    /// Size of the newest snapshot's file, bytes (a delta's own size for
    /// an incremental snapshot).
    pub snapshot_bytes: u64,
    /// Bytes this operation wrote to the snapshot store: the new file's
    /// size, or 0 when nothing was written (already paused, or unchanged).
    pub bytes_written: u64,
    /// Duration, ms (0 if nothing changed).
    pub duration_ms: f64,
}

/// The answer to a move: the actor on its new worker plus the downtime.
#[derive(Debug, Clone, Serialize)]
pub struct MigrateInfo {
    /// The actor after the move.
    #[serde(flatten)]
    pub actor: ActorInfo,
    /// Time the actor's gate was closed, in milliseconds.
    pub downtime_ms: f64,
    /// The worker it left.
    pub from: String,
}

/// One actor's upgrade (`POST /v1/actors/{name}/upgrade`).
#[derive(Debug, Clone, Serialize)]
pub struct UpgradeInfo {
    /// The actor after the upgrade.
    #[serde(flatten)]
    pub actor: ActorInfo,
    /// The version of its template it ran before.
    pub from_version: u64,
    /// The version it runs now.
    pub to_version: u64,
    /// How its state moved: `carry_over` (its snapshot restored into the
    /// new module) or `hand_over` (`stasis_save_state` to
    /// `stasis_load_state`).
    pub path: &'static str,
    /// Time the actor's gate was closed, in milliseconds.
    pub downtime_ms: f64,
    /// The snapshot taken at the barrier, under the old version: `actor
    /// resume --from-snapshot` of it brings the actor back to that version
    /// with that state, while retention keeps it (`--keep-snapshots`).
    pub barrier_snapshot: u64,
}

/// One move of a rebalance or drain.
#[derive(Debug, Clone, Serialize)]
pub struct Move {
    /// The actor.
    pub actor: String,
    /// Source worker.
    pub from: String,
    /// Target worker.
    pub to: String,
    /// Gate closed → open, ms (absent if the move failed).
    pub downtime_ms: Option<f64>,
    /// Why the move failed (it was rolled back).
    pub error: Option<String>,
}

/// The answer to a rebalance.
#[derive(Debug, Clone, Serialize)]
pub struct RebalanceReport {
    /// The moves made.
    pub moves: Vec<Move>,
}

/// A worker as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerInfo {
    /// Name.
    pub name: String,
    /// `in-process`, or the remote address.
    pub address: String,
    /// `ready`, `draining`, `drained` or `lost`.
    pub state: WorkerState,
    /// Actors placed on it.
    pub actors: usize,
    /// Live linear memory of its actors, bytes.
    pub memory_bytes: u64,
}

/// What `stasis gc` reclaimed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GcReport {
    /// Files deleted.
    pub removed_files: u64,
    /// Bytes freed.
    pub reclaimed_bytes: u64,
    /// Bytes left in the snapshot folder.
    pub snapshot_bytes: u64,
}

/// Lifecycle of a worker as the control plane sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerState {
    /// Takes new actors.
    Ready,
    /// Its actors are being moved off.
    Draining,
    /// Holds no actors and takes none.
    Drained,
    /// Missed heartbeats for twice the timeout; its actors were re-placed.
    Lost,
}

impl WorkerState {
    /// The lower-case name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Ready => "ready",
            WorkerState::Draining => "draining",
            WorkerState::Drained => "drained",
            WorkerState::Lost => "lost",
        }
    }
}
