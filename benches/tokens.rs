//! What checking a token costs (issue 34): the real `stasis serve
//! --admin-token` on loopback, `GET /v1/actors/bench` on the admin API
//! (one actor's record), `STASIS_TOKENS_IN_FLIGHT` (8) requests in flight
//! for `STASIS_TOKENS_SECONDS` (3) per case, rounds alternating between
//! the cases on one server (`STASIS_TOKENS_ROUNDS`, 3; the median is
//! printed):
//!
//! * the bootstrap `--admin-token` (one constant-time digest compare; the
//!   baseline);
//! * a scoped reader token (parsed, its record found in the replica's
//!   cache, the secret's digest compared, its role checked);
//! * a wrong token of a scoped token's shape whose id exists (the same
//!   work, answered 401).
//!
//! `cargo bench --bench tokens`; results in BENCHMARKS.md, section 29.

use std::net::SocketAddr;

use bytes::Bytes;
use serde_json::json;
use stasis_test_util::bench::{rate, serve};
use stasis_test_util::http::{Http, client, send_with};
use stasis_test_util::{Artifacts, artifacts};

/// The `stasis` binary and the demo actors.
const STASIS: Artifacts = artifacts!();

/// The bootstrap token.
const ADMIN: &str = "bench-admin-token";

/// `GET path` at `addr` with bearer `token`: its status.
async fn get(c: &Http, addr: SocketAddr, path: &str, token: &str) -> u16 {
    let auth = format!("Bearer {token}");
    let headers = [("authorization", auth.as_str())];
    send_with(c, addr, "GET", "localhost", path, &headers, Bytes::new())
        .await
        .status
}

/// Requests per second answered `want` with `token`.
async fn run(
    c: &Http,
    addr: SocketAddr,
    token: &str,
    want: u16,
    in_flight: usize,
    secs: u64,
) -> f64 {
    let (c, token) = (c.clone(), token.to_owned());
    rate(in_flight, secs, move || {
        let (c, token) = (c.clone(), token.clone());
        async move { assert_eq!(get(&c, addr, "/v1/actors/bench", &token).await, want) }
    })
    .await
}

fn main() {
    let stasis_test_util::bench::Rounds {
        rounds,
        seconds,
        in_flight,
    } = stasis_test_util::bench::Rounds::from_env("STASIS_TOKENS");
    let rt = stasis_test_util::bench::runtime();
    rt.block_on(async {
        let tmp = tempfile::tempdir().expect("tempdir");
        let server = serve(
            &STASIS,
            &tmp.path().join("data"),
            &["--workers", "1", "--admin-token", ADMIN],
        );
        let addr = server.addr("admin=");
        let c = client();
        let call = |method: &'static str, path: &'static str, body: Option<serde_json::Value>| {
            let c = c.clone();
            async move {
                let auth = format!("Bearer {ADMIN}");
                let headers = [
                    ("authorization", auth.as_str()),
                    ("content-type", "application/json"),
                ];
                let bytes = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
                send_with(&c, addr, method, "localhost", path, &headers, bytes).await
            }
        };
        let wasm = Bytes::from(STASIS.demo_wasm("counter"));
        let auth = format!("Bearer {ADMIN}");
        let pushed = send_with(
            &c,
            addr,
            "PUT",
            "localhost",
            "/v1/templates/counter",
            &[("authorization", auth.as_str())],
            wasm,
        )
        .await;
        assert!(pushed.status < 300, "push: {}", pushed.text());
        let created = call(
            "POST",
            "/v1/actors",
            Some(json!({"name": "bench", "template": "counter"})),
        )
        .await;
        assert!(created.status < 300, "create: {}", created.text());
        let made = call("POST", "/v1/tokens", Some(json!({"role": "reader"})))
            .await
            .ok("token create")
            .json();
        let reader = made["token"].as_str().expect("token").to_owned();
        let id = made["id"].as_str().expect("id");
        let wrong = format!("stasis_{id}_{}", "0".repeat(64));
        let cases = [
            ("bootstrap --admin-token", ADMIN.to_owned(), 200),
            ("scoped reader token", reader, 200),
            ("wrong secret, known id", wrong, 401),
        ];
        let mut rates = vec![Vec::new(); cases.len()];
        for round in 0..rounds {
            for (i, (name, token, want)) in cases.iter().enumerate() {
                let rate = run(&c, addr, token, *want, in_flight, seconds).await;
                println!("tokens-run: round {round}, {name}: {rate:.0} requests/s");
                rates[i].push(rate);
            }
        }
        let medians: Vec<f64> = rates
            .iter_mut()
            .map(|v| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            })
            .collect();
        for (i, (name, _, _)) in cases.iter().enumerate() {
            println!(
                "tokens-summary: {name:<24} {:>8.0} requests/s  {:.2}x of the bootstrap token",
                medians[i],
                medians[i] / medians[0]
            );
        }
    });
}
