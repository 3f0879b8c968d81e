//! The Stasis host around the snapshot core ([`stasis_core`]: engine,
//! modules, instances, snapshots and their store): everything that serves
//! actors over HTTP.
//!
//! Modules, following a request: [`server`] (the HTTP listener) →
//! [`router`] (actor routes and the admin API, [`api`]) → [`control`] (the
//! control plane: placement, templates, moves, membership, the directory) →
//! [`worker`] (actors, mailboxes and the barrier; a worker's actor task
//! owns its [`stasis_core::instance::ActorInstance`]). Beside them:
//! [`error`] (the one error shape), [`http`] (HTTP helpers), [`metrics`].

pub mod api;
pub mod auth;
pub mod client;
pub mod control;
pub mod error;
pub mod http;
pub mod ingress;
pub mod metrics;
pub mod router;
pub mod server;
pub mod worker;
