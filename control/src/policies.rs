//! Namespace policies on the control plane's side
//! ([`stasis_contract::policy`]): setting a namespace's ingress auth and
//! the namespaces it takes calls from, and reading them for each request
//! the ingress routes ([`ControlPlane::ingress_auth`]) and each call or
//! message between actors ([`ControlPlane::may_call`]). A namespace's
//! policy is read from the directory and kept ([`crate::kept`]), read
//! again every [`POLICY_BOUND`], so a change applies on every replica
//! within it (plus one read).

use std::time::Duration;

use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::names::{DEFAULT_NAMESPACE, check_namespace, namespace_of};
use stasis_contract::namespace_settings::Settings as _;
use stasis_contract::policy::{IngressAuth, MAX_CALLS_FROM, NamespacePolicy};
use stasis_contract::quota::NamespaceInfo;

use crate::kept::Kept;
use crate::{ControlPlane, blocking};

/// How long a replica keeps a namespace's policy before reading it again
/// (in the background: see [`crate::kept`]): the bound within which a
/// change applies everywhere, plus one read.
pub const POLICY_BOUND: Duration = Duration::from_secs(1);

/// What the control plane keeps of the namespaces' policies.
pub struct PolicyState {
    kept: Kept<NamespacePolicy>,
    /// Held across a policy's read, change and write, so two changes of
    /// one namespace's policy (its ingress auth and its calls) do not
    /// undo each other.
    writes: tokio::sync::Mutex<()>,
}

impl Default for PolicyState {
    fn default() -> Self {
        Self {
            kept: Kept::new(POLICY_BOUND, "namespace policy"),
            writes: tokio::sync::Mutex::default(),
        }
    }
}

/// A namespace's policy as the directory holds it (the default when none
/// was set).
fn read_policy(
    directory: &dyn stasis_contract::directory::Directory,
    namespace: &str,
) -> Result<NamespacePolicy, ApiError> {
    Ok(directory
        .setting::<NamespacePolicy>(namespace)?
        .unwrap_or_default())
}

/// How a namespace is named in a message.
fn shown(namespace: &str) -> String {
    if namespace == DEFAULT_NAMESPACE {
        "the default namespace".to_owned()
    } else {
        format!("namespace {namespace}")
    }
}

impl ControlPlane {
    /// Namespace `namespace`'s policy, as read at most [`POLICY_BOUND`]
    /// ago (the default policy when none was set).
    ///
    /// # Errors
    /// 500 from the directory.
    pub async fn policy(&self, namespace: &str) -> Result<NamespacePolicy, ApiError> {
        self.policies
            .kept
            .get(&self.directory, namespace, read_policy)
            .await
    }

    /// Namespace `namespace`'s ingress auth.
    ///
    /// # Errors
    /// 500 from the directory.
    pub async fn ingress_auth(&self, namespace: &str) -> Result<IngressAuth, ApiError> {
        Ok(self.policy(namespace).await?.ingress_auth)
    }

    /// Whether actor `caller` (a full name) may call or message actor
    /// `callee`: always within a namespace; across namespaces when the
    /// callee's namespace takes calls from the caller's.
    ///
    /// # Errors
    /// 403 naming both namespaces when it may not; 500 from the directory.
    pub async fn may_call(&self, caller: &str, callee: &str) -> Result<(), ApiError> {
        let (from, to) = (namespace_of(caller), namespace_of(callee));
        if from == to || self.policy(to).await?.calls_from.iter().any(|n| n == from) {
            return Ok(());
        }
        Err(ApiError::new(
            ErrorKind::Forbidden,
            format!(
                "{} does not take calls from {} (stasis namespace calls-from {to} {from})",
                shown(to),
                shown(from)
            ),
        ))
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
        self.change_policy(namespace, |p| p.ingress_auth = mode)
            .await?;
        tracing::info!(namespace, mode = mode.name(), "ingress auth set");
        self.namespace_info(namespace).await
    }

    /// Sets the namespaces whose actors may call namespace `namespace`'s
    /// (replacing the list); its view.
    ///
    /// # Errors
    /// 400 for a bad namespace name, the namespace itself, or more than
    /// [`MAX_CALLS_FROM`]; 500 or 503 from the directory.
    pub async fn set_calls_from(
        &self,
        namespace: &str,
        mut from: Vec<String>,
    ) -> Result<NamespaceInfo, ApiError> {
        if from.len() > MAX_CALLS_FROM {
            return Err(ApiError::bad_request(format!(
                "calls-from lists {} namespaces, over the limit of {MAX_CALLS_FROM}",
                from.len()
            )));
        }
        for other in &from {
            check_namespace(other)?;
            if other == namespace {
                return Err(ApiError::bad_request(format!(
                    "namespace {namespace} always takes calls from its own actors; list other namespaces"
                )));
            }
        }
        from.sort();
        from.dedup();
        let count = from.len();
        self.change_policy(namespace, |p| p.calls_from = from)
            .await?;
        tracing::info!(namespace, namespaces = count, "calls-from set");
        self.namespace_info(namespace).await
    }

    /// Reads namespace `namespace`'s policy from the directory, applies
    /// `change` and writes it back, one change at a time.
    pub(crate) async fn change_policy(
        &self,
        namespace: &str,
        change: impl FnOnce(&mut NamespacePolicy),
    ) -> Result<(), ApiError> {
        check_namespace(namespace)?;
        let _one_at_a_time = self.policies.writes.lock().await;
        let owned = namespace.to_owned();
        let mut policy = blocking(&self.directory, move |d| read_policy(d, &owned)).await?;
        change(&mut policy);
        let (owned, stored) = (namespace.to_owned(), policy.clone());
        blocking(&self.directory, move |d| d.put_setting(&owned, &stored)).await?;
        self.policies.kept.put(namespace, policy);
        Ok(())
    }
}
