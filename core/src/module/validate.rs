//! Validation: [`analyze`] checks a guest module against every rule of the
//! snapshot design and reports what a snapshot of it holds ([`ModuleInfo`]).

use stasis_host_api::{
    ABI_SECTION, ABI_VERSION, JS_HAND_OVER_SECTION, LAYOUT_SECTION, MIN_ABI_VERSION, WASI_MODULE,
    exports, imports,
};
use wasmparser::{
    CompositeInnerType, ExternalKind, FuncType, Operator, Parser, Payload, TypeRef, ValType,
    Validator,
};

use super::{GlobalInfo, GlobalKind, MemoryInfo, ModuleError, ModuleInfo, digest};

fn refused(what: impl Into<String>) -> ModuleError {
    ModuleError::Refused(what.into())
}

/// The 8-byte preamble of a core WebAssembly module: `\0asm`, version 1.
const PREAMBLE: [u8; 8] = *b"\0asm\x01\0\0\0";

/// Checks that `bytes` start like a core WebAssembly module, so a file that
/// is something else is named as such in one line (not a parser dump).
///
/// # Errors
/// [`ModuleError::NotWasm`] saying what the first bytes are instead.
fn check_preamble(bytes: &[u8]) -> Result<(), ModuleError> {
    if bytes.starts_with(&PREAMBLE) {
        return Ok(());
    }
    let reason = if bytes.is_empty() {
        "the file is empty".to_owned()
    } else if bytes.starts_with(b"\0asm") && bytes.len() >= 8 {
        let version = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        if version & 0xffff == 0x0d {
            "it is a WebAssembly component; push a core module".to_owned()
        } else {
            format!("unsupported binary version {version:#x} (expected 1)")
        }
    } else if bytes.starts_with(b"\0asm") || PREAMBLE.starts_with(bytes) {
        format!("the file ends after {} bytes", bytes.len())
    } else {
        let head = &bytes[..bytes.len().min(4)];
        let hex: Vec<String> = head.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "it starts with {} ({:?}), not the magic number 00 61 73 6d (\"\\0asm\")",
            hex.join(" "),
            String::from_utf8_lossy(head)
        )
    };
    Err(ModuleError::NotWasm(reason))
}

/// Checks one import of the `stasis` module: a host function of ABI 2
/// with exactly its signature.
///
/// # Errors
/// [`ModuleError::Refused`] naming the function and the expected signature.
fn check_host_import(name: &str, ty: Option<&FuncType>) -> Result<(), ModuleError> {
    let module = imports::MODULE;
    let Some(expected) = imports::signature(name) else {
        let known: Vec<&str> = imports::FUNCTIONS.iter().map(|s| s.name).collect();
        return Err(refused(format!(
            "import `{module}`.`{name}`: no such host function (ABI {ABI_VERSION} has {})",
            known.join(", ")
        )));
    };
    let wasm = |t: imports::ValType| match t {
        imports::ValType::I32 => ValType::I32,
        imports::ValType::I64 => ValType::I64,
    };
    let matches = ty.is_some_and(|ty| {
        ty.params()
            .iter()
            .copied()
            .eq(expected.params.iter().map(|&t| wasm(t)))
            && ty
                .results()
                .iter()
                .copied()
                .eq(expected.results.iter().map(|&t| wasm(t)))
    });
    if !matches {
        let found = ty.map_or_else(|| "not a function type".to_owned(), ToString::to_string);
        return Err(refused(format!(
            "import `{module}`.`{name}` must be a function `{expected}`, found `{found}`"
        )));
    }
    Ok(())
}

/// Checks that optional export `name` is a function of exactly this
/// signature.
///
/// # Errors
/// [`ModuleError::Refused`] naming the export and both signatures.
fn check_export(
    name: &str,
    ty: Option<&FuncType>,
    params: &[ValType],
    results: &[ValType],
) -> Result<(), ModuleError> {
    if ty.is_some_and(|ty| ty.params() == params && ty.results() == results) {
        return Ok(());
    }
    let expected = FuncType::new(params.iter().copied(), results.iter().copied());
    let found = ty.map_or_else(|| "not a function".to_owned(), ToString::to_string);
    Err(refused(format!(
        "export `{name}` must be a function `{expected}`, found `{found}`"
    )))
}

/// Validates `bytes` and checks every rule of the snapshot design: only WASI
/// preview 1 imports (and, for ABI 2, the `stasis` host functions with
/// their exact signatures), no imported memory/table/global, no shared memory, no
/// memory64, no custom page sizes, no mutable reference-typed globals, no
/// `table.set/grow/fill/copy/init`, `elem.drop` or `data.drop`, no export in
/// the reserved `__stasis_` prefix, and an ABI custom section this host
/// speaks. Runs no guest code.
///
/// # Errors
/// A [`ModuleError`] naming the first problem found.
pub fn analyze(bytes: &[u8]) -> Result<ModuleInfo, ModuleError> {
    check_preamble(bytes)?;
    Validator::new()
        .validate_all(bytes)
        .map_err(|e| ModuleError::malformed(&e))?;
    let mut scan = Scan::new(digest(bytes));
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(malformed)? {
            Payload::TypeSection(reader) => {
                for group in reader {
                    for sub in group.map_err(malformed)?.into_types() {
                        scan.func_types.push(match sub.composite_type.inner {
                            CompositeInnerType::Func(f) => Some(f),
                            _ => None,
                        });
                    }
                }
            }
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    scan.import(&import.map_err(malformed)?)?;
                }
            }
            Payload::MemorySection(reader) => {
                for (i, memory) in reader.into_iter().enumerate() {
                    scan.memory(i, &memory.map_err(malformed)?)?;
                }
            }
            Payload::GlobalSection(reader) => {
                for (i, global) in reader.into_iter().enumerate() {
                    scan.global(i, &global.map_err(malformed)?)?;
                }
            }
            Payload::FunctionSection(reader) => {
                for ty in reader {
                    scan.func_sigs.push(ty.map_err(malformed)?);
                }
            }
            Payload::ExportSection(reader) => {
                for export in reader {
                    scan.export(&export.map_err(malformed)?)?;
                }
            }
            Payload::StartSection { .. } => scan.info.has_start = true,
            Payload::CodeSectionEntry(body) => scan.code(&body)?,
            Payload::CustomSection(section) if section.name() == LAYOUT_SECTION => {
                scan.info.layout = Some(section.data().to_vec());
            }
            Payload::CustomSection(section) if section.name() == JS_HAND_OVER_SECTION => {
                let methods = String::from_utf8_lossy(section.data()).into_owned();
                let has = |m: &str| methods.split(',').any(|x| x.trim() == m);
                scan.script_sides = Some((has("save"), has("load")));
            }
            Payload::CustomSection(section) if section.name() == ABI_SECTION => {
                let data: [u8; 4] = section.data().try_into().map_err(|_| {
                    refused(format!(
                        "`{ABI_SECTION}` section must hold 4 bytes, has {}",
                        section.data().len()
                    ))
                })?;
                scan.abi = Some(u32::from_le_bytes(data));
            }
            _ => {}
        }
    }
    let mut info = scan.finish()?;
    info.image = super::InitialImage::of_module(bytes, &info.memories).map(std::sync::Arc::new);
    Ok(info)
}

fn malformed(e: wasmparser::BinaryReaderError) -> ModuleError {
    ModuleError::malformed(&e)
}

/// What [`analyze`] has read of a module so far, section by section; the
/// rules that need the whole module are checked at the end
/// ([`Scan::finish`]).
struct Scan {
    info: ModuleInfo,
    /// The methods of a JavaScript template's hand-over
    /// ([`JS_HAND_OVER_SECTION`]): `(save, load)`, once read.
    script_sides: Option<(bool, bool)>,
    /// The ABI custom section's version, once read (it may come last).
    abi: Option<u32>,
    imports_wasi: bool,
    /// Host-function imports (name), checked against the ABI version once
    /// the custom section has been read.
    host_imports: Vec<String>,
    func_types: Vec<Option<FuncType>>,
    /// The type index of every function, imported ones first.
    func_sigs: Vec<u32>,
    exports_memory: bool,
    imported_funcs: u32,
    /// Function bodies read so far.
    func_index: u32,
}

impl Scan {
    fn new(digest: [u8; 32]) -> Self {
        Self {
            info: ModuleInfo {
                digest,
                abi_version: 0,
                globals: Vec::new(),
                memories: Vec::new(),
                has_start: false,
                layout: None,
                saves_state: false,
                loads_state: false,
                script: false,
                image: None,
            },
            script_sides: None,
            abi: None,
            imports_wasi: false,
            host_imports: Vec::new(),
            func_types: Vec::new(),
            func_sigs: Vec::new(),
            exports_memory: false,
            imported_funcs: 0,
            func_index: 0,
        }
    }

    /// Only functions may be imported: WASI preview 1's, and the host
    /// functions of `stasis` with their exact signatures.
    fn import(&mut self, import: &wasmparser::Import<'_>) -> Result<(), ModuleError> {
        let what = format!("`{}`.`{}`", import.module, import.name);
        match import.ty {
            TypeRef::Func(i) | TypeRef::FuncExact(i) => {
                self.imported_funcs += 1;
                self.func_sigs.push(i);
            }
            TypeRef::Memory(_) => {
                return Err(refused(format!("imported memory {what}")));
            }
            TypeRef::Table(_) => return Err(refused(format!("imported table {what}"))),
            TypeRef::Global(_) => {
                return Err(refused(format!("imported global {what}")));
            }
            TypeRef::Tag(_) => return Err(refused(format!("imported tag {what}"))),
        }
        self.imports_wasi |= import.module == WASI_MODULE;
        if import.module == imports::MODULE {
            let ty = match import.ty {
                TypeRef::Func(i) | TypeRef::FuncExact(i) => {
                    self.func_types.get(i as usize).and_then(Option::as_ref)
                }
                _ => None,
            };
            check_host_import(import.name, ty)?;
            self.host_imports.push(import.name.to_owned());
        } else if import.module != WASI_MODULE {
            return Err(refused(format!(
                "import {what}: only WASI preview 1 (`{WASI_MODULE}`) and, from ABI \
                 version 2, the host functions of `{}` may be imported",
                imports::MODULE
            )));
        }
        Ok(())
    }

    /// Memory `i`: 32-bit, unshared, with 64 KiB pages.
    fn memory(&mut self, i: usize, memory: &wasmparser::MemoryType) -> Result<(), ModuleError> {
        if memory.shared {
            return Err(refused("shared memory (threads)"));
        }
        if memory.memory64 {
            return Err(refused("memory64"));
        }
        if memory.page_size_log2.is_some_and(|l| l != 16) {
            return Err(refused("custom page sizes"));
        }
        self.info.memories.push(MemoryInfo {
            index: u32::try_from(i).map_err(|_| refused("too many memories"))?,
            initial_pages: memory.initial,
            maximum_pages: memory.maximum,
        });
        Ok(())
    }

    /// Global `i`: a mutable one is snapshotted, so it may not hold a
    /// reference.
    fn global(&mut self, i: usize, global: &wasmparser::Global<'_>) -> Result<(), ModuleError> {
        // Imported globals are refused, so defined globals start at 0.
        let index = u32::try_from(i).unwrap_or(u32::MAX);
        if !global.ty.mutable {
            return Ok(());
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
        self.info.globals.push(GlobalInfo { index, kind });
        Ok(())
    }

    /// An export: the state hooks' signatures, no reserved name, no tag.
    fn export(&mut self, export: &wasmparser::Export<'_>) -> Result<(), ModuleError> {
        let ty = (export.kind == ExternalKind::Func)
            .then(|| self.func_sigs.get(export.index as usize))
            .flatten()
            .and_then(|&t| self.func_types.get(t as usize))
            .and_then(Option::as_ref);
        match export.name {
            exports::SAVE_STATE => {
                check_export(export.name, ty, &[], &[ValType::I64])?;
                self.info.saves_state = true;
            }
            exports::ON_SOCKET => {
                check_export(
                    export.name,
                    ty,
                    &[ValType::I32, ValType::I32],
                    &[ValType::I32],
                )?;
            }
            exports::LOAD_STATE => {
                check_export(
                    export.name,
                    ty,
                    &[ValType::I32, ValType::I32],
                    &[ValType::I32],
                )?;
                self.info.loads_state = true;
            }
            _ => {}
        }
        if export.name.starts_with(exports::RESERVED_PREFIX) {
            return Err(refused(format!(
                "export `{}` uses the reserved prefix `{}`",
                export.name,
                exports::RESERVED_PREFIX
            )));
        }
        self.exports_memory |= export.kind == ExternalKind::Memory && export.name == "memory";
        if export.kind == ExternalKind::Tag {
            return Err(refused("exception tags"));
        }
        Ok(())
    }

    /// A function body: no operator that changes table or segment state.
    fn code(&mut self, body: &wasmparser::FunctionBody<'_>) -> Result<(), ModuleError> {
        let index = self.imported_funcs + self.func_index;
        self.func_index += 1;
        let mut ops = body.get_operators_reader().map_err(malformed)?;
        while !ops.eof() {
            if let Some(name) = refused_operator(&ops.read().map_err(malformed)?) {
                return Err(refused(format!(
                    "`{name}` in function {index}: table and segment state cannot be \
                     snapshotted"
                )));
            }
        }
        Ok(())
    }

    /// The rules of the whole module: a memory, WASI's `memory` export, an
    /// ABI version this host speaks, host functions only from ABI 2.
    fn finish(mut self) -> Result<ModuleInfo, ModuleError> {
        if let Some((save, load)) = self.script_sides {
            // The engine exports both hooks for every script: each counts
            // where the script has the method.
            self.info.script = true;
            self.info.saves_state &= save;
            self.info.loads_state &= load;
        }
        if self.info.memories.is_empty() {
            return Err(refused(
                "no linear memory: the ABI passes requests through memory 0",
            ));
        }
        if self.imports_wasi && !self.exports_memory {
            return Err(refused(
                "WASI imports without a `memory` export (WASI preview 1 reads and writes through it)",
            ));
        }
        self.info.abi_version = self.abi.ok_or(ModuleError::MissingAbi)?;
        if !(MIN_ABI_VERSION..=ABI_VERSION).contains(&self.info.abi_version) {
            return Err(ModuleError::AbiVersion {
                found: self.info.abi_version,
            });
        }
        if self.info.abi_version < 2
            && let Some(name) = self.host_imports.first()
        {
            return Err(refused(format!(
                "import `{}`.`{name}`: host functions need ABI version 2, the module's \
                 `{ABI_SECTION}` section says {}",
                imports::MODULE,
                self.info.abi_version
            )));
        }
        Ok(self.info)
    }
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
