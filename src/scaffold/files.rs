//! The files of a new project (see [`super`]): each as its path in the
//! project and its text. The guest SDK and the host/guest contract are
//! this binary's own sources, with manifests that name their dependencies'
//! versions instead of inheriting the Stasis workspace's.

use std::path::Path;

use super::Language;

/// The guest SDK's sources, as this binary was built with them.
const SDK: &[(&str, &str)] = &[
    ("lib.rs", include_str!("../../guest-sdk/src/lib.rs")),
    ("host.rs", include_str!("../../guest-sdk/src/host.rs")),
    ("http.rs", include_str!("../../guest-sdk/src/http.rs")),
    ("router.rs", include_str!("../../guest-sdk/src/router.rs")),
    ("sockets.rs", include_str!("../../guest-sdk/src/sockets.rs")),
    ("state.rs", include_str!("../../guest-sdk/src/state.rs")),
];

/// The host/guest contract's sources.
const HOST_API: &[(&str, &str)] = &[
    ("lib.rs", include_str!("../../host-api/src/lib.rs")),
    ("imports.rs", include_str!("../../host-api/src/imports.rs")),
    ("sockets.rs", include_str!("../../host-api/src/sockets.rs")),
    ("wire.rs", include_str!("../../host-api/src/wire.rs")),
];

const SDK_MANIFEST: &str = r#"[package]
name = "stasis-guest-sdk"
description = "Write Stasis actors: an Actor trait and one export macro (written by stasis new)."
version = "0.1.0"
edition = "2024"
license = "Apache-2.0"
publish = false

[dependencies]
stasis-host-api = { path = "../host-api" }
serde = { version = "1", features = ["derive"] }
bincode = { version = "2.0.1", features = ["serde"] }
ciborium = { version = "0.2.2", default-features = false, features = ["std"] }
serde_json = "1"
"#;

const HOST_API_MANIFEST: &str = r#"[package]
name = "stasis-host-api"
description = "The Stasis host/guest contract (written by stasis new)."
version = "0.1.0"
edition = "2024"
license = "Apache-2.0"
publish = false

[dependencies]
serde = { version = "1", features = ["derive"] }
bincode = { version = "2.0.1", features = ["serde"] }
thiserror = "2"
"#;

/// A Rust project named `name`.
pub(super) fn rust(name: &str) -> Vec<(String, String)> {
    let mut files = vec![
        (
            "Cargo.toml".to_owned(),
            format!(
                r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

# A library: `cdylib` is the actor's module, `rlib` what `cargo test` runs.
[lib]
crate-type = ["cdylib", "rlib"]

[dependencies]
stasis-guest-sdk = {{ path = "sdk/guest-sdk" }}
serde = {{ version = "1", features = ["derive"] }}

# A workspace of its own, wherever the folder is.
[workspace]

[profile.release]
opt-level = "s"
"#
            ),
        ),
        ("src/lib.rs".to_owned(), RUST_ACTOR.to_owned()),
        (".gitignore".to_owned(), "target/\n".to_owned()),
        ("README.md".to_owned(), readme(Language::Rust, name)),
        (
            "sdk/guest-sdk/Cargo.toml".to_owned(),
            SDK_MANIFEST.to_owned(),
        ),
        (
            "sdk/host-api/Cargo.toml".to_owned(),
            HOST_API_MANIFEST.to_owned(),
        ),
    ];
    for (file, text) in SDK {
        files.push((format!("sdk/guest-sdk/src/{file}"), (*text).to_owned()));
    }
    for (file, text) in HOST_API {
        files.push((format!("sdk/host-api/src/{file}"), (*text).to_owned()));
    }
    files
}

/// A JavaScript project named `name`.
pub(super) fn js(name: &str) -> Vec<(String, String)> {
    vec![
        (format!("{name}.js"), JS_ACTOR.to_owned()),
        ("README.md".to_owned(), readme(Language::Js, name)),
    ]
}

/// What to run next, printed after the files are written.
pub(super) fn next_steps(language: Language, name: &str, root: &Path) -> String {
    let dir = root.display();
    match language {
        Language::Rust => format!(
            "made {dir}: a Rust actor\n\
             \x20 cd {dir}\n\
             \x20 cargo test                                        # the handler, in process\n\
             \x20 cargo build --release --target wasm32-wasip1\n\
             \x20 stasis template push {name} target/wasm32-wasip1/release/{file}.wasm\n\
             \x20 stasis actor create {name}-1 --template {name}\n\
             \x20 curl -X POST -H 'Host: {name}-1.actors.localhost' http://127.0.0.1:8000/count",
            file = name.replace('-', "_")
        ),
        Language::Js => format!(
            "made {dir}: a JavaScript actor\n\
             \x20 cd {dir}\n\
             \x20 stasis dev {name}.js                              # push, create {name}, follow its log; each save rolls out\n\
             \x20 curl -X POST -H 'Host: {name}.actors.localhost' http://127.0.0.1:8000/count"
        ),
        Language::Ts => super::ts::next_steps(name, &dir.to_string()),
        Language::C => super::c::next_steps(name, &dir.to_string()),
    }
}

pub(super) fn readme(language: Language, name: &str) -> String {
    let steps = next_steps(language, name, Path::new("."));
    let steps: Vec<&str> = steps.lines().skip(2).map(str::trim_start).collect();
    format!(
        "# {name}\n\nA Stasis actor: `GET /count` reads a counter, `POST /count` adds one \
         (answers `{{\"count\":N}}`). With `stasis serve` running:\n\n```sh\n{}\n```\n{}",
        steps.join("\n"),
        match language {
            Language::Rust => {
                "\nBuilding needs Rust's `wasm32-wasip1` target (`rustup target add wasm32-wasip1`). \
                 `sdk/` is the Stasis guest SDK this project was made with: the guide is \
                 docs/rust.md of Stasis, and `cargo doc --open` shows its API.\n"
            }
            Language::Ts => super::ts::README_TAIL,
            Language::C => super::c::README_TAIL,
            Language::Js => {
                "\n`save()` and `load()` hand the count to the next version when it is rolled out \
                 (`stasis dev` does at each save); the guide is docs/javascript.md of Stasis.\n"
            }
        }
    )
}

/// The Rust actor: a JSON counter on the SDK's router, with its state
/// handed over at upgrades, and a test of its handler.
const RUST_ACTOR: &str = r##"//! A Stasis actor: `GET /count` reads a counter, `POST /count` adds one;
//! both answer `{"count":N}`. Its state is the struct: it stays across
//! pauses, moves and restarts, and is handed over to a new version at a
//! live upgrade (a field added with `#[serde(default)]` needs nothing
//! more).

use serde::{Deserialize, Serialize};
use stasis_guest_sdk::prelude::*;

#[derive(Default, Serialize, Deserialize)]
struct Counter {
    count: u64,
}

#[derive(Serialize)]
struct Count {
    count: u64,
}

impl State for Counter {}

impl Counter {
    fn read(&mut self, _: &Request, _: &Params) -> Response {
        Response::json(&Count { count: self.count })
    }

    fn add(&mut self, _: &Request, _: &Params) -> Response {
        self.count += 1;
        Response::json(&Count { count: self.count })
    }
}

impl Actor for Counter {
    fn handle(&mut self, req: Request) -> Response {
        Router::new()
            .get("/count", Counter::read)
            .post("/count", Counter::add)
            .handle(self, &req)
    }
}

export_actor!(Counter, state);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posts_count_and_gets_read() {
        let mut actor = Counter::default();
        assert_eq!(actor.handle(Request::new("POST", "/count")).body, br#"{"count":1}"#);
        assert_eq!(actor.handle(Request::new("POST", "/count")).body, br#"{"count":2}"#);
        assert_eq!(actor.handle(Request::new("GET", "/count")).body, br#"{"count":2}"#);
        assert_eq!(actor.handle(Request::new("GET", "/nowhere")).status, 404);
    }
}
"##;

/// The JavaScript actor: the same counter, with `save`/`load` so that
/// `stasis dev` and upgrades keep its count.
const JS_ACTOR: &str = r#"// A Stasis actor: GET /count reads a counter, POST /count adds one; both
// answer {"count":N}. Module variables are its state (kept across pauses
// and moves); save() and load() hand it to the next version at an upgrade.
let count = 0;

export default {
  version: 1,
  async fetch(request) {
    const { pathname } = new URL(request.url);
    if (pathname !== "/count") {
      return new Response("not found", { status: 404 });
    }
    if (request.method === "POST") {
      count += 1;
    } else if (request.method !== "GET") {
      return new Response("method not allowed", { status: 405, headers: { allow: "GET, POST" } });
    }
    return Response.json({ count });
  },
  save() {
    return { count };
  },
  load(value, fromVersion) {
    count = value.count;
  },
};
"#;
