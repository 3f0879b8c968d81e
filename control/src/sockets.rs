//! The WebSockets and streamed responses this process holds for its
//! actors ([`Sockets`]): which actor each belongs to, the queue of what
//! the actor wrote to it, and the per-actor limit. The edge (the ingress)
//! opens an entry when an actor accepts a socket or stream and runs the
//! connection; the actors' `socket_send`, `socket_close` and `sockets`
//! reach the entries through [`ControlPlane::socket`]. An entry outlives
//! every pause, resume and move of its actor: it is the process holding
//! the client's connection that keeps it, never the actor's instance.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use tokio::sync::mpsc;

use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::metrics::SocketMetrics;
use stasis_contract::sockets::{SocketAnswer, SocketLimits, SocketOp, SocketTarget};

use crate::ControlPlane;

/// What an actor wrote to one of its sockets, for the connection to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outgoing {
    /// A message (a text frame when `text`; on a stream, body bytes).
    Message {
        /// Its bytes.
        data: Bytes,
        /// A text frame.
        text: bool,
    },
    /// Close with `code` and `reason` (on a stream: end the body).
    Close {
        /// The WebSocket close code.
        code: u16,
        /// The reason.
        reason: String,
    },
}

/// Why an entry's queue was closed without a [`Outgoing::Close`]: the
/// client read too slowly (its queue was full).
pub const SLOW_CLIENT: &str = "the client read too slowly (its queue of messages was full)";

struct Entry {
    actor: String,
    queue: mpsc::Sender<Outgoing>,
}

#[derive(Default)]
struct Table {
    entries: HashMap<u64, Entry>,
    by_actor: HashMap<String, BTreeSet<u64>>,
}

impl Table {
    fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.entries.remove(&id)?;
        if let Some(ids) = self.by_actor.get_mut(&entry.actor) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_actor.remove(&entry.actor);
            }
        }
        Some(entry)
    }
}

/// The sockets and streams this process holds (module docs).
pub struct Sockets {
    limits: SocketLimits,
    metrics: SocketMetrics,
    next: AtomicU64,
    table: Mutex<Table>,
}

impl Sockets {
    /// No sockets yet, under `limits`, counted in `metrics`. Ids start at
    /// the current time in microseconds, so an id an actor kept from before
    /// a restart of this process names no new socket.
    #[must_use]
    pub fn new(limits: SocketLimits, metrics: SocketMetrics) -> Self {
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| u64::try_from(d.as_micros()).unwrap_or(1));
        Self {
            limits,
            metrics,
            next: AtomicU64::new(start),
            table: Mutex::default(),
        }
    }

    /// The limits.
    #[must_use]
    pub fn limits(&self) -> SocketLimits {
        self.limits
    }

    /// The socket metrics (`stasis_sockets_open` is set at scrape time
    /// from [`Sockets::len`]; the edge counts pings, dead peers and
    /// heartbeats).
    #[must_use]
    pub fn metrics(&self) -> &SocketMetrics {
        &self.metrics
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A fresh id, for a request that may become a socket or stream.
    #[must_use]
    pub fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Opens socket `id` of `actor`: the queue its connection sends from.
    ///
    /// # Errors
    /// 503 naming `--max-sockets` when `actor` holds that many.
    pub fn open(&self, actor: &str, id: u64) -> Result<mpsc::Receiver<Outgoing>, ApiError> {
        let mut table = self.table();
        let open = table.by_actor.get(actor).map_or(0, BTreeSet::len);
        if open >= self.limits.per_actor {
            return Err(ApiError::unavailable(format!(
                "actor {actor} already has {open} open WebSockets and streams (--max-sockets {})",
                self.limits.per_actor
            )));
        }
        let (queue, receiver) = mpsc::channel(self.limits.queue);
        table.entries.insert(
            id,
            Entry {
                actor: actor.to_owned(),
                queue,
            },
        );
        table
            .by_actor
            .entry(actor.to_owned())
            .or_default()
            .insert(id);
        Ok(receiver)
    }

    /// Forgets socket `id` (its connection ended). True if it was open:
    /// the actor did not close it itself.
    pub fn closed(&self, id: u64) -> bool {
        self.table().remove(id).is_some()
    }

    /// The ids of `actor`'s open sockets and streams.
    #[must_use]
    pub fn list(&self, actor: &str) -> Vec<u64> {
        self.table()
            .by_actor
            .get(actor)
            .map(|ids| ids.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Whether socket or stream `id` is open.
    #[must_use]
    pub fn is_open(&self, id: u64) -> bool {
        self.table().entries.contains_key(&id)
    }

    /// How many sockets and streams are open.
    #[must_use]
    pub fn len(&self) -> usize {
        self.table().entries.len()
    }

    /// Whether none is open.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Carries out `op` for `actor` (see [`SocketOp`]).
    ///
    /// # Errors
    /// 404 for a socket `actor` does not have open; 413 for a message over
    /// `--max-socket-message`.
    pub fn apply(&self, actor: &str, op: SocketOp) -> Result<SocketAnswer, ApiError> {
        match op {
            SocketOp::List => Ok(SocketAnswer {
                ids: self.list(actor),
                max_message: self.limits.max_message,
            }),
            SocketOp::Send { target, data, text } => {
                if data.len() > self.limits.max_message {
                    return Err(ApiError::new(
                        ErrorKind::TooLarge,
                        format!(
                            "a message of {} bytes is over --max-socket-message ({} bytes)",
                            data.len(),
                            self.limits.max_message
                        ),
                    ));
                }
                let message = Outgoing::Message {
                    data: Bytes::from(data),
                    text,
                };
                let mut table = self.table();
                let ids = match target {
                    SocketTarget::One(id) => {
                        owned(&table, actor, id)?;
                        vec![id]
                    }
                    SocketTarget::All => table
                        .by_actor
                        .get(actor)
                        .map(|ids| ids.iter().copied().collect())
                        .unwrap_or_default(),
                };
                for id in ids {
                    let full = table
                        .entries
                        .get(&id)
                        .is_some_and(|e| e.queue.try_send(message.clone()).is_err());
                    if full {
                        // Dropping the queue's sender ends the connection
                        // (it closes with 1008, see `SLOW_CLIENT`).
                        table.remove(id);
                    }
                }
                Ok(SocketAnswer::default())
            }
            SocketOp::Close {
                socket,
                code,
                reason,
            } => {
                let mut table = self.table();
                owned(&table, actor, socket)?;
                if let Some(entry) = table.remove(socket) {
                    // A full queue drops the entry all the same.
                    let _ = entry.queue.try_send(Outgoing::Close { code, reason });
                }
                Ok(SocketAnswer::default())
            }
        }
    }

    /// Closes every socket and stream this process holds with `code` and
    /// `reason` (a graceful stop: 1001, so clients reconnect rather than
    /// see a lost connection, 1006). No close event reaches the actors.
    pub fn close_every(&self, code: u16, reason: &str) {
        let mut table = self.table();
        let ids: Vec<u64> = table.entries.keys().copied().collect();
        for id in ids {
            if let Some(entry) = table.remove(id) {
                let _ = entry.queue.try_send(Outgoing::Close {
                    code,
                    reason: reason.to_owned(),
                });
            }
        }
    }

    /// Closes every socket of `actor` with `code` and `reason` (it was
    /// deleted).
    pub fn close_all(&self, actor: &str, code: u16, reason: &str) {
        let mut table = self.table();
        for id in table.by_actor.get(actor).cloned().unwrap_or_default() {
            if let Some(entry) = table.remove(id) {
                let _ = entry.queue.try_send(Outgoing::Close {
                    code,
                    reason: reason.to_owned(),
                });
            }
        }
    }
}

/// Checks that socket `id` is open and `actor`'s.
fn owned(table: &Table, actor: &str, id: u64) -> Result<(), ApiError> {
    match table.entries.get(&id) {
        Some(entry) if entry.actor == actor => Ok(()),
        _ => Err(ApiError::not_found(format!(
            "actor {actor} has no open socket {id}"
        ))),
    }
}

impl ControlPlane {
    /// The sockets and streams this process holds.
    #[must_use]
    pub fn sockets(&self) -> &Sockets {
        &self.sockets
    }

    /// Carries out an actor's `op` on its sockets.
    ///
    /// # Errors
    /// As [`Sockets::apply`].
    pub fn socket(&self, actor: &str, op: SocketOp) -> Result<SocketAnswer, ApiError> {
        self.sockets.apply(actor, op)
    }
}
