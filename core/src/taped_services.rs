//! An actor's [`ActorServices`] behind its [`Tape`]: each host call's
//! result is recorded when it resolves, and while the tape replays it is
//! read back without reaching the services, so a replayed delivery sends
//! no `call`, `send` or `fetch`, changes no alarm and writes to no socket.

use std::sync::Arc;

use stasis_host_api::imports::HostError;
use stasis_host_api::{Request, Response};

use crate::host::{ActorServices, ServiceError, ServiceFuture, SocketTarget};
use crate::tape::{ALARM, Mode, RESPONSE, Reader, SOCKETS, Tape, UNIT, put_bytes};

/// The result of the host call `live` (a service future) of `kind` on
/// `tape`: recorded when it resolves, or taken from the tape without
/// calling it.
fn through<T: Send + 'static>(
    tape: &Tape,
    kind: u8,
    live: impl FnOnce() -> ServiceFuture<T>,
    encode: fn(&T, &mut Vec<u8>),
    decode: fn(&mut Reader<'_>) -> Option<T>,
) -> ServiceFuture<T> {
    match tape.mode() {
        Mode::Live => live(),
        Mode::Record => {
            let future = live();
            let tape = tape.clone();
            Box::pin(async move {
                let result = future.await;
                tape.record_event(kind, |out| encode_result(&result, out, encode));
                result
            })
        }
        Mode::Replay => {
            let result = tape
                .replayed(kind, |reader| decode_result(reader, decode))
                .unwrap_or_else(|| {
                    Err(ServiceError::new(
                        HostError::Internal,
                        "the replay of this delivery diverged from its recorded host results",
                    ))
                });
            Box::pin(std::future::ready(result))
        }
    }
}

/// An actor's [`ActorServices`] behind its tape: recorded, or answered
/// from the tape without reaching the services while it replays.
pub(crate) struct TapedServices {
    pub(crate) inner: Arc<dyn ActorServices>,
    pub(crate) tape: Tape,
}

impl ActorServices for TapedServices {
    fn call(&self, actor: String, request: Request) -> ServiceFuture<Response> {
        let inner = &self.inner;
        through(
            &self.tape,
            RESPONSE,
            || inner.call(actor, request),
            encode_response,
            decode_response,
        )
    }
    fn send(&self, actor: String, request: Request) -> ServiceFuture<()> {
        let inner = &self.inner;
        through(
            &self.tape,
            UNIT,
            || inner.send(actor, request),
            encode_unit,
            decode_unit,
        )
    }
    fn set_alarm(&self, at_unix_ms: u64) -> ServiceFuture<()> {
        let inner = &self.inner;
        through(
            &self.tape,
            UNIT,
            || inner.set_alarm(at_unix_ms),
            encode_unit,
            decode_unit,
        )
    }
    fn cancel_alarm(&self) -> ServiceFuture<()> {
        let inner = &self.inner;
        through(
            &self.tape,
            UNIT,
            || inner.cancel_alarm(),
            encode_unit,
            decode_unit,
        )
    }
    fn alarm(&self) -> ServiceFuture<Option<u64>> {
        let inner = &self.inner;
        through(
            &self.tape,
            ALARM,
            || inner.alarm(),
            encode_alarm,
            decode_alarm,
        )
    }
    fn fetch(&self, request: Request) -> ServiceFuture<Response> {
        let inner = &self.inner;
        through(
            &self.tape,
            RESPONSE,
            || inner.fetch(request),
            encode_response,
            decode_response,
        )
    }
    fn socket_send(&self, socket: SocketTarget, data: Vec<u8>, text: bool) -> ServiceFuture<()> {
        let inner = &self.inner;
        through(
            &self.tape,
            UNIT,
            || inner.socket_send(socket, data, text),
            encode_unit,
            decode_unit,
        )
    }
    fn socket_close(&self, socket: u64, code: u16, reason: String) -> ServiceFuture<()> {
        let inner = &self.inner;
        through(
            &self.tape,
            UNIT,
            || inner.socket_close(socket, code, reason),
            encode_unit,
            decode_unit,
        )
    }
    fn sockets(&self) -> ServiceFuture<Vec<u64>> {
        let inner = &self.inner;
        through(
            &self.tape,
            SOCKETS,
            || inner.sockets(),
            encode_ids,
            decode_ids,
        )
    }
}

fn encode_result<T>(
    result: &Result<T, ServiceError>,
    out: &mut Vec<u8>,
    encode: fn(&T, &mut Vec<u8>),
) {
    match result {
        Ok(value) => {
            out.push(1);
            encode(value, out);
        }
        Err(e) => {
            out.push(0);
            out.extend_from_slice(&e.kind.code().to_le_bytes());
            put_bytes(out, e.message.as_bytes());
        }
    }
}

fn decode_result<T>(
    reader: &mut Reader<'_>,
    decode: fn(&mut Reader<'_>) -> Option<T>,
) -> Option<Result<T, ServiceError>> {
    match reader.u8()? {
        1 => decode(reader).map(Ok),
        0 => {
            let code = i32::from_le_bytes(reader.take(4)?.try_into().ok()?);
            let kind = HostError::from_code(code.into())?;
            let message = String::from_utf8(reader.bytes()?).ok()?;
            Some(Err(ServiceError { kind, message }))
        }
        _ => None,
    }
}

fn encode_response(response: &Response, out: &mut Vec<u8>) {
    // A response the guest received was encoded once already: it fits.
    let bytes = stasis_host_api::encode_response(response).unwrap_or_default();
    put_bytes(out, &bytes);
}

fn decode_response(reader: &mut Reader<'_>) -> Option<Response> {
    stasis_host_api::decode_response(&reader.bytes()?).ok()
}

fn encode_unit(_: &(), _: &mut Vec<u8>) {}

fn decode_unit(_: &mut Reader<'_>) -> Option<()> {
    Some(())
}

fn encode_alarm(alarm: &Option<u64>, out: &mut Vec<u8>) {
    match alarm {
        Some(at) => {
            out.push(1);
            out.extend_from_slice(&at.to_le_bytes());
        }
        None => out.push(0),
    }
}

fn decode_alarm(reader: &mut Reader<'_>) -> Option<Option<u64>> {
    match reader.u8()? {
        0 => Some(None),
        1 => reader.u64().map(Some),
        _ => None,
    }
}

#[expect(
    clippy::ptr_arg,
    reason = "the encoder of a `Vec<u64>` result, as `through` takes it"
)]
fn encode_ids(ids: &Vec<u64>, out: &mut Vec<u8>) {
    let n = u32::try_from(ids.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&n.to_le_bytes());
    for id in ids.iter().take(n as usize) {
        out.extend_from_slice(&id.to_le_bytes());
    }
}

fn decode_ids(reader: &mut Reader<'_>) -> Option<Vec<u64>> {
    let n = reader.u32()?;
    (0..n).map(|_| reader.u64()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_round_trip() {
        let mut out = Vec::new();
        let err: Result<(), ServiceError> = Err(ServiceError::new(HostError::NotFound, "gone"));
        encode_result(&err, &mut out, encode_unit);
        encode_result(&Ok(Some(7)), &mut out, encode_alarm);
        encode_result(&Ok(vec![1, 2]), &mut out, encode_ids);
        let mut reader = Reader { bytes: &out, at: 0 };
        assert_eq!(decode_result(&mut reader, decode_unit), Some(err));
        assert_eq!(decode_result(&mut reader, decode_alarm), Some(Ok(Some(7))));
        assert_eq!(decode_result(&mut reader, decode_ids), Some(Ok(vec![1, 2])));
        assert_eq!(reader.at, out.len());
    }

    /// A replayed host call never reaches the services: the recorded
    /// answer comes back instead.
    #[tokio::test]
    async fn a_replayed_call_reaches_no_service() {
        let tape = Tape::default();
        let services = TapedServices {
            inner: Arc::new(crate::host::NoServices),
            tape: tape.clone(),
        };
        tape.record();
        let live = services.send("other".into(), Request::default()).await;
        assert!(live.is_err(), "NoServices refuses");
        let events = tape.take();
        tape.replay(events);
        assert_eq!(
            services.send("other".into(), Request::default()).await,
            live
        );
        assert_eq!(tape.finish_replay(), Ok(()));
    }
}
