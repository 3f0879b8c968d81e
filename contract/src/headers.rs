//! The headers Stasis reserves, in one list: which ones only the host may
//! set on a request that reaches a guest, and which ones are never passed
//! on from one hop to the next.
//!
//! A request from outside (the ingress) or from a guest (`call`, `send`)
//! loses every header of [`HOST_ONLY`] before it reaches an actor, so that
//! neither a client nor a guest can name another actor or forge a chain of
//! callers. (An alarm is not a request at all: see [`crate::alarm`].) The
//! worker protocol's own headers ([`crate::proto`]) travel only between
//! Stasis processes.

/// Names the actor directly, overriding the host name (ingress).
pub const ACTOR_HEADER: &str = "stasis-actor";

/// The chain of callers of a request made by `call` (see the host-call
/// docs of `stasis-worker`): set by the host only.
pub const CALL_CHAIN_HEADER: &str = "stasis-call-chain";

/// The actor that made a `call` or `send` (its full name): set by the
/// host only. The control plane checks a call or message across
/// namespaces against the callee namespace's policy by it
/// ([`crate::policy`]); the callee's guest may read it.
pub const CALLER_HEADER: &str = "stasis-caller";

/// Marks a request one replica forwarded to another; its value is the
/// forwarding replica's name.
pub const FORWARDED_HEADER: &str = "stasis-forwarded-by";

/// On the leader's answer to a forwarded write: the etcd revision of the
/// newest actor record it had written when it answered (decimal).
pub const REVISION_HEADER: &str = "stasis-etcd-revision";

/// Headers only the host sets on a request to a guest: removed from every
/// request that comes from a client or a guest.
pub const HOST_ONLY: [&str; 4] = [
    ACTOR_HEADER,
    CALL_CHAIN_HEADER,
    CALLER_HEADER,
    SOCKET_HEADER,
];

pub use stasis_host_api::sockets::{SOCKET_HEADER, STREAM_HEADER};

/// Hop-by-hop headers (RFC 9110 §7.6.1), never forwarded either way.
pub const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Whether header `name` is one only the host sets ([`HOST_ONLY`]); any
/// case.
#[must_use]
pub fn is_host_only(name: &str) -> bool {
    HOST_ONLY.iter().any(|h| name.eq_ignore_ascii_case(h))
}

/// Whether header `name` (lower case) of a message is not passed on: a
/// hop-by-hop header, or the length (set anew for the body sent). Used for
/// a guest's answer, an outbound request and a replica's forward.
#[must_use]
pub fn not_passed_on(name: &str) -> bool {
    HOP_BY_HOP.contains(&name) || name == "content-length"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_only_headers_match_in_any_case() {
        assert!(is_host_only("STASIS-CALL-CHAIN"));
        assert!(is_host_only("stasis-actor"));
        assert!(is_host_only("Stasis-Socket"));
        assert!(is_host_only("stasis-caller"));
        assert!(!is_host_only("stasis-epoch"));
        assert!(!is_host_only("x-stasis-actor"));
    }

    #[test]
    fn hop_by_hop_and_length_are_not_passed_on() {
        assert!(not_passed_on("transfer-encoding"));
        assert!(not_passed_on("content-length"));
        assert!(!not_passed_on("content-type"));
    }
}
