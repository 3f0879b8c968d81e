//! Fencing of a worker's writes: a worker that lost its lease (cluster
//! mode: it was frozen or cut off past its TTL, so its actors may be
//! placed on another worker at a higher epoch) changes nothing of the
//! actors it hosted. [`FencedStore`] wraps the worker's snapshot store and
//! refuses every write, fence and deletion with [`StoreError::Fenced`]
//! while its [`Fence`] does not hold; reads pass. An actor task also asks
//! it ([`SnapshotStore::check_fence`]) before it runs a delivery, so a
//! request queued before the freeze is answered "not applied" rather than
//! run, and after each write, so a lease that ended during the write turns
//! the answer into "may or may not have been applied".
//!
//! The check is a belief about a lease (see `stasis-cluster`'s lease
//! module: the worker gives its lease up before etcd expires it); the
//! store orders what a check cannot stop — a write already in flight when
//! the process was frozen — by placement epoch (the new owner's adoption
//! fence, [`SnapshotStore::adopt`]).

use std::sync::Arc;

use stasis_core::snapshot_store::{SnapshotBytes, SnapshotEntry, SnapshotStore, StoreError};

/// Whether a worker may still change its actors' state.
pub trait Fence: Send + Sync + std::fmt::Debug {
    /// True while the worker holds the lease it hosts its actors under.
    fn holds(&self) -> bool;
}

/// A [`SnapshotStore`] whose writes and deletions need a holding
/// [`Fence`] (module docs).
#[derive(Debug)]
pub struct FencedStore {
    inner: Arc<dyn SnapshotStore>,
    fence: Arc<dyn Fence>,
    worker: String,
}

impl FencedStore {
    /// `inner`, fenced by `fence`, for worker `worker` (named in refusals).
    #[must_use]
    pub fn new(inner: Arc<dyn SnapshotStore>, fence: Arc<dyn Fence>, worker: &str) -> Arc<Self> {
        Arc::new(Self {
            inner,
            fence,
            worker: worker.to_owned(),
        })
    }
}

impl SnapshotStore for FencedStore {
    fn check_fence(&self, actor: &str) -> Result<(), StoreError> {
        if self.fence.holds() {
            Ok(())
        } else {
            Err(StoreError::Fenced {
                worker: self.worker.clone(),
                actor: actor.to_owned(),
            })
        }
    }

    fn write(&self, actor: &str, seq: u64, epoch: u64, bytes: &[u8]) -> Result<(), StoreError> {
        self.check_fence(actor)?;
        self.inner.write(actor, seq, epoch, bytes)
    }

    fn list_acknowledged(
        &self,
        actor: &str,
    ) -> Result<(Vec<SnapshotEntry>, Option<u64>), StoreError> {
        self.inner.list_acknowledged(actor)
    }

    fn list(&self, actor: &str) -> Result<Vec<SnapshotEntry>, StoreError> {
        self.inner.list(actor)
    }

    fn holds_anything(&self, actor: &str) -> Result<bool, StoreError> {
        self.inner.holds_anything(actor)
    }

    fn actors(&self) -> Result<Vec<String>, StoreError> {
        self.inner.actors()
    }

    /// Without the lease, what the store knew of the actor's folder may
    /// be out of date (a new owner may write it): it is dropped and the
    /// store listed.
    fn open_snapshot(&self, actor: &str, seq: u64) -> Result<SnapshotBytes, StoreError> {
        if !self.fence.holds() {
            self.inner.release(actor);
        }
        self.inner.open_snapshot(actor, seq)
    }

    fn hold(&self, actor: &str, epoch: u64) {
        if self.fence.holds() {
            self.inner.hold(actor, epoch);
        }
    }

    fn release(&self, actor: &str) {
        self.inner.release(actor);
    }

    fn fork(&self, src: &str, seq: u64, new: &str, epoch: u64) -> Result<u64, StoreError> {
        self.check_fence(new)?;
        self.inner.fork(src, seq, new, epoch)
    }

    fn checksum_passed(&self, bytes: &SnapshotBytes) {
        self.inner.checksum_passed(bytes);
    }

    fn supports_deltas(&self) -> bool {
        self.inner.supports_deltas()
    }

    fn retain(&self, actor: &str, keep: usize) -> Result<Vec<u64>, StoreError> {
        self.check_fence(actor)?;
        self.inner.retain(actor, keep)
    }

    fn adopt(&self, actor: &str, seq: u64, epoch: u64) -> Result<(), StoreError> {
        self.check_fence(actor)?;
        self.inner.adopt(actor, seq, epoch)
    }

    fn remove(&self, actor: &str, seq: u64) -> Result<(), StoreError> {
        self.check_fence(actor)?;
        self.inner.remove(actor, seq)
    }

    fn remove_actor(&self, actor: &str) -> Result<(), StoreError> {
        self.check_fence(actor)?;
        self.inner.remove_actor(actor)
    }

    fn used_bytes(&self) -> u64 {
        self.inner.used_bytes()
    }

    fn location(&self, actor: &str) -> String {
        self.inner.location(actor)
    }

    fn write_clock_mark(&self, actor: &str, clock_ns: u64) -> Result<(), StoreError> {
        self.check_fence(actor)?;
        self.inner.write_clock_mark(actor, clock_ns)
    }

    fn clock_mark(&self, actor: &str) -> u64 {
        self.inner.clock_mark(actor)
    }

    fn keeps_logs(&self) -> bool {
        self.inner.keeps_logs()
    }

    fn append_log(&self, actor: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.check_fence(actor)?;
        self.inner.append_log(actor, bytes)
    }

    fn replace_log(&self, actor: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.check_fence(actor)?;
        self.inner.replace_log(actor, bytes)
    }

    fn read_log(&self, actor: &str) -> Result<Vec<u8>, StoreError> {
        self.inner.read_log(actor)
    }
}
