//! What a due alarm is on the way to its actor: its own delivery, not a
//! request. The control plane's scheduler delivers it through the actor's
//! placement and gate to its worker ([`crate::worker_api::WorkerApi::alarm`]),
//! where it is a mailbox command of its own: it waits behind requests in
//! flight, resumes a paused actor, is held while the actor moves, and runs
//! the guest's `stasis_on_alarm`. The worker answers with an
//! [`AlarmOutcome`]. No header marks it, so neither a client nor a guest can
//! pose as one.

use serde::{Deserialize, Serialize};

/// What delivering an alarm did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlarmOutcome {
    /// The guest's `stasis_on_alarm` ran to completion.
    Ran,
    /// The module has no `stasis_on_alarm` export: nothing ran.
    NoHook,
}
