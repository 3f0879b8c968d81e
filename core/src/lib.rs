//! The Stasis snapshot core: everything needed to run one WebAssembly actor
//! and to pause it into bytes and back, with no network stack and no
//! database. The `stasis-runtime` crate builds workers, routing and the
//! control plane on top of it.
//!
//! Modules, bottom-up (each depends only on those before it):
//!
//! * [`blocking`]: blocking work run from async code without stalling
//!   the executor.
//! * [`sync_group`]: group commit of durability (one `syncfs` for many
//!   writers).
//! * [`durable`]: the one atomic-write routine and the data dir's `LOCK`.
//! * [`tape`]: the tape of an instance's nondeterministic inputs (clocks,
//!   random bytes, host call results), recorded for the logical journal
//!   and replayed from it.
//! * [`host`]: the store data of an instance ([`host::Host`]) and its WASI
//!   wiring (virtual clock, guest output).
//! * [`host_functions`]: the `stasis` host functions of ABI 2 in the
//!   linker, over [`host::ActorServices`] (it names memory 0 by the
//!   rewrite's export prefix, a constant of [`module`]).
//! * `taped_services`: the host services behind the tape.
//! * [`engine`]: the shared wasmtime engine, its linker, the epoch ticker
//!   that enforces CPU limits, per-actor [`engine::Limits`].
//! * [`module`]: templates: validate ([`module::validate`]), rewrite into
//!   the spawn and resume variants ([`module::rewrite`]), compile once and
//!   cache ([`module::cache`]).
//! * [`error_chain`]: an error shown with its causes.
//! * [`compile_cache`]: the functions Cranelift compiled, kept for the
//!   next module that has them (a JavaScript template's engine).
//! * [`mapped`]: the `SIGBUS` handler and registry of mapped snapshot
//!   files, and their stamps: a file changed under a mapping fails its
//!   actor, never the process.
//! * [`cow`]: copy-on-write restore's mappings of snapshot files into
//!   linear memory, their budget, and the re-map that zeroes them.
//! * [`instance`]: one live actor and the ABI calls into it.
//! * [`snapshot`]: the file format and [`snapshot::verify`]
//!   ([`snapshot::format`](mod@snapshot::format)), capture
//!   ([`snapshot::capture`](mod@snapshot::capture)), restore
//!   ([`snapshot::restore`](mod@snapshot::restore))
//!   and the memory helpers they share ([`snapshot::memory`]).
//! * [`journal`]: the worker journal, snapshots of requests made durable
//!   by group commit, replayed into the store at start-up.
//! * [`snapshot_store`]: the [`snapshot_store::SnapshotStore`] trait that
//!   workers and the control plane keep snapshots through.
//! * [`snapshot_files`]: its embedded implementation, snapshot files in the
//!   data dir ([`snapshot_files::LocalSnapshotStore`]), which remembers the
//!   files whose checksum it knows (`snapshot_checked`).
//! * [`snapshot_objects`]: the implementation a cluster shares, snapshots
//!   and templates in an object store (a folder or S3) with a local cache
//!   ([`snapshot_objects::ObjectSnapshotStore`], [`snapshot_objects::StoreUrl`]).

#![warn(missing_docs)]

pub mod blocking;
pub mod compile_cache;
pub mod cow;
pub mod durable;
pub mod engine;
pub mod error_chain;
pub mod host;
pub mod host_functions;
pub mod instance;
pub mod journal;
pub mod mapped;
pub mod module;
pub mod snapshot;
mod snapshot_checked;
pub mod snapshot_files;
pub mod snapshot_objects;
mod snapshot_quota;
pub mod snapshot_store;
mod store_error;
pub mod sync_group;
pub mod tape;
mod taped_services;
