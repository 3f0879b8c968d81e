//! The ways an actor's alarm host functions reach the control plane's
//! [`super::scheduler::Scheduler`]: [`ControlAlarms`], in this process;
//! [`PeerAlarms`], from a remote worker joined to `stasis serve`; and
//! [`PeerAlarms::leader`], from a worker of an etcd cluster to the leader replica
//! it finds in etcd. The last two use the control plane's internal API ([`ControlPath::Alarm`]: `PUT` with the time in Unix ms as
//! decimal text, `DELETE`, `GET` answering the time or 204 when none is
//! set), which the admin API answers with the same scheduler.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use bytes::Bytes;
use hyper::Method;

use super::AlarmRouter;
use crate::cluster::client::Peer;
use crate::cluster::etcd::Etcd;
use crate::cluster::proto::ControlPath;
use crate::control::ControlPlane;
use crate::error::ApiError;

/// Alarms through the control plane of this process.
pub struct ControlAlarms {
    control: Weak<ControlPlane>,
}

impl ControlAlarms {
    /// Alarms through `control` (held weakly: the control plane owns the
    /// workers that hold this).
    #[must_use]
    pub fn new(control: &Arc<ControlPlane>) -> Self {
        Self {
            control: Arc::downgrade(control),
        }
    }

    fn control(&self) -> Result<Arc<ControlPlane>, ApiError> {
        self.control
            .upgrade()
            .ok_or_else(|| ApiError::unavailable("the control plane is shutting down"))
    }
}

#[async_trait]
impl AlarmRouter for ControlAlarms {
    async fn set(&self, actor: &str, at_unix_ms: u64) -> Result<(), ApiError> {
        self.control()?.alarms().set(actor, at_unix_ms).await
    }

    async fn cancel(&self, actor: &str) -> Result<(), ApiError> {
        self.control()?.alarms().cancel(actor).await
    }

    async fn get(&self, actor: &str) -> Result<Option<u64>, ApiError> {
        self.control()?.alarms().get(actor).await
    }
}

/// Where a worker's alarm calls go: a fixed control plane, or the leader
/// replica of an etcd cluster (looked up for each call).
enum Target {
    Control(Box<Peer>),
    Leader { etcd: Etcd, token: Option<String> },
}

/// Alarms from a remote worker through the control plane's internal API
/// (see the module docs).
pub struct PeerAlarms {
    target: Target,
}

impl PeerAlarms {
    /// Alarms through the control plane `control` (`worker run` joined to
    /// `stasis serve`).
    #[must_use]
    pub fn new(control: Peer) -> Self {
        Self {
            target: Target::Control(Box::new(control)),
        }
    }

    /// Alarms through the leader replica of the cluster in `etcd` (a
    /// worker in cluster mode), sending `token` as its bearer token.
    #[must_use]
    pub fn leader(etcd: Etcd, token: Option<String>) -> Self {
        Self {
            target: Target::Leader { etcd, token },
        }
    }

    async fn send(&self, method: Method, actor: &str, body: Bytes) -> Result<Bytes, ApiError> {
        let path = ControlPath::Alarm(actor).to_path();
        let leader;
        let control = match &self.target {
            Target::Control(control) => control,
            Target::Leader { etcd, token } => {
                let found = etcd
                    .leader()
                    .await
                    .map_err(|e| ApiError::unavailable(format!("finding the leader: {e:#}")))?
                    .ok_or_else(|| ApiError::unavailable("no leader replica"))?;
                leader = Peer::new(
                    &format!("http://{}", found.admin),
                    token.as_deref(),
                    "leader replica",
                )?;
                &leader
            }
        };
        Ok(control.send(method, &path, &[], body).await?.body)
    }
}

#[async_trait]
impl AlarmRouter for PeerAlarms {
    async fn set(&self, actor: &str, at_unix_ms: u64) -> Result<(), ApiError> {
        self.send(Method::PUT, actor, at_unix_ms.to_string().into())
            .await
            .map(|_| ())
    }

    async fn cancel(&self, actor: &str) -> Result<(), ApiError> {
        self.send(Method::DELETE, actor, Bytes::new())
            .await
            .map(|_| ())
    }

    async fn get(&self, actor: &str) -> Result<Option<u64>, ApiError> {
        let body = self.send(Method::GET, actor, Bytes::new()).await?;
        if body.is_empty() {
            return Ok(None);
        }
        parse_ms(&body)
            .map(Some)
            .map_err(|e| ApiError::new(502, format!("the control plane's answer: {}", e.message)))
    }
}

/// An alarm time in the internal API: Unix ms as decimal text.
///
/// # Errors
/// 400 if `body` is not a decimal `u64`.
pub fn parse_ms(body: &[u8]) -> Result<u64, ApiError> {
    std::str::from_utf8(body)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .ok_or_else(|| ApiError::bad_request("an alarm time is Unix ms in decimal"))
}
