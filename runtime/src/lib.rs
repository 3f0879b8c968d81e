//! The Stasis host around the snapshot core ([`stasis_core`]: engine,
//! modules, instances, snapshots and their store): everything that serves
//! actors over HTTP.
//!
//! Modules, following a request: [`server`] (the listeners) → [`router`]
//! (ingress → actor, after [`ingress`]'s strict checks of the request;
//! [`api`] is the admin API) → [`control`] (the control
//! plane: placement and the request gate, templates, moves, membership,
//! the directory) → [`worker::WorkerApi`] (the one interface of every
//! worker: the in-process [`worker::Worker`], or [`cluster`]'s client of a
//! `stasis worker run` process) → actor task → the actor's
//! [`stasis_core::instance::ActorInstance`]. Data flows that way and never
//! back up. Beside them: [`cluster`] (the worker wire protocol, once:
//! paths, headers and types, client and server), [`auth`] (the bearer
//! check), [`error`] (the one error shape), [`http`] (HTTP serving helpers),
//! [`http_client`] (the one HTTP client core, also under the CLI),
//! [`alarms`] (each actor's durable alarm: the scheduler, delivery),
//! [`host_calls`] (what the ABI 2 host functions do: calls between
//! actors, messages, outbound requests), [`client_gone`] (the token that says a routed request's client left, so
//! a request not yet started is dropped), [`metrics`].

#![warn(missing_docs)]

pub mod alarms;
pub mod api;
pub mod auth;
pub mod client_gone;
pub mod cluster;
pub mod control;
pub mod error;
pub mod forward;
pub mod host_calls;
pub mod http;
pub mod http_client;
pub mod ingress;
pub mod metrics;
pub mod replica;
pub mod router;
pub mod server;
pub mod worker;
