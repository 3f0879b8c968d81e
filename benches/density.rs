//! Density benchmark (issue 6, item 6): how many `counter` actors one worker
//! holds, paused and live, against the real `stasis serve --workers 1
//! --max-live L` on loopback.
//!
//! Actors are created over the admin API (`STASIS_DENSITY_CONCURRENCY`
//! requests in flight) up to each size in `STASIS_DENSITY_STEPS`; past `L`
//! the least recently used ones are paused by `--max-live`. At each size the
//! bench prints a `density-summary:` line (live and paused counts from
//! `/metrics`, `VmRSS`/`VmHWM` and mapping count of the serve process,
//! disk used by the data dir, creation rate) and runs two criterion
//! benchmarks:
//!
//! * `density/resume_first_request/<N>`: the first request to a paused
//!   actor (resume from its snapshot + the call), client-observed; actors
//!   are probed oldest first (paused by `--max-live` once N > L; an actor
//!   found live is paused first, untimed). The server's `last_resume_ms` of
//!   each probe is collected too; p50/p99 are printed as `resume-summary:`.
//! * `density/live_request/<N>`: a request to one of the 64 newest (live)
//!   actors, for comparison.
//!
//! Creation stops early when the next size does not fit in
//! `STASIS_DENSITY_BUDGET_SECS` of creation time at the last measured rate,
//! or when the budget is used up (the rate falls as actors accumulate), or
//! at the first refused creation; the bench then measures at the size it
//! reached.
//!
//! Knobs (environment): `STASIS_DENSITY_ACTORS` (largest size; 50 in test
//! mode, 1000 otherwise), `STASIS_DENSITY_MAX_LIVE` (10 in test mode, 10000
//! otherwise), `STASIS_DENSITY_STEPS` (comma-separated sizes; default the
//! 1–2–5 series up to the largest size), `STASIS_DENSITY_BUDGET_SECS` (900),
//! `STASIS_DENSITY_CONCURRENCY` (8), `STASIS_DENSITY_MAX_HELD` (passed as
//! `--max-held`), `STASIS_DENSITY_DIR` (parent of the temporary data dir,
//! `/tmp`; the data dir is deleted at the end).
//!
//! In criterion's test mode (`cargo test --benches`) this is 50 actors with
//! 10 live, each benchmark once. The full run (a full worker keeps
//! `--max-live / 64`, at most 8, slots free, so 10,008 gives 10,000 live):
//! `STASIS_DENSITY_ACTORS=110000 STASIS_DENSITY_MAX_LIVE=10008 cargo bench --bench density`.
//! Results: `docs/benchmarks/cluster-density.md`.

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, SamplingMode};
use stasis_test_util::admin::{self, call_ok};
use stasis_test_util::bench::{self, env_usize, test_mode};
use stasis_test_util::http::{Http, Reply, actor_host, client, send};
use stasis_test_util::stats::summary;
use stasis_test_util::{Artifacts, Proc, artifacts};

/// The `stasis` binary and the demo actors.
const STASIS: Artifacts = artifacts!();

const MIB: f64 = (1 << 20) as f64;
const LIVE_PROBES: usize = 64;

struct Config {
    actors: usize,
    max_live: usize,
    steps: Vec<usize>,
    budget: Duration,
    concurrency: usize,
    max_held: Option<String>,
    parent: PathBuf,
}

impl Config {
    fn from_env() -> Config {
        let test = test_mode();
        let actors = env_usize("STASIS_DENSITY_ACTORS", if test { 50 } else { 1000 });
        let max_live = env_usize("STASIS_DENSITY_MAX_LIVE", if test { 10 } else { 10_000 });
        let mut steps: Vec<usize> = match std::env::var("STASIS_DENSITY_STEPS") {
            Ok(list) => list
                .split(',')
                .map(|s| s.trim().replace('_', "").parse().expect("a size"))
                .collect(),
            Err(_) if test => vec![actors],
            Err(_) => {
                let mut series = Vec::new();
                let mut decade = 1000;
                'series: loop {
                    for m in [1, 2, 5] {
                        if decade * m >= actors {
                            break 'series;
                        }
                        series.push(decade * m);
                    }
                    decade *= 10;
                }
                series.push(actors);
                series
            }
        };
        steps.sort_unstable();
        steps.dedup();
        Config {
            actors,
            max_live,
            steps,
            budget: Duration::from_secs(env_usize("STASIS_DENSITY_BUDGET_SECS", 900) as u64),
            concurrency: env_usize("STASIS_DENSITY_CONCURRENCY", 8).max(1),
            max_held: std::env::var("STASIS_DENSITY_MAX_HELD").ok(),
            parent: std::env::var_os("STASIS_DENSITY_DIR")
                .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from),
        }
    }
}

// ---- the serve process ------------------------------------------------------

/// `stasis serve`, started by this bench and killed (SIGKILL) on drop: a
/// graceful stop would snapshot every live actor first.
struct Serve {
    process: Proc,
    ingress: SocketAddr,
    admin: SocketAddr,
}

impl Serve {
    fn start(data_dir: &Path, extra: &[String]) -> Serve {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let process = bench::serve(&STASIS, data_dir, &extra);
        Serve {
            ingress: process.addr("ingress="),
            admin: process.addr("admin="),
            process,
        }
    }

    /// (VmRSS, VmHWM) in bytes, and the number of memory mappings.
    fn memory(&self) -> (u64, u64, usize) {
        let pid = self.process.pid();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |key: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|kb| kb.parse::<u64>().ok())
                .map_or(0, |kb| kb * 1024)
        };
        let maps =
            std::fs::read_to_string(format!("/proc/{pid}/maps")).map_or(0, |m| m.lines().count());
        (field("VmRSS:"), field("VmHWM:"), maps)
    }
}

// ---- HTTP -------------------------------------------------------------------

async fn post(client: &Http, ingress: SocketAddr, actor: &str) -> Reply {
    send(
        client,
        ingress,
        "POST",
        &actor_host(actor),
        "/",
        Bytes::new(),
    )
    .await
}

/// `stasis_actors{state=...}` from `/metrics`: (running, paused, total).
async fn states(client: &Http, admin_addr: SocketAddr) -> (u64, u64, u64) {
    let text = send(
        client,
        admin_addr,
        "GET",
        "localhost",
        "/metrics",
        Bytes::new(),
    )
    .await
    .text();
    let mut out = (0, 0, 0);
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("stasis_actors{state=\"") else {
            continue;
        };
        let Some((state, value)) = rest.split_once("\"} ") else {
            continue;
        };
        let n: u64 = value.trim().parse().unwrap_or(0);
        match state {
            "running" => out.0 += n,
            "paused" => out.1 += n,
            _ => {}
        }
        out.2 += n;
    }
    out
}

fn name(i: usize) -> String {
    format!("d-{i:06}")
}

/// Creates actors `from..to` with `concurrency` requests in flight. On the
/// first refusal the creators stop; the answer is then the lowest index
/// that failed (every actor below it exists) and the server's message.
async fn create_range(
    client: &Http,
    admin_addr: SocketAddr,
    from: usize,
    to: usize,
    concurrency: usize,
) -> Option<(usize, String)> {
    let next = Arc::new(AtomicUsize::new(from));
    let failed: Arc<Mutex<Option<(usize, String)>>> = Arc::new(Mutex::new(None));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let next = next.clone();
        let failed = failed.clone();
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= to || failed.lock().unwrap().is_some() {
                    break;
                }
                let reply = admin::create_actor(&client, admin_addr, &name(i), "counter").await;
                if reply.status != 201 {
                    let mut failed = failed.lock().unwrap();
                    let message = format!("{} {}", reply.status, reply.text());
                    if failed.as_ref().is_none_or(|(at, _)| i < *at) {
                        *failed = Some((i, message));
                    }
                    break;
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("creator");
    }
    failed.lock().unwrap().take()
}

/// Bytes allocated on disk (st_blocks) and files under `dir`.
fn disk_usage(dir: &Path) -> (u64, u64) {
    let mut bytes = 0;
    let mut files = 0;
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            bytes += meta.blocks() * 512;
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                files += 1;
            }
        }
    }
    (bytes, files)
}

// ---- the run ----------------------------------------------------------------

struct Probe {
    client: Http,
    admin: SocketAddr,
    ingress: SocketAddr,
    created: usize,
    cursor: AtomicUsize,
    paused_first: AtomicU64,
    client_ms: Mutex<Vec<f64>>,
    server_ms: Mutex<Vec<f64>>,
    failures: Failures,
}

/// Requests that did not get 200: how many, and the first answer.
#[derive(Default)]
struct Failures {
    count: AtomicU64,
    first: Mutex<Option<String>>,
}

impl Failures {
    fn record(&self, actor: &str, status: u16, body: &[u8]) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.first.lock().unwrap().get_or_insert_with(|| {
            format!("{actor}: {status} {}", String::from_utf8_lossy(body).trim())
        });
    }

    fn report(&self) -> String {
        match &*self.first.lock().unwrap() {
            None => "failed=0".to_owned(),
            Some(first) => format!(
                "failed={} (first: {first})",
                self.count.load(Ordering::Relaxed)
            ),
        }
    }
}

impl Probe {
    /// The first request to a paused actor, timed; the oldest actors first.
    async fn resume_one(&self) -> Duration {
        let actor = name(self.cursor.fetch_add(1, Ordering::Relaxed) % self.created);
        let path = format!("/v1/actors/{actor}");
        let info = call_ok(&self.client, self.admin, "GET", &path, None).await;
        if info["state"] != "paused" {
            call_ok(
                &self.client,
                self.admin,
                "POST",
                &format!("{path}/pause"),
                None,
            )
            .await;
            self.paused_first.fetch_add(1, Ordering::Relaxed);
        }
        let started = Instant::now();
        let reply = post(&self.client, self.ingress, &actor).await;
        let elapsed = started.elapsed();
        if reply.status != 200 {
            // Kept out of the percentiles; reported with the summary.
            self.failures.record(&actor, reply.status, &reply.body);
            return elapsed;
        }
        let info = call_ok(&self.client, self.admin, "GET", &path, None).await;
        if let Some(ms) = info["last_resume_ms"].as_f64() {
            self.server_ms.lock().unwrap().push(ms);
        }
        self.client_ms
            .lock()
            .unwrap()
            .push(elapsed.as_secs_f64() * 1e3);
        elapsed
    }
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let started = Instant::now();
    let config = Config::from_env();
    let rt = stasis_test_util::bench::runtime();
    let tmp = tempfile::Builder::new()
        .prefix("stasis-density-")
        .tempdir_in(&config.parent)
        .expect("tempdir");
    let data = tmp.path().join("data");
    let mut extra = vec![
        "--workers".to_owned(),
        "1".to_owned(),
        "--max-live".to_owned(),
        config.max_live.to_string(),
    ];
    if let Some(held) = &config.max_held {
        extra.extend(["--max-held".to_owned(), held.clone()]);
    }
    let serve = Serve::start(&data, &extra);
    let client = {
        let _guard = rt.enter();
        client()
    };
    println!(
        "density: serve {} | sizes {:?} | budget {:?} | concurrency {}",
        extra.join(" "),
        config.steps,
        config.budget,
        config.concurrency
    );
    let (rss0, _, maps0) = serve.memory();
    rt.block_on(admin::push_template(
        &client,
        serve.admin,
        "counter",
        STASIS.demo_wasm("counter"),
    ));
    println!(
        "density-summary: actors=0 rss_mib={:.1} maps={maps0}",
        rss0 as f64 / MIB
    );

    let mut group = c.benchmark_group("density");
    group.sampling_mode(SamplingMode::Flat);
    let mut created = 0;
    let mut creating = Duration::ZERO;
    let mut last_rate = f64::INFINITY;
    let mut stop_creating = false;
    for &step in &config.steps {
        if stop_creating || step <= created {
            continue;
        }
        // Go only as far as fits in the creation budget at the last rate.
        let left = config.budget.saturating_sub(creating).as_secs_f64();
        let fits = created + (left * last_rate * 0.95) as usize;
        let target = if fits >= step {
            step
        } else {
            stop_creating = true;
            let partial = fits / 1000 * 1000;
            if partial <= created {
                println!("density: the next size ({step}) does not fit in the budget");
                break;
            }
            println!(
                "density: {step} does not fit in the budget at {last_rate:.0} actors/s; stopping at {partial}"
            );
            partial
        };
        // Create in chunks, printing the trend.
        let chunk = (target / 20).clamp(50, 5000);
        let before = created;
        let step_started = Instant::now();
        while created < target {
            let to = (created + chunk).min(target);
            let t = Instant::now();
            let failure = rt.block_on(create_range(
                &client,
                serve.admin,
                created,
                to,
                config.concurrency,
            ));
            let secs = t.elapsed().as_secs_f64();
            if let Some((at, message)) = failure {
                println!(
                    "density: creating {} failed: {message}; stopping at {at} actors",
                    name(at)
                );
                created = at;
                stop_creating = true;
                break;
            }
            let (rss, _, maps) = serve.memory();
            println!(
                "density-progress: created={to} chunk_rate={:.1}/s rss_mib={:.1} maps={maps} elapsed_s={:.0}",
                (to - created) as f64 / secs,
                rss as f64 / MIB,
                started.elapsed().as_secs_f64()
            );
            created = to;
            // The rate falls as actors accumulate: never overrun the budget.
            if created < target && creating + step_started.elapsed() >= config.budget {
                println!("density: creation budget used up; stopping at {created} actors");
                stop_creating = true;
                break;
            }
        }
        let step_time = step_started.elapsed();
        creating += step_time;
        let chunk_rate = (created - before) as f64 / step_time.as_secs_f64();
        last_rate = chunk_rate;
        // Let --max-live's pauses finish.
        let settle = Instant::now();
        let (running, paused, total) = rt.block_on(async {
            loop {
                let s = states(&client, serve.admin).await;
                if s.0 <= config.max_live as u64 || settle.elapsed() > Duration::from_secs(60) {
                    break s;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        let (rss, hwm, maps) = serve.memory();
        let (disk, files) = disk_usage(&data);
        println!(
            "density-summary: actors={total} running={running} paused={paused} rss_mib={:.1} hwm_mib={:.1} \
             rss_kib_per_actor={:.1} maps={maps} disk_mib={:.1} files={files} disk_kib_per_actor={:.1} \
             create_rate={chunk_rate:.1}/s create_total_s={:.1}",
            rss as f64 / MIB,
            hwm as f64 / MIB,
            (rss.saturating_sub(rss0)) as f64 / 1024.0 / total.max(1) as f64,
            disk as f64 / MIB,
            disk as f64 / 1024.0 / total.max(1) as f64,
            creating.as_secs_f64(),
        );

        let probe = Arc::new(Probe {
            client: client.clone(),
            admin: serve.admin,
            ingress: serve.ingress,
            created,
            cursor: AtomicUsize::new(0),
            paused_first: AtomicU64::new(0),
            client_ms: Mutex::new(Vec::new()),
            server_ms: Mutex::new(Vec::new()),
            failures: Failures::default(),
        });
        group.bench_function(BenchmarkId::new("resume_first_request", created), |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let probe = probe.clone();
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += probe.resume_one().await;
                    }
                    total
                }
            });
        });
        println!(
            "resume-summary: actors={created} probes={} (paused by --max-live: {}) client_ms {} | server_resume_ms {} | {}",
            probe.cursor.load(Ordering::Relaxed),
            probe.cursor.load(Ordering::Relaxed) as u64
                - probe.paused_first.load(Ordering::Relaxed),
            summary(&probe.client_ms.lock().unwrap()),
            summary(&probe.server_ms.lock().unwrap()),
            probe.failures.report(),
        );
        let live_ms = Arc::new(Mutex::new(Vec::new()));
        let live_next = Arc::new(AtomicUsize::new(0));
        let live_failures = Arc::new(Failures::default());
        group.bench_function(BenchmarkId::new("live_request", created), |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let client = client.clone();
                let live_ms = live_ms.clone();
                let live_next = live_next.clone();
                let live_failures = live_failures.clone();
                let ingress = serve.ingress;
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let k =
                            live_next.fetch_add(1, Ordering::Relaxed) % LIVE_PROBES.min(created);
                        let actor = name(created - 1 - k);
                        let t = Instant::now();
                        let reply = post(&client, ingress, &actor).await;
                        let elapsed = t.elapsed();
                        if reply.status == 200 {
                            live_ms.lock().unwrap().push(elapsed.as_secs_f64() * 1e3);
                        } else {
                            live_failures.record(&actor, reply.status, &reply.body);
                        }
                        total += elapsed;
                    }
                    total
                }
            });
        });
        println!(
            "live-summary: actors={created} client_ms {} | {}",
            summary(&live_ms.lock().unwrap()),
            live_failures.report()
        );
    }
    group.finish();
    let (rss, hwm, maps) = serve.memory();
    println!(
        "density: reached {created} of {} actors (max-live {}); final rss_mib={:.1} hwm_mib={:.1} maps={maps}; \
         creation {:.0} s",
        config.actors,
        config.max_live,
        rss as f64 / MIB,
        hwm as f64 / MIB,
        creating.as_secs_f64()
    );
    drop(serve);
    let cleanup = Instant::now();
    drop(tmp);
    c.final_summary();
    println!(
        "density bench finished in {:.1} s (data dir removed in {:.1} s)",
        started.elapsed().as_secs_f64(),
        cleanup.elapsed().as_secs_f64()
    );
}
