//! One live actor: a wasmtime [`Store`] holding one instance of a template,
//! its WASI context and virtual clock, and the ABI calls into it.
//!
//! Every guest call is an async wasmtime call (`call_async`) on the caller's
//! tokio runtime. The epoch callback lets the guest run one
//! [`EPOCH_TICK`](crate::engine::EPOCH_TICK) at a time, yielding in between,
//! and interrupts it once the CPU limit's ticks are used up; the
//! wall-clock request timeout drops the call's future, which also cuts a
//! guest blocked in a WASI sleep. Either way the instance is poisoned and must
//! be dropped: the caller rolls the actor back to its newest snapshot.

use std::sync::Arc;

use stasis_host_api::sockets::SocketEvent;
use stasis_host_api::{Context, Request, Response, exports};
use wasmtime::{Global, Instance, Memory, Store, TypedFunc, UpdateDeadline};

use crate::cow::CowMappings;
use crate::engine::{Limits, StasisEngine};
use crate::host::{
    ActorServices, ClockLease, GuestOutput, Host, NoServices, VirtualClock, WasiSetup,
};
use crate::module::{GLOBAL_EXPORT_PREFIX, MEMORY_EXPORT_PREFIX, Template};
use crate::tape::Tape;
use crate::taped_services::TapedServices;

mod error;
mod state;

pub use error::CallError;
use error::{classify, classify_instantiation};

/// What an instance is created with. The template fixes the environment
/// (wasi-libc caches it in linear memory, so it must not change across a
/// resume).
#[derive(Clone)]
pub struct InstanceConfig {
    /// Actor and worker names, passed to the guest in every request.
    pub context: Context,
    /// The template's WASI environment.
    pub env: Vec<(String, String)>,
    /// Guest stdout.
    pub stdout: GuestOutput,
    /// Guest stderr.
    pub stderr: GuestOutput,
    /// The virtual clock starts at no less than this (ns): the latest
    /// reading the actor may have seen before, so the clock never goes back
    /// across a trap rollback or a crash. 0 from [`InstanceConfig::new`].
    pub clock_floor_ns: u64,
    /// Runs before each clock reading the guest takes (see
    /// [`ClockLease`]); none from [`InstanceConfig::new`].
    pub clock_lease: Option<Arc<dyn ClockLease>>,
    /// What the `stasis` host functions call ([`NoServices`] from
    /// [`InstanceConfig::new`]).
    pub services: Arc<dyn ActorServices>,
}

impl InstanceConfig {
    /// A config for `actor` on `worker` with `env`, logging its output.
    #[must_use]
    pub fn new(actor: &str, worker: &str, env: Vec<(String, String)>) -> Self {
        Self {
            context: Context {
                actor: actor.to_owned(),
                worker: worker.to_owned(),
            },
            env,
            stdout: GuestOutput::new(actor, "stdout"),
            stderr: GuestOutput::new(actor, "stderr"),
            clock_floor_ns: 0,
            clock_lease: None,
            services: Arc::new(NoServices),
        }
    }
}

/// A live actor instance (see the module docs).
pub struct ActorInstance {
    /// Snapshot runs mapped copy-on-write into the memories; released
    /// (re-mapped as zeros) in `Drop`, before the store gives the memories
    /// back to wasmtime.
    pub(crate) cow: CowMappings,
    pub(crate) store: Store<Host>,
    pub(crate) template: Arc<Template>,
    pub(crate) clock: VirtualClock,
    pub(crate) memories: Vec<Memory>,
    pub(crate) globals: Vec<Global>,
    context: Context,
    memory: Memory,
    alloc: TypedFunc<u32, u32>,
    handle: TypedFunc<(u32, u32), u64>,
    hooks: Hooks,
    limits: Limits,
    /// The guest's stderr: a trap's answer carries what the call wrote
    /// last (a Rust guest's panic message).
    stderr: GuestOutput,
    /// The tape of its nondeterministic inputs ([`crate::tape`]).
    tape: Tape,
}

#[derive(Default)]
struct Hooks {
    initialize: Option<TypedFunc<(), ()>>,
    init: Option<TypedFunc<(), ()>>,
    on_pause: Option<TypedFunc<(), ()>>,
    on_resume: Option<TypedFunc<(), ()>>,
    on_alarm: Option<TypedFunc<(), ()>>,
    on_socket: Option<TypedFunc<(u32, u32), u32>>,
    save_state: Option<TypedFunc<(), u64>>,
    load_state: Option<TypedFunc<(u32, u32), u32>>,
}

/// Which variant to instantiate.
pub(crate) enum Start {
    /// Fresh actor: start function, `_initialize` and `stasis_init` run.
    Spawn,
    /// Resume instance: nothing runs; the clock starts at `clock_ns`.
    Resume { clock_ns: u64 },
}

impl ActorInstance {
    /// Creates a new actor: instantiates the spawn variant (running the start
    /// function), then calls `_initialize` and `stasis_init` if exported.
    /// Each of these runs exactly once in the actor's life.
    ///
    /// # Errors
    /// A [`CallError`] if instantiation or an init call traps or times out.
    pub async fn spawn(
        engine: &StasisEngine,
        template: Arc<Template>,
        config: InstanceConfig,
    ) -> Result<Self, CallError> {
        let mut inst = Self::instantiate(engine, template, config, Start::Spawn).await?;
        if let Some(f) = inst.hooks.initialize.clone() {
            inst.run_hook(f).await?;
        }
        if let Some(f) = inst.hooks.init.clone() {
            inst.run_hook(f).await?;
        }
        Ok(inst)
    }

    pub(crate) async fn instantiate(
        engine: &StasisEngine,
        template: Arc<Template>,
        config: InstanceConfig,
        start: Start,
    ) -> Result<Self, CallError> {
        let limits = *engine.limits();
        let clock = match start {
            Start::Spawn => VirtualClock::starting_at(config.clock_floor_ns),
            Start::Resume { clock_ns } => {
                VirtualClock::starting_at(clock_ns.max(config.clock_floor_ns))
            }
        }
        .leased_by(config.clock_lease.clone());
        let tape = Tape::default();
        let setup = WasiSetup {
            actor: &config.context.actor,
            env: &config.env,
            stdout: config.stdout.clone(),
            stderr: config.stderr.clone(),
            clock: clock.clone(),
            services: Arc::new(TapedServices {
                inner: config.services.clone(),
                tape: tape.clone(),
            }),
            tape: tape.clone(),
        };
        let host = Host::new(setup, limits.max_memory, limits.cpu_ticks());
        let mut store = Store::new(engine.engine(), host);
        store.limiter(|host| &mut host.limits);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut cx| {
            let host = cx.data_mut();
            if host.cpu_ticks_left == 0 {
                return Ok(UpdateDeadline::Interrupt);
            }
            host.cpu_ticks_left -= 1;
            Ok(UpdateDeadline::Yield(1))
        });
        let pre = match start {
            Start::Spawn => &template.spawn,
            Start::Resume { .. } => &template.resume,
        };
        let instantiate = pre.instantiate_async(&mut store);
        let instance = match tokio::time::timeout(limits.request_timeout, instantiate).await {
            Ok(r) => r.map_err(|e| classify_instantiation(e, engine))?,
            Err(_) => return Err(CallError::Timeout(limits.request_timeout)),
        };
        let stderr = config.stderr.clone();
        let mut bound = Self::bind(
            store,
            instance,
            template,
            clock,
            config.context,
            limits,
            stderr,
        )?;
        bound.tape = tape;
        Ok(bound)
    }

    fn bind(
        mut store: Store<Host>,
        instance: Instance,
        template: Arc<Template>,
        clock: VirtualClock,
        context: Context,
        limits: Limits,
        stderr: GuestOutput,
    ) -> Result<Self, CallError> {
        let missing = |what: String| CallError::Host(format!("instrumented export {what} missing"));
        let mut memories = Vec::with_capacity(template.info.memories.len());
        for m in &template.info.memories {
            let name = format!("{MEMORY_EXPORT_PREFIX}{}", m.index);
            memories.push(
                instance
                    .get_memory(&mut store, &name)
                    .ok_or_else(|| missing(name))?,
            );
        }
        let mut globals = Vec::with_capacity(template.info.globals.len());
        for g in &template.info.globals {
            let name = format!("{GLOBAL_EXPORT_PREFIX}{}", g.index);
            globals.push(
                instance
                    .get_global(&mut store, &name)
                    .ok_or_else(|| missing(name))?,
            );
        }
        let memory = *memories
            .first()
            .ok_or_else(|| CallError::Host("the module defines no memory".into()))?;
        let typed = |store: &mut Store<Host>, name: &str| {
            instance.get_typed_func::<(), ()>(&mut *store, name).ok()
        };
        let hooks = Hooks {
            initialize: typed(&mut store, exports::INITIALIZE),
            init: typed(&mut store, exports::INIT),
            on_pause: typed(&mut store, exports::ON_PAUSE),
            on_resume: typed(&mut store, exports::ON_RESUME),
            on_alarm: typed(&mut store, exports::ON_ALARM),
            on_socket: instance.get_typed_func(&mut store, exports::ON_SOCKET).ok(),
            save_state: instance
                .get_typed_func(&mut store, exports::SAVE_STATE)
                .ok(),
            load_state: instance
                .get_typed_func(&mut store, exports::LOAD_STATE)
                .ok(),
        };
        let alloc = instance
            .get_typed_func(&mut store, exports::ALLOC)
            .map_err(|e| CallError::Host(format!("{e:#}")))?;
        let handle = instance
            .get_typed_func(&mut store, exports::HANDLE)
            .map_err(|e| CallError::Host(format!("{e:#}")))?;
        Ok(Self {
            cow: CowMappings::default(),
            store,
            template,
            clock,
            memories,
            globals,
            context,
            memory,
            alloc,
            handle,
            hooks,
            limits,
            stderr,
            tape: Tape::default(),
        })
    }

    /// The worker named to the guest in each request
    /// ([`Context::worker`]).
    #[must_use]
    pub fn worker(&self) -> &str {
        &self.context.worker
    }

    /// Names `worker` to the guest in the next requests: a replayed
    /// delivery sees the worker it ran on.
    pub fn set_worker(&mut self, worker: &str) {
        if self.context.worker != worker {
            worker.clone_into(&mut self.context.worker);
        }
    }

    /// The tape of the instance's nondeterministic inputs: the worker
    /// records a delivery's on it and replays them from it.
    #[must_use]
    pub fn tape(&self) -> &Tape {
        &self.tape
    }

    /// The template this instance runs.
    #[must_use]
    pub fn template(&self) -> &Arc<Template> {
        &self.template
    }

    /// The actor's virtual monotonic clock, in nanoseconds.
    #[must_use]
    pub fn clock_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Total size of the instance's linear memories, in bytes.
    #[must_use]
    pub fn memory_bytes(&self) -> u64 {
        self.memories
            .iter()
            .map(|m| m.data_size(&self.store) as u64)
            .sum()
    }

    /// Bytes of linear memory mapped copy-on-write from a snapshot file
    /// by the restore that made this instance (0 after a copying restore).
    #[must_use]
    pub fn mapped_bytes(&self) -> u64 {
        self.cow.mapped_bytes()
    }

    /// Number of snapshot page runs mapped copy-on-write into this
    /// instance (each costs up to
    /// [`MAPPINGS_PER_MAPPED_RUN`](crate::cow::MAPPINGS_PER_MAPPED_RUN)
    /// process mappings).
    #[must_use]
    pub fn mapped_runs(&self) -> usize {
        self.cow.mapped_runs()
    }

    /// Memory `index`'s base address and accessible length in bytes.
    /// Whether the files mapped by a copy-on-write restore still back the
    /// memory as when mapped ([`crate::mapped`]); checked after each guest
    /// call and by each capture. Cheap (atomics and an `fstat` per file).
    ///
    /// # Errors
    /// What changed (path-free): drop the instance, never capture it.
    pub fn mapped_intact(&self) -> Result<(), String> {
        self.cow.check()
    }

    pub(crate) fn memory_extent(&self, index: usize) -> Option<(*mut u8, usize)> {
        let memory = self.memories.get(index)?;
        Some((memory.data_ptr(&self.store), memory.data_size(&self.store)))
    }

    /// A copy of memory `index` (for tests and digests).
    #[must_use]
    pub fn memory_data(&self, index: usize) -> Option<&[u8]> {
        self.memories.get(index).map(|m| m.data(&self.store))
    }

    /// The current values of the defined mutable globals, in index order.
    #[must_use]
    pub fn global_values(&mut self) -> Vec<wasmtime::Val> {
        let globals = self.globals.clone();
        globals.iter().map(|g| g.get(&mut self.store)).collect()
    }

    /// Handles one request: copies it into guest memory, calls the handler
    /// and decodes the response.
    ///
    /// # Errors
    /// A [`CallError`]; if [`CallError::poisons_instance`], drop this
    /// instance and restore the actor from its newest snapshot.
    pub async fn call(&mut self, request: &Request) -> Result<Response, CallError> {
        let mut request = request.clone();
        request.context = self.context.clone();
        let bytes = stasis_host_api::encode_request(&request)
            .map_err(|e| CallError::Host(e.to_string()))?;
        let len = u32::try_from(bytes.len())
            .map_err(|_| CallError::Host("request larger than 4 GiB".into()))?;
        let timeout = self.limits.request_timeout;
        let handle = self.handle.clone();
        let packed = tokio::time::timeout(timeout, self.invoke(handle, &bytes, len)).await;
        self.cow.check().map_err(CallError::MappedFileChanged)?;
        let packed = match packed {
            Ok(r) => r.map_err(|e| self.with_stderr(e))?,
            Err(_) => return Err(CallError::Timeout(timeout)),
        };
        let (ptr, len) = ((packed >> 32) as usize, (packed & 0xffff_ffff) as usize);
        let data = self.memory.data(&self.store);
        let raw = ptr
            .checked_add(len)
            .and_then(|end| data.get(ptr..end))
            .ok_or_else(|| {
                CallError::BadResponse(format!("response at {ptr}+{len} is outside linear memory"))
            })?;
        let response = stasis_host_api::decode_response(raw)
            .map_err(|e| CallError::BadResponse(e.to_string()))?;
        if response.body.len() > self.limits.max_body {
            return Err(CallError::BadResponse(format!(
                "response body of {} bytes exceeds --max-body ({} bytes)",
                response.body.len(),
                self.limits.max_body
            )));
        }
        // 1xx would hand the connection over (101: only for an upgrade
        // the host offered, see `stasis_host_api::sockets`) or is not a
        // final answer; past 599 is not HTTP.
        let accepts_socket =
            response.status == 101 && stasis_host_api::sockets::offers_socket(&request);
        if !(200..=599).contains(&response.status) && !accepts_socket {
            return Err(CallError::BadResponse(format!(
                "status {}",
                response.status
            )));
        }
        Ok(response)
    }

    /// Copies `bytes` (`len` of them) into a buffer from `stasis_alloc`
    /// and calls `f` with it (the guest takes the buffer back).
    async fn invoke<R: wasmtime::WasmResults + Send + Sync>(
        &mut self,
        f: TypedFunc<(u32, u32), R>,
        bytes: &[u8],
        len: u32,
    ) -> Result<R, CallError> {
        self.reset_cpu();
        let cpu_limit = self.limits.cpu_limit;
        let ptr = self
            .alloc
            .clone()
            .call_async(&mut self.store, len)
            .await
            .map_err(|e| classify(e, cpu_limit))?;
        self.memory
            .write(&mut self.store, ptr as usize, bytes)
            .map_err(|e| CallError::BadResponse(format!("allocator returned {ptr}: {e}")))?;
        f.call_async(&mut self.store, (ptr, len))
            .await
            .map_err(|e| classify(e, cpu_limit))
    }

    /// Calls the guest's `on_pause` hook, if it has one.
    ///
    /// # Errors
    /// A [`CallError`] if the hook traps or times out.
    pub async fn on_pause(&mut self) -> Result<(), CallError> {
        match self.hooks.on_pause.clone() {
            Some(f) => self.run_hook(f).await,
            None => Ok(()),
        }
    }

    /// Calls the guest's `on_resume` hook, if it has one.
    ///
    /// # Errors
    /// A [`CallError`] if the hook traps or times out.
    pub async fn on_resume(&mut self) -> Result<(), CallError> {
        match self.hooks.on_resume.clone() {
            Some(f) => self.run_hook(f).await,
            None => Ok(()),
        }
    }

    /// Whether the guest exports the alarm hook `stasis_on_alarm`.
    #[must_use]
    pub fn has_alarm_hook(&self) -> bool {
        self.hooks.on_alarm.is_some()
    }

    /// Calls the guest's `stasis_on_alarm` hook (ABI 2), if it has one,
    /// under the CPU limit and request timeout of a request.
    ///
    /// # Errors
    /// A [`CallError`] if the hook traps or times out (drop the instance as
    /// for a failed request).
    pub async fn on_alarm(&mut self) -> Result<(), CallError> {
        match self.hooks.on_alarm.clone() {
            Some(f) => self.run_hook(f).await,
            None => Ok(()),
        }
    }

    /// Whether the guest exports the socket hook `stasis_on_socket`.
    #[must_use]
    pub fn has_socket_hook(&self) -> bool {
        self.hooks.on_socket.is_some()
    }

    /// Hands `event` to the guest's `stasis_on_socket` hook (ABI 2), if it
    /// has one, under the CPU limit and request timeout of a request.
    ///
    /// # Errors
    /// A [`CallError`] if the hook traps or times out (drop the instance as
    /// for a failed request).
    pub async fn on_socket(&mut self, event: &SocketEvent) -> Result<(), CallError> {
        let Some(f) = self.hooks.on_socket.clone() else {
            return Ok(());
        };
        let bytes = stasis_host_api::sockets::encode_event(event)
            .map_err(|e| CallError::Host(e.to_string()))?;
        let len = u32::try_from(bytes.len())
            .map_err(|_| CallError::Host("event larger than 4 GiB".into()))?;
        let timeout = self.limits.request_timeout;
        let result = tokio::time::timeout(timeout, self.invoke(f, &bytes, len)).await;
        self.cow.check().map_err(CallError::MappedFileChanged)?;
        match result {
            Ok(r) => r.map(|_| ()).map_err(|e| self.with_stderr(e)),
            Err(_) => Err(CallError::Timeout(timeout)),
        }
    }

    async fn run_hook(&mut self, f: TypedFunc<(), ()>) -> Result<(), CallError> {
        self.reset_cpu();
        let (timeout, cpu_limit) = (self.limits.request_timeout, self.limits.cpu_limit);
        let result = tokio::time::timeout(timeout, f.call_async(&mut self.store, ())).await;
        self.cow.check().map_err(CallError::MappedFileChanged)?;
        match result {
            Ok(r) => r.map_err(|e| self.with_stderr(classify(e, cpu_limit))),
            Err(_) => Err(CallError::Timeout(timeout)),
        }
    }

    fn reset_cpu(&mut self) {
        // A replayed delivery ran within the limit when it was
        // acknowledged: its replay is not cut by it (the wall-clock
        // timeout still applies).
        self.store.data_mut().cpu_ticks_left = if self.tape.is_replaying() {
            u64::MAX
        } else {
            self.limits.cpu_ticks()
        };
        self.store.set_epoch_deadline(1);
        // What this call writes to stderr starts now.
        let _ = self.stderr.recent();
    }

    /// `error` with what the guest wrote to stderr last in this call
    /// appended, for a trap: a Rust guest's panic message.
    fn with_stderr(&self, error: CallError) -> CallError {
        match error {
            CallError::Trap(message) => {
                let lines = self.stderr.recent();
                if lines.is_empty() {
                    CallError::Trap(message)
                } else {
                    CallError::Trap(format!("{message}; guest stderr: {}", lines.join(" / ")))
                }
            }
            other => other,
        }
    }
}

impl Drop for ActorInstance {
    /// Re-maps every copy-on-write run as zeros before the store (declared
    /// after `cow`) gives the memories back: a pooled slot reset by
    /// `MADV_DONTNEED` would otherwise show the snapshot file to the next
    /// instance ([`crate::cow`]). Runs on every path that drops an
    /// instance: pause, eviction, traps and failed restores alike.
    fn drop(&mut self) {
        let mut cow = std::mem::take(&mut self.cow);
        cow.release(|index| self.memory_extent(index));
    }
}
