//! Core snapshot guarantees, checked against hand-written WAT guests: one
//! test binary, one file per topic.
//!
//! * [`capture_restore`]: exact global bits, run-once start/init code, data
//!   segments, multi-memory and sparse large memories, the guest clock.
//! * [`module`]: refused module features, ABI and malformed-module errors.
//! * [`cow`]: copy-on-write restore from snapshot files: exactness, slot
//!   reuse, mapping budget.
//! * [`delta`]: incremental snapshots: chains restore exactly, bounded
//!   depth, corrupt bases named, retention and fork keep chains.
//! * [`format`]: corrupt snapshot files, size limits, `same_state`.
//! * [`image`]: snapshots on the module's initial image (version 3):
//!   small, exact, flattened, patches checked.
//! * [`fuzz`]: property-based fuzzing of the snapshot loader and module
//!   validation and rewriting.
//! * [`store`]: the snapshot files: retention, temp files, quota, mapping.
//! * [`objects`]: the snapshot store over an object store (a folder and a
//!   real S3 server): sharing, epochs, retention, quota, errors, templates.
//! * [`pooling`]: the pooling allocator's slots.
//! * [`support`]: the helpers they share.

mod capture_restore;
mod cow;
mod delta;
mod format;
mod fuzz;
mod image;
mod module;
mod objects;
mod pooling;
mod store;
mod support;
