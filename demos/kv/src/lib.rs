//! The key-value actor. `PUT /<key>` stores the body (201 new, 200 replaced),
//! `GET /<key>` reads it (404 if missing), `DELETE /<key>` removes it (204, or
//! 404), `GET /` lists the keys one per line. Its memory grows with its data.
//!
//! With `KV_PRELOAD=N` in the template's environment, a new actor starts
//! with keys `k0..k{N-1}` (values of 32 bytes): a costly init, for the
//! cold-start versus restore benchmark.

use std::collections::BTreeMap;

use stasis_guest_sdk::{Actor, Request, Response, export_actor};

struct Kv {
    entries: BTreeMap<String, Vec<u8>>,
}

impl Default for Kv {
    fn default() -> Self {
        let preload: usize = std::env::var("KV_PRELOAD")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let entries = (0..preload)
            .map(|i| (format!("k{i}"), format!("{i:032}").into_bytes()))
            .collect();
        Self { entries }
    }
}

impl Actor for Kv {
    fn handle(&mut self, req: Request) -> Response {
        let key = req.path().trim_start_matches('/').to_owned();
        match (req.method.as_str(), key.is_empty()) {
            ("GET", true) => {
                let mut out = String::new();
                for k in self.entries.keys() {
                    out.push_str(k);
                    out.push('\n');
                }
                Response::text(200, out)
            }
            ("GET", false) => match self.entries.get(&key) {
                Some(v) => Response::bytes(200, v.clone()),
                None => Response::text(404, format!("no key {key}\n")),
            },
            ("PUT", false) => match self.entries.insert(key, req.body) {
                Some(_) => Response::text(200, "replaced\n"),
                None => Response::text(201, "created\n"),
            },
            ("DELETE", false) => match self.entries.remove(&key) {
                Some(_) => Response::text(204, ""),
                None => Response::text(404, format!("no key {key}\n")),
            },
            (m, _) => Response::text(405, format!("{m} {} not supported\n", req.path())),
        }
    }
}

export_actor!(Kv);
