//! Version 2 of the counter actor, the target of a live code upgrade
//! (`stasis template push counter counter-v2.wasm`, then `stasis actor
//! upgrade NAME`): it keeps the count it is handed and adds a field, the
//! count at which the actor was upgraded. `POST /` adds one, `GET /` reads;
//! both answer `hello from: <worker> | version 2 since count: <m> |
//! preserved memory count: <n>\n` (`-` for an actor created on version 2;
//! the count stays last, as in version 1).

use serde::{Deserialize, Serialize};
use stasis_guest_sdk::{Actor, Request, Response, State, export_actor, state};

/// What version 1 (`counter`) hands over: state schema 1.
#[derive(Deserialize)]
struct CounterV1 {
    count: u64,
}

#[derive(Default, Serialize, Deserialize)]
struct Counter {
    count: u64,
    /// The count when the actor came to version 2 (`None`: created on it).
    upgraded_at: Option<u64>,
}

impl State for Counter {
    const SCHEMA: u32 = 2;

    fn load(schema: u32, bytes: &[u8]) -> Result<Self, String> {
        match schema {
            1 => state::decode::<CounterV1>(bytes).map(|old| Counter {
                count: old.count,
                upgraded_at: Some(old.count),
            }),
            2 => state::decode(bytes),
            other => Err(format!("counter-v2 reads state schemas 1 and 2, not {other}")),
        }
    }
}

impl Actor for Counter {
    fn handle(&mut self, req: Request) -> Response {
        match req.method.as_str() {
            "POST" => self.count += 1,
            "GET" | "HEAD" => {}
            other => return Response::text(405, format!("method {other} not allowed; use GET or POST\n")),
        }
        let since = self
            .upgraded_at
            .map_or_else(|| "-".to_owned(), |at| at.to_string());
        Response::text(
            200,
            format!(
                "hello from: {} | version 2 since count: {since} | preserved memory count: {}\n",
                req.context.worker, self.count
            ),
        )
    }
}

export_actor!(Counter, state);
