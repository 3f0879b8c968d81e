//! The ways an actor's alarm host functions reach the control plane's
//! [`super::scheduler::Scheduler`]: [`ControlAlarms`], in this process;
//! [`PeerAlarms`], from a remote worker to its [`ControlPeer`] (the
//! control plane it joined, or the leader replica of its etcd cluster),
//! through the control plane's internal API ([`ControlPath::Alarm`]: `PUT`
//! with the time in Unix ms as
//! decimal text, `DELETE`, `GET` answering the time or 204 when none is
//! set), which the admin API answers with the same scheduler.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use bytes::Bytes;
use hyper::Method;

use super::AlarmRouter;
use crate::cluster::control_peer::ControlPeer;
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

/// Alarms from a remote worker through the control plane's internal API
/// (see the module docs).
pub struct PeerAlarms {
    control: ControlPeer,
}

impl PeerAlarms {
    /// Alarms through `control`: the control plane the worker joined, or
    /// the leader replica of its etcd cluster.
    #[must_use]
    pub fn new(control: ControlPeer) -> Self {
        Self { control }
    }

    async fn send(&self, method: Method, actor: &str, body: Bytes) -> Result<Bytes, ApiError> {
        let path = ControlPath::Alarm(actor).to_path();
        self.control.send(method, &path, body).await
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
