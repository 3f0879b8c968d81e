//! `actor list`: every actor, asked for a page at a time (so that no one
//! answer has to hold them all), or with `--limit` one page, the token of
//! the next printed on stderr.

use hyper::StatusCode;

use super::plan::Call;
use crate::client::{AdminClient, Reply};
use stasis_runtime::contract::listing::{CLI_PAGE, continue_token};

/// The listing `call` asks for: one page when `one_page`, else every page
/// joined into one answer (as the server would answer one unpaged list).
///
/// # Errors
/// The first page's refusal, or a page that is not a JSON list.
pub(super) async fn fetch(
    client: &AdminClient,
    call: &Call,
    one_page: bool,
) -> anyhow::Result<Reply> {
    if one_page {
        let reply = client
            .send(call.method.clone(), &call.path, None, call.timeout)
            .await?;
        if let Some(token) = &reply.next_page {
            eprintln!("more actors: repeat with --continue {token}");
        }
        return Ok(reply);
    }
    let first = with_param(&call.path, "limit", &CLI_PAGE.to_string());
    let mut path = first.clone();
    let mut all: Vec<serde_json::Value> = Vec::new();
    loop {
        let reply = client
            .send(call.method.clone(), &path, None, call.timeout)
            .await?;
        let page: Vec<serde_json::Value> = serde_json::from_slice(&reply.body)
            .map_err(|e| anyhow::anyhow!("the server's actor list is not a JSON list: {e}"))?;
        all.extend(page);
        match reply.next_page {
            // The token is the server's; a token that does not move on
            // past the page would loop: stop at the last name seen.
            Some(token)
                if all
                    .last()
                    .and_then(|a| a["name"].as_str())
                    .map(continue_token)
                    == Some(token.clone()) =>
            {
                path = with_param(&first, "continue", &token);
            }
            _ => break,
        }
    }
    Ok(Reply {
        status: StatusCode::OK,
        body: serde_json::to_vec(&all)?.into(),
        next_page: None,
    })
}

/// `path` with `key=value` added to its query.
fn with_param(path: &str, key: &str, value: &str) -> String {
    let pair = form_urlencoded::Serializer::new(String::new())
        .append_pair(key, value)
        .finish();
    if path.contains('?') {
        format!("{path}&{pair}")
    } else {
        format!("{path}?{pair}")
    }
}
