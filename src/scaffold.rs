//! `stasis new rust|js|ts|c NAME`: a new actor project in folder NAME, outside
//! any checkout of Stasis, that builds with one command and pushes with
//! the next. A Rust project carries the guest SDK (and the host/guest
//! contract it depends on) in `sdk/`, written from this binary, so it
//! builds without this repository or a path to edit; its actor is a small
//! JSON counter on the SDK's router, with a test that runs the handler in
//! process (`cargo test`). A JavaScript project is one script with
//! `save`/`load`, ready for `stasis template push` or `stasis dev`; a
//! TypeScript project is the same counter as `actor.ts` importing a module
//! of its own, with `stasis.d.ts` (the engine's types) and a
//! `tsconfig.json` for `tsc --noEmit`. A C project is the counter in
//! `actor.c` with the header-only C SDK beside it and `build.sh`, its
//! clang command.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};

mod c;
mod files;
mod ts;

/// The languages a project can be made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Language {
    /// A Rust crate built for wasm32-wasip1 with the guest SDK.
    Rust,
    /// A JavaScript module (`export default { fetch }`).
    Js,
    /// A TypeScript module importing one of its own, with the engine's
    /// types (`stasis.d.ts`) and a `tsconfig.json` for `tsc --noEmit`.
    Ts,
    /// A C file built with clang and wasi-libc, with the header-only C SDK.
    C,
}

/// `stasis new`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct NewArgs {
    /// The language of the actor.
    language: Language,
    /// The project's name: the folder, and the template it pushes as
    /// (1-63 of a-z, 0-9 and -).
    name: String,
    /// Where to make the folder (default: the current directory).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Makes the project (see the module docs) and prints what to run next.
///
/// # Errors
/// A bad name, a folder that exists already, or a write that fails.
pub(crate) fn run(args: &NewArgs) -> anyhow::Result<()> {
    stasis_runtime::contract::names::check_label("project", &args.name)?;
    if args.language == Language::Rust {
        if args.name.starts_with(|c: char| c.is_ascii_digit()) {
            bail!(
                "{:?}: a Rust package name cannot start with a digit",
                args.name
            );
        }
        if [
            "serde",
            "stasis-guest-sdk",
            "stasis-host-api",
            "test",
            "core",
            "std",
        ]
        .contains(&args.name.as_str())
        {
            bail!(
                "{:?} is the name of a crate the project uses: pick another",
                args.name
            );
        }
    }
    let parent = args.dir.clone().unwrap_or_else(|| PathBuf::from("."));
    let root = parent.join(&args.name);
    if root.exists() {
        bail!(
            "{} exists already: pick another name or remove it",
            root.display()
        );
    }
    let files = match args.language {
        Language::Rust => files::rust(&args.name),
        Language::Js => files::js(&args.name),
        Language::Ts => ts::files(&args.name),
        Language::C => c::files(&args.name),
    };
    for (path, text) in &files {
        write(&root, path, text)?;
    }
    println!("{}", files::next_steps(args.language, &args.name, &root));
    Ok(())
}

fn write(root: &Path, path: &str, text: &str) -> anyhow::Result<()> {
    let path = root.join(path);
    if let Some(folder) = path.parent() {
        std::fs::create_dir_all(folder)
            .with_context(|| format!("cannot make {}", folder.display()))?;
    }
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
}
