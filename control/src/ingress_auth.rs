//! Ingress auth per namespace on the control plane's side: setting it, and
//! reading it for each request the ingress routes
//! ([`ControlPlane::ingress_auth`]). A namespace's setting is read from
//! the directory and kept at most [`INGRESS_AUTH_BOUND`], so a change
//! applies on every replica within it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use stasis_contract::error::ApiError;
use stasis_contract::ingress_auth::IngressAuth;
use stasis_contract::names::check_namespace;
use stasis_contract::quota::NamespaceInfo;

use crate::{ControlPlane, blocking};

/// How long a replica keeps a namespace's ingress auth before reading it
/// again: the bound within which turning it on applies everywhere.
pub const INGRESS_AUTH_BOUND: Duration = Duration::from_secs(1);

/// Most namespaces whose setting is kept; past it the cache starts over.
const MAX_KEPT: usize = 10_000;

/// What the control plane keeps of the namespaces' ingress auth.
#[derive(Default)]
pub struct IngressAuthState {
    read: Mutex<HashMap<String, (IngressAuth, Instant)>>,
}

impl IngressAuthState {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, (IngressAuth, Instant)>> {
        self.read.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn keep(&self, namespace: &str, mode: IngressAuth) {
        let mut read = self.lock();
        if read.len() >= MAX_KEPT {
            read.clear();
        }
        read.insert(namespace.to_owned(), (mode, Instant::now()));
    }
}

impl ControlPlane {
    /// Namespace `namespace`'s ingress auth, as read at most
    /// [`INGRESS_AUTH_BOUND`] ago ([`IngressAuth::None`] when none was
    /// set).
    ///
    /// # Errors
    /// 500 from the directory.
    pub async fn ingress_auth(&self, namespace: &str) -> Result<IngressAuth, ApiError> {
        if let Some((mode, at)) = self.ingress_auth.lock().get(namespace)
            && at.elapsed() < INGRESS_AUTH_BOUND
        {
            return Ok(*mode);
        }
        let owned = namespace.to_owned();
        let mode = blocking(&self.directory, move |d| d.ingress_auth(&owned))
            .await?
            .unwrap_or_default();
        self.ingress_auth.keep(namespace, mode);
        Ok(mode)
    }

    /// Sets namespace `namespace`'s ingress auth; its view.
    ///
    /// # Errors
    /// 400 for a bad namespace name; 500 or 503 from the directory.
    pub async fn set_ingress_auth(
        &self,
        namespace: &str,
        mode: IngressAuth,
    ) -> Result<NamespaceInfo, ApiError> {
        check_namespace(namespace)?;
        let owned = namespace.to_owned();
        blocking(&self.directory, move |d| d.put_ingress_auth(&owned, mode)).await?;
        self.ingress_auth.keep(namespace, mode);
        tracing::info!(namespace, mode = mode.name(), "ingress auth set");
        self.namespace_info(namespace).await
    }
}
