//! A follower replica's start over a large directory (issue 32, item 4):
//! real etcd (one member), a leader replica, one worker and a `file://`
//! store on loopback. A follower is started over the directory as it is
//! (one actor: the baseline), then again once `STASIS_START_ACTORS` more
//! actor records (1,000,000; 1,000 in test mode) were written straight
//! into etcd. Each time a follower is started three times; the bench
//! prints how long each took to be ready and to answer its first request
//! (to the one real actor), and for the median run its `VmRSS` after that
//! request, with the ratios to the baseline.
//!
//! `cargo bench --bench replica_start`; results in BENCHMARKS.md,
//! section 27.

use std::time::{Duration, Instant};

use stasis_test_util::bench::{env_usize, rss, test_mode};
use stasis_test_util::cluster::{Deployment, PREFIX, Setup, Store};
use stasis_test_util::http::{actor_host, client, send};
use stasis_test_util::{Artifacts, artifacts};

/// The `stasis` binary and the demo actors.
const STASIS: Artifacts = artifacts!();

const MIB: f64 = (1 << 20) as f64;

/// What one follower start cost: ready, first answer, RSS after it.
struct Start {
    ready: Duration,
    first_answer: Duration,
    rss: u64,
}

/// Starts a follower over `d`'s directory and sends it one request.
async fn start_follower(d: &Deployment) -> Start {
    let started = Instant::now();
    let mut follower = d.start_replica(&[]).expect("the follower starts");
    let ready = started.elapsed();
    let c = client();
    let host = actor_host("real");
    let answer = send(&c, follower.ingress, "POST", &host, "/", Vec::new()).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let first_answer = started.elapsed();
    let rss = rss(follower.process.pid());
    follower.process.kill();
    Start {
        ready,
        first_answer,
        rss,
    }
}

/// [`start_follower`] three times; the run with the median first answer
/// (each run is printed).
async fn median_start(d: &Deployment) -> Start {
    let mut runs = Vec::new();
    for _ in 0..3 {
        let run = start_follower(d).await;
        println!(
            "replica-start-run: ready {:.0} ms, first answer {:.0} ms",
            run.ready.as_secs_f64() * 1e3,
            run.first_answer.as_secs_f64() * 1e3
        );
        runs.push(run);
    }
    runs.sort_by_key(|run| run.first_answer);
    runs.swap_remove(1)
}

fn main() {
    let actors = if test_mode() {
        1_000
    } else {
        env_usize("STASIS_START_ACTORS", 1_000_000)
    };
    let rt = stasis_test_util::bench::runtime();
    let mut setup = Setup::new(1, 1, 1);
    setup.store = Store::File;
    let d = Deployment::start(STASIS, setup);
    d.push_counter(0);
    d.cli_json(0, &["actor", "create", "real", "--template", "counter"]);
    rt.block_on(async {
        let baseline = median_start(&d).await;
        let record = d
            .etcd
            .get(&format!("{PREFIX}/actors/real"))
            .await
            .expect("real's record");
        let seeding = Instant::now();
        let seeded =
            (0..actors).map(|i| (format!("{PREFIX}/actors/seeded-{i:07}"), record.clone()));
        d.etcd.put_many(seeded).await;
        println!(
            "replica-start-summary: seeded {actors} actor records in {:.1} s",
            seeding.elapsed().as_secs_f64()
        );
        let large = median_start(&d).await;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        for (what, run) in [("1 actor", &baseline), ("+ seeded", &large)] {
            println!(
                "replica-start-summary: {what:>9}: ready {:.0} ms, first answer {:.0} ms, RSS {:.1} MiB",
                ms(run.ready),
                ms(run.first_answer),
                run.rss as f64 / MIB
            );
        }
        println!(
            "replica-start-summary: ratios with {actors} more actors: ready {:.2}x, first answer {:.2}x, RSS {:.2}x",
            large.ready.as_secs_f64() / baseline.ready.as_secs_f64(),
            large.first_answer.as_secs_f64() / baseline.first_answer.as_secs_f64(),
            large.rss as f64 / baseline.rss as f64
        );
    });
}
