//! Forwarding a request, as it came, to the leader replica (cluster mode):
//! a replica that is not the leader answers its ingress and admin API by
//! passing each request to the leader's matching listener and the answer
//! back. Hop-by-hop headers are dropped; `Host`, `Authorization` and the
//! body travel unchanged, so the leader routes and authorizes as if it had
//! been asked directly. A forwarded request carries [`FORWARDED_HEADER`],
//! and a replica never forwards such a request again (no loops while the
//! leadership changes hands).
//!
//! The leader's answer to a forwarded write (any method but `GET`, `HEAD`
//! and `OPTIONS`) carries [`REVISION_HEADER`]: the etcd revision of the
//! newest actor record it wrote, this write's or a later one. The
//! forwarding replica answers its client once its own watch of etcd has
//! applied that revision (read-your-writes, see `stasis-runtime`'s `replica`).

use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Request, Response};

use stasis_contract::error::ApiError;
use stasis_contract::headers::not_passed_on;
use stasis_http::client::{HttpClient, Unanswered};
use stasis_http::serve::{Body, collect_body};

pub use stasis_contract::headers::{FORWARDED_HEADER, REVISION_HEADER};

/// How long connecting to the leader may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Forwards requests to a leader's listener.
#[derive(Debug)]
pub struct Forwarder {
    me: String,
    max_body: usize,
    timeout: Duration,
}

impl Forwarder {
    /// Forwards for replica `me`: bodies up to `max_body` bytes (the
    /// largest body the leader's admin API takes, a template module; the
    /// leader applies each route's own limit), answers awaited at most
    /// `timeout`.
    #[must_use]
    pub fn new(me: &str, max_body: usize, timeout: Duration) -> Self {
        Self {
            me: me.to_owned(),
            max_body,
            timeout,
        }
    }

    /// Sends `request` to the listener at `target` (`host:port`) and gives
    /// back its answer.
    ///
    /// # Errors
    /// 503 (with `Retry-After`) if the request was already forwarded once
    /// or the leader cannot be reached or gives no answer in time; 413 if
    /// the body is over `max_body`.
    pub async fn forward(
        &self,
        target: &str,
        request: Request<Incoming>,
    ) -> Result<Response<Body>, ApiError> {
        if request.headers().contains_key(FORWARDED_HEADER) {
            return Err(ApiError::unavailable(
                "the leadership is changing hands; retry",
            ));
        }
        let (parts, body) = request.into_parts();
        let body = collect_body(&parts, body, self.max_body, "the admin API's body limit").await?;
        let client = HttpClient::new(&format!("http://{target}"), None, CONNECT_TIMEOUT)?;
        let mut headers: Vec<(&str, &str)> = parts
            .headers
            .iter()
            .filter(|(name, _)| !not_passed_on(name.as_str()))
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
            .collect();
        headers.push((FORWARDED_HEADER, &self.me));
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", hyper::http::uri::PathAndQuery::as_str);
        let answer = client
            .exchange(
                parts.method.clone(),
                path,
                &headers,
                body,
                Some(self.timeout),
            )
            .await
            .map_err(|e| match e {
                Unanswered::Connect(e) => {
                    ApiError::unavailable(format!("the leader replica cannot be reached: {e}"))
                }
                Unanswered::Failed(e) => {
                    ApiError::unavailable(format!("the leader replica failed to answer: {e}"))
                }
                Unanswered::Timeout(limit) => ApiError::unavailable(format!(
                    "the leader replica gave no answer within {limit:?}"
                )),
            })?;
        let mut response = Response::new(Body::new(answer.body));
        *response.status_mut() = answer.status;
        for (name, value) in &answer.headers {
            if !not_passed_on(name.as_str()) {
                response.headers_mut().append(name.clone(), value.clone());
            }
        }
        Ok(response)
    }
}
