//! Work that must not hold an async worker thread: memory copies of a
//! capture, store listings and file removals. [`off_the_executor`] runs
//! borrowing work (the actor's instance) in place on a thread that tokio
//! has handed its other tasks away from; [`on_blocking_thread`] runs owned
//! work on tokio's blocking pool.

use stasis_contract::error::ApiError;

/// Runs `work` on this thread after telling tokio to move its other tasks
/// elsewhere (`block_in_place`), so that a long memory copy does not stall
/// the requests of other actors. On a current-thread runtime (tests), where
/// that is not possible, `work` simply runs.
pub(crate) fn off_the_executor<T>(work: impl FnOnce() -> T) -> T {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

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
