//! How a remote worker's actors reach the control plane (the host
//! functions `call`, `send` and the alarm functions): [`ControlPeer`], the
//! [`ControlApi`] of the control plane the worker joined or of the leader
//! replica of its etcd cluster, looked up for each request so that one
//! made after a failover reaches the new leader. It speaks the control
//! plane's internal API ([`ControlPath`]): `POST` of an encoded request to
//! `Call`/`Send`; for an alarm `PUT` with the time in Unix ms as decimal
//! text, `DELETE`, and `GET` answering the time or 204 when none is set.

use async_trait::async_trait;
use bytes::Bytes;
use hyper::Method;
use stasis_contract::control_api::ControlApi;
use stasis_contract::error::ApiError;
use stasis_contract::proto::{ControlPath, parse_ms};
use stasis_contract::sockets::{SocketAnswer, SocketOp};
use stasis_host_api::{Request, Response};

use stasis_cluster::client::Peer;
use stasis_cluster::etcd::Etcd;

/// The control plane of a remote worker (module docs).
#[derive(Clone)]
pub enum ControlPeer {
    /// `stasis worker run --join`: the control plane at a fixed address.
    Joined(Box<Peer>),
    /// A worker in etcd cluster mode: the replica holding the leader key,
    /// reached with the bearer `token`.
    Leader {
        /// The cluster's etcd.
        etcd: Etcd,
        /// The admin token, if the cluster has one.
        token: Option<String>,
    },
}

impl ControlPeer {
    /// Sends `method path` with `body` to the control plane and returns
    /// the answer's body.
    ///
    /// # Errors
    /// 503 if etcd cannot be read, no replica leads, or the control plane
    /// does not answer; the control plane's own error otherwise.
    pub async fn send(&self, method: Method, path: &str, body: Bytes) -> Result<Bytes, ApiError> {
        self.send_with(method, path, &[], body).await
    }

    /// [`ControlPeer::send`] with `headers`.
    ///
    /// # Errors
    /// As [`ControlPeer::send`].
    async fn send_with(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Bytes, ApiError> {
        let leader;
        let peer = match self {
            Self::Joined(peer) => peer.as_ref(),
            Self::Leader { etcd, token } => {
                let found = etcd
                    .leader()
                    .await
                    .map_err(|e| {
                        ApiError::unavailable(format!("finding the leader replica: {e:#}"))
                    })?
                    .ok_or_else(|| ApiError::unavailable("no leader replica"))?;
                leader = Peer::new(
                    &format!("http://{}", found.admin),
                    token.as_deref(),
                    "leader replica",
                )?;
                &leader
            }
        };
        Ok(peer.send(method, path, headers, body).await?.body)
    }

    /// Posts `request` to `path` of the control plane's internal API.
    async fn post(&self, path: &str, request: &Request) -> Result<Bytes, ApiError> {
        let body = stasis_host_api::encode_request(request)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        self.send(Method::POST, path, body.into()).await
    }

    /// Sends `method` with `body` to `actor`'s alarm in the internal API.
    async fn alarm_op(&self, method: Method, actor: &str, body: Bytes) -> Result<Bytes, ApiError> {
        self.send(method, &ControlPath::Alarm(actor).to_path(), body)
            .await
    }
}

#[async_trait]
impl ControlApi for ControlPeer {
    async fn call(&self, actor: &str, request: Request) -> Result<Response, ApiError> {
        let body = self
            .post(&ControlPath::Call(actor).to_path(), &request)
            .await?;
        stasis_host_api::decode_response(&body)
            .map_err(|e| ApiError::bad_gateway(format!("the control plane's answer: {e}")))
    }

    async fn send(&self, actor: &str, request: Request) -> Result<(), ApiError> {
        self.post(&ControlPath::Send(actor).to_path(), &request)
            .await
            .map(|_| ())
    }

    async fn set_alarm(
        &self,
        actor: &str,
        at_unix_ms: u64,
        setter: Option<String>,
    ) -> Result<(), ApiError> {
        let headers: Vec<(&str, &str)> = setter
            .as_deref()
            .map(|s| (stasis_contract::trace::TRACEPARENT, s))
            .into_iter()
            .collect();
        let path = ControlPath::Alarm(actor).to_path();
        self.send_with(Method::PUT, &path, &headers, at_unix_ms.to_string().into())
            .await
            .map(|_| ())
    }

    async fn cancel_alarm(&self, actor: &str) -> Result<(), ApiError> {
        self.alarm_op(Method::DELETE, actor, Bytes::new())
            .await
            .map(|_| ())
    }

    async fn socket(&self, actor: &str, op: SocketOp) -> Result<SocketAnswer, ApiError> {
        let body = stasis_contract::sockets::encode_op(&op);
        let answer = self
            .send(
                Method::POST,
                &ControlPath::Sockets(actor).to_path(),
                body.into(),
            )
            .await?;
        serde_json::from_slice(&answer)
            .map_err(|e| ApiError::bad_gateway(format!("the control plane's answer: {e}")))
    }

    async fn alarm(&self, actor: &str) -> Result<Option<u64>, ApiError> {
        let body = self.alarm_op(Method::GET, actor, Bytes::new()).await?;
        if body.is_empty() {
            return Ok(None);
        }
        parse_ms(&body)
            .map(Some)
            .map_err(|e| ApiError::bad_gateway(format!("the control plane's answer: {e}")))
    }
}
