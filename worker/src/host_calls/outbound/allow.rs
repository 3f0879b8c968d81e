//! What the actors' `fetch` may reach: the `--allow-outbound` rules
//! parsed into the settings' [`AllowList`] and matched against a fetch's
//! host and addresses ([`AllowRules`]), and the special-use address ranges
//! no name may lead to ([`special_use`]).
//!
//! A rule is one of (docs/api.md, "fetch"):
//!
//! - `HOST` or `HOST:PORT`: a host name (`api.example.com`), compared
//!   case-insensitively, or an IPv4 literal (`127.0.0.1`);
//! - `[IPV6]` or `[IPV6]:PORT`: an IPv6 literal, always in brackets;
//! - `*.DOMAIN` or `*.DOMAIN:PORT`: every name under `DOMAIN` (not
//!   `DOMAIN` itself);
//! - `public` or `public:PORT`: every host, name or IP literal, whose
//!   addresses are all public (none of [`special_use`]).
//!
//! Without `:PORT` a rule allows only the scheme's default port (80 for
//! `http`, 443 for `https`). Rules are parsed strictly: a scheme, a path,
//! an unbracketed IPv6 address, port 0 or over 65535, an empty label,
//! a label that begins or ends with `-`, and any character other than
//! letters, digits, `-` and `.` are refused, naming the rule.
//!
//! A host allowed by name is then checked by address: every address a
//! connection may go to ([`AllowRules::check_address`]) must be public,
//! unless a rule names that very IP literal (and the port). So
//! `--allow-outbound vm:8080` with `vm` resolving to 127.0.0.1 reaches
//! nothing, while `--allow-outbound 127.0.0.1:8080` reaches the loopback
//! listener.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use stasis_contract::outbound::{AllowList, Host, Rule};

const GRAMMAR: &str = "want HOST[:PORT], [IPV6][:PORT], *.DOMAIN[:PORT] or public[:PORT]";

/// A port's text as a port from 1 to 65535.
fn parse_port(text: &str) -> Result<u16, String> {
    if text.is_empty() {
        return Err(format!("no port after ':' ({GRAMMAR})"));
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("port {text:?} is not a number from 1 to 65535"));
    }
    match text.parse::<u32>() {
        Ok(0) => Err("port 0 is not a port (1 to 65535)".to_owned()),
        Ok(port) => {
            u16::try_from(port).map_err(|_| format!("port {port} is over 65535, the largest port"))
        }
        Err(_) => Err(format!("port {text} is over 65535, the largest port")),
    }
}

/// Splits `host[:port]` (an IPv6 literal in brackets) into its parts.
fn split_host_port(text: &str) -> Result<(&str, Option<u16>, bool), String> {
    let (host, port, bracketed) =
        if let Some(rest) = text.strip_prefix('[') {
            let (host, after) = rest
                .split_once(']')
                .ok_or_else(|| "an unclosed '[': want [IPV6] or [IPV6]:PORT".to_owned())?;
            match after {
                "" => (host, None, true),
                _ => (
                    host,
                    Some(after.strip_prefix(':').ok_or_else(|| {
                        format!("{after:?} after ']': want [IPV6] or [IPV6]:PORT")
                    })?),
                    true,
                ),
            }
        } else if text.matches(':').count() > 1 {
            return Err(format!(
                "an IPv6 address goes in brackets, e.g. [{text}] or [{text}]:443"
            ));
        } else {
            match text.split_once(':') {
                Some((host, port)) => (host, Some(port), false),
                None => (text, None, false),
            }
        };
    let port = port.map(parse_port).transpose()?;
    Ok((host, port, bracketed))
}

/// `name` (lower case) checked as a DNS host name: labels of letters,
/// digits and `-`, none empty, none beginning or ending with `-`, at most
/// 63 characters each and 253 in all, the last not all digits.
///
/// # Errors
/// What is wrong with it, in words.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("no host ({GRAMMAR})"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-')))
    {
        let hint = if c.is_ascii() {
            ""
        } else {
            " (write an international name in its xn-- form)"
        };
        return Err(format!(
            "{c:?} is not allowed in a host name (letters, digits, '-' and '.'){hint}"
        ));
    }
    if name.len() > 253 {
        return Err("a host name is at most 253 characters".to_owned());
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err("an empty label (a leading, trailing or double '.')".to_owned());
        }
        if label.len() > 63 {
            return Err(format!("label {label:?} is over 63 characters"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("label {label:?} begins or ends with '-'"));
        }
    }
    if name
        .rsplit('.')
        .next()
        .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(
            "neither an IPv4 address (four numbers 0 to 255) nor a name (whose last label is \
             not all digits)"
                .to_owned(),
        );
    }
    Ok(())
}

/// One rule's text (trimmed) as a rule, or what is wrong with it.
fn parse_rule(text: &str) -> Result<Rule, String> {
    if text.is_empty() {
        return Err(format!("empty: {GRAMMAR}"));
    }
    if text.contains("://") {
        return Err(
            "a URL: give HOST[:PORT] without a scheme (e.g. api.example.com or \
             api.example.com:8443)"
                .to_owned(),
        );
    }
    if text.contains(['/', '?', '#']) {
        return Err("a path is not allowed: give HOST[:PORT] (e.g. api.example.com)".to_owned());
    }
    if text.contains('@') {
        return Err("user info ('@') is not allowed: give HOST[:PORT]".to_owned());
    }
    let (host, port, bracketed) = split_host_port(text)?;
    if bracketed {
        let ip = host
            .parse::<Ipv6Addr>()
            .map_err(|_| format!("{host:?} in brackets is not an IPv6 address"))?;
        return Ok(Rule {
            host: Host::Ip(IpAddr::V6(ip)),
            port,
        });
    }
    let host = host.to_ascii_lowercase();
    let host = if host == "public" {
        Host::Public
    } else if host == "*" {
        return Err(
            "a bare '*' is not allowed: use public (every host whose addresses are all public) \
             or *.DOMAIN (every name under DOMAIN)"
                .to_owned(),
        );
    } else if let Some(domain) = host.strip_prefix("*.") {
        if domain.contains('*') {
            return Err("'*' is allowed only as the first label: *.DOMAIN".to_owned());
        }
        check_name(domain)?;
        Host::Under(domain.to_owned())
    } else if host.contains('*') {
        return Err("'*' is allowed only as the first label: *.DOMAIN".to_owned());
    } else if let Ok(ip) = host.parse::<Ipv4Addr>() {
        Host::Ip(IpAddr::V4(ip))
    } else {
        check_name(&host)?;
        Host::Name(host)
    };
    Ok(Rule { host, port })
}

/// The `--allow-outbound` list read and matched: the settings carry the
/// [`AllowList`] as data (`stasis_contract::outbound`), the worker decides
/// by it.
pub trait AllowRules: Sized {
    /// Parses the `--allow-outbound` values (module docs).
    ///
    /// # Errors
    /// Naming the first value that is not a rule, and what is wrong with it.
    fn parse<S: AsRef<str>>(values: &[S]) -> Result<Self, String>;

    /// Whether `host` (a name in lower case or an IP literal without
    /// brackets) on `port` (`default_port` when the URL names none) is
    /// allowed by a rule. The addresses it leads to are checked apart, by
    /// [`Self::check_address`].
    #[must_use]
    fn allows(&self, host: &str, port: u16, default_port: u16) -> bool;

    /// Whether a connection for `host` on `port` may go to `address` (one
    /// of the addresses `host` resolves to, or `host` itself when it is an
    /// IP literal): yes when it is public, or when a rule names that IP
    /// literal and port.
    ///
    /// # Errors
    /// Why not, naming the host, the address and its class.
    fn check_address(
        &self,
        host: &str,
        address: IpAddr,
        port: u16,
        default_port: u16,
    ) -> Result<(), String>;
}

/// Whether `rule` allows `port` (`default_port`: the scheme's).
fn allows_port(rule: &Rule, port: u16, default_port: u16) -> bool {
    port == rule.port.unwrap_or(default_port)
}

impl AllowRules for AllowList {
    fn parse<S: AsRef<str>>(values: &[S]) -> Result<Self, String> {
        let rules = values
            .iter()
            .map(|v| {
                let text = v.as_ref().trim();
                parse_rule(text).map_err(|e| format!("--allow-outbound {text:?}: {e}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { rules })
    }

    fn allows(&self, host: &str, port: u16, default_port: u16) -> bool {
        let host = host.trim_end_matches('.');
        let ip = host.parse::<IpAddr>().ok();
        self.rules.iter().any(|rule| {
            allows_port(rule, port, default_port)
                && match &rule.host {
                    Host::Public => true,
                    Host::Ip(allowed) => ip == Some(*allowed),
                    Host::Name(name) => ip.is_none() && host == name,
                    Host::Under(domain) => {
                        ip.is_none()
                            && host
                                .strip_suffix(domain.as_str())
                                .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
                    }
                }
        })
    }

    fn check_address(
        &self,
        host: &str,
        address: IpAddr,
        port: u16,
        default_port: u16,
    ) -> Result<(), String> {
        let Some(class) = special_use(address) else {
            return Ok(());
        };
        if self
            .rules
            .iter()
            .any(|rule| rule.host == Host::Ip(address) && allows_port(rule, port, default_port))
        {
            return Ok(());
        }
        let rule = match address {
            IpAddr::V4(v4) => format!("{v4}:{port}"),
            IpAddr::V6(v6) => format!("[{v6}]:{port}"),
        };
        let what = if host.parse::<IpAddr>() == Ok(address) {
            format!("{address} is {class}")
        } else {
            format!("{host} resolves to {address}, {class}")
        };
        Err(format!(
            "{what}; only a rule naming that IP allows it (--allow-outbound {rule})"
        ))
    }
}

/// Whether `address` is in `net`/`len` (IPv4).
fn within_v4(address: u32, net: [u8; 4], len: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    address & mask == u32::from_be_bytes(net) & mask
}

/// Whether `address` is in `net`/`len` (IPv6).
fn within_v6(address: u128, net: u128, len: u32) -> bool {
    let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
    address & mask == net & mask
}

/// The special-use IPv4 ranges, most specific first (IANA's registry):
/// network, prefix length, and what an address in it is.
const SPECIAL_V4: [([u8; 4], u32, &str); 17] = [
    ([0, 0, 0, 0], 32, "an unspecified address"),
    ([255, 255, 255, 255], 32, "the broadcast address"),
    ([0, 0, 0, 0], 8, "a \"this network\" address (0.0.0.0/8)"),
    ([10, 0, 0, 0], 8, "a private address (10.0.0.0/8)"),
    (
        [100, 64, 0, 0],
        10,
        "a shared (carrier-grade NAT) address (100.64.0.0/10)",
    ),
    ([127, 0, 0, 0], 8, "a loopback address"),
    ([169, 254, 0, 0], 16, "a link-local address"),
    ([172, 16, 0, 0], 12, "a private address (172.16.0.0/12)"),
    (
        [192, 0, 0, 0],
        24,
        "an IETF protocol assignment (192.0.0.0/24)",
    ),
    ([192, 0, 2, 0], 24, "a documentation address (192.0.2.0/24)"),
    (
        [192, 88, 99, 0],
        24,
        "a 6to4 relay anycast address (192.88.99.0/24)",
    ),
    ([192, 168, 0, 0], 16, "a private address (192.168.0.0/16)"),
    (
        [198, 18, 0, 0],
        15,
        "a benchmarking address (198.18.0.0/15)",
    ),
    (
        [198, 51, 100, 0],
        24,
        "a documentation address (198.51.100.0/24)",
    ),
    (
        [203, 0, 113, 0],
        24,
        "a documentation address (203.0.113.0/24)",
    ),
    ([224, 0, 0, 0], 4, "a multicast address"),
    ([240, 0, 0, 0], 4, "a reserved address (240.0.0.0/4)"),
];

fn special_v4(address: Ipv4Addr) -> Option<&'static str> {
    let n = u32::from(address);
    SPECIAL_V4
        .iter()
        .find(|(net, len, _)| within_v4(n, *net, *len))
        .map(|(_, _, class)| *class)
}

/// `kind` of the IPv4 address `embedded`, when that address is special.
fn embedded(kind: &str, embedded: u32) -> Option<String> {
    let v4 = Ipv4Addr::from(embedded);
    special_v4(v4).map(|class| format!("{kind} of {v4}, {class}"))
}

fn special_v6(address: Ipv6Addr) -> Option<String> {
    let n = u128::from(address);
    let low32 = u32::try_from(n & 0xffff_ffff).unwrap_or(0);
    let fixed = |class: &str| Some(class.to_owned());
    if address.is_unspecified() {
        fixed("an unspecified address")
    } else if address == Ipv6Addr::LOCALHOST {
        fixed("a loopback address")
    } else if within_v6(n, 0xffff_0000_0000, 96) {
        embedded("an IPv4-mapped address", low32)
    } else if within_v6(n, 0, 96) {
        // IPv4-compatible (deprecated): reaches the embedded address on
        // some stacks.
        embedded("an IPv4-compatible address", low32)
            .or_else(|| fixed("an IPv4-compatible address (::/96, deprecated)"))
    } else if within_v6(n, 0x0064_ff9b << 96, 96) {
        embedded("a NAT64 address", low32)
    } else if within_v6(n, 0x0064_ff9b_0001 << 80, 48) {
        fixed("a local-use NAT64 address (64:ff9b:1::/48)")
    } else if within_v6(n, 0x0100 << 112, 64) {
        fixed("a discard-only address (100::/64)")
    } else if within_v6(n, 0x2001_0db8 << 96, 32) {
        fixed("a documentation address (2001:db8::/32)")
    } else if within_v6(n, 0x3fff << 112, 20) {
        fixed("a documentation address (3fff::/20)")
    } else if within_v6(n, 0x2001 << 112, 32) {
        fixed("a Teredo address (2001::/32)")
    } else if within_v6(n, 0x2001 << 112, 23) {
        fixed("an IETF protocol assignment (2001::/23)")
    } else if within_v6(n, 0x2002 << 112, 16) {
        let v4 = u32::try_from((n >> 80) & 0xffff_ffff).unwrap_or(0);
        embedded("a 6to4 address", v4)
    } else if within_v6(n, 0xfc00 << 112, 7) {
        fixed("a unique-local address (fc00::/7)")
    } else if within_v6(n, 0xfe80 << 112, 10) {
        fixed("a link-local address")
    } else if within_v6(n, 0xfec0 << 112, 10) {
        fixed("a site-local address (fec0::/10, deprecated)")
    } else if within_v6(n, 0xff00 << 112, 8) {
        fixed("a multicast address")
    } else if !within_v6(n, 0x2000 << 112, 3) {
        fixed("a reserved address (outside 2000::/3, the global unicast range)")
    } else {
        None
    }
}

/// What `address` is when it is not a public unicast address — loopback,
/// private, link-local, unique-local, unspecified, broadcast, multicast,
/// shared (CGNAT), documentation, benchmarking, reserved, or an IPv6
/// address embedding such an IPv4 address (IPv4-mapped or -compatible,
/// NAT64, 6to4) — as a phrase such as "a loopback address"; `None` for a
/// public address.
#[must_use]
pub fn special_use(address: IpAddr) -> Option<String> {
    match address {
        IpAddr::V4(v4) => special_v4(v4).map(str::to_owned),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

#[cfg(test)]
mod tests;
