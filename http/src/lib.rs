//! Stasis's HTTP plumbing, written once: [`body`] (the response body, whole
//! or streamed), [`serve`] (error
//! answers, bounded body collection and the accept loop every listener
//! runs), [`client`] (the one HTTP client core under the worker protocol's
//! client, the CLI's admin client and a follower's forwarding),
//! [`auth`] (the one bearer-token check), [`subject`] (a certificate's
//! name and internal role), [`tls`] (a listener's
//! certificates, chosen by SNI and reloaded as their files change) and
//! [`mtls`] (mutual TLS of the internal API, under one cluster CA).

#![warn(missing_docs)]

pub mod auth;
pub mod body;
pub mod client;
pub mod mtls;
pub mod serve;
pub mod subject;
pub mod tls;
