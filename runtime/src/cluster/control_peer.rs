//! How a worker's actors reach the control plane (the host functions
//! `call`, `send` and the alarm functions): [`LocalControl`], the control
//! plane of this process; [`ControlPeer`], from a remote worker, the
//! control plane it joined or the leader replica of its etcd cluster,
//! looked up for each request so that one made after a failover reaches
//! the new leader. Both implement `host_calls::CallRouter` and
//! `alarms::AlarmRouter`.

use std::sync::{Arc, Weak};

use bytes::Bytes;
use hyper::Method;

use super::client::Peer;
use super::etcd::Etcd;
use crate::control::ControlPlane;
use crate::error::ApiError;

/// The control plane of this process, held weakly: the control plane owns
/// the workers that hold this.
#[derive(Clone)]
pub struct LocalControl(Weak<ControlPlane>);

impl LocalControl {
    /// A handle on `control`.
    #[must_use]
    pub fn new(control: &Arc<ControlPlane>) -> Self {
        Self(Arc::downgrade(control))
    }

    /// The control plane.
    ///
    /// # Errors
    /// 503 once it is gone (shutting down).
    pub fn get(&self) -> Result<Arc<ControlPlane>, ApiError> {
        self.0
            .upgrade()
            .ok_or_else(|| ApiError::unavailable("the control plane is shutting down"))
    }
}

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
