//! Delivering a due alarm: [`ControlDeliver`] sends the alarm request
//! ([`super::alarm_request`]) the way an ingress request goes — the
//! actor's placement and gate, its worker (in process or remote), its
//! mailbox, resumed on demand — and [`run`] is what the actor task does
//! with it: the guest's `stasis_on_alarm` in place of `stasis_handle`.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use stasis_core::instance::{ActorInstance, CallError};
use stasis_host_api::{Request, Response};

use super::scheduler::{Deliver, Delivery};
use super::{ALARM_HEADER, NO_HOOK, RAN, alarm_request, is_alarm};
use crate::client_gone::ClientGone;
use crate::control::ControlPlane;
use crate::host_calls::services::ActorHostServices;

/// Delivers alarms through a control plane (held weakly: the control plane
/// owns the scheduler that holds this).
pub struct ControlDeliver {
    control: Weak<ControlPlane>,
}

impl ControlDeliver {
    /// Delivery through `control`.
    #[must_use]
    pub fn new(control: &Arc<ControlPlane>) -> Arc<Self> {
        Arc::new(Self {
            control: Arc::downgrade(control),
        })
    }
}

#[async_trait]
impl Deliver for ControlDeliver {
    async fn deliver(&self, actor: &str) -> Delivery {
        let Some(control) = self.control.upgrade() else {
            return Delivery::Failed("the control plane is shutting down".to_owned());
        };
        let route = match control.route(actor) {
            Ok(route) => route,
            Err(e) if e.status == 404 => return Delivery::Gone,
            Err(e) => return Delivery::Failed(e.message),
        };
        match control
            .call(route, alarm_request(), &ClientGone::new())
            .await
        {
            Ok(answer) => outcome(&answer),
            Err(e) if e.status == 404 => Delivery::Gone,
            Err(e) => Delivery::Failed(format!("{} ({})", e.message, e.status)),
        }
    }
}

/// What the actor task's answer to an alarm request says.
fn outcome(answer: &Response) -> Delivery {
    let marker = answer
        .headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(ALARM_HEADER))
        .map(|(_, value)| value.as_slice());
    match marker {
        Some(RAN) => Delivery::Ran,
        Some(NO_HOOK) => Delivery::NoHook,
        _ => Delivery::Failed(format!(
            "the worker answered {} without running the alarm (a worker without alarms?)",
            answer.status
        )),
    }
}

fn marked(value: &[u8]) -> Response {
    let mut answer = Response::text(200, "");
    answer
        .headers
        .push((ALARM_HEADER.to_owned(), value.to_vec()));
    answer
}

/// Runs `request` in `instance` for the actor task: an alarm request
/// ([`is_alarm`]) runs the guest's `stasis_on_alarm` (answered with
/// [`ALARM_HEADER`]: [`RAN`], or [`NO_HOOK`] when the module has no such
/// export), any other request the guest's handler. `services` is told
/// which request runs first.
///
/// # Errors
/// The guest's [`CallError`] (trap, CPU limit, timeout): the caller rolls
/// the actor back as for any failed request.
pub async fn run(
    instance: &mut ActorInstance,
    services: &ActorHostServices,
    request: &Request,
) -> Result<Response, CallError> {
    if !is_alarm(request) {
        services.begin(Some(request));
        return instance.call(request).await;
    }
    if !instance.has_alarm_hook() {
        return Ok(marked(NO_HOOK));
    }
    services.begin(None);
    instance.on_alarm().await?;
    Ok(marked(RAN))
}
