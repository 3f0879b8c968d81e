//! The ways a `call` or `send` travels: [`LocalControl`], through the
//! control plane of this process (its in-process workers); [`ControlPeer`],
//! from a remote worker to the internal API ([`ControlPath::Call`] /
//! [`ControlPath::Send`]) of the control plane it joined or, in etcd
//! cluster mode, the leader replica, which answers with [`call_via`] / [`send_via`]. Either way the
//! request takes the path an ingress request takes: placement, gate, the
//! callee's worker (local or remote), its mailbox, resumed on demand.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use hyper::Method;
use stasis_host_api::{Request, Response};

use super::CallRouter;
use crate::client_gone::ClientGone;
use crate::cluster::control_peer::{ControlPeer, LocalControl};
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

#[async_trait]
impl CallRouter for LocalControl {
    async fn call(&self, actor: &str, request: Request) -> Result<Response, ApiError> {
        let control = self.get()?;
        call_via(&control, actor, request).await
    }

    async fn send(&self, actor: &str, request: Request) -> Result<(), ApiError> {
        send_via(&self.get()?, actor, request)
    }
}

/// Posts `request` to `path` of `control`'s internal API.
async fn post(control: &ControlPeer, path: &str, request: &Request) -> Result<Bytes, ApiError> {
    let body = stasis_host_api::encode_request(request)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    control.send(Method::POST, path, body.into()).await
}

#[async_trait]
impl CallRouter for ControlPeer {
    async fn call(&self, actor: &str, request: Request) -> Result<Response, ApiError> {
        let body = post(self, &ControlPath::Call(actor).to_path(), &request).await?;
        stasis_host_api::decode_response(&body)
            .map_err(|e| ApiError::new(502, format!("the control plane's answer: {e}")))
    }

    async fn send(&self, actor: &str, request: Request) -> Result<(), ApiError> {
        post(self, &ControlPath::Send(actor).to_path(), &request)
            .await
            .map(|_| ())
    }
}
