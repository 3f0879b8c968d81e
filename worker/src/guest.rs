//! What the actor task runs in the guest for one delivery
//! ([`crate::mailbox::Input`]): a request's handler (`stasis_handle`) or an
//! alarm's `stasis_on_alarm`.

use stasis_contract::alarm::AlarmOutcome;
use stasis_core::instance::{ActorInstance, CallError};
use stasis_host_api::{Request, Response};

use crate::host_calls::services::ActorHostServices;

/// What runs in the guest.
#[derive(Clone, Copy)]
pub(crate) enum Work<'a> {
    /// The handler, for this request.
    Request(&'a Request),
    /// The alarm hook.
    Alarm,
}

/// What the guest answered.
pub(crate) enum Answer {
    /// The handler's response.
    Response(Response),
    /// What the alarm delivery did.
    Alarm(AlarmOutcome),
}

/// Runs `work` in `instance`; `services` is told which request runs first
/// (an alarm runs under no caller's chain).
///
/// # Errors
/// The guest's [`CallError`] (trap, CPU limit, timeout): the caller rolls
/// the actor back as for any failed request.
pub(crate) async fn run(
    instance: &mut ActorInstance,
    services: &ActorHostServices,
    work: Work<'_>,
) -> Result<Answer, CallError> {
    match work {
        Work::Request(request) => {
            services.begin(Some(request));
            instance.call(request).await.map(Answer::Response)
        }
        Work::Alarm if !instance.has_alarm_hook() => Ok(Answer::Alarm(AlarmOutcome::NoHook)),
        Work::Alarm => {
            services.begin(None);
            instance.on_alarm().await?;
            Ok(Answer::Alarm(AlarmOutcome::Ran))
        }
    }
}
