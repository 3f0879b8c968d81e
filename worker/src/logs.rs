//! Each actor's log (`stasis actor logs`): the lines its guest writes to
//! stdout and stderr, numbered per actor ([`LogLine::seq`]) and kept in a
//! bounded buffer ([`KEEP_LINES`], [`KEEP_BYTES`]).
//!
//! The guest's bytes reach [`ActorLog`] through the instance's
//! [`OutputSink`]; a line is complete at its newline, cut at
//! [`MAX_LINE_BYTES`]. Lines become visible to readers when the actor task
//! *settles* the log, after each command it handles and before a
//! request's answer is sent: they are appended to the store's log file
//! first ([`SnapshotStore::append_log`]) where the store keeps logs, so a
//! line a reader saw, or a request's line whose answer was sent, survives
//! `kill -9` of the process, and a sequence number a reader saw is never
//! given again. A last line without a newline is completed when the
//! instance goes (a pause, a trap's rollback, a move's capture, an
//! eviction). The file is cut back to the newest lines when it holds
//! twice the limits; a store that keeps no logs leaves the buffer in
//! memory (lost with the process).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use stasis_contract::error::ApiError;
use stasis_contract::logs::{
    KEEP_BYTES, KEEP_LINES, LogLine, LogQuery, MAX_LINE_BYTES, STREAMS, rfc3339_ms,
};
use stasis_contract::status::now_unix_ms;
use stasis_core::host::OutputSink;
use stasis_core::snapshot_store::SnapshotStore;
use tokio::sync::watch;

/// The logs of the actors a worker hosts, by actor name, made on first use.
#[derive(Default)]
pub(crate) struct LogBooks {
    books: Mutex<HashMap<String, Arc<ActorLog>>>,
}

impl LogBooks {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<ActorLog>>> {
        self.books.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `actor`'s log on `worker`, whose store is `store`.
    pub(crate) fn get(
        &self,
        actor: &str,
        worker: &str,
        store: &Arc<dyn SnapshotStore>,
    ) -> Arc<ActorLog> {
        self.lock()
            .entry(actor.to_owned())
            .or_insert_with(|| Arc::new(ActorLog::new(actor, worker, store.clone())))
            .clone()
    }

    /// The worker stops hosting `actor`: its log here takes no more lines,
    /// and readers waiting on it are answered 404 (the store's copy, if
    /// any, goes with the actor's snapshots).
    pub(crate) fn remove(&self, actor: &str) {
        if let Some(log) = self.lock().remove(actor) {
            log.close();
        }
    }
}

/// One actor's log (see the module docs).
pub(crate) struct ActorLog {
    actor: String,
    worker: String,
    store: Arc<dyn SnapshotStore>,
    inner: Mutex<Inner>,
    /// The newest visible sequence number, for readers that wait.
    visible: watch::Sender<u64>,
}

#[derive(Default)]
struct Inner {
    loaded: bool,
    closed: bool,
    next_seq: u64,
    /// The lowest number the first line may take (see [`ActorLog::placed`]).
    floor: u64,
    /// A line was numbered here, or the store's log had lines.
    numbered: bool,
    /// Lines read but not yet visible (settled).
    fresh: Vec<LogLine>,
    /// The buffer, where the store keeps no logs.
    kept: VecDeque<LogLine>,
    /// Lines and bytes in the store's log file.
    file_lines: usize,
    file_bytes: usize,
    /// stdout's and stderr's line so far.
    partial: [Partial; 2],
}

#[derive(Default)]
struct Partial {
    bytes: Vec<u8>,
    /// The line was cut: the rest of it, up to its newline, is dropped.
    dropping: bool,
}

fn stream_index(stream: &str) -> usize {
    usize::from(stream == "stderr")
}

/// The index of the event stream in [`STREAMS`].
const EVENT_STREAM: usize = 2;

impl ActorLog {
    fn new(actor: &str, worker: &str, store: Arc<dyn SnapshotStore>) -> Self {
        Self {
            actor: actor.to_owned(),
            worker: worker.to_owned(),
            store,
            inner: Mutex::new(Inner {
                next_seq: 1,
                ..Inner::default()
            }),
            visible: watch::channel(0).0,
        }
    }

    /// The state, the store's log read once first.
    fn inner(&self) -> MutexGuard<'_, Inner> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if !inner.loaded {
            inner.loaded = true;
            if self.store.keeps_logs() {
                let lines = self.file_lines();
                match lines.last() {
                    Some(last) => {
                        inner.next_seq = last.seq + 1;
                        inner.numbered = true;
                    }
                    None => inner.next_seq = inner.next_seq.max(inner.floor),
                }
                inner.file_lines = lines.len();
                inner.file_bytes = lines.iter().map(|l| l.text.len()).sum();
                self.visible.send_replace(inner.next_seq - 1);
            }
        }
        inner
    }

    /// The lines of the store's log file; a torn last line (the process
    /// was killed while appending) is dropped, and the file rewritten
    /// without it so that the next append starts a line.
    fn file_lines(&self) -> Vec<LogLine> {
        let bytes = match self.store.read_log(&self.actor) {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::warn!(actor = %self.actor, "cannot read its log: {e}");
                return Vec::new();
            }
        };
        let lines: Vec<LogLine> = bytes
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .filter_map(|l| serde_json::from_slice(l).ok())
            .collect();
        if bytes.last().is_some_and(|&b| b != b'\n') {
            self.replace(&lines);
        }
        lines
    }

    fn replace(&self, lines: &[LogLine]) {
        if let Err(e) = self.store.replace_log(&self.actor, &ndjson(lines)) {
            tracing::warn!(actor = %self.actor, "cannot rewrite its log: {e}");
        }
    }

    fn emit(&self, inner: &mut Inner, stream: usize, bytes: &[u8], truncated: bool) {
        let at_unix_ms = now_unix_ms().unwrap_or(0);
        let mut text = String::from_utf8_lossy(bytes).into_owned();
        let truncated = truncated || text.len() > MAX_LINE_BYTES;
        if text.len() > MAX_LINE_BYTES {
            let mut end = MAX_LINE_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        let seq = inner.next_seq;
        inner.next_seq += 1;
        inner.numbered = true;
        inner.fresh.push(LogLine {
            seq,
            at: rfc3339_ms(at_unix_ms),
            at_unix_ms,
            stream: STREAMS[stream].to_owned(),
            worker: self.worker.clone(),
            text,
            truncated,
        });
    }

    /// Makes the lines read so far visible (see the module docs); with
    /// `ended` (the instance is gone), a last line without a newline is
    /// completed first.
    pub(crate) fn settle(&self, ended: bool) {
        let mut inner = self.inner();
        if inner.closed {
            return;
        }
        if ended {
            self.complete(&mut inner);
        }
        if inner.fresh.is_empty() {
            return;
        }
        let fresh = std::mem::take(&mut inner.fresh);
        let newest = fresh.last().map_or(0, |l| l.seq);
        if self.store.keeps_logs() {
            if let Err(e) = self.store.append_log(&self.actor, &ndjson(&fresh)) {
                tracing::warn!(actor = %self.actor, "cannot append to its log: {e}");
            }
            inner.file_lines += fresh.len();
            inner.file_bytes += fresh.iter().map(|l| l.text.len()).sum::<usize>();
            if inner.file_lines > 2 * KEEP_LINES || inner.file_bytes > 2 * KEEP_BYTES {
                let mut lines: VecDeque<LogLine> = self.file_lines().into();
                let bytes = trim(&mut lines);
                let lines: Vec<LogLine> = lines.into();
                self.replace(&lines);
                inner.file_lines = lines.len();
                inner.file_bytes = bytes;
            }
        } else {
            inner.kept.extend(fresh);
            trim(&mut inner.kept);
        }
        drop(inner);
        self.visible.send_replace(newest);
    }

    /// Records a lifecycle event of the actor (stream `event`), visible
    /// at once with the lines before it.
    pub(crate) fn event(&self, text: &str) {
        {
            let mut inner = self.inner();
            if inner.closed {
                return;
            }
            self.emit(&mut inner, EVENT_STREAM, text.as_bytes(), false);
        }
        self.settle(false);
    }

    /// The instance that wrote the lines so far is gone (a trap's
    /// rollback, a pause): a last line without a newline is complete
    /// (visible at the next [`ActorLog::settle`]).
    pub(crate) fn end_instance(&self) {
        let mut inner = self.inner();
        self.complete(&mut inner);
    }

    fn complete(&self, inner: &mut Inner) {
        for stream in 0..2 {
            let partial = std::mem::take(&mut inner.partial[stream]);
            if !partial.bytes.is_empty() && !partial.dropping {
                self.emit(inner, stream, &partial.bytes, false);
            }
        }
    }

    /// The actor runs here under placement `epoch`. Where its log here
    /// has no line (a move to a worker that does not share the previous
    /// one's store, a re-placement after a worker was lost), the first
    /// line is numbered `(epoch - 1) * 2^32 + 1`, so that the lines
    /// written here come after every line numbered on an earlier worker
    /// (fewer than 2^32 lines each); a log with lines carries on.
    pub(crate) fn placed(&self, epoch: u64) {
        let floor = (epoch.saturating_sub(1) << 32) + 1;
        // Not loaded here: a worker starting with many actors reads no
        // log until it is used.
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.floor = inner.floor.max(floor);
        if !inner.numbered {
            inner.next_seq = inner.next_seq.max(floor);
        }
    }

    /// The visible lines, oldest first, and whether the log is closed.
    fn lines(&self) -> (Vec<LogLine>, bool) {
        let inner = self.inner();
        let lines = if self.store.keeps_logs() && !inner.closed {
            self.file_lines()
        } else {
            inner.kept.iter().cloned().collect()
        };
        (lines, inner.closed)
    }

    /// The lines `query` selects; when there are none and it waits, the
    /// first ones to become visible within its wait.
    ///
    /// # Errors
    /// Not found once the worker stopped hosting the actor.
    pub(crate) async fn read(&self, query: &LogQuery) -> Result<Vec<LogLine>, ApiError> {
        let mut changed = self.visible.subscribe();
        let deadline = query.wait().map(|wait| Instant::now() + wait);
        loop {
            changed.borrow_and_update();
            let (lines, closed) = self.lines();
            let lines = query.select(lines);
            // Lines made visible before the log closed are still
            // answered to a reader that waited for them.
            if closed && lines.is_empty() {
                return Err(ApiError::not_found(format!(
                    "actor {} is not on worker {}",
                    self.actor, self.worker
                )));
            }
            let Some(deadline) = deadline.filter(|_| lines.is_empty()) else {
                return Ok(lines);
            };
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, changed.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return Ok(Vec::new()),
            }
        }
    }

    fn close(&self) {
        self.inner().closed = true;
        self.visible.send_modify(|_| {});
    }
}

impl OutputSink for ActorLog {
    fn write(&self, stream: &'static str, bytes: &[u8]) {
        let stream = stream_index(stream);
        let mut inner = self.inner();
        if inner.closed {
            return;
        }
        let mut rest = bytes;
        while !rest.is_empty() {
            let (segment, ends) = match rest.iter().position(|&b| b == b'\n') {
                Some(end) => (&rest[..end], true),
                None => (rest, false),
            };
            rest = &rest[(segment.len() + usize::from(ends)).min(rest.len())..];
            let partial = &mut inner.partial[stream];
            if !partial.dropping {
                let room = (MAX_LINE_BYTES + 1).saturating_sub(partial.bytes.len());
                partial
                    .bytes
                    .extend_from_slice(&segment[..segment.len().min(room)]);
            }
            if ends {
                let partial = std::mem::take(&mut inner.partial[stream]);
                if !partial.dropping {
                    self.emit(&mut inner, stream, &partial.bytes, false);
                }
            } else if inner.partial[stream].bytes.len() > MAX_LINE_BYTES {
                let bytes = std::mem::take(&mut inner.partial[stream].bytes);
                inner.partial[stream].dropping = true;
                self.emit(&mut inner, stream, &bytes, true);
            }
        }
    }
}

/// Drops the oldest of `lines` until they are within the limits; the
/// bytes of text left.
fn trim(lines: &mut VecDeque<LogLine>) -> usize {
    let mut bytes: usize = lines.iter().map(|l| l.text.len()).sum();
    while lines.len() > KEEP_LINES || (bytes > KEEP_BYTES && lines.len() > 1) {
        if let Some(old) = lines.pop_front() {
            bytes -= old.text.len();
        }
    }
    bytes
}

fn ndjson(lines: &[LogLine]) -> Vec<u8> {
    let mut out = Vec::new();
    for line in lines {
        if serde_json::to_writer(&mut out, line).is_ok() {
            out.push(b'\n');
        }
    }
    out
}

impl crate::Worker {
    /// The lines of `actor`'s log that `query` selects (see
    /// [`crate::WorkerApi::logs`]).
    ///
    /// # Errors
    /// 404 if this worker does not host `actor`, or stops while waiting.
    pub async fn logs(&self, actor: &str, query: &LogQuery) -> Result<Vec<LogLine>, ApiError> {
        if !self.lock().contains_key(actor) {
            return Err(ApiError::not_found(format!(
                "actor {actor} is not on worker {}",
                self.ctx.worker
            )));
        }
        self.logs
            .get(actor, &self.ctx.worker, &self.ctx.store)
            .read(query)
            .await
    }
}

#[cfg(test)]
mod tests {
    use stasis_core::snapshot_files::LocalSnapshotStore;

    use super::*;

    fn texts(log: &ActorLog) -> Vec<(u64, String, bool)> {
        log.lines()
            .0
            .into_iter()
            .map(|l| (l.seq, l.text, l.truncated))
            .collect()
    }

    #[test]
    fn lines_are_split_cut_completed_and_kept_across_a_restart() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store: Arc<dyn SnapshotStore> =
            Arc::new(LocalSnapshotStore::open(tmp.path(), None).expect("store"));
        let log = ActorLog::new("a", "w", store.clone());
        log.write("stdout", b"one\ntw");
        log.write("stderr", b"err\n");
        log.write("stdout", b"o\npart");
        assert!(texts(&log).is_empty(), "visible before settling");
        log.settle(false);
        let want = |v: &[(u64, &str)]| -> Vec<(u64, String, bool)> {
            v.iter()
                .map(|(s, t)| (*s, (*t).to_owned(), false))
                .collect()
        };
        assert_eq!(texts(&log), want(&[(1, "one"), (2, "err"), (3, "two")]));
        log.end_instance();
        log.settle(false);
        assert_eq!(texts(&log)[3], (4, "part".to_owned(), false));
        let long = vec![b'x'; MAX_LINE_BYTES + 10];
        log.write("stdout", &long);
        log.write("stdout", b"yyy\nafter\n");
        log.settle(true);
        let lines = texts(&log);
        assert_eq!(lines[4], (5, "x".repeat(MAX_LINE_BYTES), true));
        assert_eq!(lines[5], (6, "after".to_owned(), false));
        // A torn last line (a kill during an append) is dropped; the
        // numbering carries on after the newest whole line.
        store.append_log("a", br#"{"seq":99"#).expect("append");
        let again = ActorLog::new("a", "w", store);
        assert_eq!(texts(&again).len(), 6);
        again.write("stdout", b"next\n");
        again.settle(false);
        assert_eq!(texts(&again)[6].0, 7);
        // A log with lines carries on under a new placement; one without
        // (another worker's store) starts above every earlier epoch's.
        again.placed(3);
        again.write("stdout", b"moved\n");
        again.settle(false);
        assert_eq!(texts(&again)[7].0, 8);
        let other = tempfile::tempdir().expect("tmp");
        let elsewhere = ActorLog::new(
            "a",
            "w2",
            Arc::new(LocalSnapshotStore::open(other.path(), None).expect("store")),
        );
        elsewhere.placed(3);
        elsewhere.write("stdout", b"there\n");
        elsewhere.settle(false);
        assert_eq!(texts(&elsewhere)[0].0, (2 << 32) + 1);
    }

    #[test]
    fn the_buffer_keeps_the_newest_lines() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store: Arc<dyn SnapshotStore> =
            Arc::new(LocalSnapshotStore::open(tmp.path(), None).expect("store"));
        let log = ActorLog::new("a", "w", store);
        for i in 0..(3 * KEEP_LINES) {
            log.write("stdout", format!("line {i}\n").as_bytes());
            log.settle(false);
        }
        let lines = texts(&log);
        assert!(lines.len() >= KEEP_LINES && lines.len() <= 2 * KEEP_LINES);
        assert_eq!(lines.last().map(|l| l.0), Some(3 * KEEP_LINES as u64));
    }
}
