//! The [`Quotas`] part of [`EtcdDirectory`]: each namespace's quota at
//! `<prefix>/quotas/<namespace>` (JSON). Writes go through the leader's
//! fence; reads are plain gets, so every replica reads what etcd holds.

use super::directory::EtcdDirectory;
use stasis_contract::error::ApiError;
use stasis_contract::quota::{Quota, Quotas};
use stasis_contract::rollout::encode;

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
        self.get_decoded("a quota read", self.quota_key(namespace))
    }
}
