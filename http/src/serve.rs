//! Small HTTP helpers shared by the router and the admin API: body type,
//! error answers, bounded body collection, and the accept loop (which
//! marks the requests of a connection with a verified client certificate:
//! [`ClientCertified`]).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use stasis_contract::error::{ApiError, ErrorKind};

/// Longest a client may take to send a request head.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

pub use crate::body::Body;

/// The headers an answer for `error` carries besides its body's:
/// `Retry-After` when it has one, and the `WWW-Authenticate: Bearer`
/// challenge of a 401 (RFC 9110 §15.5.2).
fn error_headers(error: &ApiError, headers: &mut hyper::HeaderMap) {
    if let Some(secs) = error.retry_after() {
        headers.insert(hyper::header::RETRY_AFTER, secs.into());
    }
    if error.is(ErrorKind::Unauthorized) {
        headers.insert(
            hyper::header::WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static("Bearer"),
        );
    }
}

/// A `text/plain` answer for `error`, with `Retry-After` when it has one
/// and a 401's `WWW-Authenticate` challenge.
#[must_use]
pub fn text_error(error: &ApiError) -> Response<Body> {
    let mut response = Response::new(Body::new(Bytes::from(format!("{}\n", error.message()))));
    *response.status_mut() = status_of(error);
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    error_headers(error, headers);
    response
}

/// A `status` response with `body` as `content_type`.
#[must_use]
pub fn text(status: StatusCode, body: String, content_type: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

/// The content type of `/metrics` (OpenMetrics text).
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A JSON answer (pretty-printed) with `status`.
#[must_use]
pub fn json<T: serde::Serialize>(status: StatusCode, value: &T) -> Response<Body> {
    let body = serde_json::to_vec_pretty(value).unwrap_or_default();
    let mut response = Response::new(Body::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// The HTTP status answered for `error` (its kind's, see
/// [`stasis_contract::error::ErrorKind::status`]).
#[must_use]
pub fn status_of(error: &ApiError) -> StatusCode {
    StatusCode::from_u16(error.kind().status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// The JSON answer for `error`: `{"error": "...", "kind": "..."}` (the kind
/// as [`stasis_contract::error::ErrorKind::name`] spells it), its status,
/// and `Retry-After` when it has one.
#[must_use]
pub fn json_error(error: &ApiError) -> Response<Body> {
    let mut response = json(
        status_of(error),
        &serde_json::json!({ "error": error.message(), "kind": error.kind().name() }),
    );
    error_headers(error, response.headers_mut());
    response
}

/// A refused body declared this large or smaller is read and dropped,
/// so its client can read the refusal.
const DRAIN_BYTES: u64 = 64 << 20;

/// How long a refused body is read away at most.
const DRAIN_FOR: Duration = Duration::from_secs(10);

/// Reads a refused request's body away in the background, dropping each
/// frame (up to [`DRAIN_BYTES`], for 10 s at most), so that a client
/// still sending it completes its write and reads the refusal, instead of
/// a broken pipe when the connection closes under its write.
fn read_away(body: Incoming) {
    tokio::spawn(async move {
        let mut body = body;
        let mut read = 0u64;
        let _ = tokio::time::timeout(DRAIN_FOR, async {
            while let Some(Ok(frame)) = body.frame().await {
                read += frame.data_ref().map_or(0, |d| d.len() as u64);
                if read > DRAIN_BYTES {
                    return;
                }
            }
        })
        .await;
    });
}

/// A request body not read yet. Dropped unread (the request was refused
/// before its body was needed: a bad name, a credential, a rate), it is
/// read away ([`read_away`]), so the client reads the refusal; unless
/// its client waits for `100 Continue` before sending it (reading it
/// would ask for the body only to throw it away), or declared it larger
/// than [`DRAIN_BYTES`].
#[derive(Debug)]
pub struct UnreadBody {
    body: Option<Incoming>,
    read_away: bool,
}

impl UnreadBody {
    /// `body` of a request with `headers`, read away if dropped before
    /// [`UnreadBody::take`] (see the type's docs).
    #[must_use]
    pub fn new(headers: &hyper::HeaderMap, body: Incoming) -> Self {
        let waits_for_continue = headers
            .get(hyper::header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        let declared = hyper::body::Body::size_hint(&body).lower();
        Self {
            read_away: !waits_for_continue && declared <= DRAIN_BYTES,
            body: Some(body),
        }
    }

    /// The body, to read now.
    pub fn take(mut self) -> Incoming {
        match self.body.take() {
            Some(body) => body,
            None => unreachable!("an UnreadBody holds its body until taken, which consumes it"),
        }
    }
}

impl Drop for UnreadBody {
    fn drop(&mut self) {
        if let Some(body) = self.body.take()
            && self.read_away
            && !hyper::body::Body::is_end_stream(&body)
        {
            read_away(body);
        }
    }
}

/// Collects a request body of at most `limit` bytes; `limit_name` names
/// that limit in the 413 (a flag such as `--max-body`, or what it is for).
///
/// # Errors
/// 413 naming the limit and its value if it is larger (by `Content-Length` up front, or while reading);
/// 400 if the connection fails mid-body.
pub async fn collect_body(
    parts: &hyper::http::request::Parts,
    body: Incoming,
    limit: usize,
    limit_name: &str,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            ErrorKind::TooLarge,
            format!("request body larger than {limit_name} ({limit} bytes)"),
        )
    };
    let declared = parts
        .headers
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        // The client may still be sending it: read away as any body
        // refused unread is (UnreadBody), so that its write completes and
        // it reads the 413 instead of a broken pipe.
        drop(UnreadBody::new(&parts.headers, body));
        return Err(too_large());
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(e) => Err(ApiError::bad_request(format!(
            "reading the request body: {e}"
        ))),
    }
}

/// Accepts connections on `listener` and serves each with `handler`
/// (HTTP/1.1, and HTTP/2 with prior knowledge: h2c) until `shutdown`
/// resolves; then stops accepting and waits up to `drain` for open
/// connections to finish their requests.
pub async fn serve<H, F>(
    listener: TcpListener,
    handler: H,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    serve_tls(listener, None, handler, shutdown, drain).await;
}

/// [`serve`], over TLS when `tls` is given ([`crate::tls`]: HTTP/2 or
/// HTTP/1.1 by ALPN). Each connection's handshake runs in the
/// connection's own task, bounded by [`TLS_HANDSHAKE_TIMEOUT`], so a slow
/// or silent TLS client holds up no other connection.
pub async fn serve_tls<H, F>(
    listener: TcpListener,
    tls: Option<Arc<crate::tls::ServerTls>>,
    handler: H,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let handler = Arc::new(handler);
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // A client that never finishes its request head must not hold a
    // connection forever.
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let builder = Arc::new(builder);
    let acceptor = tls.as_ref().map(|t| t.acceptor());
    let reload = tls.map(|t| tokio::spawn(t.watch()));
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        // Each request of a connection that presented a verified client
        // certificate carries [`ClientCertified`].
        let service = move |certified: Option<ClientCertified>| {
            hyper::service::service_fn(move |mut req: Request<Incoming>| {
                if let Some(certified) = &certified {
                    req.extensions_mut().insert(certified.clone());
                }
                let handler = handler.clone();
                async move { Ok::<_, Infallible>(handler(req, peer).await) }
            })
        };
        let watcher = graceful.watcher();
        let (builder, acceptor) = (builder.clone(), acceptor.clone());
        tokio::spawn(async move {
            let ended = match acceptor {
                None => {
                    let connection =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service(None));
                    watcher.watch(connection.into_owned()).await
                }
                Some(acceptor) => {
                    let stream =
                        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream))
                            .await
                        {
                            Ok(Ok(stream)) => stream,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, "TLS handshake failed: {e}");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "TLS handshake timed out");
                                return;
                            }
                        };
                    // rustls fails the handshake of a certificate its
                    // verifier refuses: one that is here was verified.
                    let certified = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .map(|leaf| ClientCertified {
                            leaf: leaf.clone().into_owned(),
                        });
                    let connection = builder
                        .serve_connection_with_upgrades(TokioIo::new(stream), service(certified));
                    watcher.watch(connection.into_owned()).await
                }
            };
            if let Err(e) = ended {
                tracing::debug!(%peer, "connection ended: {e}");
            }
        });
    }
    if let Some(reload) = reload {
        reload.abort();
    }
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after {drain:?}; closing them");
    }
}

/// In a request's extensions when its connection presented a client
/// certificate that the listener's verifier accepted (mutual TLS, see
/// [`crate::tls::ServerTls::load_verifying`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertified {
    leaf: rustls::pki_types::CertificateDer<'static>,
}

impl ClientCertified {
    /// The role the certificate carries (`stasis ca issue --role`), if
    /// any.
    #[must_use]
    pub fn cert_role(&self) -> Option<crate::subject::CertRole> {
        crate::subject::CertRole::of(&self.leaf)
    }

    /// Whether the certificate names `name` as a DNS name (`stasis ca
    /// issue --name NAME` puts NAME in).
    #[must_use]
    pub fn names(&self, name: &str) -> bool {
        rustls::pki_types::ServerName::try_from(name.to_owned())
            .is_ok_and(|name| crate::tls::covers(&self.leaf, &name))
    }
}

/// How long a TLS client gets to finish its handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
