//! Reading what the demo actors answer.

/// The number a counting demo ends its answer with: the `counter` demo's
/// `hello from: W | preserved memory count: N` and the `faulty` demo's
/// `count: N`. `None` if the last word is not a number.
#[must_use]
pub fn count_in(body: &str) -> Option<u64> {
    body.trim().rsplit(' ').next().and_then(|n| n.parse().ok())
}

/// What the `echo` demo answers for a request with `body`:
/// `<length> <sha256-hex>\n`.
#[must_use]
pub fn echo_answer(body: &[u8]) -> String {
    use sha2::Digest as _;
    format!(
        "{} {}\n",
        body.len(),
        hex::encode(sha2::Sha256::digest(body))
    )
}
