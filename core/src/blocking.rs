//! Blocking work run from async code without stalling the other tasks of
//! the executor: [`off_the_executor`].

/// Runs `work` on this thread after telling tokio to move its other tasks
/// elsewhere (`block_in_place`), so that a long copy or compile does not
/// stall the requests of other actors; `work` may borrow (an actor's
/// instance). Outside a multi-thread runtime (a current-thread runtime in
/// tests, or none), where that is not possible, `work` simply runs.
pub fn off_the_executor<T>(work: impl FnOnce() -> T) -> T {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}
