//! What the actor task runs in the guest for one delivery
//! ([`crate::mailbox::Input`]): a request's handler (`stasis_handle`), an
//! alarm's `stasis_on_alarm`, or a socket event's `stasis_on_socket`.

use opentelemetry::Context;
use opentelemetry::trace::TraceContextExt as _;
use stasis_contract::alarm::AlarmOutcome;
use stasis_core::instance::{ActorInstance, CallError};
use stasis_host_api::sockets::SocketEvent;
use stasis_host_api::{Request, Response};

use crate::host_calls::services::ActorHostServices;

/// What runs in the guest.
#[derive(Clone, Copy)]
pub(crate) enum Work<'a> {
    /// The handler, for this request.
    Request(&'a Request),
    /// The alarm hook.
    Alarm,
    /// The socket hook, for this event.
    Socket(&'a SocketEvent),
}

/// What the guest answered.
pub(crate) enum Answer {
    /// The handler's response.
    Response(Response),
    /// What the alarm delivery did.
    Alarm(AlarmOutcome),
    /// The socket hook ran (or the guest has none).
    Socket,
}

/// Runs `work` in `instance`; `services` is told which request runs first
/// (an alarm runs under no caller's chain), and that the span of `cx` is
/// the parent of the guest's host calls.
///
/// # Errors
/// The guest's [`CallError`] (trap, CPU limit, timeout): the caller rolls
/// the actor back as for any failed request.
pub(crate) async fn run(
    instance: &mut ActorInstance,
    services: &ActorHostServices,
    work: Work<'_>,
    cx: &Context,
) -> Result<Answer, CallError> {
    let delivery = cx.span().span_context().clone();
    match work {
        Work::Request(request)
            if stasis_host_api::sockets::offers_socket(request) && !instance.has_socket_hook() =>
        {
            Ok(Answer::Response(Response::text(
                501,
                format!(
                    "actor {} does not take WebSockets: its module exports no `{}`\n",
                    services.actor(),
                    stasis_host_api::exports::ON_SOCKET
                ),
            )))
        }
        Work::Request(request) => {
            services.begin(Some(request), delivery);
            instance.call(request).await.map(Answer::Response)
        }
        Work::Socket(event) => {
            services.begin(None, delivery);
            instance.on_socket(event).await.map(|()| Answer::Socket)
        }
        Work::Alarm if !instance.has_alarm_hook() => Ok(Answer::Alarm(AlarmOutcome::NoHook)),
        Work::Alarm => {
            services.begin(None, delivery);
            instance.on_alarm().await?;
            Ok(Answer::Alarm(AlarmOutcome::Ran))
        }
    }
}
