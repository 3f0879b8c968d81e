//! `stasis new rust|js|c NAME` (issue 49, item 5) through the real binary:
//! the projects it makes, in a folder outside the repository, build with
//! one command (Rust: `cargo build --target wasm32-wasip1`, with the SDK
//! it wrote into the project; its own test passes with `cargo test`) and
//! push and answer with the next (C: `sh build.sh`, clang and wasi-libc);
//! a name that is taken or bad is refused.

use std::process::Command;

use crate::js::engine_built;
use crate::support::{Server, client, to_actor};

/// Runs `cargo ARGS` in `dir` with its own target folder; asserts success.
fn cargo(dir: &std::path::Path, target: &std::path::Path, args: &[&str]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args(args)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target)
        .env_remove("RUSTFLAGS")
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "cargo {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_projects_build_push_and_answer() {
    let server = Server::start(&["--workers", "1"]);
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().to_str().expect("utf-8");
    let made = server.cli_ok(&["new", "rust", "hello-rs", "--dir", dir]);
    assert!(
        made.contains("cargo build --release --target wasm32-wasip1"),
        "{made}"
    );
    // Taken, or not a name: refused, nothing changed.
    let again = server.cli(&["new", "rust", "hello-rs", "--dir", dir]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists already"));
    let bad = server.cli(&["new", "js", "Bad_Name", "--dir", dir]);
    assert!(!bad.status.success());

    let project = tmp.path().join("hello-rs");
    let target = tmp.path().join("target");
    cargo(&project, &target, &["test", "--quiet"]);
    cargo(
        &project,
        &target,
        &["build", "--release", "--quiet", "--target", "wasm32-wasip1"],
    );
    let wasm = target.join("wasm32-wasip1/release/hello_rs.wasm");
    server.cli_ok(&[
        "template",
        "push",
        "hello-rs",
        wasm.to_str().expect("utf-8"),
    ]);
    server.create("h1", "hello-rs");
    let c = client();
    for n in 1..=2 {
        let answer = to_actor(&c, server.ingress, "h1", "POST", "/count").await;
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_eq!(answer.body, format!(r#"{{"count":{n}}}"#));
    }
    server.cli_ok(&["actor", "pause", "h1"]);
    let answer = to_actor(&c, server.ingress, "h1", "GET", "/count").await;
    assert_eq!(answer.body, r#"{"count":2}"#);

    if engine_built() {
        server.cli_ok(&["new", "js", "hello-js", "--dir", dir]);
        let script = tmp.path().join("hello-js/hello-js.js");
        server.cli_ok(&[
            "template",
            "push",
            "hello-js",
            script.to_str().expect("utf-8"),
        ]);
        server.create("j1", "hello-js");
        let answer = to_actor(&c, server.ingress, "j1", "POST", "/count").await;
        assert_eq!(answer.body, r#"{"count":1}"#, "{answer:?}");
        let answer = to_actor(&c, server.ingress, "j1", "GET", "/nowhere").await;
        assert_eq!(answer.status, 404);
    }

    // A C project: `sh build.sh` (clang and wasi-libc, as the C demos).
    if crate::c_sdk::c_demos_built() {
        server.cli_ok(&["new", "c", "hello-c", "--dir", dir]);
        let project = tmp.path().join("hello-c");
        let mut build = std::process::Command::new("sh");
        build.arg("build.sh").current_dir(&project);
        if let Some(clang) = std::env::var_os("STASIS_CLANG") {
            build.env("CLANG", clang);
        }
        let built = build.output().expect("sh build.sh");
        assert!(
            built.status.success(),
            "sh build.sh: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        let wasm = project.join("actor.wasm");
        server.cli_ok(&["template", "push", "hello-c", wasm.to_str().expect("utf-8")]);
        server.create("c1", "hello-c");
        for n in 1..=2 {
            let answer = to_actor(&c, server.ingress, "c1", "POST", "/count").await;
            assert_eq!(answer.body, format!(r#"{{"count":{n}}}"#), "{answer:?}");
        }
        server.cli_ok(&["actor", "pause", "c1"]);
        let answer = to_actor(&c, server.ingress, "c1", "GET", "/count").await;
        assert_eq!(answer.body, r#"{"count":2}"#, "{answer:?}");
        let answer = to_actor(&c, server.ingress, "c1", "DELETE", "/count").await;
        assert_eq!(answer.status, 405, "{answer:?}");
    }
}
