//! The worker's fakes: a control plane that refuses every host call
//! (none of the test guests makes one) and a template source that has no
//! template (tests hand the worker its template directly).

use std::sync::Arc;

use async_trait::async_trait;
use stasis_contract::control_api::ControlApi;
use stasis_contract::error::ApiError;
use stasis_contract::sockets::{SocketAnswer, SocketOp};
use stasis_contract::templates::Templates;
use stasis_core::module::Template;
use stasis_host_api::{Request, Response};

/// Refuses every call, send, alarm and socket operation.
pub(super) struct RefusingControl;

fn refused() -> ApiError {
    ApiError::unavailable("the test's control plane takes no host calls")
}

#[async_trait]
impl ControlApi for RefusingControl {
    async fn call(&self, _actor: &str, _request: Request) -> Result<Response, ApiError> {
        Err(refused())
    }
    async fn send(&self, _actor: &str, _request: Request) -> Result<(), ApiError> {
        Err(refused())
    }
    async fn set_alarm(
        &self,
        _actor: &str,
        _at_unix_ms: u64,
        _setter: Option<String>,
    ) -> Result<(), ApiError> {
        Err(refused())
    }
    async fn cancel_alarm(&self, _actor: &str) -> Result<(), ApiError> {
        Err(refused())
    }
    async fn alarm(&self, _actor: &str) -> Result<Option<u64>, ApiError> {
        Err(refused())
    }
    async fn socket(&self, _actor: &str, _op: SocketOp) -> Result<SocketAnswer, ApiError> {
        Err(refused())
    }
}

/// Has no template: every digest is unknown.
pub(super) struct NoTemplates;

#[async_trait]
impl Templates for NoTemplates {
    async fn template(&self, digest: &str) -> Result<Arc<Template>, ApiError> {
        Err(ApiError::not_found(format!("no template {digest}")))
    }
    fn local(&self, digest: &str) -> Result<Arc<Template>, ApiError> {
        Err(ApiError::not_found(format!("no template {digest}")))
    }
}
