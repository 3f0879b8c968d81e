//! Alarms: each actor's one durable alarm (ABI 2 `set_alarm`,
//! `cancel_alarm`, `alarm`) and their delivery.
//!
//! Rooms: this file (the retry backoff); [`scheduler`] (the control
//! plane's [`scheduler::Scheduler`]: pending alarms in time order, firing,
//! retries with backoff); [`deliver`] (how a due alarm reaches the actor:
//! through the placement and gate to its worker, where it is a mailbox
//! command of its own). An actor's alarm host functions reach the
//! scheduler through the `ControlApi` (`crate::local` in process, the
//! internal API from a remote worker).
//!
//! # Semantics
//!
//! The alarm lives in the directory (`alarms` table of `stasis.db`, or
//! `<prefix>/alarms/<actor>` in etcd), never only in memory; the control
//! plane (the leader, in a cluster) loads every pending alarm when it
//! starts. At its time the alarm is delivered to the actor's mailbox as a
//! command of its own (`WorkerApi::alarm`, never a request a client or a
//! guest could forge) — so it waits behind requests in flight, resumes a paused
//! actor, is never in the middle of a pause or a snapshot, and follows the
//! actor to whatever worker holds it — and the actor task calls the guest's
//! `stasis_on_alarm` export. Delivery is at least once: a handler that
//! traps rolls the actor back as a trapped request does and is retried
//! after [`RETRY_FIRST`], doubling each time up to [`RETRY_CAP`], until it
//! succeeds, the alarm is cancelled or replaced, the actor is deleted, or
//! `--alarm-retries` deliveries ([`DEFAULT_RETRIES`]) have failed: then it
//! is given up (removed, logged as an error, counted in
//! `stasis_alarms_given_up_total`). While it waits for a retry, `alarm()`
//! reads the retry's time.
//! After a success the alarm is removed unless the handler set a new one.
//! A module without the export gets its alarm removed and
//! `stasis_alarms_without_hook_total` counted.

pub mod deliver;
pub mod scheduler;

use std::time::Duration;

/// The first retry of a failed alarm comes this long after the failure.
pub const RETRY_FIRST: Duration = Duration::from_millis(500);

/// Retries back off by doubling up to this pause, then keep it.
pub const RETRY_CAP: Duration = Duration::from_secs(60);

/// Failed deliveries after which an alarm is given up, unless
/// `--alarm-retries` says otherwise: with the backoff above, about three
/// and a half minutes of retries.
pub const DEFAULT_RETRIES: u32 = 10;

/// The pause before retry number `attempt` (1 for the first retry):
/// [`RETRY_FIRST`] × 2^(attempt − 1), at most [`RETRY_CAP`].
#[must_use]
pub fn backoff(attempt: u32) -> Duration {
    let doublings = attempt.saturating_sub(1).min(16);
    RETRY_FIRST.saturating_mul(1 << doublings).min(RETRY_CAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_half_a_second_up_to_a_minute() {
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(2), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(2));
        assert_eq!(backoff(8), Duration::from_secs(60));
        assert_eq!(backoff(u32::MAX), RETRY_CAP);
    }
}
