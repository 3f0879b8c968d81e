//! The native functions behind the prelude and the `stasis` module, on the
//! hidden global `__stasis_native`: host randomness, and the host API of
//! the guest SDK (`call`, `send`, `fetch`, the alarm, the actor's name,
//! the actor's WebSockets and streams), and `crypto.subtle`'s hashing
//! (see [`crate::subtle`]).
//! A host error becomes a JavaScript exception naming it.

use javy::quickjs::{Array, Ctx, Exception, Function, Object, Result, TypedArray, Value};
use stasis_guest_sdk::{HostError, Request, Response, host, sockets};

#[link(wasm_import_module = "wasi_snapshot_preview1")]
unsafe extern "C" {
    /// WASI's `random_get`: fills the buffer from the host's random source.
    #[link_name = "random_get"]
    fn wasi_random_get(buf: *mut u8, len: usize) -> i32;
}

/// `len` bytes from the host's random source (never from the snapshot).
fn random_bytes(len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    if len > 0 {
        // SAFETY: the buffer is live and `len` bytes long.
        let errno = unsafe { wasi_random_get(buf.as_mut_ptr(), len) };
        assert_eq!(errno, 0, "the host's random source failed");
    }
    buf
}

/// Adds `Math.random` (host randomness, 53 bits) and `__stasis_native`.
pub(crate) fn register(ctx: &Ctx<'_>) -> Result<()> {
    let globals = ctx.globals();
    let math: Object = globals.get("Math")?;
    math.set("random", Function::new(ctx.clone(), random)?)?;
    let native = Object::new(ctx.clone())?;
    native.set("randomBytes", Function::new(ctx.clone(), random_array)?)?;
    native.set("call", Function::new(ctx.clone(), call)?)?;
    native.set("send", Function::new(ctx.clone(), send)?)?;
    native.set("fetch", Function::new(ctx.clone(), fetch)?)?;
    native.set("setAlarm", Function::new(ctx.clone(), set_alarm)?)?;
    native.set("cancelAlarm", Function::new(ctx.clone(), cancel_alarm)?)?;
    native.set("getAlarm", Function::new(ctx.clone(), get_alarm)?)?;
    native.set("selfName", Function::new(ctx.clone(), self_name)?)?;
    native.set("socketSend", Function::new(ctx.clone(), socket_send)?)?;
    native.set("socketClose", Function::new(ctx.clone(), socket_close)?)?;
    native.set("sockets", Function::new(ctx.clone(), open_sockets)?)?;
    crate::subtle::register(ctx, &native)?;
    globals.set("__stasis_native", native)?;
    Ok(())
}

fn random() -> f64 {
    let bytes: [u8; 8] = random_bytes(8).try_into().expect("8 bytes");
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

fn random_array<'js>(ctx: Ctx<'js>, len: usize) -> Result<TypedArray<'js, u8>> {
    if len > 65536 {
        return Err(Exception::throw_range(
            &ctx,
            "crypto.getRandomValues: at most 65536 bytes at once",
        ));
    }
    TypedArray::new(ctx, random_bytes(len))
}

fn throw(ctx: &Ctx<'_>, what: &str, e: HostError) -> javy::quickjs::Error {
    let detail = host::last_error().unwrap_or_default();
    let message = if detail.is_empty() {
        format!("{what}: {e}")
    } else {
        format!("{what}: {e}: {detail}")
    };
    Exception::throw_message(ctx, &message)
}

fn request(
    method: String,
    uri: String,
    headers: Vec<Vec<String>>,
    body: &TypedArray<'_, u8>,
) -> Request {
    let mut request = Request::new(&method, &uri).with_body(body.as_bytes().unwrap_or_default());
    for pair in headers {
        if let [k, v] = &pair[..] {
            request = request.with_header(k, v.as_bytes());
        }
    }
    request
}

/// `{status, headers: [[name, value]...], body: Uint8Array}`.
fn response<'js>(ctx: &Ctx<'js>, response: Response) -> Result<Object<'js>> {
    let out = Object::new(ctx.clone())?;
    out.set("status", response.status)?;
    let headers = Array::new(ctx.clone())?;
    for (i, (k, v)) in response.headers.into_iter().enumerate() {
        headers.set(i, vec![k, String::from_utf8_lossy(&v).into_owned()])?;
    }
    out.set("headers", headers)?;
    out.set("body", TypedArray::<u8>::new(ctx.clone(), response.body)?)?;
    Ok(out)
}

fn call<'js>(
    ctx: Ctx<'js>,
    actor: String,
    method: String,
    uri: String,
    headers: Vec<Vec<String>>,
    body: TypedArray<'js, u8>,
) -> Result<Object<'js>> {
    let req = request(method, uri, headers, &body);
    match host::call(&actor, &req) {
        Ok(answer) => response(&ctx, answer),
        Err(e) => Err(throw(&ctx, &format!("call {actor}"), e)),
    }
}

fn send<'js>(
    ctx: Ctx<'js>,
    actor: String,
    method: String,
    uri: String,
    headers: Vec<Vec<String>>,
    body: TypedArray<'js, u8>,
) -> Result<()> {
    let req = request(method, uri, headers, &body);
    host::send(&actor, &req).map_err(|e| throw(&ctx, &format!("send {actor}"), e))
}

fn fetch<'js>(
    ctx: Ctx<'js>,
    method: String,
    url: String,
    headers: Vec<Vec<String>>,
    body: TypedArray<'js, u8>,
) -> Result<Object<'js>> {
    let req = request(method, url.clone(), headers, &body);
    match host::fetch(&req) {
        Ok(answer) => response(&ctx, answer),
        Err(e) => Err(throw(&ctx, &format!("fetch {url}"), e)),
    }
}

fn set_alarm(ctx: Ctx<'_>, at_unix_ms: f64) -> Result<()> {
    if !at_unix_ms.is_finite() || at_unix_ms < 0.0 {
        return Err(Exception::throw_range(&ctx, "setAlarm: not a time"));
    }
    host::set_alarm(at_unix_ms as u64).map_err(|e| throw(&ctx, "setAlarm", e))
}

fn cancel_alarm(ctx: Ctx<'_>) -> Result<()> {
    host::cancel_alarm().map_err(|e| throw(&ctx, "cancelAlarm", e))
}

fn get_alarm<'js>(ctx: Ctx<'js>) -> Result<Value<'js>> {
    match host::alarm() {
        Ok(Some(at)) => Ok(Value::new_float(ctx, at as f64)),
        Ok(None) => Ok(Value::new_null(ctx)),
        Err(e) => Err(throw(&ctx, "getAlarm", e)),
    }
}

/// A socket id from JavaScript: a whole number from 0 to 2^53, or -1
/// for every socket.
fn socket_id(ctx: &Ctx<'_>, what: &str, id: f64) -> Result<i64> {
    if id.fract() != 0.0 || !(-1.0..=9_007_199_254_740_992.0).contains(&id) {
        return Err(Exception::throw_range(ctx, &format!("{what}: {id} is not a socket id")));
    }
    Ok(id as i64)
}

/// `socketSend(id, data)`: a string is sent as a text message, a
/// Uint8Array as a binary one; `id` -1 sends to every socket.
fn socket_send<'js>(ctx: Ctx<'js>, id: f64, data: Value<'js>) -> Result<()> {
    let id = socket_id(&ctx, "socketSend", id)?;
    let sent = if let Some(text) = data.as_string() {
        let text = text.to_string()?;
        match u64::try_from(id) {
            Ok(id) => sockets::send_text(id, &text),
            Err(_) => sockets::broadcast_text(&text),
        }
    } else {
        let bytes: TypedArray<'js, u8> = javy::quickjs::FromJs::from_js(&ctx, data)?;
        let bytes = bytes.as_bytes().unwrap_or_default();
        match u64::try_from(id) {
            Ok(id) => sockets::send_binary(id, bytes),
            Err(_) => {
                // Every socket, one by one (binary broadcasts are rare).
                let mut result = Ok(());
                for id in sockets::open().map_err(|e| throw(&ctx, "socketSend", e))? {
                    result = result.and(sockets::send_binary(id, bytes));
                }
                result
            }
        }
    };
    sent.map_err(|e| throw(&ctx, "socketSend", e))
}

fn socket_close(ctx: Ctx<'_>, id: f64, code: u16, reason: String) -> Result<()> {
    let id = socket_id(&ctx, "socketClose", id)?;
    let id = u64::try_from(id)
        .map_err(|_| Exception::throw_range(&ctx, "socketClose: name one socket"))?;
    sockets::close(id, code, &reason).map_err(|e| throw(&ctx, "socketClose", e))
}

fn open_sockets(ctx: Ctx<'_>) -> Result<Vec<f64>> {
    sockets::open()
        .map(|ids| ids.into_iter().map(|id| id as f64).collect())
        .map_err(|e| throw(&ctx, "sockets", e))
}

fn self_name(ctx: Ctx<'_>) -> Result<String> {
    host::self_name().map_err(|e| throw(&ctx, "selfName", e))
}
