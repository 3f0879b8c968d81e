//! The header's encodings, one per format version (bincode 2, fixed-int):
//! [`encode_header`] writes a [`Header`] as its [`Header::version`] stores
//! it, [`decode_header`] reads it back. The layout around the header is in
//! [`format`](super::format).

use serde::{Deserialize, Serialize};

use super::format::{
    BaseRef, DELTA_FORMAT_VERSION, FULL_FORMAT_VERSION, GlobalValue, Header, IMAGE_FORMAT_VERSION,
    MAX_HEADER, MemoryImage, PagePatch, PageRun, PageSpan, SnapshotError,
};
use crate::module::Digest;

/// A version-3 header, as encoded (a full snapshot on the module's image:
/// no base; zero runs and patches).
#[derive(Serialize, Deserialize)]
struct HeaderV3 {
    module_digest: Digest,
    image_crc32c: u32,
    abi_version: u32,
    clock_ns: u64,
    globals: Vec<GlobalValue>,
    memories: Vec<MemoryImageV3>,
}

/// A version-3 memory image, as encoded.
#[derive(Serialize, Deserialize)]
struct MemoryImageV3 {
    index: u32,
    wasm_pages: u64,
    runs: Vec<PageRun>,
    zero_runs: Vec<PageSpan>,
    patches: Vec<PagePatch>,
}

/// A version-2 header, as encoded (a delta: a base and zero runs).
#[derive(Serialize, Deserialize)]
struct HeaderV2 {
    module_digest: Digest,
    abi_version: u32,
    clock_ns: u64,
    globals: Vec<GlobalValue>,
    memories: Vec<MemoryImageV2>,
    base: Option<BaseRef>,
}

/// A version-2 memory image, as encoded.
#[derive(Serialize, Deserialize)]
struct MemoryImageV2 {
    index: u32,
    wasm_pages: u64,
    runs: Vec<PageRun>,
    zero_runs: Vec<PageSpan>,
}

/// A version-1 header, as encoded (a full snapshot: no base, no zero runs).
#[derive(Serialize, Deserialize)]
struct HeaderV1 {
    module_digest: Digest,
    abi_version: u32,
    clock_ns: u64,
    globals: Vec<GlobalValue>,
    memories: Vec<MemoryImageV1>,
}

/// A version-1 memory image, as encoded.
#[derive(Serialize, Deserialize)]
struct MemoryImageV1 {
    index: u32,
    wasm_pages: u64,
    runs: Vec<PageRun>,
}

pub(crate) fn header_config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_fixed_int_encoding()
        .with_limit::<MAX_HEADER>()
}

/// `header` encoded as a file of its [`Header::version`] stores it (bincode
/// 2, fixed-int: a version-1 header has no base and no zero runs, a
/// version-2 one no patches, a version-3 one no base).
///
/// # Errors
/// [`SnapshotError::TooLarge`] past the 16 MiB header limit.
pub fn encode_header(header: &Header) -> Result<Vec<u8>, SnapshotError> {
    let (digest, abi, clock, globals) = (
        header.module_digest,
        header.abi_version,
        header.clock_ns,
        header.globals.clone(),
    );
    let memories = header.memories.iter();
    let encoded = match header.version() {
        DELTA_FORMAT_VERSION => {
            let v2 = HeaderV2 {
                module_digest: digest,
                abi_version: abi,
                clock_ns: clock,
                globals,
                memories: memories
                    .map(|m| MemoryImageV2 {
                        index: m.index,
                        wasm_pages: m.wasm_pages,
                        runs: m.runs.clone(),
                        zero_runs: m.zero_runs.clone(),
                    })
                    .collect(),
                base: header.base,
            };
            bincode::serde::encode_to_vec(&v2, header_config())
        }
        IMAGE_FORMAT_VERSION => {
            let v3 = HeaderV3 {
                module_digest: digest,
                image_crc32c: header.on_image.unwrap_or_default(),
                abi_version: abi,
                clock_ns: clock,
                globals,
                memories: memories
                    .map(|m| MemoryImageV3 {
                        index: m.index,
                        wasm_pages: m.wasm_pages,
                        runs: m.runs.clone(),
                        zero_runs: m.zero_runs.clone(),
                        patches: m.patches.clone(),
                    })
                    .collect(),
            };
            bincode::serde::encode_to_vec(&v3, header_config())
        }
        _ => {
            let v1 = HeaderV1 {
                module_digest: digest,
                abi_version: abi,
                clock_ns: clock,
                globals,
                memories: memories
                    .map(|m| MemoryImageV1 {
                        index: m.index,
                        wasm_pages: m.wasm_pages,
                        runs: m.runs.clone(),
                    })
                    .collect(),
            };
            bincode::serde::encode_to_vec(&v1, header_config())
        }
    };
    encoded.map_err(|e| SnapshotError::TooLarge(format!("header: {e}")))
}

/// Decodes a header of format `version` from all of `bytes` (the file's
/// header field), without any check but the decoder's bounds: the inverse
/// of [`encode_header`]. A version other than 1 and 3 decodes as version 2.
///
/// # Errors
/// [`SnapshotError::BadHeader`] if the bytes do not decode whole, or a
/// version-2 header names no base.
pub fn decode_header(version: u32, bytes: &[u8]) -> Result<Header, SnapshotError> {
    let bad = |e: bincode::error::DecodeError| SnapshotError::BadHeader(e.to_string());
    let (header, used) = match version {
        FULL_FORMAT_VERSION => {
            let (v1, used): (HeaderV1, usize) =
                bincode::serde::decode_from_slice(bytes, header_config()).map_err(bad)?;
            let memories = v1
                .memories
                .into_iter()
                .map(|m| MemoryImage {
                    index: m.index,
                    wasm_pages: m.wasm_pages,
                    runs: m.runs,
                    zero_runs: Vec::new(),
                    patches: Vec::new(),
                })
                .collect();
            let header = Header {
                module_digest: v1.module_digest,
                abi_version: v1.abi_version,
                clock_ns: v1.clock_ns,
                globals: v1.globals,
                memories,
                base: None,
                on_image: None,
            };
            (header, used)
        }
        IMAGE_FORMAT_VERSION => {
            let (v3, used): (HeaderV3, usize) =
                bincode::serde::decode_from_slice(bytes, header_config()).map_err(bad)?;
            let memories = v3
                .memories
                .into_iter()
                .map(|m| MemoryImage {
                    index: m.index,
                    wasm_pages: m.wasm_pages,
                    runs: m.runs,
                    zero_runs: m.zero_runs,
                    patches: m.patches,
                })
                .collect();
            let header = Header {
                module_digest: v3.module_digest,
                abi_version: v3.abi_version,
                clock_ns: v3.clock_ns,
                globals: v3.globals,
                memories,
                base: None,
                on_image: Some(v3.image_crc32c),
            };
            (header, used)
        }
        _ => {
            let (v2, used): (HeaderV2, usize) =
                bincode::serde::decode_from_slice(bytes, header_config()).map_err(bad)?;
            if v2.base.is_none() {
                return Err(SnapshotError::BadHeader(
                    "a version-2 snapshot without a base".to_owned(),
                ));
            }
            let memories = v2
                .memories
                .into_iter()
                .map(|m| MemoryImage {
                    index: m.index,
                    wasm_pages: m.wasm_pages,
                    runs: m.runs,
                    zero_runs: m.zero_runs,
                    patches: Vec::new(),
                })
                .collect();
            let header = Header {
                module_digest: v2.module_digest,
                abi_version: v2.abi_version,
                clock_ns: v2.clock_ns,
                globals: v2.globals,
                memories,
                base: v2.base,
                on_image: None,
            };
            (header, used)
        }
    };
    if used != bytes.len() {
        return Err(SnapshotError::BadHeader(format!(
            "{} bytes left after the header",
            bytes.len() - used
        )));
    }
    Ok(header)
}
