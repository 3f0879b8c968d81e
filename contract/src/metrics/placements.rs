//! A follower replica's placement cache metrics ([`PlacementCacheMetrics`]).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The placement cache metrics (they stay at zero where placements are not
/// cached: embedded mode and a cluster's leader).
#[derive(Debug, Default, Clone)]
pub struct PlacementCacheMetrics {
    /// `stasis_placement_cache_misses_total`: lookups that found no
    /// cached placement (each waits for a read, its own or one in flight).
    pub misses: Counter,
    /// `stasis_placement_reads_total`: reads of one actor's record from
    /// the directory (concurrent misses for one actor share one).
    pub reads: Counter,
    /// `stasis_placement_evictions_total`: placements dropped to keep the
    /// cache within `--placement-cache`.
    pub evictions: Counter,
    /// `stasis_placements_cached`: placements held (set at scrape time).
    pub cached: Gauge,
}

impl PlacementCacheMetrics {
    /// The metrics, registered in `registry`.
    #[must_use]
    pub fn register(registry: &mut Registry) -> Self {
        let this = Self::default();
        registry.register(
            "stasis_placement_cache_misses",
            "Placement lookups of a follower replica that found nothing cached",
            this.misses.clone(),
        );
        registry.register(
            "stasis_placement_reads",
            "Reads of one actor's record by a follower replica's placement cache (one per miss, shared by concurrent misses)",
            this.reads.clone(),
        );
        registry.register(
            "stasis_placement_evictions",
            "Placements a follower replica dropped to stay within --placement-cache",
            this.evictions.clone(),
        );
        registry.register(
            "stasis_placements_cached",
            "Placements a follower replica holds in its cache",
            this.cached.clone(),
        );
        this
    }
}
