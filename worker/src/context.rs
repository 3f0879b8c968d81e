//! What every actor task of a worker shares, behind one `Arc`: the
//! worker's name, engine, snapshot store, metrics, replicator, live-instance
//! slots and journal. A task reads them; only the worker sets the journal
//! (once).

use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use stasis_contract::error::ApiError;
use stasis_contract::metrics::Metrics;
use stasis_core::engine::StasisEngine;
use stasis_core::snapshot_store::SnapshotStore;

use crate::journaled::Log;
use crate::live::LiveSlots;

/// Copies every acknowledged snapshot somewhere durable before the pause
/// or checkpoint is acknowledged: a remote worker streams its snapshots to
/// the control plane's store this way (DESIGN.md, "Scale out / scale in").
pub trait Replicator: Send + Sync {
    /// Stores `bytes` as snapshot `seq` of `actor`; resolves once durable.
    fn replicate(
        &self,
        actor: &str,
        seq: u64,
        bytes: Arc<Vec<u8>>,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<(), ApiError>> + Send>>;
}

/// A worker's shared parts (module docs).
pub(crate) struct Context {
    /// The worker's name.
    pub(crate) worker: String,
    pub(crate) engine: Arc<StasisEngine>,
    pub(crate) store: Arc<dyn SnapshotStore>,
    pub(crate) metrics: Arc<Metrics>,
    /// Where snapshots are copied before they are acknowledged (a remote
    /// worker without a shared store).
    pub(crate) replicator: Option<Arc<dyn Replicator>>,
    /// The worker's `--max-live` slots, if it has a cap.
    pub(crate) live: Option<Arc<LiveSlots>>,
    /// The journal its actors append to, once set (durability levels
    /// `request` and `store`): the data dir's, or a shipped one.
    pub(crate) journal: OnceLock<Log>,
}
