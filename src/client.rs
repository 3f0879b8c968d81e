//! A small HTTP/1 client for the admin API of `stasis serve`
//! (`docs/api.md`): one request per call, JSON error bodies turned into
//! one-line errors, connection failures that name the URL.

use std::fmt;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER, USER_AGENT};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// How long establishing the TCP connection may take before the call fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest error message kept from a non-JSON error body.
const MAX_ERROR_TEXT: usize = 300;

/// A request body and its content type.
#[derive(Debug, Clone)]
pub struct Payload {
    /// The bytes sent.
    pub bytes: Bytes,
    /// The `content-type` header.
    pub content_type: &'static str,
}

/// A successful (2xx) answer.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status (`200`, `201`, `204`, ...).
    pub status: StatusCode,
    /// The body, possibly empty.
    pub body: Bytes,
}

/// A non-2xx answer: the status and the server's one-line reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The `error` field of the JSON body, or the start of a text body.
    pub message: String,
    /// The `Retry-After` header (seconds) of a `503`.
    pub retry_after: Option<String>,
    /// Advice appended to the message (e.g. for `401`).
    pub hint: Option<&'static str>,
}

impl ApiError {
    /// Reads an error answer: `{"error": "..."}` per the API, anything else
    /// (a proxy's page, an empty body) reduced to one line.
    #[must_use]
    pub fn from_answer(status: StatusCode, body: &[u8], retry_after: Option<String>) -> Self {
        let from_json = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| {
                v.get("error")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned)
            });
        let foreign = from_json.is_none();
        let message = from_json.unwrap_or_else(|| {
            let text = String::from_utf8_lossy(body);
            let line = text
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("");
            if line.is_empty() {
                status.canonical_reason().unwrap_or("error").to_lowercase()
            } else {
                line.chars().take(MAX_ERROR_TEXT).collect()
            }
        });
        let message = message
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        Self {
            status,
            message,
            retry_after,
            hint: foreign.then_some("the answer is not from a stasis admin API; is --admin right?"),
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)?;
        if let Some(secs) = &self.retry_after {
            write!(f, " (retry after {secs}s)")?;
        }
        if let Some(hint) = self.hint {
            write!(f, "; {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ApiError {}

/// A client of one admin API.
#[derive(Debug, Clone)]
pub struct AdminClient {
    base: String,
    token: Option<HeaderValue>,
    http: Client<HttpConnector, Full<Bytes>>,
}

/// `http://host:port[/prefix]` without a trailing slash, from what the user
/// gave: a URL, or a bare `host:port` (taken as `http://`).
///
/// # Errors
/// Not a URL, no host, or a scheme other than `http` (the client speaks
/// plain HTTP/1.1).
pub fn normalize_admin_url(admin: &str) -> anyhow::Result<String> {
    let admin = admin.trim();
    if admin.is_empty() {
        bail!("the admin URL is empty; give --admin http://HOST:PORT or set STASIS_ADMIN");
    }
    let full = if admin.contains("://") {
        admin.to_owned()
    } else {
        format!("http://{admin}")
    };
    let uri: Uri = full
        .parse()
        .map_err(|e| anyhow!("invalid admin URL {admin:?}: {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => bail!(
            "invalid admin URL {admin:?}: scheme {other:?} is not supported (only http://; put a TLS proxy in front)"
        ),
        None => bail!("invalid admin URL {admin:?}: no scheme"),
    }
    let Some(authority) = uri.authority() else {
        bail!("invalid admin URL {admin:?}: no host");
    };
    if uri.query().is_some() {
        bail!("invalid admin URL {admin:?}: it must not have a query");
    }
    let prefix = uri.path().trim_end_matches('/');
    Ok(format!("http://{authority}{prefix}"))
}

/// Percent-encodes `s` for a path segment or a query value: everything but
/// RFC 3986 unreserved characters becomes `%XX`.
#[must_use]
pub fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
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

impl AdminClient {
    /// A client of the admin API at `admin` (see [`normalize_admin_url`]),
    /// sending `token`, if any and not empty, as `Authorization: Bearer`.
    ///
    /// # Errors
    /// An invalid URL, or a token that cannot be a header value.
    pub fn new(admin: &str, token: Option<&str>) -> anyhow::Result<Self> {
        let base = normalize_admin_url(admin)?;
        let token = match token.map(str::trim).filter(|t| !t.is_empty()) {
            Some(t) => Some(HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| {
                anyhow!("the admin token contains characters not allowed in an HTTP header")
            })?),
            None => None,
        };
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_nodelay(true);
        let http = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self { base, token, http })
    }

    /// Sends one request to `path_and_query` (starting with `/`) and returns
    /// the 2xx answer. `timeout` bounds the whole exchange; `None` waits as
    /// long as the server takes (pause, migrate and drain can be slow), but
    /// connecting is always bounded.
    ///
    /// # Errors
    /// [`ApiError`] for a non-2xx answer; otherwise an error naming the
    /// admin URL (cannot connect, connection lost, timeout).
    pub async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        payload: Option<Payload>,
        timeout: Option<Duration>,
    ) -> anyhow::Result<Reply> {
        let url = format!("{}{path_and_query}", self.base);
        let mut builder = Request::builder()
            .method(method)
            .uri(&url)
            .header(USER_AGENT, concat!("stasis/", env!("CARGO_PKG_VERSION")))
            .header(ACCEPT, "application/json");
        if let Some(token) = &self.token {
            builder = builder.header(AUTHORIZATION, token.clone());
        }
        let body = match payload {
            Some(p) => {
                builder = builder.header(CONTENT_TYPE, p.content_type);
                p.bytes
            }
            None => Bytes::new(),
        };
        let request = builder
            .body(Full::new(body))
            .with_context(|| format!("invalid request URL {url}"))?;
        let exchange = async {
            let response = self.http.request(request).await.map_err(|e| {
                if e.is_connect() {
                    anyhow!(
                        "cannot reach the admin API at {} ({}); is \"stasis serve\" running?",
                        self.base,
                        causes(&e)
                    )
                } else {
                    anyhow!("the admin API at {} failed: {}", self.base, causes(&e))
                }
            })?;
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| {
                    anyhow!(
                        "reading the answer of the admin API at {} failed: {e}",
                        self.base
                    )
                })?
                .to_bytes();
            Ok::<_, anyhow::Error>((parts, body))
        };
        let (parts, body) = match timeout {
            Some(limit) => tokio::time::timeout(limit, exchange).await.map_err(|_| {
                anyhow!(
                    "the admin API at {} did not answer within {}s",
                    self.base,
                    limit.as_secs()
                )
            })??,
            None => exchange.await?,
        };
        if parts.status.is_success() {
            return Ok(Reply {
                status: parts.status,
                body,
            });
        }
        let retry_after = parts
            .headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut error = ApiError::from_answer(parts.status, &body, retry_after);
        if parts.status == StatusCode::UNAUTHORIZED {
            error.hint = Some(if self.token.is_some() {
                "check --admin-token / STASIS_ADMIN_TOKEN"
            } else {
                "pass --admin-token or set STASIS_ADMIN_TOKEN"
            });
        }
        Err(error.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_urls_are_normalized() {
        let ok = |s: &str| normalize_admin_url(s).expect("valid admin URL");
        assert_eq!(ok("http://127.0.0.1:7070"), "http://127.0.0.1:7070");
        assert_eq!(ok("http://127.0.0.1:7070/"), "http://127.0.0.1:7070");
        assert_eq!(ok("127.0.0.1:7070"), "http://127.0.0.1:7070");
        assert_eq!(
            ok(" http://admin.example:80/stasis/ "),
            "http://admin.example:80/stasis"
        );
        for bad in ["", "https://x:1", "http://", "http://x:1/?a=b", "ht tp://x"] {
            assert!(
                normalize_admin_url(bad).is_err(),
                "{bad:?} should be refused"
            );
        }
    }

    #[test]
    fn components_are_percent_encoded() {
        assert_eq!(encode_component("counter-1"), "counter-1");
        assert_eq!(encode_component("K=V"), "K%3DV");
        assert_eq!(encode_component("a b/c?&é"), "a%20b%2Fc%3F%26%C3%A9");
    }

    #[test]
    fn error_answers_become_one_line() {
        let e = ApiError::from_answer(
            StatusCode::NOT_FOUND,
            br#"{"error": "no actor named \"c9\""}"#,
            None,
        );
        assert_eq!(e.to_string(), r#"404 no actor named "c9""#);
        let e = ApiError::from_answer(
            StatusCode::SERVICE_UNAVAILABLE,
            br#"{"error":"no worker"}"#,
            Some("2".into()),
        );
        assert_eq!(e.to_string(), "503 no worker (retry after 2s)");
        let e = ApiError::from_answer(
            StatusCode::BAD_GATEWAY,
            b"\n<html>bad gateway</html>\nmore",
            None,
        );
        assert_eq!(
            e.to_string(),
            "502 <html>bad gateway</html>; the answer is not from a stasis admin API; is --admin right?"
        );
        let e = ApiError::from_answer(StatusCode::METHOD_NOT_ALLOWED, b"", None);
        assert!(e.to_string().starts_with("405 method not allowed; "), "{e}");
    }

    #[test]
    fn bad_tokens_are_refused() {
        assert!(AdminClient::new("http://127.0.0.1:1", Some("a\nb")).is_err());
        let client =
            AdminClient::new("http://127.0.0.1:1", Some("  ")).expect("blank token is no token");
        assert!(client.token.is_none());
    }

    #[tokio::test]
    async fn connection_failures_name_the_url() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("local addr");
        drop(listener);
        let client = AdminClient::new(&format!("http://{addr}"), None).expect("client");
        let started = std::time::Instant::now();
        let error = client
            .send(Method::GET, "/v1/actors", None, None)
            .await
            .expect_err("nothing listens");
        let text = format!("{error:#}");
        assert!(text.contains(&format!("http://{addr}")), "{text}");
        assert!(text.contains("is \"stasis serve\" running?"), "{text}");
        assert!(
            started.elapsed() < CONNECT_TIMEOUT,
            "refused connections fail at once"
        );
    }

    #[tokio::test]
    async fn error_answers_carry_status_and_message() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut buf = vec![0u8; 4096];
            let mut seen = Vec::new();
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.expect("read");
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
            }
            let body = r#"{"error": "missing or wrong bearer token"}"#;
            let answer = format!(
                "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            socket.write_all(answer.as_bytes()).await.expect("write");
            String::from_utf8_lossy(&seen).into_owned()
        });
        let client = AdminClient::new(&addr.to_string(), Some("secret")).expect("client");
        let error = client
            .send(
                Method::GET,
                "/v1/workers",
                None,
                Some(Duration::from_secs(10)),
            )
            .await
            .expect_err("401");
        let api = error.downcast_ref::<ApiError>().expect("an ApiError");
        assert_eq!(api.status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            error.to_string(),
            "401 missing or wrong bearer token; check --admin-token / STASIS_ADMIN_TOKEN"
        );
        let request = server.await.expect("server task").to_lowercase();
        assert!(
            request.starts_with("get /v1/workers http/1.1\r\n"),
            "{request}"
        );
        assert!(
            request.contains("authorization: bearer secret\r\n"),
            "{request}"
        );
    }
}
