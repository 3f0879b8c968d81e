//! `GET /v1/actors/{name}/logs?follow=1`: an actor's log lines as one
//! streamed answer (NDJSON, one line per log line, sent as they come), for
//! `curl -N` and other HTTP clients; the CLI's `actor logs -f` long-polls
//! the same route instead. The stream asks the actor's worker for the lines
//! after the last one sent, waiting for new ones, so it follows the actor
//! across pauses, traps and moves; it ends when the actor is deleted or
//! the client leaves, or when the token that opened it is revoked or
//! expires (within [`crate::access::REVOCATION_BOUND`]: the token is
//! checked again that often while the stream waits).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};

use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::logs::{LogLine, LogQuery, MAX_WAIT_SECS};
use stasis_control::ControlPlane;
use stasis_http::body::Body;

use crate::access::{Grant, REVOCATION_BOUND, no_longer_admits};

/// How long to wait before asking again after a failed read (the actor's
/// worker unreachable, the actor moving).
const RETRY: Duration = Duration::from_millis(250);

/// `query` without its `follow` parameter, and whether it asked to follow
/// (`follow=1` or `follow=true`).
///
/// # Errors
/// 400 for another value of `follow`.
pub fn split_follow(query: &str) -> Result<(String, bool), ApiError> {
    let mut follow = false;
    let mut rest = form_urlencoded::Serializer::new(String::new());
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        if key == "follow" {
            follow = match &*value {
                "1" | "true" => true,
                "0" | "false" => false,
                other => {
                    return Err(ApiError::bad_request(format!(
                        "follow={other:?} is neither 1 nor 0"
                    )));
                }
            };
        } else {
            rest.append_pair(&key, &value);
        }
    }
    Ok((rest.finish(), follow))
}

/// Whether `request` asks for a followed log (a streamed answer).
#[must_use]
pub fn is_follow<B>(request: &hyper::Request<B>) -> bool {
    request.uri().path().ends_with("/logs")
        && request
            .uri()
            .query()
            .and_then(|q| split_follow(q).ok())
            .is_some_and(|(_, follow)| follow)
}

/// The lines as NDJSON.
#[must_use]
pub fn ndjson(lines: &[LogLine]) -> String {
    let mut body = String::new();
    for line in lines {
        if let Ok(text) = serde_json::to_string(line) {
            body.push_str(&text);
            body.push('\n');
        }
    }
    body
}

/// The streamed answer: `first` (what `query` selected), then every line
/// after the last one sent, as it comes, for as long as `grant` holds.
#[must_use]
pub fn followed(
    control: Arc<ControlPlane>,
    grant: Grant,
    name: &str,
    query: LogQuery,
    first: Vec<LogLine>,
) -> Response<Body> {
    let state = (
        control,
        Arc::new(grant),
        name.to_owned(),
        query,
        Some(first),
    );
    let chunks = futures_util::stream::unfold(
        state,
        |(control, grant, name, mut query, first)| async move {
            let lines = match first {
                Some(lines) => lines,
                None => {
                    // After the first answer only the sequence number selects.
                    query.tail = None;
                    query.since_unix_ms = None;
                    query.wait_ms = Some(MAX_WAIT_SECS * 1000);
                    let read = watched(&grant, &name, control.logs(&name, &query)).await?;
                    match read {
                        Ok(lines) => lines,
                        Err(e) if e.is(ErrorKind::NotFound) => return None,
                        Err(e) => {
                            tracing::debug!(actor = name, "following its log: {}", e.message());
                            tokio::time::sleep(RETRY).await;
                            Vec::new()
                        }
                    }
                }
            };
            if let Some(last) = lines.last() {
                query.after = Some(last.seq);
            }
            Some((
                Bytes::from(ndjson(&lines)),
                (control, grant, name, query, None),
            ))
        },
    );
    let mut response = Response::new(Body::stream(Box::pin(chunks)));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Waits for `read` while `grant` holds, checking it every
/// [`REVOCATION_BOUND`]; `None` once it does not (the stream ends).
async fn watched<T>(
    grant: &Grant,
    name: &str,
    read: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::pin!(read);
    loop {
        tokio::select! {
            done = &mut read => return Some(done),
            () = tokio::time::sleep(REVOCATION_BOUND) => {
                match grant.holds().await {
                    Ok(()) => {}
                    // Revoked, expired: the stream ends.
                    Err(e) if no_longer_admits(&e) => {
                        tracing::info!(actor = name, "a followed log ends: {}", e.message());
                        return None;
                    }
                    // The directory unreadable: the token is not known to
                    // be revoked; asked again at the next bound.
                    Err(e) => tracing::warn!(actor = name, "checking a follower's token: {}", e.message()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follow_is_split_from_the_query() {
        assert_eq!(
            split_follow("after=3&follow=1&tail=2").expect("valid"),
            ("after=3&tail=2".to_owned(), true)
        );
        assert_eq!(split_follow("").expect("valid"), (String::new(), false));
        let e = split_follow("follow=yes").expect_err("refused");
        assert!(e.message().contains("follow=\"yes\""), "{}", e.message());
    }
}
