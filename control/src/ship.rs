//! Snapshots between the control plane's store and the workers: the one
//! "install from snapshot on the target" ([`ControlPlane::ship`]), and the
//! snapshots remote workers replicate into the store.

use bytes::Bytes;
use stasis_core::snapshot_store::{ChainError, open_chain};

use super::ControlPlane;
use super::membership::Member;
use stasis_contract::error::ApiError;
use stasis_contract::templates::Templates as _;
use stasis_contract::worker_api::HostSpec;

impl ControlPlane {
    /// Installs `actor` on `target` from snapshot `seq` of the control
    /// plane's store, under `spec`; with `resume` it is restored at once,
    /// else it is `paused`. A worker that shares this store reads the
    /// snapshot there (so do all workers in cluster mode); any other gets
    /// the bytes.
    ///
    /// # Errors
    /// 500 if the snapshot cannot be read; the target's failure (422 the
    /// snapshot does not verify, 503 unreachable or the restore failed).
    pub(super) async fn ship(
        &self,
        target: &Member,
        actor: &str,
        spec: &HostSpec,
        seq: u64,
        resume: bool,
    ) -> Result<(), ApiError> {
        // In cluster mode every worker reads the shared store itself.
        let bytes = if target.is_in_process() || self.is_clustered() {
            None
        } else {
            Some(self.read_snapshot(actor, &spec.digest, seq).await?)
        };
        target.api.install(actor, spec, seq, bytes, resume).await
    }

    /// Snapshot `seq` of `actor` as one self-contained file: the stored
    /// file of a full snapshot, or a delta's chain (verified against the
    /// template `digest`) flattened into a full one, since the target
    /// keeps its own store.
    pub(super) async fn read_snapshot(
        &self,
        actor: &str,
        digest: &str,
        seq: u64,
    ) -> Result<Bytes, ApiError> {
        self.read_snapshot_as(actor, digest, seq, false).await
    }

    /// [`read_snapshot`](Self::read_snapshot), also flattening a full
    /// snapshot taken on the module's initial image (format version 3)
    /// into one that restores without it: what an upgrade re-stamps for
    /// another module.
    pub(super) async fn read_standalone_snapshot(
        &self,
        actor: &str,
        digest: &str,
        seq: u64,
    ) -> Result<Bytes, ApiError> {
        self.read_snapshot_as(actor, digest, seq, true).await
    }

    async fn read_snapshot_as(
        &self,
        actor: &str,
        digest: &str,
        seq: u64,
        standalone: bool,
    ) -> Result<Bytes, ApiError> {
        let store = self.store.clone();
        let name = actor.to_owned();
        let stored = tokio::task::spawn_blocking(move || store.open_snapshot(&name, seq))
            .await
            .map_err(ApiError::internal)??;
        let flatten = stasis_core::snapshot::peek_header(&stored)
            .is_ok_and(|h| h.base.is_some() || (standalone && h.on_image.is_some()));
        if !flatten {
            // Sent straight from the mapped file (snapshot files are only
            // ever replaced by rename, never rewritten in place).
            return Ok(Bytes::from_owner(stored));
        }
        drop(stored);
        let template = self.templates.template(digest).await?;
        let (store, name) = (self.store.clone(), actor.to_owned());
        let max_memory = self.config.limits.max_memory;
        tokio::task::spawn_blocking(move || {
            let chain = open_chain(store.as_ref(), &name, seq, &template, max_memory).map_err(
                |e| match e {
                    ChainError::Open { source, .. } => ApiError::from(source),
                    // The chain does not restore: nothing to ship.
                    ChainError::Invalid { .. } | ChainError::Base { .. } => {
                        ApiError::unprocessable(format!("actor {name}: {e}"))
                    }
                },
            )?;
            stasis_core::snapshot::flatten(&chain)
                .map(Bytes::from)
                .map_err(|e| ApiError::internal(format!("actor {name}: snapshot {seq}: {e}")))
        })
        .await
        .map_err(ApiError::internal)?
    }

    /// Stores snapshot `seq` of `actor` streamed by a remote worker, after
    /// verifying it (length, magic, version, checksum, header). Durable on
    /// return; retention applies.
    ///
    /// # Errors
    /// 404 unknown actor; 422 it does not verify; 507 quota; 500.
    pub async fn receive_snapshot(
        &self,
        actor: &str,
        seq: u64,
        bytes: Bytes,
    ) -> Result<(), ApiError> {
        if !self.has_actor(actor) && !self.decider()?.lock_pending().contains(actor) {
            return Err(ApiError::not_found(format!("no actor named {actor:?}")));
        }
        stasis_core::snapshot::verify_header(&bytes)
            .map_err(|e| ApiError::unprocessable(format!("snapshot {seq} of {actor}: {e}")))?;
        let store = self.store.clone();
        let keep = self.config.worker.actor.keep_snapshots;
        let actor = actor.to_owned();
        tokio::task::spawn_blocking(move || {
            // Epoch 0: a shipped snapshot lands in this control plane's own
            // (local) store, which ignores epochs.
            store.write(&actor, seq, 0, &bytes)?;
            store.retain(&actor, keep)
        })
        .await
        .map_err(ApiError::internal)??;
        Ok(())
    }
}
