//! How an actor comes to a worker: [`Worker::create`] (a new actor, its
//! first instance and snapshot 0), [`Worker::adopt`] (snapshots already in
//! the worker's store, at start-up), [`Worker::install`] (a snapshot
//! shipped or stored, the target side of a move), and the repair of a torn
//! newest snapshot that a crash left above the acknowledged one.

use bytes::Bytes;
use stasis_contract::error::ApiError;
use stasis_contract::status::{ActorState, ActorStatus, SnapshotReport};
use stasis_contract::worker_api::HostSpec;
use stasis_core::journal::{Durable, Recovery};
use stasis_core::snapshot::{self, VerifiedChain};
use stasis_core::snapshot_store::{ChainError, SnapshotBytes, SnapshotEntry, open_chain};
use tokio::sync::oneshot;

use crate::actor::Command;
use crate::blocking::on_blocking_thread;
use crate::journaled::Log;
use crate::{ActorSpec, Entry, Worker};
use stasis_contract::status::ResumeFrom;

/// What an install ([`Worker::install`]) reads of the journal segments
/// in the store (a cluster worker's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalRecovery {
    /// Nothing: the snapshot named is the actor's state as it is (a move,
    /// fork or upgrade after its capture).
    Skip,
    /// The deliveries the actor's lost owner shipped after its newest
    /// snapshot, from a read of the segments that began at most
    /// `listed_within` before the install (a read of its own when `None`).
    Recover {
        /// How old a read of the segments may be and still serve.
        listed_within: Option<std::time::Duration>,
    },
}

/// A snapshot an install verified and wrote (see [`Worker::install`]).
struct Installed {
    seq: u64,
    verified: VerifiedChain<SnapshotBytes>,
    /// Whether the actor is resumed at once (it keeps the bytes for that).
    prime: bool,
}

impl Worker {
    /// Creates a new actor: first instance (start function, `_initialize`,
    /// init), snapshot seq 0, state `running`.
    ///
    /// # Errors
    /// 409 if this worker already hosts the name; the guest's failure
    /// (500/504) if creation traps; 507/500 if seq 0 cannot be written.
    pub async fn create(&self, spec: &ActorSpec, epoch: u64) -> Result<SnapshotReport, ApiError> {
        if self.lock().contains_key(&spec.name) {
            return Err(ApiError::conflict(format!("actor {} exists", spec.name)));
        }
        // Snapshots under a new actor's name are another's leftovers (a
        // create or fork that failed half-way, a delete that could not
        // remove every file): a new actor never adopts them. A new name is
        // this worker's alone at `epoch` (nothing else writes it before the
        // directory records it), so it is held from here: the listing
        // below is what a shared store then knows of the folder, and
        // snapshot 0 needs no acknowledged pointer (see the object store's
        // `write`).
        self.ctx.store.hold(&spec.name, epoch);
        let tombstone = match self.clear_for_create(&spec.name).await {
            Ok(tombstone) => tombstone,
            Err(e) => {
                self.ctx.store.release(&spec.name);
                return Err(e);
            }
        };
        let mut task = self.task(spec, epoch, ActorState::Creating);
        let mut report = task.create().await;
        // The tombstone's round ships while the actor is made: it must be
        // in the store before the create is answered (a takeover after
        // that reads it), not before snapshot 0 (no directory row names
        // the actor until the answer, so nothing takes it over before).
        if report.is_ok()
            && let Some(tombstone) = tombstone
            && let Err(e) = tombstone.wait().await
        {
            task.undo_create();
            report = Err(ApiError::unavailable(format!(
                "creating actor {}: {e}",
                spec.name
            )));
        }
        if report.is_err() {
            let (store, name) = (self.ctx.store.clone(), spec.name.clone());
            let _ = on_blocking_thread(move || Ok(store.remove_actor(&name)?)).await;
            self.ctx.store.release(&spec.name);
            return report;
        }
        self.start(task);
        report
    }

    /// Before a create of `name`: removes what an earlier actor of the
    /// name left in the store, and (a cluster worker) appends the
    /// tombstone that keeps its shipped journal entries from becoming the
    /// new actor's state; the caller waits for it before answering.
    async fn clear_for_create(&self, name: &str) -> Result<Option<Durable>, ApiError> {
        let (store, owned) = (self.ctx.store.clone(), name.to_owned());
        on_blocking_thread(move || {
            // Anything at all: a clock mark or a pointer left alone would
            // be taken for the new actor's (its clock is new: `fresh`).
            if store.holds_anything(&owned)? {
                tracing::warn!(actor = %owned, "removing what an earlier actor left under a new actor's name");
                store.remove_actor(&owned)?;
            }
            Ok(())
        })
        .await?;
        // A cluster worker: no entry a deleted actor of this name left in
        // the store (on a lost worker) may become the new actor's state.
        self.shipped()
            .map(|shipped| shipped.tombstone(name))
            .transpose()
            .map_err(|e| ApiError::unavailable(e.to_string()))
    }

    /// Hosts an actor that already has snapshots (after a restart or a
    /// move): `paused`, resumed by its next request. Its newest snapshot is
    /// checked (length, magic, version, checksum, header) now, so a missing
    /// or corrupt one shows as `failed` with the reason at once, never as a
    /// silently fresh actor.
    pub fn adopt(&self, spec: &ActorSpec, epoch: u64) -> ActorStatus {
        self.adopt_installed(spec, epoch, None, None)
    }

    /// Takes actor `name`'s entry out of the table for a task that replaces
    /// it: an active task is told to stop (not waited for; calls it held
    /// for a move are told to ask again).
    pub(crate) fn replace_task(&self, name: &str) {
        self.ctx.store.release(name);
        if let Some(Entry::Active { mailbox, .. }) = self.lock().remove(name) {
            let (reply, _) = oneshot::channel();
            let _ = mailbox.try_send(Command::Stop(reply));
        }
    }

    /// Drops from `list` (and from the store) a newest snapshot above the
    /// `acknowledged` one that does not verify by itself: a write the
    /// process died in, before its sync round ended
    /// ([`stasis_core::durable::write_new_in`]), so no caller was told it
    /// was written. One file at most: an actor's writes are sequential, and
    /// a write starts only after the one before it was acknowledged.
    /// Snapshot 0 has no marker (the directory row acknowledges it) and is
    /// never dropped; neither is a snapshot the caller just `installed`.
    fn drop_torn_newest(
        &self,
        spec: &ActorSpec,
        list: &mut Vec<SnapshotEntry>,
        acknowledged: Option<u64>,
        installed: Option<&Installed>,
    ) {
        let Some(newest) = list.last().map(|n| n.seq) else {
            return;
        };
        if newest == 0
            || acknowledged.is_some_and(|acked| newest <= acked)
            || installed.is_some_and(|i| i.seq == newest)
        {
            return;
        }
        let max_memory = self.ctx.engine.limits().max_memory;
        let Err(ChainError::Invalid { seq, source }) = open_chain(
            self.ctx.store.as_ref(),
            &spec.name,
            newest,
            &spec.template,
            max_memory,
        ) else {
            return;
        };
        if seq != newest {
            return;
        }
        match self.ctx.store.remove(&spec.name, seq) {
            Ok(()) => {
                tracing::warn!(
                    actor = %spec.name,
                    seq,
                    "dropped snapshot {seq}: it was being written when the process stopped and was never acknowledged ({source})"
                );
                list.pop();
            }
            Err(e) => {
                tracing::warn!(actor = %spec.name, seq, "cannot drop torn snapshot {seq}: {e}")
            }
        }
    }

    /// [`Worker::adopt`], where `installed` is a snapshot (and its
    /// sequence number) the caller verified and wrote just now: if it is
    /// the newest, it is not read and verified again, and with `prime` the
    /// actor's next restore takes it as it is. `shipped`: the deliveries
    /// the caller recovered from the shipped journal's segments.
    fn adopt_installed(
        &self,
        spec: &ActorSpec,
        epoch: u64,
        installed: Option<Installed>,
        shipped: Option<Recovery>,
    ) -> ActorStatus {
        self.replace_task(&spec.name);
        let mut task = self.task(spec, epoch, ActorState::Paused);
        // A cluster worker taking the actor over: the deliveries its
        // earlier owner shipped (and acknowledged) after its newest
        // snapshot are replayed at its next resume.
        let (recovered, mut shipped) = match (self.shipped(), &installed) {
            (Some(journal), None) => match journal.recover(&spec.name, None) {
                Ok(recovered) => (Ok(()), recovered.deliveries),
                Err(e) => {
                    tracing::error!(actor = %spec.name, "reading the journal segments in the store: {}", e.detail());
                    (
                        Err(format!(
                            "the journal segments in the snapshot store cannot be read ({e}); the actor's newest acknowledged state may be there"
                        )),
                        None,
                    )
                }
            },
            _ => (Ok(()), shipped),
        };
        let (mut list, acknowledged) = self
            .ctx
            .store
            .list_acknowledged(&spec.name)
            .unwrap_or_default();
        self.drop_torn_newest(spec, &mut list, acknowledged, installed.as_ref());
        // Answers name the folder by its key; the log gets where it is.
        let dir = || format!("snapshots/{}", spec.name);
        let missing = acknowledged.filter(|&acked| list.last().is_none_or(|n| n.seq < acked));
        let problem = match (list.last(), missing) {
            _ if recovered.is_err() => recovered.err(),
            (_, Some(acked)) => {
                task.set_newest(acked, None);
                Some(format!(
                    "snapshot {acked} was acknowledged but is missing from {} (newest there: {})",
                    dir(),
                    list.last()
                        .map_or_else(|| "none".to_owned(), |n| n.seq.to_string())
                ))
            }
            (None, None) => Some(format!("no snapshot of actor {} in {}", spec.name, dir())),
            (Some(newest), None) if installed.as_ref().is_some_and(|i| i.seq == newest.seq) => {
                let primed = installed.filter(|i| i.prime).map(|i| i.verified);
                task.set_newest(newest.seq, primed);
                None
            }
            (Some(newest), None) => {
                task.set_newest(newest.seq, None);
                open_chain(
                    self.ctx.store.as_ref(),
                    &spec.name,
                    newest.seq,
                    &spec.template,
                    self.ctx.engine.limits().max_memory,
                )
                .err()
                .map(|e| e.to_string())
            }
        };
        // A restart: the deliveries the data dir's journal holds after the
        // newest snapshot are replayed at the actor's next resume (a
        // takeover's, from the shipped journal, likewise).
        let problem = problem.or_else(|| {
            let recovery = match self.ctx.journal.get()? {
                Log::Local(journal) => journal.take_recovered(&spec.name)?,
                Log::Shipped(_) => shipped.take()?,
            };
            match recovery {
                Recovery::Entries(entries) => task.recovered(entries).err(),
                Recovery::Failed(why) => {
                    self.ctx.metrics.journal_replay_failures.inc();
                    Some(why)
                }
            }
        });
        {
            let mut status = task
                .status_handle()
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            status.snapshot = list.last().copied();
            if let Some(problem) = problem {
                let location = self.ctx.store.location(&spec.name);
                tracing::error!(actor = %spec.name, %location, "{problem}");
                status.state = ActorState::Failed;
                status.set_error(problem);
            }
        }
        let status = task
            .status_handle()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        self.start(task);
        status
    }

    /// Installs `actor` from snapshot `seq` under placement `epoch`: the
    /// snapshot (`bytes`, or the stored file when `None`) is verified
    /// against the template; given bytes are written to this worker's store
    /// unless it already holds them; then, with `resume`, the actor is
    /// restored at once (the target side of a move), else it is `paused`.
    ///
    /// # Errors
    /// 422 if the snapshot does not verify against the template; 503 if
    /// the restore fails (nothing is left installed).
    pub async fn install(
        &self,
        spec: &ActorSpec,
        (epoch, seq): (u64, u64),
        bytes: Option<Bytes>,
        resume: bool,
        recover: JournalRecovery,
    ) -> Result<ActorStatus, ApiError> {
        // A cluster worker taking the actor over from the shared store
        // after its owner was lost (`recover`): the deliveries that owner
        // shipped (and acknowledged) after the actor's newest snapshot are
        // replayed on it when it resumes. A move, fork or upgrade names
        // the actor's state itself: nothing to read.
        let recover = match recover {
            JournalRecovery::Recover { listed_within } => Some(listed_within),
            JournalRecovery::Skip => None,
        };
        let (seq, shipped) = match (self.shipped(), &bytes, recover) {
            (Some(shipped), None, Some(listed_within)) => {
                let (shipped, name) = (shipped.clone(), spec.name.clone());
                let recovered =
                    tokio::task::spawn_blocking(move || shipped.recover(&name, listed_within))
                        .await
                        .map_err(ApiError::internal)?;
                match recovered {
                    Ok(recovered) => (
                        recovered.wrote.map_or(seq, |r| r.max(seq)),
                        recovered.deliveries,
                    ),
                    Err(e) => {
                        tracing::error!(actor = %spec.name, "reading the journal segments in the store: {}", e.detail());
                        return Err(ApiError::unavailable(format!(
                            "actor {}: the journal segments in the snapshot store cannot be read ({e}); its newest acknowledged state may be there",
                            spec.name
                        )));
                    }
                }
            }
            _ => (seq, None),
        };
        let max_memory = self.ctx.engine.limits().max_memory;
        let what = format!("snapshot {seq} of {}", spec.name);
        let refused =
            move |e: &dyn std::fmt::Display| ApiError::unprocessable(format!("{what}: {e}"));
        let store = self.ctx.store.clone();
        let name = spec.name.clone();
        let template = spec.template.clone();
        // The snapshot is verified once, here, and handed to the actor as
        // verified. Bytes the store already held are checked by `adopt`.
        let installed = tokio::task::spawn_blocking(move || -> Result<_, ApiError> {
            let verified =
                match bytes {
                    Some(bytes) => {
                        let bytes = SnapshotBytes::from(Vec::from(bytes));
                        // Shipped bytes are one self-contained file: a full
                        // snapshot (a chain is flattened before it is sent).
                        let verified = snapshot::verify(bytes, &template, max_memory)
                            .map_err(|e| refused(&e))?;
                        let verified =
                            VerifiedChain::new(vec![(seq, verified)]).map_err(|e| refused(&e))?;
                        if store.list(&name)?.iter().any(|e| e.seq == seq) {
                            return Ok(None);
                        }
                        let (_, file) = verified.links().next().ok_or_else(|| {
                            ApiError::internal("a verified chain without a snapshot")
                        })?;
                        store.write(&name, seq, epoch, file.bytes())?;
                        verified
                    }
                    None => open_chain(store.as_ref(), &name, seq, &template, max_memory).map_err(
                        |e| match e {
                            ChainError::Open { source, .. } => ApiError::from(source),
                            ChainError::Invalid { source, .. } => refused(&source),
                            ChainError::Base { .. } => refused(&e),
                        },
                    )?,
                };
            Ok(Some(Installed {
                seq,
                verified,
                prime: resume,
            }))
        })
        .await
        .map_err(ApiError::internal)??;
        let status = self.adopt_installed(spec, epoch, installed, shipped);
        if status.state != ActorState::Failed {
            self.logs
                .get(&spec.name, &self.ctx.worker, &self.ctx.store)
                .event(&format!(
                    "placed here: snapshot {seq}, placement epoch {epoch}"
                ));
        }
        if status.state == ActorState::Failed {
            self.remove(&spec.name).await;
            return Err(ApiError::failed(status.error.unwrap_or_default()));
        }
        if resume && let Err(e) = self.resume(&spec.name, ResumeFrom::Newest).await {
            self.remove(&spec.name).await;
            return Err(e);
        }
        self.status(&spec.name)
            .ok_or_else(|| ApiError::internal("installed actor vanished"))
    }

    pub(crate) async fn spec(&self, actor: &str, spec: &HostSpec) -> Result<ActorSpec, ApiError> {
        stasis_contract::names::check_full_name("actor", actor)?;
        Ok(ActorSpec {
            name: actor.to_owned(),
            template: self.templates.template(&spec.digest).await?,
            env: spec.env.clone(),
            durability: spec.durability,
        })
    }
}
