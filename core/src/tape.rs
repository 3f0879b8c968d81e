//! The tape of an instance's nondeterministic inputs: every value the
//! guest reads that the host chose — the monotonic and wall clocks, random
//! bytes, and the results of the `stasis` host functions (`call`, `send`,
//! `fetch`, the alarm calls, socket writes and lists) — is written to the
//! tape while it records, and read back from it while it replays.
//!
//! The logical journal ([`crate::journal`]) keeps, per delivery, its input
//! and its tape: replaying the delivery on the snapshot it followed, with
//! the host's answers read from the tape, gives the state it produced —
//! and repeats no outbound effect, since a replayed `call`, `send`,
//! `fetch`, alarm change or socket write never reaches
//! [`ActorServices`]. What the guest writes to stdout and stderr while it
//! replays is dropped (it was logged when it ran).
//!
//! A replay that asks for another kind of value than the tape holds next,
//! or leaves values unread, *diverged*: the guest is not deterministic
//! over its recorded inputs ([`Tape::finish_replay`] says where).
//!
//! ```text
//! event: kind u8, then
//!   1 monotonic clock   u64 LE ns
//!   2 wall clock        u64 LE ns since the Unix epoch
//!   3 random bytes      u32 LE length, bytes
//!   4 response result   ok: 1, u32 LE length, encoded response
//!   5 unit result       ok: 1
//!   6 alarm result      ok: 1, then 0 (none) or 1 and u64 LE Unix ms
//!   7 sockets result    ok: 1, u32 LE count, u64 LE ids
//!   (an error instead of ok: 0, i32 LE host error code, u32 LE length,
//!    the message)
//! ```

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

const MONOTONIC: u8 = 1;
const WALL: u8 = 2;
const RANDOM: u8 = 3;
pub(crate) const RESPONSE: u8 = 4;
pub(crate) const UNIT: u8 = 5;
pub(crate) const ALARM: u8 = 6;
pub(crate) const SOCKETS: u8 = 7;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Values pass through, unrecorded (guest code that no entry holds:
    /// an actor's creation, `on_pause`, a hand-over).
    #[default]
    Live,
    Record,
    Replay,
}

#[derive(Debug, Default)]
struct State {
    mode: Mode,
    /// Recorded events (recording), or the events to replay.
    events: Vec<u8>,
    /// Where the next replayed event starts.
    at: usize,
    /// Why the replay diverged, the first time it did.
    diverged: Option<String>,
}

/// One instance's tape (module docs): shared by its WASI clocks and random
/// source, its host services and the worker driving it.
#[derive(Debug, Clone, Default)]
pub struct Tape(Arc<Mutex<State>>);

impl Tape {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts recording (what was recorded so far is dropped).
    pub fn record(&self) {
        let mut state = self.lock();
        state.mode = Mode::Record;
        state.events.clear();
        state.diverged = None;
    }

    /// Starts recording unless it records (keeping what it recorded).
    pub fn ensure_recording(&self) {
        if self.mode() != Mode::Record {
            self.record();
        }
    }

    /// The events recorded since the last take (or since recording
    /// started); recording goes on.
    #[must_use]
    pub fn take(&self) -> Vec<u8> {
        std::mem::take(&mut self.lock().events)
    }

    /// Stops recording; the host's values pass through unrecorded.
    pub fn live(&self) {
        let mut state = self.lock();
        state.mode = Mode::Live;
        state.events.clear();
    }

    /// Replays `events`: the guest's next reads take their values from
    /// them, in order.
    pub fn replay(&self, events: Vec<u8>) {
        *self.lock() = State {
            mode: Mode::Replay,
            events,
            at: 0,
            diverged: None,
        };
    }

    pub(crate) fn mode(&self) -> Mode {
        self.lock().mode
    }

    /// Appends an event of `kind` (`encode` writes its value) while the
    /// tape records; nothing otherwise.
    pub(crate) fn record_event(&self, kind: u8, encode: impl FnOnce(&mut Vec<u8>)) {
        let mut state = self.lock();
        if state.mode == Mode::Record {
            state.events.push(kind);
            encode(&mut state.events);
        }
    }

    /// Whether the tape replays now.
    #[must_use]
    pub fn is_replaying(&self) -> bool {
        self.lock().mode == Mode::Replay
    }

    /// Ends a replay: the values pass through again.
    ///
    /// # Errors
    /// Why the replay diverged: a value of another kind was asked for than
    /// the tape held, or values were left unread.
    pub fn finish_replay(&self) -> Result<(), String> {
        let mut state = self.lock();
        let state = std::mem::take(&mut *state);
        if let Some(why) = state.diverged {
            return Err(why);
        }
        if state.at < state.events.len() {
            return Err(format!(
                "the guest left {} bytes of recorded host values unread (it asked for fewer \
                 values than when it ran)",
                state.events.len() - state.at
            ));
        }
        Ok(())
    }

    /// The value of a host read of `kind`: `live()` (recorded by
    /// `encode` when recording), or the recorded one while replaying;
    /// `None` once the replay diverged here.
    pub(crate) fn read<T>(
        &self,
        kind: u8,
        live: impl FnOnce() -> T,
        encode: impl FnOnce(&T, &mut Vec<u8>),
        decode: impl FnOnce(&mut Reader<'_>) -> Option<T>,
    ) -> Option<T> {
        let mut state = self.lock();
        match state.mode {
            Mode::Live => Some(live()),
            Mode::Record => {
                let value = live();
                state.events.push(kind);
                encode(&value, &mut state.events);
                Some(value)
            }
            Mode::Replay => replayed(&mut state, kind, decode),
        }
    }

    /// The next recorded value, of `kind` (the tape replays); `None` once
    /// the replay diverged here.
    pub(crate) fn replayed<T>(
        &self,
        kind: u8,
        decode: impl FnOnce(&mut Reader<'_>) -> Option<T>,
    ) -> Option<T> {
        replayed(&mut self.lock(), kind, decode)
    }
}

/// The next value of `kind` on a replaying tape (`state`), or `None`
/// with the divergence noted.
fn replayed<T>(
    state: &mut State,
    kind: u8,
    decode: impl FnOnce(&mut Reader<'_>) -> Option<T>,
) -> Option<T> {
    if state.diverged.is_some() {
        return None;
    }
    let at = state.at;
    let mut reader = Reader {
        bytes: &state.events,
        at,
    };
    let value = match reader.u8() {
        Some(found) if found == kind => decode(&mut reader),
        _ => None,
    };
    match value {
        Some(value) => {
            state.at = reader.at;
            Some(value)
        }
        None => {
            let found = state.events.get(at).copied();
            state.diverged = Some(format!(
                "the guest asked for a {} where the tape holds {} (byte {at} of {})",
                name(kind),
                found.map_or("nothing more", name),
                state.events.len()
            ));
            None
        }
    }
}

fn name(kind: u8) -> &'static str {
    match kind {
        MONOTONIC => "monotonic clock reading",
        WALL => "wall clock reading",
        RANDOM => "run of random bytes",
        RESPONSE => "call or fetch result",
        UNIT => "send, alarm or socket write result",
        ALARM => "pending alarm",
        SOCKETS => "socket list",
        _ => "damaged value",
    }
}

/// Reads events.
pub(crate) struct Reader<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) at: usize,
}

impl Reader<'_> {
    pub(crate) fn take(&mut self, n: usize) -> Option<&[u8]> {
        let bytes = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(bytes)
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    pub(crate) fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = usize::try_from(self.u32()?).ok()?;
        self.take(n).map(<[u8]>::to_vec)
    }
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&bytes[..len as usize]);
}

/// A monotonic clock (the actor's virtual clock) behind its tape (WASI's
/// monotonic clock).
pub(crate) struct TapedMonotonic<C> {
    pub(crate) clock: C,
    pub(crate) tape: Tape,
}

impl<C: wasmtime_wasi::HostMonotonicClock> wasmtime_wasi::HostMonotonicClock for TapedMonotonic<C> {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        let clock = &self.clock;
        self.tape
            .read(
                MONOTONIC,
                || clock.now(),
                |v, out| out.extend_from_slice(&v.to_le_bytes()),
                |r: &mut Reader<'_>| r.u64(),
            )
            .unwrap_or_else(|| clock.now())
    }
}

/// The system's wall clock behind the tape (WASI's realtime clock).
pub(crate) struct TapedWall {
    pub(crate) tape: Tape,
}

fn wall_now() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

impl wasmtime_wasi::HostWallClock for TapedWall {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    fn now(&self) -> Duration {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let read = self.tape.read(
            WALL,
            || nanos(wall_now()),
            |v, out| out.extend_from_slice(&v.to_le_bytes()),
            |r: &mut Reader<'_>| r.u64(),
        );
        read.map_or_else(wall_now, Duration::from_nanos)
    }
}

/// The system's secure random source behind the tape (WASI's
/// `random_get`).
pub(crate) struct TapedRandom {
    pub(crate) tape: Tape,
}

impl TapedRandom {
    fn fill(&self, dst: &mut [u8]) {
        let len = dst.len();
        let read = self.tape.read(
            RANDOM,
            || {
                let mut bytes = vec![0u8; len];
                rand::fill(&mut bytes[..]);
                bytes
            },
            |v, out| put_bytes(out, v),
            |reader| reader.bytes().filter(|b| b.len() == len),
        );
        match read {
            Some(bytes) => dst.copy_from_slice(&bytes),
            None => rand::fill(dst),
        }
    }
}

impl rand::TryRng for TapedRandom {
    type Error = std::convert::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        let mut bytes = [0u8; 4];
        self.fill(&mut bytes);
        Ok(u32::from_le_bytes(bytes))
    }
    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        let mut bytes = [0u8; 8];
        self.fill(&mut bytes);
        Ok(u64::from_le_bytes(bytes))
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        self.fill(dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::VirtualClock;
    use wasmtime_wasi::HostMonotonicClock as _;

    #[test]
    fn a_recording_replays_and_a_different_read_diverges() {
        let tape = Tape::default();
        let clock = TapedMonotonic {
            clock: VirtualClock::starting_at(1_000),
            tape: tape.clone(),
        };
        let mut random = TapedRandom { tape: tape.clone() };
        tape.record();
        let t = clock.now();
        let mut bytes = [0u8; 16];
        rand::TryRng::try_fill_bytes(&mut random, &mut bytes).expect("random");
        let events = tape.take();
        assert_eq!(events.len(), 1 + 8 + 1 + 4 + 16);
        tape.replay(events.clone());
        assert_eq!(clock.now(), t);
        let mut again = [0u8; 16];
        rand::TryRng::try_fill_bytes(&mut random, &mut again).expect("random");
        assert_eq!(again, bytes);
        assert_eq!(tape.finish_replay(), Ok(()));
        // Asked in another order: diverged, and said where.
        tape.replay(events.clone());
        rand::TryRng::try_fill_bytes(&mut random, &mut again).expect("random");
        let why = tape.finish_replay().expect_err("diverged");
        assert!(why.contains("random bytes"), "{why}");
        // Fewer reads than recorded: diverged too.
        tape.replay(events);
        let _ = clock.now();
        assert!(tape.finish_replay().is_err());
    }
}
