//! Where each actor lives: the [`PlacementTable`], the only writer of the
//! in-memory placements (kept in step with the directory by
//! [`ControlPlane::switch_placement`] and its variants here, the one place
//! a placed actor changes worker), the gate every request and move passes,
//! and the lookups built on it (an actor's worker, the least-loaded
//! worker).
//!
//! An actor's epoch lives in the directory and, as its in-memory copy, in
//! its placement; both change together, only in the `switch_placement*`
//! functions (the lazy re-placement's leaves the placement pending its
//! worker's adoption: `crate::adopt`). Whether it is moving is its state
//! on its worker (`migrating` from capture until the move ends), not kept
//! here.

mod cache;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::ControlPlane;
use super::membership::{Member, WorkerState};
use stasis_contract::directory::{ActorPut, ActorRow};
use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::labels::Labels;

/// The incarnation of a follower replica's placements: whichever
/// incarnation of the worker is registered (a follower does not know which
/// one the leader placed the actor on; the worker refuses a call at another
/// epoch, 421).
pub(super) const ANY_INCARNATION: u64 = u64::MAX;

/// Where an actor lives, and the gate its requests pass.
#[derive(Debug, Clone)]
pub(super) struct Placement {
    /// The owning worker's name (empty while none hosts it), shared with
    /// its [`Member`] and every other placement on it.
    pub worker: Arc<str>,
    /// Which admission of that worker: a remote worker that joins again
    /// comes back empty, so placements on its earlier incarnation wait for
    /// re-placement.
    pub incarnation: u64,
    /// Template name.
    pub template: String,
    /// Placement epoch: 1 at creation, +1 per move; the in-memory copy of
    /// the directory's value (both change only in `switch_placement`).
    pub epoch: u64,
    /// The gate its requests pass (shared with the requests in flight).
    pub gate: Arc<Gate>,
    /// Why the actor cannot be hosted at all (e.g. its template file is
    /// unreadable); it is `failed` with this reason.
    pub failure_reason: Option<String>,
    /// Why the last attempt to re-place the actor failed, while it waits
    /// for a worker (retried; shown by `actor get`).
    pub replacement_error: Option<String>,
    /// A follower's placements: which creation of the name this is (see
    /// `ActorPut::generation`); `None` where the placements are decided
    /// here.
    pub generation: Option<i64>,
    /// When the actor was created (ms since the Unix epoch), as the
    /// directory says; `None` for one recorded before it kept it.
    pub created_at_unix_ms: Option<u64>,
    /// Its labels, as the directory holds them.
    pub labels: Arc<Labels>,
    /// Lazy re-placement (a deciding control plane's placements only): the
    /// directory records the actor on `worker` at `epoch`, but that worker
    /// has not adopted it yet (installed it from the store and recovered
    /// its journal). It has no host until then; its first request, or the
    /// background wave, has the worker adopt it at that epoch. Set to when
    /// it was placed so (after its earlier worker was declared lost).
    pub pending_adoption: Option<std::time::Instant>,
}

impl Placement {
    /// An actor of `template` on `worker` (`""`: none yet) at `epoch`.
    pub(crate) fn new(worker: Arc<str>, incarnation: u64, template: &str, epoch: u64) -> Self {
        Self {
            worker,
            incarnation,
            template: template.to_owned(),
            epoch,
            gate: Arc::default(),
            failure_reason: None,
            replacement_error: None,
            generation: None,
            created_at_unix_ms: None,
            labels: Arc::default(),
            pending_adoption: None,
        }
    }

    /// This placement of an actor created at `created_at_unix_ms`.
    #[must_use]
    pub(crate) fn created(mut self, created_at_unix_ms: Option<u64>) -> Self {
        self.created_at_unix_ms = created_at_unix_ms;
        self
    }

    /// This placement of an actor labelled `labels`.
    #[must_use]
    pub(crate) fn labelled(mut self, labels: &Labels) -> Self {
        if !labels.is_empty() {
            self.labels = Arc::new(labels.clone());
        }
        self
    }
}

/// Every placement, by name (in order: listings page through it).
pub(super) type Placements = BTreeMap<String, Placement>;

/// An actor's gate, the router-side barrier: requests hold a read guard of
/// `barrier` while they are forwarded; a move holds the write guard from
/// capture to the placement switch, so no request reaches the source after
/// its capture.
#[derive(Debug, Default)]
pub(super) struct Gate {
    pub barrier: tokio::sync::RwLock<()>,
    /// Requests waiting at the closed gate; past `--max-held` more are
    /// refused (503), as at a full mailbox.
    pub held: AtomicUsize,
    /// Set by each lookup, cleared by a sweep of a follower's placement
    /// cache: a placement not looked up since the last sweep goes first.
    pub touched: AtomicBool,
}

/// A request counted among those waiting at an actor's closed gate, for
/// as long as it waits.
pub(super) struct HeldAtGate<'a>(&'a AtomicUsize);

impl<'a> HeldAtGate<'a> {
    /// Counts one more waiting request.
    ///
    /// # Errors
    /// 503 if `max_held` requests already wait.
    pub(crate) fn enter(
        count: &'a AtomicUsize,
        max_held: usize,
        actor: &str,
    ) -> Result<Self, ApiError> {
        let before = count.fetch_add(1, Ordering::SeqCst);
        let held = Self(count);
        if before >= max_held {
            return Err(ApiError::unavailable(format!(
                "actor {actor} is moving and already holds {max_held} requests (--max-held)"
            )));
        }
        Ok(held)
    }
}

impl Drop for HeldAtGate<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Every actor's [`Placement`], by name: the one owner of the in-memory
/// placements. Its writes say what happened (an actor placed, gone,
/// failed, moved), so that no other code edits a placement's fields.
///
/// A follower's table is a bounded cache ([`PlacementTable::cached`]):
/// it holds the placements looked up lately, not every actor's.
#[derive(Default)]
pub(super) struct PlacementTable {
    map: std::sync::RwLock<Placements>,
    /// The names of the actors that have each label (key, value): where a
    /// listing by label starts (kept by a deciding control plane only: a
    /// follower forwards listings to its leader), changed with the
    /// placements under the map's write lock. A listing still checks each
    /// placement it names.
    by_label: std::sync::RwLock<HashMap<(String, String), BTreeSet<String>>>,
    /// A follower's cache: its bound, loads in flight and metrics.
    cache: Option<cache::Cache>,
}

impl PlacementTable {
    /// A follower's table: at most `bound` placements, each read from the
    /// directory when first looked up (see [`cache`]).
    pub(super) fn cached(
        bound: usize,
        metrics: stasis_contract::metrics::PlacementCacheMetrics,
    ) -> Self {
        Self {
            map: std::sync::RwLock::default(),
            by_label: std::sync::RwLock::default(),
            cache: Some(cache::Cache::new(bound, metrics)),
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Placements> {
        self.map.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads every placement (held briefly: a lookup or a count).
    pub(super) fn read(&self) -> std::sync::RwLockReadGuard<'_, Placements> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Places `actor` as `placement` (a new actor, or one brought back),
    /// replacing whatever was there.
    pub(super) fn place(&self, actor: &str, placement: Placement) {
        let mut map = self.write();
        self.index(actor, &placement.labels);
        if let Some(old) = map.insert(actor.to_owned(), placement) {
            self.unindex(actor, &old.labels, &map[actor].labels);
        }
    }

    /// Forgets `actor` (deleted).
    pub(super) fn remove(&self, actor: &str) {
        let mut map = self.write();
        if let Some(gone) = map.remove(actor) {
            self.unindex(actor, &gone.labels, &Labels::new());
        }
    }

    /// Gives `actor` the labels `labels` (as the directory recorded them).
    pub(super) fn set_labels(&self, actor: &str, labels: Labels) {
        let mut map = self.write();
        if let Some(p) = map.get_mut(actor) {
            let old = std::mem::replace(&mut p.labels, Arc::new(labels));
            self.index(actor, &p.labels);
            self.unindex(actor, &old, &p.labels);
        }
    }

    /// Adds `actor` to the index of each of its `labels` (a deciding
    /// table's only; called with the map's write lock held).
    fn index(&self, actor: &str, labels: &Labels) {
        if self.cache.is_some() || labels.is_empty() {
            return;
        }
        let mut index = self.by_label.write().unwrap_or_else(|p| p.into_inner());
        for (key, value) in labels {
            index
                .entry((key.clone(), value.clone()))
                .or_default()
                .insert(actor.to_owned());
        }
    }

    /// Takes `actor` out of the index of each label of `old` it no longer
    /// has in `now` (called with the map's write lock held).
    fn unindex(&self, actor: &str, old: &Labels, now: &Labels) {
        if old.is_empty() {
            return;
        }
        let mut index = self.by_label.write().unwrap_or_else(|p| p.into_inner());
        for (key, value) in old {
            if now.get(key) == Some(value) {
                continue;
            }
            let label = (key.clone(), value.clone());
            if let Some(names) = index.get_mut(&label) {
                names.remove(actor);
                if names.is_empty() {
                    index.remove(&label);
                }
            }
        }
    }

    /// Up to `count` names of actors after `after` that the index lists
    /// under label (`key`, `value`), in order (some may no longer have
    /// it).
    pub(super) fn labelled(
        &self,
        key: &str,
        value: &str,
        after: Option<&str>,
        count: usize,
    ) -> Vec<String> {
        let index = self.by_label.read().unwrap_or_else(|p| p.into_inner());
        let Some(names) = index.get(&(key.to_owned(), value.to_owned())) else {
            return Vec::new();
        };
        let range = match after {
            Some(after) => names
                .range::<str, _>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded)),
            None => names.range::<str, _>(..),
        };
        range.take(count).cloned().collect()
    }

    /// Marks `actor` as failed for `reason`: it cannot be hosted until
    /// repaired.
    pub(super) fn fail(&self, actor: &str, reason: String) {
        if let Some(p) = self.write().get_mut(actor) {
            p.failure_reason = Some(reason);
        }
    }

    /// Keeps (or clears) why the last re-placement of `actor` failed.
    pub(super) fn note_replacement_error(&self, actor: &str, error: Option<String>) {
        if let Some(p) = self.write().get_mut(actor) {
            p.replacement_error = error;
        }
    }

    /// Points `actor` at `worker` (as `incarnation`) under `epoch`; only
    /// [`ControlPlane::switch_placement`] calls it, after the directory
    /// recorded the switch.
    /// [`PlacementTable::point`] for an upgrade: also the template version's
    /// row the actor runs now.
    pub(super) fn point_as(
        &self,
        actor: &str,
        worker: Arc<str>,
        incarnation: u64,
        epoch: u64,
        template: &str,
    ) {
        if let Some(p) = self.write().get_mut(actor) {
            p.worker = worker;
            p.incarnation = incarnation;
            p.epoch = epoch;
            p.pending_adoption = None;
            template.clone_into(&mut p.template);
        }
    }

    fn point(&self, actor: &str, worker: Arc<str>, incarnation: u64, epoch: u64) {
        if let Some(p) = self.write().get_mut(actor) {
            p.worker = worker;
            p.incarnation = incarnation;
            p.epoch = epoch;
            p.pending_adoption = None;
        }
    }

    /// [`PlacementTable::point`] for a lazy re-placement: the directory
    /// recorded the switch, the worker has not adopted the actor yet; only
    /// [`ControlPlane::switch_placement_pending`] calls it.
    pub(super) fn point_pending(
        &self,
        actor: &str,
        worker: Arc<str>,
        incarnation: u64,
        epoch: u64,
    ) {
        if let Some(p) = self.write().get_mut(actor) {
            p.worker = worker;
            p.incarnation = incarnation;
            p.epoch = epoch;
            p.pending_adoption = Some(std::time::Instant::now());
        }
    }

    /// Worker `worker` does not host `actor`, which the placements put
    /// there at `epoch` (placed lazily by an earlier leader and never
    /// adopted): pending adoption there from now, if still so placed.
    pub(super) fn not_hosted(&self, actor: &str, worker: &str, epoch: u64) {
        if let Some(p) = self.write().get_mut(actor)
            && *p.worker == *worker
            && p.epoch == epoch
            && p.pending_adoption.is_none()
        {
            p.pending_adoption = Some(std::time::Instant::now());
        }
    }

    /// A follower's table: applies the records one watch event put and
    /// deleted (costs in proportion to them, not to the actors) to the
    /// names it holds, keeps them for the names being read ([`cache`]),
    /// and ignores the others. A placement changes as [`follow_row`] says.
    pub(super) fn follow_changes(
        &self,
        put: &[ActorPut],
        deleted: &[(String, i64)],
        placement: impl Fn(&ActorRow, Option<i64>) -> Placement,
    ) {
        let Some(cache) = &self.cache else {
            return;
        };
        let mut placements = self.write();
        for (name, revision) in deleted {
            placements.remove(name);
            cache.saw(name, cache::Seen::Deleted(*revision));
        }
        for put in put {
            if placements.contains_key(&put.row.name) {
                follow_row(&mut placements, &put.row, Some(put.generation), &placement);
            } else {
                cache.saw(&put.row.name, cache::Seen::Put(put.clone()));
            }
        }
    }
}

/// Points `row`'s placement (of `generation`) where the row says; `placement`
/// makes the placement of a name new here. The placement of an actor whose
/// name was deleted and created again is replaced (another generation: its
/// epochs start over); one listed at an older epoch than it has here keeps
/// its placement (the watch may lag a switch this replica already saw);
/// the others point where the row says, on any incarnation of their
/// worker, keeping their gates.
fn follow_row(
    placements: &mut Placements,
    row: &ActorRow,
    generation: Option<i64>,
    placement: &impl Fn(&ActorRow, Option<i64>) -> Placement,
) {
    match placements.get_mut(&row.name) {
        Some(p) if p.generation != generation => *p = placement(row, generation),
        Some(p) if p.epoch > row.epoch => {}
        Some(p) => {
            if *p.worker != *row.worker {
                p.worker = Arc::from(row.worker.as_str());
            }
            p.epoch = row.epoch;
            p.incarnation = ANY_INCARNATION;
            if p.template != row.template {
                p.template.clone_from(&row.template);
            }
            if *p.labels != row.labels {
                p.labels = Arc::new(row.labels.clone());
            }
        }
        None => {
            placements.insert(row.name.clone(), placement(row, generation));
        }
    }
}

impl ControlPlane {
    pub(super) fn placements(&self) -> std::sync::RwLockReadGuard<'_, Placements> {
        self.placements.read()
    }

    /// Actor `actor`'s placement.
    ///
    /// # Errors
    /// 404 if unknown.
    pub(super) fn placement_of(&self, actor: &str) -> Result<Placement, ApiError> {
        self.placements()
            .get(actor)
            .cloned()
            .ok_or_else(|| ApiError::not_found(format!("no actor named {actor:?}")))
    }

    /// Whether actor `name` exists.
    #[must_use]
    pub fn has_actor(&self, name: &str) -> bool {
        self.placements().contains_key(name)
    }

    /// Counts one request answered `status` by actor `name`, `took` after
    /// it arrived, in the metrics (its latency histogram too), under
    /// its template (and under its name with `--metrics-per-actor`). Not
    /// counted if the actor is gone: the placement is read while counting,
    /// and [`ControlPlane::delete_actor`] removes it before the actor's
    /// series, so no series outlives its actor.
    pub fn count_request(&self, name: &str, status: u16, took: std::time::Duration) {
        let placements = self.placements();
        if let Some(placement) = placements.get(name) {
            let (template, _) = stasis_contract::directory::row_version(&placement.template);
            self.metrics.request(template, name, status, took);
        }
    }

    /// The member hosting `actor` under `placement`.
    ///
    /// # Errors
    /// 503 if it failed, or waits for a worker (none placed, or its worker
    /// is lost or came back as a new incarnation).
    pub(super) fn host_of(
        &self,
        placement: &Placement,
        actor: &str,
    ) -> Result<Arc<Member>, ApiError> {
        if let Some(reason) = &placement.failure_reason {
            return Err(ApiError::failed(format!("actor {actor} failed: {reason}")));
        }
        if placement.pending_adoption.is_some() {
            return Err(ApiError::new(
                ErrorKind::Unreachable,
                format!(
                    "actor {actor} waits for worker {} to adopt it (its worker was lost)",
                    placement.worker
                ),
            ));
        }
        self.placed_worker(placement).ok_or_else(|| {
            ApiError::new(
                ErrorKind::Unreachable,
                format!("actor {actor} waits for a worker to host it"),
            )
        })
    }

    /// The member `placement` names, if it is that incarnation and not
    /// lost (whether it hosts the actor yet or not).
    pub(super) fn placed_worker(&self, placement: &Placement) -> Option<Arc<Member>> {
        self.member(&placement.worker).filter(|w| {
            (w.incarnation == placement.incarnation || placement.incarnation == ANY_INCARNATION)
                && w.state() != WorkerState::Lost
        })
    }

    /// The one placement switch: records durably that `actor` lives on
    /// `target` at `epoch`, then points the in-memory placement there.
    ///
    /// # Errors
    /// 500 if the directory write fails (nothing changed).
    pub(super) fn switch_placement(
        &self,
        actor: &str,
        target: &Member,
        epoch: u64,
    ) -> Result<(), ApiError> {
        self.directory.place_actor(actor, &target.name, epoch)?;
        self.placements
            .point(actor, target.name.clone(), target.incarnation, epoch);
        Ok(())
    }

    /// [`ControlPlane::switch_placement`] from async code: the directory
    /// write waits on a blocking thread (it may wait for a group commit
    /// with other moves), not on the runtime's.
    ///
    /// # Errors
    /// 500 if the directory write fails (nothing changed).
    pub(super) async fn switch_placement_async(
        &self,
        actor: &str,
        target: &Member,
        epoch: u64,
    ) -> Result<(), ApiError> {
        self.place_in_directory(actor, target, epoch).await?;
        self.placements
            .point(actor, target.name.clone(), target.incarnation, epoch);
        Ok(())
    }

    /// [`ControlPlane::switch_placement_async`] for a lazy re-placement
    /// (`crate::adopt`): the directory records the switch, and the
    /// in-memory placement points there pending `target`'s adoption.
    ///
    /// # Errors
    /// 500 if the directory write fails (nothing changed).
    pub(super) async fn switch_placement_pending(
        &self,
        actor: &str,
        target: &Member,
        epoch: u64,
    ) -> Result<(), ApiError> {
        self.place_in_directory(actor, target, epoch).await?;
        self.placements
            .point_pending(actor, target.name.clone(), target.incarnation, epoch);
        Ok(())
    }

    /// The directory's write of a switch, on a blocking thread.
    async fn place_in_directory(
        &self,
        actor: &str,
        target: &Member,
        epoch: u64,
    ) -> Result<(), ApiError> {
        let directory = self.directory.clone();
        let (name, worker) = (actor.to_owned(), target.name.to_string());
        tokio::task::spawn_blocking(move || directory.place_actor(&name, &worker, epoch))
            .await
            .map_err(ApiError::internal)?
    }

    /// Actors per worker name.
    pub(super) fn actor_counts(&self) -> HashMap<String, usize> {
        let placements = self.placements();
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for p in placements.values() {
            *counts.entry(&*p.worker).or_default() += 1;
        }
        counts.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
    }

    /// The ready worker with the fewest actors. Counting scans every
    /// placement, so it is skipped when only one worker is ready.
    pub(super) fn least_loaded(&self) -> Option<Arc<Member>> {
        let mut ready: Vec<Arc<Member>> = self
            .members()
            .into_iter()
            .filter(|w| w.state() == WorkerState::Ready)
            .collect();
        if ready.len() <= 1 {
            return ready.pop();
        }
        let counts = self.actor_counts();
        ready
            .into_iter()
            .min_by_key(|w| counts.get(&*w.name).copied().unwrap_or(0))
    }
}
