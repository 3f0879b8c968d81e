//! [`ControlPeer`]: where a remote worker's requests to the control plane go
//! (the host functions `call`, `send` and the alarm functions): the
//! control plane it joined, or the leader replica of its etcd cluster,
//! looked up for each request so that one made after a failover reaches
//! the new leader.

use bytes::Bytes;
use hyper::Method;

use super::client::Peer;
use super::etcd::Etcd;
use crate::error::ApiError;

/// The control plane of a remote worker (module docs).
#[derive(Clone)]
pub enum ControlPeer {
    /// `stasis worker run --join`: the control plane at a fixed address.
    Joined(Box<Peer>),
    /// A worker in etcd cluster mode: the replica holding the leader key,
    /// reached with the bearer `token`.
    Leader {
        /// The cluster's etcd.
        etcd: Etcd,
        /// The admin token, if the cluster has one.
        token: Option<String>,
    },
}

impl ControlPeer {
    /// Sends `method path` with `body` to the control plane and returns
    /// the answer's body.
    ///
    /// # Errors
    /// 503 if etcd cannot be read, no replica leads, or the control plane
    /// does not answer; the control plane's own error otherwise.
    pub async fn send(&self, method: Method, path: &str, body: Bytes) -> Result<Bytes, ApiError> {
        let leader;
        let peer = match self {
            Self::Joined(peer) => peer.as_ref(),
            Self::Leader { etcd, token } => {
                let found = etcd
                    .leader()
                    .await
                    .map_err(|e| {
                        ApiError::unavailable(format!("finding the leader replica: {e:#}"))
                    })?
                    .ok_or_else(|| ApiError::unavailable("no leader replica"))?;
                leader = Peer::new(
                    &format!("http://{}", found.admin),
                    token.as_deref(),
                    "leader replica",
                )?;
                &leader
            }
        };
        Ok(peer.send(method, path, &[], body).await?.body)
    }
}
