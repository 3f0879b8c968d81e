//! The `acknowledged` pointer of an actor's folder: read, and moved to a
//! newer snapshot without a read first where the actor is held (`held`).

use std::io;
use std::time::{Duration, Instant};

use super::names::{self, Acknowledged};
use super::remote::{Failure, OP_TIMEOUT};
use super::{ObjectSnapshotStore, transfer};
use crate::snapshot_store::StoreError;

/// How long after a write began its pointer may be moved from what is
/// known of it (`held`) without a read: the shortest margin by which a
/// worker gives its lease up before etcd ends it (`stasis-cluster`'s lease
/// module: a tenth of the TTL, at least 100 ms). Within it no other owner
/// can have adopted the actor since the writer's fence check; a slower
/// write (a large upload, a process frozen mid-write) reads the pointer
/// first, and never moves a newer owner's back.
const KNOWN_POINTER_FOR: Duration = Duration::from_millis(100);

impl ObjectSnapshotStore {
    /// The acknowledged pointer of `actor` (`None` if absent or unreadable,
    /// logged).
    pub(super) fn acknowledged(&self, actor: &str) -> Result<Option<Acknowledged>, StoreError> {
        let key = names::actor_object_key(actor, names::ACKNOWLEDGED);
        match self.run(
            OP_TIMEOUT,
            transfer::read_small(self.objects.clone(), self.path(&key)),
        ) {
            Ok(bytes) => Ok(serde_json::from_slice(&bytes)
                .inspect_err(|e| tracing::warn!(actor, "ignoring unreadable {key}: {e}"))
                .ok()),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.named("get", &key, &self.location)),
        }
    }

    /// Moves `actor`'s acknowledged pointer to (`seq`, `epoch`) unless it
    /// already names a later one (module docs), for a write that began at
    /// `started`.
    pub(super) fn acknowledge(
        &self,
        actor: &str,
        seq: u64,
        epoch: u64,
        started: Instant,
    ) -> Result<(), StoreError> {
        let now = Acknowledged { seq, epoch };
        // A held actor's pointer is known here (`held` module docs), when
        // the write was quick enough ([`KNOWN_POINTER_FOR`]).
        let known = self
            .held
            .pointer(actor)
            .filter(|_| started.elapsed() < KNOWN_POINTER_FOR);
        let old = match known {
            Some(known) => known,
            None => self.acknowledged(actor)?,
        };
        if let Some(old) = old
            && (old.epoch, old.seq) > (now.epoch, now.seq)
        {
            tracing::info!(
                actor,
                seq,
                epoch,
                ?old,
                "not moving the acknowledged pointer back"
            );
            return Ok(());
        }
        let key = names::actor_object_key(actor, names::ACKNOWLEDGED);
        let body = serde_json::to_vec(&now)
            .map_err(|e| Failure::Io(io::Error::other(e)).named("put", &key, &self.location))?;
        match self.put_small(&key, body) {
            Ok(()) => {
                self.held.pointed(actor, Some(now));
                Ok(())
            }
            Err(e) => {
                self.held.unsure(actor);
                Err(e)
            }
        }
    }
}
