//! The one error shape every API answers with: an HTTP status and a
//! one-line reason, plus `Retry-After` where waiting helps.

/// A failure answered to a caller.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{message}")]
pub struct ApiError {
    /// HTTP status (e.g. 404 unknown actor, 503 failed actor, 504 CPU limit).
    pub status: u16,
    /// What went wrong, in one line.
    pub message: String,
    /// Seconds for a `Retry-After` header, when retrying makes sense.
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with `status` and `message`.
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 503 with `Retry-After: 1`.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            status: 503,
            message: message.into(),
            retry_after: Some(1),
        }
    }

    /// 503 without `Retry-After`: the actor is `failed` and stays so until
    /// someone repairs it (`stasis actor resume --from-snapshot`/`--from-template`),
    /// so retrying the same request cannot succeed.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(503, message)
    }

    /// 400.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, message)
    }

    /// 409.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(409, message)
    }

    /// 500 for an internal failure, with context.
    pub fn internal(message: impl std::fmt::Display) -> Self {
        Self::new(500, message.to_string())
    }
}

impl From<stasis_core::snapshot_store::StoreError> for ApiError {
    /// 507 for the quota, else 500. The answer names the file by its store
    /// key only; the server log gets the path.
    fn from(e: stasis_core::snapshot_store::StoreError) -> Self {
        let status = if matches!(e, stasis_core::snapshot_store::StoreError::Quota { .. }) {
            507
        } else {
            tracing::error!("snapshot store: {}", e.detail());
            500
        };
        Self::new(status, e.to_string())
    }
}

/// Longest part of a refused name an error echoes back.
const NAME_ECHO_CHARS: usize = 63;

/// `name` for an error message: quoted in full up to 63 characters, else
/// its first 63 and how long it is (an over-long name is not echoed whole).
#[must_use]
pub fn echo_name(name: &str) -> String {
    echo_cut(name, NAME_ECHO_CHARS)
}

/// `text` quoted for an error message, cut to `max_chars` characters (then
/// followed by `… (N characters)`).
#[must_use]
pub fn echo_cut(text: &str, max_chars: usize) -> String {
    let chars = text.chars().count();
    if chars <= max_chars {
        format!("{text:?}")
    } else {
        let head: String = text.chars().take(max_chars).collect();
        format!("{head:?}… ({chars} characters)")
    }
}

/// Whether `name` is an RFC 1123 label: 1–63 of `a-z`, `0-9`, `-`, not
/// starting or ending with `-`. Actor and template names must be.
#[must_use]
pub fn is_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && !name.starts_with('-')
        && !name.ends_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Checks `name` as an actor or template name (`what`).
///
/// # Errors
/// 400 naming the rule broken.
pub fn check_label(what: &str, name: &str) -> Result<(), ApiError> {
    if is_label(name) {
        Ok(())
    } else {
        let rule = if name.len() > 63 {
            "longer than the limit of 63 characters"
        } else {
            "use 1-63 lower-case letters, digits and '-', not starting or ending with '-'"
        };
        Err(ApiError::bad_request(format!(
            "invalid {what} name {}: {rule} (an RFC 1123 label)",
            echo_name(name)
        )))
    }
}
