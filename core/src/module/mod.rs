//! Templates: validate a guest module, refuse what cannot be snapshotted,
//! rewrite it into the **spawn** and **resume** variants, compile each once
//! and cache the compiled code by module digest + engine configuration.
//!
//! The rewrite exports every defined mutable global as `__stasis_global_<i>`
//! and every defined memory as `__stasis_memory_<i>` (the technique of
//! Wizer's instrumentation pass, `wasmtime-wizer` 48 `src/instrument.rs`),
//! leaving every other section byte-for-byte, so function and global indices
//! are unchanged. The resume variant also drops the start section and turns
//! every active data segment into an empty passive one, so a fresh resume
//! instance has all-zero memory and nothing runs before the snapshot is
//! written back (research notes §4, pitfalls 1 and 2).

//!
//! Rooms: [`validate`] ([`analyze`]: the rules, and what a snapshot of the
//! module holds), [`rewrite`] ([`instrument`]: the two variants), [`cache`]
//! ([`ModuleCache`]: compile once, keep in memory and on disk), [`image`]
//! ([`InitialImage`]: the memories a spawn instance starts with). This file
//! holds the types they share and the compiled [`Template`].

use sha2::{Digest as _, Sha256};
use stasis_host_api::{ABI_SECTION, ABI_VERSION, MIN_ABI_VERSION};
use wasmtime::InstancePre;

use crate::host::Host;

pub mod cache;
pub mod image;
pub mod rewrite;
pub mod validate;

pub use cache::ModuleCache;
pub use image::InitialImage;
pub use rewrite::instrument;
pub use validate::analyze;

/// Prefix of the exported defined mutable globals added by the rewrite.
pub const GLOBAL_EXPORT_PREFIX: &str = "__stasis_global_";
/// Prefix of the exported defined memories added by the rewrite.
pub const MEMORY_EXPORT_PREFIX: &str = "__stasis_memory_";

/// SHA-256 of a template's original bytes.
pub type Digest = [u8; 32];

/// SHA-256 of `bytes`, the identity of a template.
#[must_use]
pub fn digest(bytes: &[u8]) -> Digest {
    Sha256::digest(bytes).into()
}

/// Why a module was not accepted as a template. Nothing is registered when
/// one of these is returned.
#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    /// Not a WebAssembly module at all (no `\0asm` version 1 preamble):
    /// what the bytes are instead, in one line.
    #[error("not a WebAssembly module: {0}")]
    NotWasm(String),
    /// Not valid WebAssembly (wasmparser's reason and byte offset, in one
    /// line).
    #[error("invalid wasm module: {0}")]
    Malformed(String),
    /// Valid, but uses a feature whose state a snapshot cannot carry; the
    /// message names the feature.
    #[error("module refused: {0}")]
    Refused(String),
    /// No `stasis-abi` custom section (not built with the guest SDK).
    #[error(
        "module refused: no `{ABI_SECTION}` custom section; build the actor with stasis-guest-sdk"
    )]
    MissingAbi,
    /// The ABI version is not the one this host speaks.
    #[error(
        "module refused: ABI version {found} is not supported (this host speaks {MIN_ABI_VERSION} to {ABI_VERSION})"
    )]
    AbiVersion {
        /// The version found in the module.
        found: u32,
    },
    /// An export the ABI requires is missing or has the wrong signature.
    #[error("module refused: export `{name}` must be a function {signature}")]
    Export {
        /// The export's name.
        name: &'static str,
        /// The expected signature, e.g. `(i32) -> i32`.
        signature: &'static str,
    },
    /// wasmtime could not compile or link the module.
    #[error("module refused by wasmtime: {0:#}")]
    Compile(anyhow::Error),
}

impl ModuleError {
    /// [`ModuleError::Malformed`] from a parser error, its message folded
    /// onto one line (wasmparser's can span several).
    #[must_use]
    pub fn malformed(e: &impl std::fmt::Display) -> Self {
        Self::Malformed(
            e.to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
        )
    }
}

/// The value type of a snapshotted global.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GlobalKind {
    /// `i32`
    I32,
    /// `i64`
    I64,
    /// `f32` (kept as raw bits)
    F32,
    /// `f64` (kept as raw bits)
    F64,
    /// `v128`
    V128,
}

/// A defined mutable global of the module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlobalInfo {
    /// Index in the module's global index space.
    pub index: u32,
    /// Its value type.
    pub kind: GlobalKind,
}

/// A defined memory of the module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryInfo {
    /// Index in the module's memory index space.
    pub index: u32,
    /// Initial size in 64 KiB pages.
    pub initial_pages: u64,
    /// Maximum size in 64 KiB pages, if declared.
    pub maximum_pages: Option<u64>,
}

/// What the analysis of a module found.
#[derive(Debug, Clone)]
pub struct ModuleInfo {
    /// SHA-256 of the original bytes.
    pub digest: Digest,
    /// The ABI version from the custom section.
    pub abi_version: u32,
    /// Defined mutable globals, in index order.
    pub globals: Vec<GlobalInfo>,
    /// Defined memories, in index order.
    pub memories: Vec<MemoryInfo>,
    /// Whether the module has a start section.
    pub has_start: bool,
    /// The layout it declares in its
    /// [`stasis_host_api::LAYOUT_SECTION`] section, if any.
    pub layout: Option<Vec<u8>>,
    /// Whether it exports [`stasis_host_api::exports::SAVE_STATE`] (an
    /// actor of it can hand its state over to another version).
    pub saves_state: bool,
    /// Whether it exports [`stasis_host_api::exports::LOAD_STATE`] (an
    /// actor can be handed its state from another version).
    pub loads_state: bool,
    /// A JavaScript template ([`stasis_host_api::JS_HAND_OVER_SECTION`]):
    /// its hand-over is the script's `save()` and `load(value,
    /// fromVersion)`, which `saves_state` and `loads_state` say it has.
    pub script: bool,
    /// The initial image of its memories ([`InitialImage`]), which its
    /// snapshots are taken against; `None` when it depends on the
    /// instance (a data segment at a non-constant offset).
    pub image: Option<std::sync::Arc<InitialImage>>,
}

impl ModuleInfo {
    /// Why an actor of `self` cannot hand its state over to a fresh
    /// instance of `new` (state hand-over, see
    /// [`stasis_host_api::exports::SAVE_STATE`]); `None` when it can.
    #[must_use]
    pub fn hand_over_refusal(&self, new: &ModuleInfo) -> Option<String> {
        use stasis_host_api::exports::{LOAD_STATE, SAVE_STATE};
        if self.script || new.script {
            return script_hand_over_refusal(self, new);
        }
        match (self.saves_state, new.loads_state) {
            (true, true) => None,
            (false, true) => Some(format!("the running version exports no `{SAVE_STATE}`")),
            (true, false) => Some(format!("the new version exports no `{LOAD_STATE}`")),
            (false, false) => Some(format!(
                "neither exports the hand-over pair (`{SAVE_STATE}` before, `{LOAD_STATE}` now)"
            )),
        }
    }
}

/// [`ModuleInfo::hand_over_refusal`] where a version is a JavaScript
/// template: what its script must export, in its words.
fn script_hand_over_refusal(old: &ModuleInfo, new: &ModuleInfo) -> Option<String> {
    let export = "export `save()` and `load(value, fromVersion)` on the script's default export";
    match (old.script, new.script) {
        (true, true) => match (old.saves_state, new.loads_state) {
            (true, true) => None,
            (false, true) => Some(format!(
                "the running version's script has no save() ({export})"
            )),
            (true, false) => Some(format!(
                "the new version's script has no load(value, fromVersion) ({export})"
            )),
            (false, false) => Some(format!(
                "neither script takes part in a hand-over ({export})"
            )),
        },
        _ => Some(
            "one version is a JavaScript template and the other is not: their states do not \
             translate"
                .to_owned(),
        ),
    }
}

impl ModuleInfo {
    /// Why an actor's memory and globals, as a snapshot taken under
    /// `self`, cannot be carried over into `new` (memory carry-over, see
    /// [`stasis_host_api::LAYOUT_SECTION`]): the first difference found,
    /// in words; `None` when they can.
    #[must_use]
    pub fn carry_over_refusal(&self, new: &ModuleInfo) -> Option<String> {
        let shown = |layout: &Option<Vec<u8>>| match layout {
            Some(bytes) => format!("{:?}", String::from_utf8_lossy(bytes)),
            None => "none".to_owned(),
        };
        let section = stasis_host_api::LAYOUT_SECTION;
        match (&self.layout, &new.layout) {
            (Some(old), Some(now)) if old == now && !old.is_empty() => {}
            (None, None) => {
                return Some(format!(
                    "neither version declares a layout (custom section `{section}`){}",
                    if self.script || new.script {
                        ": a JavaScript heap is never carried over"
                    } else {
                        ""
                    }
                ));
            }
            _ => {
                return Some(format!(
                    "the layouts declared differ (custom section `{section}`: {} before, {} now)",
                    shown(&self.layout),
                    shown(&new.layout)
                ));
            }
        }
        if self.memories.len() != new.memories.len() {
            return Some(format!(
                "{} memories before, {} now",
                self.memories.len(),
                new.memories.len()
            ));
        }
        if self.globals.len() != new.globals.len() {
            return Some(format!(
                "{} mutable globals before, {} now",
                self.globals.len(),
                new.globals.len()
            ));
        }
        self.globals
            .iter()
            .zip(&new.globals)
            .find(|(old, now)| old != now)
            .map(|(old, now)| {
                format!(
                    "mutable global {} ({:?}) before is global {} ({:?}) now",
                    old.index, old.kind, now.index, now.kind
                )
            })
    }
}

/// Which rewrite of a template to produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Start section and data segments kept: for creating an actor.
    Spawn,
    /// Start section dropped, data segments emptied: for restoring one.
    Resume,
}

impl Variant {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Variant::Spawn => "spawn",
            Variant::Resume => "resume",
        }
    }
}

/// A template compiled for one engine: both variants, pre-linked against
/// WASI, ready to instantiate.
pub struct Template {
    /// What [`analyze`] found.
    pub info: ModuleInfo,
    /// The spawn variant (start function and data segments kept).
    pub spawn: InstancePre<Host>,
    /// The resume variant (all-zero memory, no start function).
    pub resume: InstancePre<Host>,
}

impl std::fmt::Debug for Template {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Template")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}
