//! The Stasis host: everything that runs actors.
//!
//! Rooms, bottom-up: [`engine`] (wasmtime engine, epoch ticker, limits),
//! [`module`] (validate → instrument → two compiled variants → cache),
//! [`instance`] (one live actor and the ABI calls), [`snapshot`] (capture,
//! verify, restore, the file format), [`store`] (snapshot files and
//! retention), [`worker`] (actors, mailboxes and the barrier), [`metrics`].

pub mod api;
pub mod auth;
pub mod control;
pub mod engine;
pub mod error;
pub mod http;
pub mod instance;
pub mod metrics;
pub mod module;
pub mod router;
pub mod server;
pub mod snapshot;
pub mod store;
pub mod worker;
