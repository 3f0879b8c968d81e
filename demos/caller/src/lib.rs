//! The caller actor (ABI 2): `POST /call/<actor>` calls `<actor>` with
//! `POST /` and an empty body and answers with the callee's status and
//! body; `POST /send/<actor>` sends the same one-way and answers 202. A
//! longer path is passed on: `POST /call/<actor>/<rest>` calls `<actor>`
//! with `POST /<rest>` (so `POST /call/b/call/a` to actor `a` makes `a`
//! call `b` and `b` call `a`: a cycle). A host-function error answers its
//! status (`HostError::status`: 404 no such actor, 508 loop detected, 504
//! deadline, ...) with the reason.

use stasis_guest_sdk::{Actor, HostError, Request, Response, export_actor, host};

#[derive(Default)]
struct Caller;

fn failed(what: &str, e: HostError) -> Response {
    let reason = host::last_error().unwrap_or_else(|| e.to_string());
    Response::text(e.status(), format!("{what} failed: {reason}\n"))
}

impl Actor for Caller {
    fn handle(&mut self, req: Request) -> Response {
        if req.method != "POST" {
            return Response::text(405, "use POST /call/<actor> or POST /send/<actor>\n");
        }
        let path = req.path().to_owned();
        // `<actor>` and the path passed on (`/` when there is none).
        let target = |rest: &str| -> (String, Request) {
            let (actor, uri) = rest
                .split_once('/')
                .map_or((rest, String::from("/")), |(a, r)| (a, format!("/{r}")));
            (actor.to_owned(), Request::new("POST", &uri))
        };
        if let Some(rest) = path.strip_prefix("/call/") {
            let (actor, message) = target(rest);
            let actor = actor.as_str();
            return match host::call(actor, &message) {
                Ok(answer) => Response {
                    status: answer.status,
                    headers: answer
                        .headers
                        .into_iter()
                        .filter(|(name, _)| name.eq_ignore_ascii_case("content-type"))
                        .collect(),
                    body: answer.body,
                },
                Err(e) => failed(&format!("call {actor}"), e),
            };
        }
        if let Some(rest) = path.strip_prefix("/send/") {
            let (actor, message) = target(rest);
            let actor = actor.as_str();
            return match host::send(actor, &message) {
                Ok(()) => Response::text(202, format!("sent to {actor}\n")),
                Err(e) => failed(&format!("send to {actor}"), e),
            };
        }
        Response::text(404, "use POST /call/<actor> or POST /send/<actor>\n")
    }
}

export_actor!(Caller);
