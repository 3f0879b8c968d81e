//! The rewrite: [`instrument`] turns an analysed module into its spawn or
//! resume [`Variant`] (see the [`module`](super) docs for what changes).

use wasm_encoder::{ExportKind, ExportSection, RawSection};
use wasmparser::{ExternalKind, Parser, Payload};

use super::{GLOBAL_EXPORT_PREFIX, MEMORY_EXPORT_PREFIX, ModuleError, ModuleInfo, Variant};

/// Rewrites an analysed module into `variant` (see the module docs).
///
/// # Errors
/// [`ModuleError::Malformed`] if the bytes do not parse (they were validated
/// by [`analyze`](super::analyze()), so this means they changed in between).
pub fn instrument(
    bytes: &[u8],
    info: &ModuleInfo,
    variant: Variant,
) -> Result<Vec<u8>, ModuleError> {
    let malformed = |e: wasmparser::BinaryReaderError| ModuleError::malformed(&e);
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
