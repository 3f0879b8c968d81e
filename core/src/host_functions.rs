//! The `stasis` host functions of ABI 2 in the linker: each reads its
//! arguments from the guest's memory 0, asks the instance's
//! [`ActorServices`](crate::host::ActorServices) (async, with
//! `func_wrap_async`) and answers with a status, a value, or a held result
//! the guest copies in with `take_result` (conventions and errors:
//! `stasis_host_api::imports`). The host never calls into the guest from
//! here, so a host function needs no second fiber stack.

use stasis_host_api::imports::{self, HostError};
use stasis_host_api::{Request, decode_request, encode_response};
use wasmtime::{Caller, Extern, Linker};

use crate::host::{Host, ServiceError, SocketTarget};
use crate::module::MEMORY_EXPORT_PREFIX;

/// Adds every host function of [`imports::FUNCTIONS`] to `linker`.
///
/// # Errors
/// If a name is already defined in the linker.
pub fn add_to_linker(linker: &mut Linker<Host>) -> anyhow::Result<()> {
    let m = imports::MODULE;
    linker.func_wrap_async(
        m,
        imports::CALL,
        |mut caller: Caller<'_, Host>, (ap, al, rp, rl): (u32, u32, u32, u32)| {
            Box::new(async move {
                let result = match read_call(&mut caller, ap, al, rp, rl) {
                    Ok((actor, request)) => {
                        let services = caller.data().services.clone();
                        services.call(actor, request).await.and_then(|r| {
                            encode_response(&r)
                                .map_err(|e| ServiceError::new(HostError::TooLarge, e.to_string()))
                        })
                    }
                    Err(e) => Err(e),
                };
                Ok(hold(caller.data_mut(), result))
            })
        },
    )?;
    linker.func_wrap_async(
        m,
        imports::SEND,
        |mut caller: Caller<'_, Host>, (ap, al, rp, rl): (u32, u32, u32, u32)| {
            Box::new(async move {
                let result = match read_call(&mut caller, ap, al, rp, rl) {
                    Ok((actor, request)) => {
                        let services = caller.data().services.clone();
                        services.send(actor, request).await
                    }
                    Err(e) => Err(e),
                };
                Ok(status(caller.data_mut(), result))
            })
        },
    )?;
    linker.func_wrap_async(
        m,
        imports::SET_ALARM,
        |mut caller: Caller<'_, Host>, (at_unix_ms,): (i64,)| {
            Box::new(async move {
                let result = match u64::try_from(at_unix_ms) {
                    Ok(at) => caller.data().services.clone().set_alarm(at).await,
                    Err(_) => Err(ServiceError::new(
                        HostError::BadInput,
                        format!("alarm time {at_unix_ms} is negative"),
                    )),
                };
                Ok(status(caller.data_mut(), result))
            })
        },
    )?;
    linker.func_wrap_async(
        m,
        imports::CANCEL_ALARM,
        |mut caller: Caller<'_, Host>, ()| {
            Box::new(async move {
                let result = caller.data().services.clone().cancel_alarm().await;
                Ok(status(caller.data_mut(), result))
            })
        },
    )?;
    linker.func_wrap_async(m, imports::ALARM, |mut caller: Caller<'_, Host>, ()| {
        Box::new(async move {
            let result = caller.data().services.clone().alarm().await;
            let host = caller.data_mut();
            Ok(match result {
                Ok(Some(at)) => i64::try_from(at).unwrap_or(i64::MAX),
                Ok(None) => fail(
                    host,
                    ServiceError::new(HostError::NotFound, "no alarm is set"),
                ),
                Err(e) => fail(host, e),
            })
        })
    })?;
    linker.func_wrap_async(
        m,
        imports::FETCH,
        |mut caller: Caller<'_, Host>, (rp, rl): (u32, u32)| {
            Box::new(async move {
                let result = match read_request(&mut caller, rp, rl) {
                    Ok(request) => {
                        let services = caller.data().services.clone();
                        services.fetch(request).await.and_then(|r| {
                            encode_response(&r)
                                .map_err(|e| ServiceError::new(HostError::TooLarge, e.to_string()))
                        })
                    }
                    Err(e) => Err(e),
                };
                Ok(hold(caller.data_mut(), result))
            })
        },
    )?;
    linker.func_wrap(m, imports::SELF_NAME, |mut caller: Caller<'_, Host>| {
        let host = caller.data_mut();
        let name = host.actor.as_bytes().to_vec();
        hold(host, Ok(name))
    })?;
    linker.func_wrap(m, imports::LAST_ERROR, |mut caller: Caller<'_, Host>| {
        let host = caller.data_mut();
        match host.last_error.clone() {
            Some(message) => hold_keeping_error(host, message.into_bytes()),
            None => HostError::NotFound.code().into(),
        }
    })?;
    add_socket_functions(linker)?;
    linker.func_wrap(
        m,
        imports::TAKE_RESULT,
        |mut caller: Caller<'_, Host>, ptr: u32, len: u32| -> i32 {
            take_result(&mut caller, ptr, len)
        },
    )?;
    Ok(())
}

/// `socket_send`, `socket_close` and `sockets` (see
/// `stasis_host_api::sockets`).
fn add_socket_functions(linker: &mut Linker<Host>) -> anyhow::Result<()> {
    let m = imports::MODULE;
    linker.func_wrap_async(
        m,
        imports::SOCKET_SEND,
        |mut caller: Caller<'_, Host>, (socket, dp, dl, text): (i64, u32, u32, i32)| {
            Box::new(async move {
                let result = match (socket_target(socket), read(&mut caller, dp, dl)) {
                    (Ok(target), Ok(data)) => {
                        if text != 0 && std::str::from_utf8(&data).is_err() {
                            Err(ServiceError::new(
                                HostError::BadInput,
                                "a text message must be UTF-8",
                            ))
                        } else {
                            let services = caller.data().services.clone();
                            services.socket_send(target, data, text != 0).await
                        }
                    }
                    (Err(e), _) | (_, Err(e)) => Err(e),
                };
                Ok(status(caller.data_mut(), result))
            })
        },
    )?;
    linker.func_wrap_async(
        m,
        imports::SOCKET_CLOSE,
        |mut caller: Caller<'_, Host>, (socket, code, rp, rl): (i64, i32, u32, u32)| {
            Box::new(async move {
                let result = close_args(&mut caller, socket, code, rp, rl);
                let result = match result {
                    Ok((socket, code, reason)) => {
                        let services = caller.data().services.clone();
                        services.socket_close(socket, code, reason).await
                    }
                    Err(e) => Err(e),
                };
                Ok(status(caller.data_mut(), result))
            })
        },
    )?;
    linker.func_wrap_async(m, imports::SOCKETS, |mut caller: Caller<'_, Host>, ()| {
        Box::new(async move {
            let result = caller.data().services.clone().sockets().await;
            let result = result.and_then(|ids| {
                stasis_host_api::sockets::encode_ids(&ids)
                    .map_err(|e| ServiceError::new(HostError::Internal, e.to_string()))
            });
            Ok(hold(caller.data_mut(), result))
        })
    })?;
    Ok(())
}

/// The `socket` argument of `socket_send`: one id, or every socket.
fn socket_target(socket: i64) -> Result<SocketTarget, ServiceError> {
    if socket == stasis_host_api::sockets::ALL_SOCKETS {
        return Ok(SocketTarget::All);
    }
    u64::try_from(socket).map(SocketTarget::One).map_err(|_| {
        ServiceError::new(
            HostError::BadInput,
            format!("socket {socket} is neither an id nor -1 (every socket)"),
        )
    })
}

/// Longest close reason a WebSocket close frame carries (RFC 6455 §5.5).
const MAX_CLOSE_REASON: u32 = 123;

/// The checked arguments of `socket_close`.
fn close_args(
    caller: &mut Caller<'_, Host>,
    socket: i64,
    code: i32,
    reason_ptr: u32,
    reason_len: u32,
) -> Result<(u64, u16, String), ServiceError> {
    let bad = |message: String| ServiceError::new(HostError::BadInput, message);
    let socket = u64::try_from(socket).map_err(|_| bad(format!("socket {socket} is not an id")))?;
    let code = match code {
        0 => 1000,
        1000 | 3000..=4999 => u16::try_from(code).unwrap_or(1000),
        _ => {
            return Err(bad(format!(
                "close code {code} is not one an actor may send (1000 or 3000 to 4999)"
            )));
        }
    };
    if reason_len > MAX_CLOSE_REASON {
        return Err(bad(format!(
            "a close reason of {reason_len} bytes is over the {MAX_CLOSE_REASON} a close frame holds"
        )));
    }
    let reason = String::from_utf8(read(caller, reason_ptr, reason_len)?)
        .map_err(|_| bad("the close reason is not UTF-8".to_owned()))?;
    Ok((socket, code, reason))
}

/// Copies the held result into `ptr..ptr + len` (see `take_result`).
fn take_result(caller: &mut Caller<'_, Host>, ptr: u32, len: u32) -> i32 {
    let Some(held) = caller.data_mut().held_result.take() else {
        return fail(
            caller.data_mut(),
            ServiceError::new(HostError::NotFound, "no result is held"),
        ) as i32;
    };
    if held.len() != len as usize {
        let message = format!("the held result has {} bytes, not {len}", held.len());
        caller.data_mut().held_result = Some(held);
        return fail(
            caller.data_mut(),
            ServiceError::new(HostError::BadInput, message),
        ) as i32;
    }
    let written = memory(caller).and_then(|memory| {
        memory
            .write(&mut *caller, ptr as usize, &held)
            .map_err(|_| out_of_bounds(ptr, len))
    });
    match written {
        Ok(()) => 0,
        Err(e) => {
            caller.data_mut().held_result = Some(held);
            fail(caller.data_mut(), e) as i32
        }
    }
}

fn out_of_bounds(ptr: u32, len: u32) -> ServiceError {
    ServiceError::new(
        HostError::BadInput,
        format!("{ptr}+{len} is outside linear memory"),
    )
}

/// The guest's memory 0 (the instrumented export every template has).
fn memory(caller: &mut Caller<'_, Host>) -> Result<wasmtime::Memory, ServiceError> {
    match caller.get_export(&format!("{MEMORY_EXPORT_PREFIX}0")) {
        Some(Extern::Memory(memory)) => Ok(memory),
        _ => Err(ServiceError::new(
            HostError::Internal,
            "the instance exports no memory 0",
        )),
    }
}

/// Bytes `ptr..ptr + len` of memory 0.
fn read(caller: &mut Caller<'_, Host>, ptr: u32, len: u32) -> Result<Vec<u8>, ServiceError> {
    let memory = memory(caller)?;
    let data = memory.data(&*caller);
    let start = ptr as usize;
    start
        .checked_add(len as usize)
        .and_then(|end| data.get(start..end))
        .map(<[u8]>::to_vec)
        .ok_or_else(|| out_of_bounds(ptr, len))
}

fn read_request(
    caller: &mut Caller<'_, Host>,
    ptr: u32,
    len: u32,
) -> Result<Request, ServiceError> {
    let bytes = read(caller, ptr, len)?;
    decode_request(&bytes)
        .map_err(|e| ServiceError::new(HostError::BadInput, format!("the request: {e}")))
}

/// The actor name and request of a `call` or `send`.
fn read_call(
    caller: &mut Caller<'_, Host>,
    actor_ptr: u32,
    actor_len: u32,
    req_ptr: u32,
    req_len: u32,
) -> Result<(String, Request), ServiceError> {
    let name = read(caller, actor_ptr, actor_len)?;
    let actor = String::from_utf8(name)
        .map_err(|_| ServiceError::new(HostError::BadInput, "the actor name is not UTF-8"))?;
    Ok((actor, read_request(caller, req_ptr, req_len)?))
}

/// Records `error` for `last_error` and returns its code.
fn fail(host: &mut Host, error: ServiceError) -> i64 {
    let code = error.kind.code();
    host.last_error = Some(error.to_string());
    i64::from(code)
}

/// A status result (see `stasis_host_api::imports`).
fn status(host: &mut Host, result: Result<(), ServiceError>) -> i32 {
    match result {
        Ok(()) => 0,
        // Codes are -1..-9: the narrowing cannot lose anything.
        Err(e) => fail(host, e) as i32,
    }
}

/// A buffer result: holds `bytes` for `take_result` and returns their length.
fn hold(host: &mut Host, result: Result<Vec<u8>, ServiceError>) -> i64 {
    match result {
        Ok(bytes) => hold_keeping_error(host, bytes),
        Err(e) => {
            host.held_result = None;
            fail(host, e)
        }
    }
}

fn hold_keeping_error(host: &mut Host, bytes: Vec<u8>) -> i64 {
    let len = i64::try_from(bytes.len()).unwrap_or(i64::MAX);
    host.held_result = Some(bytes);
    len
}
