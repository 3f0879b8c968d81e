//! The durable directory's contract: which templates and actors exist,
//! where each actor lives (worker and placement epoch) and each actor's one
//! alarm. [`Directory`] is the seam both backends plug into (the embedded
//! `SqliteDirectory` of `stasis-control`, the etcd directory of
//! `stasis-cluster`). Snapshots are files (see
//! [`stasis_core::snapshot_files`]).

use serde::{Deserialize, Serialize};

use crate::error::ApiError;
pub use crate::namespace_settings::{NamespaceSettings, Settings};
pub use crate::rollout::Rollouts;
use crate::settings::Durability;
pub use crate::tokens::Tokens;

/// A registered template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateRow {
    /// Name (an RFC 1123 label).
    pub name: String,
    /// SHA-256 hex of the module bytes (`templates/<digest>.wasm`).
    pub digest: String,
    /// Size of the module in bytes.
    pub bytes: u64,
    /// WASI environment, in push order.
    pub env: Vec<(String, String)>,
    /// The durability level its actors run at, when the push set one
    /// (`template push --durability`); else the server's `--durability`.
    pub durability: Option<Durability>,
}

/// The directory row of version `version` of template `name`. A
/// template's versions are rows of their own: version 1 under the
/// template's name, version N ≥ 2 under `NAME@N` (`@` is in no name a
/// user gives, so the two never meet). An actor's row names the row of
/// the version it runs.
#[must_use]
pub fn version_row(name: &str, version: u64) -> String {
    if version <= 1 {
        name.to_owned()
    } else {
        format!("{name}@{version}")
    }
}

/// The template name and version a row stands for (the inverse of
/// [`version_row`]).
#[must_use]
pub fn row_version(row: &str) -> (&str, u64) {
    match row.rsplit_once('@') {
        Some((name, version)) => match version.parse() {
            Ok(version) if version >= 2 => (name, version),
            _ => (row, 1),
        },
        None => (row, 1),
    }
}

/// A registered actor and its placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActorRow {
    /// Name (an RFC 1123 label).
    pub name: String,
    /// Template name.
    pub template: String,
    /// Worker that owns it.
    pub worker: String,
    /// Placement epoch: 1 at creation, +1 per move.
    pub epoch: u64,
    /// When it was created (ms since the Unix epoch); `None` for an actor
    /// recorded before the directory kept it.
    pub created_at_unix_ms: Option<u64>,
    /// Its labels (see [`crate::labels`]).
    pub labels: crate::labels::Labels,
}

/// The durable record of templates, actors and placements, of rollouts
/// ([`Rollouts`]), of scoped admin tokens ([`Tokens`]) and of the
/// namespaces' settings, quotas and policies ([`NamespaceSettings`]). Every write is durable on return; errors are
/// 500s naming the directory.
pub trait Directory: Rollouts + Tokens + NamespaceSettings + Send + Sync {
    /// Whether its writer may still act on what it decided: false once a
    /// leader's lease is past its deadline by this process's clock (its
    /// writes are refused by then too). A deposed leader delivers nothing
    /// more, such as a due alarm, once this turns false. Always true for a
    /// directory of one process.
    fn may_act(&self) -> bool {
        true
    }

    /// Whether the directory is shared by a cluster's replicas (etcd):
    /// membership comes from it and snapshots are in a shared store. False
    /// for the embedded one.
    fn is_shared(&self) -> bool {
        false
    }

    /// Inserts a template.
    ///
    /// # Errors
    /// 500 on a storage failure (or a name already taken).
    fn insert_template(&self, row: &TemplateRow) -> Result<(), ApiError>;

    /// The template `name`, if registered.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn template(&self, name: &str) -> Result<Option<TemplateRow>, ApiError>;

    /// All templates, by name.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn templates(&self) -> Result<Vec<TemplateRow>, ApiError>;

    /// Deletes template `name`; false if it did not exist.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn delete_template(&self, name: &str) -> Result<bool, ApiError>;

    /// Inserts an actor with its first placement.
    ///
    /// # Errors
    /// 500 on a storage failure (or a name already taken).
    fn insert_actor(&self, row: &ActorRow) -> Result<(), ApiError>;

    /// Moves an actor to `worker` with `epoch` (the durable placement
    /// switch), as a compare-and-set: only if its recorded epoch is below
    /// `epoch`, so two decisions can never both take the same epoch.
    ///
    /// # Errors
    /// 409 if the actor is gone or was placed at `epoch` or later
    /// meanwhile (nothing changed); 500 on a storage failure.
    fn place_actor(&self, name: &str, worker: &str, epoch: u64) -> Result<(), ApiError>;

    /// [`Directory::place_actor`] that also sets the template version the
    /// actor runs (`template`: that version's row, see [`version_row`]):
    /// the durable switch of an upgrade, the same compare-and-set on the
    /// epoch.
    ///
    /// # Errors
    /// As [`Directory::place_actor`].
    fn place_actor_as(
        &self,
        name: &str,
        worker: &str,
        epoch: u64,
        template: &str,
    ) -> Result<(), ApiError>;

    /// Changes actor `name`'s labels by `patch`, applied to what the
    /// directory holds (two changes at once both apply); the labels it
    /// holds then.
    ///
    /// # Errors
    /// 404 if the actor is gone; 400 past [`crate::labels::MAX_LABELS`]
    /// (nothing changed); 500 on a storage failure.
    fn patch_labels(
        &self,
        name: &str,
        patch: &crate::labels::LabelPatch,
    ) -> Result<crate::labels::Labels, ApiError>;

    /// All actors, by name.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn actors(&self) -> Result<Vec<ActorRow>, ApiError>;

    /// Actor `name`'s record as one read finds it, current at least at
    /// etcd revision `at_least` (what a follower's placement cache reads
    /// on a miss, `at_least` being what its watch applied: in cluster mode
    /// a serializable read of the one key, again linearizable if the
    /// member that answered lags behind it). Revisions mean nothing to the
    /// embedded directory.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn actor(&self, name: &str, at_least: i64) -> Result<ActorRead, ApiError>;

    /// Deletes actor `name`, and its alarm.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn delete_actor(&self, name: &str) -> Result<(), ApiError>;

    /// Sets actor `name`'s one alarm to `at_unix_ms` (Unix ms), replacing
    /// any.
    ///
    /// # Errors
    /// 500 on a storage failure; 503 from a leader that no longer leads.
    fn set_alarm(&self, name: &str, at_unix_ms: u64) -> Result<(), ApiError>;

    /// Removes actor `name`'s alarm; with `only_at`, only if it is still
    /// set at that time (a fired alarm is cleared unless its handler set a
    /// new one). True if an alarm was removed.
    ///
    /// # Errors
    /// 500 on a storage failure; 503 from a leader that no longer leads.
    fn clear_alarm(&self, name: &str, only_at: Option<u64>) -> Result<bool, ApiError>;

    /// Actor `name`'s alarm (Unix ms), if one is set.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn alarm(&self, name: &str) -> Result<Option<u64>, ApiError>;

    /// Every pending alarm: (actor, Unix ms), by actor.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn alarms(&self) -> Result<Vec<(String, u64)>, ApiError>;

    /// The etcd revision of the newest actor record this directory wrote
    /// (an insert, a placement or a delete), for read-your-writes in
    /// cluster mode: a follower that forwarded a write answers once its
    /// watch of the actors has applied this revision. `None` for a
    /// directory without revisions (the embedded one).
    fn actors_revision(&self) -> Option<i64> {
        None
    }
}

/// One actor's record as [`Directory::actor`] read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActorRead {
    /// The record, if the actor exists.
    pub row: Option<ActorRow>,
    /// Its generation (see [`ActorPut::generation`]); 0 without revisions
    /// (the embedded directory) or when it does not exist.
    pub generation: i64,
    /// The etcd revision the read saw (0 without revisions): a change at a
    /// later revision is newer than what was read.
    pub revision: i64,
}

/// A change to the directory's actors as a watch of etcd saw it (cluster
/// mode: what a follower routes by), in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActorsChange {
    /// A watch of changes only (no listing) starts, or starts again after
    /// its revision was compacted: changes up to `revision` were not seen,
    /// so whatever a cache learnt before may be stale.
    Watching {
        /// The revision the watch is current at (it sends what follows).
        revision: i64,
    },
    /// The records one watch event put and deleted, bringing the actors to
    /// etcd `revision`.
    Changed {
        /// Records created or changed.
        put: Vec<ActorPut>,
        /// Names deleted, each with the revision of its delete.
        deleted: Vec<(String, i64)>,
        /// The revision of the newest change applied.
        revision: i64,
    },
}

/// A record a watch event created or changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActorPut {
    /// The record.
    pub row: ActorRow,
    /// Its generation: the etcd revision its record was created at. A
    /// name deleted and created again has a new one, so a follower tells
    /// the new actor (epoch 1 again) from a stale placement of the old
    /// one.
    pub generation: i64,
    /// The revision of this change.
    pub revision: i64,
}

/// A remote worker's registration (cluster mode: `<prefix>/workers/<name>`'s
/// value in etcd).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRecord {
    /// Where the worker's API listens (`host:port`).
    pub address: String,
    /// The etcd lease the record is attached to.
    pub lease: i64,
}

impl WorkerRecord {
    /// The worker's incarnation as members count it: its lease id (`None`
    /// for a negative id, which etcd never grants).
    #[must_use]
    pub fn incarnation(&self) -> Option<u64> {
        u64::try_from(self.lease).ok()
    }
}
