//! The echo actor: answers `<length> <sha256-hex>\n` of the request body.

use sha2::{Digest, Sha256};
use stasis_guest_sdk::{Actor, Request, Response, export_actor};

#[derive(Default)]
struct Echo;

impl Actor for Echo {
    fn handle(&mut self, req: Request) -> Response {
        let digest = Sha256::digest(&req.body);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        Response::text(200, format!("{} {hex}\n", req.body.len()))
    }
}

export_actor!(Echo);
