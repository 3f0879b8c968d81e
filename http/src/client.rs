//! The one HTTP client core: a base URL, an optional bearer token, a
//! connection pool, bounded connects and exchanges. The CLI's admin client
//! and the control plane's remote-worker client (and a remote worker's
//! client of the control plane) are thin layers over [`HttpClient`].

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{AUTHORIZATION, HeaderValue, RETRY_AFTER, USER_AGENT};
use hyper::{HeaderMap, Method, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use stasis_contract::error::{ApiError, ErrorKind};

/// Longest error message kept from an error body that is not the API's
/// `{"error": "..."}`, in characters.
const MAX_ERROR_TEXT: usize = 300;

/// The environment variable naming the CA certificates (a PEM file) an
/// `https://` server must be signed by; unset, the system's roots.
pub const CA_CERT_VAR: &str = "STASIS_CA_CERT";

/// Plain HTTP, or HTTPS by the URL's scheme.
type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// A client of one HTTP server.
#[derive(Debug, Clone)]
pub struct HttpClient {
    base: String,
    authorization: Option<HeaderValue>,
    client: Client<Connector, Full<Bytes>>,
}

/// The TLS roots an `https://` URL is checked against: the certificates
/// in [`CA_CERT_VAR`]'s file when it is set (as curl's `--cacert`, they
/// replace the system's), else the system's roots.
///
/// # Errors
/// 400 naming the variable when its file cannot be read or holds no
/// certificate.
fn tls_config() -> Result<rustls::ClientConfig, ApiError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ApiError::internal(format!("TLS set-up: {e}")))?;
    let mut roots = rustls::RootCertStore::empty();
    match std::env::var_os(CA_CERT_VAR) {
        Some(path) => {
            let unreadable = |e: &dyn std::fmt::Display| {
                ApiError::bad_request(format!(
                    "{CA_CERT_VAR}={}: {e}",
                    std::path::Path::new(&path).display()
                ))
            };
            let certs = CertificateDer::pem_file_iter(&path)
                .map_err(|e| unreadable(&e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| unreadable(&e))?;
            if certs.is_empty() {
                return Err(unreadable(&"no PEM certificate in it"));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| unreadable(&e))?;
            }
        }
        None => {
            // No system roots (a bare container) leaves https unusable,
            // not plain HTTP.
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

/// The TLS configuration of an `http://` client: never used (the scheme
/// picks plain HTTP).
fn plain_config() -> Result<rustls::ClientConfig, ApiError> {
    Ok(
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| ApiError::internal(format!("TLS set-up: {e}")))?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth(),
    )
}

/// An answer, any status.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Its status.
    pub status: StatusCode,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body, possibly empty.
    pub body: Bytes,
}

/// Why no answer arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unanswered {
    /// The connection could not be made (refused, unresolvable, connect
    /// timeout); the text gives the causes.
    Connect(String),
    /// The connection failed during the exchange.
    Failed(String),
    /// No complete answer within the bound.
    Timeout(Duration),
}

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unanswered::Connect(e) | Unanswered::Failed(e) => f.write_str(e),
            Unanswered::Timeout(limit) => write!(f, "no answer within {limit:?}"),
        }
    }
}

/// The chain of an error's sources after the first, joined by `: `
/// (hyper's own top-level message is only "client error (Connect)").
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut source = error.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = e.source();
    }
    if parts.is_empty() {
        error.to_string()
    } else {
        parts.join(": ")
    }
}

impl HttpClient {
    /// A client of the server at `base` (`http://host:port[/prefix]`, or
    /// `https://...` checked against [`CA_CERT_VAR`]'s roots; no trailing
    /// slash needed), sending `token` as it is, if any and not
    /// blank, as `Authorization: Bearer`; connecting takes at most
    /// `connect_timeout`.
    ///
    /// # Errors
    /// 400 if the token cannot be a header value, or for `https://` when
    /// [`CA_CERT_VAR`]'s file cannot be read.
    pub fn new(
        base: &str,
        token: Option<&str>,
        connect_timeout: Duration,
    ) -> Result<Self, ApiError> {
        Self::with_identity(base, token, connect_timeout, None)
    }

    /// [`HttpClient::new`], and with `identity` (mutual TLS of the
    /// internal API) an `https://` server is checked against the internal
    /// CA only, instead of [`CA_CERT_VAR`]'s roots, and this process
    /// presents its own certificate to it. `http://` stays plain HTTP.
    ///
    /// # Errors
    /// As [`HttpClient::new`].
    pub fn with_identity(
        base: &str,
        token: Option<&str>,
        connect_timeout: Duration,
        identity: Option<&crate::mtls::InternalTls>,
    ) -> Result<Self, ApiError> {
        let authorization = match token.filter(|t| !t.trim().is_empty()) {
            Some(t) => Some(HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| {
                ApiError::bad_request("the token contains characters not allowed in an HTTP header")
            })?),
            None => None,
        };
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(connect_timeout));
        http.set_nodelay(true);
        http.enforce_http(false);
        let tls = if !base.starts_with("https://") {
            plain_config()?
        } else if let Some(identity) = identity {
            identity.client_config()
        } else {
            tls_config()?
        };
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            authorization,
            client: Client::builder(TokioExecutor::new()).build(connector),
        })
    }

    /// The base URL.
    #[must_use]
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Whether it sends a bearer token.
    #[must_use]
    pub fn has_token(&self) -> bool {
        self.authorization.is_some()
    }

    /// Sends one request to `path` (with its query, starting with `/`) and
    /// collects the answer, whatever its status. `timeout` bounds the whole
    /// exchange; `None` waits as long as the server takes (connecting is
    /// always bounded).
    ///
    /// # Errors
    /// [`Unanswered`] if no complete answer arrived.
    pub async fn exchange(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
        timeout: Option<Duration>,
    ) -> Result<Answer, Unanswered> {
        let mut builder = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(USER_AGENT, concat!("stasis/", env!("CARGO_PKG_VERSION")));
        if let Some(token) = &self.authorization {
            builder = builder.header(AUTHORIZATION, token.clone());
        }
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder
            .body(Full::new(body))
            .map_err(|e| Unanswered::Failed(format!("invalid request to {path}: {e}")))?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| {
                if e.is_connect() {
                    Unanswered::Connect(causes(&e))
                } else {
                    Unanswered::Failed(causes(&e))
                }
            })?;
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| Unanswered::Failed(format!("reading the answer: {e}")))?
                .to_bytes();
            Ok(Answer {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        match timeout {
            Some(limit) => tokio::time::timeout(limit, exchange)
                .await
                .map_err(|_| Unanswered::Timeout(limit))?,
            None => exchange.await,
        }
    }
}

impl Answer {
    /// The header `name` as text.
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// `Ok(self)` for a 2xx answer, else the error it carries (see
    /// [`Answer::error`]).
    ///
    /// # Errors
    /// As described.
    pub fn success(self) -> Result<Self, ApiError> {
        if self.status.is_success() {
            Ok(self)
        } else {
            Err(self.error().0)
        }
    }

    /// The error a non-2xx answer carries: its kind (the `kind` field of
    /// the API's JSON body, else the one its status says), the `error`
    /// field (anything else, such as a proxy's page or an empty body,
    /// reduced to one line), and `Retry-After` in seconds; and whether the
    /// body was the API's own.
    #[must_use]
    pub fn error(&self) -> (ApiError, bool) {
        let json = serde_json::from_slice::<serde_json::Value>(&self.body).ok();
        let kind = json
            .as_ref()
            .and_then(|v| v.get("kind"))
            .and_then(serde_json::Value::as_str)
            .and_then(ErrorKind::from_name)
            .unwrap_or_else(|| ErrorKind::from_status(self.status.as_u16()));
        let from_json = json.as_ref().and_then(|v| {
            v.get("error")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        });
        let from_api = from_json.is_some();
        let message = from_json.unwrap_or_else(|| {
            let text = String::from_utf8_lossy(&self.body);
            let line = text
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("");
            if line.is_empty() {
                self.status
                    .canonical_reason()
                    .unwrap_or("error")
                    .to_lowercase()
            } else {
                line.chars().take(MAX_ERROR_TEXT).collect()
            }
        });
        let message: String = message
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let retry_after = self
            .headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok());
        (
            ApiError::new(kind, message).with_retry_after(retry_after),
            from_api,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &[u8], retry_after: Option<&str>) -> Answer {
        let mut headers = HeaderMap::new();
        if let Some(v) = retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from_str(v).expect("header"));
        }
        Answer {
            status: StatusCode::from_u16(status).expect("status"),
            headers,
            body: Bytes::copy_from_slice(body),
        }
    }

    #[test]
    fn error_answers_become_one_line() {
        let (e, api) = answer(404, br#"{"error": "no actor named \"c9\""}"#, None).error();
        assert_eq!(
            (e.kind(), e.message(), api),
            (ErrorKind::NotFound, r#"no actor named "c9""#, true)
        );
        let (e, _) = answer(503, br#"{"error":"no worker"}"#, Some("2")).error();
        assert_eq!(e.retry_after(), Some(2));
        let (e, _) = answer(503, br#"{"error":"gone","kind":"abandoned"}"#, None).error();
        assert_eq!(e.kind(), ErrorKind::Abandoned, "the kind beats the status");
        let (e, api) = answer(502, b"\n<html>bad gateway</html>\nmore", None).error();
        assert_eq!((e.message(), api), ("<html>bad gateway</html>", false));
        let (e, _) = answer(405, b"", None).error();
        assert_eq!(e.message(), "method not allowed");
    }

    #[test]
    fn bad_tokens_are_refused() {
        let connect = Duration::from_secs(1);
        assert!(HttpClient::new("http://127.0.0.1:1", Some("a\nb"), connect).is_err());
        let client = HttpClient::new("http://127.0.0.1:1/", Some("  "), connect)
            .expect("blank token is no token");
        assert!(!client.has_token());
        assert_eq!(client.base(), "http://127.0.0.1:1");
    }
}
