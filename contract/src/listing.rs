//! A query of the actors list (`GET /v1/actors?label=k=v&template=T&state=S&limit=N&continue=TOKEN`,
//! `stasis actor list`): what selects actors and how a page of them is
//! cut, shared by the server that answers and the CLI that asks.
//!
//! Actors are listed by name. A page holds at most `limit` actors; when
//! more match, the answer carries [`CONTINUE_HEADER`], a token that asks
//! for the actors after the page's last one. A listing that follows the
//! tokens returns every actor that exists from its first page to its last
//! exactly once, whatever is created or deleted meanwhile (an actor made
//! or removed during the listing may or may not be in it). Without
//! `limit` and `continue` every matching actor is answered at once, as
//! before pages existed.

use crate::error::ApiError;
use crate::labels::{check_key, parse_pair};
use crate::status::ActorState;

/// The answer header that holds the token of the next page, when there is
/// one (absent on the last page).
pub const CONTINUE_HEADER: &str = "stasis-continue";

/// The largest page.
pub const MAX_LIMIT: usize = 5000;

/// The page size the CLI asks for when it lists every actor.
pub const CLI_PAGE: usize = 1000;

/// What a listing selects and where its page starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActorQuery {
    /// Labels every listed actor has (`key`, `value`), all of them.
    pub labels: Vec<(String, String)>,
    /// Only actors of this template (any version): a name as the client
    /// gave it, resolved in the namespace by the server.
    pub template: Option<String>,
    /// Only actors in this state.
    pub state: Option<ActorState>,
    /// At most this many actors; `None`: all.
    pub limit: Option<usize>,
    /// Only actors after this name (a page's start, from its token).
    pub after: Option<String>,
}

impl ActorQuery {
    /// Parses a URL query.
    ///
    /// # Errors
    /// 400 naming the parameter that is not one, or the limit it broke.
    pub fn parse(query: &str) -> Result<Self, ApiError> {
        let mut parsed = Self::default();
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            match &*key {
                "label" => parsed.labels.push(parse_selector(&value)?),
                "template" => parsed.template = Some(value.into_owned()),
                "state" => {
                    let state = serde_json::from_value(serde_json::Value::String(value.to_string()))
                        .map_err(|_| {
                            ApiError::bad_request(format!(
                                "state={value:?} is not one of creating, running, pausing, paused, resuming, migrating, failed, unknown"
                            ))
                        })?;
                    parsed.state = Some(state);
                }
                "limit" => {
                    let limit =
                        value
                            .parse::<usize>()
                            .ok()
                            .filter(|n| *n >= 1)
                            .ok_or_else(|| {
                                ApiError::bad_request(format!(
                                    "limit={value:?} is not a whole number of 1 or more"
                                ))
                            })?;
                    if limit > MAX_LIMIT {
                        return Err(ApiError::bad_request(format!(
                            "limit={limit} is over the largest page, {MAX_LIMIT} actors"
                        )));
                    }
                    parsed.limit = Some(limit);
                }
                "continue" => parsed.after = Some(decode_token(&value)?),
                other => {
                    return Err(ApiError::bad_request(format!(
                        "unknown parameter {other:?}: the actors list takes label, template, state, limit and continue"
                    )));
                }
            }
        }
        Ok(parsed)
    }

    /// The URL query that asks for this (empty when it selects everything
    /// at once).
    #[must_use]
    pub fn to_query(&self) -> String {
        let mut out = form_urlencoded::Serializer::new(String::new());
        for (key, value) in &self.labels {
            out.append_pair("label", &format!("{key}={value}"));
        }
        if let Some(template) = &self.template {
            out.append_pair("template", template);
        }
        if let Some(state) = self.state {
            out.append_pair("state", state.as_str());
        }
        if let Some(limit) = self.limit {
            out.append_pair("limit", &limit.to_string());
        }
        if let Some(after) = &self.after {
            out.append_pair("continue", &continue_token(after));
        }
        out.finish()
    }

    /// Whether the answer is cut into pages (a `limit` or a `continue`).
    #[must_use]
    pub fn paged(&self) -> bool {
        self.limit.is_some() || self.after.is_some()
    }
}

/// A label selector, `key=value`.
fn parse_selector(text: &str) -> Result<(String, String), ApiError> {
    if !text.contains('=') {
        check_key(text)?;
        return Err(ApiError::bad_request(format!(
            "label={text:?} selects nothing: write label=KEY=VALUE"
        )));
    }
    parse_pair(text)
}

/// The token of the page that starts after actor `last`.
#[must_use]
pub fn continue_token(last: &str) -> String {
    format!("a{}", hex::encode(last))
}

/// The actor name a token starts after.
///
/// # Errors
/// 400 if it is not a token a listing gave.
pub fn decode_token(token: &str) -> Result<String, ApiError> {
    let bad = || {
        ApiError::bad_request(format!(
            "continue={:?} is not a token an actor listing answered (take it from the {CONTINUE_HEADER} header)",
            token.chars().take(80).collect::<String>()
        ))
    };
    let hex = token.strip_prefix('a').ok_or_else(bad)?;
    let bytes = hex::decode(hex).map_err(|_| bad())?;
    String::from_utf8(bytes).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_survives_its_encoding() {
        let query = ActorQuery {
            labels: vec![
                ("tier".into(), "gold".into()),
                ("app".into(), String::new()),
            ],
            template: Some("counter".into()),
            state: Some(ActorState::Paused),
            limit: Some(10),
            after: Some("c-9.team".into()),
        };
        assert_eq!(ActorQuery::parse(&query.to_query()).expect("parsed"), query);
        assert_eq!(ActorQuery::default().to_query(), "");
    }

    #[test]
    fn bad_parameters_name_what_is_wrong() {
        for (query, says) in [
            ("limit=0", "1 or more"),
            ("limit=5001", "largest page, 5000"),
            ("state=asleep", "is not one of"),
            ("label=tier", "label=KEY=VALUE"),
            ("label=a%20b=c", "only a-z"),
            ("continue=zz", "not a token"),
            ("sort=name", "unknown parameter"),
        ] {
            let e = ActorQuery::parse(query).expect_err(query);
            assert!(e.to_string().contains(says), "{query}: {e}");
        }
    }
}
