//! The cluster-wide settings at `<prefix>/settings`: one JSON value that the
//! first control plane to start writes and every later one adopts, so all
//! nodes run with the same settings whatever their own flags say.

use anyhow::Context as _;
use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Etcd, retry};

impl Etcd {
    fn settings_key(&self) -> String {
        self.key("settings")
    }

    /// Stores `mine` at `<prefix>/settings` unless settings are stored
    /// already (one transaction on `create_revision == 0`), and returns
    /// what is stored: `mine` for the first writer, the first writer's
    /// settings for everyone after.
    ///
    /// # Errors
    /// If etcd fails, or the stored value does not decode as `T`.
    pub async fn settle_settings<T: Serialize + DeserializeOwned>(
        &self,
        mine: &T,
    ) -> anyhow::Result<T> {
        let key = self.settings_key();
        let value = serde_json::to_vec(mine).context("encoding the cluster settings")?;
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), value.clone(), None)])
            .or_else([TxnOp::get(key.clone(), None)]);
        let resp = retry(|| {
            let (mut client, txn) = (self.client(), txn.clone());
            async move { client.txn(txn).await }
        })
        .await
        .with_context(|| {
            format!(
                "storing the cluster settings in etcd at {}",
                self.endpoints()
            )
        })?;
        if resp.succeeded() {
            return serde_json::from_slice(&value).context("re-reading our own settings");
        }
        for op in resp.op_responses() {
            if let TxnOpResponse::Get(got) = op
                && let Some(kv) = got.kvs().first()
            {
                return serde_json::from_slice(kv.value())
                    .with_context(|| format!("the cluster settings at {key} do not decode"));
            }
        }
        anyhow::bail!("etcd neither stored nor returned the cluster settings at {key}")
    }

    /// The stored cluster settings, if any.
    ///
    /// # Errors
    /// If etcd fails, or the stored value does not decode as `T`.
    pub async fn settings<T: DeserializeOwned>(&self) -> anyhow::Result<Option<T>> {
        let key = self.settings_key();
        let resp = retry(|| {
            let (mut client, key) = (self.client(), key.clone());
            async move { client.get(key, None).await }
        })
        .await
        .with_context(|| {
            format!(
                "reading the cluster settings from etcd at {}",
                self.endpoints()
            )
        })?;
        resp.kvs()
            .first()
            .map(|kv| {
                serde_json::from_slice(kv.value())
                    .with_context(|| format!("the cluster settings at {key} do not decode"))
            })
            .transpose()
    }
}
