//! `stasis worker run`: a remote worker process (see
//! `stasis_runtime::cluster::server`).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use stasis_runtime::cluster::server::{WorkerOptions, run as run_worker};

/// Flags of `stasis worker run`.
#[derive(Debug, Args)]
pub struct WorkerRunArgs {
    /// The control plane's admin URL, e.g. http://127.0.0.1:7070.
    #[arg(long, env = "STASIS_ADMIN")]
    join: String,
    /// Where this worker's internal API listens; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// The worker's name (1-63 of a-z, 0-9 and -).
    #[arg(long)]
    name: String,
    /// Data dir: local snapshot copies and compiled code.
    #[arg(long)]
    data_dir: PathBuf,
    /// Bearer token of the control plane (and of this worker's API).
    #[arg(long, env = "STASIS_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
}

/// Runs the worker until SIGINT or SIGTERM (then drains it).
///
/// # Errors
/// Start-up failures: a locked data dir, a port in use, a bad name.
pub async fn run(args: WorkerRunArgs) -> anyhow::Result<()> {
    crate::process::init_logging();
    let join = if args.join.contains("://") {
        args.join
    } else {
        format!("http://{}", args.join)
    };
    let options = WorkerOptions {
        join,
        listen: args.listen,
        name: args.name.clone(),
        data_dir: args.data_dir,
        token: args.admin_token,
    };
    let name = args.name;
    run_worker(options, crate::process::shutdown_signal(), move |addr| {
        println!("stasis worker ready name={name} listen={addr}");
    })
    .await
}
