//! What an embedded-mode worker (`stasis worker run --join`) takes from
//! the control plane it joined: [`ControlReplicator`] streams each
//! snapshot to the control plane's store before it is acknowledged, and
//! [`ControlTemplates`] fetches template modules from it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use hyper::Method;
use stasis_cluster::client::Peer;
use stasis_contract::error::ApiError;
use stasis_contract::proto::ControlPath;
use stasis_contract::templates::FetchTemplate;
use stasis_worker::actor::Replicator;

/// Streams snapshots to the control plane.
pub(super) struct ControlReplicator {
    /// The control plane this worker joined.
    pub(super) control: Peer,
}

impl Replicator for ControlReplicator {
    fn replicate(
        &self,
        actor: &str,
        seq: u64,
        bytes: Arc<Vec<u8>>,
    ) -> Pin<Box<dyn Future<Output = Result<(), ApiError>> + Send>> {
        let control = self.control.clone();
        let path = ControlPath::Snapshot(actor, &seq.to_string()).to_path();
        Box::pin(async move {
            // Sent from the snapshot's own buffer, not a copy.
            let body = Bytes::from_owner(SharedBytes(bytes));
            control
                .send(Method::PUT, &path, &[], body)
                .await
                .map(|_| ())
        })
    }
}

/// A snapshot buffer shared with the actor task, as a request body.
struct SharedBytes(Arc<Vec<u8>>);

impl AsRef<[u8]> for SharedBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

/// Fetches template modules from the control plane.
pub(super) struct ControlTemplates {
    /// The control plane this worker joined.
    pub(super) control: Peer,
}

#[async_trait]
impl FetchTemplate for ControlTemplates {
    async fn fetch(&self, digest: &str) -> Result<Bytes, ApiError> {
        let path = ControlPath::Template(digest).to_path();
        let answer = self
            .control
            .send(Method::GET, &path, &[], Bytes::new())
            .await?;
        Ok(answer.body)
    }
}
