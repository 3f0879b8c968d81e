//! Where cargo put the `stasis` binary and the demo actors, and the command
//! lines that start `stasis serve` and `stasis worker run` from them.
//!
//! Only the root crate's tests and benches see `CARGO_BIN_EXE_stasis` and
//! `STASIS_DEMOS_DIR` (set by its `build.rs`), so they name them with the
//! [`artifacts!`](crate::artifacts!) macro, which expands in their crate.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `stasis` binary under test and the folder of built demo actors.
#[derive(Debug, Clone, Copy)]
pub struct Artifacts {
    /// Path of the `stasis` executable.
    pub bin: &'static str,
    /// Folder holding `<name>.wasm` for each demo actor.
    pub demos_dir: &'static str,
}

/// The [`Artifacts`] of the calling crate (`tests/all` or a bench of the
/// root crate): `env!` must expand there, hence a macro.
#[macro_export]
macro_rules! artifacts {
    () => {
        $crate::Artifacts {
            bin: env!("CARGO_BIN_EXE_stasis"),
            demos_dir: env!("STASIS_DEMOS_DIR"),
        }
    };
}

impl Artifacts {
    /// Path of the demo actor module `name` (`counter`, `kv`, `echo`,
    /// `faulty`).
    #[must_use]
    pub fn demo(&self, name: &str) -> PathBuf {
        Path::new(self.demos_dir).join(format!("{name}.wasm"))
    }

    /// The bytes of the demo actor module `name`; panics if it is missing.
    #[must_use]
    pub fn demo_wasm(&self, name: &str) -> Vec<u8> {
        let path = self.demo(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
    }

    /// A command running the `stasis` binary with no arguments yet.
    #[must_use]
    pub fn command(&self) -> Command {
        Command::new(self.bin)
    }

    /// `stasis serve --data-dir DATA_DIR` on loopback with ports picked by
    /// the kernel (so tests in one process never collide), then `extra`.
    #[must_use]
    pub fn serve(&self, data_dir: &Path, extra: &[&str]) -> Command {
        let mut command = self.command();
        command.arg("serve").arg("--data-dir").arg(data_dir);
        // Kernel-picked loopback ports unless `extra` names its own (a
        // restart that workers must find again at the same admin address).
        for flag in ["--listen", "--admin-listen"] {
            if !extra.contains(&flag) {
                command.args([flag, "127.0.0.1:0"]);
            }
        }
        command.args(extra);
        command
    }

    /// `stasis worker run` named `name`, joining the admin API at
    /// `join_url` (`http://HOST:PORT`), listening on a kernel-picked
    /// loopback port, with its own `data_dir`.
    #[must_use]
    pub fn worker(&self, join_url: &str, name: &str, data_dir: &Path) -> Command {
        let mut command = self.command();
        command
            .args(["worker", "run", "--join", join_url])
            .args(["--listen", "127.0.0.1:0", "--name", name, "--data-dir"])
            .arg(data_dir);
        command
    }
}
