//! What only a deciding control plane has: an embedded one, or a
//! cluster's leader replica. The lock that serialises operations changing
//! the directory's set of names, the names being created, the newest
//! template versions creates looked up, graceful shutdown, the alarm
//! scheduler and the rollouts it drives. A follower replica has none of
//! it: [`crate::ControlPlane::decider`] answers 503 there (its admin API
//! forwards to the leader, and its actors' alarms are the leader's).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use stasis_contract::directory::TemplateRow;
use stasis_contract::error::{ApiError, ErrorKind};

use crate::alarms::scheduler::Scheduler;
use crate::on_demand::Flight;
use crate::rollout::RolloutTasks;

/// A deciding control plane's own parts (module docs).
pub struct Decider {
    /// Serialises operations that change the directory's set of names
    /// (write), except creates, which run together (read) and reserve
    /// their names in `pending`.
    pub(crate) ops: tokio::sync::RwLock<()>,
    pending: Mutex<HashSet<String>>,
    /// The newest version of each template creates looked up (saving each
    /// create its directory reads). Template pushes and deletes, the only
    /// writers of templates, clear it under the write side of `ops`, which
    /// no create holds then.
    newest_templates: Mutex<HashMap<String, TemplateRow>>,
    /// Set when graceful shutdown begins: no move or drain starts after it.
    shutting_down: AtomicBool,
    /// Every actor's alarm (see [`crate::alarms`]).
    alarms: Scheduler,
    /// The rollouts this control plane drives (see [`crate::rollout`]).
    pub(crate) rollouts: RolloutTasks,
    /// Creates on first use in flight, by actor (see
    /// [`crate::on_demand`]).
    on_demand: Mutex<HashMap<String, Flight>>,
    /// Serialises label changes, so that the placements take them in the
    /// order the directory applied them (see [`crate::listing`]).
    pub(crate) labels: tokio::sync::Mutex<()>,
    /// The data dir's `LOCK`, held for the control plane's life (embedded).
    _lock: Option<File>,
}

impl Decider {
    pub(crate) fn new(alarms: Scheduler, rollouts: RolloutTasks, lock: Option<File>) -> Self {
        Self {
            ops: tokio::sync::RwLock::new(()),
            pending: Mutex::default(),
            newest_templates: Mutex::default(),
            shutting_down: AtomicBool::new(false),
            alarms,
            rollouts,
            on_demand: Mutex::default(),
            labels: tokio::sync::Mutex::default(),
            _lock: lock,
        }
    }

    /// The create on first use of actor `name` in flight, joined (or begun).
    pub(crate) fn on_demand_flight(&self, name: &str) -> Flight {
        let mut flights = self.on_demand.lock().unwrap_or_else(|p| p.into_inner());
        flights.entry(name.to_owned()).or_default().clone()
    }

    /// `flight`, the create on first use of `name`, is done for its caller:
    /// forgotten once no other caller holds it.
    pub(crate) fn on_demand_landed(&self, name: &str, flight: Flight) {
        let mut flights = self.on_demand.lock().unwrap_or_else(|p| p.into_inner());
        drop(flight);
        // Only the table's handle left: no one else joined or waits.
        if flights
            .get(name)
            .is_some_and(|f| std::sync::Arc::strong_count(f) == 1)
        {
            flights.remove(name);
        }
    }

    /// Every actor's alarm.
    #[must_use]
    pub fn alarms(&self) -> &Scheduler {
        &self.alarms
    }

    /// Actors being created: not placed yet, but a remote worker already
    /// streams their seq-0 snapshot.
    pub(crate) fn lock_pending(&self) -> MutexGuard<'_, HashSet<String>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The newest template versions creates looked up.
    pub(crate) fn lock_newest_templates(&self) -> MutexGuard<'_, HashMap<String, TemplateRow>> {
        self.newest_templates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Begins graceful shutdown; true the first time.
    pub(crate) fn begin_shutdown(&self) -> bool {
        !self.shutting_down.swap(true, Ordering::SeqCst)
    }

    /// Whether graceful shutdown has begun.
    pub(crate) fn shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// 503 "control plane shutting down" once shutdown began: what a move,
    /// drain, upgrade, rollout or re-placement answers then.
    ///
    /// # Errors
    /// 503 while shutting down.
    pub(crate) fn refuse_if_shutting_down(&self, what: &str) -> Result<(), ApiError> {
        if self.shutting_down() {
            return Err(ApiError::new(
                ErrorKind::Unavailable,
                format!(
                    "control plane shutting down: {what} refused; every actor is paused on the worker it is on"
                ),
            ));
        }
        Ok(())
    }
}
