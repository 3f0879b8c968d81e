//! Waiting for an observable event (an HTTP answer, a status field, a
//! metric, a log line, a file, a process exit) instead of for a time.
//!
//! A test that needs "X has happened" asks a probe until it says so, within
//! a limit, and panics naming what it waited for and the limit when it
//! never does. The probe answers `Some(value)` once X holds (the value is
//! returned) and `None` until then; the `_else` variants take a probe that
//! answers `Err(what it saw)` instead, and that last observation goes into
//! the panic message.
//!
//! A probe that starts at or after the limit is the last one, so waiting
//! is never stricter than sleeping the limit and then looking once.
//! [`holds_for`] and [`holds_for_async`] are the other way round: "nothing
//! happens during this period", asked throughout the period and once at
//! its end (never weaker than sleeping the period and then looking).
//!
//! The poll's own sleep lives here and only here: [`POLL`] between two
//! probes, fixed (no growing backoff: the limits are seconds, the events
//! come within milliseconds of each other, and a fixed step keeps the
//! delay between the event and the test's next step short and bounded).
//! [`until`] and [`until_else`] block the calling thread (for synchronous
//! probes, the CLI or a process's log); [`until_async`] and
//! [`until_else_async`] sleep on tokio, so the runtime keeps driving the
//! test's other tasks while they wait.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// The fixed time between two probes.
pub const POLL: Duration = Duration::from_millis(20);

/// Asks `probe` every [`POLL`] until it answers `Some`, and returns that
/// value; panics with `what` and `limit` if it has not after `limit`.
#[track_caller]
pub fn until<T>(what: &str, limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    until_else(what, limit, || probe().ok_or("not yet"))
}

/// [`until`] with a probe that answers `Err(what it saw)` until the event;
/// the last of those is in the panic message.
#[track_caller]
pub fn until_else<T, E: Display>(
    what: &str,
    limit: Duration,
    mut probe: impl FnMut() -> Result<T, E>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        let last = Instant::now() >= deadline;
        match probe() {
            Ok(value) => return value,
            Err(seen) => {
                if last {
                    timed_out(what, limit, &seen);
                }
            }
        }
        // sleep: the poll's one backoff between two probes (see the module docs).
        std::thread::sleep(POLL);
    }
}

/// [`until`] for an async probe, sleeping on tokio between two probes.
pub async fn until_async<T>(
    what: &str,
    limit: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    until_else_async(what, limit, async || probe().await.ok_or("not yet")).await
}

/// [`until_else`] for an async probe, sleeping on tokio between two probes.
pub async fn until_else_async<T, E: Display>(
    what: &str,
    limit: Duration,
    mut probe: impl AsyncFnMut() -> Result<T, E>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        let last = Instant::now() >= deadline;
        match probe().await {
            Ok(value) => return value,
            Err(seen) => {
                if last {
                    timed_out(what, limit, &seen);
                }
            }
        }
        // sleep: the poll's one backoff between two probes (see the module docs).
        tokio::time::sleep(POLL).await;
    }
}

/// Asks `probe` every [`POLL`] for `period`, and once more at its end;
/// panics with `what` at the first `false` (what must hold did not).
#[track_caller]
pub fn holds_for(what: &str, period: Duration, mut probe: impl FnMut() -> bool) {
    let end = Instant::now() + period;
    loop {
        let last = Instant::now() >= end;
        assert!(probe(), "{what} stopped holding within {period:?}");
        if last {
            return;
        }
        // sleep: the poll's one backoff between two probes (see the module docs).
        std::thread::sleep(POLL.min(end.saturating_duration_since(Instant::now())));
    }
}

/// [`holds_for`] for an async probe, sleeping on tokio between two probes.
pub async fn holds_for_async(what: &str, period: Duration, mut probe: impl AsyncFnMut() -> bool) {
    let end = Instant::now() + period;
    loop {
        let last = Instant::now() >= end;
        assert!(probe().await, "{what} stopped holding within {period:?}");
        if last {
            return;
        }
        // sleep: the poll's one backoff between two probes (see the module docs).
        tokio::time::sleep(POLL.min(end.saturating_duration_since(Instant::now()))).await;
    }
}

#[track_caller]
fn timed_out(what: &str, limit: Duration, seen: &dyn Display) -> ! {
    panic!("timed out after {limit:?} waiting for {what}; last seen: {seen}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_the_probe_s_value_once_it_has_one() {
        let mut asked = 0;
        let got = until("the third probe", Duration::from_secs(5), || {
            asked += 1;
            (asked == 3).then_some(asked * 10)
        });
        assert_eq!(got, 30);
    }

    #[test]
    #[should_panic(expected = "waiting for nothing; last seen: still 7")]
    fn panics_with_what_and_the_last_observation() {
        until_else("nothing", Duration::from_millis(50), || {
            Err::<(), _>("still 7")
        });
    }

    #[tokio::test]
    async fn the_async_twin_waits_on_tokio() {
        let mut asked = 0;
        let got = until_async("the second probe", Duration::from_secs(5), async || {
            asked += 1;
            (asked == 2).then_some("done")
        })
        .await;
        assert_eq!(got, "done");
    }
}
