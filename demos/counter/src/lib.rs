//! The counter actor: `POST /` adds one, `GET /` reads. Both answer
//! `hello from: <worker> | preserved memory count: <n>\n`. Its state can be
//! handed over to another version of the template (`stasis actor
//! upgrade`; see `counter-v2`), and it declares its layout, so a version
//! with only other code (the same `stasis-layout`) takes its memory as it
//! is (memory carry-over).

use serde::{Deserialize, Serialize};
use stasis_guest_sdk::{Actor, Request, Response, State, export_actor};

/// The layout of the state in memory: change it whenever `Counter` changes.
#[used]
#[unsafe(link_section = "stasis-layout")]
static LAYOUT: [u8; 10] = *b"counter-v1";

#[derive(Default, Serialize, Deserialize)]
struct Counter {
    count: u64,
}

/// Schema 1: the count.
impl State for Counter {}

impl Actor for Counter {
    fn handle(&mut self, req: Request) -> Response {
        match req.method.as_str() {
            "POST" => self.count += 1,
            "GET" | "HEAD" => {}
            other => return Response::text(405, format!("method {other} not allowed; use GET or POST\n")),
        }
        Response::text(
            200,
            format!(
                "hello from: {} | preserved memory count: {}\n",
                req.context.worker, self.count
            ),
        )
    }
}

export_actor!(Counter, state);
