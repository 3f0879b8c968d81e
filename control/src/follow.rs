//! A follower replica's view of the cluster (cluster mode): the placements
//! of the directory, loaded once and then kept in step with etcd by a
//! watch, so that the follower routes every request itself (one lookup in
//! memory per request, no etcd round trip). The watch hands over the
//! changes of each event ([`ActorsChange`]), so applying one costs in
//! proportion to what it changed. It never changes a placement:
//! when it routes by one that is stale, the worker refuses the call (421)
//! and the request is sent again by the refreshed placement.
//!
//! The follower also publishes the etcd revision its placements are
//! current at, once applied: a write it forwarded to the leader is
//! answered once that revision reaches the write's (read-your-writes, see
//! `stasis-runtime`'s `replica`).

use std::sync::Arc;

use super::ControlPlane;
use super::placement::{ANY_INCARNATION, Placement};
use stasis_contract::directory::{ActorRow, ActorsAt, ActorsChange};

impl ControlPlane {
    /// Loads every placement of the directory (`rows`), to route by (a
    /// follower's start).
    pub(super) fn load_placements(&self, rows: &[ActorRow]) {
        for row in rows {
            self.placements
                .place(&row.name, follower_placement(row, None));
        }
    }

    /// Keeps the placements in step with the directory's actors
    /// (`actors`: their listings and changes, from a watch of etcd) until
    /// the watch ends: new actors appear, moved ones point at their new
    /// worker and epoch (never back to an older epoch), deleted ones go.
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

    /// Applies one listing or event of the watch; returns the etcd
    /// revision the placements are current at after it.
    pub(super) fn apply_change(&self, change: &ActorsChange) -> i64 {
        match change {
            ActorsChange::Listed(current) => {
                self.apply_placements(current);
                current.revision
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
        }
    }

    /// Applies the directory's actors as a watch of etcd published them.
    pub(super) fn apply_placements(&self, current: &ActorsAt) {
        self.placements
            .follow(&current.actors, &current.generations, follower_placement);
    }
}

/// A follower's placement for `row` of `generation`: on whichever
/// incarnation of its worker is registered (the worker checks the epoch).
fn follower_placement(row: &ActorRow, generation: Option<i64>) -> Placement {
    let mut placement = Placement::new(
        Arc::from(row.worker.as_str()),
        ANY_INCARNATION,
        &row.template,
        row.epoch,
    )
    .created(row.created_at_unix_ms);
    placement.generation = generation;
    placement
}
