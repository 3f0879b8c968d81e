//! Prometheus metrics of one `stasis serve` process, served as text on the
//! admin port at `GET /metrics`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

mod alarms;
mod labels;
mod latency;
mod placements;
mod scrape;
mod sockets;

pub use alarms::AlarmMetrics;
pub use labels::{ActorLabel, ActorRequestLabels, RequestLabels, StateLabel, WorkerLabel};
use latency::{Histograms, histogram, latency_buckets};
pub use latency::{LatencyLabels, RequestLatency};
pub use placements::PlacementCacheMetrics;
pub use sockets::SocketMetrics;

/// Most actors that have per-actor series at once (`--metrics-per-actor`).
/// Events of further actors are counted in the template and worker series
/// only, and in `stasis_actor_series_refused_total`.
pub const MAX_ACTORS_WITH_SERIES: usize = 10_000;

/// All metrics; cheap to share behind an `Arc`.
///
/// By default no series is labelled by actor, so their number does not
/// grow with the number of actors: requests are labelled by template and
/// status, resumes, checkpoints and traps by worker. With per-actor series
/// enabled, the `stasis_actor_*` families add one series per actor (and per
/// status), for at most [`MAX_ACTORS_WITH_SERIES`] actors, each removed by
/// [`Metrics::forget_actor`] when the actor is deleted.
pub struct Metrics {
    registry: Registry,
    /// `stasis_requests_total{template,status}`: requests answered.
    requests: Family<RequestLabels, Counter>,
    /// `stasis_request_duration_seconds{template,class}`.
    latency: RequestLatency,
    /// `stasis_requests_abandoned_total`: requests given up, never
    /// executed, because their client left first (see [`crate::client_gone`]).
    abandoned: Counter,
    /// `stasis_replacement_failures_total`: attempts to re-place an actor
    /// whose worker is gone that failed (each is retried).
    replacement_failures: Counter,
    /// `stasis_resumes_total{worker}`: snapshots restored into fresh instances.
    resumes: Family<WorkerLabel, Counter>,
    /// `stasis_checkpoints_total{worker}`: checkpoints written.
    checkpoints: Family<WorkerLabel, Counter>,
    /// `stasis_traps_total{worker}`: guest calls that trapped or timed out.
    traps: Family<WorkerLabel, Counter>,
    /// The `stasis_actor_*` families, when enabled.
    per_actor: Option<PerActor>,
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
    /// `stasis_journal_entries_total`: entries appended to the worker
    /// journal (durability level `request`).
    journal_entries: Counter,
    /// `stasis_journal_bytes_total`: bytes of those entries.
    journal_bytes: Counter,
    /// `stasis_journal_syncs_total`: the journal's group commits (one
    /// `fdatasync` each); fewer than entries when commits are shared.
    pub journal_syncs: Counter,
    /// `stasis_journal_replay_failures_total`: actors failed because a
    /// journal entry replayed otherwise or did not follow on.
    pub journal_replay_failures: Counter,
    /// Calls, messages and outbound requests of the host functions.
    pub host_calls: HostCallMetrics,
    /// Alarms fired, failed and pending.
    pub alarms: AlarmMetrics,
    /// WebSockets and streams open, pinged and closed as dead.
    pub sockets: SocketMetrics,
    /// A follower replica's placement cache.
    pub placement_cache: PlacementCacheMetrics,
}

/// Per-actor series and the index that bounds and removes them.
struct PerActor {
    /// `stasis_actor_requests_total{actor,status}`.
    requests: Family<ActorRequestLabels, Counter>,
    /// `stasis_actor_request_duration_seconds{actor}`.
    latency: Histograms<ActorLabel>,
    /// `stasis_actor_resumes_total{actor}`.
    resumes: Family<ActorLabel, Counter>,
    /// `stasis_actor_checkpoints_total{actor}`.
    checkpoints: Family<ActorLabel, Counter>,
    /// `stasis_actor_traps_total{actor}`.
    traps: Family<ActorLabel, Counter>,
    /// `stasis_actor_series_refused_total`: events not counted per actor
    /// because [`MAX_ACTORS_WITH_SERIES`] actors already had series.
    refused: Counter,
    /// Actors with series, and the statuses of their request series.
    index: Mutex<HashMap<String, Vec<u16>>>,
}

/// Which per-actor counter an event bumps.
#[derive(Clone, Copy)]
enum Event {
    /// Its status, and seconds from arrival to answer.
    Request(u16, f64),
    Resume,
    Checkpoint,
    Trap,
}

impl PerActor {
    fn new(registry: &mut Registry) -> Self {
        let this = Self {
            requests: Family::default(),
            latency: Family::new_with_constructor(histogram as fn() -> Histogram),
            resumes: Family::default(),
            checkpoints: Family::default(),
            traps: Family::default(),
            refused: Counter::default(),
            index: Mutex::new(HashMap::new()),
        };
        registry.register(
            "stasis_actor_requests",
            "Requests answered, by actor and status (--metrics-per-actor)",
            this.requests.clone(),
        );
        registry.register(
            "stasis_actor_request_duration_seconds",
            "Request latency, ingress to answer, by actor (--metrics-per-actor)",
            this.latency.clone(),
        );
        registry.register(
            "stasis_actor_resumes",
            "Snapshots restored into fresh instances, by actor (--metrics-per-actor)",
            this.resumes.clone(),
        );
        registry.register(
            "stasis_actor_checkpoints",
            "Checkpoints written, by actor (--metrics-per-actor)",
            this.checkpoints.clone(),
        );
        registry.register(
            "stasis_actor_traps",
            "Guest calls that trapped or timed out, by actor (--metrics-per-actor)",
            this.traps.clone(),
        );
        registry.register(
            "stasis_actor_series_refused",
            "Events not counted per actor: the bound on actors with series was reached",
            this.refused.clone(),
        );
        this
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<u16>>> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts `event` for `actor`, admitting the actor if there is room.
    fn count(&self, actor: &str, event: Event) {
        let mut index = self.lock();
        if !index.contains_key(actor) && index.len() >= MAX_ACTORS_WITH_SERIES {
            self.refused.inc();
            return;
        }
        let statuses = index.entry(actor.to_owned()).or_default();
        let label = || ActorLabel {
            actor: actor.to_owned(),
        };
        match event {
            Event::Request(status, seconds) => {
                self.latency.get_or_create(&label()).observe(seconds);
                if !statuses.contains(&status) {
                    statuses.push(status);
                }
                self.requests
                    .get_or_create(&ActorRequestLabels {
                        actor: actor.to_owned(),
                        status,
                    })
                    .inc();
            }
            Event::Resume => {
                self.resumes.get_or_create(&label()).inc();
            }
            Event::Checkpoint => {
                self.checkpoints.get_or_create(&label()).inc();
            }
            Event::Trap => {
                self.traps.get_or_create(&label()).inc();
            }
        }
    }

    fn forget(&self, actor: &str) {
        let mut index = self.lock();
        let Some(statuses) = index.remove(actor) else {
            return;
        };
        for status in statuses {
            self.requests.remove(&ActorRequestLabels {
                actor: actor.to_owned(),
                status,
            });
        }
        let label = ActorLabel {
            actor: actor.to_owned(),
        };
        self.latency.remove(&label);
        self.resumes.remove(&label);
        self.checkpoints.remove(&label);
        self.traps.remove(&label);
    }
}

impl Default for Metrics {
    /// Metrics without per-actor series.
    fn default() -> Self {
        Self::new(false)
    }
}

/// The worker journal's four counters, registered.
fn register_journal(registry: &mut Registry) -> [Counter; 4] {
    let counters: [Counter; 4] = Default::default();
    for (counter, (name, help)) in counters.iter().zip([
        (
            "stasis_journal_entries",
            "Entries appended to the worker journal (durability request)",
        ),
        (
            "stasis_journal_bytes",
            "Bytes appended to the worker journal",
        ),
        (
            "stasis_journal_syncs",
            "Group commits of the worker journal (one fdatasync each)",
        ),
        (
            "stasis_journal_replay_failures",
            "Actors failed by a journal entry replaying otherwise",
        ),
    ]) {
        registry.register(name, help, counter.clone());
    }
    counters
}

impl Metrics {
    /// All metrics; with `per_actor`, also the bounded `stasis_actor_*`
    /// families (`--metrics-per-actor`).
    #[must_use]
    pub fn new(per_actor: bool) -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = RequestLatency::register(&mut registry);
        let abandoned = Counter::default();
        let replacement_failures = Counter::default();
        let resumes = Family::<WorkerLabel, Counter>::default();
        let checkpoints = Family::<WorkerLabel, Counter>::default();
        let traps = Family::<WorkerLabel, Counter>::default();
        let pause_seconds = Histogram::new(latency_buckets());
        let resume_seconds = Histogram::new(latency_buckets());
        let migration_downtime_seconds = Histogram::new(latency_buckets());
        let actors = Family::<StateLabel, Gauge>::default();
        let held_requests = Gauge::default();
        let snapshot_bytes = Gauge::default();
        let [
            journal_entries,
            journal_bytes,
            journal_syncs,
            journal_replay_failures,
        ] = register_journal(&mut registry);
        registry.register(
            "stasis_requests",
            "Requests answered, by template and status",
            requests.clone(),
        );
        registry.register(
            "stasis_requests_abandoned",
            "Requests never executed because their client left first",
            abandoned.clone(),
        );
        registry.register(
            "stasis_replacement_failures",
            "Failed attempts to re-place an actor whose worker is gone (each is retried)",
            replacement_failures.clone(),
        );
        registry.register(
            "stasis_resumes",
            "Snapshots restored into fresh instances, by worker",
            resumes.clone(),
        );
        registry.register(
            "stasis_checkpoints",
            "Checkpoints written, by worker",
            checkpoints.clone(),
        );
        registry.register(
            "stasis_traps",
            "Guest calls that trapped or timed out, by worker",
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
        let per_actor = per_actor.then(|| PerActor::new(&mut registry));
        let host_calls = HostCallMetrics::register(&mut registry);
        let alarms = AlarmMetrics::register(&mut registry);
        let sockets = SocketMetrics::register(&mut registry);
        let placement_cache = PlacementCacheMetrics::register(&mut registry);
        Self {
            registry,
            requests,
            latency,
            abandoned,
            replacement_failures,
            resumes,
            checkpoints,
            traps,
            per_actor,
            pause_seconds,
            resume_seconds,
            migration_downtime_seconds,
            actors,
            held_requests,
            snapshot_bytes,
            journal_entries,
            journal_bytes,
            journal_syncs,
            journal_replay_failures,
            host_calls,
            alarms,
            sockets,
            placement_cache,
        }
    }

    /// The registry in Prometheus text format.
    #[must_use]
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!("encoding metrics: {e}");
        }
        out
    }

    /// Counts one request answered `status` by `actor` (of template
    /// `template`) `took` after it arrived. Call it only for an actor that
    /// exists (see [`Metrics::forget_actor`]).
    pub fn request(&self, template: &str, actor: &str, status: u16, took: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                template: template.to_owned(),
                status,
            })
            .inc();
        let seconds = took.as_secs_f64();
        self.latency.observe(template, status, seconds);
        self.per_actor(actor, Event::Request(status, seconds));
    }

    /// Counts one request given up, never executed, because its client
    /// left first.
    pub fn abandoned(&self) {
        self.abandoned.inc();
    }

    /// Counts one journal entry of `bytes` bytes.
    pub fn journaled(&self, bytes: usize) {
        self.journal_entries.inc();
        self.journal_bytes.inc_by(bytes as u64);
    }

    /// Counts one failed attempt to re-place an actor.
    pub fn replacement_failed(&self) {
        self.replacement_failures.inc();
    }

    /// Counts one restore of `actor` into a fresh instance on `worker`.
    pub fn resumed(&self, worker: &str, actor: &str) {
        self.resumes.get_or_create(&Self::worker(worker)).inc();
        self.per_actor(actor, Event::Resume);
    }

    /// Counts one checkpoint of `actor` on `worker`.
    pub fn checkpointed(&self, worker: &str, actor: &str) {
        self.checkpoints.get_or_create(&Self::worker(worker)).inc();
        self.per_actor(actor, Event::Checkpoint);
    }

    /// Counts one trap (or timeout) of `actor` on `worker`.
    pub fn trapped(&self, worker: &str, actor: &str) {
        self.traps.get_or_create(&Self::worker(worker)).inc();
        self.per_actor(actor, Event::Trap);
    }

    /// Removes every per-actor series of `actor` (it was deleted): a new
    /// actor of the same name starts from zero. No-op without per-actor
    /// series.
    pub fn forget_actor(&self, actor: &str) {
        if let Some(per_actor) = &self.per_actor {
            per_actor.forget(actor);
        }
    }

    fn per_actor(&self, actor: &str, event: Event) {
        if let Some(per_actor) = &self.per_actor {
            per_actor.count(actor, event);
        }
    }

    fn worker(worker: &str) -> WorkerLabel {
        WorkerLabel {
            worker: worker.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series_of(metrics: &Metrics, actor: &str) -> usize {
        let needle = format!("actor=\"{actor}\"");
        metrics
            .encode()
            .lines()
            .filter(|l| l.contains(&needle))
            .count()
    }

    #[test]
    fn default_series_do_not_name_actors() {
        let metrics = Metrics::default();
        metrics.request("counter", "a1", 200, Duration::from_millis(1));
        metrics.resumed("worker-1", "a1");
        metrics.trapped("worker-1", "a1");
        let text = metrics.encode();
        assert!(!text.contains("a1"), "{text}");
        assert!(
            text.contains("stasis_requests_total{template=\"counter\",status=\"200\"} 1"),
            "{text}"
        );
        assert!(!text.contains("stasis_actor_"), "{text}");
    }

    #[test]
    fn per_actor_series_go_with_the_actor_and_are_bounded() {
        let metrics = Metrics::new(true);
        metrics.request("counter", "a1", 200, Duration::from_millis(1));
        metrics.request("counter", "a1", 500, Duration::from_millis(1));
        metrics.resumed("worker-1", "a1");
        metrics.checkpointed("worker-1", "a1");
        metrics.trapped("worker-1", "a1");
        // Two request counters, resumes, checkpoints, traps, and the
        // latency histogram's 23 lines (20 buckets, +Inf, sum, count).
        assert_eq!(series_of(&metrics, "a1"), 5 + 23);
        metrics.forget_actor("a1");
        assert_eq!(series_of(&metrics, "a1"), 0);
        metrics.request("counter", "a1", 200, Duration::from_millis(1));
        assert!(
            metrics
                .encode()
                .contains("stasis_actor_requests_total{actor=\"a1\",status=\"200\"} 1")
        );
        for i in 0..MAX_ACTORS_WITH_SERIES + 5 {
            metrics.request("counter", &format!("b{i}"), 200, Duration::from_millis(1));
        }
        let text = metrics.encode();
        assert!(
            text.contains("stasis_actor_series_refused_total 6"),
            "bound"
        );
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("stasis_actor_requests_total{"))
                .count(),
            MAX_ACTORS_WITH_SERIES
        );
    }
}

/// Label `{outcome}` of the host-call counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `ok`, or the `HostError` (snake case) the guest got.
    pub outcome: String,
}

/// The host-call metrics.
#[derive(Debug, Default, Clone)]
pub struct HostCallMetrics {
    /// `stasis_calls_total{outcome}`: actor-to-actor calls.
    pub calls: Family<OutcomeLabel, Counter>,
    /// `stasis_sends_total`: one-way messages accepted.
    pub sends: Counter,
    /// `stasis_sends_failed_total`: messages refused, or accepted but not
    /// delivered.
    pub sends_failed: Counter,
    /// `stasis_fetches_total{outcome}`: outbound requests.
    pub fetches: Family<OutcomeLabel, Counter>,
}

impl HostCallMetrics {
    /// The metrics, registered in `registry`.
    #[must_use]
    pub fn register(registry: &mut Registry) -> Self {
        let this = Self::default();
        registry.register(
            "stasis_calls",
            "Actor-to-actor calls (the call host function), by outcome",
            this.calls.clone(),
        );
        registry.register(
            "stasis_sends",
            "One-way messages accepted for delivery (the send host function)",
            this.sends.clone(),
        );
        registry.register(
            "stasis_sends_failed",
            "One-way messages refused, or accepted but not delivered",
            this.sends_failed.clone(),
        );
        registry.register(
            "stasis_fetches",
            "Outbound requests (the fetch host function), by outcome",
            this.fetches.clone(),
        );
        this
    }
}
