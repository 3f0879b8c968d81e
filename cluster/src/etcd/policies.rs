//! The [`Policies`] part of [`EtcdDirectory`]: each namespace's policy at
//! `<prefix>/policies/<namespace>` (JSON). Writes go through the leader's
//! fence; reads are plain gets, so every replica reads what etcd holds.

use super::directory::EtcdDirectory;
use stasis_contract::error::ApiError;
use stasis_contract::policy::{NamespacePolicy, Policies};
use stasis_contract::rollout::encode;

impl EtcdDirectory {
    fn policy_key(&self, namespace: &str) -> String {
        self.etcd.key(&format!("policies/{namespace}"))
    }
}

impl Policies for EtcdDirectory {
    fn put_policy(&self, namespace: &str, policy: &NamespacePolicy) -> Result<(), ApiError> {
        let key = self.policy_key(namespace);
        self.put("a namespace policy write", key, encode(policy)?)
    }

    fn policy(&self, namespace: &str) -> Result<Option<NamespacePolicy>, ApiError> {
        self.get_decoded("a namespace policy read", self.policy_key(namespace))
    }
}
