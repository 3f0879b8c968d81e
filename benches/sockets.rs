//! WebSockets on hibernated actors (issue 35): the real `stasis serve
//! --workers 2 --idle-timeout 1s` on loopback with the `chat` demo, its
//! clients in this process (tokio-tungstenite).
//!
//! First `sockets-summary:` lines: the serve process's `VmRSS` with
//! `STASIS_SOCKETS_ACTORS` chat actors created and paused, then with
//! `STASIS_SOCKETS_OPEN` idle sockets spread over them once every actor is
//! hibernated again (paused by `--idle-timeout` with its sockets open):
//! memory per socket, and per hibernated actor (against the server before
//! any actor). Then criterion, client-observed, from a message sent on a
//! socket to its echo (`echo x`, sent back by the actor to that socket):
//!
//! * `sockets/round_trip/running`: to a running actor;
//! * `sockets/round_trip/hibernated`: to an actor paused first (untimed):
//!   the message resumes it;
//! * `sockets/round_trip/moving`: sent right after a move of the actor to
//!   the other worker starts (the move runs in the background): held at
//!   its gate, delivered on the new worker.
//!
//! In criterion's test mode (`cargo test --benches`) this is 10 actors and
//! 100 sockets, each benchmark once. The full run:
//! `STASIS_SOCKETS_OPEN=10000 STASIS_SOCKETS_ACTORS=100 cargo bench --bench sockets`.
//! Results: BENCHMARKS.md, section 25.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode};
use futures_util::{SinkExt, StreamExt};
use stasis_test_util::admin::{self, call_ok};
use stasis_test_util::bench::{self, env_usize, rss, test_mode};
use stasis_test_util::http::{Http, client};
use stasis_test_util::{Artifacts, artifacts};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// The `stasis` binary and the demo actors.
const STASIS: Artifacts = artifacts!();

const MIB: f64 = (1 << 20) as f64;

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

async fn connect(ingress: SocketAddr, actor: &str) -> Socket {
    let mut request = format!("ws://{ingress}/")
        .into_client_request()
        .expect("request");
    request
        .headers_mut()
        .insert("stasis-actor", actor.parse().expect("header"));
    tokio_tungstenite::connect_async(request)
        .await
        .unwrap_or_else(|e| panic!("connect to {actor}: {e}"))
        .0
}

/// Sends `echo x` on `socket` and waits for its `x`.
async fn round_trip(socket: &mut Socket) -> Duration {
    let started = Instant::now();
    socket.send(Message::text("echo x")).await.expect("send");
    loop {
        match socket.next().await.expect("open").expect("message") {
            Message::Text(text) if text.as_str() == "x" => return started.elapsed(),
            Message::Text(_) | Message::Binary(_) | Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

async fn state(client: &Http, admin: SocketAddr, actor: &str) -> String {
    let info = call_ok(client, admin, "GET", &format!("/v1/actors/{actor}"), None).await;
    info["state"].as_str().unwrap_or_default().to_owned()
}

/// Waits until every actor of `names` is paused (by `--idle-timeout`).
async fn all_paused(client: &Http, admin: SocketAddr, names: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(120);
    for name in names {
        while state(client, admin, name).await != "paused" {
            assert!(Instant::now() < deadline, "{name} never hibernated");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(4))
        .configure_from_args();
    let (actors, open) = if test_mode() {
        (10, 100)
    } else {
        (
            env_usize("STASIS_SOCKETS_ACTORS", 100),
            env_usize("STASIS_SOCKETS_OPEN", 10_000),
        )
    };
    let rt = stasis_test_util::bench::runtime();
    let tmp = tempfile::Builder::new()
        .prefix("stasis-sockets-")
        .tempdir()
        .expect("tempdir");
    let serve = bench::serve(
        &STASIS,
        &tmp.path().join("data"),
        &[
            "--workers",
            "2",
            "--idle-timeout",
            "1s",
            "--max-sockets",
            "100000",
        ],
    );
    let (ingress, admin_addr) = (serve.addr("ingress="), serve.addr("admin="));
    let client = {
        let _guard = rt.enter();
        client()
    };
    let names: Vec<String> = (0..actors).map(|i| format!("room-{i}")).collect();
    let empty = rss(serve.pid());
    let mut sockets = rt.block_on(async {
        admin::push_template(&client, admin_addr, "chat", STASIS.demo_wasm("chat")).await;
        for name in &names {
            let made = admin::create_actor(&client, admin_addr, name, "chat").await;
            assert!(made.status < 300, "{name}: {}", made.text());
            let path = format!("/v1/actors/{name}/pause");
            call_ok(&client, admin_addr, "POST", &path, None).await;
        }
        Vec::<Socket>::new()
    });
    let paused = rss(serve.pid());
    rt.block_on(async {
        for i in 0..open {
            sockets.push(connect(ingress, &names[i % names.len()]).await);
        }
        // One message each wakes every actor; then all hibernate again.
        for (i, socket) in sockets.iter_mut().enumerate().take(names.len()) {
            let took = round_trip(socket).await;
            assert!(took < Duration::from_secs(30), "room-{i}");
        }
        all_paused(&client, admin_addr, &names).await;
    });
    let held = rss(serve.pid());
    let per_actor = paused.saturating_sub(empty) as f64 / actors as f64;
    let per_socket = held.saturating_sub(paused) as f64 / open as f64;
    println!(
        "sockets-summary: actors={actors} sockets={open} rss_empty_mib={:.1} \
         rss_paused_actors_mib={:.1} rss_with_sockets_mib={:.1}",
        empty as f64 / MIB,
        paused as f64 / MIB,
        held as f64 / MIB
    );
    println!(
        "sockets-summary: per hibernated actor kib={:.1}, per idle socket kib={:.2}",
        per_actor / 1024.0,
        per_socket / 1024.0
    );

    let probe_socket = Arc::new(tokio::sync::Mutex::new(sockets.swap_remove(0)));
    let mut group = c.benchmark_group("sockets/round_trip");
    group.sampling_mode(SamplingMode::Flat);
    let probe = names[0].clone();
    group.bench_function("running", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let socket = probe_socket.clone();
            async move {
                let socket = &mut *socket.lock().await;
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += round_trip(socket).await;
                }
                total
            }
        });
    });
    group.bench_function("hibernated", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let socket = probe_socket.clone();
            let (client, probe) = (client.clone(), probe.clone());
            async move {
                let socket = &mut *socket.lock().await;
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let path = format!("/v1/actors/{probe}/pause");
                    call_ok(&client, admin_addr, "POST", &path, None).await;
                    total += round_trip(socket).await;
                }
                total
            }
        });
    });
    let workers = ["worker-1", "worker-2"];
    group.bench_function("moving", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let socket = probe_socket.clone();
            let (client, probe) = (client.clone(), probe.clone());
            async move {
                let socket = &mut *socket.lock().await;
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let info = call_ok(
                        &client,
                        admin_addr,
                        "GET",
                        &format!("/v1/actors/{probe}"),
                        None,
                    )
                    .await;
                    let to = if info["worker"] == workers[0] {
                        workers[1]
                    } else {
                        workers[0]
                    };
                    let body = serde_json::json!({ "to": to });
                    let path = format!("/v1/actors/{probe}/migrate");
                    let moving = {
                        let client = client.clone();
                        tokio::spawn(async move {
                            call_ok(&client, admin_addr, "POST", &path, Some(&body)).await
                        })
                    };
                    tokio::task::yield_now().await;
                    total += round_trip(socket).await;
                    moving.await.expect("move");
                }
                total
            }
        });
    });
    group.finish();
    drop(sockets);
    c.final_summary();
}
