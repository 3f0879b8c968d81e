//! The connector under `fetch`'s client ([`PinnedConnector`]): it resolves
//! the host itself, checks every address against the allow-list
//! ([`AllowRules::check_address`]: public, or named by an IP rule) and
//! connects to the checked addresses only. The TCP connection is made by
//! hyper-util's `HttpConnector` (happy eyeballs, `TCP_NODELAY`) whose
//! resolver answers those checked addresses and never looks the name up
//! again, so a DNS answer that changes between the check and the connect
//! (rebinding) reaches nothing unchecked. TLS above it (hyper-rustls)
//! still verifies the certificate for, and sends as SNI, the host name of
//! the URL.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::rt::TokioIo;
use stasis_contract::outbound::AllowList;
use tokio::net::TcpStream;
use tower_service::Service;

use super::AllowRules;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A connection the address rule refused; `fetch` answers it as
/// `Refused` with this text.
#[derive(Debug)]
pub(super) struct Refusal(pub(super) String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

/// The [`Refusal`] behind `error`, if one is in its chain of sources.
pub(super) fn refusal<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e Refusal> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(refusal) = error.downcast_ref::<Refusal>() {
            return Some(refusal);
        }
        next = error.source();
    }
    None
}

/// `uri`'s host (an IPv6 literal without its brackets), its port and the
/// scheme's default port.
fn target(uri: &Uri) -> Result<(String, u16, u16), BoxError> {
    let default_port = match uri.scheme_str() {
        Some("https") => 443,
        Some("http") => 80,
        other => return Err(format!("unsupported scheme {other:?}").into()),
    };
    let host = uri
        .host()
        .ok_or("a URL without a host")?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    Ok((host, uri.port_u16().unwrap_or(default_port), default_port))
}

/// The addresses a connection to `host` on `port` may go to: `host` itself
/// when it is an IP literal, else every address it resolves to, each
/// checked.
///
/// # Errors
/// A [`Refusal`] when any address is special and no rule names it (a
/// name with one bad address among good ones is refused whole: which one
/// a connection would use is not up to the allow-list); a resolution
/// failure otherwise.
pub(super) async fn checked_addresses(
    allow: &AllowList,
    host: &str,
    port: u16,
    default_port: u16,
) -> Result<Vec<SocketAddr>, BoxError> {
    let found: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| format!("resolving {host}: {e}"))?
            .collect(),
    };
    if found.is_empty() {
        return Err(format!("{host} resolves to no address").into());
    }
    for address in &found {
        allow
            .check_address(host, address.ip(), port, default_port)
            .map_err(Refusal)?;
    }
    Ok(found)
}

/// Answers the addresses it was made with, whatever the name: the
/// resolver of one connection's `HttpConnector`.
#[derive(Clone)]
struct Checked(Vec<SocketAddr>);

impl Service<Name> for Checked {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Name) -> Self::Future {
        std::future::ready(Ok(self.0.clone().into_iter()))
    }
}

/// Connects to the checked addresses of a URL's host only (module docs).
#[derive(Debug, Clone)]
pub(super) struct PinnedConnector {
    allow: Arc<AllowList>,
}

impl PinnedConnector {
    pub(super) fn new(allow: Arc<AllowList>) -> Self {
        Self { allow }
    }
}

impl Service<Uri> for PinnedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let allow = self.allow.clone();
        Box::pin(async move {
            let (host, port, default_port) = target(&uri)?;
            let addresses = checked_addresses(&allow, &host, port, default_port).await?;
            // An IP literal is connected to as it is (the address checked
            // above); a name through `Checked`, never looked up again.
            let mut http = HttpConnector::new_with_resolver(Checked(addresses));
            http.enforce_http(false);
            http.call(uri).await.map_err(Into::into)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_name_is_checked_by_every_address_it_resolves_to() {
        let allow = AllowList::parse(&["localhost:8080", "127.0.0.1:9000", "localhost:9000"])
            .expect("valid");
        let refused = checked_addresses(&allow, "localhost", 8080, 80)
            .await
            .expect_err("localhost is loopback");
        let refused = refusal(&*refused).expect("a refusal").to_string();
        assert!(
            refused.starts_with("localhost resolves to ") && refused.contains("a loopback address"),
            "{refused}"
        );
        let literal = checked_addresses(&allow, "127.0.0.1", 9000, 80)
            .await
            .expect("named by an IP rule");
        assert_eq!(literal, vec![SocketAddr::from(([127, 0, 0, 1], 9000))]);
        assert!(
            checked_addresses(&allow, "127.0.0.1", 9001, 80)
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn the_connector_refuses_before_connecting() {
        let allow = Arc::new(AllowList::parse(&["public"]).expect("valid"));
        let mut connector = PinnedConnector::new(allow);
        for url in ["http://127.0.0.1:1/", "http://[::1]/", "https://localhost/"] {
            let error = connector
                .call(url.parse().expect("URL"))
                .await
                .expect_err(url);
            assert!(refusal(&*error).is_some(), "{url}: {error}");
        }
    }
}
