//! Re-stamping a full snapshot for another module: an actor upgraded by
//! memory carry-over (`stasis actor upgrade`) is installed from its
//! snapshot with the header's module digest changed to the new version's,
//! after which the usual verification against the new module checks the
//! ABI version, the globals and the memories, and names any difference.

use super::format::{FULL_FORMAT_VERSION, PREFIX_LEN, SnapshotError, TRAILER_LEN, encode_header};
use super::verify::{peek_header, recorded_crc32c};
use crate::module::Digest;

/// A copy of the full snapshot `bytes` whose header names module
/// `digest`, with its CRC32C trailer computed again. The checksum of
/// `bytes` is checked first, so a damaged file is never given a fresh
/// one.
///
/// # Errors
/// [`SnapshotError`] if `bytes` is no valid snapshot, fails its checksum,
/// or is not version 1 (a delta, or a snapshot on the module's image:
/// only a version-1 file stands alone).
pub fn restamp(bytes: &[u8], digest: Digest) -> Result<Vec<u8>, SnapshotError> {
    let mut header = peek_header(bytes)?;
    let end = bytes.len() - TRAILER_LEN;
    if recorded_crc32c(bytes) != Some(crc32c::crc32c(&bytes[..end])) {
        return Err(SnapshotError::Layout(
            "its checksum does not match its content".into(),
        ));
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if header.base.is_some() || version != FULL_FORMAT_VERSION {
        return Err(SnapshotError::Layout(
            "only a version-1 snapshot can be re-stamped (a delta, or one taken on the \
             module's image, depends on its module); flatten it first"
                .into(),
        ));
    }
    let old_len = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]) as usize;
    header.module_digest = digest;
    let encoded = encode_header(&header)?;
    if encoded.len() != old_len {
        return Err(SnapshotError::Layout(format!(
            "the re-stamped header is {} bytes, not {old_len}",
            encoded.len()
        )));
    }
    let mut out = bytes.to_vec();
    out[PREFIX_LEN..PREFIX_LEN + old_len].copy_from_slice(&encoded);
    let crc = crc32c::crc32c(&out[..end]);
    out[end..].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}
