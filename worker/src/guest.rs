//! What the actor task runs in the guest for one delivery
//! ([`stasis_contract::delivery::Delivery`]): a request's handler
//! (`stasis_handle`), an alarm's `stasis_on_alarm`, or a socket event's
//! `stasis_on_socket`, each answering its delivery's own answer type.

use std::future::Future;
use std::sync::Arc;

use opentelemetry::trace::{Link, TraceContextExt as _};
use opentelemetry::{Context, KeyValue};
use stasis_contract::alarm::AlarmOutcome;
use stasis_contract::delivery::{Delivery, DueAlarm};
use stasis_contract::status::ActorStatus;
use stasis_contract::trace;
use stasis_core::instance::{ActorInstance, CallError};
use stasis_core::journal::delivery::answer_digest;
use stasis_host_api::sockets::SocketEvent;
use stasis_host_api::{Request, Response};

use crate::host_calls::services::ActorHostServices;
use crate::idempotency::{self, IdempotencyTable, Keyed, Recall};

/// A delivery as the guest runs it.
pub(crate) trait Work: Delivery + Sized {
    /// The name of the delivery's span (`stasis.request`, `stasis.alarm`
    /// or `stasis.socket`).
    const SPAN: &'static str;

    /// Its input kind in a journal entry
    /// ([`stasis_core::journal::delivery`]).
    const INPUT: u8;

    /// Its input as a journal entry keeps it.
    fn encode(&self) -> Vec<u8>;

    /// The input a journal entry kept; `None` when the bytes are not one.
    fn decode(bytes: &[u8]) -> Option<Self>;

    /// The digest of its answer, checked when it is replayed.
    fn digest(answer: &Self::Answer) -> u64;

    /// The trace context the delivery's span is a child of: a request's
    /// caller's (see [`stasis_contract::trace`]); an alarm or a socket
    /// event starts a trace of its own.
    fn parent(&self) -> Context {
        Context::new()
    }

    /// The spans the delivery's span links to: none, but for an alarm, the
    /// span that set it.
    fn links(&self) -> Vec<Link> {
        Vec::new()
    }

    /// Runs it in `instance`; `services` is told which request runs first
    /// (an alarm or a socket event runs under no caller's chain), and that
    /// the span of `cx` is the parent of the guest's host calls.
    ///
    /// # Errors
    /// The guest's [`CallError`] (trap, CPU limit, timeout): the caller
    /// rolls the actor back as for any failed request.
    fn run<'a>(
        &'a self,
        instance: &'a mut ActorInstance,
        services: &'a ActorHostServices,
        cx: &'a Context,
    ) -> impl Future<Output = Result<Self::Answer, CallError>> + Send + 'a;

    /// What the actor's idempotency table says of it before it runs
    /// ([`crate::idempotency`]): only a request can carry a key.
    fn recall(&self, _actor: &str, _table: &mut IdempotencyTable) -> Recall<Self::Answer> {
        Recall::Run(None)
    }

    /// Remembers its `answer` under `keyed` in the actor's table, once it
    /// ran.
    fn remember(_keyed: Keyed, _answer: &Self::Answer, _table: &mut IdempotencyTable) {}

    /// Counts the delivery that ran (`result`) in the actor's `status`:
    /// as a request, unless said otherwise.
    fn count(
        status: &mut ActorStatus,
        _result: &Result<Self::Answer, CallError>,
        now_ms: Option<u64>,
    ) {
        status.requests += 1;
        status.last_request_at_unix_ms = now_ms;
    }
}

/// A journal entry's input kinds.
pub(crate) const REQUEST: u8 = 1;
pub(crate) const ALARM: u8 = 2;
pub(crate) const SOCKET: u8 = 3;

impl Work for Arc<Request> {
    const SPAN: &'static str = "stasis.request";
    const INPUT: u8 = REQUEST;

    fn encode(&self) -> Vec<u8> {
        // A request the guest can be given encodes (its size is bounded).
        stasis_host_api::encode_request(self).unwrap_or_default()
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        stasis_host_api::decode_request(bytes).ok().map(Arc::new)
    }

    fn digest(answer: &Response) -> u64 {
        answer_digest(&stasis_host_api::encode_response(answer).unwrap_or_default())
    }

    fn parent(&self) -> Context {
        trace::parent_of(&self.headers)
    }

    fn recall(&self, actor: &str, table: &mut IdempotencyTable) -> Recall<Response> {
        table.recall(actor, self, idempotency::now_ms())
    }

    fn remember(keyed: Keyed, answer: &Response, table: &mut IdempotencyTable) {
        table.remember(keyed, answer, idempotency::now_ms());
    }

    async fn run<'a>(
        &'a self,
        instance: &'a mut ActorInstance,
        services: &'a ActorHostServices,
        cx: &'a Context,
    ) -> Result<Response, CallError> {
        let request: &Request = self;
        if stasis_host_api::sockets::offers_socket(request) && !instance.has_socket_hook() {
            return Ok(Response::text(
                501,
                format!(
                    "actor {} does not take WebSockets: its module exports no `{}`\n",
                    services.actor(),
                    stasis_host_api::exports::ON_SOCKET
                ),
            ));
        }
        services.begin(Some(request), cx.span().span_context().clone());
        instance.call(request).await
    }
}

impl Work for DueAlarm {
    const SPAN: &'static str = "stasis.alarm";
    const INPUT: u8 = ALARM;

    fn encode(&self) -> Vec<u8> {
        Vec::new()
    }

    fn decode(_: &[u8]) -> Option<Self> {
        Some(DueAlarm::default())
    }

    fn links(&self) -> Vec<Link> {
        self.setter
            .as_deref()
            .and_then(trace::span_context)
            .map(|setter| {
                let kind = KeyValue::new("stasis.link", "set the alarm");
                Link::new(setter, vec![kind], 0)
            })
            .into_iter()
            .collect()
    }

    fn digest(answer: &AlarmOutcome) -> u64 {
        match answer {
            AlarmOutcome::Ran => 1,
            AlarmOutcome::NoHook => 2,
        }
    }

    async fn run<'a>(
        &'a self,
        instance: &'a mut ActorInstance,
        services: &'a ActorHostServices,
        cx: &'a Context,
    ) -> Result<AlarmOutcome, CallError> {
        if !instance.has_alarm_hook() {
            return Ok(AlarmOutcome::NoHook);
        }
        services.begin(None, cx.span().span_context().clone());
        instance.on_alarm().await?;
        Ok(AlarmOutcome::Ran)
    }

    /// An actor without an `on_alarm` export ran nothing.
    fn count(
        status: &mut ActorStatus,
        result: &Result<AlarmOutcome, CallError>,
        now_ms: Option<u64>,
    ) {
        if !matches!(result, Ok(AlarmOutcome::NoHook)) {
            status.alarms += 1;
            status.last_alarm_at_unix_ms = now_ms;
        }
    }
}

impl Work for SocketEvent {
    const SPAN: &'static str = "stasis.socket";
    const INPUT: u8 = SOCKET;

    fn encode(&self) -> Vec<u8> {
        stasis_host_api::sockets::encode_event(self).unwrap_or_default()
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        stasis_host_api::sockets::decode_event(bytes).ok()
    }

    fn digest((): &()) -> u64 {
        0
    }

    async fn run<'a>(
        &'a self,
        instance: &'a mut ActorInstance,
        services: &'a ActorHostServices,
        cx: &'a Context,
    ) -> Result<(), CallError> {
        services.begin(None, cx.span().span_context().clone());
        instance.on_socket(self).await
    }
}
