//! The worker wire protocol, in one room: [`proto`] (paths, headers,
//! request and answer types shared by both ends), [`client`] (the control
//! plane's [`client::WorkerClient`], a `WorkerApi` over HTTP) and
//! [`server`] (`stasis worker run`, which serves that API and replicates
//! its snapshots to the control plane); and [`etcd`], cluster mode's
//! shared state (directory, settings, worker leases, leader election).

pub mod client;
pub mod control_peer;
pub mod etcd;
pub mod proto;
pub mod server;
pub mod shared;
