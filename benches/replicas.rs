//! Cluster-mode benchmarks (issue 12, "Performance"), against the real
//! `stasis` binary on loopback, each next to the embedded baseline (plain
//! `stasis serve`: SQLite and the data dir, its 2 in-process workers) of the
//! same run:
//!
//! * `first_request_after_pause/<mode>`: a counter is paused (admin API,
//!   untimed), then the first `POST /` that resumes it is timed. Modes:
//!   `embedded`; `etcd+file` (3 etcd members, `--snapshot-store
//!   file:///...`, one replica, one worker); `etcd+s3/cache-hit` (3 etcd
//!   members, a real `s3s-fs`, one replica, two workers: the actor resumes
//!   on the worker that paused it, whose snapshot cache holds the file);
//!   `etcd+s3/cache-miss` (same, but the actor's folder in that worker's
//!   snapshot cache, `<data-dir>/snapshot-cache/snapshots/<actor>/`, is
//!   deleted after the pause, so the resume lists the store and downloads
//!   the snapshot; the bench checks the folder existed before and exists
//!   again after). A paused actor's move is no cache miss: the target
//!   downloads and verifies the snapshot while installing it, inside the
//!   move, so the first request after a move finds it cached. Each mode
//!   also times the next `POST /` on the awake actor
//!   (`<mode>:next_request`: what any request costs there, the hop and
//!   the journal's write), so the wake's own part is the difference.
//! * `creates/<embedded|etcd3>`: `POST /v1/actors` of new counters, one at
//!   a time (the control plane serialises creates); criterion reports
//!   creates/s. `etcd3` is the S3 deployment above.
//! * `placements/<embedded|etcd3>`: `POST /v1/actors/{name}/migrate` of
//!   paused counters back and forth between two workers, one at a time;
//!   criterion reports moves/s.
//! * `replacement_after_kill/N=<n>`: a fresh S3 deployment (3 etcd members,
//!   one replica, two workers, the default `--lease-ttl` of 3 s); `n`
//!   paused counters are put on one worker, which gets `kill -9`; timed from
//!   the kill until every one of them has answered a `POST /` through the
//!   replica (sequentially, each retried every 25 ms until it answers 200).
//!   Each kill costs a lease TTL, so this is not a criterion benchmark (its
//!   minimum of 10 samples would take minutes): a few kills per `n`, printed
//!   as `replacement-summary:` lines. After each kill the actors are deleted
//!   and a new worker joins, so the next kill starts from two workers again.
//!
//! Every timed operation is also recorded and printed as a `…-summary:`
//! line (p50/p99 of every sample, warm-up included), with ratios to the
//! embedded figure of the same run. In criterion's test mode (`cargo test
//! --benches`, or any run without `--bench`) each benchmark runs once and
//! `replacement_after_kill` makes one kill of 2 actors. A filter argument
//! (`cargo bench --bench replicas -- creates`) also skips the set-up of
//! the groups it does not match (substring match on the group name).
//! Results: BENCHMARKS.md, section 9.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, SamplingMode, Throughput};
use serde_json::{Value, json};
use stasis_test_util::admin::{self, call_ok};
use stasis_test_util::bench::{self, test_mode};
use stasis_test_util::cluster::{Deployment, Setup, Store};
use stasis_test_util::http::{Http, actor_host, client, send};
use stasis_test_util::stats::{percentile, summary};
use stasis_test_util::{Artifacts, Proc, artifacts};
use tokio::runtime::Runtime;

/// The `stasis` binary and the demo actors.
const STASIS: Artifacts = artifacts!();

/// etcd members of every cluster deployment.
const MEMBERS: usize = 3;

/// Paused counters the placement benchmark moves round robin.
const MOVERS: usize = 8;

/// How long one attempt to reach an actor after a kill may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long every actor may take to answer again after a kill.
const REPLACEMENT_TIMEOUT: Duration = Duration::from_secs(90);

/// Retry interval while an actor does not answer after a kill.
const RETRY: Duration = Duration::from_millis(25);

// ---- the systems under test ---------------------------------------------------

/// Where a benchmark sends admin calls and actor requests, and which
/// workers it may move actors between.
struct Target {
    admin: SocketAddr,
    ingress: SocketAddr,
    workers: [&'static str; 2],
}

/// Plain `stasis serve` (embedded directory and store, 2 in-process
/// workers): the baseline.
struct Embedded {
    process: Proc,
    _dir: tempfile::TempDir,
}

impl Embedded {
    fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("stasis-bench-replicas-")
            .tempdir()
            .expect("tempdir");
        let process = bench::serve(&STASIS, &dir.path().join("data"), &[]);
        Self { process, _dir: dir }
    }

    fn target(&self) -> Target {
        Target {
            admin: self.process.addr("admin="),
            ingress: self.process.addr("ingress="),
            workers: ["worker-1", "worker-2"],
        }
    }
}

/// The lease TTL of the bench clusters (the figures in BENCHMARKS.md were
/// taken with it; the binary's default is 10 s).
const LEASE_TTL: &str = "3s";

/// A cluster deployment for the benches: `MEMBERS` etcd members, one
/// replica, `workers` workers, leases of [`LEASE_TTL`], logging as
/// [`bench::LOG_VAR`] says.
fn cluster(store: Store, workers: usize) -> Deployment {
    let mut setup = Setup::new(MEMBERS, 1, workers);
    setup.store = store;
    setup.lease_ttl = Some(LEASE_TTL.to_owned());
    let level = std::env::var(bench::LOG_VAR).ok();
    setup.echo = level.is_some();
    setup.log = level.unwrap_or_else(|| "warn".to_owned());
    Deployment::start(STASIS, setup)
}

fn cluster_target(d: &Deployment) -> Target {
    Target {
        admin: d.replica(0).admin,
        ingress: d.replica(0).ingress,
        workers: ["w1", "w2"],
    }
}

/// The filter criterion was given (the first argument that is not a
/// flag), if any.
fn filter() -> Option<String> {
    std::env::args().skip(1).find(|a| !a.starts_with('-'))
}

/// Whether group `name` matches the filter (substring either way, so
/// `creates` and `creates/etcd3` both select `creates`).
fn wanted(name: &str) -> bool {
    filter().is_none_or(|f| name.contains(&f) || f.contains(name))
}

// ---- admin calls and requests -------------------------------------------------

async fn create(client: &Http, t: &Target, actor: &str) -> Value {
    admin::create_actor(client, t.admin, actor, "counter")
        .await
        .ok(&format!("create {actor}"))
        .json()
}

async fn pause(client: &Http, t: &Target, actor: &str) {
    let answer = call_ok(
        client,
        t.admin,
        "POST",
        &format!("/v1/actors/{actor}/pause"),
        None,
    )
    .await;
    assert_eq!(answer["state"], "paused", "pause {actor}: {answer}");
}

async fn actor_info(client: &Http, t: &Target, actor: &str) -> Value {
    call_ok(client, t.admin, "GET", &format!("/v1/actors/{actor}"), None).await
}

/// One move; the answer's `downtime_ms`.
async fn migrate(client: &Http, t: &Target, actor: &str, to: &str) -> f64 {
    let answer = call_ok(
        client,
        t.admin,
        "POST",
        &format!("/v1/actors/{actor}/migrate"),
        Some(&json!({ "to": to })),
    )
    .await;
    assert_eq!(answer["worker"], to, "migrate {actor}: {answer}");
    answer["downtime_ms"].as_f64().unwrap_or(f64::NAN)
}

/// `POST /` to counter `actor` through the ingress; its status.
async fn post(client: &Http, t: &Target, actor: &str) -> u16 {
    let host = actor_host(actor);
    send(client, t.ingress, "POST", &host, "/", Bytes::new())
        .await
        .status
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Samples in ms of each benchmark, by name, for the summary lines.
#[derive(Default)]
struct Samples(Mutex<BTreeMap<String, Vec<f64>>>);

impl Samples {
    fn add(&self, name: &str, value_ms: f64) {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        all.entry(name.to_owned()).or_default().push(value_ms);
    }

    fn get(&self, name: &str) -> Vec<f64> {
        let all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        all.get(name).cloned().unwrap_or_default()
    }

    /// Prints `<kind>-summary: <name> …` for every name starting with
    /// `prefix`, and its p50 ratio to `<prefix>embedded` (for
    /// `<name>:<what>`, to `<prefix>embedded:<what>`).
    fn report(&self, kind: &str, prefix: &str) {
        let names: Vec<String> = {
            let all = self.0.lock().unwrap_or_else(|p| p.into_inner());
            all.keys()
                .filter(|n| n.starts_with(prefix))
                .cloned()
                .collect()
        };
        for name in names {
            let samples = self.get(&name);
            let what = name
                .split_once(':')
                .map_or(String::new(), |(_, w)| format!(":{w}"));
            let baseline = percentile(&self.get(&format!("{prefix}embedded{what}")), 50.0);
            let p50 = percentile(&samples, 50.0);
            println!(
                "{kind}-summary: {name} ms {} | p50 ratio to embedded {:.2}x",
                summary(&samples),
                p50 / baseline
            );
        }
    }
}

// ---- 1. first request after a pause -------------------------------------------

/// One mode of `first_request_after_pause`.
struct Run<'a> {
    label: &'static str,
    target: &'a Target,
    actor: &'static str,
    /// The actor's folder in its worker's snapshot cache, deleted after
    /// each pause (`etcd+s3/cache-miss`).
    drop_cache: Option<PathBuf>,
}

fn bench_first_request(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    rt: &Runtime,
    client: &Http,
    samples: &Arc<Samples>,
    run: Run<'_>,
) {
    let Run {
        label,
        target: t,
        actor,
        drop_cache: cache,
    } = run;
    let name = format!("first_request_after_pause/{label}");
    let resume_name = format!("{name}:server_resume");
    let next_name = format!("{name}:next_request");
    rt.block_on(async {
        assert_eq!(post(client, t, actor).await, 200, "warm {actor}");
    });
    group.bench_function(label, |b| {
        b.to_async(rt).iter_custom(|iters| {
            let (client, samples, cache) = (client.clone(), samples.clone(), cache.clone());
            let (name, resume_name, next_name) =
                (name.clone(), resume_name.clone(), next_name.clone());
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    pause(&client, t, actor).await;
                    if let Some(folder) = &cache {
                        // The pause wrote the snapshot through this cache.
                        assert!(folder.is_dir(), "no cache folder {}", folder.display());
                        std::fs::remove_dir_all(folder).expect("drop the cache folder");
                    }
                    let started = Instant::now();
                    let status = post(&client, t, actor).await;
                    let elapsed = started.elapsed();
                    assert_eq!(status, 200, "first POST to {actor} after its pause");
                    if let Some(folder) = &cache {
                        // The resume downloaded the snapshot into it again.
                        assert!(
                            folder.is_dir(),
                            "resume did not download into {}",
                            folder.display()
                        );
                    }
                    total += elapsed;
                    samples.add(&name, ms(elapsed));
                    // The same request on the awake actor: what any request
                    // costs in this mode (the hop, the journal's write),
                    // so the wake's own part is the difference.
                    let started = Instant::now();
                    let status = post(&client, t, actor).await;
                    assert_eq!(status, 200, "second POST to {actor} after its pause");
                    samples.add(&next_name, ms(started.elapsed()));
                    let info = actor_info(&client, t, actor).await;
                    if let Some(resume) = info["last_resume_ms"].as_f64() {
                        samples.add(&resume_name, resume);
                    }
                }
                total
            }
        });
    });
}

fn first_request(c: &mut Criterion, rt: &Runtime, client: &Http, envs: &Envs) {
    let samples = Arc::new(Samples::default());
    let mut group = c.benchmark_group("first_request_after_pause");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    let embedded = envs.embedded.target();
    let file = cluster_target(envs.file.as_ref().expect("file deployment"));
    let s3 = envs.s3.as_ref().expect("s3 deployment");
    let s3_target = cluster_target(s3);
    let (hit, miss) = ("fr-hit", "fr-miss");
    rt.block_on(async {
        admin::push_template(
            client,
            embedded.admin,
            "counter",
            STASIS.demo_wasm("counter"),
        )
        .await;
        admin::push_template(client, file.admin, "counter", STASIS.demo_wasm("counter")).await;
        admin::push_template(
            client,
            s3_target.admin,
            "counter",
            STASIS.demo_wasm("counter"),
        )
        .await;
        create(client, &embedded, "fr").await;
        create(client, &file, "fr").await;
        create(client, &s3_target, hit).await;
        create(client, &s3_target, miss).await;
    });
    let worker_of = |actor: &str| {
        let info = rt.block_on(actor_info(client, &s3_target, actor));
        info["worker"].as_str().expect("worker").to_owned()
    };
    let miss_worker = worker_of(miss);
    let miss_cache = s3
        .worker(&miss_worker)
        .data_dir
        .join("snapshot-cache/snapshots")
        .join(miss);
    let runs = [
        ("embedded", &embedded, "fr", None),
        ("etcd+file", &file, "fr", None),
        ("etcd+s3/cache-hit", &s3_target, hit, None),
        ("etcd+s3/cache-miss", &s3_target, miss, Some(miss_cache)),
    ];
    for (label, target, actor, drop_cache) in runs {
        let run = Run {
            label,
            target,
            actor,
            drop_cache,
        };
        bench_first_request(&mut group, rt, client, &samples, run);
    }
    group.finish();
    // Each actor stayed where it was paused: no cache hit came from a move.
    assert_eq!(
        worker_of(miss),
        miss_worker,
        "{miss} moved during the bench"
    );
    samples.report("first-request", "first_request_after_pause/");
}

// ---- 2. creates/s and placements/s --------------------------------------------

fn creates(c: &mut Criterion, rt: &Runtime, client: &Http, envs: &Envs) {
    let samples = Arc::new(Samples::default());
    let mut group = c.benchmark_group("creates");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Elements(1));
    let s3 = envs.s3.as_ref().expect("s3 deployment");
    for (mode, t) in [
        ("embedded", envs.embedded.target()),
        ("etcd3", cluster_target(s3)),
    ] {
        rt.block_on(admin::push_template(
            client,
            t.admin,
            "counter",
            STASIS.demo_wasm("counter"),
        ));
        let next = Arc::new(Mutex::new(0u64));
        let name = format!("creates/{mode}");
        let t = &t;
        group.bench_function(mode, |b| {
            b.to_async(rt).iter_custom(|iters| {
                let (client, samples, next, name) =
                    (client.clone(), samples.clone(), next.clone(), name.clone());
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let n = {
                            let mut next = next.lock().unwrap_or_else(|p| p.into_inner());
                            *next += 1;
                            *next
                        };
                        let started = Instant::now();
                        create(&client, t, &format!("cr-{n}")).await;
                        let elapsed = started.elapsed();
                        total += elapsed;
                        samples.add(&name, ms(elapsed));
                    }
                    total
                }
            });
        });
        let made = *next.lock().unwrap_or_else(|p| p.into_inner());
        println!("creates: {mode}: {made} actors created");
    }
    group.finish();
    samples.report("creates", "creates/");
}

fn placements(c: &mut Criterion, rt: &Runtime, client: &Http, envs: &Envs) {
    let samples = Arc::new(Samples::default());
    let mut group = c.benchmark_group("placements");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Elements(1));
    let s3 = envs.s3.as_ref().expect("s3 deployment");
    for (mode, t) in [
        ("embedded", envs.embedded.target()),
        ("etcd3", cluster_target(s3)),
    ] {
        let t = &t;
        // Paused counters, each with its current worker.
        let movers: Vec<(String, String)> = rt.block_on(async {
            admin::push_template(client, t.admin, "counter", STASIS.demo_wasm("counter")).await;
            let mut movers = Vec::new();
            for i in 0..MOVERS {
                let actor = format!("mv-{i}");
                let info = create(client, t, &actor).await;
                assert_eq!(post(client, t, &actor).await, 200);
                pause(client, t, &actor).await;
                let worker = info["worker"].as_str().expect("worker").to_owned();
                movers.push((actor, worker));
            }
            movers
        });
        let movers = Arc::new(Mutex::new(movers));
        let turn = Arc::new(Mutex::new(0usize));
        let name = format!("placements/{mode}");
        let downtime_name = format!("{name}:server_downtime");
        group.bench_function(mode, |b| {
            b.to_async(rt).iter_custom(|iters| {
                let (client, samples, movers, turn) = (
                    client.clone(),
                    samples.clone(),
                    movers.clone(),
                    turn.clone(),
                );
                let (name, downtime_name) = (name.clone(), downtime_name.clone());
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let (actor, to) = {
                            let mut turn = turn.lock().unwrap_or_else(|p| p.into_inner());
                            let mut movers = movers.lock().unwrap_or_else(|p| p.into_inner());
                            let index = *turn % movers.len();
                            *turn += 1;
                            let (actor, at) = &mut movers[index];
                            let to = if at == t.workers[0] {
                                t.workers[1]
                            } else {
                                t.workers[0]
                            };
                            *at = to.to_owned();
                            (actor.clone(), to)
                        };
                        let started = Instant::now();
                        let downtime = migrate(&client, t, &actor, to).await;
                        let elapsed = started.elapsed();
                        total += elapsed;
                        samples.add(&name, ms(elapsed));
                        samples.add(&downtime_name, downtime);
                    }
                    total
                }
            });
        });
        // The moves kept every actor paused and its state: one more POST
        // counts 2.
        rt.block_on(async {
            let movers = movers.lock().unwrap_or_else(|p| p.into_inner()).clone();
            for (actor, _) in &movers {
                let info = actor_info(client, t, actor).await;
                assert_eq!(info["state"], "paused", "{actor} after the moves: {info}");
            }
            let reply = send(
                client,
                t.ingress,
                "POST",
                &actor_host("mv-0"),
                "/",
                Bytes::new(),
            )
            .await;
            assert_eq!(reply.status, 200);
            let count = stasis_test_util::demos::count_in(&reply.text());
            assert_eq!(count, Some(2), "mv-0 lost its state: {}", reply.text());
        });
    }
    group.finish();
    samples.report("placements", "placements/");
}

// ---- 3. re-placement after kill -9 --------------------------------------------

/// One kill: `n` paused counters on worker `victim`, `kill -9`, then every
/// one asked until it answers. (ms until the first answered, ms until all
/// had.)
fn one_kill(
    rt: &Runtime,
    client: &Http,
    d: &mut Deployment,
    victim: &str,
    round: usize,
    n: usize,
) -> (f64, f64) {
    let t = cluster_target(d);
    let actors: Vec<String> = (0..n).map(|i| format!("rk{round}-{i}")).collect();
    rt.block_on(async {
        for actor in &actors {
            let info = create(client, &t, actor).await;
            assert_eq!(post(client, &t, actor).await, 200);
            pause(client, &t, actor).await;
            if info["worker"] != victim {
                migrate(client, &t, actor, victim).await;
            }
        }
    });
    d.kill_worker(victim);
    let killed = Instant::now();
    let (first, all) = rt.block_on(async {
        let mut first = None;
        for actor in &actors {
            loop {
                assert!(
                    killed.elapsed() < REPLACEMENT_TIMEOUT,
                    "{actor} did not answer within {REPLACEMENT_TIMEOUT:?} of the kill"
                );
                let attempt = tokio::time::timeout(ATTEMPT_TIMEOUT, post(client, &t, actor));
                let status = attempt
                    .await
                    .unwrap_or_else(|_| panic!("POST to {actor} hung"));
                if status == 200 {
                    first.get_or_insert_with(|| killed.elapsed());
                    break;
                }
                tokio::time::sleep(RETRY).await;
            }
        }
        (first.unwrap_or_default(), killed.elapsed())
    });
    rt.block_on(async {
        for actor in &actors {
            let info = actor_info(client, &t, actor).await;
            assert_ne!(info["worker"], victim, "{actor} still on the killed worker");
            call_ok(
                client,
                t.admin,
                "DELETE",
                &format!("/v1/actors/{actor}"),
                None,
            )
            .await;
        }
    });
    (ms(first), ms(all))
}

fn replacement_after_kill(rt: &Runtime, client: &Http) {
    let (sizes, kills): (&[usize], usize) = if test_mode() {
        (&[2], 1)
    } else {
        (&[1, 10, 100], 3)
    };
    let mut d = cluster(Store::S3, 2);
    d.push_counter(0);
    // The two workers alive now; a new one replaces each victim.
    let mut alive = vec!["w1".to_owned(), "w2".to_owned()];
    let mut joined = 2;
    let mut round = 0;
    for &n in sizes {
        let (mut firsts, mut alls) = (Vec::new(), Vec::new());
        for _ in 0..kills {
            round += 1;
            let victim = alive.remove(0);
            let (first, all) = one_kill(rt, client, &mut d, &victim, round, n);
            firsts.push(first);
            alls.push(all);
            joined += 1;
            let name = format!("w{joined}");
            d.add_worker(&name);
            alive.push(name);
            let _ = d.wait_for_workers(2);
        }
        println!(
            "replacement-summary: replacement_after_kill/N={n} lease_ttl={LEASE_TTL} all_answered_ms {} | first_answered_ms {}",
            summary(&alls),
            summary(&firsts)
        );
    }
}

// ---- main ---------------------------------------------------------------------

/// The systems the criterion groups share.
struct Envs {
    embedded: Embedded,
    file: Option<Deployment>,
    s3: Option<Deployment>,
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let started = Instant::now();
    let rt = stasis_test_util::bench::runtime();
    let client = {
        let _guard = rt.enter();
        client()
    };
    let first = wanted("first_request_after_pause");
    let two = wanted("creates") || wanted("placements");
    if first || two {
        let mut envs = Envs {
            embedded: Embedded::start(),
            file: first.then(|| cluster(Store::File, 1)),
            s3: Some(cluster(Store::S3, 2)),
        };
        if first {
            first_request(&mut c, &rt, &client, &envs);
            envs.file = None;
        }
        if wanted("creates") {
            creates(&mut c, &rt, &client, &envs);
        }
        if wanted("placements") {
            placements(&mut c, &rt, &client, &envs);
        }
    }
    if wanted("replacement_after_kill") {
        replacement_after_kill(&rt, &client);
    }
    c.final_summary();
    println!(
        "replicas benches finished in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
