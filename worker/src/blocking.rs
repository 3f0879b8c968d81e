//! Work that must not hold an async worker thread: memory copies of a
//! capture, store listings and file removals. Borrowing work (the actor's
//! instance) runs in place through [`off_the_executor`] (re-exported from
//! `stasis_core::blocking`); owned work runs on tokio's blocking pool
//! through [`on_blocking_thread`].

use stasis_contract::error::ApiError;
pub(crate) use stasis_core::blocking::off_the_executor;

/// Runs `work` on tokio's blocking pool and waits for it.
///
/// # Errors
/// `work`'s error, or internal if the blocking task panicked.
pub(crate) async fn on_blocking_thread<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiError::internal(format!("blocking task failed: {e}")))?
}
