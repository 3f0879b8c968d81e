//! Deterministic test data and durable writes.

use std::io::Write as _;
use std::path::Path;

/// `len` pseudo-random bytes (xorshift64) from `seed`: incompressible, no
/// zero page, the same for the same seed.
#[must_use]
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = (seed ^ 0x9e37_79b9_7f4a_7c15).wrapping_mul(0xbf58_476d_1ce4_e5b9) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Creates (or truncates) `path`, writes `bytes` and fsyncs the file: the
/// cost of one durable write, the baseline snapshot writes are held to.
pub fn write_fsync(path: &Path, bytes: &[u8]) {
    let mut file =
        std::fs::File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    file.write_all(bytes).expect("write");
    file.sync_all().expect("fsync");
}
