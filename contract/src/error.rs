//! The one error of Stasis's APIs: [`ApiError`], a [`ErrorKind`] and a
//! one-line reason, plus a `Retry-After` hint where waiting helps.
//!
//! Code decides by the kind ([`ApiError::kind`]), never by a number. The
//! HTTP status of a kind is chosen in one place, [`ErrorKind::status`],
//! read by the HTTP edge (the ingress, the admin API, the worker protocol)
//! and by the request metrics; [`ErrorKind::from_status`] is its inverse
//! for an answer that came over HTTP from another Stasis process.

use stasis_core::instance::CallError;

/// What kind of failure an [`ApiError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request is malformed or breaks a documented limit (400).
    BadRequest,
    /// Missing or wrong credentials (401).
    Unauthorized,
    /// Good credentials that do not allow this: a token whose role is
    /// below the route's (403).
    Forbidden,
    /// No such actor, template, worker or route (404).
    NotFound,
    /// The request conflicts with the current state (409).
    Conflict,
    /// What was asked for is gone for good: a worker declared lost (410).
    Gone,
    /// The request went to a worker by a placement epoch it no longer
    /// holds; send it by the current placement (421).
    StaleEpoch,
    /// The request's body is over a documented limit (413).
    TooLarge,
    /// Over a rate quota: retry after `Retry-After` (429).
    TooManyRequests,
    /// The method is not one the route takes (405).
    MethodNotAllowed,
    /// Well-formed but cannot be processed: a module or snapshot that does
    /// not verify (422).
    Unprocessable,
    /// A call cycle between actors (508).
    LoopDetected,
    /// A failure inside Stasis or the guest (500).
    Internal,
    /// Something Stasis does not do yet, such as a WebSocket upgrade (501).
    NotImplemented,
    /// Another process answered nonsense, or a guest's answer is not one
    /// (502).
    BadGateway,
    /// Not now: full mailbox, hold timeout, shutting down, failed actor,
    /// unreachable worker (503).
    Unavailable,
    /// A time limit ran out: CPU, request timeout (504).
    Timeout,
    /// The snapshot quota is used up (507).
    InsufficientStorage,
    /// The request was given up because its client left before it started
    /// (never answered: there is nobody to answer).
    Abandoned,
    /// The client left while the request was forwarded to a worker that
    /// could not be told, so whether it ran is unknown (never answered).
    OutcomeUnknown,
    /// The actor's worker cannot be reached now and the request was never
    /// delivered (its connection was refused, or the worker is declared
    /// lost and the actor not placed again yet): the router holds it
    /// until the actor has a host (503 past `--hold-timeout`).
    Unreachable,
}

impl ErrorKind {
    /// Every kind.
    pub const ALL: [ErrorKind; 21] = [
        ErrorKind::BadRequest,
        ErrorKind::Unauthorized,
        ErrorKind::Forbidden,
        ErrorKind::NotFound,
        ErrorKind::Conflict,
        ErrorKind::Gone,
        ErrorKind::TooLarge,
        ErrorKind::TooManyRequests,
        ErrorKind::MethodNotAllowed,
        ErrorKind::StaleEpoch,
        ErrorKind::Unprocessable,
        ErrorKind::LoopDetected,
        ErrorKind::Internal,
        ErrorKind::NotImplemented,
        ErrorKind::BadGateway,
        ErrorKind::Unavailable,
        ErrorKind::Timeout,
        ErrorKind::InsufficientStorage,
        ErrorKind::Abandoned,
        ErrorKind::OutcomeUnknown,
        ErrorKind::Unreachable,
    ];

    /// The HTTP status the edge answers for this kind. [`ErrorKind::Abandoned`]
    /// and [`ErrorKind::OutcomeUnknown`] are never sent (their client is
    /// gone); they map to 503 should one be written anyway.
    #[must_use]
    pub fn status(self) -> u16 {
        match self {
            Self::BadRequest => 400,
            Self::Unauthorized => 401,
            Self::Forbidden => 403,
            Self::NotFound => 404,
            Self::Conflict => 409,
            Self::Gone => 410,
            Self::TooLarge => 413,
            Self::TooManyRequests => 429,
            Self::MethodNotAllowed => 405,
            Self::StaleEpoch => 421,
            Self::Unprocessable => 422,
            Self::LoopDetected => 508,
            Self::Internal => 500,
            Self::NotImplemented => 501,
            Self::BadGateway => 502,
            Self::Unavailable | Self::Abandoned | Self::OutcomeUnknown | Self::Unreachable => 503,
            Self::Timeout => 504,
            Self::InsufficientStorage => 507,
        }
    }

    /// The kind of an error answered over HTTP with `status` by another
    /// Stasis process (the inverse of [`ErrorKind::status`]; any other
    /// client error is a bad request, any other status internal).
    #[must_use]
    pub fn from_status(status: u16) -> Self {
        match status {
            401 => Self::Unauthorized,
            403 => Self::Forbidden,
            404 => Self::NotFound,
            409 => Self::Conflict,
            410 => Self::Gone,
            413 => Self::TooLarge,
            429 => Self::TooManyRequests,
            405 => Self::MethodNotAllowed,
            421 => Self::StaleEpoch,
            422 => Self::Unprocessable,
            508 => Self::LoopDetected,
            501 => Self::NotImplemented,
            502 => Self::BadGateway,
            503 => Self::Unavailable,
            504 => Self::Timeout,
            507 => Self::InsufficientStorage,
            400..=499 => Self::BadRequest,
            _ => Self::Internal,
        }
    }
}

impl ErrorKind {
    /// The kind's name on the wire (`"not_found"`, ...): the `kind` field of
    /// an error answer's JSON body, so that a kind that shares its status
    /// with another (an abandoned request and an unavailable worker) comes
    /// back as itself from another Stasis process.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::BadRequest => "bad_request",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::NotFound => "not_found",
            Self::Conflict => "conflict",
            Self::Gone => "gone",
            Self::TooLarge => "too_large",
            Self::TooManyRequests => "too_many_requests",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::StaleEpoch => "stale_epoch",
            Self::Unprocessable => "unprocessable",
            Self::LoopDetected => "loop_detected",
            Self::Internal => "internal",
            Self::NotImplemented => "not_implemented",
            Self::BadGateway => "bad_gateway",
            Self::Unavailable => "unavailable",
            Self::Timeout => "timeout",
            Self::InsufficientStorage => "insufficient_storage",
            Self::Abandoned => "abandoned",
            Self::OutcomeUnknown => "outcome_unknown",
            Self::Unreachable => "unreachable",
        }
    }

    /// The kind named `name` on the wire ([`ErrorKind::name`]).
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl From<&CallError> for ErrorKind {
    /// A guest call's failure: a time limit is [`ErrorKind::Timeout`], a
    /// bad answer [`ErrorKind::BadGateway`], no capacity
    /// [`ErrorKind::Unavailable`], a trap [`ErrorKind::Internal`].
    fn from(e: &CallError) -> Self {
        match e {
            CallError::CpuLimit(_) | CallError::Timeout(_) => Self::Timeout,
            CallError::BadResponse(_) => Self::BadGateway,
            CallError::StateRefused(_) => Self::Unprocessable,
            CallError::Trap(_) | CallError::Host(_) => Self::Internal,
            CallError::Capacity(_) | CallError::MappedFileChanged(_) => Self::Unavailable,
        }
    }
}

/// A failure answered to a caller (module docs).
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{message}")]
pub struct ApiError {
    kind: ErrorKind,
    message: String,
    retry_after: Option<u64>,
}

impl ApiError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            retry_after: None,
        }
    }

    /// What kind of failure it is.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Whether it is of `kind`.
    #[must_use]
    pub fn is(&self, kind: ErrorKind) -> bool {
        self.kind == kind
    }

    /// What went wrong, in one line.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Seconds for a `Retry-After` header, when retrying makes sense.
    #[must_use]
    pub fn retry_after(&self) -> Option<u64> {
        self.retry_after
    }

    /// The same error, with a `Retry-After` hint of `secs` (or none).
    #[must_use]
    pub fn with_retry_after(mut self, secs: Option<u64>) -> Self {
        self.retry_after = secs;
        self
    }

    /// The same kind with `message` in place of this one's.
    #[must_use]
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    /// Unavailable with `Retry-After: 1`.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message).with_retry_after(Some(1))
    }

    /// Unavailable without `Retry-After`: the actor is `failed` and stays
    /// so until someone repairs it (`stasis actor resume
    /// --from-snapshot`/`--from-template`), so retrying the same request
    /// cannot succeed.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }

    /// A bad request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadRequest, message)
    }

    /// Not found.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// A conflict with the current state.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, message)
    }

    /// Unprocessable: well-formed, but it does not verify or compile.
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unprocessable, message)
    }

    /// Another process answered nonsense.
    pub fn bad_gateway(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadGateway, message)
    }

    /// An internal failure, with context.
    pub fn internal(message: impl std::fmt::Display) -> Self {
        Self::new(ErrorKind::Internal, message.to_string())
    }

    /// A guest call's failure (see `From<&CallError> for ErrorKind`), with
    /// `message`.
    pub fn call(error: &CallError, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::from(error), message)
    }
}

impl From<stasis_core::snapshot_store::StoreError> for ApiError {
    /// Insufficient storage for the quota, unavailable for a fenced-off
    /// worker (nothing was written), else internal (for a write of
    /// unknown outcome, saying it may or may not have taken effect). The
    /// answer names the file by its store key only; the server log gets
    /// the path.
    fn from(e: stasis_core::snapshot_store::StoreError) -> Self {
        use stasis_core::snapshot_store::StoreError;
        let kind = match &e {
            StoreError::Quota { .. } => ErrorKind::InsufficientStorage,
            StoreError::Fenced { .. } => ErrorKind::Unavailable,
            StoreError::Io { .. } | StoreError::Unknown { .. } => {
                tracing::error!("snapshot store: {}", e.detail());
                ErrorKind::Internal
            }
        };
        Self::new(kind, e.to_string())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_comes_back_by_its_name_and_status() {
        for name in [
            "bad_request",
            "unauthorized",
            "forbidden",
            "not_found",
            "conflict",
            "gone",
            "too_large",
            "too_many_requests",
            "method_not_allowed",
            "stale_epoch",
            "unprocessable",
            "loop_detected",
            "internal",
            "not_implemented",
            "bad_gateway",
            "unavailable",
            "timeout",
            "insufficient_storage",
            "abandoned",
            "outcome_unknown",
            "unreachable",
        ] {
            let kind = ErrorKind::from_name(name).expect(name);
            assert_eq!(kind.name(), name);
            if !matches!(
                kind,
                ErrorKind::Abandoned | ErrorKind::OutcomeUnknown | ErrorKind::Unreachable
            ) {
                assert_eq!(ErrorKind::from_status(kind.status()), kind, "{name}");
            }
        }
        assert_eq!(ErrorKind::from_name("teapot"), None);
        assert_eq!(ErrorKind::from_status(418), ErrorKind::BadRequest);
        assert_eq!(ErrorKind::from_status(505), ErrorKind::Internal);
    }
}
