//! A template's initial image: the content of its linear memories when a
//! spawn instance has just been made, before its start function runs (zero
//! pages with every active data segment written over them, in order). A
//! snapshot of format version 3 stores only how an actor's memory differs
//! from it ([`format`](crate::snapshot::format)), so an actor that changed
//! little of a large evaluated heap (a JavaScript template's) has a small
//! snapshot.

use std::collections::BTreeMap;

use wasmparser::{DataKind, Operator, Parser, Payload, TypeRef};

use super::MemoryInfo;
use crate::snapshot::format::PAGE_SIZE;

/// The non-zero 4 KiB pages of each defined memory's initial image (module
/// docs), in the order of [`ModuleInfo::memories`](super::ModuleInfo).
#[derive(Clone, PartialEq, Eq)]
pub struct InitialImage {
    memories: Vec<BTreeMap<u64, Box<[u8]>>>,
    /// CRC32C of every non-zero page with its memory and page index
    /// ([`InitialImage::checksum`]).
    checksum: u32,
}

impl std::fmt::Debug for InitialImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pages: Vec<usize> = self.memories.iter().map(BTreeMap::len).collect();
        f.debug_struct("InitialImage")
            .field("non_zero_pages", &pages)
            .field("checksum", &self.checksum)
            .finish()
    }
}

impl InitialImage {
    /// The image of the module `bytes` (already validated), whose defined
    /// memories are `memories`; `None` when an active data segment's offset
    /// is not a constant (a `global.get` of an import: the image depends on
    /// the instance) or the segment lies outside its memory's initial size
    /// (instantiation traps), or a segment names a memory that is not
    /// defined here.
    #[must_use]
    pub fn of_module(bytes: &[u8], memories: &[MemoryInfo]) -> Option<Self> {
        let mut image = Self {
            memories: vec![BTreeMap::new(); memories.len()],
            checksum: 0,
        };
        let mut imported_memories = 0u32;
        for payload in Parser::new(0).parse_all(bytes) {
            match payload.ok()? {
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        if matches!(import.ok()?.ty, TypeRef::Memory(_)) {
                            imported_memories += 1;
                        }
                    }
                }
                Payload::DataSection(reader) => {
                    for data in reader {
                        let data = data.ok()?;
                        let DataKind::Active {
                            memory_index,
                            offset_expr,
                        } = data.kind
                        else {
                            continue;
                        };
                        let m = memory_index.checked_sub(imported_memories)? as usize;
                        let info = memories.get(m).filter(|i| i.index == memory_index)?;
                        let mut ops = offset_expr.get_operators_reader();
                        let offset = match ops.read().ok()? {
                            Operator::I32Const { value } => u64::from(value as u32),
                            Operator::I64Const { value } => value as u64,
                            _ => return None,
                        };
                        if !matches!(ops.read().ok()?, Operator::End) {
                            return None;
                        }
                        let end = offset.checked_add(data.data.len() as u64)?;
                        if end > info.initial_pages.saturating_mul(65536) {
                            return None;
                        }
                        image.write(m, offset, data.data);
                    }
                }
                _ => {}
            }
        }
        for memory in &mut image.memories {
            memory.retain(|_, page| !crate::snapshot::page_is_zero(page));
        }
        let mut crc = 0u32;
        for (m, memory) in image.memories.iter().enumerate() {
            for (page, bytes) in memory {
                crc = crc32c::crc32c_append(crc, &(m as u64).to_le_bytes());
                crc = crc32c::crc32c_append(crc, &page.to_le_bytes());
                crc = crc32c::crc32c_append(crc, bytes);
            }
        }
        image.checksum = crc;
        Some(image)
    }

    /// The CRC32C of the image's content (each non-zero page with its
    /// memory and page index): a version-3 snapshot records the checksum
    /// of the image it was taken on, so it is never restored onto an image
    /// that differs (a build that computes the image otherwise).
    #[must_use]
    pub fn checksum(&self) -> u32 {
        self.checksum
    }

    /// Writes `bytes` at `offset` of memory `m`'s image.
    fn write(&mut self, m: usize, offset: u64, bytes: &[u8]) {
        let memory = &mut self.memories[m];
        let mut at = offset;
        let mut rest = bytes;
        while !rest.is_empty() {
            let page = at / PAGE_SIZE as u64;
            let within = (at % PAGE_SIZE as u64) as usize;
            let n = rest.len().min(PAGE_SIZE - within);
            let slot = memory
                .entry(page)
                .or_insert_with(|| vec![0u8; PAGE_SIZE].into_boxed_slice());
            slot[within..within + n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            at += n as u64;
        }
    }

    /// Page `page` (4 KiB) of memory `m` (in [`ModuleInfo::memories`]
    /// order) in the image; `None` when it is zero.
    ///
    /// [`ModuleInfo::memories`]: super::ModuleInfo
    #[must_use]
    pub fn page(&self, m: usize, page: u64) -> Option<&[u8]> {
        self.memories.get(m)?.get(&page).map(|p| &p[..])
    }

    /// The non-zero pages of memory `m`'s image, ascending.
    pub fn pages(&self, m: usize) -> impl Iterator<Item = (u64, &[u8])> {
        self.memories
            .get(m)
            .into_iter()
            .flat_map(|pages| pages.iter().map(|(&p, bytes)| (p, &bytes[..])))
    }

    /// Number of non-zero pages in the image, all memories.
    #[must_use]
    pub fn non_zero_pages(&self) -> usize {
        self.memories.iter().map(BTreeMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(index: u32, initial_pages: u64) -> MemoryInfo {
        MemoryInfo {
            index,
            initial_pages,
            maximum_pages: None,
        }
    }

    #[test]
    fn segments_land_in_order_and_zero_pages_are_left_out() {
        let wasm = wat::parse_str(
            r#"(module
                (memory 2)
                (data (i32.const 4090) "abcdefghij")
                (data (i32.const 4094) "XY")
                (data (i32.const 70000) "\00\00")
                (data "passive"))"#,
        )
        .expect("wat");
        let image = InitialImage::of_module(&wasm, &[memory(0, 2)]).expect("constant offsets");
        assert_eq!(
            image.non_zero_pages(),
            2,
            "the all-zero segment's page is not kept"
        );
        let first = image.page(0, 0).expect("page 0");
        assert_eq!(&first[4090..], b"abcdXY");
        let second = image.page(0, 1).expect("page 1");
        assert_eq!(&second[..4], b"ghij");
        assert!(image.page(0, 17).is_none());
    }

    #[test]
    fn an_offset_from_an_imported_global_has_no_image() {
        let wasm = wat::parse_str(
            r#"(module
                (import "env" "base" (global $g i32))
                (memory 1)
                (data (global.get $g) "x"))"#,
        )
        .expect("wat");
        assert!(InitialImage::of_module(&wasm, &[memory(0, 1)]).is_none());
    }
}
