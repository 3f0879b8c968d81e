//! A request for an actor that does not exist, in a namespace that creates
//! actors on first use (`stasis_control::on_demand`).

use stasis_contract::error::ApiError;
use stasis_control::ControlPlane;
use stasis_control::ask_leader::AskLeader;

/// A request (authenticated) for actor `actor`, which does not exist: if
/// its namespace creates actors on first use, the request is admitted
/// under the namespace's rate and the actor created (see
/// `stasis_control::on_demand`); its route. `None` when the namespace
/// does not.
pub(super) async fn first_use(
    control: &ControlPlane,
    leader: Option<&dyn AskLeader>,
    actor: &str,
    started: std::time::Instant,
) -> Result<Option<stasis_control::Route>, ApiError> {
    let namespace = stasis_contract::names::namespace_of(actor);
    let Some(template) = control.on_demand_template(namespace).await? else {
        return Ok(None);
    };
    if let Err(e) = control.admit_request(actor).await {
        control.count_request(actor, e.kind().status(), started.elapsed());
        return Err(e);
    }
    control
        .create_on_first_use(actor, &template, leader)
        .await
        .map(Some)
}
