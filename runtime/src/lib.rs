//! The Stasis host: everything that runs actors.
//!
//! Rooms, bottom-up: [`engine`] (wasmtime engine, epoch ticker, limits),
//! [`module`] (validate → instrument → two compiled variants → cache),
//! [`instance`] (one live actor and the ABI calls), [`snapshot`] (capture,
//! verify, restore, the file format), [`store`] (snapshot files and
//! retention), [`data_dir`] (the data-dir lock and the atomic write),
//! [`worker`] (actors, mailboxes and the barrier; the [`worker::WorkerApi`]
//! every worker offers), [`cluster`] (the worker wire protocol: client and
//! `stasis worker run` server), [`control`] (directory, placement, moves,
//! membership), [`router`] (ingress → actor), [`api`] (admin API),
//! [`server`] (`stasis serve`), [`http`] and [`http_client`] (shared HTTP
//! server and client helpers), [`error`], [`metrics`].
//!
//! A request flows one way: [`router`] → [`control`] (placement, gate) →
//! [`worker::WorkerApi`] → actor task → [`instance`].

#![warn(missing_docs)]

pub mod api;
pub mod cluster;
pub mod control;
pub mod data_dir;
pub mod engine;
pub mod error;
pub mod http;
pub mod http_client;
pub mod instance;
pub mod metrics;
pub mod module;
pub mod router;
pub mod server;
pub mod snapshot;
pub mod store;
pub mod worker;
