//! Helpers for Stasis's own tests and benches; a dev-dependency only, never
//! part of the shipped binary.
//!
//! The root crate's test binary (`tests/all`) and its criterion benches
//! (`benches/*`) drive the real `stasis` binary over HTTP on loopback, and
//! some of them drive the snapshot core in process. What they share lives
//! here, one module per job:
//!
//! * [`artifacts`]: where cargo put the `stasis` binary and the demo actors,
//!   and the `serve` / `worker run` command lines;
//! * [`process`]: a started `stasis` process that is ready to serve, killed
//!   on drop;
//! * [`http`]: the HTTP client, one request function and the burst
//!   convenience on top of it;
//! * [`admin`]: admin-API calls over [`http`] (JSON bodies, template push,
//!   actor create, waiting for a worker);
//! * [`demos`]: reading what the demo actors answer;
//! * [`stats`]: percentiles and one-line summaries of latency samples;
//! * [`data`]: deterministic test data and durable writes;
//! * [`engine`]: an engine, templates, requests and restores for tests of
//!   the snapshot core;
//! * [`bench`]: criterion's test mode and quiet `stasis` processes;
//! * [`s3`]: a real S3-compatible server (`s3s-fs`) on loopback, with its
//!   URL and the `AWS_*` settings to reach it.
//! * [`fault_proxy`]: an HTTP proxy on loopback that loses answers, drops
//!   requests or cuts bodies short, for the object store's failure paths.
//! * [`etcd`]: a real etcd cluster of N members on loopback (kill and
//!   restart members).
//! * [`cluster`]: a cluster-mode deployment on loopback (etcd members, an
//!   S3 or `file://` snapshot store, replicas and workers of the real
//!   binary).
//! * [`wait`]: waiting for an observable event (an answer, a status, a
//!   metric, a log line, a file, an exit) within a limit; the one place a
//!   poll sleeps.
//!
//! Helpers panic with a message instead of returning errors: a failed step
//! is a failed test.

#![warn(missing_docs)]

pub mod admin;
pub mod artifacts;
pub mod bench;
pub mod certs;
pub mod cluster;
pub mod data;
pub mod demos;
pub mod engine;
pub mod etcd;
pub mod fault_proxy;
pub mod http;
pub mod ports;
pub mod process;
pub mod s3;
pub mod stats;
pub mod wait;

pub use artifacts::Artifacts;
pub use process::Proc;
