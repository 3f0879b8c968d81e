//! The [`Quotas`] part of [`EtcdDirectory`]: each namespace's quota at
//! `<prefix>/quotas/<namespace>` (JSON). Writes go through the leader's
//! fence; reads are plain gets, so every replica reads what etcd holds.

use super::directory::EtcdDirectory;
use super::retry;
use super::values::failed;
use stasis_contract::error::ApiError;
use stasis_contract::quota::{Quota, Quotas};
use stasis_contract::rollout::{decode, encode};

impl EtcdDirectory {
    fn quota_key(&self, namespace: &str) -> String {
        self.etcd.key(&format!("quotas/{namespace}"))
    }
}

impl Quotas for EtcdDirectory {
    fn put_quota(&self, namespace: &str, quota: &Quota) -> Result<(), ApiError> {
        let key = self.quota_key(namespace);
        self.put("a quota write", key, encode(quota)?)
    }

    fn quota(&self, namespace: &str) -> Result<Option<Quota>, ApiError> {
        let kv = self.etcd.client().kv_client();
        let key = self.quota_key(namespace);
        self.etcd.run_blocking("a quota read", async move {
            let mut resp = retry(|| {
                let (mut kv, key) = (kv.clone(), key.clone());
                async move { kv.get(key, None).await }
            })
            .await
            .map_err(failed)?;
            resp.take_kvs()
                .first()
                .map(|kv| decode(kv.value()))
                .transpose()
        })
    }
}
