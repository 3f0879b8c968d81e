//! Live code upgrade of one actor ([`ControlPlane::upgrade`]): through the
//! actor's gate (requests in flight finish, new ones are held, not
//! refused), its state moves to another version of its template by
//! **memory carry-over** — the snapshot taken at the barrier is restored
//! into the new version's module on the same worker — when both versions
//! declare the same layout, else by **state hand-over** — the old
//! instance's `stasis_save_state` bytes go to a fresh instance of the new
//! version's `stasis_load_state` — when they export that pair; on any
//! failure the actor stays on its version with its state unchanged.

use std::time::Instant;

use super::ControlPlane;
use super::membership::Member;
use super::views::UpgradeInfo;
use stasis_contract::directory::{TemplateRow, row_version};
use stasis_contract::error::ApiError;
use stasis_contract::status::{Captured, ms};
use stasis_contract::templates::Templates as _;
use stasis_core::module::Digest;
use stasis_core::snapshot;
use stasis_core::snapshot_store::SnapshotStore;

impl ControlPlane {
    /// Upgrades actor `name` to version `to` of its template (the newest
    /// when `None`) by memory carry-over when both versions declare the
    /// same layout and have the same memories and mutable globals
    /// ([`stasis_core::module::ModuleInfo::carry_over_refusal`]; the
    /// actor's snapshot must then verify against the new module), else by
    /// state hand-over when the old version exports `stasis_save_state`
    /// and the new one `stasis_load_state`
    /// ([`stasis_core::module::ModuleInfo::hand_over_refusal`]).
    ///
    /// # Errors
    /// 404 unknown actor or version; 409 already on that version, neither
    /// path applies (the message names why for each), or the actor was
    /// upgraded meanwhile; the failure that left it on its version (422
    /// its snapshot does not verify against the new module, or a version
    /// failed its side of the hand-over; 503 its worker unreachable); 503
    /// when the control plane is shutting down.
    pub async fn upgrade(&self, name: &str, to: Option<u64>) -> Result<UpgradeInfo, ApiError> {
        self.refuse_if_shutting_down("upgrade")?;
        let placement = self.placement_of(name)?;
        let (template, from) = row_version(&placement.template);
        let template = template.to_owned();
        let versions = self.versions_of(&template)?;
        let newest = versions.len() as u64;
        let to = to.unwrap_or(newest);
        let target = usize::try_from(to)
            .ok()
            .and_then(|to| to.checked_sub(1))
            .and_then(|i| versions.get(i))
            .cloned()
            .ok_or_else(|| {
                ApiError::not_found(format!(
                    "template {template} has no version {to} (versions 1 to {newest})"
                ))
            })?;
        if to == from {
            return Err(ApiError::conflict(format!(
                "actor {name} already runs version {to} of template {template}"
            )));
        }
        let source = self.template_row(&placement.template)?;
        let (old, new) = (
            self.templates.template(&source.digest).await?,
            self.templates.template(&target.digest).await?,
        );
        let path = match (
            old.info.carry_over_refusal(&new.info),
            old.info.hand_over_refusal(&new.info),
        ) {
            (None, _) => Path::CarryOver(new.info.digest),
            (Some(_), None) => Path::HandOver,
            (Some(carry), Some(hand)) => {
                let why =
                    format!("not by memory carry-over ({carry}), not by state hand-over ({hand})");
                if let Ok(member) = self.host_of(&placement, name) {
                    upgrade_failed(&member, name, &template, (from, to), &why).await;
                }
                return Err(ApiError::conflict(format!(
                    "actor {name} cannot move from version {from} to version {to} of template \
                     {template}: {why}; it stays on version {from}"
                )));
            }
        };
        let (downtime, barrier) = self
            .change_version(name, &source, &target, path, &template, (from, to))
            .await?;
        Ok(UpgradeInfo {
            actor: self.actor(name).await?,
            from_version: from,
            to_version: to,
            path: path.as_str(),
            downtime_ms: ms(downtime),
            barrier_snapshot: barrier,
        })
    }

    /// `actor resume --from-snapshot` of snapshot `seq`, written by
    /// another version of the actor's template than the one it runs
    /// (`None` when the snapshot is the running version's: an ordinary
    /// resume): through the gate, the snapshot becomes the actor's newest
    /// and it runs the version that wrote it, the newest version of its
    /// template with that module.
    ///
    /// # Errors
    /// 409 when no version of the template has the module the snapshot
    /// names; 422 the snapshot does not verify; the failures of an
    /// upgrade, which leave the actor as it was.
    pub(super) async fn resume_in_its_version(
        &self,
        name: &str,
        seq: u64,
    ) -> Result<Option<()>, ApiError> {
        let placement = self.placement_of(name)?;
        let source = self.template_row(&placement.template)?;
        let (store, actor) = (self.store.clone(), name.to_owned());
        let digest = tokio::task::spawn_blocking(move || snapshot_module(&*store, &actor, seq))
            .await
            .map_err(ApiError::internal)??;
        if digest == source.digest {
            return Ok(None);
        }
        let (template, from) = row_version(&placement.template);
        let template = template.to_owned();
        let versions = self.versions_of(&template)?;
        let Some((to, target)) = version_with_module(&versions, &digest) else {
            return Err(ApiError::conflict(format!(
                "snapshot {seq} of actor {name} was written by module {digest}, which is no \
                 version of template {template}"
            )));
        };
        self.change_version(
            name,
            &source,
            target,
            Path::Restore(seq),
            &template,
            (from, to),
        )
        .await?;
        Ok(Some(()))
    }

    /// Moves actor `name` from version row `source` to `target` by `path`
    /// through its gate (`versions`: their numbers, for the log and the
    /// answers); returns how long new requests were held and the snapshot
    /// taken at the barrier. On failure the actor stays on `source` with
    /// its state.
    async fn change_version(
        &self,
        name: &str,
        source: &TemplateRow,
        target: &TemplateRow,
        path: Path,
        template: &str,
        (from, to): (u64, u64),
    ) -> Result<(std::time::Duration, u64), ApiError> {
        // One placed lazily and not adopted yet is adopted first.
        self.place_if_waiting(name).await;
        let gate = self.placement_of(name)?.gate;
        // New requests wait from the moment the upgrade asks for the gate.
        let started = Instant::now();
        let closed = gate.barrier.write().await;
        let placement = self.placement_of(name)?;
        if placement.template != source.name {
            return Err(ApiError::conflict(format!(
                "actor {name} was upgraded meanwhile"
            )));
        }
        self.refuse_if_shutting_down("upgrade")?;
        let member = self.host_of(&placement, name)?;
        // A snapshot to restore is read before the capture: the capture
        // writes the actor's next snapshot, and retention may then remove
        // the one restored (`--keep-snapshots`).
        let restored = match path {
            Path::Restore(seq) => Some(self.read_snapshot(name, &target.digest, seq).await?),
            Path::CarryOver(_) | Path::HandOver => None,
        };
        let captured = member.api.capture(name).await?;
        let epoch = placement.epoch + 1;
        let moved = match path {
            Path::CarryOver(stamp) => {
                match self
                    .read_standalone_snapshot(name, &source.digest, captured.seq)
                    .await
                {
                    Ok(full) => {
                        self.carry_over(name, &member, full, &captured, target, Some(stamp), epoch)
                            .await
                    }
                    Err(e) => Err((e, false)),
                }
            }
            Path::Restore(_) => {
                let full = restored.unwrap_or_default();
                self.carry_over(name, &member, full, &captured, target, None, epoch)
                    .await
            }
            Path::HandOver => {
                self.hand_over(name, &member, &captured, target, epoch)
                    .await
            }
        };
        if let Err((e, installed)) = moved {
            self.stay(name, &member, &captured, source, placement.epoch, installed)
                .await;
            drop(closed);
            tracing::warn!(actor = name, from, to, "upgrade refused: {e}");
            upgrade_failed(&member, name, template, (from, to), e.message()).await;
            let message = format!(
                "upgrade of {name} to version {to} of template {template} refused; it stays \
                 on version {from} with its state: {}",
                e.message()
            );
            return Err(e.with_message(message));
        }
        drop(closed);
        let downtime = started.elapsed();
        tracing::info!(
            actor = name,
            template,
            from,
            to,
            path = path.as_str(),
            downtime_ms = ms(downtime),
            "actor upgraded"
        );
        Ok((downtime, captured.seq))
    }

    /// Writes snapshot `full` of the actor (its chain flattened), re-stamped with module `stamp` when
    /// given, as the actor's next snapshot after the `captured` one, full,
    /// and installs it on `member` under version `target` at `epoch`,
    /// which verifies it against that version's module; then switches the
    /// actor's placement and version durably. On failure, also whether the
    /// new version was installed (the directory refused the switch).
    #[allow(
        clippy::too_many_arguments,
        reason = "one call per path; the parts are the change's, not a type's"
    )]
    async fn carry_over(
        &self,
        name: &str,
        member: &Member,
        full: bytes::Bytes,
        captured: &Captured,
        target: &TemplateRow,
        stamp: Option<Digest>,
        epoch: u64,
    ) -> Result<(), (ApiError, bool)> {
        let stamped = match stamp {
            Some(stamp) => snapshot::restamp(&full, stamp).map_err(|e| {
                let e = ApiError::unprocessable(format!("snapshot {}: {e}", captured.seq));
                (e, false)
            })?,
            None => full.to_vec(),
        };
        let seq = captured.seq + 1;
        let (store, actor) = (self.store.clone(), name.to_owned());
        let written =
            tokio::task::spawn_blocking(move || store.write(&actor, seq, epoch, &stamped))
                .await
                .map_err(|e| (ApiError::internal(e), false))?;
        written.map_err(|e| (ApiError::from(e), false))?;
        let spec = Self::host_spec_as_is(target, epoch);
        if let Err(e) = self.ship(member, name, &spec, seq, captured.live).await {
            // Not the actor's state: its old version goes on from `seq`.
            let (store, actor) = (self.store.clone(), name.to_owned());
            let _ = tokio::task::spawn_blocking(move || store.remove(&actor, seq)).await;
            return Err((e, false));
        }
        self.switch(name, member, &target.name, epoch)
            .map_err(|e| (e, true))
    }

    /// Hands the captured actor over to version `target` on `member` at
    /// `epoch` (the worker writes the new instance's snapshot as the next
    /// one, see [`stasis_contract::worker_api::WorkerApi::hand_over`]),
    /// then switches its placement and version durably. On failure, also
    /// whether the actor must be put back from the captured snapshot: the
    /// old instance ran `stasis_save_state` (its memory is not the
    /// captured state's any more), so it always is.
    async fn hand_over(
        &self,
        name: &str,
        member: &Member,
        captured: &Captured,
        target: &TemplateRow,
        epoch: u64,
    ) -> Result<(), (ApiError, bool)> {
        let spec = Self::host_spec(target, epoch);
        member
            .api
            .hand_over(name, &spec, captured.seq + 1)
            .await
            .map_err(|e| (e, true))?;
        self.switch(name, member, &target.name, epoch)
            .map_err(|e| (e, true))
    }

    /// Points actor `name` at version row `version` on `member` under
    /// `epoch`, in the directory and the placement table.
    fn switch(
        &self,
        name: &str,
        member: &Member,
        version: &str,
        epoch: u64,
    ) -> Result<(), ApiError> {
        // Tests: a crash between the new version's snapshot and the switch.
        if let Some(ms) = std::env::var("STASIS_FAILPOINT_UPGRADE_SWITCH_DELAY_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        {
            tracing::warn!(actor = name, ms, "failpoint: holding the upgrade's switch");
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        self.directory
            .place_actor_as(name, &member.name, epoch, version)?;
        self.placements.point_as(
            name,
            member.name.clone(),
            member.incarnation,
            epoch,
            version,
        );
        Ok(())
    }

    /// After a refused carry-over: the actor serves on its own version
    /// again, as it was at the barrier. A refusal before the install (the
    /// snapshot does not verify against the new module) kept its instance:
    /// the capture is cancelled. One after it (the restore into the new
    /// module failed and the worker dropped the actor, or the directory
    /// refused the switch: `installed`) is put back from the captured
    /// snapshot.
    async fn stay(
        &self,
        name: &str,
        member: &Member,
        captured: &Captured,
        source: &TemplateRow,
        epoch: u64,
        installed: bool,
    ) {
        if !installed && member.api.status(name).await.is_ok() {
            member.api.cancel_move(name).await;
            return;
        }
        if installed {
            // The re-stamped snapshot is not the old version's.
            let (store, actor, seq) = (self.store.clone(), name.to_owned(), captured.seq + 1);
            let _ = tokio::task::spawn_blocking(move || store.remove(&actor, seq)).await;
        }
        let spec = Self::host_spec_as_is(source, epoch);
        if let Err(e) = self
            .ship(member, name, &spec, captured.seq, captured.live)
            .await
        {
            tracing::error!(actor = name, "putting the actor back on its version: {e}");
        }
    }
}

/// Records event `upgrade_failed` in actor `name`'s log on `member`: the
/// versions and why the actor stays on `from` (best effort: the answer to
/// the upgrade says it either way).
async fn upgrade_failed(
    member: &Member,
    name: &str,
    template: &str,
    (from, to): (u64, u64),
    why: &str,
) {
    let text = format!(
        "upgrade_failed: from version {from} to version {to} of template {template}: {why}; \
         it stays on version {from} with its state"
    );
    if let Err(e) = member.api.event(name, &text).await {
        tracing::warn!(actor = name, "recording the failed upgrade in its log: {e}");
    }
}

/// The module (SHA-256 hex) that wrote snapshot `seq` of `actor`, from
/// its header: every snapshot names the version of the template that
/// wrote it.
///
/// # Errors
/// The store's (a missing snapshot, 404 kind); 422 if the header does not
/// read.
pub(super) fn snapshot_module(
    store: &dyn SnapshotStore,
    actor: &str,
    seq: u64,
) -> Result<String, ApiError> {
    let stored = store.open_snapshot(actor, seq)?;
    let header = snapshot::peek_header(&stored)
        .map_err(|e| ApiError::unprocessable(format!("snapshot {seq} of {actor}: {e}")))?;
    Ok(hex::encode(header.module_digest))
}

/// The newest of `versions` (oldest first) with module `digest`, and its
/// version number.
pub(super) fn version_with_module<'a>(
    versions: &'a [TemplateRow],
    digest: &str,
) -> Option<(u64, &'a TemplateRow)> {
    versions
        .iter()
        .enumerate()
        .rev()
        .find(|(_, row)| row.digest == digest)
        .map(|(i, row)| (i as u64 + 1, row))
}

/// How an upgrade moves the state (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// Re-stamped with the new version's module.
    CarryOver(Digest),
    HandOver,
    /// Snapshot `seq`, written by the target version, becomes the newest.
    Restore(u64),
}

impl Path {
    /// Its name in answers (`UpgradeInfo::path`).
    fn as_str(self) -> &'static str {
        match self {
            Path::CarryOver(_) => "carry_over",
            Path::HandOver => "hand_over",
            Path::Restore(_) => "restore",
        }
    }
}
