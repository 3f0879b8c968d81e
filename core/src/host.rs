//! The store data of an actor instance ([`Host`]) and the WASI wiring it
//! carries: the per-actor [`VirtualClock`] and [`GuestOutput`], where guest
//! stdout and stderr go. The engine's linker and the module cache are typed
//! over [`Host`]; this module depends on neither, so engine, module and
//! instance import it without a circle.

use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Instant;

use wasmtime::{StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p1::WasiP1Ctx;

/// The store data of one actor instance: its WASI preview 1 context, its
/// memory limit and the CPU ticks left to the current guest call.
pub struct Host {
    wasi: WasiP1Ctx,
    pub(crate) limits: StoreLimits,
    pub(crate) cpu_ticks_left: u64,
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
}

impl Host {
    /// Store data for one instance: WASI preview 1 as `setup` says, each
    /// linear memory capped at `max_memory_bytes` (a `memory.grow` past it
    /// returns -1 in the guest), and `cpu_ticks` epoch ticks for the first
    /// guest call.
    #[must_use]
    pub fn new(setup: WasiSetup<'_>, max_memory_bytes: u64, cpu_ticks: u64) -> Self {
        let wasi = WasiCtxBuilder::new()
            .envs(setup.env)
            .args(&[setup.actor])
            .stdout(setup.stdout)
            .stderr(setup.stderr)
            .monotonic_clock(setup.clock)
            .build_p1();
        let max_memory = usize::try_from(max_memory_bytes).unwrap_or(usize::MAX);
        Self {
            wasi,
            limits: StoreLimitsBuilder::new().memory_size(max_memory).build(),
            cpu_ticks_left: cpu_ticks,
        }
    }

    /// The WASI preview 1 context (used by the linker).
    pub fn wasi(&mut self) -> &mut WasiP1Ctx {
        &mut self.wasi
    }
}

/// A per-actor monotonic clock: it starts where the actor's last snapshot
/// left it, so it never goes backwards across a pause, a restart or a move
/// to another host. Nanoseconds.
#[derive(Debug, Clone)]
pub struct VirtualClock {
    base_ns: u64,
    origin: Instant,
}

impl VirtualClock {
    /// A clock reading `base_ns` now and advancing in real time.
    #[must_use]
    pub fn starting_at(base_ns: u64) -> Self {
        Self {
            base_ns,
            origin: Instant::now(),
        }
    }

    /// The current reading, in nanoseconds.
    #[must_use]
    pub fn now_ns(&self) -> u64 {
        let elapsed = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.base_ns.saturating_add(elapsed)
    }
}

impl wasmtime_wasi::HostMonotonicClock for VirtualClock {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        self.now_ns()
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
}

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
        }
    }

    /// Also appends every byte written to `tap`.
    #[must_use]
    pub fn with_tap(mut self, tap: Arc<Mutex<Vec<u8>>>) -> Self {
        self.tap = Some(tap);
        self
    }

    fn write(&self, bytes: &[u8]) {
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
        tracing::info!(
            target: "stasis::guest",
            actor = %self.actor,
            stream = self.stream,
            "{}",
            String::from_utf8_lossy(line)
        );
    }
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
