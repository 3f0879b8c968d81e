//! What the actor task does with a request that may deliver an alarm
//! ([`stasis_contract::alarm`]): the guest's `stasis_on_alarm` in place of
//! `stasis_handle`.

use stasis_contract::alarm::{ALARM_HEADER, NO_HOOK, RAN, is_alarm};
use stasis_core::instance::{ActorInstance, CallError};
use stasis_host_api::{Request, Response};

use crate::host_calls::services::ActorHostServices;

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
pub(crate) async fn run(
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
