//! Following a small part of the key space as a map that converges: a task
//! on the background runtime lists the range (paged), watches it from the
//! next revision and applies puts and deletes; when the watch breaks (a
//! member died, the connection dropped) or its revision was compacted, it
//! lists and watches again, backing off from 100 ms to 2 s. Used by
//! [`Etcd::watch_workers`] and [`Etcd::watch_leader`](super::Etcd::watch_leader),
//! which publish the whole map after each change. The actors, too many to
//! list, are watched by their changes alone (see [`super::changes`]), with
//! the helpers at the end of this module.

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::{EventType, GetOptions, KeyValue, WatchOptions};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::values::ActorValue;
use super::{Etcd, WorkerRecord, back_off, prefix_end};
use stasis_contract::directory::{ActorPut, ActorsChange};

/// First pause before re-listing after a failure.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// The keys a follower follows.
#[derive(Clone)]
pub(crate) enum Range {
    /// Every key under this prefix (ending in `/`); map keys are the rest.
    Under(String),
    /// This one key; its map key is `""`.
    Key(String),
}

impl Range {
    pub(crate) fn start(&self) -> &str {
        match self {
            Range::Under(k) | Range::Key(k) => k,
        }
    }

    fn name(&self, key: &[u8]) -> String {
        String::from_utf8_lossy(&key[self.start().len().min(key.len())..]).into_owned()
    }
}

/// A record as a watch holds it: its value, and the etcd revision its key
/// was created at (a new one when the key is deleted and put again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Versioned<V> {
    pub(crate) value: V,
    pub(crate) created: i64,
}

fn decode<V: DeserializeOwned>(kv: &KeyValue) -> Option<Versioned<V>> {
    match serde_json::from_slice(kv.value()) {
        Ok(value) => Some(Versioned {
            value,
            created: kv.create_revision(),
        }),
        Err(e) => {
            tracing::warn!(key = %String::from_utf8_lossy(kv.key()), "ignoring an undecodable record: {e}");
            None
        }
    }
}

/// The registered workers of a watch's map.
fn workers(
    map: &BTreeMap<String, Versioned<WorkerRecord>>,
    _revision: i64,
) -> BTreeMap<String, WorkerRecord> {
    map.iter()
        .map(|(name, v)| (name.clone(), v.value.clone()))
        .collect()
}

impl Etcd {
    /// The registered workers by name, kept current by a background task
    /// (empty until the first listing arrives). The task ends when every
    /// receiver is dropped.
    pub fn watch_workers(&self) -> watch::Receiver<BTreeMap<String, WorkerRecord>> {
        self.follow(Range::Under(self.key("workers/")), workers, None)
    }

    /// [`Etcd::watch_workers`], returned once the first listing is in
    /// (so an empty map means no worker is registered).
    ///
    /// # Errors
    /// If the follower task ended before its first listing.
    pub async fn watch_workers_listed(
        &self,
    ) -> anyhow::Result<watch::Receiver<BTreeMap<String, WorkerRecord>>> {
        let (listed, first) = tokio::sync::oneshot::channel();
        let rx = self.follow(Range::Under(self.key("workers/")), workers, Some(listed));
        first
            .await
            .map_err(|_| anyhow::anyhow!("the watch of the workers ended before listing them"))?;
        Ok(rx)
    }

    /// Spawns the follower of `range`, publishing `project(map, revision)`
    /// after each change (`revision`: etcd's revision `map` is current
    /// at); `listed` is told once the first listing is published.
    pub(crate) fn follow<V, O, P>(
        &self,
        range: Range,
        project: P,
        listed: Option<tokio::sync::oneshot::Sender<()>>,
    ) -> watch::Receiver<O>
    where
        V: DeserializeOwned + Send + Sync + 'static,
        O: PartialEq + Send + Sync + 'static,
        P: Fn(&BTreeMap<String, Versioned<V>>, i64) -> O + Send + Sync + 'static,
    {
        let (tx, rx) = watch::channel(project(&BTreeMap::new(), 0));
        let etcd = self.clone();
        self.spawn(async move {
            let sink = Projected {
                map: std::sync::Mutex::new(BTreeMap::new()),
                tx,
                project,
            };
            tokio::select! {
                () = follow(etcd, range, &sink, listed) => {}
                () = sink.tx.closed() => {}
            }
        });
        rx
    }

    /// The key-values of `range` and the revision they were read at.
    async fn read_range(&self, range: &Range) -> Result<(Vec<KeyValue>, i64), etcd_client::Error> {
        match range {
            Range::Under(dir) => self.list(dir).await,
            Range::Key(key) => {
                let mut resp = self.client().get(key.as_str(), None::<GetOptions>).await?;
                let revision = resp.header().map_or(0, |h| h.revision());
                Ok((resp.take_kvs(), revision))
            }
        }
    }
}

/// What a follower does with what it reads: a listing of the whole range,
/// then the changes of each watch event (`None`: the key was deleted).
pub(crate) trait Sink: Sync {
    /// The records' type.
    type Value: DeserializeOwned;
    /// The whole range at `revision` (at start and after each re-listing).
    fn listed(&self, records: Vec<(String, Versioned<Self::Value>)>, revision: i64);
    /// The changes of one watch event (each with its own revision),
    /// bringing the range to `revision`.
    fn changed(&self, changes: Vec<Change<Self::Value>>, revision: i64);
}

/// A follower that keeps the map and publishes `project(map, revision)`
/// when it changed.
struct Projected<V, O, P> {
    map: std::sync::Mutex<BTreeMap<String, Versioned<V>>>,
    tx: watch::Sender<O>,
    project: P,
}

impl<V, O, P> Projected<V, O, P>
where
    O: PartialEq,
    P: Fn(&BTreeMap<String, Versioned<V>>, i64) -> O,
{
    fn publish(&self, map: &BTreeMap<String, Versioned<V>>, revision: i64) {
        let now = (self.project)(map, revision);
        self.tx.send_if_modified(|old| {
            let changed = *old != now;
            if changed {
                *old = now;
            }
            changed
        });
    }

    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Versioned<V>>> {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl<V, O, P> Sink for Projected<V, O, P>
where
    V: DeserializeOwned + Send,
    O: PartialEq + Send + Sync,
    P: Fn(&BTreeMap<String, Versioned<V>>, i64) -> O + Sync,
{
    type Value = V;

    fn listed(&self, records: Vec<(String, Versioned<V>)>, revision: i64) {
        let mut map = self.map();
        *map = records.into_iter().collect();
        self.publish(&map, revision);
    }

    fn changed(&self, changes: Vec<Change<V>>, revision: i64) {
        let mut map = self.map();
        for (name, value, _) in changes {
            match value {
                Some(v) => map.insert(name, v),
                None => map.remove(&name),
            };
        }
        self.publish(&map, revision);
    }
}

/// One key's change in a watch event: its name, its record (`None`:
/// deleted) and the revision of the change.
pub(crate) type Change<V> = (String, Option<Versioned<V>>, i64);

/// The actors' changes of one watch event as an [`ActorsChange`] bringing
/// them to `revision`; `None` if it changed none.
pub(crate) fn actors_changed(
    changes: Vec<Change<ActorValue>>,
    revision: i64,
) -> Option<ActorsChange> {
    let mut put = Vec::new();
    let mut deleted = Vec::new();
    for (name, value, at) in changes {
        match value {
            Some(v) => put.push(ActorPut {
                row: v.value.row(&name),
                generation: v.created,
                revision: at,
            }),
            None => deleted.push((name, at)),
        }
    }
    (!put.is_empty() || !deleted.is_empty()).then_some(ActorsChange::Changed {
        put,
        deleted,
        revision,
    })
}

/// The changes of `range` in one watch response, raising
/// `applied_revision` to the newest.
pub(crate) fn event_changes<V: DeserializeOwned>(
    range: &Range,
    resp: &etcd_client::WatchResponse,
    applied_revision: &mut i64,
) -> Vec<Change<V>> {
    let mut changes = Vec::with_capacity(resp.events().len());
    for event in resp.events() {
        let Some(kv) = event.kv() else { continue };
        let at = kv.mod_revision();
        *applied_revision = (*applied_revision).max(at);
        let name = range.name(kv.key());
        match event.event_type() {
            EventType::Put => {
                if let Some(v) = decode(kv) {
                    changes.push((name, Some(v), at));
                }
            }
            EventType::Delete => changes.push((name, None, at)),
        }
    }
    changes
}

async fn follow<S: Sink>(
    etcd: Etcd,
    range: Range,
    sink: &S,
    mut listed: Option<tokio::sync::oneshot::Sender<()>>,
) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let (kvs, revision) = match etcd.read_range(&range).await {
            Ok(read) => read,
            Err(e) => {
                tracing::warn!(
                    range = range.start(),
                    "listing from etcd failed, retrying: {e}"
                );
                back_off(&mut backoff).await;
                continue;
            }
        };
        let records = kvs
            .iter()
            .filter_map(|kv| Some((range.name(kv.key()), decode(kv)?)))
            .collect();
        drop(kvs);
        let mut applied_revision = revision;
        sink.listed(records, applied_revision);
        if let Some(listed) = listed.take() {
            let _ = listed.send(());
        }
        let mut options = WatchOptions::new().with_start_revision(revision + 1);
        if let Range::Under(dir) = &range {
            options = options.with_range(prefix_end(dir));
        }
        let mut stream = match etcd.client().watch(range.start(), Some(options)).await {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!(range = range.start(), "watching etcd failed, retrying: {e}");
                back_off(&mut backoff).await;
                continue;
            }
        };
        loop {
            let resp = match stream.message().await {
                Ok(Some(resp)) => resp,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(
                        range = range.start(),
                        "the etcd watch broke, re-listing: {e}"
                    );
                    break;
                }
            };
            if resp.canceled() || resp.compact_revision() > 0 {
                tracing::warn!(
                    range = range.start(),
                    "the etcd watch was cancelled ({}), re-listing",
                    resp.cancel_reason()
                );
                break;
            }
            let changes = event_changes(&range, &resp, &mut applied_revision);
            sink.changed(changes, applied_revision);
            backoff = FIRST_BACKOFF;
        }
        back_off(&mut backoff).await;
    }
}
