//! Where a `stasis worker run` process keeps its actors' snapshots and
//! finds template modules, by how it joins its cluster: [`joined`] (embedded
//! mode: a local copy of the snapshots it streams to the control plane,
//! templates from the control plane) or [`registered`] (cluster mode: the
//! shared store, fenced by the worker's etcd lease, which also takes its
//! journal's segments).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;

use super::joined::ControlTemplates;
use super::membership::{join_until_admitted, settings_when_written};
use super::options::{RegisteredOptions, WorkerOptions};
use super::{Cluster, LeaseSlot, lease_holds};
use stasis_cluster::client::Peer;
use stasis_cluster::etcd::Etcd;
use stasis_cluster::shared::StoreTemplates;
use stasis_contract::proto::{JoinAnswer, JoinRequest};
use stasis_contract::templates::FetchTemplate;
use stasis_core::journal::shipped::SegmentObjects;
use stasis_core::snapshot_files::LocalSnapshotStore;
use stasis_core::snapshot_objects::ObjectSnapshotStore;
use stasis_core::snapshot_store::SnapshotStore;
use stasis_worker::fence::{Fence, FencedStore};

/// Where a worker keeps its actors' snapshots, finds template modules and
/// ships its journal (cluster mode: the object store takes the segments).
pub(super) struct Storage {
    /// Its actors' snapshots.
    pub(super) store: Arc<dyn SnapshotStore>,
    /// Where a template module missing from the data dir comes from.
    pub(super) fetch: Box<dyn FetchTemplate>,
    /// Where the shipped journal puts its segments (cluster mode).
    pub(super) segments: Option<Arc<dyn SegmentObjects>>,
}

/// The fence of a cluster-mode worker's store: it holds while the worker
/// believes in its lease (see the lease module: the worker gives it up
/// before etcd expires it, so before the leader can place its actors
/// elsewhere).
struct LeaseFence(LeaseSlot);

impl std::fmt::Debug for LeaseFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LeaseFence").field(&self.holds()).finish()
    }
}

impl Fence for LeaseFence {
    fn holds(&self) -> bool {
        lease_holds(&self.0)
    }
}

/// Embedded mode: joins the control plane at `url` (retrying until it
/// admits this worker, listening at `bound`); snapshots are kept in the
/// data dir's `snapshots/`, cleared first.
///
/// # Errors
/// If the control plane refuses this worker for good, or the data dir's
/// snapshots cannot be cleared or opened.
pub(super) async fn joined(
    options: &WorkerOptions,
    url: &str,
    bound: SocketAddr,
) -> anyhow::Result<(Cluster, JoinAnswer, Storage)> {
    let snapshots = options.data_dir.join("snapshots");
    // The control plane's store is authoritative: local copies
    // from an earlier run are stale.
    if snapshots.exists() {
        std::fs::remove_dir_all(&snapshots)
            .with_context(|| format!("clearing {}", snapshots.display()))?;
    }
    let control = Peer::with_identity(
        url,
        options.token.as_deref(),
        "control plane",
        options.internal_tls.as_deref(),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let join = JoinRequest {
        name: options.name.clone(),
        address: bound.to_string(),
    };
    let answer = join_until_admitted(&control, &join)
        .await
        .map_err(|e| anyhow::anyhow!("the control plane refused this worker: {e}"))?;
    let store = Arc::new(LocalSnapshotStore::open(&snapshots, None)?);
    let fetch = Box::new(ControlTemplates {
        control: control.clone(),
    });
    Ok((
        Cluster::Joined {
            control: Box::new(control),
            join,
        },
        answer,
        Storage {
            store,
            fetch,
            segments: None,
        },
    ))
}

/// Cluster mode: waits for the cluster's settings in etcd and opens the
/// shared store (the one those settings name), fenced by the lease this
/// worker will hold; it registers later, at `--advertise` or `bound`.
///
/// # Errors
/// If etcd cannot be reached, `--snapshot-store` is not the cluster's, or
/// the store cannot be opened.
pub(super) async fn registered(
    options: &WorkerOptions,
    registered: &RegisteredOptions,
    bound: SocketAddr,
) -> anyhow::Result<(Cluster, JoinAnswer, Storage)> {
    let etcd = Etcd::connect(&registered.etcd).await?;
    let answer = settings_when_written(&etcd).await;
    let mine = registered.store.to_string();
    if let Some(theirs) = answer.snapshot_store.as_ref().filter(|s| **s != mine) {
        anyhow::bail!(
            "refusing to start: --snapshot-store is {mine} here but {theirs} in the cluster's settings; every process of a cluster shares one store"
        );
    }
    let cache = options.data_dir.join("snapshot-cache");
    let url = registered.store.clone();
    let shared = tokio::task::spawn_blocking(move || ObjectSnapshotStore::open(&url, &cache, None))
        .await?
        .map_err(|e| anyhow::anyhow!("--snapshot-store {}: {}", registered.store, e.detail()))?;
    let shared = Arc::new(shared);
    let address = match &registered.advertise {
        Some(address) => address.clone(),
        None => bound.to_string(),
    };
    let lease = LeaseSlot::default();
    let fenced = FencedStore::new(
        shared.clone(),
        Arc::new(LeaseFence(lease.clone())),
        &options.name,
    );
    let cluster = Cluster::Registered {
        etcd,
        address,
        lease_ttl: registered.lease_ttl,
        lease,
    };
    let fetch = Box::new(StoreTemplates::new(shared.clone()));
    let storage = Storage {
        store: fenced,
        fetch,
        segments: Some(shared),
    };
    Ok((cluster, answer, storage))
}
