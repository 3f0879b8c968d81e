//! The [`IngressAuths`] part of [`EtcdDirectory`]: each namespace's
//! ingress auth at `<prefix>/ingress-auth/<namespace>` (the mode's name).
//! Writes go through the leader's fence; reads are plain gets, so every
//! replica reads what etcd holds.

use super::directory::EtcdDirectory;
use stasis_contract::error::ApiError;
use stasis_contract::ingress_auth::{IngressAuth, IngressAuths};
use stasis_contract::rollout::encode;

impl EtcdDirectory {
    fn ingress_auth_key(&self, namespace: &str) -> String {
        self.etcd.key(&format!("ingress-auth/{namespace}"))
    }
}

impl IngressAuths for EtcdDirectory {
    fn put_ingress_auth(&self, namespace: &str, mode: IngressAuth) -> Result<(), ApiError> {
        let key = self.ingress_auth_key(namespace);
        self.put("an ingress auth write", key, encode(&mode)?)
    }

    fn ingress_auth(&self, namespace: &str) -> Result<Option<IngressAuth>, ApiError> {
        self.get_decoded("an ingress auth read", self.ingress_auth_key(namespace))
    }
}
