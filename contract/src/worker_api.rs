//! The one interface every worker offers the control plane: [`WorkerApi`],
//! implemented by the in-process worker (`stasis-worker`) and by the client
//! of a remote worker (`stasis-cluster`). The control plane holds an
//! `Arc<dyn WorkerApi>` per worker and never asks which kind it is.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use stasis_host_api::sockets::SocketEvent;
use stasis_host_api::{Request, Response};

use crate::alarm::AlarmOutcome;
use crate::client_gone::ClientGone;
use crate::error::{ApiError, ErrorKind};
use crate::logs::{LogLine, LogQuery};
use crate::settings::Durability;
use crate::status::{ActorStatus, Captured, Created, ResumeFrom, SnapshotReport};

/// What a worker needs to host an actor, in a form every worker
/// understands: the template by digest (each worker resolves the compiled
/// module itself), its environment and the placement epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSpec {
    /// SHA-256 hex of the template module.
    pub digest: String,
    /// The template's WASI environment.
    pub env: Vec<(String, String)>,
    /// Placement epoch: calls carrying another epoch are refused (421).
    pub epoch: u64,
    /// The template's durability level, when its push set one (else the
    /// worker's `--durability`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<Durability>,
    /// For an install: whether the store's journal segments may hold
    /// entries of the actor newer than the snapshot named, its previous
    /// owner having been lost (a re-placement), so that a cluster worker
    /// recovers them first. False when that snapshot is the actor's state
    /// as it is (a move or upgrade after its capture, a fork, a resume
    /// from a named snapshot): nothing is read, and no older owner's entry
    /// can override the snapshot chosen. True when absent.
    #[serde(default = "recover_by_default")]
    pub recover_journal: bool,
    /// For an install that recovers the journal (`recover_journal`): a
    /// read of the store's journal segments that began at most this many
    /// milliseconds before the install arrived covers the actor (its
    /// previous owner stopped writing before then: it was declared lost),
    /// so the worker may answer from one it already made rather than list
    /// the store again. Absent: a read of its own. (Lazy re-placement: one
    /// read serves every actor of a lost worker a target adopts.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_listed_within_ms: Option<u64>,
}

fn recover_by_default() -> bool {
    true
}

/// Where a worker runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// In the control plane's process, sharing its snapshot store: it
    /// reads every snapshot the control plane holds without shipping.
    InProcess,
    /// A `stasis worker run` process at this `host:port`, with a store of
    /// its own: snapshots it has not written must be shipped to it.
    Remote(String),
}

/// The operations of a worker on the actors it hosts. Every method names
/// the actor; errors are [`ApiError`]s with the status the admin API
/// answers (404 not hosted here, 503 unreachable or stopping, ...).
#[async_trait]
pub trait WorkerApi: Send + Sync {
    /// The worker's name (an RFC 1123 label).
    fn name(&self) -> &str;

    /// Where it runs.
    fn location(&self) -> Location;

    /// Creates `actor`: first instance, snapshot seq 0, `running`.
    ///
    /// # Errors
    /// 409 if it already hosts the name; the guest's failure (500/504);
    /// 507/500 if seq 0 cannot be written.
    async fn create(&self, actor: &str, spec: &HostSpec) -> Result<Created, ApiError>;

    /// Hosts `actor` from snapshot `seq` under `spec.epoch`. `bytes` carries
    /// the snapshot when the worker does not hold it (`None`: it reads it
    /// from its store). The snapshot is verified first; with `resume` the
    /// actor is restored at once (the target of a move), else it is `paused`.
    ///
    /// # Errors
    /// 422 if the snapshot does not verify; 503 if the restore fails
    /// (nothing is left installed).
    async fn install(
        &self,
        actor: &str,
        spec: &HostSpec,
        seq: u64,
        bytes: Option<Bytes>,
        resume: bool,
    ) -> Result<(), ApiError>;

    /// Hands `request` to `actor` under placement `epoch`. The request is
    /// shared, not copied: a caller told the epoch is stale (421) sends the
    /// same request to the new owner. When `gone` is cancelled before the
    /// guest runs the request, the request is given up (see
    /// [`crate::client_gone`]): an in-process worker decides through the
    /// request's ticket; the forward to a remote worker is dropped, so that
    /// worker's serving loop sees its client leave and decides the same way.
    ///
    /// # Errors
    /// 421 stale epoch; 503 full mailbox or hold timeout; the guest's
    /// failure; [`crate::error::ErrorKind::Abandoned`] when the client left first.
    async fn call(
        &self,
        actor: &str,
        epoch: u64,
        request: Arc<Request>,
        gone: &ClientGone,
    ) -> Result<Response, ApiError>;

    /// Delivers a due alarm to `actor` under placement `epoch`: a mailbox
    /// command of its own (see [`crate::alarm`]), run after the requests
    /// before it, resuming a paused actor; `setter` is the `traceparent` of
    /// the span that set it (the alarm's span links to it).
    ///
    /// # Errors
    /// Stale epoch; unavailable (full mailbox, hold timeout); the guest's
    /// failure (its handler trapped: the actor is rolled back as after a
    /// failed request).
    async fn alarm(
        &self,
        actor: &str,
        epoch: u64,
        setter: Option<&str>,
    ) -> Result<AlarmOutcome, ApiError>;

    /// Delivers `event` on one of `actor`'s WebSockets or streams under
    /// placement `epoch` (see `stasis_host_api::sockets`): a mailbox
    /// delivery like a request's, in order, resuming a paused actor.
    ///
    /// # Errors
    /// As [`WorkerApi::alarm`].
    async fn socket_event(
        &self,
        actor: &str,
        epoch: u64,
        event: SocketEvent,
    ) -> Result<(), ApiError>;

    /// Pauses `actor` (idempotent).
    ///
    /// # Errors
    /// 404; 409 failed actor; 507 quota (it keeps running); 500.
    async fn pause(&self, actor: &str) -> Result<SnapshotReport, ApiError>;

    /// Checkpoints running `actor` (instance kept).
    ///
    /// # Errors
    /// 404; 409 not running; 507 quota; 500.
    async fn checkpoint(&self, actor: &str) -> Result<SnapshotReport, ApiError>;

    /// Resumes `actor` from `from`.
    ///
    /// # Errors
    /// 404; 503 with the reason if it cannot be restored.
    async fn resume(&self, actor: &str, from: ResumeFrom) -> Result<(), ApiError>;

    /// Captures `actor` for a move: its snapshot is durable in the control
    /// plane's store on return (written there, or replicated), and the
    /// instance is kept in case the move rolls back.
    ///
    /// # Errors
    /// 404; 409 failed actor; 500/507 if the snapshot cannot be written.
    async fn capture(&self, actor: &str) -> Result<Captured, ApiError>;

    /// Ends a rolled-back move: the actor serves here again.
    async fn cancel_move(&self, actor: &str);

    /// Hands captured `actor` over to `spec`'s module, another version of
    /// its template, under `spec.epoch` (state hand-over, a path of a live
    /// code upgrade): the old instance's `stasis_save_state` bytes go to a
    /// fresh instance of the new module's `stasis_load_state`, whose
    /// snapshot is written as `seq` (durable in the control plane's store
    /// on return); the new instance then serves, `running`. On failure
    /// nothing is written and the actor stays captured on its version.
    ///
    /// # Errors
    /// 404/409 if not hosted here or not captured; 422 (or the guest
    /// call's own status: 503, 504) if either version fails its side; the
    /// snapshot write's failure.
    async fn hand_over(
        &self,
        actor: &str,
        spec: &HostSpec,
        seq: u64,
    ) -> Result<SnapshotReport, ApiError>;

    /// Records lifecycle event `text` (its kind, a colon, what happened)
    /// in `actor`'s log here, as the worker's own events are: the control
    /// plane's record of what the actor went through that its worker cannot
    /// see (an upgrade refused before or after the capture).
    ///
    /// # Errors
    /// 404 if it does not host the actor; 503 if unreachable.
    async fn event(&self, actor: &str, text: &str) -> Result<(), ApiError>;

    /// Stops hosting `actor`. A worker with a store of its own also deletes
    /// its copy of the actor's snapshots (the control plane keeps them).
    async fn remove(&self, actor: &str);

    /// `actor`'s status here.
    ///
    /// # Errors
    /// 404 if it does not host the actor; 503 if unreachable.
    async fn status(&self, actor: &str) -> Result<ActorStatus, ApiError>;

    /// Statuses of every actor it hosts.
    ///
    /// # Errors
    /// 502/503/504 if the worker cannot be reached or answers nonsense.
    async fn statuses(&self) -> Result<Vec<(String, ActorStatus)>, ApiError>;

    /// Statuses of the actors of `names` it hosts (a page of a listing):
    /// what [`WorkerApi::statuses`] says of them, without the others.
    ///
    /// # Errors
    /// As [`WorkerApi::statuses`].
    async fn statuses_of(&self, names: &[String]) -> Result<Vec<(String, ActorStatus)>, ApiError> {
        Ok(statuses_among(self.statuses().await?, names))
    }

    /// The lines of `actor`'s log that `query` selects, oldest first
    /// (see [`crate::logs`]); with `query.wait_ms`, when none is selected,
    /// the first ones written within that wait (none if it passes).
    ///
    /// # Errors
    /// 404 if it does not host the actor (or stops hosting it while the
    /// query waits); 501 where the worker cannot serve logs (the default).
    async fn logs(&self, actor: &str, query: &LogQuery) -> Result<Vec<LogLine>, ApiError> {
        let _ = query;
        Err(ApiError::new(
            ErrorKind::NotImplemented,
            format!(
                "worker {} cannot serve the logs of actor {actor}",
                self.name()
            ),
        ))
    }

    /// Requests waiting in its mailboxes right now (0 if it cannot say
    /// cheaply).
    fn held_requests(&self) -> usize {
        0
    }

    /// Hosts `actor` from the snapshots the worker's store already holds,
    /// at once and without I/O beyond checking its newest snapshot: an
    /// embedded control plane's start-up, for every actor of the directory.
    /// The actor is `paused` (resumed by its next request), or `failed`
    /// with the reason if its newest snapshot does not verify.
    ///
    /// # Errors
    /// If the template cannot be loaded from the worker's own files; a
    /// worker that does not share the control plane's store cannot adopt
    /// (the default).
    fn adopt(&self, actor: &str, spec: &HostSpec) -> Result<ActorStatus, ApiError> {
        let _ = spec;
        Err(ApiError::internal(format!(
            "worker {} cannot adopt {actor}: it does not share the control plane's store",
            self.name()
        )))
    }
}

/// How the control plane reaches a remote worker that joins: made by the
/// assembly from the cluster backends (`stasis-cluster`'s client).
pub trait ConnectWorker: Send + Sync {
    /// A [`WorkerApi`] for worker `name` listening at `address`
    /// (`host:port`).
    ///
    /// # Errors
    /// Bad request if the address is not one.
    fn connect(&self, name: &str, address: &str) -> Result<Arc<dyn WorkerApi>, ApiError>;
}

/// The statuses of `all` whose actor is one of `names`: what
/// [`WorkerApi::statuses_of`] answers from a worker's every status.
#[must_use]
pub fn statuses_among(
    mut all: Vec<(String, ActorStatus)>,
    names: &[String],
) -> Vec<(String, ActorStatus)> {
    let wanted: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    all.retain(|(name, _)| wanted.contains(name.as_str()));
    all
}
