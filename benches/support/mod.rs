//! What the cluster and density benches share: criterion's test mode, the
//! HTTP client and request helper, and nearest-rank percentiles.
#![allow(dead_code)]

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

/// Whether criterion runs in test mode (`cargo test`: each bench once).
pub fn test_mode() -> bool {
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    !has("--bench") || has("--test") || has("--list")
}

/// The benches' HTTP client.
pub type Http = Client<HttpConnector, Full<Bytes>>;

/// Sends `method path` to `addr` with `Host: host`; status and body.
pub async fn send(
    client: &Http,
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    body: Bytes,
) -> (u16, Bytes) {
    let request = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("host", host)
        .header("content-type", "application/json")
        .body(Full::new(body))
        .expect("request");
    let response = client.request(request).await.expect("HTTP request");
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, body)
}

/// Nearest-rank percentile `p` (0–100) of `samples`.
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `n`, p50, p99 and max of `samples`.
pub fn summary(samples: &[f64]) -> String {
    if samples.is_empty() {
        return "n=0".to_owned();
    }
    format!(
        "n={} p50={:.3} p99={:.3} max={:.3}",
        samples.len(),
        percentile(samples, 50.0),
        percentile(samples, 99.0),
        percentile(samples, 100.0)
    )
}
