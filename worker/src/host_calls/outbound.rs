//! Outbound HTTP for the `fetch` host function: the allow-list of
//! `--allow-outbound` ([`AllowList`], read and matched by [`allow`]: its
//! grammar and the address rule) and the client ([`Outbound`]):
//! HTTP/1.1, and HTTPS with rustls (ring) trusting the system's root
//! certificates (`rustls-native-certs`).
//!
//! A fetch is checked twice: its host and port against the rules, before
//! anything else; then every address the host resolves to (or the IP
//! literal itself), by the connector ([`pinned`]), which refuses a
//! special-use address (loopback, private, link-local, …) unless a rule
//! names that IP, and connects only to the addresses it checked. The TLS
//! certificate is verified for the URL's host name.
//!
//! Redirects are not followed: a 3xx answer is returned to the actor as
//! it is, `Location` header included, and a fetch of that location is
//! the actor's own new fetch, checked like any other.

pub mod allow;
mod pinned;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::Uri;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use stasis_core::host::ServiceError;
use stasis_host_api::imports::HostError;
use stasis_host_api::{Request, Response};

pub use allow::{AllowRules, check_name, special_use};
pub use stasis_contract::settings::AllowList;

type HttpsClient = Client<hyper_rustls::HttpsConnector<pinned::PinnedConnector>, Full<Bytes>>;

/// The outbound client of one worker.
pub struct Outbound {
    allow: Arc<AllowList>,
    client: Result<HttpsClient, String>,
    max_body: usize,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("allow", &self.allow)
            .finish_non_exhaustive()
    }
}

fn error(kind: HostError, message: impl Into<String>) -> ServiceError {
    ServiceError::new(kind, message)
}

impl Outbound {
    /// A client for the hosts of `allow`, with bodies up to `max_body`
    /// bytes each way. The system's root certificates are loaded now; if
    /// they cannot be, HTTPS fetches fail as unavailable with the reason.
    #[must_use]
    pub fn new(allow: AllowList, max_body: usize) -> Arc<Self> {
        let allow = Arc::new(allow);
        let client = if allow.is_empty() {
            Err("no --allow-outbound".to_owned())
        } else {
            hyper_rustls::HttpsConnectorBuilder::new()
                .with_provider_and_native_roots(rustls::crypto::ring::default_provider())
                .map(|b| {
                    let connector = b
                        .https_or_http()
                        .enable_http1()
                        .wrap_connector(pinned::PinnedConnector::new(allow.clone()));
                    Client::builder(TokioExecutor::new()).build(connector)
                })
                .map_err(|e| format!("loading the system's root certificates: {e}"))
        };
        Arc::new(Self {
            allow,
            client,
            max_body,
        })
    }

    /// Sends `request` (its `uri` an absolute http(s) URL) and reads the
    /// answer, all before `deadline`.
    ///
    /// # Errors
    /// [`HostError::Refused`] (host not allowed, or an address it
    /// resolves to special and not named by a rule), [`HostError::BadInput`]
    /// (no absolute http(s) URL, a bad method or header),
    /// [`HostError::TooLarge`] (a body over `--max-body`),
    /// [`HostError::Unavailable`] (connection, TLS, protocol),
    /// [`HostError::Deadline`].
    pub async fn fetch(
        &self,
        request: Request,
        deadline: Instant,
    ) -> Result<Response, ServiceError> {
        let target = self.target(&request.uri)?;
        if request.body.len() > self.max_body {
            return Err(error(
                HostError::TooLarge,
                format!(
                    "request body of {} bytes exceeds --max-body ({} bytes)",
                    request.body.len(),
                    self.max_body
                ),
            ));
        }
        let client = self
            .client
            .as_ref()
            .map_err(|e| error(HostError::Unavailable, e.clone()))?;
        let mut builder = hyper::Request::builder()
            .method(request.method.as_str())
            .uri(target.uri.clone());
        for (name, value) in &request.headers {
            if stasis_contract::headers::not_passed_on(&name.to_ascii_lowercase())
                || name.eq_ignore_ascii_case("host")
            {
                continue;
            }
            builder = builder.header(name.as_str(), value.as_slice());
        }
        let outgoing = builder
            .body(Full::new(Bytes::from(request.body)))
            .map_err(|e| error(HostError::BadInput, format!("the request: {e}")))?;
        let exchange = exchange(client, outgoing, &target, self.max_body);
        match tokio::time::timeout_at(deadline.into(), exchange).await {
            Ok(result) => result,
            Err(_) => Err(error(
                HostError::Deadline,
                format!(
                    "fetch {}:{}: the request's time ran out first",
                    target.host, target.port
                ),
            )),
        }
    }

    /// Where a fetch of `url` goes, once its URL parses as an absolute
    /// http(s) URL and `--allow-outbound` allows its host and port (an
    /// address named directly is checked here too; the connector checks
    /// every address it resolves).
    ///
    /// # Errors
    /// [`HostError::BadInput`] or [`HostError::Refused`], as
    /// [`Outbound::fetch`].
    fn target(&self, url: &str) -> Result<Target, ServiceError> {
        let uri: Uri = url
            .parse()
            .map_err(|e| error(HostError::BadInput, format!("URL {url:?}: {e}")))?;
        let default_port = match uri.scheme_str() {
            Some("http") => 80,
            Some("https") => 443,
            _ => {
                return Err(error(
                    HostError::BadInput,
                    format!("URL {url:?} is not an absolute http:// or https:// URL"),
                ));
            }
        };
        let host = uri
            .host()
            .ok_or_else(|| error(HostError::BadInput, format!("URL {url:?} has no host")))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let port = url_port(&uri, default_port).map_err(|p| {
            error(
                HostError::BadInput,
                format!("URL {url:?}: port {p:?} is not a number from 1 to 65535"),
            )
        })?;
        if !self.allow.allows(&host, port, default_port) {
            return Err(error(
                HostError::Refused,
                format!(
                    "{} is not allowed by --allow-outbound",
                    authority(&host, port)
                ),
            ));
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            // Refused here at once; the connector checks it again.
            self.allow
                .check_address(&host, ip, port, default_port)
                .map_err(|e| error(HostError::Refused, e))?;
        }
        Ok(Target { uri, host, port })
    }
}

/// Where an allowed fetch goes ([`Outbound::target`]).
struct Target {
    uri: Uri,
    /// Lower case, without an IPv6 address's brackets.
    host: String,
    port: u16,
}

/// Sends `outgoing` to `target` on `client` and reads the answer, its
/// body up to `max_body` bytes.
///
/// # Errors
/// [`HostError::Refused`] (an address the connector refused),
/// [`HostError::Unavailable`] (connection, TLS, protocol),
/// [`HostError::TooLarge`] (the answer's body).
async fn exchange(
    client: &HttpsClient,
    outgoing: hyper::Request<Full<Bytes>>,
    target: &Target,
    max_body: usize,
) -> Result<Response, ServiceError> {
    let answer = client
        .request(outgoing)
        .await
        .map_err(|e| match pinned::refusal(&e) {
            Some(refusal) => error(HostError::Refused, refusal.to_string()),
            None => error(
                HostError::Unavailable,
                format!(
                    "{}: {}",
                    authority(&target.host, target.port),
                    stasis_core::error_chain::with_causes(&e)
                ),
            ),
        })?;
    let (parts, body) = answer.into_parts();
    let body = Limited::new(body, max_body)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                error(
                    HostError::TooLarge,
                    format!("the answer's body exceeds --max-body ({max_body} bytes)"),
                )
            } else {
                error(HostError::Unavailable, format!("reading the answer: {e}"))
            }
        })?
        .to_bytes();
    Ok(Response {
        status: parts.status.as_u16(),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect(),
        body: body.to_vec(),
    })
}

/// The port `uri` names, or `default_port` when it names none (or an
/// empty one).
///
/// # Errors
/// The text of a port that is not a number from 1 to 65535 (`http`'s own
/// parser reads such a port as none at all).
fn url_port(uri: &Uri, default_port: u16) -> Result<u16, String> {
    let authority = uri.authority().map_or("", |a| a.as_str());
    // After an IPv6 literal's `]`, or after the last `@` of user info.
    let after_host = authority.rsplit_once(']').map_or_else(
        || authority.rsplit_once('@').map_or(authority, |(_, h)| h),
        |(_, rest)| rest,
    );
    match after_host.rsplit_once(':') {
        None | Some((_, "")) => Ok(default_port),
        Some((_, text)) => match text.parse::<u16>() {
            Ok(port) if port > 0 => Ok(port),
            _ => Err(text.to_owned()),
        },
    }
}

/// `host:port`, with an IPv6 host in brackets (as rules are written).
fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_port_over_65535_is_refused_not_read_as_the_default() {
        let port = |url: &str| url_port(&url.parse::<Uri>().expect("URL"), 80);
        assert_eq!(port("http://h/"), Ok(80));
        assert_eq!(port("http://h:/"), Ok(80));
        assert_eq!(port("http://h:8080/"), Ok(8080));
        assert_eq!(port("http://[::1]:81/"), Ok(81));
        assert_eq!(port("http://[::1]/"), Ok(80));
        assert_eq!(port("http://h:99999/"), Err("99999".to_owned()));
        assert_eq!(port("http://h:0/"), Err("0".to_owned()));
    }
}
