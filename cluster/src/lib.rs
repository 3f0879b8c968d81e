//! Stasis's cluster backends: [`etcd`], cluster mode's shared state
//! (the directory, settings, worker leases, leader election); [`client`]
//! (the control plane's [`client::WorkerClient`], a `WorkerApi` over the
//! worker protocol, and [`client::Connector`], how the control plane
//! reaches a joining worker); [`server`] (`stasis worker run`, which hosts
//! a `stasis-worker` worker, serves that protocol and replicates its
//! snapshots to the control plane); [`control_peer`] (how such a worker's
//! actors reach the control plane); [`shared`] (template modules in the
//! shared store). The wire types are `stasis-contract`'s `proto`.

#![warn(missing_docs)]

pub mod client;
pub mod control_peer;
pub mod etcd;
pub mod server;
pub mod shared;
