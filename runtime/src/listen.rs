//! What `stasis serve` and a cluster's replica share: their options
//! ([`ServeOptions`], [`ClusterConfig`]), the two listeners ([`bind`],
//! [`Bound`]) and how long open connections get at shutdown ([`DRAIN`]).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use stasis_cluster::etcd::EtcdOptions;
use stasis_control::ServeConfig;
use tokio::net::TcpListener;

/// How long open connections get to finish at shutdown.
pub(crate) const DRAIN: Duration = Duration::from_secs(10);

/// Cluster mode: the directory, membership and leadership in etcd.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The etcd cluster (`--directory etcd://...`, `--etcd-*`).
    pub etcd: EtcdOptions,
    /// TTL of the leases of workers and of the leader (`--lease-ttl`).
    pub lease_ttl: Duration,
    /// Host other replicas reach this one's listeners at (`--advertise`).
    pub advertise: Option<String>,
}

/// Everything `stasis serve` needs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Control plane and worker settings.
    pub config: ServeConfig,
    /// Cluster mode (`--directory etcd://...`); `None` for the embedded
    /// directory (`stasis.db` in the data dir).
    pub cluster: Option<ClusterConfig>,
    /// Ingress address (`--listen`; port 0 picks one).
    pub listen: SocketAddr,
    /// Admin API address (`--admin-listen`).
    pub admin_listen: SocketAddr,
    /// Actors are `<actor>.actors.<domain>` (`--domain`).
    pub domain: String,
    /// Bearer token required by the admin API (`--admin-token`).
    pub admin_token: Option<String>,
    /// Also keep per-actor metric series (`--metrics-per-actor`).
    pub metrics_per_actor: bool,
    /// The ingress's certificates (`--tls-cert`/`--tls-key`); `None`:
    /// plain HTTP/1.1 and h2c.
    pub tls: Option<std::sync::Arc<stasis_http::tls::ServerTls>>,
    /// The admin API's certificates (`--admin-tls-cert`/`--admin-tls-key`;
    /// one machine only); `None`: plain HTTP.
    pub admin_tls: Option<std::sync::Arc<stasis_http::tls::ServerTls>>,
    /// Mutual TLS with remote workers (`--internal-ca`,
    /// `--internal-tls-cert`, `--internal-tls-key`): they are reached at
    /// `https://`, this process presenting its certificate; `None`: plain
    /// HTTP with the bearer token.
    pub internal_tls: Option<std::sync::Arc<stasis_http::mtls::InternalTls>>,
}

/// The addresses a running server listens on.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    /// Ingress.
    pub ingress: SocketAddr,
    /// Admin API.
    pub admin: SocketAddr,
}

/// Binds the ingress (`--listen`) and admin (`--admin-listen`) listeners.
///
/// # Errors
/// Naming the flag whose address cannot be bound.
pub(crate) async fn bind(
    options: &ServeOptions,
) -> anyhow::Result<(TcpListener, TcpListener, Bound)> {
    let ingress = TcpListener::bind(options.listen)
        .await
        .with_context(|| format!("binding --listen {}", options.listen))?;
    let admin = TcpListener::bind(options.admin_listen)
        .await
        .with_context(|| format!("binding --admin-listen {}", options.admin_listen))?;
    let bound = Bound {
        ingress: ingress.local_addr()?,
        admin: admin.local_addr()?,
    };
    Ok((ingress, admin, bound))
}
