//! The [`SnapshotStore`] methods of an [`ObjectSnapshotStore`]: writes
//! (cache copy, upload, acknowledged pointer), listings from the store,
//! opening through the cache, retention and removal, clock marks.

use std::fs::{self, File};
use std::io;
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::names::Folder;
use super::remote::{Failure, OP_TIMEOUT, timeout_for};
use super::transfer::{Fetched, Source};
use super::{ObjectSnapshotStore, names, transfer, upload};
use crate::durable::replace_atomically;
use crate::snapshot::verify_header;
use crate::snapshot_store::{
    ChainLink, SnapshotBytes, SnapshotEntry, SnapshotStore, StoreError, chain_files,
    chain_retention,
};

impl ObjectSnapshotStore {
    /// What `actor`'s folder holds now, from the store.
    fn folder(&self, actor: &str) -> Result<Folder, StoreError> {
        let key = names::actor_key(actor);
        self.check("list", &key, "actor name", actor)?;
        let listed = self
            .run(
                OP_TIMEOUT,
                transfer::list(self.objects.clone(), self.path(&key)),
            )
            .map_err(|e| e.named("list", &key, &self.location))?;
        let folder = Folder::from_names(listed.into_iter().filter_map(|meta| {
            let name = meta.location.filename()?.to_owned();
            Some((name, meta.size))
        }));
        self.held.listed(actor, &folder);
        Ok(folder)
    }

    /// Snapshot `seq` of a held actor from the cache, when the held folder
    /// names it and this store holds its copy whole (`held` module): no
    /// store round trip. `None` sends the caller to the store.
    fn open_held(&self, actor: &str, seq: u64) -> Option<SnapshotBytes> {
        let found = self.held.find(actor, seq)?;
        let cached = self.cache_path(actor, seq, found.epoch);
        if !cached.metadata().is_ok_and(|m| m.len() == found.bytes) {
            return None;
        }
        map(&cached).ok()
    }

    /// Puts small object `key` (a pointer, a fence, a clock mark), read
    /// back when the answer is lost (`upload` module docs).
    pub(super) fn put_small(&self, key: &str, body: Vec<u8>) -> Result<(), StoreError> {
        let len = body.len() as u64;
        let source = Source::Memory(body.into());
        self.run(
            upload::upload_time(len),
            upload::upload(self.objects.clone(), self.path(key), source),
        )
        .map_err(|e| e.named("put", key, &self.location))
    }

    /// Deletes the objects and cache copies of `found` (snapshots of
    /// `actor`) and the adoption fences `fences`, releasing the snapshots'
    /// bytes from the count.
    fn delete_snapshots(
        &self,
        actor: &str,
        found: &[names::Found],
        fences: &[names::Adoption],
    ) -> Result<(), StoreError> {
        if found.is_empty() && fences.is_empty() {
            return Ok(());
        }
        let key = names::actor_key(actor);
        let paths = found
            .iter()
            .map(|f| names::snapshot_name(f.seq, f.epoch))
            .chain(fences.iter().map(|a| names::adoption_name(a.epoch, a.seq)))
            .map(|name| self.path(&names::actor_object_key(actor, &name)))
            .collect::<Vec<_>>();
        let limit = OP_TIMEOUT + Duration::from_secs(paths.len() as u64);
        let result = self
            .run(limit, transfer::delete(self.objects.clone(), paths))
            .map_err(|e| e.named("remove", &key, &self.location));
        // Some may be gone even on failure: count from the store next open.
        if result.is_ok() {
            self.usage.release(found.iter().map(|f| f.bytes).sum());
            self.held.deleted(actor, found, fences);
        } else {
            self.held.unsure(actor);
        }
        for f in found {
            remove_cached(&self.cache_path(actor, f.seq, f.epoch));
        }
        result
    }

    /// Hard-links the cache copy of `found` (of `src`) as `new`'s copy of
    /// it at `epoch`, when this store holds one whole; best effort (a
    /// missing copy is downloaded when first opened).
    fn link_cached(&self, src: &str, found: names::Found, new: &str, epoch: u64) {
        let from = self.cache_path(src, found.seq, found.epoch);
        if !from.metadata().is_ok_and(|m| m.len() == found.bytes) {
            return;
        }
        let to = self.cache_path(new, found.seq, epoch);
        let linked = to
            .parent()
            .map_or(Ok(()), fs::create_dir_all)
            .and_then(|()| fs::hard_link(&from, &to));
        if let Err(e) = linked {
            tracing::warn!(src, new, "cannot link the cached snapshot: {e}");
        }
    }

    /// A server-side copy of snapshot `found` of `src` as `new`'s snapshot
    /// of the same number at `epoch` (quota counted), and a hard link of
    /// the cache copy; returns its size.
    fn copy_snapshot(
        &self,
        src: &str,
        found: names::Found,
        new: &str,
        epoch: u64,
    ) -> Result<u64, StoreError> {
        let key = names::actor_object_key(new, &names::snapshot_name(found.seq, epoch));
        self.usage.reserve(found.bytes, 0)?;
        let from = names::actor_object_key(src, &names::snapshot_name(found.seq, found.epoch));
        let copied = self
            .run(
                timeout_for(found.bytes),
                transfer::copy(self.objects.clone(), self.path(&from), self.path(&key)),
            )
            .map_err(|e| e.named("copy", &key, &self.location));
        if let Err(e) = copied {
            self.usage.release(found.bytes);
            return Err(e);
        }
        self.link_cached(src, found, new, epoch);
        Ok(found.bytes)
    }

    /// Snapshot `seq`'s place in its chain, from its header (downloaded
    /// into the cache if this store holds no copy); unknown when it cannot
    /// be read or does not verify.
    fn link_of(&self, actor: &str, seq: u64) -> ChainLink {
        let Ok(bytes) = self.open_snapshot(actor, seq) else {
            return ChainLink::Unknown;
        };
        match verify_header(&bytes).map(|h| h.base) {
            Ok(None) => ChainLink::Full,
            Ok(Some(base)) => ChainLink::Delta { base: base.seq },
            Err(_) => ChainLink::Unknown,
        }
    }

    /// Uploads the cache copy `cached` (`len` bytes) as object `key`.
    fn upload_snapshot(&self, key: &str, cached: PathBuf, len: u64) -> Result<(), StoreError> {
        let source = Source::File {
            path: cached,
            len_bytes: len,
        };
        self.run(
            upload::upload_time(len),
            upload::upload(self.objects.clone(), self.path(key), source),
        )
        .map_err(|e| e.named("put", key, &self.location))
    }
}

/// The snapshots that stand for the actor in `folder`, oldest first.
fn entries(folder: &Folder) -> Vec<SnapshotEntry> {
    folder
        .effective()
        .into_iter()
        .map(|f| SnapshotEntry {
            seq: f.seq,
            bytes: f.bytes,
        })
        .collect()
}

/// Removes a cache file; a missing one is fine, another failure is logged.
fn remove_cached(path: &FsPath) {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("cannot remove cached {}: {e}", path.display()),
    }
}

/// Maps the cache file at `path` read-only.
fn map(path: &FsPath) -> io::Result<SnapshotBytes> {
    // Cache files are written under a temp name and renamed into place,
    // never modified in place; the objects they copy are immutable and a
    // removal leaves an existing map valid.
    SnapshotBytes::map_file(File::open(path)?)
}

impl SnapshotStore for ObjectSnapshotStore {
    /// Keeps a copy in the cache, uploads the object (multipart above
    /// 8 MiB, aborted on error), then moves the acknowledged pointer;
    /// returns once both are in the store. A new actor's snapshot 0 has
    /// no pointer (see the body). `epoch` names the object (module
    /// docs).
    fn write(&self, actor: &str, seq: u64, epoch: u64, bytes: &[u8]) -> Result<(), StoreError> {
        let started = Instant::now();
        let key = names::actor_object_key(actor, &names::snapshot_name(seq, epoch));
        self.check("put", &key, "actor name", actor)?;
        let len = bytes.len() as u64;
        let cached = self.cache_path(actor, seq, epoch);
        // The same name written again replaces its object (this store
        // knows its size if it holds a copy).
        let replaced = cached.metadata().map(|m| m.len()).unwrap_or(0);
        self.usage.reserve(len, replaced)?;
        // A new actor (held, its folder listed empty by the create) writing
        // snapshot 0: no pointer to move (below). The cache copy is kept:
        // the actor's first pause opens snapshot 0 as its delta base.
        let new_actor = seq == 0 && self.held.pointer(actor) == Some(None);
        let uploaded = cached
            .parent()
            .map_or(Ok(()), fs::create_dir_all)
            .and_then(|()| replace_atomically(&cached, bytes))
            .map_err(|e| Failure::Io(e).named("cache", &key, &self.location))
            .and_then(|()| self.upload_snapshot(&key, cached.clone(), len));
        if let Err(e) = uploaded {
            remove_cached(&cached);
            self.usage.recount(len, replaced);
            self.held.unsure(actor);
            return Err(e);
        }
        self.held.wrote(
            actor,
            names::Found {
                seq,
                epoch,
                bytes: len,
            },
        );
        // Snapshot 0 of a new actor needs no pointer: the pointer tells a
        // newest snapshot deleted behind the store's back from none
        // written, and with snapshot 0 the only one, losing it leaves the
        // folder empty, which an install reports as missing all the same.
        // One object less per create.
        if new_actor {
            return Ok(());
        }
        // The snapshot is in the store and listed from now on: a pointer
        // that cannot be moved only weakens a later check, it must not
        // make a stored snapshot be reported as not written.
        if let Err(e) = self.acknowledge(actor, seq, epoch, started) {
            tracing::warn!(
                actor,
                seq,
                "snapshot stored; moving the acknowledged pointer: {}",
                e.detail()
            );
        }
        Ok(())
    }

    /// Puts up the fence `adopted-<epoch>-<seq>` unless the folder already
    /// holds one or a snapshot at `epoch` or later (module docs of
    /// `names`: snapshots a fenced-off owner writes after it are stale),
    /// then moves the acknowledged pointer to (`seq`, `epoch`).
    fn adopt(&self, actor: &str, seq: u64, epoch: u64) -> Result<(), StoreError> {
        let started = Instant::now();
        let folder = self.folder(actor)?;
        let fenced = folder.newest_adoption().is_some_and(|a| a.epoch >= epoch)
            || folder.snapshots.iter().any(|f| f.epoch >= epoch);
        if fenced {
            return Ok(());
        }
        let key = names::actor_object_key(actor, &names::adoption_name(epoch, seq));
        self.put_small(&key, Vec::new())
            .inspect_err(|_| self.held.unsure(actor))?;
        let mut fenced = folder;
        fenced.adoptions.push(names::Adoption { epoch, seq });
        self.held.listed(actor, &fenced);
        // The pointer at the new epoch too, so a fenced-off owner's late
        // acknowledgement (older in (epoch, seq) order) cannot move it.
        if let Err(e) = self.acknowledge(actor, seq, epoch, started) {
            tracing::warn!(
                actor,
                seq,
                epoch,
                "adopted; moving the acknowledged pointer: {}",
                e.detail()
            );
        }
        Ok(())
    }

    /// Server-side copies of the objects standing for `seq` and, for a
    /// delta, every snapshot of its chain (see `chain_files`) to
    /// `snapshots/<new>/<seq>-<epoch>.snap`, hard links of this store's
    /// cache copies where it holds them, then `new`'s acknowledged pointer.
    fn fork(&self, src: &str, seq: u64, new: &str, epoch: u64) -> Result<u64, StoreError> {
        let key = names::actor_object_key(new, &names::snapshot_name(seq, epoch));
        self.check("copy", &key, "actor name", new)?;
        let folder = self.folder(src)?;
        if folder.find(seq).is_none() {
            let key = names::actor_object_key(src, &format!("{seq:020}-*.snap"));
            return Err(Failure::Io(io::ErrorKind::NotFound.into()).named(
                "open",
                &key,
                &self.location,
            ));
        }
        if self.folder(new)?.find(seq).is_some() {
            return Err(Failure::Io(io::ErrorKind::AlreadyExists.into()).named(
                "copy",
                &key,
                &self.location,
            ));
        }
        let chain: Vec<u64> = chain_files(self, src, seq)?
            .into_iter()
            .map(|(at, _)| at)
            .collect();
        let mut total = 0;
        for at in chain {
            let Some(found) = folder.find(at) else {
                continue;
            };
            total += self.copy_snapshot(src, found, new, epoch)?;
        }
        self.held.unsure(new);
        self.acknowledge(new, seq, epoch, Instant::now())?;
        Ok(total)
    }

    fn supports_deltas(&self) -> bool {
        true
    }

    fn hold(&self, actor: &str, epoch: u64) {
        self.held.hold(actor, epoch);
    }

    fn release(&self, actor: &str) {
        self.held.release(actor);
    }

    fn list_acknowledged(
        &self,
        actor: &str,
    ) -> Result<(Vec<SnapshotEntry>, Option<u64>), StoreError> {
        let folder = self.folder(actor)?;
        let list = entries(&folder);
        // A pointer a fenced-off owner moved to its own stale write names
        // nothing of the actor's history.
        let acked = if folder.acknowledged {
            let pointer = self.acknowledged(actor)?;
            self.held.pointed(actor, pointer);
            pointer
                .filter(|a| !folder.is_stale(a.seq, a.epoch))
                .map(|a| a.seq)
        } else {
            None
        };
        Ok((list, acked))
    }

    /// The listing alone: no read of the pointer, which only
    /// [`SnapshotStore::list_acknowledged`] needs.
    fn list(&self, actor: &str) -> Result<Vec<SnapshotEntry>, StoreError> {
        Ok(entries(&self.folder(actor)?))
    }

    /// From one listing, which the store then knows of a held actor.
    fn holds_anything(&self, actor: &str) -> Result<bool, StoreError> {
        Ok(!self.folder(actor)?.is_empty())
    }

    fn actors(&self) -> Result<Vec<String>, StoreError> {
        let root = self.path(names::SNAPSHOTS);
        let listed = self
            .run(
                OP_TIMEOUT,
                transfer::list(self.objects.clone(), root.clone()),
            )
            .map_err(|e| e.named("list", names::SNAPSHOTS, &self.location))?;
        let mut names: Vec<String> = listed
            .iter()
            .filter_map(|meta| {
                let mut rest = meta.location.prefix_match(&root)?;
                let actor = rest.next()?;
                // Only objects inside an actor's folder.
                rest.next().map(|_| actor.as_ref().to_owned())
            })
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// From the cache when this store holds a copy (same name and size),
    /// else downloaded into the cache first. The store's listing decides
    /// which epoch stands for `seq` (module docs).
    fn open_snapshot(&self, actor: &str, seq: u64) -> Result<SnapshotBytes, StoreError> {
        if let Some(held) = self.open_held(actor, seq) {
            return Ok(held);
        }
        let Some(found) = self.folder(actor)?.find(seq) else {
            let key = names::actor_object_key(actor, &format!("{seq:020}-*.snap"));
            return Err(Failure::Io(io::ErrorKind::NotFound.into()).named(
                "open",
                &key,
                &self.location,
            ));
        };
        let key = names::actor_object_key(actor, &names::snapshot_name(seq, found.epoch));
        let cached = self.cache_path(actor, seq, found.epoch);
        let have = cached.metadata().is_ok_and(|m| m.len() == found.bytes);
        if !have {
            // Two tries (`transfer::download`).
            let fetched = self
                .run(
                    timeout_for(found.bytes) * 2,
                    transfer::download(
                        self.objects.clone(),
                        self.path(&key),
                        cached.clone(),
                        found.bytes,
                    ),
                )
                .map_err(|e| e.named("get", &key, &self.location))?;
            self.downloads.fetch_add(1, Ordering::Relaxed);
            if let Fetched::Corrupt(file) = fetched {
                // Not cached: verifying these bytes names the object.
                return SnapshotBytes::map_file(file)
                    .map_err(|e| Failure::Io(e).named("map", &key, &self.location));
            }
        }
        map(&cached).map_err(|e| Failure::Io(e).named("map", &key, &self.location))
    }

    /// Deletes every object (all epochs) of the oldest sequence numbers
    /// beyond `keep` that no kept delta's chain needs (`chain_retention`),
    /// the stale objects (shadowed or written by a
    /// fenced-off owner, see `names::Folder::effective`), and every
    /// adoption fence but the newest.
    fn retain(&self, actor: &str, keep: usize) -> Result<Vec<u64>, StoreError> {
        let folder = self.folder(actor)?;
        let effective = folder.effective();
        let entries: Vec<SnapshotEntry> = effective
            .iter()
            .map(|f| SnapshotEntry {
                seq: f.seq,
                bytes: f.bytes,
            })
            .collect();
        let removed = if entries.len() > keep.max(1) {
            chain_retention(&entries, keep, |seq| self.link_of(actor, seq))
        } else {
            Vec::new()
        };
        let doomed: Vec<names::Found> = folder
            .snapshots
            .iter()
            .filter(|f| removed.contains(&f.seq) || !effective.contains(f))
            .copied()
            .collect();
        let newest = folder.newest_adoption();
        let fences: Vec<names::Adoption> = folder
            .adoptions
            .iter()
            .filter(|a| Some(**a) != newest)
            .copied()
            .collect();
        self.delete_snapshots(actor, &doomed, &fences)?;
        Ok(removed)
    }

    fn remove(&self, actor: &str, seq: u64) -> Result<(), StoreError> {
        let folder = self.folder(actor)?;
        let doomed: Vec<names::Found> = folder
            .snapshots
            .iter()
            .filter(|f| f.seq == seq)
            .copied()
            .collect();
        self.delete_snapshots(actor, &doomed, &[])
    }

    /// Deletes every object of the actor's folder (snapshots, pointer,
    /// clock mark) and its cache folder.
    fn remove_actor(&self, actor: &str) -> Result<(), StoreError> {
        let key = names::actor_key(actor);
        self.check("remove", &key, "actor name", actor)?;
        let dir = self.path(&key);
        let objects = self.objects.clone();
        let listed = self
            .run(OP_TIMEOUT, transfer::list(objects.clone(), dir))
            .map_err(|e| e.named("list", &key, &self.location))?;
        let snapshot_bytes: u64 = listed
            .iter()
            .filter(|m| {
                m.location
                    .filename()
                    .and_then(names::parse_snapshot_name)
                    .is_some()
            })
            .map(|m| m.size)
            .sum();
        let limit = OP_TIMEOUT + Duration::from_secs(listed.len() as u64);
        let paths = listed.into_iter().map(|m| m.location).collect();
        self.run(limit, transfer::delete(objects, paths))
            .map_err(|e| e.named("remove", &key, &self.location))?;
        self.usage.release(snapshot_bytes);
        self.held.release(actor);
        let cache_dir = self.cache.join(names::SNAPSHOTS).join(actor);
        match fs::remove_dir_all(&cache_dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(actor, "cannot remove cache {}: {e}", cache_dir.display()),
        }
        Ok(())
    }

    /// Bytes of snapshot objects in the store: counted at open, then
    /// updated by this store's writes and deletions.
    fn used_bytes(&self) -> u64 {
        self.usage.used_bytes()
    }

    /// `<url>/snapshots/<actor>` (no credentials: they are never in the URL).
    fn location(&self, actor: &str) -> String {
        format!("{}/{}", self.location, names::actor_key(actor))
    }

    /// A small object, `snapshots/<actor>/clock.mark`: decimal nanoseconds
    /// and a newline.
    fn write_clock_mark(&self, actor: &str, clock_ns: u64) -> Result<(), StoreError> {
        let key = names::actor_object_key(actor, names::CLOCK_MARK);
        self.check("put", &key, "actor name", actor)?;
        self.put_small(&key, format!("{clock_ns}\n").into_bytes())
    }

    fn clock_mark(&self, actor: &str) -> u64 {
        let key = names::actor_object_key(actor, names::CLOCK_MARK);
        if names::check_segment("actor name", actor).is_err() {
            return 0;
        }
        let read = self.run(
            OP_TIMEOUT,
            transfer::read_small(self.objects.clone(), self.path(&key)),
        );
        match read {
            Ok(bytes) => std::str::from_utf8(&bytes)
                .ok()
                .and_then(|text| text.trim().parse().ok())
                .unwrap_or_else(|| {
                    tracing::warn!(actor, "ignoring unreadable clock mark");
                    0
                }),
            Err(e) if e.is_not_found() => 0,
            Err(e) => {
                let e = e.named("get", &key, &self.location);
                tracing::warn!(actor, "ignoring unreadable clock mark: {}", e.detail());
                0
            }
        }
    }
}
