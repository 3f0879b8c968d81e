//! Why a guest call failed ([`CallError`]), and how a wasmtime error
//! becomes one.

use std::time::Duration;

use wasmtime::Trap;

use crate::engine::StasisEngine;

/// Why a guest call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The guest used up its CPU limit (HTTP 504).
    #[error("guest exceeded its CPU limit (--cpu-limit {0:?})")]
    CpuLimit(Duration),
    /// The call took longer than the request timeout (HTTP 504).
    #[error("guest exceeded the request timeout (--request-timeout {0:?})")]
    Timeout(Duration),
    /// The guest trapped (HTTP 500); the message is wasmtime's.
    #[error("guest trapped: {0}")]
    Trap(String),
    /// The guest answered something that is not a valid response (HTTP 502).
    #[error("guest returned an invalid response: {0}")]
    BadResponse(String),
    /// The guest refused the state handed over by another version of its
    /// module (`stasis_load_state` returned non-zero; HTTP 422).
    #[error("{0}")]
    StateRefused(String),
    /// The request could not be handed to the guest (HTTP 500).
    #[error("could not call the guest: {0}")]
    Host(String),
    /// No instance could be allocated right now (HTTP 503): the pooling
    /// allocator's slots or the process's memory mappings are used up. The
    /// actor's state is untouched; a later attempt may succeed.
    #[error("no room for another instance: {0}")]
    Capacity(String),
    /// A file mapped by its restore changed ([`crate::mapped`]) (HTTP
    /// 503): drop the instance, never capture it.
    #[error("a snapshot file mapped into its memory changed under the mapping: {0}")]
    MappedFileChanged(String),
}

impl CallError {
    /// Whether the instance must be dropped (its state may be half-written
    /// or its shadow stack leaked; research notes §4, pitfall 5).
    #[must_use]
    pub fn poisons_instance(&self) -> bool {
        !matches!(
            self,
            CallError::BadResponse(_) | CallError::Capacity(_) | CallError::StateRefused(_)
        )
    }
}

/// Whether `error` says the host ran out of room for instance resources:
/// an OS `ENOMEM` (a mapping past `vm.max_map_count`, or memory) anywhere
/// in its chain, or the pooling allocator's "maximum concurrent ... limit".
fn out_of_capacity(error: &wasmtime::Error) -> bool {
    let enomem = error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.raw_os_error() == Some(libc::ENOMEM))
    });
    let text = format!("{error:#}");
    enomem || text.contains("maximum concurrent") || text.contains("(os error 12)")
}

/// Like [`classify`], except that an instantiation (or call) that ran out
/// of room for instance resources is [`CallError::Capacity`], with a hint
/// at the limit that applies. Other failures that are not traps (e.g. a
/// memory minimum above `--max-memory`) can never succeed: 500.
pub(super) fn classify_instantiation(error: wasmtime::Error, engine: &StasisEngine) -> CallError {
    if !out_of_capacity(&error) {
        let trapped = error.downcast_ref::<Trap>().is_some()
            || error.downcast_ref::<wasmtime_wasi::I32Exit>().is_some();
        if trapped {
            return classify(error, engine.limits().cpu_limit);
        }
        return CallError::Host(format!("instantiating the module: {error:#}"));
    }
    let hint = match engine.slots() {
        Some(slots) => {
            format!("the pooling allocator's {slots} instance slots (--max-live) are in use")
        }
        None => {
            let limit = crate::engine::max_map_count()
                .map_or_else(|| "unknown".to_owned(), |n| n.to_string());
            format!(
                "the process may be at vm.max_map_count ({limit} mappings, about 4 per live \
                 instance); cap live instances with --max-live"
            )
        }
    };
    CallError::Capacity(format!("{error:#}; {hint}"))
}

pub(super) fn classify(error: wasmtime::Error, cpu_limit: Duration) -> CallError {
    if error.downcast_ref::<Trap>().is_none() && out_of_capacity(&error) {
        // E.g. the async stack for the call could not be mapped: the guest
        // did not run, and its instance is intact.
        return CallError::Capacity(format!(
            "{error:#} (the process is out of memory mappings or memory)"
        ));
    }
    if let Some(trap) = error.downcast_ref::<Trap>() {
        if *trap == Trap::Interrupt {
            return CallError::CpuLimit(cpu_limit);
        }
        return CallError::Trap(trap.to_string());
    }
    if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return CallError::Trap(format!("guest called proc_exit({})", exit.0));
    }
    CallError::Trap(format!("{error:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_out_of_mappings_is_capacity_not_a_trap() {
        let limit = Duration::from_secs(1);
        let enomem = wasmtime::Error::from(std::io::Error::from_raw_os_error(libc::ENOMEM))
            .context("failed to allocate a fiber stack");
        let error = classify(enomem, limit);
        assert!(matches!(error, CallError::Capacity(_)), "{error}");
        assert!(!error.poisons_instance());

        let pool = wasmtime::Error::msg("maximum concurrent limit of 1 for core instances reached");
        assert!(matches!(classify(pool, limit), CallError::Capacity(_)));

        let trap = wasmtime::Error::from(Trap::UnreachableCodeReached);
        assert!(matches!(classify(trap, limit), CallError::Trap(_)));
        let other = wasmtime::Error::msg("memory minimum size of 17 pages exceeds memory limits");
        assert!(out_of_capacity(&wasmtime::Error::msg("x (os error 12)")));
        assert!(!out_of_capacity(&other));
    }
}
