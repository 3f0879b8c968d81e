//! The journal's writer thread: group commits (one `write` and one
//! `fdatasync` for everything appended since the last), segment rolls,
//! and the search for room when the disk has none for the next segment.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use super::segment::{self, new_segment, next_segment, prepare_spare};
use super::{PAGE, ROOM_PROBE, SEGMENT_BYTES, Shared, durable, entry, roll_record};

/// Whether `e` says the disk (or the user's quota) is full.
pub(super) fn is_no_room(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

/// What a refusal says while the disk has no room for segment `start`.
pub(super) fn no_room(e: &io::Error) -> Arc<str> {
    format!(
        "{}: the worker journal cannot start its next segment ({} MiB): {e}; the request was not \
         applied, and requests are taken again once there is room (looked for every {} s)",
        durable::NO_ROOM,
        SEGMENT_BYTES >> 20,
        ROOM_PROBE.as_secs()
    )
    .into()
}

/// The writer thread: takes everything appended since the last round,
/// writes it with one `write` and one `fdatasync`, publishes the new
/// durable end, and rolls the segment when it is full; with no segment
/// (no room on the disk), looks for room first ([`find_room`]).
pub(super) fn write_rounds(shared: &Shared, dir: &Path, file: Option<File>, start: u64) {
    let mut spare = file.as_ref().and_then(|_| prepare_spare(dir));
    write_rounds_with(shared, dir, file, start, &mut spare);
    // Not left half-written behind a closed journal (removed at the next
    // open anyway).
    if let Some(spare) = spare {
        let _ = spare.join();
    }
}

fn write_rounds_with(
    shared: &Shared,
    dir: &Path,
    mut file: Option<File>,
    mut start: u64,
    spare: &mut Option<JoinHandle<io::Result<File>>>,
) {
    let mut len = 0u64;
    // The buffer written last round, emptied: swapped in for the next
    // round's appends (no allocation per round).
    let mut spare_buffer = Vec::new();
    loop {
        let Some(current) = &file else {
            file = find_room(shared, dir, start);
            if file.is_none() {
                return;
            }
            *spare = prepare_spare(dir);
            continue;
        };
        let (batch, end) = {
            let mut state = shared.lock();
            while state.pending.is_empty() && !state.stopping {
                state.idle = true;
                state = shared.work.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            state.idle = false;
            if state.pending.is_empty() {
                return;
            }
            // The next round starts on a page of its own.
            let offset = state.next - state.pending.len() as u64 - start;
            let padded = entry::pad_to_page(&mut state.pending, offset, PAGE);
            state.next += padded;
            std::mem::swap(&mut state.pending, &mut spare_buffer);
            (std::mem::take(&mut spare_buffer), state.next)
        };
        let written = current
            .write_all_at(&batch, len)
            .and_then(|()| current.sync_data());
        if let Err(e) = written {
            shared.fail(format!("writing segment {start}: {e}"));
            return;
        }
        len += batch.len() as u64;
        spare_buffer = batch;
        spare_buffer.clear();
        shared.syncs.fetch_add(1, Ordering::Relaxed);
        (shared.on_sync)();
        shared.committed.send_modify(|c| c.durable = end);
        shared.waiters.durable(end);
        if len >= SEGMENT_BYTES {
            match next_segment(dir, end, spare.take()) {
                Ok(next) => {
                    file = Some(next);
                    start = end;
                    len = 0;
                    let mut state = shared.lock();
                    state.segments.push_back(end);
                    roll_record(&mut state);
                    *spare = prepare_spare(dir);
                }
                Err(e) if is_no_room(&e) => {
                    // Nothing is lost: entries wait in memory for the
                    // segment, and new ones are refused meanwhile.
                    let why = no_room(&e);
                    tracing::warn!("worker journal: {why}");
                    shared.lock().no_room = Some(why);
                    (file, start, len) = (None, end, 0);
                }
                Err(e) => {
                    shared.fail(format!("starting segment {end}: {e}"));
                    return;
                }
            }
        }
    }
}

/// With no room on the disk for segment `start`: looks every
/// [`ROOM_PROBE`] (the file system's free space first, then by creating
/// it) until it is made; then the journal takes entries again. `None`
/// when the journal stops (or fails) first.
fn find_room(shared: &Shared, dir: &Path, start: u64) -> Option<File> {
    loop {
        {
            let state = shared.lock();
            if state.stopping {
                return None;
            }
            let (state, _) = shared
                .work
                .wait_timeout(state, ROOM_PROBE)
                .unwrap_or_else(|p| p.into_inner());
            if state.stopping {
                return None;
            }
        }
        if segment::free_bytes(dir).is_some_and(|free| free < SEGMENT_BYTES) {
            continue;
        }
        match new_segment(dir, start) {
            Ok(file) => {
                let mut state = shared.lock();
                state.no_room = None;
                if state.segments.back() != Some(&start) {
                    state.segments.push_back(start);
                    roll_record(&mut state);
                }
                tracing::info!("worker journal: the disk has room again; requests are taken");
                return Some(file);
            }
            Err(e) if is_no_room(&e) => {}
            Err(e) => {
                shared.fail(format!("starting segment {start}: {e}"));
                return None;
            }
        }
    }
}
