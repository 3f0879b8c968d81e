//! The CLI's client of the admin API of `stasis serve` (`docs/api.md`), a
//! thin layer over the runtime's HTTP client core
//! ([`stasis_runtime::http_client`]): one request per call, error answers
//! turned into one-line errors with advice, connection failures that name
//! the URL.

use std::fmt;
use std::time::Duration;

use anyhow::{anyhow, bail};
use bytes::Bytes;
use hyper::header::{ACCEPT, CONTENT_TYPE};
use hyper::{Method, StatusCode, Uri};
use stasis_runtime::contract::error::ApiError;
use stasis_runtime::http::client::{Answer, HttpClient, Unanswered};

/// How long establishing the TCP connection may take before the call fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A request body and its content type.
#[derive(Debug, Clone)]
pub(crate) struct Payload {
    /// The bytes sent.
    pub bytes: Bytes,
    /// The `content-type` header.
    pub content_type: &'static str,
}

/// A successful (2xx) answer.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    /// The status (`200`, `201`, `204`, ...).
    pub status: StatusCode,
    /// The body, possibly empty.
    pub body: Bytes,
    /// The next page's token of a listing, if it said there is one
    /// (`stasis-continue`).
    pub next_page: Option<String>,
}

/// No answer from the admin API: it could not be reached, the exchange
/// failed, or it timed out (the message says which).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NoAnswer(String);

impl fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NoAnswer {}

/// Whether a failed [`AdminClient::send`] may pass by itself, so that
/// asking again can help: no answer, a 5xx, or a `408`; a 4xx refusal is
/// for good.
pub(crate) fn may_pass(e: &anyhow::Error) -> bool {
    e.downcast_ref::<NoAnswer>().is_some()
        || e.downcast_ref::<Refused>()
            .is_some_and(|r| !r.status.is_client_error() || r.status == StatusCode::REQUEST_TIMEOUT)
}

/// A non-2xx answer as the CLI reports it: the server's [`ApiError`] and,
/// where it helps, advice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    /// The answer's HTTP status.
    pub status: StatusCode,
    /// Kind, one-line reason and `Retry-After` of the answer.
    pub error: ApiError,
    /// Advice appended to the message (e.g. for `401`).
    pub hint: Option<&'static str>,
}

impl Refused {
    /// Reads an error answer: `{"error": "..."}` per the API, anything else
    /// (a proxy's page, an empty body) reduced to one line, with a hint
    /// that the answer did not come from a stasis admin API.
    #[must_use]
    pub(crate) fn from_answer(answer: &Answer) -> Self {
        let (error, from_api) = answer.error();
        Self {
            status: answer.status,
            error,
            hint: (!from_api)
                .then_some("the answer is not from a stasis admin API; is --admin right?"),
        }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.error.message())?;
        if let Some(secs) = self.error.retry_after() {
            write!(f, " (retry after {secs}s)")?;
        }
        if let Some(hint) = self.hint {
            write!(f, "; {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Refused {}

/// A client of one admin API.
#[derive(Debug, Clone)]
pub(crate) struct AdminClient {
    http: HttpClient,
}

/// `http://host:port[/prefix]` (or `https://...`) without a trailing
/// slash, from what the user gave: a URL, or a bare `host:port` (taken as
/// `http://`).
///
/// # Errors
/// Not a URL, no host, or a scheme other than `http` and `https` (an
/// `https://` admin API is checked against `STASIS_CA_CERT`'s roots, else
/// the system's).
pub(crate) fn normalize_admin_url(admin: &str) -> anyhow::Result<String> {
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
    let scheme = match uri.scheme_str() {
        Some(scheme @ ("http" | "https")) => scheme,
        Some(other) => bail!(
            "invalid admin URL {admin:?}: scheme {other:?} is not supported (http:// or https://)"
        ),
        None => bail!("invalid admin URL {admin:?}: no scheme"),
    };
    let Some(authority) = uri.authority() else {
        bail!("invalid admin URL {admin:?}: no host");
    };
    if uri.query().is_some() {
        bail!("invalid admin URL {admin:?}: it must not have a query");
    }
    let prefix = uri.path().trim_end_matches('/');
    Ok(format!("{scheme}://{authority}{prefix}"))
}

/// Percent-encodes `s` for a path segment or a query value: everything but
/// RFC 3986 unreserved characters becomes `%XX`.
#[must_use]
pub(crate) fn encode_component(s: &str) -> String {
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

impl AdminClient {
    /// A client of the admin API at `admin` (see [`normalize_admin_url`]),
    /// sending `token`, if any and not empty, as `Authorization: Bearer`.
    ///
    /// # Errors
    /// An invalid URL, or a token that cannot be a header value.
    pub(crate) fn new(admin: &str, token: Option<&str>) -> anyhow::Result<Self> {
        let base = normalize_admin_url(admin)?;
        let http = HttpClient::new(&base, token.map(str::trim), CONNECT_TIMEOUT)
            .map_err(|e| anyhow!("{}", e.message()))?;
        Ok(Self { http })
    }

    /// Sends one request to `path_and_query` (starting with `/`) and returns
    /// the 2xx answer. `timeout` bounds the whole exchange; `None` waits as
    /// long as the server takes (pause, migrate and drain can be slow), but
    /// connecting is always bounded.
    ///
    /// # Errors
    /// [`Refused`] for a non-2xx answer; otherwise an error naming the
    /// admin URL (cannot connect, connection lost, timeout).
    pub(crate) async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        payload: Option<Payload>,
        timeout: Option<Duration>,
    ) -> anyhow::Result<Reply> {
        let base = self.http.base();
        let mut headers = vec![(ACCEPT.as_str(), "application/json")];
        let body = match payload {
            Some(p) => {
                headers.push((CONTENT_TYPE.as_str(), p.content_type));
                p.bytes
            }
            None => Bytes::new(),
        };
        let answer = self
            .http
            .exchange(method, path_and_query, &headers, body, timeout)
            .await
            .map_err(|e| {
                NoAnswer(match e {
                    Unanswered::Connect(causes) => format!(
                        "cannot reach the admin API at {base} ({causes}); is \"stasis serve\" running?"
                    ),
                    Unanswered::Failed(causes) => {
                        format!("the admin API at {base} failed: {causes}")
                    }
                    Unanswered::Timeout(limit) => format!(
                        "the admin API at {base} did not answer within {}s",
                        limit.as_secs()
                    ),
                })
            })?;
        if answer.status.is_success() {
            let next_page = answer
                .headers
                .get(stasis_runtime::contract::listing::CONTINUE_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            return Ok(Reply {
                status: answer.status,
                body: answer.body,
                next_page,
            });
        }
        let mut refused = Refused::from_answer(&answer);
        if answer.status == StatusCode::UNAUTHORIZED {
            refused.hint = Some(if self.http.has_token() {
                "check --admin-token / STASIS_ADMIN_TOKEN"
            } else {
                "pass --admin-token or set STASIS_ADMIN_TOKEN"
            });
        }
        Err(refused.into())
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
        assert_eq!(
            ok("https://admin.example:7443/"),
            "https://admin.example:7443"
        );
        for bad in ["", "ftp://x:1", "http://", "http://x:1/?a=b", "ht tp://x"] {
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

    fn refused(status: StatusCode, body: &[u8], retry_after: Option<&str>) -> Refused {
        let mut headers = hyper::HeaderMap::new();
        if let Some(v) = retry_after {
            headers.insert(
                hyper::header::RETRY_AFTER,
                hyper::header::HeaderValue::from_str(v).expect("header value"),
            );
        }
        Refused::from_answer(&Answer {
            status,
            headers,
            body: Bytes::copy_from_slice(body),
        })
    }

    #[test]
    fn error_answers_become_one_line() {
        let e = refused(
            StatusCode::NOT_FOUND,
            br#"{"error": "no actor named \"c9\""}"#,
            None,
        );
        assert_eq!(e.to_string(), r#"404 no actor named "c9""#);
        let e = refused(
            StatusCode::SERVICE_UNAVAILABLE,
            br#"{"error":"no worker"}"#,
            Some("2"),
        );
        assert_eq!(e.to_string(), "503 no worker (retry after 2s)");
        let e = refused(
            StatusCode::BAD_GATEWAY,
            b"\n<html>bad gateway</html>\nmore",
            None,
        );
        assert_eq!(
            e.to_string(),
            "502 <html>bad gateway</html>; the answer is not from a stasis admin API; is --admin right?"
        );
        let e = refused(StatusCode::METHOD_NOT_ALLOWED, b"", None);
        assert!(e.to_string().starts_with("405 method not allowed; "), "{e}");
    }

    #[test]
    fn bad_tokens_are_refused() {
        assert!(AdminClient::new("http://127.0.0.1:1", Some("a\nb")).is_err());
        let client =
            AdminClient::new("http://127.0.0.1:1", Some("  ")).expect("blank token is no token");
        assert!(!client.http.has_token());
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
        let api = error.downcast_ref::<Refused>().expect("a refusal");
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
