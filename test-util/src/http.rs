//! HTTP on loopback: the client, one request function ([`send_with`]) and
//! thin conveniences on top of it (plain requests, bursts).

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// The HTTP/1.1 keep-alive client tests and benches use.
pub type Http = Client<HttpConnector, Full<Bytes>>;

/// A new client keeping up to 64 idle connections per host. Call it inside
/// a tokio runtime.
#[must_use]
pub fn client() -> Http {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(64)
        .build_http()
}

/// A whole response: status, headers and body.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The response headers.
    pub headers: hyper::HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl Reply {
    /// The body as text (invalid UTF-8 replaced).
    #[must_use]
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON, `null` when empty; panics if it is not
    /// JSON.
    #[must_use]
    pub fn json(&self) -> Value {
        if self.body.is_empty() {
            return Value::Null;
        }
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.text()))
    }

    /// `self`, after asserting a 2xx status (`what` names the call in the
    /// panic message).
    #[must_use]
    pub fn ok(self, what: &str) -> Reply {
        assert!(
            (200..300).contains(&self.status),
            "{what}: {} {}",
            self.status,
            self.text()
        );
        self
    }
}

/// Sends `method http://ADDR/PATH` with `Host: host`, the extra `headers`
/// and `body`, and reads the whole response; panics if the exchange fails.
pub async fn send_with(
    client: &Http,
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Reply {
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("host", host);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(body)).expect("valid request");
    let response = client.request(request).await.expect("HTTP request");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("response body")
        .to_bytes();
    Reply {
        status,
        headers,
        body,
    }
}

/// [`send_with`] without extra headers.
pub async fn send(
    client: &Http,
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    body: impl Into<Bytes>,
) -> Reply {
    send_with(client, addr, method, host, path, &[], body.into()).await
}

/// The `Host` header that routes a request to actor `actor`.
#[must_use]
pub fn actor_host(actor: &str) -> String {
    format!("{actor}.actors.localhost")
}

/// `n` identical bodiless requests to `host` sent at once, each on its own
/// task; the replies in the order the requests were started.
pub async fn burst(
    client: &Http,
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    n: usize,
) -> Vec<Reply> {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let client = client.clone();
            let (method, host, path) = (method.to_owned(), host.to_owned(), path.to_owned());
            tokio::spawn(
                async move { send(&client, addr, &method, &host, &path, Bytes::new()).await },
            )
        })
        .collect();
    let mut replies = Vec::with_capacity(n);
    for task in tasks {
        replies.push(task.await.expect("burst request task"));
    }
    replies
}
