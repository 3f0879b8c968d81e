//! Builds the demo actors (`demos/`) for `wasm32-wasip1` into
//! `<target>/demos/<name>.wasm`, once per change of their sources, and the C
//! demo actors (`demos-c/`, see [`build_c_demos`]) with clang and wasi-libc
//! where those are installed. The JavaScript engine (`demos/js-engine`,
//! QuickJS in C) is built with the same clang through a WASI SDK shim (see
//! [`wasi_sdk_shim`]), or skipped with the C demos; `stasis template push`
//! embeds it (an empty `js-engine.wasm` when skipped).
//!
//! The nested cargo call gets its own target folder (the outer build holds
//! the lock on ours) and a clean environment: host `RUSTFLAGS` must not leak
//! into the wasm build. The folder is exported to the crate as
//! `STASIS_DEMOS_DIR`, so tests and the CLI find the demos.

use std::path::{Path, PathBuf};
use std::process::Command;

const DEMOS: [&str; 12] = [
    "counter",
    "counter-v2",
    "kv",
    "echo",
    "faulty",
    "caller",
    "fetch",
    "alarm",
    "chat",
    "ticker",
    "todo-v1",
    "todo-v2",
];

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| if t.is_absolute() { t } else { root.join(t) })
        .unwrap_or_else(|| root.join("target"));
    for dir in ["demos", "guest-sdk", "host-api", "demos-c", "guest-sdk-c"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");
    let out = target.join("demos");
    println!("cargo:rustc-env=STASIS_DEMOS_DIR={}", out.display());

    for var in ["STASIS_CLANG", "WASI_SYSROOT"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let clang = std::env::var("STASIS_CLANG").unwrap_or_else(|_| "clang".to_owned());
    let toolchain = c_toolchain(&clang);
    let js_engine = toolchain
        .clone()
        .and_then(|sysroot| wasi_sdk_shim(&clang, &target, &sysroot).map(|shim| (shim, sysroot)));

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
    match &js_engine {
        // rquickjs-sys compiles QuickJS with `$WASI_SDK/bin/clang` and
        // generates its bindings with libclang.
        Ok((shim, sysroot)) => {
            cmd.env("WASI_SDK", shim).env(
                "BINDGEN_EXTRA_CLANG_ARGS",
                format!("--target=wasm32-wasi --sysroot={}", sysroot.display()),
            );
        }
        Err(_) => {
            cmd.args(["--workspace", "--exclude", "js-engine"]);
        }
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
            // (cargo names a `cdylib` after its crate, `-` as `_`.)
            &built.join(format!("{}.wasm", demo.replace('-', "_"))),
            &out.join(format!("{demo}.wasm")),
        );
    }
    let engine = out.join("js-engine.wasm");
    match &js_engine {
        Ok(_) => copy_if_changed(&built.join("js_engine.wasm"), &engine),
        Err(reason) => {
            println!(
                "cargo:warning=the JavaScript engine (demos/js-engine) not built: {reason}; \
                 install clang, lld, llvm, wasi-libc and libclang-rt-dev-wasm32 \
                 (scripts/install-test-deps.sh does), then touch demos/js-engine/src/lib.rs"
            );
            std::fs::write(&engine, b"").expect("write the empty js-engine.wasm");
        }
    }
    println!(
        "cargo:rustc-env=STASIS_JS_ENGINE_SKIPPED={}",
        js_engine.as_ref().err().map_or("", String::as_str)
    );
    build_c_demos(&root, &target, &out, &clang, toolchain);
}

/// A WASI SDK folder (`<target>/wasi-sdk-shim`) made of Debian's tools, so
/// that rquickjs-sys's build script finds a compiler instead of
/// downloading one: `bin/clang` runs `clang` with the target
/// `wasm32-wasip1` spelled `wasm32-wasi` (clang 14's name for it),
/// `bin/ar` is `llvm-ar`, `share/wasi-sysroot` the wasi-libc sysroot.
fn wasi_sdk_shim(clang: &str, target: &Path, sysroot: &Path) -> Result<PathBuf, String> {
    let output = Command::new(clang)
        .arg("-print-prog-name=llvm-ar")
        .output()
        .map_err(|e| format!("`{clang}` does not run ({e})"))?;
    let ar = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if Command::new(&ar).arg("--version").output().is_err() {
        return Err("`llvm-ar` (Debian's llvm) is missing".to_owned());
    }
    let shim = target.join("wasi-sdk-shim");
    let bin = shim.join("bin");
    std::fs::create_dir_all(&bin).map_err(|e| format!("create {}: {e}", bin.display()))?;
    std::fs::create_dir_all(shim.join("share")).map_err(|e| format!("create the shim: {e}"))?;
    let script = format!(
        "#!/bin/sh\n# clang 14 knows the target wasm32-wasip1 as wasm32-wasi.\n\
         for a in \"$@\"; do\n  shift\n  case \"$a\" in\n    \
         --target=wasm32-wasip1) a=--target=wasm32-wasi ;;\n    \
         wasm32-wasip1) a=wasm32-wasi ;;\n  esac\n  set -- \"$@\" \"$a\"\ndone\n\
         exec '{clang}' \"$@\"\n"
    );
    write_executable(&bin.join("clang"), &script)?;
    write_executable(&bin.join("ar"), &format!("#!/bin/sh\nexec '{ar}' \"$@\"\n"))?;
    let link = shim.join("share/wasi-sysroot");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(sysroot, &link)
        .map_err(|e| format!("link {}: {e}", link.display()))?;
    Ok(shim)
}

fn write_executable(path: &Path, text: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let is_file = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file());
    if !is_file || std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        // Removed first: writing through a link left there would overwrite
        // what it points to.
        let _ = std::fs::remove_file(path);
        std::fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("chmod {}: {e}", path.display()))
}

fn copy_if_changed(from: &Path, to: &Path) {
    let new = std::fs::read(from).unwrap_or_else(|e| panic!("read {}: {e}", from.display()));
    if std::fs::read(to).ok().as_deref() != Some(&new[..]) {
        std::fs::write(to, &new).unwrap_or_else(|e| panic!("write {}: {e}", to.display()));
    }
}

/// The C demo actors: output name in `<target>/demos/` and source file.
const C_DEMOS: [(&str, &str); 2] = [
    ("counter-c", "demos-c/counter.c"),
    ("caller-c", "demos-c/caller.c"),
];

/// Sysroots tried, in order, when `WASI_SYSROOT` is unset: Debian's
/// `wasi-libc` package (`/usr/lib/wasm32-wasi`), then the wasi-sdk layouts.
const SYSROOTS: [&str; 3] = [
    "/usr",
    "/usr/share/wasi-sysroot",
    "/opt/wasi-sdk/share/wasi-sysroot",
];

/// Builds [`C_DEMOS`] with clang (`STASIS_CLANG`, default `clang`) for
/// `wasm32-wasi` as WASI reactors, against the wasi-libc sysroot
/// (`WASI_SYSROOT` or the first of [`SYSROOTS`] holding
/// `lib/wasm32-wasi/libc.a`). If clang, `wasm-ld`, the sysroot or the
/// wasm32 compiler-rt builtins are missing, the C demos are skipped with a
/// `cargo:warning` and their old outputs removed; the reason reaches the
/// crate as `STASIS_C_DEMOS_SKIPPED` (empty when they were built), so tests
/// can say why they skip. A compiler error with the tools present fails the
/// build.
fn build_c_demos(
    root: &Path,
    target: &Path,
    out: &Path,
    clang: &str,
    toolchain: Result<PathBuf, String>,
) {
    let skipped = match toolchain {
        Ok(sysroot) => {
            let build = target.join("demos-build/c");
            std::fs::create_dir_all(&build).expect("create target/demos-build/c");
            for (name, source) in C_DEMOS {
                let wasm = build.join(format!("{name}.wasm"));
                compile_c_demo(clang, &sysroot, root, &root.join(source), &wasm);
                copy_if_changed(&wasm, &out.join(format!("{name}.wasm")));
            }
            String::new()
        }
        Err(reason) => {
            println!(
                "cargo:warning=C demo actors ({}) not built: {reason}; install clang, lld, \
                 wasi-libc and libclang-rt-dev-wasm32 (scripts/install-test-deps.sh does), \
                 then touch demos-c/counter.c",
                C_DEMOS.map(|(name, _)| name).join(", ")
            );
            for (name, _) in C_DEMOS {
                let _ = std::fs::remove_file(out.join(format!("{name}.wasm")));
            }
            reason
        }
    };
    println!("cargo:rustc-env=STASIS_C_DEMOS_SKIPPED={skipped}");
}

/// Checks that `clang` can build a wasm32-wasi reactor; returns the sysroot
/// or why not.
fn c_toolchain(clang: &str) -> Result<PathBuf, String> {
    let query = |arg: &str| -> Result<String, String> {
        let output = Command::new(clang)
            .args(["--target=wasm32-wasi", arg])
            .output()
            .map_err(|e| format!("`{clang}` does not run ({e})"))?;
        if !output.status.success() {
            return Err(format!("`{clang} {arg}` failed"));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    };
    let linker = query("-print-prog-name=wasm-ld")?;
    if Command::new(&linker).arg("--version").output().is_err() {
        return Err(format!("the wasm linker `{linker}` (lld) is missing"));
    }
    let builtins = PathBuf::from(query("-print-libgcc-file-name")?);
    if !builtins.is_file() {
        return Err(format!(
            "the wasm32 compiler-rt builtins ({}) are missing",
            builtins.display()
        ));
    }
    let has_libc = |dir: &Path| dir.join("lib/wasm32-wasi/libc.a").is_file();
    match std::env::var_os("WASI_SYSROOT") {
        Some(dir) if has_libc(Path::new(&dir)) => Ok(PathBuf::from(dir)),
        Some(dir) => Err(format!(
            "WASI_SYSROOT={} holds no lib/wasm32-wasi/libc.a",
            Path::new(&dir).display()
        )),
        None => SYSROOTS
            .iter()
            .map(PathBuf::from)
            .find(|dir| has_libc(dir))
            .ok_or_else(|| format!("no wasi-libc sysroot in {}", SYSROOTS.join(", "))),
    }
}

/// Compiles one C actor into `wasm` (see `guest-sdk-c/stasis.h` for the
/// command); panics with clang's output if it fails, passes its warnings on.
fn compile_c_demo(clang: &str, sysroot: &Path, root: &Path, source: &Path, wasm: &Path) {
    let output = Command::new(clang)
        .args([
            "--target=wasm32-wasi",
            "-mexec-model=reactor",
            "-std=c11",
            "-O2",
        ])
        .args(["-Wall", "-Wextra", "-Wpedantic", "-Wl,--strip-debug"])
        .arg(format!("--sysroot={}", sysroot.display()))
        .arg("-I")
        .arg(root.join("guest-sdk-c"))
        .arg("-o")
        .arg(wasm)
        .arg(source)
        .output()
        .unwrap_or_else(|e| panic!("run {clang}: {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        panic!("building {} failed: {stderr}", source.display());
    }
    for line in stderr.lines() {
        println!("cargo:warning={line}");
    }
}
