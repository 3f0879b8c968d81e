//! The wasmtime [`Engine`] every actor of a process shares: its
//! configuration, the instance allocator, the WASI linker, the epoch ticker
//! that enforces CPU limits, and the per-actor [`Limits`].
//!
//! Each live instance costs the process memory mappings, and Linux caps a
//! process at `vm.max_map_count` of them (65,530 by default). The engine
//! keeps that cost to four mappings per live instance: linear memories get
//! no guard region in front and no copy-on-write image (an actor's memory
//! is written by its init or by a restore anyway), leaving one accessible
//! and one reserved mapping per memory, plus the guard page and the stack
//! of the fiber its store keeps for async calls. With `--max-live` the
//! instances come from wasmtime's pooling allocator, sized to exactly that
//! many slots ([`StasisEngine::pooled`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, Linker, PoolingAllocationConfig};

use crate::host::Host;

/// How often the epoch ticker advances the engine's epoch. CPU limits are
/// enforced in whole ticks, and a running guest yields to other tasks at
/// every tick.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Address space the pooling allocator may reserve for linear memories:
/// half of x86-64's 128 TiB user address space. Slots of wasmtime's default
/// 4 GiB reservation (plus its 32 MiB guard) let compiled code skip bounds
/// checks; when that many slots do not fit in this budget, each slot is
/// sized to `--max-memory` instead and code checks bounds explicitly.
const POOL_RESERVATION_BUDGET: u64 = 64 << 40;

/// wasmtime 48's default `Config::memory_reservation` and
/// `Config::memory_guard_size` on 64-bit hosts (`wasmtime::Config` docs).
const DEFAULT_RESERVATION: u64 = 4 << 30;
const DEFAULT_GUARD: u64 = 32 << 20;

/// Linear memories and tables one instance may define under the pooling
/// allocator. Each takes a slot of its own kind, of which there are as many
/// as instance slots: a template with several memories uses several.
const MAX_PER_MODULE: u32 = 4;

/// Memory mappings a live instance costs (module docs).
pub const MAPPINGS_PER_INSTANCE: u64 = 4;

/// Mappings the process needs besides instances: code, heap arenas,
/// thread stacks, the compile cache (about 80 at start, a few hundred under
/// load; the rest is margin).
pub(crate) const MAPPING_HEADROOM: u64 = 4096;

/// The process's cap on memory mappings (`/proc/sys/vm/max_map_count`),
/// if it can be read.
#[must_use]
pub fn max_map_count() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Checks that one process can map `slots` live instances.
///
/// # Errors
/// If `slots` exceeds [`max_live_instances`]; the message names
/// `vm.max_map_count` and the most that fit.
pub fn check_live_instances(slots: usize) -> anyhow::Result<()> {
    if let Some(most) = max_live_instances()
        && slots as u64 > most
    {
        anyhow::bail!(
            "{slots} live instances (the sum of --max-live over the workers) need about {} \
             memory mappings, {MAPPINGS_PER_INSTANCE} each, but vm.max_map_count is {}: use at \
             most {most} per process, or raise vm.max_map_count",
            slots as u64 * MAPPINGS_PER_INSTANCE,
            max_map_count().unwrap_or_default()
        );
    }
    Ok(())
}

/// The most live instances one process can hold under `vm.max_map_count`
/// (`None` if the limit cannot be read).
#[must_use]
pub fn max_live_instances() -> Option<u64> {
    max_map_count().map(|limit| limit.saturating_sub(MAPPING_HEADROOM) / MAPPINGS_PER_INSTANCE)
}

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
    slots: Option<u32>,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for StasisEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StasisEngine")
            .field("limits", &self.limits)
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

impl StasisEngine {
    /// Builds the engine with instances allocated on demand: epoch
    /// interruption on, deterministic relaxed SIMD and canonical NaNs so a
    /// migrated actor computes the same bits on any host (research notes
    /// §4, pitfall 11), four mappings per live instance (module docs), and
    /// WASI preview 1 (async) in the linker.
    ///
    /// # Errors
    /// If wasmtime rejects the configuration.
    pub fn new(limits: Limits) -> anyhow::Result<Arc<Self>> {
        Self::build(limits, None)
    }

    /// Like [`StasisEngine::new`], with wasmtime's pooling allocator holding
    /// `slots` instances (each with one linear memory, one table and one
    /// async stack): the sum of `--max-live` over the workers sharing the
    /// engine. Memory slots reserve 4 GiB each while `slots` of them fit in
    /// 64 TiB of address space, else `limits.max_memory` each (with explicit
    /// bounds checks). An instantiation past `slots` fails (HTTP 503).
    ///
    /// # Errors
    /// If `slots` is 0, more than the process can map under
    /// `vm.max_map_count` ([`max_live_instances`]), or the pool's address
    /// space cannot be reserved.
    pub fn pooled(limits: Limits, slots: usize) -> anyhow::Result<Arc<Self>> {
        check_live_instances(slots)?;
        let slots = u32::try_from(slots)
            .ok()
            .filter(|&s| s > 0)
            .with_context(|| format!("{slots} instance slots: want 1 to {}", u32::MAX))?;
        Self::build(limits, Some(slots))
    }

    fn build(limits: Limits, slots: Option<u32>) -> anyhow::Result<Arc<Self>> {
        let mut config = Config::new();
        config
            .epoch_interruption(true)
            .relaxed_simd_deterministic(true)
            .cranelift_nan_canonicalization(true)
            .memory_init_cow(false)
            .guard_before_linear_memory(false);
        // Every JavaScript template shares the engine's functions: compiled
        // once per process (crate::compile_cache).
        config
            .enable_incremental_compilation(Arc::new(
                crate::compile_cache::CompileCache::in_memory(),
            ))
            .map_err(anyhow::Error::from)
            .context("enabling the compile cache")?;
        if let Some(slots) = slots {
            let fits =
                u64::from(slots) * (DEFAULT_RESERVATION + DEFAULT_GUARD) <= POOL_RESERVATION_BUDGET;
            let reservation = if fits {
                DEFAULT_RESERVATION
            } else {
                limits.max_memory.clamp(64 << 10, DEFAULT_RESERVATION)
            };
            config.memory_reservation(reservation);
            let mut pool = PoolingAllocationConfig::new();
            pool.total_core_instances(slots)
                .total_memories(slots)
                .total_tables(slots)
                .total_stacks(slots)
                .max_memories_per_module(MAX_PER_MODULE)
                .max_tables_per_module(MAX_PER_MODULE)
                .max_memory_size(
                    usize::try_from(limits.max_memory.min(reservation)).unwrap_or(usize::MAX),
                );
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
            tracing::info!(
                slots,
                reservation_bytes = reservation,
                "pooling allocator: one slot per live instance"
            );
        }
        let engine = Engine::new(&config)
            .map_err(anyhow::Error::from)
            .context("creating the wasmtime engine")?;
        // After wasmtime installed its handlers (SIGSEGV, SIGILL, SIGFPE on
        // Linux), so ours runs first for SIGBUS and chains (crate::mapped).
        crate::mapped::install();
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |host: &mut Host| host.wasi())
            .map_err(anyhow::Error::from)
            .context("linking WASI preview 1")?;
        crate::host_functions::add_to_linker(&mut linker)
            .context("linking the stasis host functions")?;
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
            slots,
            stop,
        }))
    }

    /// The wasmtime engine.
    #[must_use]
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The linker holding WASI preview 1 and the `stasis` host functions.
    #[must_use]
    pub fn linker(&self) -> &Arc<Linker<Host>> {
        &self.linker
    }

    /// The per-actor limits.
    #[must_use]
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Instance slots of the pooling allocator; `None` when instances are
    /// allocated on demand.
    #[must_use]
    pub fn slots(&self) -> Option<u32> {
        self.slots
    }
}

impl Drop for StasisEngine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
