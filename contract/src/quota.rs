//! Quotas per namespace: what a namespace may hold and use ([`Quota`]),
//! what the admin API shows of a namespace ([`NamespaceInfo`]), and
//! [`Quotas`], the part of the directory that keeps them.

use serde::{Deserialize, Serialize};

use crate::namespace_settings::{NamespaceSetting, SettingTable};

/// A namespace's limits; a limit left out is no limit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    /// Most actors it may hold (creates and forks past it are refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_actors: Option<u64>,
    /// Most requests per second its actors are sent through the ingress,
    /// per replica (a burst of one second's worth); past it a request is
    /// answered 429 with `Retry-After` and never delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests_per_second: Option<u32>,
}

/// A namespace as `GET /v1/namespaces/{ns}` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceInfo {
    /// Its name.
    pub name: String,
    /// How many actors it holds.
    pub actors: u64,
    /// Its limits.
    pub quota: Quota,
    /// Whether its actors need a token at the ingress
    /// ([`crate::policy`]).
    #[serde(default)]
    pub ingress_auth: crate::policy::IngressAuth,
    /// The other namespaces whose actors may call its actors.
    #[serde(default)]
    pub calls_from: Vec<String>,
    /// The template its unknown actors are created from on first use
    /// (`stasis namespace on-demand`), if any.
    #[serde(default)]
    pub on_demand: Option<String>,
    /// What its actors use now, as their workers report it.
    #[serde(default)]
    pub usage: NamespaceUsage,
}

/// What a namespace's actors use, summed over the actors as their
/// workers report them when asked (an actor whose worker does not answer
/// counts as paused with no snapshot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceUsage {
    /// Actors with a live instance.
    pub live_actors: u64,
    /// Their live linear memory, bytes.
    pub memory_bytes: u64,
    /// The snapshots stored of its actors, bytes.
    pub snapshot_bytes: u64,
}

/// A namespace in use, as `GET /v1/namespaces` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceSummary {
    /// Its name.
    pub name: String,
    /// How many actors it holds.
    pub actors: u64,
    /// How many templates it holds.
    pub templates: u64,
}

impl NamespaceSetting for Quota {
    const TABLE: SettingTable = SettingTable {
        name: "quotas",
        read: "a quota read",
        write: "a quota write",
    };
}
