//! The ways a `call` or `send` travels: [`ControlRouter`], through the
//! control plane of this process (its in-process workers); [`PeerRouter`],
//! from a remote worker to the internal API ([`ControlPath::Call`] /
//! [`ControlPath::Send`]) of its [`ControlPeer`] (the control plane it
//! joined or, in etcd cluster mode, the leader replica), which answers with [`call_via`] / [`send_via`]. Either way the
//! request takes the path an ingress request takes: placement, gate, the
//! callee's worker (local or remote), its mailbox, resumed on demand.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use bytes::Bytes;
use hyper::Method;
use stasis_host_api::{Request, Response};

use super::CallRouter;
use crate::client_gone::ClientGone;
use crate::cluster::control_peer::ControlPeer;
use crate::cluster::proto::ControlPath;
use crate::control::ControlPlane;
use crate::error::ApiError;

/// Calls `actor` through `control`, as the ingress router does.
///
/// # Errors
/// 404 unknown actor; the worker's or guest's failure.
pub async fn call_via(
    control: &ControlPlane,
    actor: &str,
    request: Request,
) -> Result<Response, ApiError> {
    let route = control.route(actor)?;
    let answer = control.call(route, request, &ClientGone::new()).await;
    let status = answer.as_ref().map_or_else(|e| e.status, |r| r.status);
    control.count_request(actor, status);
    answer
}

/// Sends `request` to `actor` through `control` one-way: once the actor is
/// known to exist, the call runs in a task of its own and this returns.
/// A call that then fails is counted in `stasis_sends_failed_total`.
///
/// # Errors
/// 404 unknown actor.
pub fn send_via(
    control: &Arc<ControlPlane>,
    actor: &str,
    request: Request,
) -> Result<(), ApiError> {
    control.route(actor)?;
    let (control, actor) = (control.clone(), actor.to_owned());
    tokio::spawn(async move {
        match call_via(&control, &actor, request).await {
            Ok(response) if response.status < 500 => {}
            Ok(response) => {
                tracing::debug!(
                    actor,
                    status = response.status,
                    "message answered with an error"
                );
            }
            Err(e) => {
                control.metrics().host_calls.sends_failed.inc();
                tracing::warn!(actor, "message not delivered: {e}");
            }
        }
    });
    Ok(())
}

/// Routes through the control plane of this process.
pub struct ControlRouter {
    control: Weak<ControlPlane>,
}

impl ControlRouter {
    /// A router through `control` (held weakly: the control plane owns the
    /// workers that hold this router).
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
impl CallRouter for ControlRouter {
    async fn call(&self, actor: &str, request: Request) -> Result<Response, ApiError> {
        let control = self.control()?;
        call_via(&control, actor, request).await
    }

    async fn send(&self, actor: &str, request: Request) -> Result<(), ApiError> {
        send_via(&self.control()?, actor, request)
    }
}

/// Routes from a remote worker through a control plane's internal API.
pub struct PeerRouter {
    control: ControlPeer,
}

impl PeerRouter {
    /// A router through `control`: the control plane the worker joined, or
    /// the leader replica of its etcd cluster.
    #[must_use]
    pub fn new(control: ControlPeer) -> Self {
        Self { control }
    }

    async fn post(&self, path: &str, request: &Request) -> Result<Bytes, ApiError> {
        let body = stasis_host_api::encode_request(request)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        self.control.send(Method::POST, path, body.into()).await
    }
}

#[async_trait]
impl CallRouter for PeerRouter {
    async fn call(&self, actor: &str, request: Request) -> Result<Response, ApiError> {
        let body = self
            .post(&ControlPath::Call(actor).to_path(), &request)
            .await?;
        stasis_host_api::decode_response(&body)
            .map_err(|e| ApiError::new(502, format!("the control plane's answer: {e}")))
    }

    async fn send(&self, actor: &str, request: Request) -> Result<(), ApiError> {
        self.post(&ControlPath::Send(actor).to_path(), &request)
            .await
            .map(|_| ())
    }
}
