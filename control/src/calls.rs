//! How a `call` or `send` goes through the control plane: [`call_via`] and
//! [`send_via`], used by [`crate::local::LocalControl`] (in-process
//! workers) and by the internal API that remote workers reach
//! (`ControlPath::Call` / `ControlPath::Send` of the worker protocol).
//! Either way the request takes the path an ingress request takes:
//! placement, gate, the callee's worker (local or remote), its mailbox,
//! resumed on demand.

use std::sync::Arc;

use stasis_contract::client_gone::ClientGone;
use stasis_contract::error::ApiError;
use stasis_host_api::{Request, Response};

use crate::ControlPlane;

/// Calls `actor` through `control`, as the ingress router does.
///
/// # Errors
/// 404 unknown actor; the worker's or guest's failure.
pub async fn call_via(
    control: &ControlPlane,
    actor: &str,
    request: Request,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    let route = control.route(actor).await?;
    let answer = control.call(route, request, &ClientGone::new()).await;
    let status = answer
        .as_ref()
        .map_or_else(|e| e.kind().status(), |r| r.status);
    control.count_request(actor, status, started.elapsed());
    answer
}

/// Sends `request` to `actor` through `control` one-way: once the actor is
/// known to exist, the call runs in a task of its own and this returns.
/// A call that then fails is counted in `stasis_sends_failed_total`.
///
/// # Errors
/// 404 unknown actor.
pub async fn send_via(
    control: &Arc<ControlPlane>,
    actor: &str,
    request: Request,
) -> Result<(), ApiError> {
    control.route(actor).await?;
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
