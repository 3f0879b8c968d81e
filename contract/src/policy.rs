//! What a namespace lets in ([`NamespacePolicy`]): whether requests to
//! its actors through the ingress must present a token ([`IngressAuth`]),
//! and which other namespaces' actors may call and message its actors
//! (`calls_from`); and [`Policies`], the part of the directory that keeps
//! them. A namespace with no policy set is open at the ingress (`none`)
//! and closed to other namespaces' actors, as every namespace was before.

use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::namespace_settings::{NamespaceSetting, SettingTable};

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

/// The body of `PUT /v1/namespaces/{ns}/calls-from`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallsFromSetting {
    /// The namespaces whose actors may call and message this one's (empty:
    /// none but its own).
    pub namespaces: Vec<String>,
}

/// The body of `PUT /v1/namespaces/{ns}/on-demand`: the template unknown
/// actors of the namespace are created from on first use, or `null` to
/// stop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnDemandSetting {
    /// The template (a name in the namespace), or `None`.
    pub template: Option<String>,
}

/// Most namespaces a `calls_from` may list.
pub const MAX_CALLS_FROM: usize = 100;

/// What a namespace lets in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespacePolicy {
    /// What the ingress asks of requests to its actors.
    #[serde(default)]
    pub ingress_auth: IngressAuth,
    /// The template (a full name) its unknown actors are created from on
    /// first use (see `stasis_control::on_demand`); `None`: an unknown
    /// name is 404.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_demand: Option<String>,
    /// The other namespaces whose actors may call and message its actors
    /// (its own always may).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls_from: Vec<String>,
}

impl NamespaceSetting for NamespacePolicy {
    const TABLE: SettingTable = SettingTable {
        name: "policies",
        read: "a namespace policy read",
        write: "a namespace policy write",
    };
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

    #[test]
    fn a_policy_reads_with_its_fields_left_out() {
        let open: NamespacePolicy = serde_json::from_str("{}").expect("policy");
        assert_eq!(open, NamespacePolicy::default());
        let policy = NamespacePolicy {
            ingress_auth: IngressAuth::Token,
            on_demand: None,
            calls_from: vec!["team-a".into()],
        };
        let text = serde_json::to_string(&policy).expect("json");
        assert_eq!(text, r#"{"ingress_auth":"token","calls_from":["team-a"]}"#);
        assert_eq!(
            serde_json::from_str::<NamespacePolicy>(&text).expect("back"),
            policy
        );
    }
}
