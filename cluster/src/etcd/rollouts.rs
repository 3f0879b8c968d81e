//! The [`Rollouts`] part of [`EtcdDirectory`]: a template's rollout record
//! at `<prefix>/rollouts/<template>` and each actor's outcome at
//! `<prefix>/rollout-outcomes/<template>/<actor>` (JSON). Writes go
//! through the leader's fence like every other directory write.

use etcd_client::{DeleteOptions, TxnOp};

use super::directory::EtcdDirectory;
use super::retry;
use super::values::failed;
use stasis_contract::error::ApiError;
use stasis_contract::rollout::{ActorOutcome, RolloutRecord, Rollouts, decode, encode};

impl EtcdDirectory {
    fn rollout_key(&self, template: &str) -> String {
        self.etcd.key(&format!("rollouts/{template}"))
    }

    fn outcomes_dir(&self, template: &str) -> String {
        self.etcd.key(&format!("rollout-outcomes/{template}/"))
    }

    /// Puts `value` at `key` (fenced).
    pub(super) fn put(
        &self,
        what: &'static str,
        key: String,
        value: String,
    ) -> Result<(), ApiError> {
        self.fenced_txn(what, Vec::new(), vec![TxnOp::put(key, value, None)])?
            .map(|_| ())
            .ok_or_else(|| failed(format!("{what}: the transaction failed")))
    }

    /// The value at `key`, decoded, if there is one.
    pub(super) fn get_decoded<T: for<'de> serde::Deserialize<'de> + Send + 'static>(
        &self,
        what: &'static str,
        key: String,
    ) -> Result<Option<T>, ApiError> {
        self.get_with(what, key, decode)
    }

    /// The value at `key` as text, if there is one.
    pub(super) fn get_text(
        &self,
        what: &'static str,
        key: String,
    ) -> Result<Option<String>, ApiError> {
        self.get_with(what, key, move |bytes| {
            String::from_utf8(bytes.to_vec())
                .map_err(|e| ApiError::internal(format!("{what}: not text: {e}")))
        })
    }

    /// The value at `key`, read by `read`, if there is one.
    fn get_with<T: Send + 'static>(
        &self,
        what: &'static str,
        key: String,
        read: impl Fn(&[u8]) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<Option<T>, ApiError> {
        let kv = self.etcd.client().kv_client();
        self.etcd.run_blocking(what, async move {
            let mut resp = retry(|| {
                let (mut kv, key) = (kv.clone(), key.clone());
                async move { kv.get(key, None).await }
            })
            .await
            .map_err(failed)?;
            resp.take_kvs()
                .first()
                .map(|kv| read(kv.value()))
                .transpose()
        })
    }

    /// Every value under `dir`, decoded.
    pub(super) fn list_decoded<T: for<'de> serde::Deserialize<'de> + Send + 'static>(
        &self,
        what: &'static str,
        dir: String,
    ) -> Result<Vec<T>, ApiError> {
        let etcd = self.etcd.clone();
        self.etcd.run_blocking(what, async move {
            let (kvs, _) = retry(|| etcd.list(&dir)).await.map_err(failed)?;
            kvs.iter().map(|kv| decode(kv.value())).collect()
        })
    }
}

impl Rollouts for EtcdDirectory {
    fn put_rollout(&self, record: &RolloutRecord) -> Result<(), ApiError> {
        let key = self.rollout_key(&record.template);
        self.put("a rollout write", key, encode(record)?)
    }

    fn rollout(&self, template: &str) -> Result<Option<RolloutRecord>, ApiError> {
        self.get_decoded("a rollout read", self.rollout_key(template))
    }

    fn rollouts(&self) -> Result<Vec<RolloutRecord>, ApiError> {
        self.list_decoded("the rollout listing", self.etcd.key("rollouts/"))
    }

    fn put_rollout_outcome(&self, template: &str, outcome: &ActorOutcome) -> Result<(), ApiError> {
        let key = format!("{}{}", self.outcomes_dir(template), outcome.actor);
        self.put("a rollout outcome write", key, encode(outcome)?)
    }

    fn rollout_outcomes(&self, template: &str) -> Result<Vec<ActorOutcome>, ApiError> {
        self.list_decoded("the rollout outcome listing", self.outcomes_dir(template))
    }

    fn clear_rollout_outcomes(&self, template: &str) -> Result<(), ApiError> {
        let op = TxnOp::delete(
            self.outcomes_dir(template),
            Some(DeleteOptions::new().with_prefix()),
        );
        self.fenced_txn("a rollout outcome delete", Vec::new(), vec![op])?
            .map(|_| ())
            .ok_or_else(|| failed("deleting a rollout's outcomes: the transaction failed"))
    }
}
