//! The fetch actor (ABI 2): `GET /?url=URL` fetches URL (percent-decoded)
//! with `GET` and answers with its status and body; when the host refuses
//! (not in `--allow-outbound`) or the fetch fails, 502 with the reason.

use stasis_guest_sdk::{Actor, Request, Response, export_actor, host};

#[derive(Default)]
struct Fetcher;

/// `%XX` escapes and `+` decoded; malformed escapes are kept as they are.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Actor for Fetcher {
    fn handle(&mut self, req: Request) -> Response {
        if req.method != "GET" {
            return Response::text(405, "use GET /?url=URL\n");
        }
        let Some(url) = req.query("url").map(percent_decode) else {
            return Response::text(400, "use GET /?url=URL\n");
        };
        match host::fetch(&Request::new("GET", &url)) {
            Ok(answer) => Response {
                status: answer.status,
                headers: answer
                    .headers
                    .into_iter()
                    .filter(|(name, _)| name.eq_ignore_ascii_case("content-type"))
                    .collect(),
                body: answer.body,
            },
            Err(e) => {
                let reason = host::last_error().unwrap_or_else(|| e.to_string());
                Response::text(502, format!("fetch {url} failed: {reason}\n"))
            }
        }
    }
}

export_actor!(Fetcher);
