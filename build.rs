//! Builds the demo actors (`demos/`) for `wasm32-wasip1` into
//! `<target>/demos/<name>.wasm`, once per change of their sources.
//!
//! The nested cargo call gets its own target folder (the outer build holds
//! the lock on ours) and a clean environment: host `RUSTFLAGS` must not leak
//! into the wasm build. The folder is exported to the crate as
//! `STASIS_DEMOS_DIR`, so tests and the CLI find the demos.

use std::path::{Path, PathBuf};
use std::process::Command;

const DEMOS: [&str; 6] = ["counter", "kv", "echo", "faulty", "caller", "alarm"];

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| if t.is_absolute() { t } else { root.join(t) })
        .unwrap_or_else(|| root.join("target"));
    for dir in ["demos", "guest-sdk", "host-api"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");
    let out = target.join("demos");
    println!("cargo:rustc-env=STASIS_DEMOS_DIR={}", out.display());

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root.join("demos"))
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip1",
            "--target-dir",
        ])
        .arg(target.join("demos-build"));
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_PROFILE_RELEASE_DEBUG",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd
        .status()
        .expect("could not run cargo for the demo actors");
    if !status.success() {
        panic!(
            "building the demo actors failed ({status}); is the wasm target installed? \
             run `rustup target add wasm32-wasip1`"
        );
    }
    std::fs::create_dir_all(&out).expect("create target/demos");
    let built = target.join("demos-build/wasm32-wasip1/release");
    for demo in DEMOS {
        copy_if_changed(
            &built.join(format!("{demo}.wasm")),
            &out.join(format!("{demo}.wasm")),
        );
    }
}

fn copy_if_changed(from: &Path, to: &Path) {
    let new = std::fs::read(from).unwrap_or_else(|e| panic!("read {}: {e}", from.display()));
    if std::fs::read(to).ok().as_deref() != Some(&new[..]) {
        std::fs::write(to, &new).unwrap_or_else(|e| panic!("write {}: {e}", to.display()));
    }
}
