//! The wasmtime [`Engine`] every actor of a process shares: its
//! configuration, the WASI linker, the epoch ticker that enforces CPU
//! limits, and the per-actor [`Limits`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use wasmtime::{Config, Engine, Linker};

use crate::instance::Host;

/// How often the epoch ticker advances the engine's epoch. CPU limits are
/// enforced in whole ticks, and a running guest yields to other tasks at
/// every tick.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Limits applied to every actor instance of an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest linear memory of one actor, in bytes; a `memory.grow` past it
    /// fails inside the guest (returns -1). Default 256 MiB.
    pub max_memory: u64,
    /// Wasm execution time allowed per request (and per init/hook call),
    /// counted in [`EPOCH_TICK`]s while the guest runs; past it the call traps
    /// with an interrupt (HTTP 504). Default 1 s.
    pub cpu_limit: Duration,
    /// Wall-clock time allowed per request, host calls such as sleeps
    /// included (HTTP 504). Default 30 s.
    pub request_timeout: Duration,
    /// Largest request or response body, in bytes (HTTP 413 / 502).
    /// Default 8 MiB.
    pub max_body: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_memory: 256 << 20,
            cpu_limit: Duration::from_secs(1),
            request_timeout: Duration::from_secs(30),
            max_body: 8 << 20,
        }
    }
}

impl Limits {
    /// The CPU limit in epoch ticks (at least one).
    #[must_use]
    pub fn cpu_ticks(&self) -> u64 {
        let ticks = self.cpu_limit.as_nanos() / EPOCH_TICK.as_nanos();
        u64::try_from(ticks).unwrap_or(u64::MAX).max(1)
    }
}

/// An engine with its linker, limits and a running epoch ticker. Dropping
/// the last handle stops the ticker thread.
pub struct StasisEngine {
    engine: Engine,
    linker: Arc<Linker<Host>>,
    limits: Limits,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for StasisEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StasisEngine")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl StasisEngine {
    /// Builds the engine: epoch interruption on, deterministic relaxed SIMD
    /// and canonical NaNs so a migrated actor computes the same bits on
    /// any host (research notes §4, pitfall 11), and WASI preview 1 (async)
    /// in the linker.
    ///
    /// # Errors
    /// If wasmtime rejects the configuration.
    pub fn new(limits: Limits) -> anyhow::Result<Arc<Self>> {
        let mut config = Config::new();
        config
            .epoch_interruption(true)
            .relaxed_simd_deterministic(true)
            .cranelift_nan_canonicalization(true);
        let engine = Engine::new(&config)
            .map_err(anyhow::Error::from)
            .context("creating the wasmtime engine")?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |host: &mut Host| host.wasi())
            .map_err(anyhow::Error::from)
            .context("linking WASI preview 1")?;
        let stop = Arc::new(AtomicBool::new(false));
        let ticker_engine = engine.clone();
        let ticker_stop = stop.clone();
        std::thread::Builder::new()
            .name("stasis-epoch".into())
            .spawn(move || {
                while !ticker_stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    ticker_engine.increment_epoch();
                }
            })
            .context("starting the epoch ticker")?;
        Ok(Arc::new(Self {
            engine,
            linker: Arc::new(linker),
            limits,
            stop,
        }))
    }

    /// The wasmtime engine.
    #[must_use]
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The linker holding WASI preview 1.
    #[must_use]
    pub fn linker(&self) -> &Arc<Linker<Host>> {
        &self.linker
    }

    /// The per-actor limits.
    #[must_use]
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}

impl Drop for StasisEngine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
