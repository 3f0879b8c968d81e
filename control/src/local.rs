//! [`LocalControl`]: the control plane of this process as the
//! [`ControlApi`] of its in-process workers (the host functions `call`,
//! `send` and the alarm functions), held weakly: the control plane owns
//! the workers that hold this.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use stasis_contract::control_api::ControlApi;
use stasis_contract::error::ApiError;
use stasis_contract::sockets::{SocketAnswer, SocketOp};
use stasis_host_api::{Request, Response};

use crate::ControlPlane;
use crate::calls::{call_via, send_via};

/// A weak handle on the control plane of this process (module docs).
#[derive(Clone)]
pub struct LocalControl(Weak<ControlPlane>);

impl LocalControl {
    /// A handle on `control`.
    #[must_use]
    pub fn new(control: &Arc<ControlPlane>) -> Self {
        Self(Arc::downgrade(control))
    }

    /// The control plane.
    ///
    /// # Errors
    /// Unavailable once it is gone (shutting down).
    pub fn get(&self) -> Result<Arc<ControlPlane>, ApiError> {
        self.0
            .upgrade()
            .ok_or_else(|| ApiError::unavailable("the control plane is shutting down"))
    }
}

#[async_trait]
impl ControlApi for LocalControl {
    async fn call(&self, actor: &str, request: Request) -> Result<Response, ApiError> {
        let control = self.get()?;
        call_via(&control, actor, request).await
    }

    async fn send(&self, actor: &str, request: Request) -> Result<(), ApiError> {
        send_via(&self.get()?, actor, request).await
    }

    async fn set_alarm(
        &self,
        actor: &str,
        at_unix_ms: u64,
        setter: Option<String>,
    ) -> Result<(), ApiError> {
        self.get()?.alarms()?.set(actor, at_unix_ms, setter).await
    }

    async fn cancel_alarm(&self, actor: &str) -> Result<(), ApiError> {
        self.get()?.alarms()?.cancel(actor).await
    }

    async fn alarm(&self, actor: &str) -> Result<Option<u64>, ApiError> {
        self.get()?.alarms()?.get(actor).await
    }

    async fn socket(&self, actor: &str, op: SocketOp) -> Result<SocketAnswer, ApiError> {
        self.get()?.socket(actor, op)
    }
}
