//! What a follower replica asks of the leader on a request's path
//! ([`AskLeader`]: the assembly's, over the leader's internal API): to
//! create an actor on first use, and to place now an actor whose request
//! it holds (one the leader placed lazily, which the worker it names has
//! not adopted yet, or one whose worker was lost).

use stasis_contract::error::ApiError;

/// How a follower replica asks the leader (module docs).
#[async_trait::async_trait]
pub trait AskLeader: Send + Sync {
    /// Has the leader create actor `name` on first use, once.
    ///
    /// # Errors
    /// The leader's refusal (as `ControlPlane::create_once`), or 503 when
    /// there is no leader to ask.
    async fn create_on_demand(&self, name: &str) -> Result<(), ApiError>;

    /// Has the leader place actor `name` now if it waits for a host: the
    /// worker it was placed on lazily adopts it, or it is re-placed (see
    /// `ControlPlane::place_now`).
    ///
    /// # Errors
    /// 404 unknown actor; 503 when there is no leader to ask or it could
    /// not place the actor.
    async fn place(&self, name: &str) -> Result<(), ApiError>;
}
