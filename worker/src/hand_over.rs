//! State hand-over, one path of a live code upgrade
//! ([`Worker::hand_over`]): the captured actor's instance saves its state
//! (`stasis_save_state`), a fresh instance of the new version takes it
//! (`stasis_load_state`), and its snapshot, written at the next sequence
//! number, makes it the actor.

use stasis_contract::error::ApiError;
use stasis_contract::status::{ActorState, SnapshotReport};

use crate::actor::Command;
use crate::{ActorSpec, Worker};

impl Worker {
    /// Hands captured actor `spec.name` over to `spec`'s module (another
    /// version of its template) under placement `epoch`: its state from
    /// `stasis_save_state` goes to a fresh instance of the new module
    /// (start function, `_initialize`, `stasis_init`, then
    /// `stasis_load_state`), whose snapshot is written durably as `seq`;
    /// that instance then serves as the actor, `running`, its clock no
    /// earlier than the old instance's. On failure the new instance is
    /// dropped, nothing is written and the actor stays captured on its
    /// version (the caller ends the capture).
    ///
    /// # Errors
    /// 404/409 if the actor is not hosted here or not captured; 422 (or
    /// the call's own status) if either version fails its side; the
    /// snapshot write's failure.
    pub async fn hand_over(
        &self,
        spec: &ActorSpec,
        epoch: u64,
        seq: u64,
    ) -> Result<SnapshotReport, ApiError> {
        let saved = self.command(&spec.name, Command::SaveState).await??;
        let mut task = self.task(spec, epoch, ActorState::Creating);
        task.hand_over_at(seq, &saved);
        let report = task.create_with(Some(&saved.state)).await?;
        // The new instance is the actor now: the old task ends (calls it
        // held for the capture are told to ask again, under the new epoch).
        self.replace_task(&spec.name);
        self.start(task);
        tracing::info!(actor = %spec.name, seq, bytes = saved.state.len(), "state handed over to another version");
        Ok(report)
    }
}
