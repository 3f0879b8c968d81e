//! What this store knows of the folders of the actors its worker holds
//! ([`SnapshotStore::hold`]): while a worker owns an actor at a placement
//! epoch and the store holds that placement's claim, nothing but this
//! worker changes which snapshots stand for the actor (a fenced-off owner's
//! late writes are stale by epoch, and a new owner needs a new placement,
//! which releases the actor here first). So the folder is listed once per
//! placement and then kept up to date by this store's own writes and
//! deletions, and a resume on the worker that wrote the actor's newest
//! snapshot opens its chain from the cache with no store round trip
//! (issue 32, item 3: "local hits").
//!
//! The `acknowledged` pointer is known the same way: absent when the
//! held folder was listed without it, else as this store last read or
//! wrote it, so moving it after a snapshot is one PUT, not a GET first.
//!
//! A held folder is dropped — the next open lists the store again — when
//! the actor is released (moved away, deleted, stopped on a lost lease),
//! written at another epoch, or when a write or deletion ended in an
//! unknown outcome.
//!
//! [`SnapshotStore::hold`]: crate::snapshot_store::SnapshotStore::hold

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::names::{Acknowledged, Adoption, Folder, Found};

/// The held actors of one store and what their folders hold.
#[derive(Debug, Default)]
pub(super) struct Held {
    actors: Mutex<HashMap<String, Holding>>,
}

#[derive(Debug)]
struct Holding {
    /// The placement epoch the actor is held at.
    epoch: u64,
    /// The folder as listed once and changed since by this store; `None`
    /// until the first listing after the hold.
    folder: Option<Folder>,
    /// The acknowledged pointer: `Some(None)` known absent, `Some(Some)`
    /// as last read or written here, `None` unknown (read it).
    pointer: Option<Option<Acknowledged>>,
}

impl Held {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Holding>> {
        self.actors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `actor` is held at `epoch` from now on; a hold at another epoch
    /// forgets what was known.
    pub(super) fn hold(&self, actor: &str, epoch: u64) {
        let mut actors = self.lock();
        match actors.get(actor) {
            Some(h) if h.epoch == epoch => {}
            _ => {
                actors.insert(
                    actor.to_owned(),
                    Holding {
                        epoch,
                        folder: None,
                        pointer: None,
                    },
                );
            }
        }
    }

    /// `actor` is no longer held.
    pub(super) fn release(&self, actor: &str) {
        self.lock().remove(actor);
    }

    /// The snapshot standing for `seq` in `actor`'s held folder: `None`
    /// when the actor is not held, its folder not listed yet, or the
    /// folder has no such snapshot (the caller lists the store then).
    pub(super) fn find(&self, actor: &str, seq: u64) -> Option<Found> {
        self.lock()
            .get(actor)
            .and_then(|h| h.folder.as_ref())
            .and_then(|folder| folder.find(seq))
    }

    /// The store listed `actor`'s folder as `folder`: kept while held.
    /// A folder without the pointer object says the pointer is absent.
    pub(super) fn listed(&self, actor: &str, folder: &Folder) {
        if let Some(h) = self.lock().get_mut(actor) {
            h.folder = Some(folder.clone());
            if !folder.acknowledged {
                h.pointer = Some(None);
            }
        }
    }

    /// The acknowledged pointer of held `actor` as known here (`Some(None)`:
    /// absent); `None` when unknown or the actor is not held.
    pub(super) fn pointer(&self, actor: &str) -> Option<Option<Acknowledged>> {
        self.lock().get(actor).and_then(|h| h.pointer)
    }

    /// The pointer of held `actor` was read or written as `pointer`.
    pub(super) fn pointed(&self, actor: &str, pointer: Option<Acknowledged>) {
        if let Some(h) = self.lock().get_mut(actor) {
            h.pointer = Some(pointer);
        }
    }

    /// This store wrote snapshot `found` of `actor`: added to the held
    /// folder when written at the held epoch; another epoch means the
    /// actor is no longer held here as it was.
    pub(super) fn wrote(&self, actor: &str, found: Found) {
        let mut actors = self.lock();
        let Some(h) = actors.get_mut(actor) else {
            return;
        };
        if h.epoch != found.epoch {
            actors.remove(actor);
            return;
        }
        if let Some(folder) = &mut h.folder {
            folder
                .snapshots
                .retain(|f| (f.seq, f.epoch) != (found.seq, found.epoch));
            folder.snapshots.push(found);
        }
    }

    /// This store deleted snapshots `found` and fences `fences` of
    /// `actor`.
    pub(super) fn deleted(&self, actor: &str, found: &[Found], fences: &[Adoption]) {
        if let Some(folder) = self.lock().get_mut(actor).and_then(|h| h.folder.as_mut()) {
            folder.snapshots.retain(|f| !found.contains(f));
            folder.adoptions.retain(|a| !fences.contains(a));
        }
    }

    /// A write or deletion of `actor`'s objects ended without a known
    /// outcome: the folder is listed again next time.
    pub(super) fn unsure(&self, actor: &str) {
        if let Some(h) = self.lock().get_mut(actor) {
            h.folder = None;
            h.pointer = None;
        }
    }
}
