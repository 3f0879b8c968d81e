//! Scoped admin tokens: the [`Role`] a token grants, the [`TokenRecord`]
//! the directory keeps of it (a digest of its secret, never the secret),
//! what the admin API shows of one ([`TokenInfo`]), and [`Tokens`], the
//! part of the directory that keeps them.
//!
//! A token's text is `stasis_<id>_<secret>`: `<id>` is 16 lowercase hex
//! digits (8 random bytes) naming its record, `<secret>` 64 hex digits (32
//! random bytes). The record holds the SHA-256 of the secret; with 256
//! random bits a plain digest is as strong as the secret itself, so no
//! slow key-derivation function is needed.

use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// What a token may do on the admin API; each role may do everything the
/// roles below it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Reads: lists, `get`, logs, events, rollout status, `/metrics`.
    Reader,
    /// A reader that may also send requests through the ingress to the
    /// actors of a namespace that requires a token there
    /// ([`crate::policy::IngressAuth::Token`]).
    Invoker,
    /// A reader that also changes templates and actors: push, delete,
    /// rollout, create, fork, pause, resume, checkpoint, upgrade.
    Writer,
    /// An admin of one namespace: everything a writer may, and moves, in
    /// its namespace only (a token of this role names its namespace).
    NamespaceAdmin,
    /// Everything: also workers (drain, undrain), moves (migrate,
    /// rebalance), `gc`, and tokens. The `--admin-token` is one.
    Admin,
}

impl Role {
    /// Every role, lowest first.
    pub const ALL: [Role; 5] = [
        Role::Reader,
        Role::Invoker,
        Role::Writer,
        Role::NamespaceAdmin,
        Role::Admin,
    ];

    /// The role's name (`reader`, `writer`, `admin`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Reader => "reader",
            Self::Invoker => "invoker",
            Self::Writer => "writer",
            Self::NamespaceAdmin => "namespace-admin",
            Self::Admin => "admin",
        }
    }

    /// The role named `name`.
    ///
    /// # Errors
    /// 400 naming the roles there are.
    pub fn parse(name: &str) -> Result<Self, ApiError> {
        Self::ALL
            .into_iter()
            .find(|r| r.name() == name)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "unknown role {name:?}; the roles are reader, invoker, writer, namespace-admin and admin"
                ))
            })
    }
}

/// What the directory keeps of one token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// The token's id (16 lowercase hex digits), the part of its text
    /// before the secret.
    pub id: String,
    /// What it may do.
    pub role: Role,
    /// The one namespace it may act in; every namespace, and the routes
    /// of no namespace, when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// SHA-256 of its secret, lowercase hex.
    pub secret_sha256: String,
    /// What it is for, as its creator said (at most
    /// [`MAX_DESCRIPTION_CHARS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// When it was created (ms since the Unix epoch).
    pub created_at_unix_ms: u64,
    /// When it stops being accepted (ms since the Unix epoch); never when
    /// `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_unix_ms: Option<u64>,
}

/// Longest description a token may carry, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 200;

impl TokenRecord {
    /// Whether it is expired at `now_unix_ms`.
    #[must_use]
    pub fn expired(&self, now_unix_ms: u64) -> bool {
        self.expires_at_unix_ms.is_some_and(|at| at <= now_unix_ms)
    }

    /// What the admin API shows of it (never the digest).
    #[must_use]
    pub fn info(&self) -> TokenInfo {
        TokenInfo {
            id: self.id.clone(),
            role: self.role,
            namespace: self.namespace.clone(),
            description: self.description.clone(),
            created_at: crate::status::rfc3339(self.created_at_unix_ms),
            expires_at: self.expires_at_unix_ms.map(crate::status::rfc3339),
            token: None,
        }
    }
}

/// A token as `GET /v1/tokens` and `POST /v1/tokens` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    /// Its id: what `token revoke` takes.
    pub id: String,
    /// What it may do.
    pub role: Role,
    /// The one namespace it may act in (absent: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// When it stops being accepted (RFC 3339); absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// The token itself: only in the answer that created it, never again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// The tokens part of the directory: one [`TokenRecord`] per id. Writes are
/// durable on return and, in cluster mode, fenced like every other
/// directory write.
pub trait Tokens: Send + Sync {
    /// Stores `record` (a new id).
    ///
    /// # Errors
    /// 500 on a storage failure; 503 from a leader that no longer leads.
    fn put_token(&self, record: &TokenRecord) -> Result<(), ApiError>;

    /// The record of token `id`, if there is one.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn token(&self, id: &str) -> Result<Option<TokenRecord>, ApiError>;

    /// Every token's record, by id.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn tokens(&self) -> Result<Vec<TokenRecord>, ApiError>;

    /// Removes token `id`; false if there was none.
    ///
    /// # Errors
    /// 500 on a storage failure; 503 from a leader that no longer leads.
    fn delete_token(&self, id: &str) -> Result<bool, ApiError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_order_and_parse_by_name() {
        assert!(Role::Reader < Role::Writer && Role::Writer < Role::NamespaceAdmin);
        assert!(Role::NamespaceAdmin < Role::Admin);
        for role in Role::ALL {
            assert_eq!(Role::parse(role.name()).unwrap(), role);
            assert_eq!(
                serde_json::to_string(&role).unwrap(),
                format!("\"{}\"", role.name())
            );
        }
        let refused = Role::parse("root").unwrap_err();
        assert!(
            refused.message().contains("namespace-admin and admin"),
            "{refused}"
        );
    }

    #[test]
    fn a_record_expires_at_its_time_and_shows_no_digest() {
        let record = TokenRecord {
            id: "0123456789abcdef".into(),
            role: Role::Reader,
            namespace: None,
            secret_sha256: "ab".repeat(32),
            description: None,
            created_at_unix_ms: 1_000,
            expires_at_unix_ms: Some(2_000),
        };
        assert!(!record.expired(1_999));
        assert!(record.expired(2_000));
        let shown = serde_json::to_string(&record.info()).unwrap();
        assert!(!shown.contains("abab"), "{shown}");
        assert!(shown.contains("\"expires_at\""), "{shown}");
    }
}
