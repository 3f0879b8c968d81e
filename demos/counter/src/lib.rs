//! The counter actor: `POST /` adds one, `GET /` reads. Both answer
//! `hello from: <worker> | preserved memory count: <n>\n`.

use stasis_guest_sdk::{Actor, Request, Response, export_actor};

#[derive(Default)]
struct Counter {
    count: u64,
}

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

export_actor!(Counter);
