//! `actor list`: every actor, asked for a page at a time (so that no one
//! answer has to hold them all), or with `--limit` one page, the token of
//! the next printed on stderr.

use hyper::StatusCode;

use super::plan::Call;
use crate::client::{AdminClient, Reply};
use anyhow::bail;
use stasis_runtime::contract::listing::CLI_PAGE;

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
    // The pages' items joined as the server wrote them (the order of each
    // actor's fields kept): the text between each page's brackets.
    let mut items: Vec<u8> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    loop {
        let reply = client
            .send(call.method.clone(), &path, None, call.timeout)
            .await?;
        let body = reply.body.trim_ascii();
        let inner = body
            .strip_prefix(b"[")
            .and_then(|b| b.strip_suffix(b"]"))
            .ok_or_else(|| anyhow::anyhow!("the server's actor list is not a JSON list"))?
            .trim_ascii();
        if !inner.is_empty() {
            if !items.is_empty() {
                items.push(b',');
            }
            items.extend_from_slice(inner);
        }
        match reply.next_page {
            None => break,
            // A page with nothing, or a token already followed, would
            // never end: the listing stops with an error, not quietly.
            Some(token) if inner.is_empty() || !seen.insert(token.clone()) => {
                bail!(
                    "the server answered the same page twice (token {token}): the listing is cut"
                );
            }
            Some(token) => path = with_param(&first, "continue", &token),
        }
    }
    let mut body = Vec::with_capacity(items.len() + 2);
    body.push(b'[');
    body.extend_from_slice(&items);
    body.push(b']');
    Ok(Reply {
        status: StatusCode::OK,
        body: body.into(),
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
