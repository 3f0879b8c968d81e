//! A follower replica's way to have the leader create an actor on first
//! use ([`stasis_control::on_demand::CreateOnLeader`]): `POST` on the
//! leader's internal route [`ControlPath::OnDemand`] with the internal
//! token, the leader read from etcd's election record at each call.

use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use tokio::sync::watch;

use stasis_cluster::etcd::LeaderRecord;
use stasis_contract::error::ApiError;
use stasis_contract::proto::ControlPath;
use stasis_control::on_demand::CreateOnLeader;
use stasis_http::client::{HttpClient, Unanswered};

/// Bound on connecting to the leader.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Bound on the leader's create (a create runs the guest's start).
const CREATE_TIMEOUT: Duration = Duration::from_secs(60);

/// Asks the leader of the moment over its admin listener.
pub(crate) struct LeaderCreates {
    /// The election's record, as etcd has it.
    pub(crate) leader: watch::Receiver<Option<LeaderRecord>>,
    /// The internal token (the admin token when there is none).
    pub(crate) token: Option<String>,
}

#[async_trait::async_trait]
impl CreateOnLeader for LeaderCreates {
    async fn create_on_demand(&self, name: &str) -> Result<(), ApiError> {
        let leader = self.leader.borrow().clone().ok_or_else(|| {
            ApiError::unavailable("no leader replica yet (an election is under way); retry")
        })?;
        let client = HttpClient::new(
            &format!("http://{}", leader.admin),
            self.token.as_deref(),
            CONNECT_TIMEOUT,
        )?;
        let path = ControlPath::OnDemand(name).to_path();
        let answer = client
            .exchange(Method::POST, &path, &[], Bytes::new(), Some(CREATE_TIMEOUT))
            .await
            .map_err(|e| match e {
                Unanswered::Connect(e) => {
                    ApiError::unavailable(format!("the leader replica cannot be reached: {e}"))
                }
                Unanswered::Failed(e) => ApiError::unavailable(format!(
                    "the leader replica failed to answer the create of {name}: {e}"
                )),
                Unanswered::Timeout(limit) => ApiError::unavailable(format!(
                    "the leader replica did not create {name} within {limit:?}"
                )),
            })?;
        answer.success().map(|_| ())
    }
}
