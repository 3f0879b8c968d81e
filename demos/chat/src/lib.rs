//! The chat-room actor (WebSockets): every client connected to it is in
//! the room, and what one says reaches everyone. The room's history is the
//! actor's state; the connections are the host's, so the room keeps its
//! clients through pauses (`--idle-timeout`) and moves.
//!
//! - a WebSocket to `/` joins the room; each text message is added to the
//!   history and sent to every open socket (the sender too); a message
//!   `echo TEXT` is sent back to its sender only; `who` answers the sender
//!   with `sockets: N`, the host's count of open sockets; `crash TEXT`
//!   says TEXT and then panics (the broadcast is never sent: a client hears
//!   of nothing that did not stay done);
//! - `POST /say` with a body says it to the room from HTTP (202);
//! - `GET /history` answers every message said, one per line;
//! - `GET /events` with `Accept: text/event-stream` streams what is said
//!   from now on as server-sent events.

use stasis_guest_sdk::sockets::{self, SocketEvent, SocketEventKind};
use stasis_guest_sdk::{Actor, Request, Response, export_actor};

#[derive(Default)]
struct Chat {
    /// Everything said, in order.
    history: Vec<String>,
    /// Streams (server-sent events) open on `/events`.
    feeds: Vec<u64>,
    /// Sockets that ended without the actor closing them.
    left: u64,
}

impl Chat {
    fn say(&mut self, line: &str) {
        self.history.push(line.to_owned());
        let feeds = std::mem::take(&mut self.feeds);
        // Sockets first; feeds get the same line as an event.
        for id in sockets::open().unwrap_or_default() {
            let sent = if feeds.contains(&id) {
                sockets::send_text(id, &sockets::event(line))
            } else {
                sockets::send_text(id, line)
            };
            if sent.is_ok() && feeds.contains(&id) {
                self.feeds.push(id);
            }
        }
    }
}

impl Actor for Chat {
    fn handle(&mut self, req: Request) -> Response {
        match (req.method.as_str(), req.path(), sockets::socket_id(&req)) {
            ("GET", "/", Some(_)) if sockets::is_upgrade(&req) => sockets::accept(),
            ("GET", "/events", Some(id)) => {
                self.feeds.push(id);
                sockets::stream(200, "text/event-stream", ": joined\n\n")
            }
            ("POST", "/say", _) => {
                self.say(&String::from_utf8_lossy(&req.body));
                Response::text(202, "said\n")
            }
            ("GET", "/history", _) => {
                let mut body = self.history.join("\n");
                if !body.is_empty() {
                    body.push('\n');
                }
                Response::text(200, body)
            }
            ("GET", "/left", _) => Response::text(200, format!("left: {}\n", self.left)),
            _ => Response::text(
                404,
                "connect a WebSocket to /, or use POST /say, GET /history, GET /events\n",
            ),
        }
    }

    fn on_socket(&mut self, event: SocketEvent) {
        match event.kind {
            SocketEventKind::Message { data, .. } => {
                let text = String::from_utf8_lossy(&data).into_owned();
                if let Some(back) = text.strip_prefix("echo ") {
                    let _ = sockets::send_text(event.socket, back);
                } else if let Some(last) = text.strip_prefix("crash ") {
                    self.say(last);
                    panic!("crashed after saying {last:?}");
                } else if text == "who" {
                    let n = sockets::open().map_or(0, |ids| ids.len());
                    let _ = sockets::send_text(event.socket, &format!("sockets: {n}"));
                } else {
                    self.say(&text);
                }
            }
            SocketEventKind::Closed { .. } => {
                self.left += 1;
                self.feeds.retain(|&id| id != event.socket);
            }
        }
    }
}

export_actor!(Chat, sockets);
