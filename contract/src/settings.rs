//! The settings every worker of a deployment shares: mailbox and hold
//! limits, snapshot retention and checkpoints, live-instance slots, and the
//! hosts the actors' `fetch` may reach. The control plane hands them to
//! in-process workers and tells them to joining remote workers
//! ([`crate::proto::JoinAnswer`]).
//!
//! The allow-list is data here ([`crate::outbound`], [`AllowList`]
//! re-exported); its grammar and the address rule are the worker's.

use std::time::Duration;

pub use crate::outbound::AllowList;

/// Settings of a worker.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// Requests held per actor (its mailbox size) before 503 (`--max-held`).
    pub max_held: usize,
    /// Longest a request waits in a mailbox before 503 (`--hold-timeout`).
    pub hold_timeout: Duration,
    /// Snapshot retention and checkpoints.
    pub actor: ActorSettings,
    /// Live instances per worker (`--max-live`): when an actor is about to
    /// get one and the cap is reached, the least recently used running
    /// actor is paused and the new one waits (up to `hold_timeout`) for its
    /// slot, so the cap is never exceeded (see `stasis-worker`'s `live`).
    pub max_live: Option<usize>,
    /// Hosts the actors' `fetch` may reach (`--allow-outbound`).
    pub allow_outbound: AllowList,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            max_held: 1024,
            hold_timeout: Duration::from_secs(30),
            actor: ActorSettings {
                keep_snapshots: 2,
                checkpoint_every: 0,
                durability: Durability::Request,
            },
            max_live: None,
            allow_outbound: AllowList::default(),
        }
    }
}

/// Settings every actor of a worker shares.
#[derive(Debug, Clone)]
pub struct ActorSettings {
    /// Snapshots kept per actor (at least 1).
    pub keep_snapshots: usize,
    /// Checkpoint after this many requests (0 = never).
    pub checkpoint_every: u64,
    /// When a request's effect becomes durable (`--durability`).
    pub durability: Durability,
}

/// When the effect of a request becomes durable (`--durability`, and a
/// template's override at push; docs/api.md, "Durability").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// The answer leaves Stasis only once the state the request produced
    /// is in the worker journal on disk (a cluster worker's journal is in
    /// the snapshot store, as at [`Durability::Store`]): a trap, a
    /// `kill -9` or a restart loses no answered request.
    #[default]
    Request,
    /// The answer leaves Stasis only once the state the request produced
    /// is in the snapshot store: on a cluster worker, in a journal segment
    /// group-committed into the object store, so losing the worker and its
    /// disk loses no answered request. On one machine the store is the
    /// data dir: the same as `request`.
    Store,
    /// Durable at each `--checkpoint-interval` checkpoint and at pause.
    Interval,
    /// Durable at pause and at checkpoints only; a trap or a crash rolls
    /// the actor back to its newest snapshot.
    Pause,
}

impl Durability {
    /// Every level, as named in flags and JSON.
    pub const NAMES: [&'static str; 4] = ["request", "store", "interval", "pause"];

    /// The level's name in flags and JSON.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::Store => "store",
            Self::Interval => "interval",
            Self::Pause => "pause",
        }
    }

    /// The level named `name`.
    ///
    /// # Errors
    /// A message naming the levels when `name` is none of them.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "request" => Ok(Self::Request),
            "store" => Ok(Self::Store),
            "interval" => Ok(Self::Interval),
            "pause" => Ok(Self::Pause),
            _ => Err(format!(
                "unknown durability {name:?}: use request, store, interval or pause"
            )),
        }
    }
}
