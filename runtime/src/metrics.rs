//! Prometheus metrics of one `stasis serve` process, served as text on the
//! admin port at `GET /metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels `{actor, status}` of `stasis_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Actor name.
    pub actor: String,
    /// HTTP status code answered.
    pub status: u16,
}

/// Label `{actor}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActorLabel {
    /// Actor name.
    pub actor: String,
}

/// Label `{state}` of `stasis_actors`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    /// Lower-case actor state.
    pub state: String,
}

/// All metrics; cheap to share behind an `Arc`.
pub struct Metrics {
    registry: Registry,
    /// `stasis_requests_total{actor,status}`: requests answered.
    pub requests: Family<RequestLabels, Counter>,
    /// `stasis_resumes_total{actor}`: snapshots restored into fresh instances.
    pub resumes: Family<ActorLabel, Counter>,
    /// `stasis_checkpoints_total{actor}`: checkpoints written.
    pub checkpoints: Family<ActorLabel, Counter>,
    /// `stasis_traps_total{actor}`: guest calls that trapped or timed out.
    pub traps: Family<ActorLabel, Counter>,
    /// `stasis_pause_seconds`: barrier closed → snapshot durable → instance dropped.
    pub pause_seconds: Histogram,
    /// `stasis_resume_seconds`: snapshot read, verified and restored.
    pub resume_seconds: Histogram,
    /// `stasis_migration_downtime_seconds`: gate closed → gate open, per move.
    pub migration_downtime_seconds: Histogram,
    /// `stasis_actors{state}`: actors per state (set at scrape time).
    pub actors: Family<StateLabel, Gauge>,
    /// `stasis_held_requests`: requests waiting in mailboxes (set at scrape time).
    pub held_requests: Gauge,
    /// `stasis_snapshot_bytes`: bytes in the snapshot folder (set at scrape time).
    pub snapshot_bytes: Gauge,
}

fn latency_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.000_05, 2.0, 20)
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let resumes = Family::<ActorLabel, Counter>::default();
        let checkpoints = Family::<ActorLabel, Counter>::default();
        let traps = Family::<ActorLabel, Counter>::default();
        let pause_seconds = Histogram::new(latency_buckets());
        let resume_seconds = Histogram::new(latency_buckets());
        let migration_downtime_seconds = Histogram::new(latency_buckets());
        let actors = Family::<StateLabel, Gauge>::default();
        let held_requests = Gauge::default();
        let snapshot_bytes = Gauge::default();
        registry.register(
            "stasis_requests",
            "Requests answered, by actor and status",
            requests.clone(),
        );
        registry.register(
            "stasis_resumes",
            "Snapshots restored into fresh instances",
            resumes.clone(),
        );
        registry.register(
            "stasis_checkpoints",
            "Checkpoints written",
            checkpoints.clone(),
        );
        registry.register(
            "stasis_traps",
            "Guest calls that trapped or timed out",
            traps.clone(),
        );
        registry.register(
            "stasis_pause_seconds",
            "Pause latency",
            pause_seconds.clone(),
        );
        registry.register(
            "stasis_resume_seconds",
            "Resume latency",
            resume_seconds.clone(),
        );
        registry.register(
            "stasis_migration_downtime_seconds",
            "Per-move downtime, gate closed to gate open",
            migration_downtime_seconds.clone(),
        );
        registry.register("stasis_actors", "Actors by state", actors.clone());
        registry.register(
            "stasis_held_requests",
            "Requests held in mailboxes",
            held_requests.clone(),
        );
        registry.register(
            "stasis_snapshot_bytes",
            "Bytes in the snapshot folder",
            snapshot_bytes.clone(),
        );
        Self {
            registry,
            requests,
            resumes,
            checkpoints,
            traps,
            pause_seconds,
            resume_seconds,
            migration_downtime_seconds,
            actors,
            held_requests,
            snapshot_bytes,
        }
    }
}

impl Metrics {
    /// The registry in Prometheus text format.
    #[must_use]
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!("encoding metrics: {e}");
        }
        out
    }

    /// Counts one answered request.
    pub fn request(&self, actor: &str, status: u16) {
        self.requests
            .get_or_create(&RequestLabels {
                actor: actor.to_owned(),
                status,
            })
            .inc();
    }

    /// The `{actor}` label.
    #[must_use]
    pub fn actor(actor: &str) -> ActorLabel {
        ActorLabel {
            actor: actor.to_owned(),
        }
    }
}
