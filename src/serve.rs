//! `stasis serve`: flags, logging, signals.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use stasis_core::engine::Limits;
use stasis_runtime::contract::settings::{ActorSettings, AllowList, Durability, WorkerSettings};
use stasis_runtime::contract::sockets::SocketLimits;
use stasis_runtime::control::{RebalanceBy, ServeConfig};
use stasis_runtime::http::mtls::InternalTls;
use stasis_runtime::http::tls::{CertFiles, ServerTls};
use stasis_runtime::server::{ClusterConfig, ServeOptions, serve};
use stasis_runtime::worker::host_calls::outbound::AllowRules;

/// A size: a number of bytes, optionally with an IEC unit (powers of
/// 1024, case-insensitive): `4096`, `512KiB`, `256MiB`, `1.5GiB`, `1TiB`.
/// SI units (`MB`, powers of 1000) and bare letters (`M`) are refused, with
/// the units that are accepted: `256MB` is easily meant as 256 MiB but is
/// 4.6 % less (docs/operations.md, "Sizes").
///
/// # Errors
/// The refused text, the accepted units and an example.
fn parse_size(s: &str) -> Result<u64, String> {
    const UNITS: &str = "B, KiB, MiB, GiB or TiB (powers of 1024), e.g. 256MiB";
    let text = s.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit = unit.trim();
    let iec = ["", "b", "kib", "mib", "gib", "tib"];
    if number.is_empty() || !iec.contains(&unit.to_ascii_lowercase().as_str()) {
        return Err(format!(
            "invalid size {s:?}: give a number of bytes, optionally with a unit: {UNITS}"
        ));
    }
    text.parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("invalid size {s:?} ({e}); units: {UNITS}"))
}

use crate::cluster_flags::{ClusterFlags, parse_duration};

/// Flags of `stasis serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Data dir: directory, templates, compiled code, snapshots.
    #[arg(long, default_value = "./stasis-data", env = "STASIS_DATA_DIR")]
    data_dir: PathBuf,
    /// Ingress address (HTTP/1.1 and h2c); port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:8000")]
    listen: SocketAddr,
    /// Admin API address; beyond loopback it requires --admin-token.
    #[arg(long, default_value = "127.0.0.1:7070")]
    admin_listen: SocketAddr,
    /// Actors are reached at <actor>.actors.<domain>.
    #[arg(long, default_value = "localhost")]
    domain: String,
    /// In-process workers, named worker-1..N (0 = control plane only).
    /// Default 2; with --directory etcd:// 0, the only value allowed there
    /// (workers join as `stasis worker run`).
    #[arg(long)]
    workers: Option<usize>,
    /// Bearer token the admin API requires.
    #[arg(long, env = "STASIS_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// Bearer token of the internal API between the control plane and
    /// workers (`stasis worker run --internal-token`): required on the
    /// admin port's /internal/ routes instead of --admin-token, and
    /// presented to workers. Each token is refused where the other
    /// belongs. Default: --admin-token serves both.
    #[arg(long, env = "STASIS_INTERNAL_TOKEN", hide_env_values = true)]
    internal_token: Option<String>,
    /// Requests held per actor while it pauses or resumes; past it: 503.
    #[arg(long, default_value_t = 1024)]
    max_held: usize,
    /// Longest a request is held before 503 with Retry-After.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    hold_timeout: Duration,
    /// Largest request or response body.
    #[arg(long, default_value = "8MiB", value_parser = parse_size)]
    max_body: u64,
    /// Open WebSockets and streamed responses per actor; an upgrade or
    /// stream past it is answered 503.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    max_sockets: u64,
    /// Largest WebSocket message either way (a client's message over it
    /// closes its socket with code 1009; an actor's send over it fails).
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    max_socket_message: u64,
    /// A WebSocket whose client has sent nothing this long is pinged, and
    /// closed (1011 to the client, 1006 to the actor as its close event)
    /// when nothing comes back within as long again: a dead peer is
    /// noticed. 0s: never.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    socket_ping: Duration,
    /// Largest linear memory per actor; a grow past it fails in the guest.
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    max_memory: u64,
    /// Wasm execution time per request; past it: 504.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    cpu_limit: Duration,
    /// Wall-clock time per request, host calls included; past it: 504.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    request_timeout: Duration,
    /// Snapshots kept per actor.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..))]
    keep_snapshots: u64,
    /// Cap on the snapshot folder; a pause past it fails and the actor keeps running.
    #[arg(long, value_parser = parse_size)]
    snapshot_quota: Option<u64>,
    /// When a request's effect is durable: request (its answer waits for
    /// the worker journal's group commit), store (its answer waits until
    /// its state is in the snapshot store: a cluster worker's journal
    /// segment; on one machine the same as request), interval (at each
    /// --checkpoint-interval, default 1s) or pause (at pause and checkpoints).
    #[arg(long, value_name = "LEVEL", value_parser = Durability::parse)]
    durability: Option<Durability>,
    /// Checkpoint a running actor after this many requests (0: never by
    /// count; 1 is a spelling of --durability request, except with an
    /// explicit --durability pause, where it checkpoints every request).
    #[arg(long)]
    checkpoint_every: Option<u64>,
    /// Checkpoint running actors this often.
    #[arg(long, value_parser = parse_duration)]
    checkpoint_interval: Option<Duration>,
    /// Live instances per worker; past it the least recently used running
    /// actors are paused. From 64 on, N/64 of them (at most 8) are kept free
    /// for the next resumes, so N - N/64 actors run at once under load, and
    /// a create at a full worker leaves its new actor paused.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_live: Option<u64>,
    /// Pause actors idle this long (scale to zero).
    #[arg(long, value_parser = parse_duration)]
    idle_timeout: Option<Duration>,
    /// Remote workers missing heartbeats this long stop serving; after
    /// twice this long they are declared lost and their actors move.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    heartbeat_timeout: Duration,
    /// What rebalancing evens out across workers: count or memory.
    #[arg(long, default_value = "count", value_parser = parse_rebalance_by)]
    rebalance_by: RebalanceBy,
    /// Moves a rebalance or drain runs at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    max_concurrent_moves: u64,
    /// Failed deliveries of an alarm (its handler trapped or ran out of
    /// time, or its actor could not be reached) after which it is given
    /// up: removed, logged as an error and counted in
    /// stasis_alarms_given_up_total. Retries back off from 0.5 s, doubling
    /// up to 60 s.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    alarm_retries: u32,
    /// Also label metrics per actor (stasis_actor_*), for at most 10,000
    /// actors at a time; an actor's series are removed with it.
    #[arg(long)]
    metrics_per_actor: bool,
    /// Hosts actors may fetch from (HOST[:PORT], [IPV6][:PORT],
    /// *.DOMAIN[:PORT] or public[:PORT]; repeatable; without a port only
    /// 80/443). A name resolving to a loopback, private or other special
    /// address is refused unless a rule names that IP; `public` allows
    /// every host whose addresses are all public.
    #[arg(long = "allow-outbound", value_name = "HOST[:PORT]")]
    allow_outbound: Vec<String>,
    /// Cluster mode: placements a follower replica keeps cached. It reads
    /// an actor's placement from etcd when a request first needs it (one
    /// read, shared by concurrent requests) and follows its changes;
    /// past this many, those not used lately are dropped.
    #[arg(long, default_value_t = stasis_runtime::control::DEFAULT_PLACEMENT_CACHE as u64, value_parser = clap::value_parser!(u64).range(1..))]
    placement_cache: u64,
    #[command(flatten)]
    cluster: ClusterFlags,
    #[command(flatten)]
    trace: crate::trace_flags::TraceFlags,
    /// Cluster mode: the host other replicas reach this one's listeners at
    /// (default: the listen address).
    #[arg(long)]
    advertise: Option<String>,
    /// Serve the ingress over TLS with this certificate chain (PEM, leaf
    /// first); repeatable, each with its --tls-key, in the same order: a
    /// client's SNI name picks the certificate that covers it (wildcards
    /// too), else the first. Reloaded within a second or two when the file
    /// changes.
    #[arg(long = "tls-cert", value_name = "PATH")]
    tls_cert: Vec<PathBuf>,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1) of the --tls-cert
    /// given at the same position.
    #[arg(long = "tls-key", value_name = "PATH")]
    tls_key: Vec<PathBuf>,
    /// Serve the admin API over TLS with this certificate chain (PEM, leaf
    /// first); repeatable, each with its --admin-tls-key, chosen by SNI and
    /// reloaded as --tls-cert is. Clients trust it through the CA file in
    /// STASIS_CA_CERT (the CLI, `worker run --join https://...`). With
    /// --internal-ca, clients are asked for a certificate from that CA,
    /// which the internal routes (/internal/) require. One machine only
    /// for now: refused with --etcd.
    #[arg(long = "admin-tls-cert", value_name = "PATH")]
    admin_tls_cert: Vec<PathBuf>,
    /// The private key of the --admin-tls-cert at the same position.
    #[arg(long = "admin-tls-key", value_name = "PATH")]
    admin_tls_key: Vec<PathBuf>,
    #[command(flatten)]
    internal_tls: crate::internal_tls::InternalTlsFlags,
}

/// A listener's certificates from `--{prefix}tls-cert`/`--{prefix}tls-key`
/// (none: plain HTTP).
/// With `internal` (the admin listener of a server with `--internal-ca`)
/// clients are asked for a certificate from the internal CA, which only
/// the internal routes require.
fn server_tls(
    prefix: &str,
    certs: &[PathBuf],
    keys: &[PathBuf],
    internal: Option<&InternalTls>,
) -> anyhow::Result<Option<std::sync::Arc<ServerTls>>> {
    let (cert_flag, key_flag) = (format!("--{prefix}tls-cert"), format!("--{prefix}tls-key"));
    if certs.len() != keys.len() {
        anyhow::bail!(
            "{cert_flag} and {key_flag} come in pairs: {} certificate(s) and {} key(s) given",
            certs.len(),
            keys.len()
        );
    }
    if certs.is_empty() {
        return Ok(None);
    }
    let files = certs
        .iter()
        .zip(keys)
        .map(|(cert, key)| CertFiles {
            cert: cert.clone(),
            key: key.clone(),
        })
        .collect();
    let clients = internal
        .map(InternalTls::optional_client_verifier)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    ServerTls::load_verifying(files, clients)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("{cert_flag}/{key_flag}: {e}"))
}

fn parse_rebalance_by(s: &str) -> Result<RebalanceBy, String> {
    match s {
        "count" => Ok(RebalanceBy::Count),
        "memory" => Ok(RebalanceBy::Memory),
        _ => Err(format!("{s:?} is neither \"count\" nor \"memory\"")),
    }
}

/// Runs `stasis serve` until SIGINT or SIGTERM.
///
/// # Errors
/// Start-up failures (see [`stasis_runtime::server::serve`]).
pub(crate) async fn run(args: ServeArgs) -> anyhow::Result<()> {
    crate::process::init_logging();
    let _telemetry = args.trace.install("stasis serve")?;
    let cluster = args.cluster.etcd()?.map(|etcd| ClusterConfig {
        etcd,
        lease_ttl: args.cluster.lease_ttl,
        advertise: args.advertise.clone(),
    });
    let internal_tls = args
        .internal_tls
        .load(stasis_runtime::http::subject::CertRole::Control)?;
    let tls = server_tls("", &args.tls_cert, &args.tls_key, None)?;
    let admin_tls = server_tls(
        "admin-",
        &args.admin_tls_cert,
        &args.admin_tls_key,
        internal_tls.as_deref(),
    )?;
    if admin_tls.is_some() && cluster.is_some() {
        anyhow::bail!(
            "--admin-tls-cert is not supported with --etcd yet: replicas and workers of a \
             cluster reach each other's admin API over plain HTTP (terminate TLS in front of \
             the admin port, or run without --etcd)"
        );
    }
    if args.internal_token.is_some() && args.internal_token == args.admin_token {
        anyhow::bail!(
            "--internal-token must differ from --admin-token: a worker's credential must not open the admin API"
        );
    }
    let durability = args.durability.unwrap_or_default();
    let checkpoint_interval = match (durability, args.checkpoint_interval) {
        (Durability::Interval, None) => Some(Duration::from_secs(1)),
        (_, every) => every,
    };
    let worker = worker_settings(&args, durability)?;
    let options = ServeOptions {
        config: ServeConfig {
            data_dir: args.data_dir,
            workers: args
                .workers
                .unwrap_or(if cluster.is_some() { 0 } else { 2 }),
            limits: Limits {
                max_memory: args.max_memory,
                cpu_limit: args.cpu_limit,
                request_timeout: args.request_timeout,
                max_body: usize::try_from(args.max_body).unwrap_or(usize::MAX),
            },
            worker,
            snapshot_quota: args.snapshot_quota,
            idle_timeout: args.idle_timeout,
            checkpoint_interval,
            heartbeat_timeout: args.heartbeat_timeout,
            rebalance_by: args.rebalance_by,
            max_concurrent_moves: usize::try_from(args.max_concurrent_moves).unwrap_or(usize::MAX),
            alarm_retries: args.alarm_retries,
            sockets: SocketLimits {
                per_actor: usize::try_from(args.max_sockets).unwrap_or(usize::MAX),
                max_message: usize::try_from(args.max_socket_message).unwrap_or(usize::MAX),
                ping: args.socket_ping,
                ..SocketLimits::default()
            },
            admin_token: args.admin_token.clone(),
            internal_token: args.internal_token.clone(),
            snapshot_store: args.cluster.snapshot_store.clone(),
            placement_cache: usize::try_from(args.placement_cache).unwrap_or(usize::MAX),
        },
        cluster,
        listen: args.listen,
        admin_listen: args.admin_listen,
        domain: args.domain,
        admin_token: args.admin_token,
        metrics_per_actor: args.metrics_per_actor,
        tls,
        admin_tls,
        internal_tls,
    };
    // A data dir this run creates is removed again if the start fails, so
    // that a mistyped flag leaves no empty ./stasis-data behind.
    let data_dir = options.config.data_dir.clone();
    let fresh = !data_dir.exists();
    let tls_on = options.tls.is_some();
    let started = std::sync::atomic::AtomicBool::new(false);
    let result = serve(options, crate::process::shutdown_signal(), |bound| {
        started.store(true, std::sync::atomic::Ordering::SeqCst);
        println!(
            "stasis ready ingress={} admin={}",
            bound.ingress, bound.admin
        );
        tracing::info!(ingress = %bound.ingress, admin = %bound.admin, ingress_tls = tls_on, "ready");
    })
    .await;
    if result.is_err()
        && fresh
        && !started.load(std::sync::atomic::Ordering::SeqCst)
        && let Err(e) = std::fs::remove_dir_all(&data_dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(
            "removing the data dir {} this failed start created: {e}",
            data_dir.display()
        );
    }
    result
}

/// The settings of every worker, from `serve`'s flags at `durability`.
///
/// # Errors
/// A malformed `--allow-outbound` rule.
fn worker_settings(args: &ServeArgs, durability: Durability) -> anyhow::Result<WorkerSettings> {
    Ok(WorkerSettings {
        max_held: args.max_held,
        hold_timeout: args.hold_timeout,
        actor: ActorSettings {
            keep_snapshots: usize::try_from(args.keep_snapshots).unwrap_or(usize::MAX),
            // `--checkpoint-every 1` is a spelling of `request`
            // (at an explicit `pause`, a checkpoint per request).
            checkpoint_every: args
                .checkpoint_every
                .filter(|&n| {
                    n != 1 || !matches!(durability, Durability::Request | Durability::Store)
                })
                .unwrap_or(0),
            durability,
        },
        max_live: args
            .max_live
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        allow_outbound: AllowList::parse(&args.allow_outbound).map_err(anyhow::Error::msg)?,
    })
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_take_bytes_or_iec_units_and_refuse_si_ones() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("256mib"), Ok(256 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("8 KiB"), Ok(8 << 10));
        assert_eq!(parse_size("10B"), Ok(10));
        for refused in ["256MB", "256M", "1gb", "1kB", "MiB", "", "-1", "12 parsecs"] {
            let e = parse_size(refused).expect_err(refused);
            assert!(e.contains("KiB, MiB, GiB"), "{refused}: {e}");
        }
    }
}
