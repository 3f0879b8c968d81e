//! Chain benchmark (issue 29, the 110 MiB targets of "What must be
//! shown"): what a big actor's snapshot chain costs at durability level
//! `request` (the default), through the real `stasis serve --workers 1`
//! on loopback, client-observed, beside a small actor in the same run. Two
//! `kv` actors as in `benches/scale.rs`: `small` without preload (about
//! 1 MiB of linear memory, the baseline) and `big` with
//! `KV_PRELOAD=1000000` (about 110 MiB). Three measurements, each printing
//! `chain:` lines (no criterion: each sample depends on where the actor's
//! chain stands, which criterion's repeated iterations would blur):
//!
//! 1. `bytes`: `STASIS_CHAIN_REQUESTS` sequential `PUT`s to a running
//!    actor, each changing one key (`same`: the same key every time, as in
//!    section 15; `spread`: a different preloaded key each time). Reported
//!    per request: the journal's record bytes, entries and group commits
//!    (`stasis_journal_*_total` on `/metrics`), the snapshot files that
//!    seals and merges wrote meanwhile (the actor's snapshot folder listed
//!    after every request, each new file counted by its size), what the
//!    server process had the kernel account as written (`write_bytes` of
//!    `/proc/PID/io`, whole page-cache folios) and the sectors written to
//!    the data dir's block device by every process. Target: ≤ 16 KiB per
//!    request for the big actor.
//! 2. `pause`: pause + resume cycles, small and big interleaved, over
//!    `STASIS_CHAIN_CHAINS` whole chains of the big actor (from its depth
//!    limit, `MAX_DELTA_DEPTH` = 8, through that many merges back to it):
//!    one `PUT` (it resumes the actor: timed as `resume+PUT`), then `POST
//!    /v1/actors/NAME/pause` (timed); the depth of the snapshot each pause
//!    left is read from its file. Target: the big actor's mean pause over
//!    whole chains ≤ 5× the small one's.
//! 3. `fork`: forks of the *running* big (and small) actor at every point
//!    of its chain, `STASIS_CHAIN_CHAINS` × 8 + 1 forks: `put`: one `PUT`,
//!    then the timed `POST /v1/actors/NAME/fork` (its checkpoint seals the
//!    `PUT`'s journal entry); `idle`: forks back to back (each checkpoint
//!    captures the live instance itself). The depth of the checkpoint each
//!    fork took is read from its file; a depth not above the previous one
//!    is a merge (`8->merged->N`). Target: ≤ 50 ms at every point.
//!
//! The actors go through these states, each measurement's lines tagged
//! with it: `fresh` (the big actor never paused since its create: every
//! page its preload wrote is anonymous memory that dirty tracking
//! reports), `resumed` and `one-key` (paused once, then restored from its
//! chain; only the same key changed), `after-spread` (after the `spread`
//! run: thousands of pages changed since the chain's root).
//!
//! The bench checks status codes and read-back values, never timings.
//! Knobs: `STASIS_CHAIN_PRELOAD` (1000000, or 10000 in test mode),
//! `STASIS_CHAIN_REQUESTS` (2000, or 20) and `STASIS_CHAIN_CHAINS` (3, or
//! 1). Results: BENCHMARKS.md, section 18.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};
use stasis_core::snapshot::{MAX_DELTA_DEPTH, peek_header};
use stasis_test_util::admin::{self, call_ok};
use stasis_test_util::bench::{self, test_mode};
use stasis_test_util::http::{Http, actor_host, client, send};
use stasis_test_util::stats::percentile;
use stasis_test_util::{Artifacts, artifacts};

/// The `stasis` binary and the demo actors.
const STASIS: Artifacts = artifacts!();

const KIB: f64 = 1024.0;
const MIB: f64 = (1 << 20) as f64;

/// The key every `same` request changes.
const KEY: &str = "/chain-key";

/// The targets.
const BYTES_PER_REQUEST: f64 = 16.0 * KIB;
const PAUSE_RATIO: f64 = 5.0;
const FORK_MS: f64 = 50.0;

/// A numeric knob from the environment (`_` allowed as a separator), or
/// `default`.
fn knob(name: &str, default: usize) -> usize {
    std::env::var(name).ok().map_or(default, |v| {
        v.replace('_', "")
            .parse()
            .unwrap_or_else(|e| panic!("{name}={v}: {e}"))
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mean(samples: &[f64]) -> f64 {
    samples.iter().sum::<f64>() / samples.len().max(1) as f64
}

/// `met` or `MISSED` for a figure against its upper bound.
fn verdict(value: f64, target: f64) -> &'static str {
    if value <= target { "met" } else { "MISSED" }
}

/// The server, its data dir and the client talking to it.
struct Bench {
    client: Http,
    ingress: SocketAddr,
    admin: SocketAddr,
    pid: u32,
    data: PathBuf,
    puts: usize,
    forks: usize,
}

impl Bench {
    /// `PUT path` with a new 32-byte value (the value's size never
    /// changes), asserting 200 or 201; how long it took.
    async fn put(&mut self, actor: &str, path: &str) -> Duration {
        self.puts += 1;
        let value = format!("{:032}", self.puts);
        let started = Instant::now();
        let reply = send(
            &self.client,
            self.ingress,
            "PUT",
            &actor_host(actor),
            path,
            Bytes::from(value),
        )
        .await;
        let took = started.elapsed();
        assert!(
            reply.status == 200 || reply.status == 201,
            "PUT {actor} {path}: {} {}",
            reply.status,
            reply.text()
        );
        took
    }

    /// `GET path`, asserting it holds the value last put.
    async fn check(&self, actor: &str, path: &str) {
        let reply = send(
            &self.client,
            self.ingress,
            "GET",
            &actor_host(actor),
            path,
            Bytes::new(),
        )
        .await;
        assert_eq!(reply.status, 200, "GET {actor} {path}: {}", reply.text());
        assert_eq!(reply.text(), format!("{:032}", self.puts), "GET {path}");
    }

    /// `POST /v1/actors/NAME/pause` (200, `paused`): the answer and how
    /// long it took.
    async fn pause(&self, actor: &str) -> (Value, Duration) {
        let path = format!("/v1/actors/{actor}/pause");
        let started = Instant::now();
        let reply = admin::call(&self.client, self.admin, "POST", &path, None).await;
        let took = started.elapsed();
        let answer = reply.ok(&format!("pause {actor}")).json();
        assert_eq!(answer["state"], "paused", "pause {actor}: {answer}");
        (answer, took)
    }

    /// A fork of `actor` as a new actor (201), timed.
    async fn fork(&mut self, actor: &str) -> Duration {
        self.forks += 1;
        let path = format!("/v1/actors/{actor}/fork");
        let body = json!({ "name": format!("f-{actor}-{}", self.forks) });
        let started = Instant::now();
        let reply = admin::call(&self.client, self.admin, "POST", &path, Some(&body)).await;
        let took = started.elapsed();
        assert_eq!(reply.status, 201, "fork {actor}: {}", reply.text());
        took
    }

    /// The actor's view (`GET /v1/actors/NAME`).
    async fn view(&self, actor: &str) -> Value {
        let path = format!("/v1/actors/{actor}");
        call_ok(&self.client, self.admin, "GET", &path, None).await
    }

    /// A counter or gauge of `/metrics` (0 if absent).
    async fn metric(&self, name: &str) -> f64 {
        let reply = admin::call(&self.client, self.admin, "GET", "/metrics", None).await;
        reply
            .text()
            .lines()
            .find_map(|line| {
                let (key, value) = line.split_once(' ')?;
                (key == name).then(|| value.trim().parse().ok()).flatten()
            })
            .unwrap_or(0.0)
    }

    /// `write_bytes` of the server process (`/proc/PID/io`): bytes it had
    /// the kernel write to storage.
    fn write_bytes(&self) -> u64 {
        let io = std::fs::read_to_string(format!("/proc/{}/io", self.pid)).expect("/proc/PID/io");
        io.lines()
            .find_map(|l| l.strip_prefix("write_bytes: "))
            .and_then(|v| v.trim().parse().ok())
            .expect("write_bytes")
    }

    /// Sectors (512 B) written to the block device holding the data dir,
    /// by every process (`/sys/dev/block/MAJOR:MINOR/stat`); 0 when not
    /// readable.
    fn device_sectors_written(&self) -> u64 {
        use std::os::unix::fs::MetadataExt as _;
        let dev = std::fs::metadata(&self.data).map_or(0, |m| m.dev());
        let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
        let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
        std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/stat"))
            .ok()
            .and_then(|stat| stat.split_whitespace().nth(6)?.parse().ok())
            .unwrap_or(0)
    }

    fn actor_dir(&self, actor: &str) -> PathBuf {
        self.data.join("snapshots").join(actor)
    }

    /// The actor's snapshot files: name → size.
    fn files(&self, actor: &str) -> BTreeMap<String, u64> {
        let Ok(dir) = std::fs::read_dir(self.actor_dir(actor)) else {
            return BTreeMap::new();
        };
        dir.flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let len = e.metadata().ok()?.len();
                name.ends_with(".snap").then_some((name, len))
            })
            .collect()
    }

    /// The chain depth of the actor's newest snapshot (0: full) and its
    /// size.
    async fn newest_depth(&self, actor: &str) -> (u32, u64) {
        let view = self.view(actor).await;
        let seq = view["snapshot"]["seq"].as_u64().expect("snapshot seq");
        depth_of(&self.actor_dir(actor).join(format!("{seq:020}.snap")))
    }
}

/// The chain depth of a snapshot file (0: full) and its size.
fn depth_of(path: &Path) -> (u32, u64) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let header = peek_header(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (header.base.map_or(0, |b| b.depth), bytes.len() as u64)
}

/// Measurement 1 for one actor and key pattern.
async fn bytes_per_request(
    b: &mut Bench,
    state: &str,
    actor: &str,
    spread: bool,
    requests: usize,
    keys: usize,
) {
    let path = |i: usize| {
        if spread {
            // A different preloaded key each time, far apart in the map.
            format!("/k{}", (i * 7_919) % keys.max(1))
        } else {
            KEY.to_owned()
        }
    };
    // Running, with the first key, outside the count.
    b.put(actor, &path(0)).await;
    let entries0 = b.metric("stasis_journal_entries_total").await;
    let bytes0 = b.metric("stasis_journal_bytes_total").await;
    let syncs0 = b.metric("stasis_journal_syncs_total").await;
    let disk0 = b.write_bytes();
    let device0 = b.device_sectors_written();
    let mut seen: HashSet<String> = b.files(actor).into_keys().collect();
    let (mut sealed, mut sealed_bytes) = (0u64, 0u64);
    let mut took = Vec::with_capacity(requests);
    for i in 1..=requests {
        took.push(ms(b.put(actor, &path(i)).await));
        for (name, len) in b.files(actor) {
            if seen.insert(name) {
                sealed += 1;
                sealed_bytes += len;
            }
        }
    }
    let entries = b.metric("stasis_journal_entries_total").await - entries0;
    let journal = b.metric("stasis_journal_bytes_total").await - bytes0;
    let syncs = b.metric("stasis_journal_syncs_total").await - syncs0;
    let disk = (b.write_bytes() - disk0) as f64;
    let device = (b.device_sectors_written() - device0) as f64 * 512.0;
    b.check(actor, &path(requests)).await;
    let n = requests as f64;
    let journal_per = journal / n;
    let total_per = (journal + sealed_bytes as f64) / n;
    let keys = if spread { "spread" } else { "same" };
    println!(
        "chain: bytes [{state}] {actor} {keys}: {requests} PUTs (p50 {:.3} ms); journal {entries:.0} entries, \
         {journal:.0} B, {syncs:.0} fdatasyncs; {sealed} snapshot files, {sealed_bytes} B; \
         per request: journal {:.2} KiB, journal+snapshots {:.2} KiB (target <= 16 KiB: {}), \
         process write_bytes {:.2} KiB, data dir's device (all processes) {:.2} KiB",
        percentile(&took, 50.0),
        journal_per / KIB,
        total_per / KIB,
        verdict(total_per, BYTES_PER_REQUEST),
        disk / n / KIB,
        device / n / KIB,
    );
}

/// One pause + resume cycle: (depth of the snapshot the pause left, its
/// size, `bytes_written`, resume+PUT ms, pause ms).
async fn cycle(b: &mut Bench, actor: &str) -> (u32, u64, u64, f64, f64) {
    let put = b.put(actor, KEY).await;
    let (answer, took) = b.pause(actor).await;
    let written = answer["bytes_written"].as_u64().expect("bytes_written");
    let (depth, size) = b.newest_depth(actor).await;
    (depth, size, written, ms(put), ms(took))
}

/// Measurement 2: whole chains of pause + resume cycles, small and big
/// interleaved: from right after the big actor's chain reached its depth
/// limit, until `chains` merges later it reaches the limit again.
async fn amortised_pause(b: &mut Bench, state: &str, chains: usize) {
    let limit = MAX_DELTA_DEPTH;
    // Align the big actor: cycle until its newest snapshot is the chain's
    // last link, so the measured run starts with a merge.
    for _ in 0..=limit {
        let (depth, ..) = cycle(b, "big").await;
        if depth == limit {
            break;
        }
    }
    let (mut pauses, mut resumes) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    let mut written = [0u64, 0u64];
    let (mut merges, mut previous) = (0, limit);
    let mut i = 0;
    while merges < chains || previous != limit {
        for (a, actor) in ["small", "big"].into_iter().enumerate() {
            let (depth, size, wrote, put, pause) = cycle(b, actor).await;
            pauses[a].push(pause);
            resumes[a].push(put);
            written[a] += wrote;
            println!(
                "chain: pause [{state}] {actor} #{i}: depth {depth} ({size} B), bytes_written \
                 {wrote}, resume+PUT {put:.3} ms, pause {pause:.3} ms"
            );
            if actor == "big" {
                merges += usize::from(depth <= previous);
                previous = depth;
            }
        }
        i += 1;
        assert!(i <= 4 * chains * limit as usize, "no merge in {i} pauses");
    }
    let [small, big] = [mean(&pauses[0]), mean(&pauses[1])];
    let [small_cycle, big_cycle] = [0, 1].map(|a| mean(&pauses[a]) + mean(&resumes[a]));
    let n = i as f64;
    println!(
        "chain: pause [{state}] amortised over {chains} whole chain(s) ({i} pauses, {merges} \
         merges): small mean {small:.3} ms (p50 {:.3}), big mean {big:.3} ms (p50 {:.3}, max \
         {:.3}); ratio {:.2}x (target <= {PAUSE_RATIO}x: {}); pause+resume cycle small \
         {small_cycle:.3} ms, big {big_cycle:.3} ms, ratio {:.2}x; bytes_written per pause small \
         {:.0} B, big {:.0} B",
        percentile(&pauses[0], 50.0),
        percentile(&pauses[1], 50.0),
        percentile(&pauses[1], 100.0),
        big / small,
        verdict(big / small, PAUSE_RATIO),
        big_cycle / small_cycle,
        written[0] as f64 / n,
        written[1] as f64 / n,
    );
}

/// Measurement 3: forks of the running `actor` at every point of its
/// chain; `put` says whether a `PUT` comes before each fork.
async fn forks_along_the_chain(b: &mut Bench, state: &str, actor: &str, put: bool, chains: usize) {
    let mode = if put { "put" } else { "idle" };
    b.put(actor, KEY).await;
    let mut by_depth: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut all = Vec::new();
    let mut previous = b.newest_depth(actor).await.0;
    let mut puts = Vec::new();
    for i in 0..chains * MAX_DELTA_DEPTH as usize + 1 {
        let put_ms = if put {
            ms(b.put(actor, KEY).await)
        } else {
            0.0
        };
        let took = ms(b.fork(actor).await);
        let (depth, size) = b.newest_depth(actor).await;
        // A merge leaves a delta on the root (depth 1); the request before
        // the fork may have taken it already (a merged entry past 64 KiB
        // is sealed at once), so the checkpoint lands one deeper.
        let point = if depth <= previous && previous > 0 {
            format!("{previous}->merged->{depth}")
        } else {
            format!("{previous}->{depth}")
        };
        println!(
            "chain: fork [{state}] {mode} {actor} #{i}: checkpoint {point} ({size} B), fork {took:.3} ms, \
             PUT before it {put_ms:.3} ms"
        );
        by_depth.entry(point).or_default().push(took);
        all.push(took);
        puts.push(put_ms);
        previous = depth;
    }
    let points: Vec<String> = by_depth
        .iter()
        .map(|(point, t)| format!("{point}: {:.3}", mean(t)))
        .collect();
    let worst = percentile(&all, 100.0);
    println!(
        "chain: fork [{state}] {mode} {actor}: mean ms by chain point [{}]; p50 {:.3} ms, max {worst:.3} ms \
         (target <= {FORK_MS} ms at every point: {}); PUTs before the forks: p50 {:.3} ms, \
         max {:.3} ms",
        points.join(", "),
        percentile(&all, 50.0),
        verdict(worst, FORK_MS),
        percentile(&puts, 50.0),
        percentile(&puts, 100.0),
    );
}

fn main() {
    let preload = knob(
        "STASIS_CHAIN_PRELOAD",
        if test_mode() { 10_000 } else { 1_000_000 },
    );
    let requests = knob(
        "STASIS_CHAIN_REQUESTS",
        if test_mode() { 20 } else { 2_000 },
    )
    .max(1);
    let chains = knob("STASIS_CHAIN_CHAINS", if test_mode() { 1 } else { 3 }).max(1);
    let rt = stasis_test_util::bench::runtime();
    let tmp = tempfile::Builder::new()
        .prefix("stasis-chain-")
        .tempdir()
        .expect("tempdir");
    let data = tmp.path().join("data");
    // The default durability level (`request`); the big actor's preload
    // runs inside its create, past the default 1 s of guest time on a
    // loaded machine.
    let serve = bench::serve(&STASIS, &data, &["--workers", "1", "--cpu-limit", "30s"]);
    let mut b = Bench {
        client: {
            let _guard = rt.enter();
            client()
        },
        ingress: serve.addr("ingress="),
        admin: serve.addr("admin="),
        pid: serve.pid(),
        data,
        puts: 0,
        forks: 0,
    };
    let started = Instant::now();
    rt.block_on(async {
        let (http, addr) = (&b.client, b.admin);
        admin::push_template(http, addr, "small", STASIS.demo_wasm("kv")).await;
        let env = [("KV_PRELOAD", preload.to_string())];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        admin::push_template_env(http, addr, "big", STASIS.demo_wasm("kv"), &env).await;
        for actor in ["small", "big"] {
            let _ = admin::create_actor(http, addr, actor, actor)
                .await
                .ok(&format!("create {actor}"));
        }
        for actor in ["small", "big"] {
            b.put(actor, KEY).await;
            let memory = b.view(actor).await["memory_bytes"].as_u64().unwrap_or(0);
            let (depth, size) = b.newest_depth(actor).await;
            println!(
                "chain: setup: {actor} memory_bytes {:.1} MiB, newest snapshot depth {depth}, \
                 {:.1} MiB (KV_PRELOAD {})",
                memory as f64 / MIB,
                size as f64 / MIB,
                if actor == "big" { preload } else { 0 },
            );
        }
        // Never paused since its create: every page the preload wrote is
        // anonymous memory, so dirty tracking reports all of them.
        let fresh = (requests / 10).max(1);
        bytes_per_request(&mut b, "fresh", "big", false, fresh, preload).await;
        // From here on both actors run restored from their chains.
        for actor in ["small", "big"] {
            b.pause(actor).await;
        }
        for actor in ["small", "big"] {
            bytes_per_request(&mut b, "resumed", actor, false, requests, preload).await;
        }
        amortised_pause(&mut b, "one-key", chains).await;
        for put in [true, false] {
            for actor in ["small", "big"] {
                forks_along_the_chain(&mut b, "one-key", actor, put, chains).await;
            }
        }
        // A different key each request: the pages changed since the root
        // snapshot pile up in the chain (and in its merges).
        bytes_per_request(&mut b, "resumed", "big", true, requests, preload).await;
        amortised_pause(&mut b, "after-spread", chains).await;
        for put in [true, false] {
            forks_along_the_chain(&mut b, "after-spread", "big", put, chains).await;
        }
    });
    println!(
        "chain: {} PUTs, {} forks, {:.1} s",
        b.puts,
        b.forks,
        started.elapsed().as_secs_f64()
    );
    drop(serve);
}
