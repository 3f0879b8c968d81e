//! Idempotent retries (docs/api.md, "Idempotent retries"): the request
//! header that names one request to an actor, its limits, and the header
//! that marks an answer given again.
//!
//! A request with `Idempotency-Key: K` is applied at most once per actor
//! while the actor remembers `K`: for [`WINDOW`] after it was applied,
//! among the actor's newest [`MAX_KEYS`] keys. A retry gets the first
//! answer again (marked [`REPLAYED_HEADER`]`: true`).

use std::time::Duration;

/// The request header that names a request for idempotent retries (lower
/// case, as the host gives headers to guests).
pub const KEY_HEADER: &str = "idempotency-key";

/// Marks an answer given again for a retry (value `true`): the request
/// was applied once, by the request that first carried the key.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 255;

/// How long an actor remembers a key after applying its request.
pub const WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// How many keys an actor remembers at most: past this, its oldest key is
/// forgotten.
pub const MAX_KEYS: usize = 1_000;

/// The largest answer body kept whole for a retry; a larger one is kept
/// as its status and digest only.
pub const MAX_KEPT_BODY: usize = 64 << 10;

/// The answer bodies an actor keeps whole in all; past this, the oldest
/// are kept as their status and digest only.
pub const MAX_KEPT_BYTES: usize = 1 << 20;

/// The key of a request's `headers` (names lower case), if it has one.
///
/// # Errors
/// Why the key is refused (400): more than one, empty, longer than
/// [`MAX_KEY_BYTES`], or a byte that is not visible ASCII.
pub fn key_of(headers: &[(String, Vec<u8>)]) -> Result<Option<String>, String> {
    let mut keys = headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(KEY_HEADER))
        .map(|(_, value)| value);
    let Some(value) = keys.next() else {
        return Ok(None);
    };
    if keys.next().is_some() {
        return Err("a request may carry one Idempotency-Key header, not several".to_owned());
    }
    let limit =
        format!("an Idempotency-Key is 1 to {MAX_KEY_BYTES} bytes of visible ASCII (0x21 to 0x7e)");
    if value.is_empty() {
        return Err(format!("{limit}; this one is empty"));
    }
    if value.len() > MAX_KEY_BYTES {
        return Err(format!("{limit}; this one is {} bytes", value.len()));
    }
    if let Some(at) = value.iter().position(|b| !b.is_ascii_graphic()) {
        return Err(format!(
            "{limit}; this one has byte {:#04x} at offset {at}",
            value[at]
        ));
    }
    Ok(Some(String::from_utf8_lossy(value).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&[u8]]) -> Vec<(String, Vec<u8>)> {
        values
            .iter()
            .map(|v| ("idempotency-key".to_owned(), v.to_vec()))
            .collect()
    }

    #[test]
    fn a_key_is_visible_ascii_within_the_limit() {
        assert_eq!(key_of(&[]), Ok(None));
        assert_eq!(
            key_of(&headers(&[b"order-17"])),
            Ok(Some("order-17".into()))
        );
        let longest = vec![b'k'; MAX_KEY_BYTES];
        assert!(key_of(&headers(&[&longest])).is_ok());
        let long = vec![b'k'; MAX_KEY_BYTES + 1];
        let why = key_of(&headers(&[&long])).expect_err("too long");
        assert!(why.contains("255") && why.contains("256 bytes"), "{why}");
        for bad in [&b""[..], b"a b", b"caf\xc3\xa9", b"tab\t"] {
            assert!(key_of(&headers(&[bad])).is_err(), "{bad:?}");
        }
        assert!(key_of(&headers(&[b"a", b"b"])).is_err());
    }
}
