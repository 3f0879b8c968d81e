//! Scoped admin tokens on the control plane's side: the text of a token
//! (`stasis_<id>_<secret>`, see [`stasis_contract::tokens`]), making one,
//! listing them, revoking one, and reading the record a token names. The
//! check of a request's token against its route is the admin API's (one
//! place, `stasis-ingress`'s `access`).

use std::time::Duration;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use stasis_contract::error::ApiError;
use stasis_contract::status::now_unix_ms;
use stasis_contract::tokens::{MAX_DESCRIPTION_CHARS, Role, TokenInfo, TokenRecord};

use crate::{ControlPlane, blocking};

/// What every token's text starts with.
pub const TOKEN_PREFIX: &str = "stasis_";

/// Hex digits of a token's id.
const ID_HEX: usize = 16;

/// Hex digits of a token's secret.
const SECRET_HEX: usize = 64;

/// Longest `--expires` a token may have: ten years of 365.25 days (what
/// the CLI's `10y` means).
pub const MAX_EXPIRES: Duration = Duration::from_secs(10 * 36_525 * 24 * 36);

/// A token's text split into its id and secret, when it has a token's
/// shape (any other text is no scoped token).
#[must_use]
pub fn parse(text: &str) -> Option<(&str, &str)> {
    let (id, secret) = text.strip_prefix(TOKEN_PREFIX)?.split_once('_')?;
    (is_hex(id, ID_HEX) && is_hex(secret, SECRET_HEX)).then_some((id, secret))
}

/// Whether `c` is an invisible formatting character (Unicode category
/// Cf) or a line or paragraph separator, which could make a description
/// print as something else: the soft hyphen, bidirectional marks,
/// embeddings, overrides and isolates, zero-width characters, the byte
/// order mark, interlinear annotation, musical formatting and tag
/// characters.
fn is_formatting(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{0600}'..='\u{0605}'
            | '\u{061C}'
            | '\u{06DD}'
            | '\u{070F}'
            | '\u{0890}'..='\u{0891}'
            | '\u{08E2}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0001}'
            | '\u{E0020}'..='\u{E007F}'
    )
}

/// Whether `s` is `n` lowercase hex digits.
fn is_hex(s: &str, n: usize) -> bool {
    s.len() == n
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// SHA-256 of `secret`, lowercase hex (what the directory keeps).
#[must_use]
pub fn digest(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Whether `secret` is the one `record` was made with (the digests are
/// compared in constant time).
#[must_use]
pub fn secret_matches(record: &TokenRecord, secret: &str) -> bool {
    bool::from(
        digest(secret)
            .as_bytes()
            .ct_eq(record.secret_sha256.as_bytes()),
    )
}

/// `n` random bytes from the operating system, lowercase hex.
fn random_hex(n: usize) -> Result<String, ApiError> {
    let mut bytes = vec![0; n];
    getrandom::fill(&mut bytes)
        .map_err(|e| ApiError::internal(format!("no randomness for a token: {e}")))?;
    Ok(hex::encode(bytes))
}

/// What `POST /v1/tokens` asks for.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    /// Its role.
    pub role: Role,
    /// The one namespace it may act in; all when absent (required for
    /// `namespace-admin`, refused for `admin`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// What it is for.
    #[serde(default)]
    pub description: Option<String>,
    /// Seconds until it expires; never when absent.
    #[serde(default)]
    pub expires_in_s: Option<u64>,
}

impl ControlPlane {
    /// Makes a token: its record is stored with the digest of a new
    /// random secret, and its text is in the answer, the only place it
    /// is ever shown.
    ///
    /// # Errors
    /// 400 for a description over [`MAX_DESCRIPTION_CHARS`] or with
    /// control characters, or an expiry of 0 or over [`MAX_EXPIRES`]; 500
    /// or 503 from the directory.
    pub async fn create_token(&self, new: NewToken) -> Result<TokenInfo, ApiError> {
        if let Some(d) = &new.description {
            if d.chars().count() > MAX_DESCRIPTION_CHARS {
                return Err(ApiError::bad_request(format!(
                    "description is over {MAX_DESCRIPTION_CHARS} characters"
                )));
            }
            if let Some(c) = d.chars().find(|c| c.is_control() || is_formatting(*c)) {
                return Err(ApiError::bad_request(format!(
                    "description holds a control or formatting character (U+{:04X})",
                    u32::from(c)
                )));
            }
        }
        match (&new.namespace, new.role) {
            (Some(namespace), Role::Admin) => {
                return Err(ApiError::bad_request(format!(
                    "an admin token is for every namespace; make a namespace-admin token for namespace {namespace}"
                )));
            }
            (None, Role::NamespaceAdmin) => {
                return Err(ApiError::bad_request(
                    "a namespace-admin token needs its namespace",
                ));
            }
            (Some(namespace), _) => stasis_contract::names::check_namespace(namespace)?,
            (None, _) => {}
        }
        let now = now_unix_ms().ok_or_else(|| ApiError::internal("the clock is before 1970"))?;
        let expires_at_unix_ms = match new.expires_in_s {
            None => None,
            Some(0) => return Err(ApiError::bad_request("expires_in_s must be at least 1")),
            Some(s) if s > MAX_EXPIRES.as_secs() => {
                return Err(ApiError::bad_request(format!(
                    "expires_in_s {s} is over the limit of {} (ten years)",
                    MAX_EXPIRES.as_secs()
                )));
            }
            Some(s) => Some(now + s * 1000),
        };
        let (id, secret) = (random_hex(ID_HEX / 2)?, random_hex(SECRET_HEX / 2)?);
        let record = TokenRecord {
            id: id.clone(),
            role: new.role,
            namespace: new.namespace,
            secret_sha256: digest(&secret),
            description: new.description,
            created_at_unix_ms: now,
            expires_at_unix_ms,
        };
        let mut info = record.info();
        blocking(&self.directory, move |d| d.put_token(&record)).await?;
        tracing::info!(id = %id, role = new.role.name(), "token created");
        info.token = Some(format!("{TOKEN_PREFIX}{id}_{secret}"));
        Ok(info)
    }

    /// Every token, by id (without secrets or digests).
    ///
    /// # Errors
    /// 500 from the directory.
    pub async fn tokens(&self) -> Result<Vec<TokenInfo>, ApiError> {
        let records = blocking(&self.directory, |d| d.tokens()).await?;
        Ok(records.iter().map(TokenRecord::info).collect())
    }

    /// Revokes token `id`: it is refused from then on (by other replicas
    /// within the admin API's cache bound).
    ///
    /// # Errors
    /// 400 for what is not an id (never echoed: it may be a token's
    /// text); 404 if there is no such token; 500 or 503 from the
    /// directory.
    pub async fn revoke_token(&self, id: &str) -> Result<(), ApiError> {
        let no_such = || ApiError::not_found(format!("no token with id {id}"));
        if !is_hex(id, ID_HEX) {
            let what = if id.starts_with(TOKEN_PREFIX) {
                "a token's text"
            } else {
                "not one"
            };
            return Err(ApiError::bad_request(format!(
                "a token id is {ID_HEX} lowercase hex digits (`token list` shows them); \
                 this is {what}"
            )));
        }
        let owned = id.to_owned();
        let found = blocking(&self.directory, move |d| {
            // Read first: a delete retried after a lost answer finds
            // nothing, and must still say the token was revoked.
            if d.token(&owned)?.is_none() {
                return Ok(false);
            }
            d.delete_token(&owned)?;
            Ok(true)
        })
        .await?;
        if !found {
            return Err(no_such());
        }
        tracing::info!(id, "token revoked");
        Ok(())
    }

    /// The record of token `id`, as the directory holds it now.
    ///
    /// # Errors
    /// 500 from the directory.
    pub async fn token_record(&self, id: &str) -> Result<Option<TokenRecord>, ApiError> {
        let id = id.to_owned();
        blocking(&self.directory, move |d| d.token(&id)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invisible_formatting_characters_are_found() {
        for c in [
            '\u{00AD}',
            '\u{061C}',
            '\u{180E}',
            '\u{200B}',
            '\u{200D}',
            '\u{2028}',
            '\u{2029}',
            '\u{202E}',
            '\u{2066}',
            '\u{FEFF}',
            '\u{FFF9}',
            '\u{1D173}',
            '\u{E0041}',
        ] {
            assert!(is_formatting(c), "U+{:04X}", u32::from(c));
        }
        for c in ['a', 'é', 'ß', '中', ' ', '-', '\u{1F600}'] {
            assert!(!is_formatting(c), "{c}");
        }
    }

    #[test]
    fn only_a_token_shaped_text_parses_and_only_its_secret_is_accepted() {
        let (id, secret) = ("0123456789abcdef", "a".repeat(SECRET_HEX));
        let text = format!("{TOKEN_PREFIX}{id}_{secret}");
        assert_eq!(parse(&text), Some((id, secret.as_str())));
        for bad in [
            "stasis_0123456789abcdef",
            "stasis_0123456789ABCDEF_aa",
            "other_0123456789abcdef_aa",
            &format!("{TOKEN_PREFIX}{id}_{}", "g".repeat(SECRET_HEX)),
            &format!("{TOKEN_PREFIX}../../etc_{secret}"),
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        let record = TokenRecord {
            id: id.into(),
            role: Role::Reader,
            namespace: None,
            secret_sha256: digest(&secret),
            description: None,
            created_at_unix_ms: 0,
            expires_at_unix_ms: Some(10),
        };
        assert!(secret_matches(&record, &secret));
        assert!(!secret_matches(&record, &"b".repeat(SECRET_HEX)));
    }
}
