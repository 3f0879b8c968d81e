//! The flags `stasis serve` and `stasis worker run` share to choose where
//! the cluster keeps its state: the directory (`--directory`, with etcd's
//! TLS and auth settings), the snapshot store (`--snapshot-store`) and the
//! lease TTL.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use stasis_core::snapshot_objects::StoreUrl;
use stasis_runtime::cluster::etcd::EtcdOptions;

/// A duration with a unit: `250ms`, `30s`, `5m`.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("invalid duration {s:?} ({e}); use e.g. 250ms or 30s"))
}

/// Where the directory is: the embedded SQLite file or etcd.
#[derive(Debug, Clone)]
pub(crate) enum DirectoryFlag {
    /// `sqlite`: `stasis.db` in the data dir.
    Sqlite,
    /// `etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`.
    Etcd(EtcdOptions),
}

fn parse_directory(s: &str) -> Result<DirectoryFlag, String> {
    if s == "sqlite" {
        return Ok(DirectoryFlag::Sqlite);
    }
    if s.starts_with("etcd://") {
        return EtcdOptions::parse(s).map(DirectoryFlag::Etcd);
    }
    Err(format!(
        "{s:?} is neither \"sqlite\" nor etcd://HOST:PORT[,HOST:PORT...][/PREFIX]"
    ))
}

/// Shortest and longest `--lease-ttl`: etcd counts leases in whole
/// seconds, and a worker or leader that dies is replaced only after it.
const LEASE_TTL_RANGE: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(3600));

/// `--lease-ttl`: a duration from 1 s to 1 h.
fn parse_lease_ttl(s: &str) -> Result<Duration, String> {
    let ttl = parse_duration(s)?;
    let (min, max) = LEASE_TTL_RANGE;
    if ttl < min || ttl > max {
        return Err(format!(
            "{s:?} is out of range: from 1s (etcd counts leases in whole seconds) to 1h (a dead worker's actors wait that long)"
        ));
    }
    Ok(ttl)
}

fn parse_store(s: &str) -> Result<StoreUrl, String> {
    s.parse()
        .map_err(|e: stasis_core::snapshot_objects::StoreUrlError| e.to_string())
}

/// Flags choosing the directory and the snapshot store.
#[derive(Debug, Clone, Args)]
pub(crate) struct ClusterFlags {
    /// The directory: `sqlite` (stasis.db in the data dir) or
    /// etcd://HOST:PORT[,HOST:PORT...][/PREFIX] (cluster mode; prefix /stasis).
    #[arg(long, default_value = "sqlite", value_parser = parse_directory)]
    pub directory: DirectoryFlag,
    /// Where snapshots are kept: `local` (the data dir's snapshots/),
    /// file:///ABS/PATH (a shared volume) or s3://BUCKET[/PREFIX] (settings
    /// from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    /// AWS_REGION, AWS_ALLOW_HTTP).
    #[arg(long, default_value = "local", value_parser = parse_store)]
    pub snapshot_store: StoreUrl,
    /// CA certificate (PEM) to verify etcd's servers with (TLS).
    #[arg(long)]
    pub etcd_ca: Option<PathBuf>,
    /// Client certificate (PEM) to present to etcd.
    #[arg(long, requires = "etcd_key")]
    pub etcd_cert: Option<PathBuf>,
    /// Client key (PEM) of --etcd-cert.
    #[arg(long, requires = "etcd_cert")]
    pub etcd_key: Option<PathBuf>,
    /// etcd user name (with STASIS_ETCD_PASSWORD).
    #[arg(long, env = "STASIS_ETCD_USER", requires = "etcd_password")]
    pub etcd_user: Option<String>,
    /// etcd password of --etcd-user.
    #[arg(
        long,
        env = "STASIS_ETCD_PASSWORD",
        hide_env_values = true,
        requires = "etcd_user"
    )]
    pub etcd_password: Option<String>,
    /// TTL of the leases in etcd (workers' registrations, the leader's):
    /// a worker or leader cut off from etcd stops within it, and is
    /// replaced after it.
    #[arg(long, default_value = "10s", value_parser = parse_lease_ttl)]
    pub lease_ttl: Duration,
}

impl ClusterFlags {
    /// The etcd settings in cluster mode, `None` for the embedded directory.
    ///
    /// # Errors
    /// If etcd-only flags are given with `--directory sqlite`.
    pub(crate) fn etcd(&self) -> anyhow::Result<Option<EtcdOptions>> {
        match &self.directory {
            DirectoryFlag::Sqlite => {
                anyhow::ensure!(
                    self.etcd_ca.is_none() && self.etcd_cert.is_none() && self.etcd_user.is_none(),
                    "--etcd-ca, --etcd-cert, --etcd-key and --etcd-user need --directory etcd://..."
                );
                Ok(None)
            }
            DirectoryFlag::Etcd(options) => {
                anyhow::ensure!(
                    self.snapshot_store != StoreUrl::Local,
                    "--directory etcd:// needs a --snapshot-store every process shares: file:///ABS/PATH or s3://BUCKET[/PREFIX]"
                );
                let mut options = options.clone();
                options.ca.clone_from(&self.etcd_ca);
                options.cert.clone_from(&self.etcd_cert);
                options.key.clone_from(&self.etcd_key);
                options.user = self.etcd_user.clone().zip(self.etcd_password.clone());
                Ok(Some(options))
            }
        }
    }
}
