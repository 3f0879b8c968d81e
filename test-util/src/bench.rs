//! What only the benches need: criterion's test mode, `stasis` processes
//! that log quietly (logging per request would be part of the
//! measurement), their knobs from the environment and their memory.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use crate::{Artifacts, Proc};

/// Set to a log filter (`info`, `debug`) to run bench processes at that
/// level and echo their logs; unset, they log at `warn`, silently.
pub const LOG_VAR: &str = "STASIS_BENCH_LOG";

/// Whether criterion runs in test mode, its own rule: without `--bench` (as
/// under `cargo test`), or with `--test` or `--list`, every benchmark runs
/// once as a test. Benches use it to pick small sizes.
#[must_use]
pub fn test_mode() -> bool {
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    !has("--bench") || has("--test") || has("--list")
}

/// `stasis serve` on `data_dir` with `extra` flags, on loopback ports
/// picked by the kernel; panics with its stderr if it does not start.
#[must_use]
pub fn serve(stasis: &Artifacts, data_dir: &Path, extra: &[&str]) -> Proc {
    start(stasis.serve(data_dir, extra), "stasis ready")
}

/// `stasis worker run` named `name` joining the admin API at `admin`.
#[must_use]
pub fn worker(stasis: &Artifacts, admin: SocketAddr, name: &str, data_dir: &Path) -> Proc {
    let join = format!("http://{admin}");
    start(stasis.worker(&join, name, data_dir), "stasis worker ready")
}

fn start(mut command: Command, ready_prefix: &str) -> Proc {
    let level = std::env::var(LOG_VAR).ok();
    command.env("STASIS_LOG", level.as_deref().unwrap_or("warn"));
    Proc::start(command, ready_prefix, "stasis", level.is_some())
        .unwrap_or_else(|stderr| panic!("{ready_prefix:?} never came: {stderr}"))
}

/// The number in environment variable `key` (`_` separators allowed), or
/// `default` when unset.
///
/// # Panics
/// If the variable is set to something else than a number.
#[must_use]
pub fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key).ok().map_or(default, |v| {
        v.replace('_', "")
            .parse()
            .unwrap_or_else(|e| panic!("{key}={v}: {e}"))
    })
}

/// The runtime every bench drives its clients on: two worker threads,
/// as many as the machines the figures come from have cores.
///
/// # Panics
/// If the runtime cannot be built.
#[must_use]
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// How long a throughput bench runs: `rounds` rounds alternating between
/// its cases, each case `seconds` long with `in_flight` requests in flight.
#[derive(Debug, Clone, Copy)]
pub struct Rounds {
    /// Rounds (the median is reported).
    pub rounds: usize,
    /// Seconds per case and round.
    pub seconds: u64,
    /// Requests in flight.
    pub in_flight: usize,
}

impl Rounds {
    /// From `<prefix>_ROUNDS` (3), `<prefix>_SECONDS` (3) and
    /// `<prefix>_IN_FLIGHT` (8); in test mode one round of one second.
    #[must_use]
    pub fn from_env(prefix: &str) -> Self {
        let in_flight = env_usize(&format!("{prefix}_IN_FLIGHT"), 8);
        if test_mode() {
            return Self {
                rounds: 1,
                seconds: 1,
                in_flight,
            };
        }
        Self {
            rounds: env_usize(&format!("{prefix}_ROUNDS"), 3),
            seconds: env_usize(&format!("{prefix}_SECONDS"), 3) as u64,
            in_flight,
        }
    }
}

/// `VmRSS` of process `pid`, in bytes (0 if it cannot be read).
#[must_use]
pub fn rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

/// Requests per second: `in_flight` tasks each run `request` over and over
/// for `seconds`; the count done over the time taken.
pub async fn rate<F, Fut>(in_flight: usize, seconds: u64, request: F) -> f64
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let tasks: Vec<_> = (0..in_flight)
        .map(|_| {
            let (request, done) = (request.clone(), done.clone());
            tokio::spawn(async move {
                while Instant::now() < until {
                    request().await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("client task");
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}
