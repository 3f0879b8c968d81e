//! The compare-and-set of one actor's record, shared by its placement
//! switch and its label changes: read the record, change it, then a write
//! of the group commit comparing its `mod_revision`; a write refused by
//! that compare carries the record as it is now, so the next attempt
//! needs no read.

use etcd_client::KeyValue;

use super::super::batch::{Outcome, Write};
use super::super::values::{ActorValue, decode, failed};
use super::super::{get_one, retryable};
use super::{EtcdDirectory, PLACE_ATTEMPTS, RETRY_PAUSE, unfenced};
use stasis_contract::error::ApiError;

/// What a change made of the record it was given.
pub(super) enum Step {
    /// Write the changed record.
    Write,
    /// The record already is as wanted: nothing to write.
    Already,
}

impl EtcdDirectory {
    /// Rewrites actor `name`'s record by `change`, which gets the record
    /// as etcd holds it (`None`: no such actor) and whether an earlier
    /// write of this rewrite may have been applied although its answer
    /// was lost; `describe` names the rewrite in errors. Answers the etcd
    /// revision of the record written (or found as wanted) and the record.
    ///
    /// # Errors
    /// `change`'s; 503 if this replica no longer leads; 409 after
    /// [`PLACE_ATTEMPTS`] lost races; 500 on etcd's failure.
    pub(super) fn rewrite(
        &self,
        name: &str,
        describe: String,
        change: impl Fn(Option<&mut ActorValue>, bool) -> Result<Step, ApiError> + Send + 'static,
    ) -> Result<(i64, ActorValue), ApiError> {
        let kv = self.kv();
        let key = self.actor_key(name);
        let (fence, batch) = (self.fence.clone(), self.batch.clone());
        let what = describe.clone();
        let done = self
            .etcd
            .run_blocking("an actor record's change", async move {
                // Whether a transaction of ours may have been applied although
                // its answer was lost.
                let mut maybe_applied = false;
                let mut last_error = None;
                // The record as the last refused write found it.
                let mut known: Option<Option<KeyValue>> = None;
                for _ in 0..PLACE_ATTEMPTS {
                    let found = match known.take() {
                        Some(found) => found,
                        None => get_one(&kv, &key).await?,
                    };
                    let Some(found) = found else {
                        change(None, maybe_applied)?;
                        return Err(ApiError::not_found(format!("{what}: the actor is gone")));
                    };
                    let mut v: ActorValue = decode(found.key(), found.value())?;
                    if let Step::Already = change(Some(&mut v), maybe_applied)? {
                        return Ok((found.mod_revision(), v));
                    }
                    let value = serde_json::to_vec(&v).map_err(failed)?;
                    let write = Write::Place {
                        key: key.clone(),
                        value,
                        seen: found.mod_revision(),
                    };
                    match batch.submit(write).await {
                        Ok(Outcome::Applied { revision, .. }) => return Ok((revision, v)),
                        // Someone wrote the actor between our read and our
                        // write: go again with what it holds now.
                        Ok(Outcome::Refused(now)) => {
                            known = Some(now);
                            last_error = None;
                        }
                        // This replica no longer leads: stop here.
                        Ok(Outcome::Unfenced) => {
                            return Err(unfenced(fence.as_ref(), kv.clone(), &what).await);
                        }
                        Err(e) if retryable(&e) => {
                            maybe_applied = true;
                            last_error = Some(e);
                            tokio::time::sleep(RETRY_PAUSE).await;
                        }
                        Err(e) => return Err(failed(e)),
                    }
                }
                Err(match last_error {
                    Some(e) => failed(format!("{what}: {e}")),
                    None => ApiError::conflict(format!(
                        "{what} lost {PLACE_ATTEMPTS} races to other writers"
                    )),
                })
            })?;
        self.wrote_actor(done.0);
        Ok(done)
    }
}
