//! Actors deleted while a rollout runs, before it moved them: the rollout
//! lists each as skipped (`gone`) instead of forgetting it, so that its
//! `total` still counts every actor it covered.

use stasis_contract::directory::row_version;
use stasis_contract::rollout::{ActorOutcome, RolloutState};

use crate::ControlPlane;

impl ControlPlane {
    /// Actor `name`, of version row `row`, was deleted: if a running
    /// rollout of its template had not moved it yet, it lists the actor as
    /// skipped (`gone`) instead of forgetting it.
    pub(crate) fn rollout_saw_delete(&self, name: &str, row: &str) {
        let (template, version) = row_version(row);
        let Ok(Some(record)) = self.directory.rollout(template) else {
            return;
        };
        if record.state != RolloutState::Running
            || (!record.rollback && version == record.to_version)
        {
            return;
        }
        let outcome = self
            .directory
            .rollout_outcomes(template)
            .ok()
            .and_then(|all| all.into_iter().find(|o| o.actor == name));
        match outcome {
            // Not reached yet.
            None if !record.rollback => self.record_gone(template, name, version),
            // Upgraded, not yet moved back.
            Some(o)
                if record.rollback
                    && o.error.is_none()
                    && !o.rolled_back
                    && o.rollback_error.is_none() =>
            {
                let gone = ActorOutcome { gone: true, ..o };
                if let Err(e) = self.directory.put_rollout_outcome(template, &gone) {
                    tracing::error!(actor = name, "recording a rollout outcome: {e}");
                }
            }
            _ => {}
        }
    }

    /// Records actor `name` (on version `from_version`) as skipped by
    /// `template`'s rollout: deleted before it was moved.
    pub(super) fn record_gone(&self, template: &str, name: &str, from_version: u64) {
        let outcome = ActorOutcome {
            actor: name.to_owned(),
            from_version,
            error: None,
            rolled_back: false,
            rollback_error: None,
            gone: true,
        };
        tracing::info!(
            actor = name,
            template,
            "rollout: the actor is gone, skipped"
        );
        if let Err(e) = self.directory.put_rollout_outcome(template, &outcome) {
            tracing::error!(actor = name, "recording a rollout outcome: {e}");
        }
    }
}
