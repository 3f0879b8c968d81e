//! What the actors' `fetch` may reach, as data: the `--allow-outbound`
//! rules ([`AllowList`]) the worker settings carry. The grammar, the
//! parser and the matching of a fetch's host and addresses (with the
//! special-use address ranges) are the worker's
//! (`stasis_worker::host_calls::outbound::allow`).

use std::net::IpAddr;

/// What one rule allows, besides its port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// One name, lower case.
    Name(String),
    /// Every name under this domain (lower case), not the domain itself.
    Under(String),
    /// One IP literal.
    Ip(IpAddr),
    /// Every host whose addresses are all public.
    Public,
}

/// One `--allow-outbound` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The host, the hosts under a domain, or every public host.
    pub host: Host,
    /// `None`: the scheme's default port.
    pub port: Option<u16>,
}

/// The hosts `fetch` may reach (module docs). Empty: none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    /// The rules, in the order given.
    pub rules: Vec<Rule>,
}

impl AllowList {
    /// Whether no host is allowed.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}
