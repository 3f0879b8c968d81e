//! The `stasis` command: `serve` (control plane, router and in-process
//! workers), `ca` (the internal CA's certificates), `new` (a new actor
//! project), and the client verbs
//! that drive a running server through its admin API (`template`,
//! `actor`, `worker`, `rebalance`, `gc`).

mod ca;
mod client;
mod cluster_flags;
mod commands;
mod internal_tls;
mod js_template;
mod output;
mod process;
mod scaffold;
mod serve;
mod trace_flags;
mod verbs;
mod worker_run;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// A WebAssembly actor runtime: pause, resume and migrate actors by
/// snapshotting their linear memory and globals.
#[derive(Debug, Parser)]
#[command(name = "stasis", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Client options before the verb; clap passes them on to the verb's
    /// own (see [`verbs::GlobalClientArgs`]).
    #[command(flatten)]
    _client: verbs::GlobalClientArgs,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant, reason = "parsed once per process")]
enum Command {
    /// Run the control plane, the router and in-process workers.
    Serve(Box<serve::ServeArgs>),
    /// Make the cluster's internal CA and the certificates it issues to
    /// the control plane and workers (mutual TLS, `--internal-ca`).
    #[command(subcommand)]
    Ca(ca::CaCommand),
    /// Make a new actor project (Rust, JavaScript, TypeScript or C) in
    /// folder NAME, ready to build, test and push.
    New(scaffold::NewArgs),
    #[command(flatten)]
    Client(commands::ClientCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("stasis: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve::run(*args).await,
            Command::Ca(command) => ca::run(&command),
            Command::New(args) => scaffold::run(&args),
            Command::Client(command) => commands::run(command).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stasis: {e:#}");
            ExitCode::FAILURE
        }
    }
}
