//! A follower replica's way to ask the leader on a request's path
//! ([`stasis_control::ask_leader::AskLeader`]): `POST` on the leader's
//! internal routes [`ControlPath::OnDemand`] (create an actor on first
//! use) and [`ControlPath::Place`] (place an actor whose request it holds)
//! with the internal token, the leader read from etcd's election record at
//! each call.

use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use tokio::sync::watch;

use stasis_cluster::etcd::LeaderRecord;
use stasis_contract::error::ApiError;
use stasis_contract::proto::ControlPath;
use stasis_control::ask_leader::AskLeader;
use stasis_http::client::{HttpClient, Unanswered};

/// Bound on connecting to the leader.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Bound on the leader's create (a create runs the guest's start).
const CREATE_TIMEOUT: Duration = Duration::from_secs(60);

/// Bound on the leader's placement of one actor (an install from the
/// store and its journal's recovery); the follower's request is held
/// meanwhile, up to its own hold timeout.
const PLACE_TIMEOUT: Duration = Duration::from_secs(30);

/// Asks the leader of the moment over its admin listener.
pub(crate) struct ToLeader {
    /// The election's record, as etcd has it.
    pub(crate) leader: watch::Receiver<Option<LeaderRecord>>,
    /// The internal token (the admin token when there is none).
    pub(crate) token: Option<String>,
}

impl ToLeader {
    /// `POST path` on the leader, answered within `limit`; `what` names
    /// the errand in errors ("the create of a1").
    async fn post(&self, path: &str, limit: Duration, what: &str) -> Result<(), ApiError> {
        let leader = self.leader.borrow().clone().ok_or_else(|| {
            ApiError::unavailable("no leader replica yet (an election is under way); retry")
        })?;
        let client = HttpClient::new(
            &format!("http://{}", leader.admin),
            self.token.as_deref(),
            CONNECT_TIMEOUT,
        )?;
        let answer = client
            .exchange(Method::POST, path, &[], Bytes::new(), Some(limit))
            .await
            .map_err(|e| match e {
                Unanswered::Connect(e) => {
                    ApiError::unavailable(format!("the leader replica cannot be reached: {e}"))
                }
                Unanswered::Failed(e) => ApiError::unavailable(format!(
                    "the leader replica failed to answer {what}: {e}"
                )),
                Unanswered::Timeout(limit) => ApiError::unavailable(format!(
                    "the leader replica did not answer {what} within {limit:?}"
                )),
            })?;
        answer.success().map(|_| ())
    }
}

#[async_trait::async_trait]
impl AskLeader for ToLeader {
    async fn create_on_demand(&self, name: &str) -> Result<(), ApiError> {
        let path = ControlPath::OnDemand(name).to_path();
        self.post(&path, CREATE_TIMEOUT, &format!("the create of {name}"))
            .await
    }

    async fn place(&self, name: &str) -> Result<(), ApiError> {
        let path = ControlPath::Place(name).to_path();
        self.post(&path, PLACE_TIMEOUT, &format!("the placement of {name}"))
            .await
    }
}
