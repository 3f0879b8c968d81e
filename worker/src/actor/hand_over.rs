//! An actor task's side of a state hand-over (a live code upgrade,
//! `Worker::hand_over`): the captured actor's instance saves its state
//! (`stasis_save_state`); a fresh instance of the new version takes it
//! (`stasis_load_state`).

use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::status::{ActorState, ResumeFrom};
use stasis_core::instance::CallError;

use super::ActorTask;
use crate::mailbox::SavedState;

/// A failed hand-over call (`what`: which side): capacity, timeouts and
/// the CPU limit keep their status; anything else (a trap, a refusal, bad
/// bytes) is 422, the state cannot be handed over.
pub(crate) fn refused(what: &str, e: &CallError) -> ApiError {
    let kind = match e {
        CallError::Capacity(_)
        | CallError::Timeout(_)
        | CallError::CpuLimit(_)
        | CallError::MappedFileChanged(_) => ErrorKind::from(e),
        CallError::Trap(_)
        | CallError::BadResponse(_)
        | CallError::Host(_)
        | CallError::StateRefused(_) => ErrorKind::Unprocessable,
    };
    let detail = e.to_string();
    let detail = script_exception(&detail).unwrap_or(detail);
    ApiError::new(kind, format!("{what}: {detail}"))
}

/// The line a JavaScript script's exception leaves last on the guest's
/// stderr (`uncaught exception in save: TypeError: ...`), when a trap's
/// message ends with one: the trap around it (`wasm unreachable`, the
/// engine's frames) says nothing more to whoever asked for the upgrade,
/// and the stack stays in the actor's log.
fn script_exception(trap: &str) -> Option<String> {
    let (_, stderr) = trap.rsplit_once("guest stderr: ")?;
    let exception = &stderr[stderr.rfind("uncaught exception in ")?..];
    Some(exception.replace(
        "(its stack is above in the log)",
        "(its stack is in the actor's log)",
    ))
}

impl ActorTask {
    /// The actor's state from its instance's `stasis_save_state` (an
    /// instance is restored from its newest snapshot first when it has
    /// none), with the instance's clock and its idempotency table
    /// (encoded: the new version's instance applied the same requests).
    /// The actor stays captured. A call that poisons the instance drops
    /// it.
    ///
    /// # Errors
    /// 409 unless the actor is captured for a move; the restore's failure;
    /// 422 (or the call's own status) if the guest fails to save.
    pub(crate) async fn save_state(&mut self) -> Result<SavedState, ApiError> {
        let state = self.status().state;
        if state != ActorState::Migrating {
            return Err(ApiError::conflict(format!(
                "actor {} is not captured for an upgrade (it is {})",
                self.name,
                state.as_str()
            )));
        }
        if self.instance.is_none() {
            let resumed = self.resume(ResumeFrom::Newest).await;
            // Still captured: calls that come meanwhile wait for the end.
            if self.status().state != ActorState::Failed {
                self.set_state(ActorState::Migrating);
            }
            resumed?;
        }
        let Some(instance) = self.instance.as_mut() else {
            return Err(ApiError::internal("a resumed actor without an instance"));
        };
        self.chain.unjournaled = true;
        match instance.save_state().await {
            // The clock after the call: the new version starts no earlier
            // than a reading `stasis_save_state` took.
            Ok(bytes) => Ok(SavedState {
                state: bytes,
                clock_ns: instance.clock_ns(),
                mark: self.kept.clock.known_mark(),
                table: self.kept.idem.encode(),
            }),
            Err(e) => {
                if e.poisons_instance() {
                    self.drop_instance(false);
                    self.sync_live(false);
                }
                Err(refused("the running version's `stasis_save_state`", &e))
            }
        }
    }

    /// Gives the fresh instance the state handed over (see
    /// [`ActorTask::create_with`]).
    ///
    /// # Errors
    /// 422 (or the call's own status) if the new version refuses it.
    pub(crate) async fn load_state(&mut self, state: &[u8]) -> Result<(), ApiError> {
        let Some(instance) = self.instance.as_mut() else {
            return Err(ApiError::internal("loading a state without an instance"));
        };
        // No journal entry holds it: the hand-over's snapshot follows.
        instance
            .load_state(state)
            .await
            .map_err(|e| refused("the new version's `stasis_load_state`", &e))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_script_exception_is_told_without_the_trap_around_it() {
        let trap = "guest trapped: wasm trap: wasm `unreachable` instruction executed; guest \
                    stderr:     at <anonymous> (stasis:prelude:271:77) /     at map (native) / \
                    uncaught exception in save: TypeError: save() returned a Item at the \
                    value.items[0] (its stack is above in the log)";
        assert_eq!(
            super::script_exception(trap).as_deref(),
            Some(
                "uncaught exception in save: TypeError: save() returned a Item at the \
                 value.items[0] (its stack is in the actor's log)"
            )
        );
        assert_eq!(
            super::script_exception("guest trapped: wasm trap: out of bounds"),
            None
        );
        // A " / " of the exception's own is kept (the stderr lines are
        // joined by it too).
        let slash = "guest trapped: x; guest stderr:     at f (native) / uncaught exception in \
                     save: Error: a / b (its stack is above in the log)";
        assert_eq!(
            super::script_exception(slash).as_deref(),
            Some("uncaught exception in save: Error: a / b (its stack is in the actor's log)")
        );
    }
}
