//! [`WorkerApi`] for the in-process [`Worker`]: the digest resolves
//! through its templates, and every operation goes to the actor's mailbox.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use stasis_contract::alarm::AlarmOutcome;
use stasis_contract::client_gone::ClientGone;
use stasis_contract::error::ApiError;
use stasis_contract::logs::{LogLine, LogQuery};
use stasis_contract::status::{ActorStatus, Captured, Created, ResumeFrom, SnapshotReport};
use stasis_contract::worker_api::{HostSpec, Location, WorkerApi};
use stasis_host_api::sockets::SocketEvent;
use stasis_host_api::{Request, Response};

use crate::{ActorSpec, Worker};

/// The in-process worker: the digest resolves through its templates, and
/// every operation goes to the actor's mailbox.
#[async_trait]
impl WorkerApi for Worker {
    fn name(&self) -> &str {
        &self.ctx.worker
    }

    fn location(&self) -> Location {
        Location::InProcess
    }

    async fn create(&self, actor: &str, spec: &HostSpec) -> Result<Created, ApiError> {
        let local = self.spec(actor, spec).await?;
        let report = Worker::create(self, &local, spec.epoch).await?;
        Ok(Created {
            report,
            status: self.status(&local.name),
        })
    }

    async fn install(
        &self,
        actor: &str,
        spec: &HostSpec,
        seq: u64,
        bytes: Option<Bytes>,
        resume: bool,
    ) -> Result<(), ApiError> {
        let local = self.spec(actor, spec).await?;
        let recover = if spec.recover_journal {
            crate::host::JournalRecovery::Recover {
                listed_within: spec
                    .journal_listed_within_ms
                    .map(std::time::Duration::from_millis),
            }
        } else {
            crate::host::JournalRecovery::Skip
        };
        Worker::install(self, &local, (spec.epoch, seq), bytes, resume, recover)
            .await
            .map(|_| ())
    }

    async fn call(
        &self,
        actor: &str,
        epoch: u64,
        request: Arc<Request>,
        gone: &ClientGone,
    ) -> Result<Response, ApiError> {
        Worker::call(self, actor, epoch, request, gone).await
    }

    async fn alarm(
        &self,
        actor: &str,
        epoch: u64,
        setter: Option<&str>,
    ) -> Result<AlarmOutcome, ApiError> {
        Worker::alarm(self, actor, epoch, setter).await
    }

    async fn socket_event(
        &self,
        actor: &str,
        epoch: u64,
        event: SocketEvent,
    ) -> Result<(), ApiError> {
        Worker::socket_event(self, actor, epoch, event).await
    }

    async fn pause(&self, actor: &str) -> Result<SnapshotReport, ApiError> {
        Worker::pause(self, actor).await
    }

    async fn checkpoint(&self, actor: &str) -> Result<SnapshotReport, ApiError> {
        Worker::checkpoint(self, actor).await
    }

    async fn resume(&self, actor: &str, from: ResumeFrom) -> Result<(), ApiError> {
        Worker::resume(self, actor, from).await
    }

    async fn capture(&self, actor: &str) -> Result<Captured, ApiError> {
        Worker::capture(self, actor).await
    }

    async fn cancel_move(&self, actor: &str) {
        Worker::cancel_move(self, actor).await;
    }

    async fn event(&self, actor: &str, text: &str) -> Result<(), ApiError> {
        Worker::event(self, actor, text)
    }

    async fn hand_over(
        &self,
        actor: &str,
        spec: &HostSpec,
        seq: u64,
    ) -> Result<SnapshotReport, ApiError> {
        let local = self.spec(actor, spec).await?;
        Worker::hand_over(self, &local, spec.epoch, seq).await
    }

    async fn remove(&self, actor: &str) {
        Worker::remove(self, actor).await;
    }

    async fn status(&self, actor: &str) -> Result<ActorStatus, ApiError> {
        Worker::status(self, actor).ok_or_else(|| {
            ApiError::not_found(format!(
                "actor {actor} is not on worker {}",
                self.ctx.worker
            ))
        })
    }

    async fn statuses(&self) -> Result<Vec<(String, ActorStatus)>, ApiError> {
        Ok(Worker::statuses(self))
    }

    async fn statuses_of(&self, names: &[String]) -> Result<Vec<(String, ActorStatus)>, ApiError> {
        Ok(Worker::statuses_of(self, names))
    }

    async fn logs(&self, actor: &str, query: &LogQuery) -> Result<Vec<LogLine>, ApiError> {
        Worker::logs(self, actor, query).await
    }

    fn held_requests(&self) -> usize {
        Worker::held_requests(self)
    }

    fn adopt(&self, actor: &str, spec: &HostSpec) -> Result<ActorStatus, ApiError> {
        let template = self.templates.local(&spec.digest)?;
        let local = ActorSpec {
            name: actor.to_owned(),
            template,
            env: spec.env.clone(),
            durability: spec.durability,
        };
        Ok(Worker::adopt(self, &local, spec.epoch))
    }
}
