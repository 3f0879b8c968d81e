//! The ways an actor's alarm host functions reach the control plane's
//! [`super::scheduler::Scheduler`]: [`LocalControl`], in this process;
//! [`ControlPeer`], from a remote worker to the control plane it joined,
//! or the leader replica of its etcd cluster, through the control plane's internal API ([`ControlPath::Alarm`]: `PUT`
//! with the time in Unix ms as
//! decimal text, `DELETE`, `GET` answering the time or 204 when none is
//! set), which the admin API answers with the same scheduler.

use async_trait::async_trait;
use bytes::Bytes;
use hyper::Method;

use super::AlarmRouter;
use crate::cluster::control_peer::{ControlPeer, LocalControl};
use crate::cluster::proto::ControlPath;
use crate::error::ApiError;

#[async_trait]
impl AlarmRouter for LocalControl {
    async fn set(&self, actor: &str, at_unix_ms: u64) -> Result<(), ApiError> {
        self.get()?.alarms().set(actor, at_unix_ms).await
    }

    async fn cancel(&self, actor: &str) -> Result<(), ApiError> {
        self.get()?.alarms().cancel(actor).await
    }

    async fn get(&self, actor: &str) -> Result<Option<u64>, ApiError> {
        self.get()?.alarms().get(actor).await
    }
}

/// Sends `method` with `body` to `actor`'s alarm in `control`'s internal
/// API.
async fn send(
    control: &ControlPeer,
    method: Method,
    actor: &str,
    body: Bytes,
) -> Result<Bytes, ApiError> {
    let path = ControlPath::Alarm(actor).to_path();
    control.send(method, &path, body).await
}

#[async_trait]
impl AlarmRouter for ControlPeer {
    async fn set(&self, actor: &str, at_unix_ms: u64) -> Result<(), ApiError> {
        send(self, Method::PUT, actor, at_unix_ms.to_string().into())
            .await
            .map(|_| ())
    }

    async fn cancel(&self, actor: &str) -> Result<(), ApiError> {
        send(self, Method::DELETE, actor, Bytes::new())
            .await
            .map(|_| ())
    }

    async fn get(&self, actor: &str) -> Result<Option<u64>, ApiError> {
        let body = send(self, Method::GET, actor, Bytes::new()).await?;
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
