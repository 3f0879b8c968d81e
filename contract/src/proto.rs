//! The worker wire protocol, written once for both ends: the internal
//! paths (built and parsed here only), the headers, and the request and
//! answer types that travel between the control plane and a remote worker.
//!
//! Worker API (served by `stasis worker run`, see [`super::server`]):
//! `GET /internal/v1/actors`, `GET|DELETE /internal/v1/actors/<actor>`,
//! `POST /internal/v1/actors/<actor>/<op>` for every [`Op`].
//! Control-plane side (served by the admin listener, see `crate::api`):
//! every [`ControlPath`].

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::settings::Durability;
use crate::status::ResumeFrom;
use crate::worker_api::HostSpec;

/// Header carrying the placement epoch of a call.
pub const EPOCH_HEADER: &str = "stasis-epoch";

/// Header naming one call (unique among the calls a worker receives), so
/// that [`Op::Abandon`] can name it.
pub const CALL_HEADER: &str = "stasis-call";

/// Header carrying an [`InstallSpec`] (JSON) on `install`.
pub const SPEC_HEADER: &str = "stasis-spec";
/// Header carrying a snapshot's sequence number.
pub const SEQ_HEADER: &str = "stasis-seq";
/// Header saying whether a captured actor was live (`true`/`false`).
pub const LIVE_HEADER: &str = "stasis-live";

/// Longest wait for a peer's answer. Every worker operation is bounded
/// well below it (hold timeout + request timeout); a peer that says nothing
/// for this long is treated as unreachable.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(120);

/// Bound on status queries, which answer from memory: a worker that cannot
/// say how its actors are within this is treated as unreachable, so listings
/// and metrics never hang on a sick worker.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(3);

/// Bound on connecting to a peer.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

const PREFIX: &str = "/internal/v1";

mod paths;

pub use paths::{ControlPath, WorkerPath};

/// An operation on one actor of a remote worker (`POST .../<actor>/<op>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Body: [`HostSpec`] (JSON). Answer: `SnapshotReport` (JSON).
    Create,
    /// Header [`SPEC_HEADER`]: [`InstallSpec`]; body: the snapshot bytes,
    /// or empty when the worker holds them. Answer: `ActorStatus`.
    Install,
    /// Header [`EPOCH_HEADER`]; body and answer: the host-API encoding of
    /// the request and the response.
    Call,
    /// Header [`EPOCH_HEADER`]: deliver a due alarm. Answer:
    /// `AlarmOutcome` (JSON).
    Alarm,
    /// Header [`EPOCH_HEADER`]; body: the host-API encoding of a
    /// `SocketEvent` (`stasis_host_api::sockets`). Answer: empty JSON object.
    SocketEvent,
    /// Answer: `SnapshotReport` (JSON).
    Pause,
    /// Answer: `SnapshotReport` (JSON).
    Checkpoint,
    /// Body: [`ResumeRequest`] (JSON, may be empty).
    Resume,
    /// Answer: headers [`SEQ_HEADER`] and [`LIVE_HEADER`], empty body.
    Capture,
    /// Ends a rolled-back move.
    CancelMove,
    /// Body: [`InstallSpec`] (JSON; `resume` unused): hand the captured
    /// actor over to that module as snapshot `seq`. Answer:
    /// `SnapshotReport` (JSON).
    HandOver,
    /// Header [`CALL_HEADER`]: the client of that call left. The worker
    /// drops the call unless the guest already runs it; the call's own
    /// answer then says which ([`crate::error::ErrorKind::Abandoned`], or the
    /// guest's response). Answer: empty JSON object.
    Abandon,
    /// Body: [`crate::logs::LogQuery`] (JSON). Answer: the lines it
    /// selects, `[LogLine]` (JSON), after its wait if it has one.
    Logs,
    /// Body: [`EventNote`] (JSON): a lifecycle event the control plane
    /// records in the actor's log (an upgrade that failed). Answer: empty
    /// JSON object.
    Event,
}

/// The body of [`Op::Event`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventNote {
    /// The event's text: its kind, a colon, what happened.
    pub text: String,
}

impl Op {
    /// Every operation.
    pub const ALL: [Op; 14] = [
        Op::Create,
        Op::Install,
        Op::Call,
        Op::Alarm,
        Op::SocketEvent,
        Op::Pause,
        Op::Checkpoint,
        Op::Resume,
        Op::Capture,
        Op::CancelMove,
        Op::HandOver,
        Op::Abandon,
        Op::Logs,
        Op::Event,
    ];

    /// Its path segment.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Install => "install",
            Op::Call => "call",
            Op::Alarm => "alarm",
            Op::SocketEvent => "socket-event",
            Op::Pause => "pause",
            Op::Checkpoint => "checkpoint",
            Op::Resume => "resume",
            Op::Capture => "capture",
            Op::CancelMove => "cancel-move",
            Op::HandOver => "hand-over",
            Op::Abandon => "abandon",
            Op::Logs => "logs",
            Op::Event => "event",
        }
    }

    fn parse(segment: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.as_str() == segment)
    }
}

/// The spec of an `install` ([`SPEC_HEADER`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstallSpec {
    /// Template, environment, epoch.
    #[serde(flatten)]
    pub host: HostSpec,
    /// The snapshot's sequence number.
    #[serde(default)]
    pub seq: u64,
    /// Restore at once (true) or stay paused.
    #[serde(default)]
    pub resume: bool,
}

/// Body of a resume request (docs/api.md), on the admin API and the
/// worker API alike.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResumeRequest {
    /// Restore this snapshot.
    #[serde(default)]
    pub from_snapshot: Option<u64>,
    /// Start fresh from the template.
    #[serde(default)]
    pub from_template: bool,
}

impl ResumeRequest {
    /// The request for `from`.
    #[must_use]
    pub fn from(from: ResumeFrom) -> Self {
        match from {
            ResumeFrom::Newest => Self::default(),
            ResumeFrom::Snapshot(seq) => Self {
                from_snapshot: Some(seq),
                from_template: false,
            },
            ResumeFrom::Template => Self {
                from_snapshot: None,
                from_template: true,
            },
        }
    }

    /// Which source it names.
    ///
    /// # Errors
    /// 400 if both are given.
    pub fn source(&self) -> Result<ResumeFrom, ApiError> {
        match (self.from_snapshot, self.from_template) {
            (Some(_), true) => Err(ApiError::bad_request(
                "give from_snapshot or from_template, not both",
            )),
            (Some(seq), false) => Ok(ResumeFrom::Snapshot(seq)),
            (None, true) => Ok(ResumeFrom::Template),
            (None, false) => Ok(ResumeFrom::Newest),
        }
    }
}

/// What the control plane tells a joining worker: the settings every worker
/// of the cluster must share (the engine's limits in particular: a snapshot
/// must restore on any worker). In cluster mode the same record is the
/// cluster-wide settings kept in the directory (`<prefix>/settings`),
/// written by the first replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinAnswer {
    /// Heartbeat timeout T, ms: heartbeat every T/4; stop serving after T
    /// without an answer.
    pub heartbeat_timeout_ms: u64,
    /// Per-actor linear memory limit, bytes.
    pub max_memory: u64,
    /// CPU limit per request, ms.
    pub cpu_limit_ms: u64,
    /// Wall-clock limit per request, ms.
    pub request_timeout_ms: u64,
    /// Body limit, bytes.
    pub max_body: u64,
    /// Mailbox size per actor.
    pub max_held: usize,
    /// Hold timeout, ms.
    pub hold_timeout_ms: u64,
    /// Snapshots kept per actor.
    pub keep_snapshots: usize,
    /// Checkpoint after this many requests (0 = never).
    pub checkpoint_every: u64,
    /// When a request's effect is durable (`--durability`).
    #[serde(default)]
    pub durability: Durability,
    /// Live instances per worker (`--max-live`).
    #[serde(default)]
    pub max_live: Option<usize>,
    /// Checkpoint running actors this often, ms (`--checkpoint-interval`;
    /// run by the control plane, or a cluster's leader).
    #[serde(default)]
    pub checkpoint_interval_ms: Option<u64>,
    /// Pause actors idle this long, ms (`--idle-timeout`; run by the
    /// control plane, or a cluster's leader).
    #[serde(default)]
    pub idle_timeout_ms: Option<u64>,
    /// Cap on the snapshot store, bytes (`--snapshot-quota`).
    #[serde(default)]
    pub snapshot_quota: Option<u64>,
    /// The shared snapshot store every process of a cluster uses
    /// (`--snapshot-store`; cluster mode only).
    #[serde(default)]
    pub snapshot_store: Option<String>,
}

impl JoinAnswer {
    /// The first setting in which `self` (this process's flags) differs
    /// from `stored` (the cluster's), as the flag that sets it, with both
    /// values; `None` if they agree. A replica started with a conflicting
    /// flag refuses to start and names it.
    #[must_use]
    pub fn conflict(&self, stored: &JoinAnswer) -> Option<String> {
        let fields: [(&str, String, String); 15] = [
            (
                "--heartbeat-timeout (ms)",
                self.heartbeat_timeout_ms.to_string(),
                stored.heartbeat_timeout_ms.to_string(),
            ),
            (
                "--max-memory (bytes)",
                self.max_memory.to_string(),
                stored.max_memory.to_string(),
            ),
            (
                "--cpu-limit (ms)",
                self.cpu_limit_ms.to_string(),
                stored.cpu_limit_ms.to_string(),
            ),
            (
                "--request-timeout (ms)",
                self.request_timeout_ms.to_string(),
                stored.request_timeout_ms.to_string(),
            ),
            (
                "--max-body (bytes)",
                self.max_body.to_string(),
                stored.max_body.to_string(),
            ),
            (
                "--max-held",
                self.max_held.to_string(),
                stored.max_held.to_string(),
            ),
            (
                "--hold-timeout (ms)",
                self.hold_timeout_ms.to_string(),
                stored.hold_timeout_ms.to_string(),
            ),
            (
                "--keep-snapshots",
                self.keep_snapshots.to_string(),
                stored.keep_snapshots.to_string(),
            ),
            (
                "--checkpoint-every",
                self.checkpoint_every.to_string(),
                stored.checkpoint_every.to_string(),
            ),
            (
                "--durability",
                self.durability.name().to_owned(),
                stored.durability.name().to_owned(),
            ),
            (
                "--max-live",
                unset_or(self.max_live),
                unset_or(stored.max_live),
            ),
            (
                "--checkpoint-interval (ms)",
                unset_or(self.checkpoint_interval_ms),
                unset_or(stored.checkpoint_interval_ms),
            ),
            (
                "--idle-timeout (ms)",
                unset_or(self.idle_timeout_ms),
                unset_or(stored.idle_timeout_ms),
            ),
            (
                "--snapshot-quota (bytes)",
                unset_or(self.snapshot_quota),
                unset_or(stored.snapshot_quota),
            ),
            (
                "--snapshot-store",
                unset_or(self.snapshot_store.as_deref()),
                unset_or(stored.snapshot_store.as_deref()),
            ),
        ];
        fields
            .into_iter()
            .find(|(_, mine, theirs)| mine != theirs)
            .map(|(flag, mine, theirs)| {
                format!("{flag} is {mine} here but {theirs} in the cluster's settings")
            })
    }
}

/// An optional setting as a flag value: the number, or `unset`.
fn unset_or<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "unset".to_owned(), |v| v.to_string())
}

/// What a worker sends to join.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinRequest {
    /// Worker name (an RFC 1123 label).
    pub name: String,
    /// Where its internal API listens (`host:port`).
    pub address: String,
}

/// An alarm time in the internal API: Unix ms as decimal text.
///
/// # Errors
/// 400 if `body` is not a decimal `u64`.
pub fn parse_ms(body: &[u8]) -> Result<u64, ApiError> {
    std::str::from_utf8(body)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .ok_or_else(|| ApiError::bad_request("an alarm time is Unix ms in decimal"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> JoinAnswer {
        JoinAnswer {
            heartbeat_timeout_ms: 2000,
            max_memory: 1 << 28,
            cpu_limit_ms: 1000,
            request_timeout_ms: 30_000,
            max_body: 8 << 20,
            max_held: 1024,
            hold_timeout_ms: 30_000,
            keep_snapshots: 2,
            checkpoint_every: 0,
            durability: Durability::Request,
            max_live: None,
            checkpoint_interval_ms: None,
            idle_timeout_ms: None,
            snapshot_quota: None,
            snapshot_store: None,
        }
    }

    #[test]
    fn a_conflicting_setting_is_named_by_its_flag() {
        let stored = settings();
        assert_eq!(settings().conflict(&stored), None);
        let mut mine = settings();
        mine.checkpoint_every = 1;
        let conflict = mine.conflict(&stored).expect("a conflict");
        assert!(
            conflict.starts_with("--checkpoint-every is 1 here but 0"),
            "{conflict}"
        );
        let mut mine = settings();
        mine.idle_timeout_ms = Some(5000);
        let conflict = mine.conflict(&stored).expect("a conflict");
        assert_eq!(
            conflict,
            "--idle-timeout (ms) is 5000 here but unset in the cluster's settings"
        );
    }

    #[test]
    fn settings_written_before_the_newer_fields_still_read() {
        let old = r#"{"heartbeat_timeout_ms":2000,"max_memory":268435456,"cpu_limit_ms":1000,
            "request_timeout_ms":30000,"max_body":8388608,"max_held":1024,"hold_timeout_ms":30000,
            "keep_snapshots":2,"checkpoint_every":0}"#;
        let read: JoinAnswer = serde_json::from_str(old).expect("old settings");
        assert_eq!(read, settings());
    }

    #[test]
    fn worker_paths_round_trip() {
        let paths = [
            WorkerPath::Actors,
            WorkerPath::Actor("c1"),
            WorkerPath::Op("c1", Ok(Op::CancelMove)),
            WorkerPath::Op("c1", Err("nope")),
        ];
        for path in paths {
            assert_eq!(WorkerPath::parse(&path.to_path()), Some(path));
        }
        for op in Op::ALL {
            let text = WorkerPath::Op("a", Ok(op)).to_path();
            assert_eq!(WorkerPath::parse(&text), Some(WorkerPath::Op("a", Ok(op))));
        }
        assert_eq!(WorkerPath::parse("/internal/v1/actors/a/b/c"), None);
        assert_eq!(WorkerPath::parse("/v1/actors"), None);
        assert_eq!(WorkerPath::parse("/internal/v1/actorsx"), None);
    }

    #[test]
    fn control_paths_round_trip() {
        let paths = [
            ControlPath::Join,
            ControlPath::Heartbeat("w1"),
            ControlPath::Drain("w1"),
            ControlPath::Template("ab"),
            ControlPath::Snapshot("c1", "7"),
        ];
        for path in paths {
            assert_eq!(ControlPath::parse(&path.to_path()), Some(path));
        }
        assert_eq!(ControlPath::parse("/internal/v1/workers"), None);
        assert!(ControlPath::is_internal("/internal/v1/nope"));
        assert!(!ControlPath::is_internal("/v1/actors"));
    }

    #[test]
    fn install_spec_keeps_its_json_shape() {
        let spec = InstallSpec {
            host: HostSpec {
                digest: "d".into(),
                env: vec![("K".into(), "V".into())],
                epoch: 3,
                durability: None,
                recover_journal: true,
                journal_listed_within_ms: None,
            },
            seq: 5,
            resume: true,
        };
        let json = serde_json::to_value(&spec).expect("json");
        assert_eq!(
            json,
            serde_json::json!({"digest": "d", "env": [["K", "V"]], "epoch": 3, "seq": 5, "resume": true,
                "recover_journal": true})
        );
        // A spec from before `recover_journal` recovers, as it did.
        let old: InstallSpec = serde_json::from_value(
            serde_json::json!({"digest": "d", "env": [], "epoch": 3, "seq": 5, "resume": false}),
        )
        .expect("old spec");
        assert!(old.host.recover_journal);
    }
}
