//! The store data of an actor instance ([`Host`]) and the WASI wiring it
//! carries: the per-actor [`VirtualClock`] and [`GuestOutput`], where guest
//! stdout and stderr go; and [`ActorServices`], what the host functions of
//! ABI 2 (`stasis_host_api::imports`) ask of the runtime. The engine's linker and the module cache are typed
//! over [`Host`]; this module depends on neither, so engine, module and
//! instance import it without a circle.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Instant;

use stasis_host_api::imports::HostError;
use stasis_host_api::{Request, Response};

use wasmtime::{StoreLimits, StoreLimitsBuilder};

use crate::tape::{Tape, TapedMonotonic, TapedRandom, TapedWall};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p1::WasiP1Ctx;

/// The store data of one actor instance: its WASI preview 1 context, its
/// memory limit, the CPU ticks left to the current guest call, and what
/// its host functions use (the services, the held result, the last error).
pub struct Host {
    wasi: WasiP1Ctx,
    pub(crate) limits: StoreLimits,
    pub(crate) cpu_ticks_left: u64,
    pub(crate) actor: Arc<str>,
    pub(crate) services: Arc<dyn ActorServices>,
    /// The result a buffer-returning host function left for `take_result`.
    pub(crate) held_result: Option<Vec<u8>>,
    /// Why the last failing host function failed (for `last_error`).
    pub(crate) last_error: Option<String>,
}

/// A host function's failure: the code the guest receives and the reason
/// `last_error` gives it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ServiceError {
    /// The error code's meaning.
    pub kind: HostError,
    /// A human-readable reason.
    pub message: String,
}

impl ServiceError {
    /// A failure of `kind` because of `message`.
    #[must_use]
    pub fn new(kind: HostError, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

/// The future a service method returns: `Send`, owning what it needs.
pub type ServiceFuture<T> = Pin<Box<dyn Future<Output = Result<T, ServiceError>> + Send>>;

/// What the host functions of ABI 2 ask of the runtime, for one actor
/// (the runtime gives each instance its own value, which knows the actor's
/// name, its current request's chain of callers and deadline). Each method
/// runs while the guest waits in the host function; the guest's CPU limit
/// does not run meanwhile, its wall-clock request timeout does.
pub trait ActorServices: Send + Sync {
    /// `call`: `request` to actor `actor`, answered with its response.
    ///
    /// # Errors
    /// [`HostError::NotFound`], [`HostError::LoopDetected`],
    /// [`HostError::Deadline`], [`HostError::TooLarge`],
    /// [`HostError::Unavailable`], [`HostError::Internal`].
    fn call(&self, actor: String, request: Request) -> ServiceFuture<Response>;

    /// `send`: enqueues `request` at actor `actor` (one-way).
    ///
    /// # Errors
    /// As [`ActorServices::call`], without loops.
    fn send(&self, actor: String, request: Request) -> ServiceFuture<()>;

    /// `set_alarm`: the actor's one alarm, at `at_unix_ms` (Unix ms).
    ///
    /// # Errors
    /// [`HostError::NotEnabled`], [`HostError::Unavailable`].
    fn set_alarm(&self, at_unix_ms: u64) -> ServiceFuture<()>;

    /// `cancel_alarm`: removes the alarm (fine when none is set).
    ///
    /// # Errors
    /// [`HostError::NotEnabled`], [`HostError::Unavailable`].
    fn cancel_alarm(&self) -> ServiceFuture<()>;

    /// `alarm`: the pending alarm (Unix ms), if any.
    ///
    /// # Errors
    /// [`HostError::NotEnabled`], [`HostError::Unavailable`].
    fn alarm(&self) -> ServiceFuture<Option<u64>>;

    /// `fetch`: `request` (an absolute http(s) URL in `uri`) to the
    /// outside world.
    ///
    /// # Errors
    /// [`HostError::Refused`], [`HostError::BadInput`],
    /// [`HostError::Unavailable`], [`HostError::Deadline`],
    /// [`HostError::TooLarge`].
    fn fetch(&self, request: Request) -> ServiceFuture<Response>;

    /// `socket_send`: `data` to one of the actor's sockets or streams, or
    /// to all of them (`text`: a text frame).
    ///
    /// # Errors
    /// [`HostError::NotFound`], [`HostError::TooLarge`],
    /// [`HostError::Unavailable`], [`HostError::NotEnabled`].
    fn socket_send(&self, socket: SocketTarget, data: Vec<u8>, text: bool) -> ServiceFuture<()>;

    /// `socket_close`: closes one of the actor's sockets with `code` and
    /// `reason` (already checked), or ends a stream.
    ///
    /// # Errors
    /// As [`ActorServices::socket_send`].
    fn socket_close(&self, socket: u64, code: u16, reason: String) -> ServiceFuture<()>;

    /// `sockets`: the ids of the actor's open sockets and streams.
    ///
    /// # Errors
    /// [`HostError::Unavailable`], [`HostError::NotEnabled`].
    fn sockets(&self) -> ServiceFuture<Vec<u64>>;
}

/// Which of an actor's sockets a `socket_send` writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SocketTarget {
    /// The socket or stream with this id.
    One(u64),
    /// Every open socket and stream of the actor.
    All,
}

/// The services of a host that offers none: every method fails with
/// [`HostError::NotEnabled`] (tests, tools, and instances created outside
/// a worker).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoServices;

fn not_enabled<T: Send + 'static>(what: &str) -> ServiceFuture<T> {
    let error = ServiceError::new(
        HostError::NotEnabled,
        format!("{what} is not enabled on this host"),
    );
    Box::pin(std::future::ready(Err(error)))
}

impl ActorServices for NoServices {
    fn call(&self, _: String, _: Request) -> ServiceFuture<Response> {
        not_enabled("call")
    }
    fn send(&self, _: String, _: Request) -> ServiceFuture<()> {
        not_enabled("send")
    }
    fn set_alarm(&self, _: u64) -> ServiceFuture<()> {
        not_enabled("set_alarm")
    }
    fn cancel_alarm(&self) -> ServiceFuture<()> {
        not_enabled("cancel_alarm")
    }
    fn alarm(&self) -> ServiceFuture<Option<u64>> {
        not_enabled("alarm")
    }
    fn socket_send(&self, _: SocketTarget, _: Vec<u8>, _: bool) -> ServiceFuture<()> {
        not_enabled("socket_send")
    }
    fn socket_close(&self, _: u64, _: u16, _: String) -> ServiceFuture<()> {
        not_enabled("socket_close")
    }
    fn sockets(&self) -> ServiceFuture<Vec<u64>> {
        not_enabled("sockets")
    }
    fn fetch(&self, _: Request) -> ServiceFuture<Response> {
        not_enabled("fetch")
    }
}

/// What a [`Host`] gives the guest through WASI.
pub struct WasiSetup<'a> {
    /// The actor's name, the guest's only argument (`argv[0]`).
    pub actor: &'a str,
    /// The template's environment variables.
    pub env: &'a [(String, String)],
    /// Guest stdout.
    pub stdout: GuestOutput,
    /// Guest stderr.
    pub stderr: GuestOutput,
    /// The guest's monotonic clock.
    pub clock: VirtualClock,
    /// What the `stasis` host functions call.
    pub services: Arc<dyn ActorServices>,
    /// The instance's tape ([`crate::tape`]): its clocks and random bytes
    /// are recorded on it, or replayed from it, and its output is dropped
    /// while it replays.
    pub tape: Tape,
}

impl Host {
    /// Store data for one instance: WASI preview 1 as `setup` says, each
    /// linear memory capped at `max_memory_bytes` (a `memory.grow` past it
    /// returns -1 in the guest), and `cpu_ticks` epoch ticks for the first
    /// guest call.
    #[must_use]
    pub fn new(setup: WasiSetup<'_>, max_memory_bytes: u64, cpu_ticks: u64) -> Self {
        let tape = setup.tape;
        let wasi = WasiCtxBuilder::new()
            .envs(setup.env)
            .args(&[setup.actor])
            .stdout(setup.stdout.muted_by(tape.clone()))
            .stderr(setup.stderr.muted_by(tape.clone()))
            .monotonic_clock(TapedMonotonic {
                clock: setup.clock,
                tape: tape.clone(),
            })
            .wall_clock(TapedWall { tape: tape.clone() })
            .secure_random(TapedRandom { tape })
            .build_p1();
        let services = setup.services;
        let max_memory = usize::try_from(max_memory_bytes).unwrap_or(usize::MAX);
        Self {
            wasi,
            limits: StoreLimitsBuilder::new().memory_size(max_memory).build(),
            cpu_ticks_left: cpu_ticks,
            actor: Arc::from(setup.actor),
            services,
            held_result: None,
            last_error: None,
        }
    }

    /// The WASI preview 1 context (used by the linker).
    pub fn wasi(&mut self) -> &mut WasiP1Ctx {
        &mut self.wasi
    }
}

/// What runs before the guest is given a monotonic clock reading: the
/// worker keeps the actor's persisted clock mark ahead of every reading a
/// guest saw (so a restart after a crash never starts the clock below
/// one). A reading only the host takes (a snapshot's) is not covered.
/// Called on the guest's thread, inside its WASI call; most calls compare
/// the reading with the mark and return.
pub trait ClockLease: Send + Sync + std::fmt::Debug {
    /// `reading_ns` is about to be returned to the guest.
    fn cover(&self, reading_ns: u64);
}

/// A per-actor monotonic clock: it starts where the actor's last snapshot
/// left it, so it never goes backwards across a pause, a restart or a move
/// to another host. Nanoseconds.
#[derive(Debug, Clone)]
pub struct VirtualClock {
    base_ns: u64,
    origin: Instant,
    /// Runs before a reading is returned to the guest (none: nothing).
    lease: Option<Arc<dyn ClockLease>>,
}

impl VirtualClock {
    /// A clock reading `base_ns` now and advancing in real time.
    #[must_use]
    pub fn starting_at(base_ns: u64) -> Self {
        Self {
            base_ns,
            origin: Instant::now(),
            lease: None,
        }
    }

    /// This clock, with `lease` run before each reading the guest takes.
    #[must_use]
    pub fn leased_by(mut self, lease: Option<Arc<dyn ClockLease>>) -> Self {
        self.lease = lease;
        self
    }

    /// The current reading, in nanoseconds (the host's: no lease).
    #[must_use]
    pub fn now_ns(&self) -> u64 {
        let elapsed = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.base_ns.saturating_add(elapsed)
    }
}

/// The guest's readings: each covered by the lease first.
impl wasmtime_wasi::HostMonotonicClock for VirtualClock {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        let reading = self.now_ns();
        if let Some(lease) = &self.lease {
            lease.cover(reading);
        }
        reading
    }
}

/// Where a guest's stdout or stderr goes: one `tracing` event per line
/// (target `stasis::guest`, fields `actor` and `stream`), and optionally a
/// copy of the raw bytes for tests.
#[derive(Clone)]
pub struct GuestOutput {
    actor: Arc<str>,
    stream: &'static str,
    pending: Arc<Mutex<Vec<u8>>>,
    tap: Option<Arc<Mutex<Vec<u8>>>>,
    /// The last lines written since [`GuestOutput::recent`] was last
    /// taken (at most [`RECENT_LINES`], each cut at [`RECENT_LINE_BYTES`]).
    recent: Arc<Mutex<std::collections::VecDeque<String>>>,
    /// Where every byte also goes (the worker's per-actor log).
    sink: Option<Arc<dyn OutputSink>>,
    /// Nothing is written while this tape replays (the output was
    /// written when the delivery first ran).
    mute: Option<Tape>,
}

/// Receives every byte a guest writes to stdout or stderr, as written
/// (the worker keeps each actor's lines: `stasis actor logs`).
pub trait OutputSink: Send + Sync {
    /// `bytes` written on `stream` (`"stdout"` or `"stderr"`).
    fn write(&self, stream: &'static str, bytes: &[u8]);
}

/// Lines [`GuestOutput::recent`] keeps.
const RECENT_LINES: usize = 3;
/// Bytes of a line [`GuestOutput::recent`] keeps.
const RECENT_LINE_BYTES: usize = 300;

/// Longest partial line kept before it is logged anyway, in bytes.
const MAX_PENDING_LINE: usize = 16 << 10;

impl GuestOutput {
    /// Output of `actor` on `stream` (`"stdout"` or `"stderr"`).
    #[must_use]
    pub fn new(actor: &str, stream: &'static str) -> Self {
        Self {
            actor: actor.into(),
            stream,
            pending: Arc::default(),
            tap: None,
            recent: Arc::default(),
            sink: None,
            mute: None,
        }
    }

    /// Drops what is written while `tape` replays.
    #[must_use]
    pub fn muted_by(mut self, tape: Tape) -> Self {
        self.mute = Some(tape);
        self
    }

    /// The last lines written since the last call (a guest call's output:
    /// a Rust guest's panic message, for its trap's answer), oldest first;
    /// a partial last line included.
    #[must_use]
    pub fn recent(&self) -> Vec<String> {
        let mut recent: Vec<String> = std::mem::take(&mut *self.recent_lines()).into();
        let pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if !pending.is_empty() {
            recent.push(cut(&String::from_utf8_lossy(&pending)));
        }
        let skip = recent.len().saturating_sub(RECENT_LINES);
        recent.drain(..skip);
        recent
    }

    fn recent_lines(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<String>> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Also appends every byte written to `tap`.
    #[must_use]
    pub fn with_tap(mut self, tap: Arc<Mutex<Vec<u8>>>) -> Self {
        self.tap = Some(tap);
        self
    }

    /// Also hands every byte written to `sink`.
    #[must_use]
    pub fn with_sink(mut self, sink: Arc<dyn OutputSink>) -> Self {
        self.sink = Some(sink);
        self
    }

    fn write(&self, bytes: &[u8]) {
        if self.mute.as_ref().is_some_and(Tape::is_replaying) {
            return;
        }
        if let Some(sink) = &self.sink {
            sink.write(self.stream, bytes);
        }
        if let Some(tap) = &self.tap {
            tap.lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(bytes);
        }
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.extend_from_slice(bytes);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            self.emit(&line[..end]);
        }
        if pending.len() > MAX_PENDING_LINE {
            let line = std::mem::take(&mut *pending);
            self.emit(&line);
        }
    }

    fn emit(&self, line: &[u8]) {
        {
            let mut recent = self.recent_lines();
            if recent.len() == RECENT_LINES {
                recent.pop_front();
            }
            recent.push_back(cut(&String::from_utf8_lossy(line)));
        }
        tracing::info!(
            target: "stasis::guest",
            actor = %self.actor,
            stream = self.stream,
            "{}",
            String::from_utf8_lossy(line)
        );
    }
}

/// `line` cut at [`RECENT_LINE_BYTES`] (on a character boundary).
fn cut(line: &str) -> String {
    let mut end = line.len().min(RECENT_LINE_BYTES);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_owned()
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.write(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
