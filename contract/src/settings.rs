//! The settings every worker of a deployment shares: mailbox and hold
//! limits, snapshot retention and checkpoints, live-instance slots, and the
//! hosts the actors' `fetch` may reach. The control plane hands them to
//! in-process workers and tells them to joining remote workers
//! ([`crate::proto::JoinAnswer`]).
//!
//! An allow-list rule is a host name or IP literal, or `*.` and a domain
//! (any name under that domain, not the domain itself), optionally with
//! `:PORT`. Without a port only the scheme's default port (80, 443) is
//! allowed. Names compare case-insensitively; nothing else reaches the
//! network.

use std::time::Duration;

/// Settings of a worker.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// Requests held per actor (its mailbox size) before 503 (`--max-held`).
    pub max_held: usize,
    /// Longest a request waits in a mailbox before 503 (`--hold-timeout`).
    pub hold_timeout: Duration,
    /// Snapshot retention and checkpoints.
    pub actor: ActorSettings,
    /// Live instances per worker (`--max-live`): when an actor is about to
    /// get one and the cap is reached, the least recently used running
    /// actor is paused and the new one waits (up to `hold_timeout`) for its
    /// slot, so the cap is never exceeded (see `stasis-worker`'s `live`).
    pub max_live: Option<usize>,
    /// Hosts the actors' `fetch` may reach (`--allow-outbound`).
    pub allow_outbound: AllowList,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            max_held: 1024,
            hold_timeout: Duration::from_secs(30),
            actor: ActorSettings {
                keep_snapshots: 2,
                checkpoint_every: 0,
                durability: Durability::Request,
            },
            max_live: None,
            allow_outbound: AllowList::default(),
        }
    }
}

/// Settings every actor of a worker shares.
#[derive(Debug, Clone)]
pub struct ActorSettings {
    /// Snapshots kept per actor (at least 1).
    pub keep_snapshots: usize,
    /// Checkpoint after this many requests (0 = never).
    pub checkpoint_every: u64,
    /// When a request's effect becomes durable (`--durability`).
    pub durability: Durability,
}

/// When the effect of a request becomes durable (`--durability`, and a
/// template's override at push; docs/api.md, "Durability").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// The answer leaves Stasis only once the state the request produced
    /// is in the worker journal on disk: a trap, a `kill -9` or a restart
    /// loses no answered request.
    #[default]
    Request,
    /// Durable at each `--checkpoint-interval` checkpoint and at pause.
    Interval,
    /// Durable at pause and at checkpoints only; a trap or a crash rolls
    /// the actor back to its newest snapshot.
    Pause,
}

impl Durability {
    /// Every level, as named in flags and JSON.
    pub const NAMES: [&'static str; 3] = ["request", "interval", "pause"];

    /// The level's name in flags and JSON.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::Interval => "interval",
            Self::Pause => "pause",
        }
    }

    /// The level named `name`.
    ///
    /// # Errors
    /// A message naming the levels when `name` is none of them.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "request" => Ok(Self::Request),
            "interval" => Ok(Self::Interval),
            "pause" => Ok(Self::Pause),
            _ => Err(format!(
                "unknown durability {name:?}: use request, interval or pause"
            )),
        }
    }
}

/// One `--allow-outbound` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    /// Lower-case host, without the `*.` of a wildcard.
    host: String,
    wildcard: bool,
    port: Option<u16>,
}

/// The hosts `fetch` may reach (module docs). Empty: none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    rules: Vec<Rule>,
}

/// Splits `host[:port]` (an IPv6 literal in brackets) into its parts.
fn split_host_port(text: &str) -> Result<(String, Option<u16>), String> {
    if text.contains("://") {
        return Err(format!(
            "{text:?} is a URL: give HOST[:PORT] (e.g. api.example.com or api.example.com:8443)"
        ));
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("{text:?}: unclosed '['"))?;
        match after {
            "" => (host, None),
            _ => (
                host,
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| format!("{text:?}: want [IPV6] or [IPV6]:PORT"))?,
                ),
            ),
        }
    } else if text.matches(':').count() > 1 {
        return Err(format!(
            "{text:?}: an IPv6 address goes in brackets, e.g. [{text}] or [{text}]:443"
        ));
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let port = port
        .map(|p| match p.parse::<u16>() {
            Ok(0) => Err(format!("{text:?}: port 0 is not a port (1 to 65535)")),
            Ok(port) => Ok(port),
            Err(_) => Err(format!(
                "{text:?}: port {p:?} is not a number from 1 to 65535"
            )),
        })
        .transpose()?;
    Ok((host.to_ascii_lowercase(), port))
}

impl AllowList {
    /// Parses the `--allow-outbound` values.
    ///
    /// # Errors
    /// Naming the first value that is not `HOST[:PORT]` or `*.DOMAIN[:PORT]`.
    pub fn parse<S: AsRef<str>>(values: &[S]) -> Result<Self, String> {
        let rules = values
            .iter()
            .map(|v| {
                let text = v.as_ref().trim();
                let (host, port) =
                    split_host_port(text).map_err(|e| format!("--allow-outbound {e}"))?;
                let (host, wildcard) = match host.strip_prefix("*.") {
                    Some(domain) => (domain.to_owned(), true),
                    None => (host, false),
                };
                let ipv6 = host.contains(':');
                let valid = !host.is_empty()
                    && !host.contains('*')
                    && host
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'))
                    // Names: no empty label (`a..b`, a leading or trailing
                    // dot).
                    && (ipv6 || host.split('.').all(|label| !label.is_empty()));
                if !valid {
                    return Err(format!(
                        "--allow-outbound {text:?}: want HOST[:PORT] or *.DOMAIN[:PORT]"
                    ));
                }
                Ok(Rule {
                    host,
                    wildcard,
                    port,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { rules })
    }

    /// Whether no host is allowed.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether `host` (lower case) on `port` (`default_port` when the URL
    /// names none) is allowed.
    #[must_use]
    pub fn allows(&self, host: &str, port: u16, default_port: u16) -> bool {
        let host = host.trim_end_matches('.');
        self.rules.iter().any(|rule| {
            let name = if rule.wildcard {
                host.strip_suffix(&rule.host)
                    .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
            } else {
                host == rule.host
            };
            name && port == rule.port.unwrap_or(default_port)
        })
    }
}
