//! What cluster members read from the shared snapshot store besides
//! snapshots: template modules ([`StoreTemplates`]), so that a worker or a
//! replica that has never seen a template fetches it from the store rather
//! than from another process.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use stasis_core::snapshot_objects::ObjectSnapshotStore;

use stasis_contract::error::ApiError;
use stasis_contract::templates::FetchTemplate;

/// Fetches template modules from `templates/<digest>.wasm` of the shared
/// store (written by the replica that took the push).
pub struct StoreTemplates {
    store: Arc<ObjectSnapshotStore>,
}

impl StoreTemplates {
    /// Template modules of `store`.
    #[must_use]
    pub fn new(store: Arc<ObjectSnapshotStore>) -> Self {
        Self { store }
    }
}

#[async_trait]
impl FetchTemplate for StoreTemplates {
    async fn fetch(&self, digest: &str) -> Result<Bytes, ApiError> {
        let store = self.store.clone();
        let digest = digest.to_owned();
        tokio::task::spawn_blocking(move || store.get_template(&digest))
            .await
            .map_err(ApiError::internal)?
            .map(Bytes::from)
            .map_err(|e| match &e {
                stasis_core::snapshot_store::StoreError::Io { source, .. }
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    ApiError::not_found(format!("template module: {e}"))
                }
                _ => {
                    tracing::error!("fetching a template module: {}", e.detail());
                    ApiError::unavailable(format!("template module: {e}"))
                }
            })
    }
}
