//! The edge of Stasis's data flow, where requests come in: [`router`]
//! (the ingress: host name to actor, after [`ingress`]'s strict checks of
//! the request, handed to the control plane), [`forward`] (a follower
//! replica's forwarding to the leader), [`relay`] (its relay of WebSockets
//! and streams to the leader's ingress), [`follow`] (an actor's log as
//! one streamed answer) and [`api`] (the admin HTTP API, with `internal`,
//! the internal routes remote workers use, and `respond`, the answers
//! both share), with [`routes`]
//! (the form of their route tables and the one dispatcher: which methods
//! each path takes, 404 or 405 with `Allow`, the body it may send and the
//! role each needs, checked by [`access`] against the bootstrap or a scoped
//! token; [`scope`]: an admin path's namespace resolved;
//! [`namespace_metrics`]: `/metrics` as one namespace sees it;
//! [`ingress_auth`]: a namespace's token at the ingress, for requests and
//! the streams they open) and
//! [`sockets`] (the WebSockets and streams actors accept). It depends on the
//! control side (`stasis-control`) and the contract, never on the worker
//! side or the cluster backends. [`console`] is the web console the admin
//! port serves at `/ui/`.

#![warn(missing_docs)]

pub mod access;
pub mod api;
pub mod console;
pub mod follow;
pub mod forward;
pub mod ingress;
pub mod ingress_auth;
mod internal;
pub mod namespace_metrics;
pub mod relay;
mod respond;
pub mod router;
pub mod routes;
pub mod scope;
pub mod sockets;
