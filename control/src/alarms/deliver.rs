//! Delivering a due alarm: [`ControlDeliver`] hands it to the actor the way
//! an ingress request goes — the actor's placement and gate, its worker (in
//! process or remote) — where it is a mailbox command of its own, resumed
//! on demand; the worker says whether the guest's `stasis_on_alarm` ran.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use stasis_contract::alarm::AlarmOutcome;
use stasis_contract::error::ErrorKind;

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
    async fn deliver(&self, actor: &str, setter: Option<String>) -> Delivery {
        let Some(control) = self.control.upgrade() else {
            return Delivery::Failed("the control plane is shutting down".to_owned());
        };
        // A leader woken after its lease delivers nothing: another replica
        // may lead, and deliver this alarm, by now.
        if !control.may_act() {
            return Delivery::Failed("this replica no longer leads".to_owned());
        }
        let route = match control.route(actor).await {
            Ok(route) => route,
            Err(e) if e.is(ErrorKind::NotFound) => return Delivery::Gone,
            Err(e) => return Delivery::Failed(e.message().to_owned()),
        };
        match control.alarm(route, setter).await {
            Ok(AlarmOutcome::Ran) => Delivery::Ran,
            Ok(AlarmOutcome::NoHook) => Delivery::NoHook,
            Err(e) if e.is(ErrorKind::NotFound) => Delivery::Gone,
            Err(e) => Delivery::Failed(format!("{} ({})", e.message(), e.kind().status())),
        }
    }
}
