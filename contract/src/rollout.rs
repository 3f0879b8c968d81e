//! Rollouts of a template version to every actor of the template, and
//! their rollback (issue 31, item 3): what the admin API takes and shows
//! (`POST`/`GET /v1/templates/{name}/rollout`,
//! `POST /v1/templates/{name}/rollback`), and what the directory keeps of
//! a rollout ([`RolloutRecord`], one per template, and one
//! [`ActorOutcome`] per actor it changed or failed to change, see
//! [`Rollouts`]) so that the rollout carries on after a restart of the
//! control plane or a change of leader.

use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// The body of `POST /v1/templates/{name}/rollout`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutRequest {
    /// The version every actor of the template moves to.
    pub to_version: u64,
    /// How many actors go first, one at a time (the canaries): the
    /// others start only once every canary is upgraded, and a failed
    /// canary stops the rollout.
    #[serde(default)]
    pub canary: usize,
    /// The rollout stops once this many actors failed (default 1).
    #[serde(default)]
    pub max_failures: Option<usize>,
    /// Paused actors are upgraded now, instead of when they are next
    /// resumed.
    #[serde(default)]
    pub eager: bool,
}

/// Where a rollout (or rollback) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RolloutState {
    /// Actors are still being upgraded (or wait, paused, to be upgraded
    /// when next resumed: `deferred`).
    Running,
    /// Every actor of the template runs the target version (or, for a
    /// rollback, every upgraded actor is back on its previous one), except
    /// those that failed.
    Finished,
    /// Stopped after `max_failures` failures, or by a failed canary;
    /// `stop_reason` says which.
    Stopped,
}

/// What the directory keeps of a template's last rollout (or of its
/// rollback): the request, the canaries chosen at the start, and where it
/// is. Actors' outcomes are [`ActorOutcome`]s beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutRecord {
    /// The template.
    pub template: String,
    /// The version actors move to.
    pub to_version: u64,
    /// The canaries, chosen when the rollout started.
    pub canaries: Vec<String>,
    /// Failures after which the rollout stops.
    pub max_failures: usize,
    /// Paused actors are upgraded at once.
    pub eager: bool,
    /// Where it is.
    pub state: RolloutState,
    /// Set once `stasis template rollback` began: actors upgraded by the
    /// rollout move back to the version each ran before it.
    pub rollback: bool,
    /// When it started (Unix ms).
    pub started_unix_ms: u64,
    /// Why it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
}

/// One actor's outcome in a template's last rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActorOutcome {
    /// The actor.
    pub actor: String,
    /// The version it ran before the rollout.
    pub from_version: u64,
    /// Why its upgrade failed (it stays on `from_version`); `None` once
    /// upgraded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The rollback moved it back to `from_version`.
    #[serde(default)]
    pub rolled_back: bool,
    /// Why the rollback could not move it back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_error: Option<String>,
    /// The actor was deleted while the rollout ran, before it was moved:
    /// the rollout skipped it (`gone`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gone: bool,
}

/// One actor that failed in a rollout (or that it skipped), as the
/// status shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutFailure {
    /// The actor.
    pub actor: String,
    /// Why (the upgrade's refusal; `gone` for a skipped actor).
    pub reason: String,
}

/// `GET /v1/templates/{name}/rollout`: a rollout's progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutStatus {
    /// The template.
    pub template: String,
    /// `rollout`, or `rollback` once a rollback began.
    pub kind: String,
    /// The version actors move to (for a rollback, the version they leave).
    pub to_version: u64,
    /// Where it is.
    pub state: RolloutState,
    /// Actors it covers: `upgraded + failed + pending + skipped`.
    pub total: usize,
    /// Actors moved (to `to_version`; by a rollback, back to their
    /// previous version).
    pub upgraded: usize,
    /// Actors whose move failed; each is in `failures` with its reason.
    pub failed: usize,
    /// Actors still to move.
    pub pending: usize,
    /// Of `pending`, the paused actors upgraded when next resumed.
    pub deferred: usize,
    /// How many canaries went first.
    pub canary: usize,
    /// Failures after which it stops.
    pub max_failures: usize,
    /// Paused actors are upgraded at once.
    pub eager: bool,
    /// Every failed actor with its reason, by name.
    pub failures: Vec<RolloutFailure>,
    /// Actors it covered that were deleted before it moved them (each is
    /// in `skips`, reason `gone`).
    #[serde(default)]
    pub skipped: usize,
    /// Every skipped actor with why, by name.
    #[serde(default)]
    pub skips: Vec<RolloutFailure>,
    /// Why it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
}

impl RolloutStatus {
    /// Whether a client waiting for the rollout may stop waiting: it is no
    /// longer running, or only paused actors waiting for their next resume
    /// are left (with nothing left at all, it is about to be `finished`).
    #[must_use]
    pub fn settled(&self) -> bool {
        self.state != RolloutState::Running || (self.deferred > 0 && self.pending == self.deferred)
    }
}

/// The directory's record of rollouts: a part of every
/// [`crate::directory::Directory`]. Every write is durable on return.
pub trait Rollouts: Send + Sync {
    /// Writes template `record.template`'s rollout record, replacing any.
    ///
    /// # Errors
    /// 500 on a storage failure; 503 from a leader that no longer leads.
    fn put_rollout(&self, record: &RolloutRecord) -> Result<(), ApiError>;

    /// Template `template`'s rollout record, if it has one.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn rollout(&self, template: &str) -> Result<Option<RolloutRecord>, ApiError>;

    /// Every template's rollout record, by template.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn rollouts(&self) -> Result<Vec<RolloutRecord>, ApiError>;

    /// Writes `outcome` for template `template`'s rollout, replacing that
    /// actor's.
    ///
    /// # Errors
    /// 500 on a storage failure; 503 from a leader that no longer leads.
    fn put_rollout_outcome(&self, template: &str, outcome: &ActorOutcome) -> Result<(), ApiError>;

    /// Every actor's outcome in template `template`'s rollout, by actor.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn rollout_outcomes(&self, template: &str) -> Result<Vec<ActorOutcome>, ApiError>;

    /// Removes every actor's outcome of template `template`'s rollout (a
    /// new rollout begins).
    ///
    /// # Errors
    /// 500 on a storage failure; 503 from a leader that no longer leads.
    fn clear_rollout_outcomes(&self, template: &str) -> Result<(), ApiError>;
}

/// A JSON value of a rollout's record or outcome, for the directories that
/// keep them as text.
///
/// # Errors
/// 500 if it cannot be encoded.
pub fn encode<T: Serialize>(value: &T) -> Result<String, ApiError> {
    serde_json::to_string(value).map_err(|e| ApiError::internal(format!("rollout record: {e}")))
}

/// The record or outcome [`encode`] wrote.
///
/// # Errors
/// 500 naming the directory's record if it holds no valid one.
pub fn decode<T: for<'de> Deserialize<'de>>(text: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(text)
        .map_err(|e| ApiError::internal(format!("directory: invalid rollout record: {e}")))
}
