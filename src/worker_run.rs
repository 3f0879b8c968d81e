//! `stasis worker run`: a remote worker process (see
//! `stasis_runtime::worker_process`).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use stasis_core::snapshot_objects::StoreUrl;
use stasis_runtime::worker::host_calls::outbound::AllowRules;
use stasis_runtime::worker_process::{
    Membership, RegisteredOptions, WorkerOptions, run as run_worker,
};

use crate::cluster_flags::ClusterFlags;

/// Flags of `stasis worker run`.
#[derive(Debug, Args)]
pub(crate) struct WorkerRunArgs {
    /// The control plane's admin URL, e.g. http://127.0.0.1:7070 (embedded
    /// mode; default: $STASIS_ADMIN). With --directory etcd:// the worker
    /// registers in etcd instead (and $STASIS_ADMIN is ignored).
    #[arg(long)]
    join: Option<String>,
    /// Where this worker's internal API listens; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// The worker's name (1-63 of a-z, 0-9 and -).
    #[arg(long)]
    name: String,
    /// Data dir: local snapshot copies and compiled code.
    #[arg(long)]
    data_dir: PathBuf,
    /// Bearer token of the control plane (and of this worker's API), when
    /// it has no --internal-token.
    #[arg(long, env = "STASIS_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// The cluster's internal token (`stasis serve --internal-token`):
    /// presented to the control plane and required by this worker's API,
    /// instead of --admin-token.
    #[arg(long, env = "STASIS_INTERNAL_TOKEN", hide_env_values = true)]
    internal_token: Option<String>,
    /// Hosts actors may fetch from (HOST[:PORT], [IPV6][:PORT],
    /// *.DOMAIN[:PORT] or public[:PORT]; repeatable; without a port only
    /// 80/443). A name resolving to a loopback, private or other special
    /// address is refused unless a rule names that IP; `public` allows
    /// every host whose addresses are all public.
    #[arg(long = "allow-outbound", value_name = "HOST[:PORT]")]
    allow_outbound: Vec<String>,
    #[command(flatten)]
    cluster: ClusterFlags,
    #[command(flatten)]
    internal_tls: crate::internal_tls::InternalTlsFlags,
    #[command(flatten)]
    trace: crate::trace_flags::TraceFlags,
    /// Cluster mode: the HOST:PORT others reach this worker's API at
    /// (default: the listen address).
    #[arg(long)]
    advertise: Option<String>,
}

/// Runs the worker until SIGINT or SIGTERM (then drains it).
///
/// # Errors
/// Start-up failures: a locked data dir, a port in use, a bad name.
pub(crate) async fn run(args: WorkerRunArgs) -> anyhow::Result<()> {
    crate::process::init_logging();
    let _telemetry = args.trace.install("stasis worker")?;
    let etcd = args.cluster.etcd()?;
    let internal_tls = args
        .internal_tls
        .load(stasis_runtime::http::subject::CertRole::Worker)?;
    // $STASIS_ADMIN is where client verbs send their calls: a cluster
    // worker started in the same shell must not take it for --join.
    let join = match (&etcd, args.join) {
        (None, None) => std::env::var("STASIS_ADMIN").ok().filter(|v| !v.is_empty()),
        (_, join) => join,
    };
    let membership = match (etcd, join) {
        (Some(etcd), None) => Membership::Registered(Box::new(RegisteredOptions {
            etcd,
            store: args.cluster.snapshot_store.clone(),
            lease_ttl: args.cluster.lease_ttl,
            advertise: args.advertise,
        })),
        (Some(_), Some(_)) => anyhow::bail!(
            "--join is for the embedded mode; with --directory etcd:// the worker registers in etcd (drop --join)"
        ),
        (None, Some(join)) => {
            anyhow::ensure!(
                args.cluster.snapshot_store == StoreUrl::Local && args.advertise.is_none(),
                "--snapshot-store and --advertise need --directory etcd://... (a --join worker streams its snapshots to the control plane)"
            );
            Membership::Join(if join.contains("://") {
                join
            } else {
                format!("http://{join}")
            })
        }
        (None, None) => anyhow::bail!(
            "give --join URL (the control plane's admin URL, or $STASIS_ADMIN) or --directory etcd://HOST:PORT (cluster mode)"
        ),
    };
    let options = WorkerOptions {
        membership,
        listen: args.listen,
        name: args.name.clone(),
        data_dir: args.data_dir,
        token: args.internal_token.or(args.admin_token),
        allow_outbound: stasis_runtime::contract::settings::AllowList::parse(&args.allow_outbound)
            .map_err(anyhow::Error::msg)?,
        internal_tls,
    };
    let name = args.name;
    run_worker(options, crate::process::shutdown_signal(), move |addr| {
        println!("stasis worker ready name={name} listen={addr}");
    })
    .await
}
