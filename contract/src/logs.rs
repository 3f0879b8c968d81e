//! An actor's log: the lines its guest wrote to stdout and stderr, kept per
//! actor by the worker that hosts it ([`LogLine`]), and what a reader asks
//! for ([`LogQuery`]: `GET /v1/actors/{name}/logs`, `stasis actor logs`).
//!
//! Each line has a sequence number of its actor, increasing by one per line
//! and never reused (it survives pause, resume, traps and a restart of the
//! worker), so a reader that follows an actor asks for the lines after the
//! last one it saw and never sees one twice.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// Lines kept per actor: the newest [`KEEP_LINES`] lines, or fewer when
/// they hold more than [`KEEP_BYTES`] of text (older lines are dropped;
/// the buffer holds at most twice this before it is cut back).
pub const KEEP_LINES: usize = 1000;
/// Bytes of text kept per actor (see [`KEEP_LINES`]).
pub const KEEP_BYTES: usize = 256 << 10;
/// Longest line kept, in bytes: a longer line is cut here (on a character
/// boundary) and marked `truncated`; the rest of it, up to its newline, is
/// dropped.
pub const MAX_LINE_BYTES: usize = 4096;
/// The streams of a log: the guest's stdout and stderr, and the actor's
/// lifecycle events as its worker saw them ([`EVENT`]).
pub const STREAMS: [&str; 3] = ["stdout", "stderr", EVENT];
/// The stream of lifecycle events (created, resumed, paused, trapped,
/// captured for a move, installed, upgraded), one line each.
pub const EVENT: &str = "event";
/// Longest a follow request waits for a new line (`wait=`), in seconds.
pub const MAX_WAIT_SECS: u64 = 30;

/// One line an actor's guest wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// The actor's sequence number of this line (from 1).
    pub seq: u64,
    /// When the worker read it: RFC 3339, UTC, milliseconds.
    pub at: String,
    /// The same time in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// `stdout`, `stderr`, or `event` (see [`EVENT`]).
    pub stream: String,
    /// The worker that hosted the actor then.
    pub worker: String,
    /// The line, without its newline (invalid UTF-8 replaced).
    pub text: String,
    /// The line was longer than [`MAX_LINE_BYTES`] and was cut.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// Which lines of an actor a reader wants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogQuery {
    /// Only lines with a sequence number above this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<u64>,
    /// Only lines read at or after this time (ms since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_unix_ms: Option<u64>,
    /// Only the newest this many of the lines selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<usize>,
    /// Only lines of these streams (`stdout`, `stderr`, `event`); `None`:
    /// the guest's output, `stdout` and `stderr`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streams: Option<Vec<String>>,
    /// When no line is selected, wait this long (ms, at most
    /// [`MAX_WAIT_SECS`]) for one before answering with none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

impl LogQuery {
    /// The query of `GET /v1/actors/{name}/logs?after=SEQ&since=D&tail=N&wait=S`
    /// (`since`: a duration before now such as `10m`, or an RFC 3339
    /// time; `wait`: seconds, at most [`MAX_WAIT_SECS`]).
    ///
    /// # Errors
    /// Bad request naming the parameter that is not one.
    pub fn parse(query: &str, now_unix_ms: u64) -> Result<Self, ApiError> {
        let mut parsed = Self::default();
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            let number = |what: &str| {
                value.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("{what}={value:?} is not a whole number"))
                })
            };
            match &*key {
                "after" => parsed.after = Some(number("after")?),
                "tail" => {
                    parsed.tail = Some(usize::try_from(number("tail")?).unwrap_or(usize::MAX));
                }
                "wait" => {
                    let secs = number("wait")?;
                    if secs > MAX_WAIT_SECS {
                        return Err(ApiError::bad_request(format!(
                            "wait={secs} is over the limit of {MAX_WAIT_SECS} seconds"
                        )));
                    }
                    parsed.wait_ms = Some(secs * 1000);
                }
                "since" => parsed.since_unix_ms = Some(parse_since(&value, now_unix_ms)?),
                "stream" => {
                    if !STREAMS.contains(&&*value) {
                        return Err(ApiError::bad_request(format!(
                            "stream={value:?} is not one of {}",
                            STREAMS.join(", ")
                        )));
                    }
                    parsed
                        .streams
                        .get_or_insert_with(Vec::new)
                        .push(value.into_owned());
                }
                other => {
                    return Err(ApiError::bad_request(format!(
                        "unknown query parameter {other:?}"
                    )));
                }
            }
        }
        Ok(parsed)
    }

    /// How long to wait for a line when none is selected.
    #[must_use]
    pub fn wait(&self) -> Option<Duration> {
        self.wait_ms
            .map(|ms| Duration::from_millis(ms.min(MAX_WAIT_SECS * 1000)))
    }

    /// Whether `line` is selected (before `tail`).
    #[must_use]
    pub fn selects(&self, line: &LogLine) -> bool {
        let stream = match &self.streams {
            None => line.stream != EVENT,
            Some(streams) => streams.contains(&line.stream),
        };
        stream
            && self.after.is_none_or(|after| line.seq > after)
            && self
                .since_unix_ms
                .is_none_or(|since| line.at_unix_ms >= since)
    }

    /// The lines of `lines` (oldest first) this query selects, `tail` applied.
    #[must_use]
    pub fn select(&self, lines: impl IntoIterator<Item = LogLine>) -> Vec<LogLine> {
        let mut picked: Vec<LogLine> = lines.into_iter().filter(|l| self.selects(l)).collect();
        if let Some(tail) = self.tail {
            let skip = picked.len().saturating_sub(tail);
            picked.drain(..skip);
        }
        picked
    }
}

/// `since`: a duration before `now_unix_ms` (`90s`, `10m`, `1h 30m`) or an
/// RFC 3339 time.
///
/// # Errors
/// Bad request if it is neither.
pub fn parse_since(value: &str, now_unix_ms: u64) -> Result<u64, ApiError> {
    if let Ok(ago) = humantime::parse_duration(value) {
        let ago = u64::try_from(ago.as_millis()).unwrap_or(u64::MAX);
        return Ok(now_unix_ms.saturating_sub(ago));
    }
    let at = humantime::parse_rfc3339_weak(value).map_err(|_| {
        ApiError::bad_request(format!(
            "since={value:?} is neither a duration (10m) nor an RFC 3339 time"
        ))
    })?;
    let ms = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Ok(ms)
}

/// `unix_ms` as RFC 3339, UTC, with milliseconds.
#[must_use]
pub fn rfc3339_ms(unix_ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(unix_ms);
    humantime::format_rfc3339_millis(at).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(seq: u64, at_unix_ms: u64) -> LogLine {
        LogLine {
            seq,
            at: rfc3339_ms(at_unix_ms),
            at_unix_ms,
            stream: "stdout".into(),
            worker: "w".into(),
            text: format!("line {seq}"),
            truncated: false,
        }
    }

    #[test]
    fn queries_select_after_since_and_tail() {
        let lines: Vec<LogLine> = (1..=10).map(|i| line(i, i * 1000)).collect();
        let q = LogQuery::parse("after=3&tail=2", 0).unwrap();
        let seqs: Vec<u64> = q.select(lines.clone()).iter().map(|l| l.seq).collect();
        assert_eq!(seqs, [9, 10]);
        let q = LogQuery::parse("since=5s", 10_000).unwrap();
        assert_eq!(q.select(lines.clone()).len(), 6);
        let q = LogQuery::parse(&format!("since={}", rfc3339_ms(8000)), 0).unwrap();
        assert_eq!(q.select(lines).len(), 3);
        assert!(LogQuery::parse("wait=31", 0).is_err());
        assert!(LogQuery::parse("after=x", 0).is_err());
        assert!(LogQuery::parse("nope=1", 0).is_err());
        assert!(LogQuery::parse("since=yesterday", 0).is_err());
        assert!(LogQuery::parse("stream=nope", 0).is_err());
        let mut event = line(11, 11_000);
        event.stream = EVENT.into();
        let q = LogQuery::parse("stream=event", 0).unwrap();
        assert_eq!(q.select(vec![line(1, 0), event.clone()]), [event.clone()]);
        let q = LogQuery::parse("", 0).unwrap();
        assert_eq!(q.select(vec![event]).len(), 0);
    }
}
