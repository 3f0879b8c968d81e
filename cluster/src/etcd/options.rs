//! Where the etcd cluster is and how to authenticate to it: the
//! `--directory etcd://HOST:PORT[,HOST:PORT...][/PREFIX]` URL plus the TLS
//! and user flags, turned into etcd-client's [`ConnectOptions`].

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};

/// The key prefix when the URL names none.
pub const DEFAULT_PREFIX: &str = "/stasis";

/// How long connecting to one endpoint may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one unary request may take (streams: until their first answer).
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// HTTP/2 keep-alive ping interval and how long a ping may go unanswered
/// before the connection counts as broken.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(2);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(2);

/// The form `--directory` takes for etcd, quoted in parse errors.
const FORM: &str = "etcd://HOST:PORT[,HOST:PORT...][/PREFIX]";

/// How to reach the etcd cluster that holds the cluster's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdOptions {
    /// `host:port` of each member (client URLs, gRPC), in the order given.
    pub endpoints: Vec<String>,
    /// Key prefix every key lives under: starts with `/`, no trailing `/`
    /// (default [`DEFAULT_PREFIX`]).
    pub prefix: String,
    /// PEM file of the CA that signed the members' certificates; setting
    /// any of `ca`, `cert`, `key` switches the connection to TLS.
    pub ca: Option<PathBuf>,
    /// PEM client certificate (with `key`) for mutual TLS.
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    pub key: Option<PathBuf>,
    /// etcd user name and password (etcd's auth), if enabled.
    pub user: Option<(String, String)>,
}

impl EtcdOptions {
    /// Parses `etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`, e.g.
    /// `etcd://10.0.0.1:2379,10.0.0.2:2379/prod`; the prefix defaults to
    /// `/stasis`. TLS and user fields start empty.
    ///
    /// # Errors
    /// One line naming `--directory` and the expected form if the scheme is
    /// not `etcd://`, no endpoint is given, or an endpoint is not `HOST:PORT`
    /// with a numeric port.
    pub fn parse(url: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("--directory {url:?}: {why}; expected {FORM}");
        let rest = url
            .strip_prefix("etcd://")
            .ok_or_else(|| bad("the scheme is not etcd://"))?;
        let (hosts, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if hosts.contains('@') {
            // Not echoed: what precedes the @ may be a password.
            return Err(format!(
                "--directory: credentials do not go in the URL (they would show in logs and process lists); give them as STASIS_ETCD_USER and STASIS_ETCD_PASSWORD; expected {FORM}"
            ));
        }
        let mut endpoints = Vec::new();
        for endpoint in hosts.split(',') {
            let Some((host, port)) = endpoint.rsplit_once(':') else {
                return Err(bad(&format!("endpoint {endpoint:?} has no :PORT")));
            };
            if host.is_empty() || port.parse::<u16>().is_err() {
                return Err(bad(&format!("endpoint {endpoint:?} is not HOST:PORT")));
            }
            endpoints.push(endpoint.to_string());
        }
        let prefix = prefix.trim_end_matches('/');
        let prefix = if prefix.is_empty() {
            DEFAULT_PREFIX.to_string()
        } else {
            prefix.to_string()
        };
        Ok(Self {
            endpoints,
            prefix,
            ca: None,
            cert: None,
            key: None,
            user: None,
        })
    }

    /// The endpoints joined by commas, for messages.
    pub(crate) fn endpoints_text(&self) -> String {
        self.endpoints.join(",")
    }

    /// etcd-client's options: timeouts, HTTP/2 keep-alive, TLS (reading
    /// the PEM files now) and user.
    ///
    /// # Errors
    /// If a PEM file cannot be read, or `cert` and `key` are not given
    /// together.
    pub(crate) fn connect_options(&self) -> anyhow::Result<ConnectOptions> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT)
            .with_keep_alive(KEEP_ALIVE_INTERVAL, KEEP_ALIVE_TIMEOUT)
            .with_keep_alive_while_idle(true)
            .with_require_leader(true);
        if self.ca.is_some() || self.cert.is_some() || self.key.is_some() {
            let mut tls = TlsOptions::new();
            if let Some(ca) = &self.ca {
                let pem = std::fs::read(ca)
                    .with_context(|| format!("reading --etcd-ca {}", ca.display()))?;
                tls = tls.ca_certificate(Certificate::from_pem(pem));
            }
            match (&self.cert, &self.key) {
                (Some(cert), Some(key)) => {
                    let cert_pem = std::fs::read(cert)
                        .with_context(|| format!("reading --etcd-cert {}", cert.display()))?;
                    let key_pem = std::fs::read(key)
                        .with_context(|| format!("reading --etcd-key {}", key.display()))?;
                    tls = tls.identity(Identity::from_pem(cert_pem, key_pem));
                }
                (None, None) => {}
                _ => anyhow::bail!("the etcd client certificate and key go together: give both"),
            }
            options = options.with_tls(tls);
        }
        if let Some((user, password)) = &self.user {
            options = options
                .with_user(user.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_endpoints_and_prefix() {
        let o = EtcdOptions::parse("etcd://127.0.0.1:2379,h2:2380/prod/").expect("valid");
        assert_eq!(o.endpoints, ["127.0.0.1:2379", "h2:2380"]);
        assert_eq!(o.prefix, "/prod");
        let o = EtcdOptions::parse("etcd://h:1").expect("valid");
        assert_eq!((o.endpoints.len(), o.prefix.as_str()), (1, DEFAULT_PREFIX));
        assert_eq!(
            EtcdOptions::parse("etcd://h:1/").expect("valid").prefix,
            DEFAULT_PREFIX
        );
    }

    #[test]
    fn refuses_malformed_urls_naming_the_flag() {
        for url in [
            "http://h:1",
            "etcd://",
            "etcd://h",
            "etcd://h:x",
            "etcd://:1",
            "etcd://h:1,",
            "etcd://user:secret@h:1",
        ] {
            let e = EtcdOptions::parse(url).expect_err(url);
            assert!(e.contains("--directory") && e.contains(FORM), "{e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }

    #[test]
    fn tls_files_are_read_on_connect_and_named_when_missing() {
        let mut o = EtcdOptions::parse("etcd://h:1").expect("valid");
        assert!(o.connect_options().is_ok(), "plain connection");
        o.ca = Some(PathBuf::from("/nonexistent/ca.pem"));
        let e = o.connect_options().expect_err("no CA file");
        assert!(format!("{e:#}").contains("/nonexistent/ca.pem"), "{e:#}");
        o.ca = None;
        o.cert = Some(PathBuf::from("/nonexistent/cert.pem"));
        let e = o.connect_options().expect_err("cert without key");
        assert!(format!("{e:#}").contains("give both"), "{e:#}");
    }
}
