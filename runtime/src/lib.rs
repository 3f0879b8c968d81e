//! The assembly of Stasis's processes, at the edge of the data flow: it
//! builds every part and wires the sides together. [`server`] is `stasis
//! serve` (the listeners, the control plane, in-process workers, background
//! tasks, graceful shutdown); [`replica`] is one replica of a cluster
//! (leader election, forwarding to the leader, read-your-writes);
//! [`listen`] is what both share (options, listeners);
//! [`assemble`] builds a control plane from its parts; [`worker_process`]
//! is `stasis worker run` (a worker in its own process, serving the worker
//! protocol); [`workers`] builds the `Worker`s of both `serve` and `worker
//! run`; [`telemetry`] exports the traces.
//!
//! The crates it assembles, following a request: `stasis-ingress` (router,
//! admin API) → `stasis-control` (placement, the request gate, moves,
//! membership, alarms) → `stasis-contract`'s `WorkerApi` → `stasis-worker`
//! (in process) or `stasis-cluster`'s client of a remote worker → the actor
//! task → the actor's instance (`stasis-core`). Data flows that way and
//! never back up: the worker and control crates depend on the contract and
//! never on each other, nor on the cluster backends or this crate.
//!
//! The sub-crates are re-exported under the names the CLI and tests use.

#![warn(missing_docs)]

pub mod assemble;
pub mod listen;
mod on_leader;
pub mod replica;
pub mod server;
pub mod telemetry;
pub mod worker_process;
mod workers;

pub use stasis_cluster as cluster;
pub use stasis_contract as contract;
pub use stasis_control as control;
pub use stasis_http as http;
pub use stasis_ingress as ingress;
pub use stasis_worker as worker;
