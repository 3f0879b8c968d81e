//! Stasis's cluster backends: [`etcd`], cluster mode's shared state
//! (the directory, settings, worker leases, leader election); [`client`]
//! (the control plane's [`client::WorkerClient`], a `WorkerApi` over the
//! worker protocol, and [`client::Connector`], how the control plane
//! reaches a joining worker); [`shared`] (template modules in the shared
//! store). The wire types are `stasis-contract`'s `proto`. It knows the
//! worker side only through the contract: `stasis worker run`, the process
//! that hosts a `stasis-worker` worker and serves the worker protocol, is
//! assembled in `stasis-runtime` (`worker_process`).

#![warn(missing_docs)]

pub mod client;
pub mod etcd;
pub mod shared;
