//! An actor's log through the control plane: the worker that hosts it
//! answers ([`WorkerApi::logs`](stasis_contract::worker_api::WorkerApi::logs)).

use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::logs::{LogLine, LogQuery};

use crate::ControlPlane;

impl ControlPlane {
    /// The lines of actor `name`'s log that `query` selects, from the
    /// worker that hosts it now. A worker that stopped hosting the actor
    /// while the query waited (it moved) answers none: the reader asks
    /// again, after the same line, and the placement names the new worker.
    ///
    /// # Errors
    /// 404 if there is no such actor; 503 if its worker is unknown or
    /// cannot be reached.
    pub async fn logs(&self, name: &str, query: &LogQuery) -> Result<Vec<LogLine>, ApiError> {
        let placement = self.placement_of(name)?;
        let member = self.member(&placement.worker).ok_or_else(|| {
            ApiError::unavailable(format!(
                "actor {name} is placed on worker {}, which is not here",
                placement.worker
            ))
        })?;
        match member.api.logs(name, query).await {
            Err(e) if e.is(ErrorKind::NotFound) && self.has_actor(name) => Ok(Vec::new()),
            Err(e) if e.is(ErrorKind::NotFound) => {
                Err(ApiError::not_found(format!("no actor named {name:?}")))
            }
            other => other,
        }
    }
}
