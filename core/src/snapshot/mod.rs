//! Snapshots: capture an instance's linear memories and mutable globals into
//! the snapshot file format, verify a file once into a [`VerifiedSnapshot`],
//! and restore that into a fresh resume instance.
//!
//! Rooms: [`format`](mod@format) (the byte layout, header encoding and
//! decoding, and [`verify`]), [`capture`](mod@capture) (instance → bytes),
//! [`restore`](mod@restore) (verified bytes → instance), [`memory`] (page
//! scanning, copies and page-fault hints the other two share), [`source`]
//! (what the bytes are held in). The layout
//! is described in [`format`](mod@format).

pub mod capture;
pub mod format;
pub mod memory;
pub mod restore;
pub mod source;

pub use capture::{CaptureStats, capture, capture_into};
pub use format::{
    FORMAT_VERSION, GlobalValue, Header, MAGIC, MemoryImage, OLDEST_READABLE_VERSION, PageRun,
    SnapshotError, VerifiedSnapshot, same_state, verify, verify_header,
};
pub use memory::{PAGE_SIZE, page_is_zero};
pub use restore::{RestoreError, restore};
pub use source::SnapshotSource;
