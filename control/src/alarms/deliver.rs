//! Delivering a due alarm: [`ControlDeliver`] sends the alarm request
//! ([`alarm_request`]) the way an ingress request goes — the actor's
//! placement and gate, its worker (in process or remote), its mailbox,
//! resumed on demand — and reads from the answer whether the guest's
//! `stasis_on_alarm` ran (the worker side runs it).

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use stasis_contract::alarm::{ALARM_HEADER, NO_HOOK, RAN, alarm_request};
use stasis_contract::client_gone::ClientGone;
use stasis_contract::error::ErrorKind;
use stasis_host_api::Response;

use super::scheduler::{Deliver, Delivery};
use crate::ControlPlane;

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
            Err(e) if e.is(ErrorKind::NotFound) => return Delivery::Gone,
            Err(e) => return Delivery::Failed(e.message().to_owned()),
        };
        match control
            .call(route, alarm_request(), &ClientGone::new())
            .await
        {
            Ok(answer) => outcome(&answer),
            Err(e) if e.is(ErrorKind::NotFound) => Delivery::Gone,
            Err(e) => Delivery::Failed(format!("{} ({})", e.message(), e.kind().status())),
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
