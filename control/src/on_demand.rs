//! Actors created on first use (issue 49, item 1): a namespace may name a
//! template (`stasis namespace on-demand NS --template T`, kept in its
//! [`stasis_contract::policy::NamespacePolicy`]); then a request, a call
//! or a message to an unknown actor of the namespace creates it from the
//! template's newest version before it is delivered, as `actor create`
//! would (the name checked, the namespace's `max_actors` counted), exactly
//! once: concurrent first requests for one name wait for one create
//! ([`ControlPlane::create_once`], on the deciding control plane; a
//! follower replica asks the leader through its internal API). Without the
//! setting, an unknown name stays 404.

use std::sync::Arc;

use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::names::{check_namespace, namespace_of, resolve};
use stasis_contract::quota::NamespaceInfo;

use crate::ControlPlane;
use crate::ask_leader::AskLeader;
use crate::request::Route;

impl ControlPlane {
    /// The template namespace `namespace` creates unknown actors from, if
    /// it does (as read at most [`crate::policies::POLICY_BOUND`] ago).
    ///
    /// # Errors
    /// 500 from the directory.
    pub async fn on_demand_template(&self, namespace: &str) -> Result<Option<String>, ApiError> {
        Ok(self.policy(namespace).await?.on_demand)
    }

    /// Sets (or with `None`, clears) the template namespace `namespace`
    /// creates unknown actors from; its view. `template` is a template of
    /// the namespace (a plain name is resolved in it) that exists now.
    ///
    /// # Errors
    /// 400 for a bad namespace or template name, or one of another
    /// namespace; 404 for a template that does not exist; 500 or 503 from
    /// the directory.
    pub async fn set_on_demand(
        &self,
        namespace: &str,
        template: Option<&str>,
    ) -> Result<NamespaceInfo, ApiError> {
        check_namespace(namespace)?;
        let template = match template {
            Some(given) => {
                let full = resolve("template", namespace, given)?;
                if self.versions_of(&full)?.is_empty() {
                    return Err(ApiError::not_found(format!(
                        "no template named {full:?}: push it first (stasis template push)"
                    )));
                }
                Some(full)
            }
            None => None,
        };
        let shown = template.clone();
        self.change_policy(namespace, |p| p.on_demand = template)
            .await?;
        tracing::info!(namespace, template = ?shown, "on-demand creation set");
        self.namespace_info(namespace).await
    }

    /// After actor `name` was not found in a namespace that creates actors
    /// on first use from `template` ([`ControlPlane::on_demand_template`]):
    /// creates it (once) and routes to it. `leader` is how a follower
    /// replica has it created (`None` where this control plane decides).
    ///
    /// # Errors
    /// The create's (403 over the namespace's `max_actors`, 400 for a name
    /// that cannot be an actor's, 404 when the template was deleted since,
    /// 503 no worker), or the route's.
    pub async fn create_on_first_use(
        &self,
        name: &str,
        template: &str,
        leader: Option<&dyn AskLeader>,
    ) -> Result<Route, ApiError> {
        match (self.decides(), leader) {
            (true, _) => self.create_once(name, template).await?,
            (false, Some(leader)) => {
                leader.create_on_demand(name).await?;
                return self.route_once_written(name).await;
            }
            (false, None) => {
                return Err(ApiError::unavailable(format!(
                    "actor {name} does not exist yet and this replica cannot ask the leader to \
                     create it; retry"
                )));
            }
        }
        self.route(name).await
    }

    /// [`ControlPlane::route`] on a follower right after the leader created
    /// `name`: a read of the placement begun before the create, or an etcd
    /// member behind the leader's, may not have it yet; looked up again
    /// for up to [`SEEN_WITHIN`].
    async fn route_once_written(&self, name: &str) -> Result<Route, ApiError> {
        let deadline = tokio::time::Instant::now() + SEEN_WITHIN;
        loop {
            match self.route(name).await {
                Err(e) if e.is(ErrorKind::NotFound) && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(SEEN_POLL).await;
                }
                other => return other,
            }
        }
    }

    /// Creates actor `name` from its namespace's on-demand template unless
    /// it exists: one create at a time per name, so concurrent first
    /// requests make one actor (each finds it made).
    ///
    /// # Errors
    /// 404 when the namespace creates no actors on first use (or its
    /// template is gone); 503 on a follower; the create's.
    pub async fn create_once(&self, name: &str, template: &str) -> Result<(), ApiError> {
        let decider = self.decider()?;
        let flight = decider.on_demand_flight(name);
        let result = {
            let _one = flight.lock().await;
            if self.has_actor(name) {
                Ok(())
            } else {
                match self.create_actor(name, template).await {
                    Ok(_) => {
                        tracing::info!(actor = name, template, "actor created on first use");
                        Ok(())
                    }
                    // Made meanwhile by `actor create`: there it is.
                    Err(e) if e.is(ErrorKind::Conflict) && self.has_actor(name) => Ok(()),
                    Err(e) => Err(e),
                }
            }
        };
        decider.on_demand_landed(name, flight);
        result
    }

    /// [`ControlPlane::route`], creating the actor first when it does not
    /// exist and its namespace creates actors on first use (a call or a
    /// message from another actor).
    ///
    /// # Errors
    /// As [`ControlPlane::route`] and [`ControlPlane::create_on_first_use`].
    pub async fn route_or_create(&self, name: &str) -> Result<Route, ApiError> {
        match self.route(name).await {
            Err(e) if e.is(ErrorKind::NotFound) => {
                match self.on_demand_template(namespace_of(name)).await? {
                    Some(template) => self.create_on_first_use(name, &template, None).await,
                    None => Err(e),
                }
            }
            other => other,
        }
    }

    /// [`ControlPlane::create_once`] for a follower's request: the
    /// namespace's on-demand template, read here.
    ///
    /// # Errors
    /// 404 when the namespace creates no actors on first use; as
    /// [`ControlPlane::create_once`].
    pub async fn create_on_demand_here(&self, name: &str) -> Result<(), ApiError> {
        stasis_contract::names::check_full_name("actor", name)?;
        match self.on_demand_template(namespace_of(name)).await? {
            Some(template) => self.create_once(name, &template).await,
            None => Err(ApiError::not_found(format!(
                "no actor named {name:?}, and its namespace creates no actors on first use"
            ))),
        }
    }
}

/// How long a follower looks for an actor the leader just created.
const SEEN_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// How often it looks meanwhile.
const SEEN_POLL: std::time::Duration = std::time::Duration::from_millis(25);

/// One name's create in flight: those for the same name wait on it.
pub(crate) type Flight = Arc<tokio::sync::Mutex<()>>;
