//! Write a Stasis actor in Rust.
//!
//! An actor is a type implementing [`Actor`]; [`export_actor!`] turns it into
//! the exports the host calls (see `stasis-host-api` for the ABI). Build the
//! crate as a `cdylib` for `wasm32-wasip1`:
//!
//! ```toml
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [dependencies]
//! stasis-guest-sdk = { path = "../guest-sdk" }
//! ```
//!
//! ```no_run
//! use stasis_guest_sdk::{export_actor, Actor, Request, Response};
//!
//! #[derive(Default)]
//! struct Counter {
//!     count: u64,
//! }
//!
//! impl Actor for Counter {
//!     fn handle(&mut self, req: Request) -> Response {
//!         if req.method == "POST" {
//!             self.count += 1;
//!         }
//!         Response::text(200, format!("count: {}\n", self.count))
//!     }
//! }
//!
//! export_actor!(Counter);
//! ```
//!
//! `cargo build --target wasm32-wasip1 --release` gives
//! `target/wasm32-wasip1/release/<crate>.wasm`, ready for `stasis template push`.
//!
//! # State
//!
//! The actor value lives in linear memory, and so does everything it owns and
//! every `static`: all of it survives pause, resume and migration as it is,
//! with no serialization code. What lives outside linear memory does not:
//! open files, and the host's random source (draw from it again after a
//! resume if you need fresh entropy). The monotonic clock never goes
//! backwards across a pause or a move.
//!
//! # Static constructors
//!
//! [`export_actor!`] makes the module a WASI *reactor*: it exports
//! `_initialize`, which runs the module's static constructors (C/C++
//! constructors, `.init_array` entries) exactly once. The host calls it once
//! when the actor is created and never again: not per request, not after a
//! resume, a rollback or a move, since whatever the constructors set up is
//! in linear memory and comes back with the snapshot. Without this export
//! the linker would wrap every export in the constructors and rerun them on
//! every call. Do not define `_initialize` yourself in a crate using
//! [`export_actor!`].
//!
//! # Host functions (ABI 2)
//!
//! [`host`] calls other actors ([`host::call`], [`host::send`]), sets the
//! actor's alarm ([`host::set_alarm`], [`host::cancel_alarm`],
//! [`host::alarm`]; it fires [`Actor::alarm`]), reaches outside through the
//! host's allow-list ([`host::fetch`]) and names the actor
//! ([`host::self_name`]):
//!
//! ```no_run
//! use stasis_guest_sdk::{export_actor, host, Actor, Request, Response};
//!
//! #[derive(Default)]
//! struct Caller;
//!
//! impl Actor for Caller {
//!     fn handle(&mut self, _req: Request) -> Response {
//!         match host::call("counter", &Request::new("POST", "/")) {
//!             Ok(answer) => Response::bytes(answer.status, answer.body),
//!             Err(e) => Response::text(e.status(), format!("{e}\n")),
//!         }
//!     }
//! }
//!
//! export_actor!(Caller);
//! ```
//!
//! [`export_actor!`] always writes ABI version 2 (hosts accept 1 and 2; a
//! module that uses no host function imports nothing more than before) and
//! exports the alarm hook `stasis_on_alarm`.
//!
//! # Live code upgrade
//!
//! `stasis actor upgrade` moves an actor to a new version of its template.
//! An actor whose type implements [`State`] (for a serde type, `impl State
//! for MyActor {}`), exported with `export_actor!(MyActor, state)`, hands
//! its state over to the new version. The state travels in CBOR with its
//! field names, so the new version may add a `#[serde(default)]` field or
//! drop one as it is; other changes raise [`State::SCHEMA`] and migrate
//! older schemas in [`State::load`]; see [`state`].
//!
//! # Routes, JSON and headers
//!
//! [`Router`] sends requests to handlers by method and path pattern
//! (`/items/:id`), answering 404, or 405 with `allow`, for the rest;
//! [`RequestExt::json`] reads a JSON body, [`ResponseExt`] builds JSON
//! answers and sets statuses and headers in a chain, and [`HttpError`]
//! is an error that is an answer, so handlers can use `?`. The
//! [`prelude`] imports them all:
//!
//! ```no_run
//! use serde::{Deserialize, Serialize};
//! use stasis_guest_sdk::prelude::*;
//!
//! #[derive(Default)]
//! struct Notes {
//!     notes: Vec<Note>,
//! }
//!
//! #[derive(Serialize, Deserialize)]
//! struct Note {
//!     text: String,
//! }
//!
//! impl Notes {
//!     fn add(&mut self, req: &Request, _: &Params) -> Result<Response, HttpError> {
//!         self.notes.push(req.json()?);
//!         Ok(Response::empty(204))
//!     }
//!     fn get(&mut self, _: &Request, params: &Params) -> Result<Response, HttpError> {
//!         let note = self.notes.get(params.parse::<usize>("n")?);
//!         note.map(Response::json).ok_or_else(|| HttpError::new(404, "no such note"))
//!     }
//! }
//!
//! impl Actor for Notes {
//!     fn handle(&mut self, req: Request) -> Response {
//!         Router::new().post("/notes", Notes::add).get("/notes/:n", Notes::get).handle(self, &req)
//!     }
//! }
//!
//! export_actor!(Notes);
//! ```
//!
//! # Errors and panics
//!
//! A panic traps the instance: the host answers 500 with the trap message and
//! the actor continues from its newest snapshot.

#![warn(missing_docs)]

pub mod host;
pub mod http;
pub mod router;
pub mod sockets;
pub mod state;

pub use host::HostError;
pub use http::{HttpError, IntoResponse, RequestExt, ResponseExt};
pub use router::{Params, Router};
pub use stasis_host_api::{ABI_VERSION, Context, Request, Response};
pub use state::State;

/// What most actors use, in one import: `use stasis_guest_sdk::prelude::*;`
/// (the helper traits [`RequestExt`] and [`ResponseExt`] included).
pub mod prelude {
    pub use crate::{
        Actor, HttpError, IntoResponse, Params, Request, RequestExt, Response, ResponseExt, Router,
        State, export_actor,
    };
}

/// A stateful actor. One value per actor, created once (by [`Default`]) when
/// the actor is created and kept in linear memory from then on.
pub trait Actor: Default + 'static {
    /// Handles one request. Requests arrive one at a time, in order.
    fn handle(&mut self, request: Request) -> Response;

    /// Called before the snapshot of a pause (not for checkpoints).
    fn on_pause(&mut self) {}

    /// Called after a fresh instance got this actor's snapshot back (a resume,
    /// a migration, or a rollback after a trap).
    fn on_resume(&mut self) {}

    /// Called when the alarm set by [`host::set_alarm`] fires (the actor is
    /// resumed first if paused). The alarm is cleared before the call; set
    /// it again here for a periodic one. A panic here is retried with
    /// backoff, so the hook runs at least once per alarm.
    ///
    /// ```no_run
    /// use stasis_guest_sdk::{host, Actor, Request, Response};
    ///
    /// #[derive(Default)]
    /// struct Ticker {
    ///     ticks: u64,
    /// }
    ///
    /// impl Actor for Ticker {
    ///     fn handle(&mut self, _req: Request) -> Response {
    ///         Response::text(200, format!("ticks: {}\n", self.ticks))
    ///     }
    ///     fn alarm(&mut self) {
    ///         self.ticks += 1;
    ///     }
    /// }
    /// ```
    fn alarm(&mut self) {}

    /// Called with each event on one of the actor's WebSockets or streams
    /// (a client's message, or the end of one the actor did not close),
    /// for an actor exported with `export_actor!(MyActor, sockets)` (see
    /// [`sockets`]). A panic here rolls the actor back as a failed request
    /// does and closes that socket with code 1011.
    fn on_socket(&mut self, event: sockets::SocketEvent) {
        let _ = event;
    }
}

/// Glue used by [`export_actor!`]; not part of the public API.
#[doc(hidden)]
pub mod __rt {
    use super::Actor;
    use std::cell::UnsafeCell;

    /// Holds the actor value and the last response. Guests are
    /// single-threaded (`wasm32-wasip1`), so no locking is needed.
    pub struct Slot<A> {
        actor: UnsafeCell<Option<A>>,
        response: UnsafeCell<Vec<u8>>,
    }

    // SAFETY: wasm32-wasip1 guests have exactly one thread, and the host
    // never re-enters an export while another runs.
    unsafe impl<A> Sync for Slot<A> {}

    impl<A: Actor> Default for Slot<A> {
        fn default() -> Self {
            Self::new()
        }
    }

    impl<A: Actor> Slot<A> {
        pub const fn new() -> Self {
            Self {
                actor: UnsafeCell::new(None),
                response: UnsafeCell::new(Vec::new()),
            }
        }

        #[allow(
            clippy::mut_from_ref,
            reason = "single-threaded and never re-entered (see `Sync` above)"
        )]
        fn actor(&self) -> &mut A {
            // SAFETY: single-threaded, not re-entered (see `Sync` above).
            unsafe { (*self.actor.get()).get_or_insert_with(A::default) }
        }

        pub fn init(&self) {
            let _ = self.actor();
        }

        pub fn on_pause(&self) {
            self.actor().on_pause();
        }

        pub fn on_resume(&self) {
            self.actor().on_resume();
        }

        pub fn on_alarm(&self) {
            self.actor().alarm();
        }

        /// The body of `stasis_on_socket`: decodes the event in the buffer
        /// from `alloc` (handed back once) and hands it to the actor.
        pub fn on_socket(&self, ptr: u32, len: u32) -> u32 {
            // SAFETY: as in `handle`: a buffer from `alloc`, handed back once.
            let input = unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    ptr as usize as *mut u8,
                    len as usize,
                ))
            };
            match stasis_host_api::sockets::decode_event(&input) {
                Ok(event) => self.actor().on_socket(event),
                Err(e) => eprintln!("bad socket event from host: {e}"),
            }
            0
        }

        /// The body of `stasis_save_state`: the state's bytes, kept in the
        /// response slot until the next call. A `save` error traps, with
        /// the message on stderr.
        pub fn save_state(&self) -> u64
        where
            A: crate::State,
        {
            let bytes = match crate::state::save(self.actor()) {
                Ok(bytes) => bytes,
                Err(e) => panic!("saving the actor's state: {e}"),
            };
            // SAFETY: single-threaded, not re-entered (see `Sync` above).
            let slot = unsafe { &mut *self.response.get() };
            *slot = bytes;
            ((slot.as_ptr() as usize as u64) << 32) | slot.len() as u64
        }

        /// The body of `stasis_load_state`: 0 once the actor value is what
        /// `State::load` made of the bytes, 1 (with the reason on stderr)
        /// if it refused them.
        pub fn load_state(&self, ptr: u32, len: u32) -> u32
        where
            A: crate::State,
        {
            // SAFETY: as in `handle`: a buffer from `alloc`, handed back once.
            let input = unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    ptr as usize as *mut u8,
                    len as usize,
                ))
            };
            match crate::state::load::<A>(&input) {
                Ok(actor) => {
                    // SAFETY: single-threaded, not re-entered.
                    unsafe { *self.actor.get() = Some(actor) };
                    0
                }
                Err(e) => {
                    eprintln!("loading the handed-over state: {e}");
                    1
                }
            }
        }

        pub fn handle(&self, ptr: u32, len: u32) -> u64 {
            // SAFETY: `ptr`/`len` come from `alloc` below, which leaked a
            // boxed slice of exactly `len` bytes; the host hands it back once.
            let input = unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    ptr as usize as *mut u8,
                    len as usize,
                ))
            };
            let response = match stasis_host_api::decode_request(&input) {
                Ok(request) => self.actor().handle(request),
                Err(e) => super::Response::text(400, format!("bad request from host: {e}\n")),
            };
            drop(input);
            let bytes = stasis_host_api::encode_response(&response).unwrap_or_else(|e| {
                let fallback = super::Response::text(500, format!("{e}\n"));
                stasis_host_api::encode_response(&fallback).unwrap_or_default()
            });
            // SAFETY: as above; the previous response is no longer read.
            let slot = unsafe { &mut *self.response.get() };
            *slot = bytes;
            ((slot.as_ptr() as usize as u64) << 32) | slot.len() as u64
        }
    }

    /// Runs the module's static constructors the first time it is called;
    /// later calls do nothing. The body of the `_initialize` export.
    pub fn initialize() {
        use std::sync::atomic::{AtomicBool, Ordering};
        static DONE: AtomicBool = AtomicBool::new(false);
        if !DONE.swap(true, Ordering::Relaxed) {
            call_ctors();
        }
    }

    #[cfg(target_family = "wasm")]
    fn call_ctors() {
        unsafe extern "C" {
            // Synthesized by wasm-ld: calls every static constructor.
            // Calling it ourselves also tells the linker not to wrap each
            // export in the constructors.
            fn __wasm_call_ctors();
        }
        // SAFETY: runs once (guarded by `initialize`), before any other
        // export, as wasi-libc's reactor start file does.
        unsafe { __wasm_call_ctors() }
    }

    /// Not a guest: there are no wasm constructors to run.
    #[cfg(not(target_family = "wasm"))]
    fn call_ctors() {}

    pub fn alloc(len: u32) -> u32 {
        let buf = vec![0u8; len as usize].into_boxed_slice();
        Box::into_raw(buf) as *mut u8 as usize as u32
    }
}

/// Exports `$actor` (a type implementing [`Actor`]) under the Stasis ABI
/// (version 2, with the alarm hook),
/// exports `_initialize` (static constructors, once; see the crate docs), and
/// writes the ABI version custom section. Use it once per crate.
///
/// `export_actor!($actor, state)` also exports the state hand-over pair
/// `stasis_save_state` / `stasis_load_state` for a `$actor` that
/// implements [`State`] (see [`state`]); `export_actor!($actor, sockets)`
/// exports the socket hook `stasis_on_socket` (the actor takes WebSockets:
/// see [`sockets`]); `export_actor!($actor, state, sockets)` both.
#[macro_export]
macro_rules! export_actor {
    ($actor:ty, state, sockets) => {
        $crate::export_actor!($actor, state);
        $crate::export_actor!(@sockets);
    };
    ($actor:ty, sockets) => {
        $crate::export_actor!($actor);
        $crate::export_actor!(@sockets);
    };
    (@sockets) => {
        #[unsafe(no_mangle)]
        pub extern "C" fn stasis_on_socket(ptr: u32, len: u32) -> u32 {
            __STASIS_SLOT.on_socket(ptr, len)
        }
    };
    ($actor:ty, state) => {
        $crate::export_actor!($actor);

        #[unsafe(no_mangle)]
        pub extern "C" fn stasis_save_state() -> u64 {
            __STASIS_SLOT.save_state()
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn stasis_load_state(ptr: u32, len: u32) -> u32 {
            __STASIS_SLOT.load_state(ptr, len)
        }
    };
    ($actor:ty) => {
        static __STASIS_SLOT: $crate::__rt::Slot<$actor> = $crate::__rt::Slot::new();

        #[used]
        #[unsafe(link_section = "stasis-abi")]
        static __STASIS_ABI: [u8; 4] = $crate::ABI_VERSION.to_le_bytes();

        #[unsafe(no_mangle)]
        pub extern "C" fn _initialize() {
            $crate::__rt::initialize()
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn stasis_alloc(len: u32) -> u32 {
            $crate::__rt::alloc(len)
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn stasis_handle(ptr: u32, len: u32) -> u64 {
            __STASIS_SLOT.handle(ptr, len)
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn stasis_init() {
            __STASIS_SLOT.init()
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn stasis_on_pause() {
            __STASIS_SLOT.on_pause()
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn stasis_on_resume() {
            __STASIS_SLOT.on_resume()
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn stasis_on_alarm() {
            __STASIS_SLOT.on_alarm()
        }
    };
}
