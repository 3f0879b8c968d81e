//! Alarm firing delay (issue 14, "Performance"): how late the control
//! plane's alarm scheduler starts delivering an alarm, with 10,000 alarms
//! pending.
//!
//! The scheduler (`stasis_runtime::alarms::scheduler::Scheduler`) runs on a
//! real `SqliteDirectory` (`stasis.db` in a temporary folder on this disk,
//! WAL and `synchronous=FULL`, as `stasis serve` runs it). 10,000 alarms
//! due an hour from now are pending from the start (handed to `start` as
//! the directory's listing would be). Then, through `Scheduler::set` (one
//! durable write each):
//!
//! * `spread`: 500 alarms due 4 ms apart, starting 1 s after the last set;
//! * `burst`: 1,000 alarms due at the same millisecond.
//!
//! The delivery is the stand-in for the actor's invocation: it records the
//! wall-clock time it was called and answers "ran", after which the
//! scheduler clears the alarm in the directory (a durable write) as it does
//! for a real one. The delay of an alarm is that time minus its due time
//! (`at_unix_ms`). What the invocation itself adds (placement, the actor's
//! mailbox, a resume if it is paused, the guest's `stasis_on_alarm`) is the
//! cost of a request, measured in BENCHMARKS.md sections 5 and 9.
//!
//! Prints `alarm-delay-summary: <case> n=… p50=… p99=… max=…` in ms. In
//! test mode (`cargo test --benches`, any run without `--bench`) the cases
//! are 20 and 50 alarms over 100 pending. Results: BENCHMARKS.md, section
//! 10.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use stasis_runtime::contract::metrics::AlarmMetrics;
use stasis_runtime::control::alarms::scheduler::{Deliver, Delivery, Scheduler, now_unix_ms};
use stasis_runtime::control::directory::SqliteDirectory;
use stasis_test_util::bench::test_mode;
use stasis_test_util::stats::summary;

/// Records when each alarm was delivered (Unix µs).
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<(String, u128)>>,
}

impl Deliver for Recorder {
    fn deliver<'a, 'b, 'c>(
        &'a self,
        actor: &'b str,
        _setter: Option<String>,
    ) -> Pin<Box<dyn Future<Output = Delivery> + Send + 'c>>
    where
        'a: 'c,
        'b: 'c,
    {
        let now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros());
        self.seen
            .lock()
            .expect("recorder")
            .push((actor.to_owned(), now_us));
        Box::pin(std::future::ready(Delivery::Ran))
    }
}

/// Sets `due` (actor, Unix ms) and waits until all were delivered; their
/// delays in ms.
async fn run_case(scheduler: &Scheduler, recorder: &Recorder, due: &[(String, u64)]) -> Vec<f64> {
    recorder.seen.lock().expect("recorder").clear();
    for (actor, at) in due {
        scheduler.set(actor, *at, None).await.expect("set alarm");
    }
    let last = due.iter().map(|(_, at)| *at).max().unwrap_or(0);
    let give_up = last + 60_000;
    loop {
        if recorder.seen.lock().expect("recorder").len() >= due.len() {
            break;
        }
        assert!(now_unix_ms() < give_up, "alarms not delivered within 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let at: std::collections::HashMap<&str, u64> =
        due.iter().map(|(a, at)| (a.as_str(), *at)).collect();
    recorder
        .seen
        .lock()
        .expect("recorder")
        .iter()
        .map(|(actor, when_us)| {
            let due_us = u128::from(at[actor.as_str()]) * 1_000;
            // An alarm is never delivered early; a negative value would be
            // a clock step.
            (when_us.saturating_sub(due_us)) as f64 / 1_000.0
        })
        .collect()
}

fn main() {
    let test = test_mode();
    let (background, spread, burst) = if test {
        (100, 20, 50)
    } else {
        (10_000, 500, 1_000)
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let directory = Arc::new(SqliteDirectory::open(&tmp.path().join("stasis.db")).expect("db"));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let scheduler = Scheduler::new(
            directory,
            AlarmMetrics::default(),
            stasis_runtime::control::alarms::DEFAULT_RETRIES,
        );
        let recorder = Arc::new(Recorder::default());
        let later = now_unix_ms() + 3_600_000;
        let pending = (0..background)
            .map(|i| (format!("idle-{i}"), later + i))
            .collect();
        scheduler
            .start(pending, recorder.clone())
            .expect("start the scheduler");
        assert_eq!(scheduler.pending(), background as usize);

        // Setting takes a durable write each: the first alarm is due a
        // second after the estimated end of the sets.
        let start = now_unix_ms() + 1_000 + spread * 5;
        let due: Vec<_> = (0..spread)
            .map(|i| (format!("spread-{i}"), start + i * 4))
            .collect();
        let delays = run_case(&scheduler, &recorder, &due).await;
        println!(
            "alarm-delay-summary: spread ({spread} due 4 ms apart, {background} pending) {}",
            summary(&delays)
        );

        let at = now_unix_ms() + 1_000 + burst * 5;
        let due: Vec<_> = (0..burst).map(|i| (format!("burst-{i}"), at)).collect();
        let delays = run_case(&scheduler, &recorder, &due).await;
        println!(
            "alarm-delay-summary: burst ({burst} due at once, {background} pending) {}",
            summary(&delays)
        );
        // Let the last clears finish before the folder goes.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(scheduler.pending(), background as usize);
    });
}
