//! The JSON values of the directory's keys in etcd (see the key layout in
//! the parent module) and the errors their decoding gives.

use serde::{Deserialize, Serialize};

use stasis_contract::directory::ActorRow;
use stasis_contract::error::ApiError;
use stasis_contract::settings::Durability;

/// `<prefix>/templates/<name>`'s value.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(super) struct TemplateValue {
    pub digest: String,
    pub bytes: u64,
    pub env: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<Durability>,
}

/// `<prefix>/actors/<name>`'s value.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(super) struct ActorValue {
    pub template: String,
    pub worker: String,
    pub epoch: u64,
    /// When the actor was created (ms since the Unix epoch); absent in
    /// records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_ms: Option<u64>,
    /// Its labels; absent when it has none.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: stasis_contract::labels::Labels,
}

impl ActorValue {
    /// The directory row of actor `name` holding this value.
    pub(super) fn row(&self, name: &str) -> ActorRow {
        ActorRow {
            name: name.to_owned(),
            template: self.template.clone(),
            worker: self.worker.clone(),
            epoch: self.epoch,
            created_at_unix_ms: self.created_ms,
            labels: self.labels.clone(),
        }
    }
}

/// `<prefix>/alarms/<name>`'s value.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(super) struct AlarmValue {
    pub at_unix_ms: u64,
}

impl AlarmValue {
    pub(super) fn bytes(at_unix_ms: u64) -> Result<Vec<u8>, ApiError> {
        serde_json::to_vec(&Self { at_unix_ms }).map_err(failed)
    }
}

/// A 500 naming the directory and etcd.
pub(super) fn failed(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal(format!("directory (etcd): {e}"))
}

pub(super) fn decode<T: for<'de> Deserialize<'de>>(
    key: &[u8],
    value: &[u8],
) -> Result<T, ApiError> {
    serde_json::from_slice(value).map_err(|e| {
        failed(format!(
            "key {} holds no valid record: {e}",
            String::from_utf8_lossy(key)
        ))
    })
}
