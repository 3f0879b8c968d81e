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

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use sha2::{Digest as _, Sha256};
use stasis_host_api::{ABI_SECTION, ABI_VERSION, WASI_MODULE, exports};
use wasm_encoder::{ExportKind, ExportSection, RawSection};
use wasmparser::{ExternalKind, Operator, Parser, Payload, TypeRef, ValType, Validator};
use wasmtime::{Engine, InstancePre, Linker, Module};

use crate::instance::Host;

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
    /// Not valid WebAssembly (wasmparser's reason and byte offset).
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
        "module refused: ABI version {found} is not supported (this host speaks {ABI_VERSION})"
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
    fn name(self) -> &'static str {
        match self {
            Variant::Spawn => "spawn",
            Variant::Resume => "resume",
        }
    }
}

fn refused(what: impl Into<String>) -> ModuleError {
    ModuleError::Refused(what.into())
}

/// Validates `bytes` and checks every rule of the snapshot design: only WASI
/// preview 1 imports, no imported memory/table/global, no shared memory, no
/// memory64, no custom page sizes, no mutable reference-typed globals, no
/// `table.set/grow/fill/copy/init`, `elem.drop` or `data.drop`, no export in
/// the reserved `__stasis_` prefix, and an ABI custom section this host
/// speaks. Runs no guest code.
///
/// # Errors
/// A [`ModuleError`] naming the first problem found.
pub fn analyze(bytes: &[u8]) -> Result<ModuleInfo, ModuleError> {
    Validator::new()
        .validate_all(bytes)
        .map_err(|e| ModuleError::Malformed(e.to_string()))?;
    let mut info = ModuleInfo {
        digest: digest(bytes),
        abi_version: 0,
        globals: Vec::new(),
        memories: Vec::new(),
        has_start: false,
    };
    let mut abi = None;
    let mut imports_wasi = false;
    let mut exports_memory = false;
    let mut imported_funcs = 0u32;
    let mut func_index = 0u32;
    let malformed = |e: wasmparser::BinaryReaderError| ModuleError::Malformed(e.to_string());
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(malformed)? {
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import.map_err(malformed)?;
                    let what = format!("`{}`.`{}`", import.module, import.name);
                    match import.ty {
                        TypeRef::Func(_) | TypeRef::FuncExact(_) => imported_funcs += 1,
                        TypeRef::Memory(_) => {
                            return Err(refused(format!("imported memory {what}")));
                        }
                        TypeRef::Table(_) => return Err(refused(format!("imported table {what}"))),
                        TypeRef::Global(_) => {
                            return Err(refused(format!("imported global {what}")));
                        }
                        TypeRef::Tag(_) => return Err(refused(format!("imported tag {what}"))),
                    }
                    imports_wasi |= import.module == WASI_MODULE;
                    if import.module != WASI_MODULE {
                        return Err(refused(format!(
                            "import {what}: only WASI preview 1 (`{WASI_MODULE}`) may be imported"
                        )));
                    }
                }
            }
            Payload::MemorySection(reader) => {
                for (i, memory) in reader.into_iter().enumerate() {
                    let memory = memory.map_err(malformed)?;
                    if memory.shared {
                        return Err(refused("shared memory (threads)"));
                    }
                    if memory.memory64 {
                        return Err(refused("memory64"));
                    }
                    if memory.page_size_log2.is_some_and(|l| l != 16) {
                        return Err(refused("custom page sizes"));
                    }
                    info.memories.push(MemoryInfo {
                        index: u32::try_from(i).map_err(|_| refused("too many memories"))?,
                        initial_pages: memory.initial,
                        maximum_pages: memory.maximum,
                    });
                }
            }
            Payload::GlobalSection(reader) => {
                for (i, global) in reader.into_iter().enumerate() {
                    let global = global.map_err(malformed)?;
                    // Imported globals are refused, so defined globals start at 0.
                    let index = u32::try_from(i).unwrap_or(u32::MAX);
                    if !global.ty.mutable {
                        continue;
                    }
                    let kind = match global.ty.content_type {
                        ValType::I32 => GlobalKind::I32,
                        ValType::I64 => GlobalKind::I64,
                        ValType::F32 => GlobalKind::F32,
                        ValType::F64 => GlobalKind::F64,
                        ValType::V128 => GlobalKind::V128,
                        ValType::Ref(_) => {
                            return Err(refused(format!(
                                "mutable reference-typed global (global {index})"
                            )));
                        }
                    };
                    info.globals.push(GlobalInfo { index, kind });
                }
            }
            Payload::ExportSection(reader) => {
                for export in reader {
                    let export = export.map_err(malformed)?;
                    if export.name.starts_with(exports::RESERVED_PREFIX) {
                        return Err(refused(format!(
                            "export `{}` uses the reserved prefix `{}`",
                            export.name,
                            exports::RESERVED_PREFIX
                        )));
                    }
                    exports_memory |=
                        export.kind == ExternalKind::Memory && export.name == "memory";
                    if export.kind == ExternalKind::Tag {
                        return Err(refused("exception tags"));
                    }
                }
            }
            Payload::StartSection { .. } => info.has_start = true,
            Payload::CodeSectionEntry(body) => {
                let index = imported_funcs + func_index;
                func_index += 1;
                let mut ops = body.get_operators_reader().map_err(malformed)?;
                while !ops.eof() {
                    if let Some(name) = refused_operator(&ops.read().map_err(malformed)?) {
                        return Err(refused(format!(
                            "`{name}` in function {index}: table and segment state cannot be \
                             snapshotted"
                        )));
                    }
                }
            }
            Payload::CustomSection(section) if section.name() == ABI_SECTION => {
                let data: [u8; 4] = section.data().try_into().map_err(|_| {
                    refused(format!(
                        "`{ABI_SECTION}` section must hold 4 bytes, has {}",
                        section.data().len()
                    ))
                })?;
                abi = Some(u32::from_le_bytes(data));
            }
            _ => {}
        }
    }
    if info.memories.is_empty() {
        return Err(refused(
            "no linear memory: the ABI passes requests through memory 0",
        ));
    }
    if imports_wasi && !exports_memory {
        return Err(refused(
            "WASI imports without a `memory` export (WASI preview 1 reads and writes through it)",
        ));
    }
    info.abi_version = abi.ok_or(ModuleError::MissingAbi)?;
    if info.abi_version != ABI_VERSION {
        return Err(ModuleError::AbiVersion {
            found: info.abi_version,
        });
    }
    Ok(info)
}

fn refused_operator(op: &Operator<'_>) -> Option<&'static str> {
    Some(match op {
        Operator::TableSet { .. } => "table.set",
        Operator::TableGrow { .. } => "table.grow",
        Operator::TableFill { .. } => "table.fill",
        Operator::TableCopy { .. } => "table.copy",
        Operator::TableInit { .. } => "table.init",
        Operator::ElemDrop { .. } => "elem.drop",
        Operator::DataDrop { .. } => "data.drop",
        _ => return None,
    })
}

/// Rewrites an analysed module into `variant` (see the module docs).
///
/// # Errors
/// [`ModuleError::Malformed`] if the bytes do not parse (they were validated
/// by [`analyze`], so this means they changed in between).
pub fn instrument(
    bytes: &[u8],
    info: &ModuleInfo,
    variant: Variant,
) -> Result<Vec<u8>, ModuleError> {
    let malformed = |e: wasmparser::BinaryReaderError| ModuleError::Malformed(e.to_string());
    let mut module = wasm_encoder::Module::new();
    let mut added = ExportSection::new();
    append_exports(&mut added, info);
    let mut exports_written = false;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(malformed)?;
        match &payload {
            Payload::ExportSection(reader) => {
                let mut section = ExportSection::new();
                for export in reader.clone() {
                    let export = export.map_err(malformed)?;
                    let kind = match export.kind {
                        ExternalKind::Func | ExternalKind::FuncExact => ExportKind::Func,
                        ExternalKind::Table => ExportKind::Table,
                        ExternalKind::Memory => ExportKind::Memory,
                        ExternalKind::Global => ExportKind::Global,
                        ExternalKind::Tag => ExportKind::Tag,
                    };
                    section.export(export.name, kind, export.index);
                }
                append_exports(&mut section, info);
                module.section(&section);
                exports_written = true;
                continue;
            }
            Payload::End(_) => {
                if !exports_written {
                    module.section(&added);
                }
                continue;
            }
            _ => {}
        }
        let Some((id, range)) = payload.as_section() else {
            continue;
        };
        // Sections that must follow the export section: start (8), element
        // (9), data count (12), code (10), data (11).
        if !exports_written && matches!(id, 8..=12) {
            module.section(&added);
            exports_written = true;
        }
        match (&payload, variant) {
            (Payload::StartSection { .. }, Variant::Resume) => {}
            (Payload::DataSection(reader), Variant::Resume) => {
                let mut data = wasm_encoder::DataSection::new();
                for segment in reader.clone() {
                    let segment = segment.map_err(malformed)?;
                    match segment.kind {
                        // Active segments are applied at instantiation; an
                        // empty passive one keeps the data indices valid
                        // for `memory.init` (as Wizer does). Passive
                        // segments stay: `data.drop` is refused, so they
                        // are never dropped.
                        wasmparser::DataKind::Active { .. } => data.passive([]),
                        wasmparser::DataKind::Passive => data.passive(segment.data.iter().copied()),
                    };
                }
                module.section(&data);
            }
            _ => {
                module.section(&RawSection {
                    id,
                    data: &bytes[range],
                });
            }
        }
    }
    Ok(module.finish())
}

fn append_exports(section: &mut ExportSection, info: &ModuleInfo) {
    for g in &info.globals {
        section.export(
            &format!("{GLOBAL_EXPORT_PREFIX}{}", g.index),
            ExportKind::Global,
            g.index,
        );
    }
    for m in &info.memories {
        section.export(
            &format!("{MEMORY_EXPORT_PREFIX}{}", m.index),
            ExportKind::Memory,
            m.index,
        );
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

/// Compiles templates once per engine and keeps them: in memory by digest,
/// and (with a cache folder) on disk as precompiled code keyed by digest,
/// variant and the engine's compatibility hash, so a restart skips Cranelift.
pub struct ModuleCache {
    engine: Engine,
    linker: Arc<Linker<Host>>,
    dir: Option<PathBuf>,
    config_key: String,
    loaded: Mutex<HashMap<Digest, Arc<Template>>>,
}

impl ModuleCache {
    /// A cache for `engine`, linking with `linker`; `dir` holds precompiled
    /// code (created if missing), `None` keeps everything in memory.
    #[must_use]
    pub fn new(engine: Engine, linker: Arc<Linker<Host>>, dir: Option<PathBuf>) -> Self {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Self {
            engine,
            linker,
            dir,
            config_key: format!("{:016x}", hasher.finish()),
            loaded: Mutex::new(HashMap::new()),
        }
    }

    /// The compiled template for `bytes`: analysed, instrumented, compiled
    /// and linked on first use, then shared.
    ///
    /// # Errors
    /// A [`ModuleError`] if the module is refused or does not link.
    pub fn load(&self, bytes: &[u8]) -> Result<Arc<Template>, ModuleError> {
        let id = digest(bytes);
        if let Some(t) = self.lock().get(&id) {
            return Ok(t.clone());
        }
        let info = analyze(bytes)?;
        let spawn = self.compile(bytes, &info, Variant::Spawn)?;
        check_abi_exports(&spawn)?;
        let resume = self.compile(bytes, &info, Variant::Resume)?;
        let pre = |m: &Module| {
            self.linker
                .instantiate_pre(m)
                .map_err(|e| ModuleError::Compile(e.into()))
        };
        let template = Arc::new(Template {
            spawn: pre(&spawn)?,
            resume: pre(&resume)?,
            info,
        });
        self.lock().insert(id, template.clone());
        Ok(template)
    }

    /// The template already loaded for `digest` (hex SHA-256 of the
    /// module's bytes, as in the directory), without reading its file.
    #[must_use]
    pub fn loaded(&self, digest: &str) -> Option<Arc<Template>> {
        let id: Digest = hex::decode(digest).ok()?.try_into().ok()?;
        self.lock().get(&id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Digest, Arc<Template>>> {
        self.loaded.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn compile(
        &self,
        bytes: &[u8],
        info: &ModuleInfo,
        variant: Variant,
    ) -> Result<Module, ModuleError> {
        let path = self.dir.as_ref().map(|d| {
            d.join(format!(
                "{}-{}-{}.cwasm",
                hex::encode(info.digest),
                variant.name(),
                self.config_key
            ))
        });
        if let Some(path) = &path
            && let Ok(file) = std::fs::read(path)
        {
            match cached_code(&file) {
                // SAFETY: the code was written by `Module::serialize` below
                // into the data dir this process owns (guarded by its LOCK),
                // and its SHA-256 matches, so it is not torn or altered; the
                // engine's compatibility hash is part of the name, and
                // wasmtime re-checks version and configuration on load.
                Some(code) => match unsafe { Module::deserialize(&self.engine, code) } {
                    Ok(module) => return Ok(module),
                    Err(e) => tracing::warn!(path = %path.display(), "recompiling: {e:#}"),
                },
                None => {
                    tracing::warn!(path = %path.display(), "recompiling: cached code fails its checksum")
                }
            }
        }
        let rewritten = instrument(bytes, info, variant)?;
        let module =
            Module::new(&self.engine, &rewritten).map_err(|e| ModuleError::Compile(e.into()))?;
        if let Some(path) = &path {
            let written = module.serialize().and_then(|code| {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let tmp = path.with_extension(format!("{}-{n}.tmp", std::process::id()));
                let mut file = std::fs::File::create(&tmp)?;
                std::io::Write::write_all(&mut file, &Sha256::digest(&code))?;
                std::io::Write::write_all(&mut file, &code)?;
                file.sync_all()?;
                std::fs::rename(&tmp, path)?;
                Ok(())
            });
            if let Err(e) = written {
                tracing::warn!(path = %path.display(), "could not cache compiled module: {e:#}");
            }
        }
        Ok(module)
    }
}

/// The code in a cache file (`SHA-256 of the code` ‖ `code`), if the
/// checksum holds.
fn cached_code(file: &[u8]) -> Option<&[u8]> {
    let (sum, code) = file.split_at_checked(32)?;
    (Sha256::digest(code).as_slice() == sum).then_some(code)
}

fn check_abi_exports(module: &Module) -> Result<(), ModuleError> {
    use wasmtime::ValType as V;
    let func = |name| match module.get_export(name) {
        Some(wasmtime::ExternType::Func(f)) => Some(f),
        _ => None,
    };
    let is = |name, params: &[fn(&V) -> bool], results: &[fn(&V) -> bool]| {
        func(name).is_some_and(|f| {
            f.params().len() == params.len()
                && f.results().len() == results.len()
                && f.params().zip(params).all(|(p, ok)| ok(&p))
                && f.results().zip(results).all(|(r, ok)| ok(&r))
        })
    };
    let i32_ = |v: &V| matches!(v, V::I32);
    let i64_ = |v: &V| matches!(v, V::I64);
    if !is(exports::ALLOC, &[i32_], &[i32_]) {
        return Err(ModuleError::Export {
            name: exports::ALLOC,
            signature: "(i32) -> i32",
        });
    }
    if !is(exports::HANDLE, &[i32_, i32_], &[i64_]) {
        return Err(ModuleError::Export {
            name: exports::HANDLE,
            signature: "(i32, i32) -> i64",
        });
    }
    for name in [
        exports::INIT,
        exports::ON_PAUSE,
        exports::ON_RESUME,
        exports::INITIALIZE,
    ] {
        if func(name).is_some() && !is(name, &[], &[]) {
            return Err(ModuleError::Export {
                name,
                signature: "() -> ()",
            });
        }
    }
    Ok(())
}
