//! The chain state of an actor's live instance: the snapshot its next
//! delta is taken on, and what of its guest runs no journal entry holds
//! yet. Both exist only with an instance
//! (dropped with it); the capture and restore paths of the actor task own
//! them.

use stasis_core::snapshot::DeltaBase;

/// A live instance's chain state (module docs).
#[derive(Default)]
pub(crate) struct LiveChain {
    /// What the next snapshot of the instance can be a delta on: the
    /// newest snapshot whose state the instance held since it was made
    /// (restored from, or captured from it). `None` without an instance,
    /// after a repair, or where the store keeps no deltas.
    pub(crate) base: Option<DeltaBase>,
    /// The instance's `on_resume` hook ran and its host values are on the
    /// tape: the next journal entry holds them (logical journal).
    pub(crate) resumed: bool,
    /// The instance's `on_pause` hook ran this many times since the last
    /// journal entry (pauses whose snapshot failed): the next entry holds
    /// them (logical journal).
    pub(crate) paused: u8,
    /// Guest code ran outside a delivery (a hand-over) since the
    /// newest snapshot, and no journal entry holds it: the next delivery
    /// takes a snapshot first (logical journal).
    pub(crate) unjournaled: bool,
}

impl LiveChain {
    /// Forgets both: the instance is gone, or its memory no longer
    /// matches what they describe.
    pub(crate) fn clear(&mut self) {
        self.base = None;
        self.resumed = false;
        self.paused = 0;
        self.unjournaled = false;
    }
}
