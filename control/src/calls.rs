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
use stasis_contract::headers::CALLER_HEADER;
use stasis_host_api::{Request, Response};

use crate::ControlPlane;

/// Checks that the actor that made `request` (its [`CALLER_HEADER`], set
/// by its host) may reach `actor`: always in its own namespace, across
/// namespaces as the callee's namespace allows. A request without the
/// header (a host's own) is not an actor's and goes through.
///
/// # Errors
/// 403 naming both namespaces; 500 from the directory.
async fn check_caller(
    control: &ControlPlane,
    actor: &str,
    request: &Request,
) -> Result<(), ApiError> {
    match request
        .header(CALLER_HEADER)
        .and_then(|v| std::str::from_utf8(v).ok())
    {
        Some(caller) => control.may_call(caller, actor).await,
        None => Ok(()),
    }
}

/// Calls `actor` through `control`, as the ingress router does.
///
/// # Errors
/// 403 for a caller whose namespace the callee's does not take calls
/// from; 404 unknown actor (unless its namespace creates actors on first
/// use: see [`crate::on_demand`]); the worker's or guest's failure.
pub async fn call_via(
    control: &ControlPlane,
    actor: &str,
    request: Request,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    check_caller(control, actor, &request).await?;
    let route = control.route_or_create(actor).await?;
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
/// 403 for a sender whose namespace the callee's does not take messages
/// from; 404 unknown actor.
pub async fn send_via(
    control: &Arc<ControlPlane>,
    actor: &str,
    request: Request,
) -> Result<(), ApiError> {
    check_caller(control, actor, &request).await?;
    control.route_or_create(actor).await?;
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
