//! Journal segments in the object store: the objects a cluster worker's
//! shipped journal ([`crate::journal::shipped`]) group-commits its
//! actors' entries into, under `journal/<worker>/<name>.seg`, beside the
//! snapshot folders (never counted by the snapshot quota, never listed as
//! an actor).

use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::remote::{OP_TIMEOUT, timeout_for};
use super::transfer::Source;
use super::{ObjectSnapshotStore, transfer, upload};
use crate::journal::shipped::{SegmentMeta, SegmentObjects};
use crate::snapshot_store::StoreError;

/// The prefix of every journal segment.
const JOURNAL: &str = "journal";

/// Segments read at once by [`SegmentObjects::get_segments`].
const GET_PARALLEL: usize = 16;

/// The key of segment `name` (`<worker>/<file>.seg`).
fn segment_key(name: &str) -> String {
    format!("{JOURNAL}/{name}")
}

impl ObjectSnapshotStore {
    /// Checks every `/`-separated part of segment `name`.
    fn check_segment_name(&self, op: &'static str, name: &str) -> Result<String, StoreError> {
        let key = segment_key(name);
        for part in name.split('/') {
            self.check(op, &key, "journal segment name", part)?;
        }
        Ok(key)
    }
}

impl SegmentObjects for ObjectSnapshotStore {
    fn put_segment(&self, name: &str, bytes: Bytes) -> Result<(), StoreError> {
        let key = self.check_segment_name("put", name)?;
        let len = bytes.len() as u64;
        self.run(
            upload::upload_time(len),
            upload::upload(self.objects.clone(), self.path(&key), Source::Memory(bytes)),
        )
        .map_err(|e| e.named("put", &key, &self.location))
    }

    fn list_segments(&self) -> Result<Vec<SegmentMeta>, StoreError> {
        let listed = self
            .run(
                OP_TIMEOUT,
                transfer::list(self.objects.clone(), self.path(JOURNAL)),
            )
            .map_err(|e| e.named("list", JOURNAL, &self.location))?;
        let root = self.path(JOURNAL);
        let now = SystemTime::now();
        Ok(listed
            .into_iter()
            .filter_map(|meta| {
                let parts: Vec<String> = meta
                    .location
                    .prefix_match(&root)?
                    .map(|p| p.as_ref().to_owned())
                    .collect();
                let name = parts.join("/");
                let age = now
                    .duration_since(SystemTime::from(meta.last_modified))
                    .unwrap_or(Duration::ZERO);
                name.ends_with(".seg").then_some(SegmentMeta {
                    name,
                    size: meta.size,
                    age,
                })
            })
            .collect())
    }

    fn get_segment(&self, name: &str) -> Result<Bytes, StoreError> {
        let key = self.check_segment_name("get", name)?;
        self.run(
            timeout_for(u64::from(u32::MAX)),
            transfer::read_sized(self.objects.clone(), self.path(&key)),
        )
        .map_err(|e| e.named("get", &key, &self.location))
    }

    fn get_segments(&self, names: &[String]) -> Result<Vec<Result<Bytes, StoreError>>, StoreError> {
        use futures_util::StreamExt as _;
        let mut keys = Vec::with_capacity(names.len());
        for name in names {
            keys.push(self.check_segment_name("get", name)?);
        }
        let paths: Vec<_> = keys.iter().map(|key| self.path(key)).collect();
        let objects = self.objects.clone();
        // Each read has its own bound by its size (`read_sized`).
        let limit = timeout_for(u64::from(u32::MAX));
        let fetched = self
            .run(limit, async move {
                let reads = futures_util::stream::iter(paths)
                    .map(|path| transfer::read_sized(objects.clone(), path))
                    .buffered(GET_PARALLEL)
                    .collect::<Vec<_>>()
                    .await;
                Ok(reads)
            })
            .map_err(|e| e.named("get", JOURNAL, &self.location))?;
        Ok(fetched
            .into_iter()
            .zip(&keys)
            .map(|(read, key)| read.map_err(|e| e.named("get", key, &self.location)))
            .collect())
    }

    fn delete_segments(&self, names: &[String]) -> Result<(), StoreError> {
        let mut paths = Vec::with_capacity(names.len());
        for name in names {
            let key = self.check_segment_name("delete", name)?;
            paths.push(self.path(&key));
        }
        let limit = OP_TIMEOUT + Duration::from_secs(paths.len() as u64);
        self.run(limit, transfer::delete(self.objects.clone(), paths))
            .map_err(|e| e.named("delete", JOURNAL, &self.location))
    }
}
