//! The JavaScript engine actor: QuickJS (through `javy`/`rquickjs`) behind
//! the Stasis ABI. On its own it holds no script; `stasis template push
//! NAME actor.js` pre-initialises it with one (Wizer): the CLI calls
//! [`stasis_js_preinit`] with the script, which evaluates the prelude
//! (`prelude.js`: Request, Response, Headers, URL, crypto, fetch;
//! `subtle.js`: `crypto.subtle`) and the
//! script's top level as an ES module, and snapshots the instance's memory
//! into the template's module. Every actor of the template starts from that
//! heap; requests, alarms and socket events then run the module's default
//! export (`fetch(request)`, `alarm()`, `socket(event)`), and everything the script holds (its
//! module-level variables, closures, Maps, class instances) lives in
//! linear memory, so it survives pause, resume, moves and forks as it is.
//!
//! `Math.random` and `crypto.getRandomValues` draw from the host's random
//! source on every call (never from a seed in the snapshot), so actors and
//! forks made from one snapshot never share a sequence; `Date.now()` reads
//! the host's clock. An uncaught exception prints its message and stack on
//! stderr (the actor's log) and traps, so the host answers 500 and the
//! actor rolls back to its last state, as for any trap.

mod modules;
mod native;
mod subtle;

use std::cell::UnsafeCell;

use javy::quickjs::context::EvalOptions;
use javy::quickjs::{Ctx, Function, Module, Object, TypedArray, Value};
use stasis_guest_sdk::sockets::{SocketEvent, SocketEventKind};
use stasis_guest_sdk::{Actor, Request, Response, export_actor};

/// The globals evaluated before the script.
const PRELUDE: &str = include_str!("prelude.js");
/// `crypto.subtle`, evaluated after the prelude (it extends its `crypto`).
const SUBTLE: &str = include_str!("subtle.js");
/// The module `stasis` a script imports the host API from.
const STASIS_MODULE: &str = include_str!("stasis.js");

/// The engine: one QuickJS runtime and context per actor, created at
/// pre-initialisation.
struct Engine {
    runtime: javy::Runtime,
}

/// A global for a single-threaded guest that the host never re-enters.
struct Global<T>(UnsafeCell<T>);

// SAFETY: wasm32-wasip1 guests have one thread and exports are not re-entered.
unsafe impl<T> Sync for Global<T> {}

static ENGINE: Global<Option<Engine>> = Global(UnsafeCell::new(None));
/// The last error text [`stasis_js_preinit`] returned.
static PREINIT_ERROR: Global<Vec<u8>> = Global(UnsafeCell::new(Vec::new()));

fn engine() -> Option<&'static Engine> {
    // SAFETY: see `Global`; only `preinit` writes it, before any request.
    unsafe { (*ENGINE.0.get()).as_ref() }
}

/// The buffer of `len` bytes at `ptr` the host filled and handed over.
///
/// # Safety
/// `ptr`/`len` must be a buffer from `stasis_alloc` of exactly `len` bytes,
/// handed back once (as in the SDK's `handle`).
unsafe fn take_buffer(ptr: u32, len: u32) -> Box<[u8]> {
    // SAFETY: as the caller promises.
    unsafe {
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(
            ptr as usize as *mut u8,
            len as usize,
        ))
    }
}

/// Pre-initialisation: `ptr`/`len` is a buffer from `stasis_alloc` holding
/// the script's modules (the table [`modules`] decodes: the entry first).
/// Evaluates the prelude and the entry's top level with its imports;
/// returns 0, or `(ptr << 32) | len` of a UTF-8 error (a syntax error
/// names its module, line and column).
#[unsafe(no_mangle)]
pub extern "C" fn stasis_js_preinit(ptr: u32, len: u32) -> u64 {
    // SAFETY: the host hands over a buffer from `stasis_alloc` once.
    let input = unsafe { take_buffer(ptr, len) };
    match modules::decode(&input).and_then(preinit) {
        Ok(engine) => {
            // SAFETY: see `Global`.
            unsafe { *ENGINE.0.get() = Some(engine) };
            0
        }
        Err(e) => {
            // SAFETY: see `Global`.
            let slot = unsafe { &mut *PREINIT_ERROR.0.get() };
            *slot = e.into_bytes();
            ((slot.as_ptr() as usize as u64) << 32) | slot.len() as u64
        }
    }
}

fn preinit(graph: modules::Graph) -> Result<Engine, String> {
    let mut config = javy::Config::default();
    config
        .text_encoding(true)
        .gc_threshold(1 << 20)
        .max_stack_size(512 << 10);
    let runtime = javy::Runtime::new(config).map_err(|e| format!("engine start: {e}"))?;
    let mut modules = graph.modules.into_iter();
    let entry = modules.next().ok_or("the module table holds no module")?;
    let names: Vec<String> = std::iter::once(entry.name.clone())
        .chain(graph.imports.values().cloned())
        .collect();
    // Each module is declared when it is first imported, and its source
    // dropped from the loader then: the snapshot keeps only the compiled
    // modules.
    runtime.context().runtime().set_loader(
        modules::TableResolver {
            imports: graph.imports,
        },
        modules::TableLoader {
            sources: modules.map(|m| (m.name, m.source)).collect(),
            stasis: Some(STASIS_MODULE),
        },
    );
    let engine = Engine { runtime };
    let name = entry.name.as_str();
    engine.runtime.context().with(|ctx| -> Result<(), String> {
        native::register(&ctx).map_err(|e| format!("engine set-up: {e}"))?;
        let mut options = EvalOptions::default();
        options.filename = Some("stasis:prelude".to_owned());
        ctx.eval_with_options::<(), _>(PRELUDE, options)
            .map_err(|e| format!("prelude: {}", thrown(&ctx, e)))?;
        let mut options = EvalOptions::default();
        options.filename = Some("stasis:subtle".to_owned());
        ctx.eval_with_options::<(), _>(SUBTLE, options)
            .map_err(|e| format!("crypto.subtle: {}", thrown(&ctx, e)))?;
        let declared = Module::declare(ctx.clone(), name, entry.source)
            .map_err(|e| syntax_error(&names, &thrown(&ctx, e)))?;
        // An imported module that does not compile fails here.
        let (module, promise) = declared
            .eval()
            .map_err(|e| compile_or_top_level(&names, &thrown(&ctx, e)))?;
        // The top level may await: `finish` runs its jobs until it settles.
        promise
            .finish::<()>()
            .map_err(|e| compile_or_top_level(&names, &thrown(&ctx, e)))?;
        let namespace = module
            .namespace()
            .map_err(|e| top_level(&thrown(&ctx, e)))?;
        let handler: Value = namespace.get("default").map_err(|e| thrown(&ctx, e))?;
        if !handler.is_object() {
            return Err(format!(
                "{name} has no default export: write `export default {{ fetch(request) {{ ... }} }}`"
            ));
        }
        let fetch: Value = handler
            .as_object()
            .and_then(|o| o.get("fetch").ok())
            .unwrap_or_else(|| Value::new_undefined(ctx.clone()));
        if !fetch.is_function() {
            return Err(format!(
                "{name}: the default export has no fetch(request) method"
            ));
        }
        ctx.globals()
            .set("__stasis_handler", handler)
            .map_err(|e| thrown(&ctx, e))?;
        Ok(())
    })?;
    // Start every actor with a clean heap.
    engine.runtime.context().runtime().run_gc();
    Ok(engine)
}

/// A module that does not compile (a `SyntaxError` whose first frame is
/// a bare `at MODULE:L:C`) as [`syntax_error`]; anything else thrown by
/// the top level as [`top_level`].
fn compile_or_top_level(names: &[String], text: &str) -> String {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    let frame = lines.next().map(str::trim).unwrap_or_default();
    let bare = frame
        .strip_prefix("at ")
        .is_some_and(|at| names.iter().any(|n| at.starts_with(&format!("{n}:"))));
    if first.starts_with("SyntaxError") && bare {
        syntax_error(names, text)
    } else {
        top_level(text)
    }
}

/// "NAME: syntax error at line L, column C: ..." from QuickJS's
/// "SyntaxError: message\n    at NAME:L:C", NAME one of the modules
/// (other errors as they are).
fn syntax_error(names: &[String], text: &str) -> String {
    let found = names.iter().find_map(|name| {
        let marker = format!("at {name}:");
        let at = text.find(&marker)?;
        let mut numbers = text[at + marker.len()..]
            .split(|c: char| !c.is_ascii_digit())
            .take(2)
            .map(str::parse::<u32>);
        Some((name, numbers.next()?.ok()?, numbers.next()?.ok()?))
    });
    let first = text.lines().next().unwrap_or(text);
    match found {
        Some((name, line, column)) => {
            format!("{name}: syntax error at line {line}, column {column}: {first}")
        }
        None => format!(
            "{}: {text}",
            names.first().map_or("the script", String::as_str)
        ),
    }
}

fn top_level(text: &str) -> String {
    format!("the script's top level threw: {text}")
}

/// What a failed JavaScript operation threw, as "Name: message\nstack".
fn thrown(ctx: &Ctx<'_>, error: javy::quickjs::Error) -> String {
    if !error.is_exception() {
        return error.to_string();
    }
    describe(ctx, ctx.catch())
}

/// A thrown value as text: an Error's name, message and stack, else the
/// value converted to a string.
fn describe<'js>(ctx: &Ctx<'js>, value: Value<'js>) -> String {
    if let Some(object) = value.as_object() {
        let field = |key: &str| object.get::<_, Option<String>>(key).ok().flatten();
        if let Some(message) = field("message") {
            let name = field("name").unwrap_or_else(|| "Error".to_owned());
            let stack = script_frames(&field("stack").unwrap_or_default());
            return format!("{name}: {message}\n{stack}").trim_end().to_owned();
        }
    }
    javy::val_to_string(ctx, value).unwrap_or_else(|_| "(an unprintable value)".to_owned())
}

/// `stack` without the engine's frames below the script's last one (the
/// prelude's dispatch that called the handler); all of it when no frame
/// is the script's.
fn script_frames(stack: &str) -> String {
    let lines: Vec<&str> = stack.trim_end().lines().collect();
    let engine = |line: &str| line.contains("(stasis:prelude:") || line.contains("(stasis:subtle:");
    match lines.iter().rposition(|line| !engine(line)) {
        Some(last) => lines[..=last].join("\n"),
        None => lines.join("\n"),
    }
}

/// Runs `start` (which calls one of the prelude's dispatch functions), then
/// the job queue until the promise it made settles; its value, or the
/// uncaught exception's text.
fn run_settled<T>(
    engine: &Engine,
    start: impl for<'js> FnOnce(&Ctx<'js>) -> javy::quickjs::Result<()>,
    read: impl for<'js> FnOnce(&Ctx<'js>, Value<'js>) -> Result<T, String>,
) -> Result<T, String> {
    engine
        .runtime
        .context()
        .with(|ctx| start(&ctx).map_err(|e| thrown(&ctx, e)))?;
    run_jobs_and_timers(engine)?;
    engine.runtime.context().with(|ctx| {
        let globals: Object = ctx.globals();
        let done: bool = globals.get("__stasis_done").unwrap_or(false);
        if !done {
            return Err(
                "the handler's promise never settled (it awaits something that \
                        never happens)"
                    .to_owned(),
            );
        }
        let err: Value = globals.get("__stasis_err").map_err(|e| thrown(&ctx, e))?;
        if !err.is_undefined() {
            return Err(describe(&ctx, err));
        }
        let out: Value = globals.get("__stasis_out").map_err(|e| thrown(&ctx, e))?;
        let value = read(&ctx, out);
        let _ = globals.set("__stasis_out", Value::new_undefined(ctx.clone()));
        value
    })
}

/// Runs the job queue, and the timers (`setTimeout`, `setInterval`) while
/// the delivery's promise is pending: sleeps until the next is due, runs
/// it, runs the jobs again. Once the promise settles, timers left are
/// dropped, said in the log.
fn run_jobs_and_timers(engine: &Engine) -> Result<(), String> {
    loop {
        engine
            .runtime
            .resolve_pending_jobs()
            .map_err(|e| e.to_string())?;
        let (done, next) = engine.runtime.context().with(|ctx| {
            let globals: Object = ctx.globals();
            let done: bool = globals.get("__stasis_done").unwrap_or(false);
            let next: f64 = globals
                .get::<_, Function>("__stasis_next_timer")
                .and_then(|f| f.call(()))
                .unwrap_or(-1.0);
            (done, next)
        });
        if done || next < 0.0 {
            if done {
                drop_timers(engine);
            }
            return Ok(());
        }
        if next > 0.0 {
            std::thread::sleep(std::time::Duration::from_secs_f64(next / 1000.0));
        }
        let ran: Result<(), String> = engine.runtime.context().with(|ctx| {
            let run: Function = ctx
                .globals()
                .get("__stasis_run_timers")
                .map_err(|e| thrown(&ctx, e))?;
            run.call::<_, ()>(()).map_err(|e| thrown(&ctx, e))
        });
        ran.map_err(|e| format!("a timer's callback threw: {e}"))?;
    }
}

/// Drops the timers a settled delivery left, saying how many in the log.
fn drop_timers(engine: &Engine) {
    let dropped: u32 = engine.runtime.context().with(|ctx| {
        ctx.globals()
            .get::<_, Function>("__stasis_drop_timers")
            .and_then(|f| f.call(()))
            .unwrap_or(0)
    });
    if dropped > 0 {
        eprintln!(
            "{dropped} timer(s) still pending when the delivery ended were dropped (timers run only \
             while a delivery is under way; use setAlarm for later work)"
        );
    }
}

/// Prints an uncaught exception to the actor's log and traps: the host
/// answers 500 and rolls the actor back, as for any trap. The message and
/// stack stay in the log: the answer's body, which the client sees, says
/// only where to look.
fn uncaught(what: &str, text: &str) -> ! {
    eprintln!("Uncaught exception in {what}: {text}");
    // The last line is what the trap's reason quotes (its stderr's tail).
    if let Some(first) = text.lines().next()
        && text.contains('\n')
    {
        eprintln!("uncaught exception in {what}: {first} (its stack is above in the log)");
    }
    // A trap without a Rust panic's lines: the log holds the script's
    // exception and stack only.
    std::process::abort()
}

/// The bytes the last [`stasis_save_state`] returned.
static SAVED: Global<Vec<u8>> = Global(UnsafeCell::new(Vec::new()));

/// State hand-over, the running version's side: the default export's
/// `save()` value, encoded (see `prelude.js`), `(ptr << 32) | len`. A
/// `save()` that throws (or returns what cannot be handed over) traps,
/// with the reason on stderr: the upgrade is refused and the actor stays.
#[unsafe(no_mangle)]
pub extern "C" fn stasis_save_state() -> u64 {
    let Some(engine) = engine() else {
        uncaught("save", "this module is the bare JavaScript engine");
    };
    let result = run_settled(
        engine,
        |ctx| {
            let save: Function = ctx.globals().get("__stasis_save")?;
            save.call::<_, ()>(())
        },
        |ctx, out| {
            let text: String =
                javy::quickjs::FromJs::from_js(ctx, out).map_err(|e| thrown(ctx, e))?;
            Ok(text.into_bytes())
        },
    );
    match result {
        Ok(bytes) => {
            // SAFETY: see `Global`.
            let slot = unsafe { &mut *SAVED.0.get() };
            *slot = bytes;
            ((slot.as_ptr() as usize as u64) << 32) | slot.len() as u64
        }
        Err(text) => uncaught("save", &text),
    }
}

/// State hand-over, the new version's side: `ptr`/`len` is a buffer from
/// `stasis_alloc` holding what [`stasis_save_state`] returned; the default
/// export's `load(value, fromVersion)` takes it. 0 once it did; 1 (the
/// reason on stderr) when it threw or the bytes are not a saved state.
#[unsafe(no_mangle)]
pub extern "C" fn stasis_load_state(ptr: u32, len: u32) -> u32 {
    // SAFETY: the host hands over a buffer from `stasis_alloc` once.
    let input = unsafe { take_buffer(ptr, len) };
    let Some(engine) = engine() else {
        eprintln!("load: this module is the bare JavaScript engine");
        return 1;
    };
    let text = String::from_utf8_lossy(&input).into_owned();
    let result = run_settled(
        engine,
        |ctx| {
            let load: Function = ctx.globals().get("__stasis_load")?;
            load.call::<_, ()>((text,))
        },
        |_, _| Ok(()),
    );
    match result {
        Ok(()) => 0,
        Err(text) => {
            // One line: the host quotes the last lines of stderr in the
            // upgrade's refusal.
            let mut lines = text.lines().map(str::trim);
            let first = lines.next().unwrap_or_default();
            let stack: Vec<&str> = lines.collect();
            eprintln!(
                "load(value, fromVersion) refused the state: {first} (stack: {})",
                stack.join(" / ")
            );
            1
        }
    }
}

/// Which side of a state hand-over the evaluated script takes part in
/// (its default export's `save` and `load` methods): bit 0 `save`, bit 1
/// `load`. Asked by `stasis template push` after the pre-initialisation.
#[unsafe(no_mangle)]
pub extern "C" fn stasis_js_hand_over() -> u32 {
    let Some(engine) = engine() else { return 0 };
    engine.runtime.context().with(|ctx| {
        let handler: Option<Object> = ctx.globals().get("__stasis_handler").ok();
        let has = |name: &str| {
            handler
                .as_ref()
                .and_then(|h| h.get::<_, Value>(name).ok())
                .is_some_and(|v| v.is_function())
        };
        u32::from(has("save")) | (u32::from(has("load")) << 1)
    })
}

/// The actor type the SDK exports; all state is in [`ENGINE`].
#[derive(Default)]
struct JsActor;

impl Actor for JsActor {
    fn handle(&mut self, req: Request) -> Response {
        let Some(engine) = engine() else {
            return Response::text(
                500,
                "this module is the bare JavaScript engine: push a .js file with \
                 `stasis template push NAME actor.js`\n",
            );
        };
        let host = req
            .header("host")
            .map(|h| String::from_utf8_lossy(h).into_owned())
            .unwrap_or_else(|| req.context.actor.clone());
        let url = format!("http://{host}{}", req.uri);
        let headers: Vec<Vec<String>> = req
            .headers
            .iter()
            .map(|(k, v)| vec![k.clone(), String::from_utf8_lossy(v).into_owned()])
            .collect();
        let method = req.method.clone();
        let (actor, worker) = (req.context.actor, req.context.worker);
        // The template's environment (`--env K=V`), read per request: the
        // snapshot made at push holds none.
        let env: Vec<Vec<String>> = std::env::vars().map(|(k, v)| vec![k, v]).collect();
        let body = req.body;
        let result = run_settled(
            engine,
            |ctx| {
                let dispatch: Function = ctx.globals().get("__stasis_dispatch")?;
                let body = TypedArray::<u8>::new(ctx.clone(), body)?;
                dispatch.call::<_, ()>((method, url, headers, body, actor, worker, env))
            },
            |ctx, out| {
                let fields = || -> javy::quickjs::Result<_> {
                    let out: javy::quickjs::Array = javy::quickjs::FromJs::from_js(ctx, out)?;
                    let status: i32 = out.get(0)?;
                    let headers: Vec<Vec<String>> = out.get(1)?;
                    let body: TypedArray<u8> = out.get(2)?;
                    Ok((status, headers, body))
                };
                let (status, headers, body) = fields().map_err(|e| thrown(ctx, e))?;
                Ok(Response {
                    status: u16::try_from(status).unwrap_or(0),
                    headers: headers
                        .into_iter()
                        .filter_map(|pair| match <[String; 2]>::try_from(pair) {
                            Ok([k, v]) => Some((k, v.into_bytes())),
                            Err(_) => None,
                        })
                        .collect(),
                    body: body.as_bytes().unwrap_or_default().to_vec(),
                })
            },
        );
        match result {
            Ok(response) => response,
            Err(text) => uncaught("fetch", &text),
        }
    }

    fn alarm(&mut self) {
        let Some(engine) = engine() else { return };
        let result = run_settled(
            engine,
            |ctx| {
                let alarm: Function = ctx.globals().get("__stasis_alarm")?;
                alarm.call::<_, ()>(())
            },
            |_, _| Ok(()),
        );
        if let Err(text) = result {
            uncaught("alarm", &text);
        }
    }

    fn on_socket(&mut self, event: SocketEvent) {
        let Some(engine) = engine() else { return };
        let (kind, data, text, code, reason) = match event.kind {
            SocketEventKind::Message { data, text } => ("message", data, text, 0, String::new()),
            SocketEventKind::Closed { code, reason } => ("close", Vec::new(), false, code, reason),
        };
        // Ids are below 2^53 (microseconds since 1970), exact as numbers.
        let socket = event.socket as f64;
        let result = run_settled(
            engine,
            |ctx| {
                let on_socket: Function = ctx.globals().get("__stasis_socket")?;
                let data = TypedArray::<u8>::new(ctx.clone(), data)?;
                on_socket.call::<_, ()>((socket, kind, data, text, code, reason))
            },
            |_, _| Ok(()),
        );
        if let Err(text) = result {
            uncaught("socket", &text);
        }
    }
}

export_actor!(JsActor, sockets);
