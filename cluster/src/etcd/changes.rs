//! What a follower's placement cache reads from etcd: one actor's record
//! (a serializable read of its one key, on a cache miss) and the actors'
//! changes from now on, without a listing, so that a follower starts in a
//! time that does not grow with the number of actors and each event costs
//! in proportion to what it changed.
//!
//! The watch of changes resumes from the revision it applied when it
//! breaks (a member died, the connection dropped), so no change is missed;
//! only when that revision was compacted does it start again from the
//! current one, and says so ([`ActorsChange::Watching`]): a cache then
//! forgets what it learnt.

use etcd_client::{GetOptions, WatchOptions};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::values::{ActorValue, decode};
use super::watch::{FIRST_BACKOFF, Range, actors_changed, event_changes};
use super::{Etcd, back_off, get, prefix_end};
use stasis_contract::directory::{ActorRead, ActorsChange};
use stasis_contract::error::ApiError;

impl Etcd {
    /// Actor `name`'s record, with the revision read at: read serializably
    /// (from whichever member answers, without a round of consensus), and
    /// again linearizably if that member was behind revision `at_least`.
    ///
    /// # Errors
    /// 500 if etcd cannot be read or the record cannot be decoded.
    pub(crate) async fn read_actor(
        &self,
        name: &str,
        at_least: i64,
    ) -> Result<ActorRead, ApiError> {
        let key = self.key(&format!("actors/{name}"));
        let kv = self.client().kv_client();
        let mut resp = get(&kv, &key, GetOptions::new().with_serializable()).await?;
        if revision_of(&resp) < at_least {
            resp = get(&kv, &key, GetOptions::new()).await?;
        }
        let revision = revision_of(&resp);
        let Some(found) = resp.kvs().first() else {
            return Ok(ActorRead {
                row: None,
                generation: 0,
                revision,
            });
        };
        let value: ActorValue = decode(found.key(), found.value())?;
        Ok(ActorRead {
            row: Some(value.row(name)),
            generation: found.create_revision(),
            revision,
        })
    }

    /// The directory's actors' changes from now on, returned once the
    /// watch started: [`ActorsChange::Watching`] first (and again after a
    /// compaction forced it to start over), then [`ActorsChange::Changed`]
    /// for each watch event. No actor is listed. A follower with a
    /// placement cache routes by it.
    ///
    /// # Errors
    /// If the watch ended before it started.
    pub async fn watch_actor_changes(&self) -> anyhow::Result<UnboundedReceiver<ActorsChange>> {
        let (started, first) = tokio::sync::oneshot::channel();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let etcd = self.clone();
        self.spawn(async move {
            tokio::select! {
                () = follow_changes(etcd, &tx, started) => {}
                () = tx.closed() => {}
            }
        });
        first.await.map_err(|_| {
            anyhow::anyhow!("the watch of the actors' changes ended before starting")
        })?;
        Ok(rx)
    }

    /// etcd's current revision, as a read of the one key `prefix` (no
    /// actor's key; a count of the range would walk every key) answers it.
    async fn current_revision(&self, prefix: &str) -> Result<i64, etcd_client::Error> {
        let resp = self.client().kv_client().get(prefix, None).await?;
        Ok(resp.header().map_or(0, |h| h.revision()))
    }
}

/// The revision a read was answered at.
fn revision_of(resp: &etcd_client::GetResponse) -> i64 {
    resp.header().map_or(0, |h| h.revision())
}

/// Sends the actors' changes to `tx` (see [`Etcd::watch_actor_changes`]);
/// `started` is told once the first [`ActorsChange::Watching`] is sent.
async fn follow_changes(
    etcd: Etcd,
    tx: &UnboundedSender<ActorsChange>,
    started: tokio::sync::oneshot::Sender<()>,
) {
    let range = Range::Under(etcd.key("actors/"));
    let mut started = Some(started);
    let mut backoff = FIRST_BACKOFF;
    // The revision applied so far; `None` to start again from now.
    let mut applied: Option<i64> = None;
    loop {
        let from = match applied {
            Some(revision) => revision,
            None => match etcd.current_revision(range.start()).await {
                Ok(revision) => {
                    let _ = tx.send(ActorsChange::Watching { revision });
                    if let Some(started) = started.take() {
                        let _ = started.send(());
                    }
                    applied = Some(revision);
                    revision
                }
                Err(e) => {
                    tracing::warn!("reading etcd's revision failed, retrying: {e}");
                    back_off(&mut backoff).await;
                    continue;
                }
            },
        };
        let options = WatchOptions::new()
            .with_start_revision(from + 1)
            .with_range(prefix_end(range.start()));
        let mut stream = match etcd.client().watch(range.start(), Some(options)).await {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!("watching the actors' changes failed, retrying: {e}");
                back_off(&mut backoff).await;
                continue;
            }
        };
        loop {
            let resp = match stream.message().await {
                Ok(Some(resp)) => resp,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("the watch of the actors' changes broke, resuming: {e}");
                    break;
                }
            };
            if resp.canceled() || resp.compact_revision() > 0 {
                tracing::warn!(
                    "the watch of the actors' changes was cancelled ({}), starting again from \
                     the current revision",
                    resp.cancel_reason()
                );
                applied = None;
                break;
            }
            let mut revision = applied.unwrap_or(from);
            let changes = event_changes(&range, &resp, &mut revision);
            applied = Some(revision);
            if let Some(change) = actors_changed(changes, revision) {
                let _ = tx.send(change);
            }
            backoff = FIRST_BACKOFF;
        }
        back_off(&mut backoff).await;
    }
}
