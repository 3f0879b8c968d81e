//! The gauges a `/metrics` scrape sets before encoding (actors per state,
//! held requests, snapshot bytes): one place for the control plane's and
//! a worker process's `/metrics`.

use super::{Metrics, StateLabel};

impl Metrics {
    /// [`Metrics::encode`] with the gauges known only at scrape time set
    /// first: `stasis_actors{state}` from the actors' `states` (every
    /// state shown, 0 where none is in it), `stasis_held_requests` and
    /// `stasis_snapshot_bytes`.
    #[must_use]
    pub fn encode_at_scrape(
        &self,
        states: impl IntoIterator<Item = crate::status::ActorState>,
        held_requests: usize,
        snapshot_bytes: u64,
    ) -> String {
        let mut counts: std::collections::HashMap<&'static str, i64> =
            std::collections::HashMap::new();
        for state in states {
            *counts.entry(state.as_str()).or_default() += 1;
        }
        for state in crate::status::ActorState::ALL {
            self.actors
                .get_or_create(&StateLabel {
                    state: state.as_str().to_owned(),
                })
                .set(counts.get(state.as_str()).copied().unwrap_or(0));
        }
        self.held_requests
            .set(i64::try_from(held_requests).unwrap_or(i64::MAX));
        self.snapshot_bytes
            .set(i64::try_from(snapshot_bytes).unwrap_or(i64::MAX));
        self.encode()
    }
}
