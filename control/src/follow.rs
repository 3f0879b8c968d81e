//! A follower replica's view of the cluster (cluster mode): the placements
//! of the directory its requests need, each read once when first looked up
//! ([`ControlPlane::load_placement`], into a bounded cache, see
//! `placement::cache`) and then kept in step with etcd by a watch of the
//! changes, so that the follower routes every later request itself (one
//! lookup in memory, no etcd round trip) and starts without reading every
//! actor. The watch hands over the changes of each event
//! ([`ActorsChange`]), so applying one costs in proportion to what it
//! changed. It never changes a placement: when it routes by one that is
//! stale, the worker refuses the call (421), the placement is dropped and
//! the request is sent again by a fresh one.
//!
//! The follower also publishes the etcd revision its placements are
//! current at, once applied: a write it forwarded to the leader is
//! answered once that revision reaches the write's (read-your-writes, see
//! `stasis-runtime`'s `replica`).

use std::sync::Arc;

use super::ControlPlane;
use super::placement::{ANY_INCARNATION, Gate, Placement};
use stasis_contract::directory::{ActorRow, ActorsChange};
use stasis_contract::error::ApiError;

impl ControlPlane {
    /// Keeps the cached placements in step with the directory's actors
    /// (`actors`: their changes, from a watch of etcd) until the watch
    /// ends: moved ones point at their new worker and epoch (never back to
    /// an older epoch), deleted ones go; names not cached are not kept.
    /// After each change is applied, `applied_revision` says the etcd
    /// revision the placements are current at (it never goes back).
    pub async fn follow_placements(
        self: Arc<Self>,
        mut actors: tokio::sync::mpsc::UnboundedReceiver<ActorsChange>,
        applied_revision: tokio::sync::watch::Sender<i64>,
    ) {
        while let Some(change) = actors.recv().await {
            let revision = self.apply_change(&change);
            applied_revision.send_if_modified(|applied| {
                let newer = revision > *applied;
                if newer {
                    *applied = revision;
                }
                newer
            });
        }
    }

    /// Applies one event of the watch (or its start); returns the etcd
    /// revision the placements are current at after it.
    pub(super) fn apply_change(&self, change: &ActorsChange) -> i64 {
        let revision = match change {
            ActorsChange::Watching { revision } => {
                self.placements.forget_all();
                *revision
            }
            ActorsChange::Changed {
                put,
                deleted,
                revision,
            } => {
                self.placements
                    .follow_changes(put, deleted, follower_placement);
                *revision
            }
        };
        if let Some(cache) = self.placements.cache() {
            cache.applied_up_to(revision);
        }
        revision
    }

    /// A follower's lookup of `name` that found nothing cached: reads its
    /// record from the directory (one read at a time per actor: concurrent
    /// misses wait for the one in flight) and caches its placement. Its
    /// gate, or `None` if there is no such actor (or placements are not
    /// cached here).
    ///
    /// # Errors
    /// 500 if the directory cannot be read.
    pub(super) async fn load_placement(&self, name: &str) -> Result<Option<Arc<Gate>>, ApiError> {
        let Some(cache) = self.placements.cache() else {
            return Ok(None);
        };
        cache.metrics.misses.inc();
        let flight = cache.flight(name);
        let loaded = flight
            .get_or_init(|| async {
                cache.metrics.reads.inc();
                let loading = cache.begin(name);
                let directory = self.directory.clone();
                let owned = name.to_owned();
                let at_least = cache.applied();
                let read = tokio::task::spawn_blocking(move || directory.actor(&owned, at_least))
                    .await
                    .map_err(ApiError::internal)??;
                Ok(self
                    .placements
                    .insert_read(name, read, loading, follower_placement))
            })
            .await
            .clone();
        cache.land(name, &flight);
        loaded
    }
}

/// A follower's placement for `row` of `generation`: on whichever
/// incarnation of its worker is registered (the worker checks the epoch).
pub(crate) fn follower_placement(row: &ActorRow, generation: Option<i64>) -> Placement {
    let mut placement = Placement::new(
        Arc::from(row.worker.as_str()),
        ANY_INCARNATION,
        &row.template,
        row.epoch,
    )
    .created(row.created_at_unix_ms)
    .labelled(&row.labels);
    placement.generation = generation;
    placement
}
