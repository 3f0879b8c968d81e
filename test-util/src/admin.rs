//! The admin API over HTTP, for benches (the tests drive it through the
//! CLI, which is what they test): calls with JSON bodies, template push,
//! actor create, waiting for a worker.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};

use crate::http::{Http, Reply, send_with};

/// A call of the admin API at `addr` (`Host: localhost`); `body`, if any,
/// is sent as `application/json`.
pub async fn call(
    client: &Http,
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Reply {
    let bytes = body.map_or_else(Bytes::new, |v| Bytes::from(v.to_string()));
    let headers = [("content-type", "application/json")];
    send_with(client, addr, method, "localhost", path, &headers, bytes).await
}

/// [`call`], asserting a 2xx status; the answer as JSON (`null` if empty).
pub async fn call_ok(
    client: &Http,
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Value {
    call(client, addr, method, path, body)
        .await
        .ok(&format!("{method} {path}"))
        .json()
}

/// `PUT /v1/templates/NAME` with the module `wasm`; asserts 200 or 201.
pub async fn push_template(client: &Http, addr: SocketAddr, name: &str, wasm: Vec<u8>) {
    push_template_env(client, addr, name, wasm, &[]).await;
}

/// `POST /v1/actors` creating `actor` from `template`; the raw reply (the
/// caller decides what a refusal means).
pub async fn create_actor(client: &Http, addr: SocketAddr, actor: &str, template: &str) -> Reply {
    let body = json!({ "name": actor, "template": template });
    call(client, addr, "POST", "/v1/actors", Some(&body)).await
}

/// Polls `GET /v1/workers` until worker `name` is `ready` (30 s at most).
pub async fn wait_worker_ready(client: &Http, addr: SocketAddr, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list = call_ok(client, addr, "GET", "/v1/workers", None).await;
        let ready = list
            .as_array()
            .into_iter()
            .flatten()
            .any(|w| w["name"] == name && w["state"] == "ready");
        if ready {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "worker {name} never ready: {list}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// [`push_template`] with a WASI environment: `PUT
/// /v1/templates/NAME?env=K%3DV&...` for each `(K, V)` of `env`; asserts
/// 200 or 201.
pub async fn push_template_env(
    client: &Http,
    addr: SocketAddr,
    name: &str,
    wasm: Vec<u8>,
    env: &[(&str, &str)],
) {
    let query: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("env={}", query_escape(&format!("{k}={v}"))))
        .collect();
    let mut path = format!("/v1/templates/{name}");
    if !query.is_empty() {
        path = format!("{path}?{}", query.join("&"));
    }
    let headers = [("content-type", "application/wasm")];
    let reply = send_with(
        client,
        addr,
        "PUT",
        "localhost",
        &path,
        &headers,
        wasm.into(),
    )
    .await;
    assert!(
        reply.status == 200 || reply.status == 201,
        "push {name}: {} {}",
        reply.status,
        reply.text()
    );
}

/// `text` percent-encoded for a query value (everything but RFC 3986's
/// unreserved characters escaped).
fn query_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
