//! Ingress authentication per namespace: whether requests to a
//! namespace's actors through the ingress must present a token
//! ([`IngressAuth`]), and [`IngressAuths`], the part of the directory that
//! keeps the setting. A namespace with none set is open (`none`), as every
//! namespace was before.

use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// What the ingress asks of a request to a namespace's actors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IngressAuth {
    /// Nothing: the actors are public (the default). An `Authorization`
    /// header goes to the guest as it came.
    #[default]
    None,
    /// `Authorization: Bearer` with a token of role `invoker` or above
    /// for the namespace (or for every namespace), or the `--admin-token`:
    /// 401 without one, 403 for a token of another namespace or a lower
    /// role. The header is checked by the ingress and never reaches the
    /// guest.
    Token,
}

impl IngressAuth {
    /// Its name (`none`, `token`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Token => "token",
        }
    }

    /// The mode named `name`.
    ///
    /// # Errors
    /// 400 naming the modes there are.
    pub fn parse(name: &str) -> Result<Self, ApiError> {
        match name {
            "none" => Ok(Self::None),
            "token" => Ok(Self::Token),
            other => Err(ApiError::bad_request(format!(
                "unknown ingress auth {other:?}; it is token or none"
            ))),
        }
    }
}

/// The body of `PUT /v1/namespaces/{ns}/ingress-auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngressAuthSetting {
    /// The mode.
    pub mode: IngressAuth,
}

/// The ingress-auth part of the directory: one [`IngressAuth`] per
/// namespace that has one set. Writes are durable on return and, in
/// cluster mode, fenced.
pub trait IngressAuths: Send + Sync {
    /// Sets namespace `namespace`'s ingress auth, replacing any.
    ///
    /// # Errors
    /// 500 on a storage failure; 503 from a leader that no longer leads.
    fn put_ingress_auth(&self, namespace: &str, mode: IngressAuth) -> Result<(), ApiError>;

    /// Namespace `namespace`'s ingress auth, if one was set.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn ingress_auth(&self, namespace: &str) -> Result<Option<IngressAuth>, ApiError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_and_print_by_name() {
        for mode in [IngressAuth::None, IngressAuth::Token] {
            assert_eq!(IngressAuth::parse(mode.name()).expect("known"), mode);
            assert_eq!(
                serde_json::to_string(&mode).expect("json"),
                format!("\"{}\"", mode.name())
            );
        }
        let refused = IngressAuth::parse("basic").expect_err("unknown");
        assert!(refused.message().contains("token or none"), "{refused}");
        let body: IngressAuthSetting = serde_json::from_str(r#"{"mode":"token"}"#).expect("body");
        assert_eq!(body.mode, IngressAuth::Token);
        assert!(serde_json::from_str::<IngressAuthSetting>(r#"{"mode":"token","x":1}"#).is_err());
    }
}
