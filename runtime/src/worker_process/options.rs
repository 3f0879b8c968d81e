//! The flags of `stasis worker run` as the CLI hands them over: where the
//! worker listens, its name and data dir, its credentials, and how it
//! finds its cluster ([`Membership`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use stasis_cluster::etcd::EtcdOptions;
use stasis_core::snapshot_objects::StoreUrl;
use stasis_http::mtls::InternalTls;

/// Flags of `stasis worker run`.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// How the worker finds its cluster: the control plane's admin URL
    /// (`--join`, embedded mode) or etcd (`--directory etcd://...`).
    pub membership: Membership,
    /// Where the internal worker API listens (`--listen`).
    pub listen: SocketAddr,
    /// The worker's name (`--name`, an RFC 1123 label).
    pub name: String,
    /// Its data dir (`--data-dir`).
    pub data_dir: PathBuf,
    /// Bearer token for the control plane and for this worker's API.
    pub token: Option<String>,
    /// Hosts its actors' `fetch` may reach (`--allow-outbound`).
    pub allow_outbound: stasis_contract::settings::AllowList,
    /// Mutual TLS (`--internal-ca`, `--internal-tls-cert`,
    /// `--internal-tls-key`): the API serves TLS only, to clients with a
    /// certificate from the internal CA; an `https://` control plane is
    /// reached with this worker's certificate. `None`: plain HTTP.
    pub internal_tls: Option<Arc<InternalTls>>,
}

/// How a worker joins its cluster.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant, reason = "one value per process")]
pub enum Membership {
    /// Embedded mode: join the control plane at this admin URL, heartbeat
    /// to it, stream snapshots to its store.
    Join(String),
    /// Cluster mode: register in etcd under a lease and write snapshots to
    /// the shared store.
    Registered(Box<RegisteredOptions>),
}

/// Cluster-mode settings of a worker.
#[derive(Debug, Clone)]
pub struct RegisteredOptions {
    /// The etcd cluster (`--directory etcd://...`, `--etcd-*`).
    pub etcd: EtcdOptions,
    /// The shared snapshot store (`--snapshot-store file://... | s3://...`).
    pub store: StoreUrl,
    /// TTL of the worker's lease (`--lease-ttl`).
    pub lease_ttl: Duration,
    /// Address others reach this worker's API at (`--advertise`).
    pub advertise: Option<String>,
}
