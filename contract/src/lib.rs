//! What both sides of Stasis agree on, and nothing else: the interfaces the
//! two sides of the data flow reach each other through, the types that
//! cross them, and the one error shape.
//!
//! The worker side (`stasis-worker`) and the control side
//! (`stasis-control`) both depend on this crate and never on each other;
//! this crate depends on neither (only on the snapshot core and the
//! host/guest ABI). Modules:
//!
//! - [`worker_api`]: [`worker_api::WorkerApi`], what every worker offers
//!   the control plane, with [`status`], what it reports of an actor;
//! - [`control_api`]: [`control_api::ControlApi`], what the control plane
//!   offers a worker's actors (calls, messages, alarms);
//! - [`delivery`]: [`delivery::Delivery`], one delivery to an actor (a
//!   request, a due alarm, a socket event) with its answer's type, from
//!   the control plane to the guest;
//! - [`directory`]: the durable record of templates, actors, placements and
//!   alarms behind [`directory::Directory`], and [`rollout`], what it keeps
//!   of a template's rollout and what the API shows of one, and
//!   [`tokens`], the scoped admin tokens it keeps, and [`quota`], the
//!   namespaces' quotas, and [`policy`], what a namespace lets in (a
//!   token at the ingress, calls from other namespaces), both kept by
//!   [`namespace_settings`] (one record per table and namespace); [`names`]:
//!   full names and namespaces; [`labels`]: an actor's labels and their
//!   rules; [`listing`]: a query of the actors list and its pages;
//! - [`proto`]: the wire types of the worker protocol; [`headers`]: every
//!   header Stasis reserves, in one list; [`alarm`]: what delivering an
//!   alarm did;
//! - [`settings`]: what every worker of a deployment shares;
//!   [`outbound`]: the hosts and addresses the actors' `fetch` may reach;
//!   [`templates`]: template modules by digest, compiled once;
//!   [`metrics`]: the Prometheus registry both sides count in;
//!   [`trace`]: the trace context requests carry, and the spans' tracer;
//! - [`sockets`]: an actor's operations on the WebSockets and streams its
//!   host process holds;
//! - [`error`]: [`error::ApiError`], the typed error; [`client_gone`]: the
//!   token that says a request's client left.

#![warn(missing_docs)]

pub mod alarm;
pub mod client_gone;
pub mod control_api;
pub mod delivery;
pub mod directory;
pub mod error;
pub mod headers;
pub mod idempotency;
pub mod labels;
pub mod listing;
pub mod logs;
pub mod metrics;
pub mod names;
pub mod namespace_settings;
pub mod outbound;
pub mod policy;
pub mod proto;
pub mod quota;
pub mod rollout;
pub mod settings;
pub mod sockets;
pub mod status;
pub mod templates;
pub mod tokens;
pub mod trace;
pub mod worker_api;
