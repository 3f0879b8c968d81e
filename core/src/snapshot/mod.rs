//! Snapshots: capture an instance's linear memories and mutable globals into
//! the snapshot file format, verify a file once into a [`VerifiedSnapshot`],
//! and restore that into a fresh resume instance.
//!
//! Rooms: [`format`](mod@format) (the byte layout, header encoding and
//! decoding), [`verify`](mod@verify) (the checks that make a
//! [`VerifiedSnapshot`], and header reads without them),
//! [`capture`](mod@capture) (instance → bytes),
//! [`delta`](mod@delta) (instance → the pages changed since a base, found
//! by `dirty` tracking), [`chain`](mod@chain) (a full snapshot and its
//! deltas, checked to fit, and flattened),
//! [`restore`](mod@restore) (verified bytes → instance), [`memory`] (page
//! scanning, copies and page-fault hints the other two share), [`source`]
//! (what the bytes are held in), [`host_state`](mod@host_state) (the
//! host's bytes kept after the pages), `patch` (pages against the
//! module's image), `wire` (the header's encoding
//! per format version). The layout
//! is described in [`format`](mod@format).

pub mod capture;
pub mod chain;
pub mod delta;
mod dirty;
pub mod format;
pub mod host_state;
pub mod memory;
mod patch;
pub mod restamp;
pub mod restore;
pub mod source;
pub mod verify;
mod wire;

pub use capture::{CaptureStats, capture, capture_into};
pub use chain::{ChainPages, VerifiedChain, flatten};
pub use delta::{
    DeltaBase, DeltaCapture, FullInstead, MIN_MERGED, capture_delta, capture_merged, merge_point,
};
pub use format::{
    BaseRef, DELTA_FORMAT_VERSION, FORMAT_VERSION, FULL_FORMAT_VERSION, GlobalValue, Header,
    IMAGE_FORMAT_VERSION, MAGIC, MAX_DELTA_DEPTH, MemoryImage, OLDEST_READABLE_VERSION, PAGE_SIZE,
    PATCH_BLOCK, PagePatch, PageRun, PageSpan, SnapshotError, decode_header, encode_header,
};
pub use host_state::{append_host_state, host_state};
pub use memory::page_is_zero;
pub use restamp::restamp;
pub use restore::{RestoreError, map_written_snapshot, restore, restore_chain};
pub use source::SnapshotSource;
pub use verify::{
    VerifiedSnapshot, peek_header, recorded_crc32c, same_state, verify, verify_header,
};
