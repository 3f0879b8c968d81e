//! The ticker actor (server-sent events): `GET /?count=N&every_ms=M` with
//! `Accept: text/event-stream` opens a stream that gets `data: tick K`
//! (K = 1..N) every M ms (default 100 ms, at least 10), written by the
//! actor's alarm, and is closed after the N-th. The stream is the host's:
//! the actor can be paused between ticks (its alarm resumes it) and the
//! stream stays open. `GET /` without the header answers `streams: S,
//! ticks: T`.

use std::time::{SystemTime, UNIX_EPOCH};

use stasis_guest_sdk::sockets::{self, SocketEvent, SocketEventKind};
use stasis_guest_sdk::{Actor, Request, Response, export_actor, host};

struct Feed {
    id: u64,
    sent: u64,
    count: u64,
    every_ms: u64,
    next_ms: u64,
}

#[derive(Default)]
struct Ticker {
    feeds: Vec<Feed>,
    ticks: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn number(req: &Request, name: &str, default: u64) -> u64 {
    req.query(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

impl Ticker {
    fn arm(&self) {
        if let Some(next) = self.feeds.iter().map(|f| f.next_ms).min() {
            let _ = host::set_alarm(next);
        }
    }
}

impl Actor for Ticker {
    fn handle(&mut self, req: Request) -> Response {
        match sockets::socket_id(&req) {
            Some(id) if req.method == "GET" => {
                let every_ms = number(&req, "every_ms", 100).max(10);
                self.feeds.push(Feed {
                    id,
                    sent: 0,
                    count: number(&req, "count", 10).max(1),
                    every_ms,
                    next_ms: now_ms() + every_ms,
                });
                self.arm();
                sockets::stream(200, "text/event-stream", ": ticking\n\n")
            }
            _ => Response::text(
                200,
                format!("streams: {}, ticks: {}\n", self.feeds.len(), self.ticks),
            ),
        }
    }

    fn alarm(&mut self) {
        let now = now_ms();
        let mut kept = Vec::new();
        for mut feed in std::mem::take(&mut self.feeds) {
            if feed.next_ms <= now {
                feed.sent += 1;
                self.ticks += 1;
                let line = sockets::event(&format!("tick {}", feed.sent));
                if sockets::send_text(feed.id, &line).is_err() {
                    continue;
                }
                if feed.sent >= feed.count {
                    let _ = sockets::close(feed.id, 1000, "");
                    continue;
                }
                feed.next_ms = now + feed.every_ms;
            }
            kept.push(feed);
        }
        self.feeds = kept;
        self.arm();
    }

    fn on_socket(&mut self, event: SocketEvent) {
        if let SocketEventKind::Closed { .. } = event.kind {
            self.feeds.retain(|f| f.id != event.socket);
        }
    }
}

export_actor!(Ticker, sockets);
