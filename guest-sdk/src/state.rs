//! State hand-over for a live code upgrade: [`State`], the opt-in trait
//! that lets `stasis actor upgrade` move an actor's state to another
//! version of its module whose memory layout differs.
//!
//! An actor that implements [`State`] and is exported with
//! `export_actor!(MyActor, state)` exports `stasis_save_state` and
//! `stasis_load_state`. At the upgrade, the old version's instance saves
//! the actor value; a fresh instance of the new version (its [`Default`]
//! value created as for a new actor) is replaced by what [`State::load`]
//! makes of the bytes. The bytes are the schema version
//! ([`State::SCHEMA`], a little-endian `u32`) followed by what
//! [`State::save`] wrote.
//!
//! For a type that derives `serde::Serialize` and `serde::Deserialize`,
//! `impl State for MyActor {}` is all it takes: the state is encoded with
//! bincode (standard configuration). A new version whose type changed
//! raises [`State::SCHEMA`] and migrates older layouts in [`State::load`]:
//!
//! ```no_run
//! use serde::{Deserialize, Serialize};
//! use stasis_guest_sdk::{Actor, Request, Response, State, export_actor, state};
//!
//! /// What version 1 saved.
//! #[derive(Deserialize)]
//! struct V1 {
//!     count: u64,
//! }
//!
//! #[derive(Default, Serialize, Deserialize)]
//! struct Counter {
//!     count: u64,
//!     upgrades: u32,
//! }
//!
//! impl State for Counter {
//!     const SCHEMA: u32 = 2;
//!     fn load(schema: u32, bytes: &[u8]) -> Result<Self, String> {
//!         match schema {
//!             1 => state::decode::<V1>(bytes).map(|old| Counter { count: old.count, upgrades: 1 }),
//!             2 => state::decode(bytes),
//!             other => Err(format!("unknown state schema {other}")),
//!         }
//!     }
//! }
//!
//! impl Actor for Counter {
//!     fn handle(&mut self, _req: Request) -> Response {
//!         Response::text(200, format!("{}\n", self.count))
//!     }
//! }
//!
//! export_actor!(Counter, state);
//! ```
//!
//! A `load` that returns `Err` (or panics) refuses the upgrade: the actor
//! stays on its old version with its state, and the upgrade's answer
//! carries the message.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// An actor whose state can be handed over to another version of its
/// module (see the module docs).
pub trait State: Serialize + DeserializeOwned + Sized {
    /// The schema version of what [`State::save`] writes; raise it when the
    /// saved layout changes, and read the older ones in [`State::load`].
    const SCHEMA: u32 = 1;

    /// The state as bytes (default: bincode of `self`).
    ///
    /// # Errors
    /// Why the state cannot be saved (the upgrade is refused).
    fn save(&self) -> Result<Vec<u8>, String> {
        encode(self)
    }

    /// The actor value from bytes that a [`State::save`] of schema
    /// `schema` wrote (default: bincode of `Self` when `schema` is
    /// [`State::SCHEMA`], else an error).
    ///
    /// # Errors
    /// Why the bytes cannot be taken (the upgrade is refused).
    fn load(schema: u32, bytes: &[u8]) -> Result<Self, String> {
        if schema != Self::SCHEMA {
            return Err(format!(
                "state of schema {schema} cannot be loaded by schema {}: implement State::load \
                 to migrate it",
                Self::SCHEMA
            ));
        }
        decode(bytes)
    }
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard()
}

/// Encodes `value` as [`State::save`]'s default does (bincode, standard
/// configuration).
///
/// # Errors
/// bincode's error, in words.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
    bincode::serde::encode_to_vec(value, config()).map_err(|e| e.to_string())
}

/// Decodes exactly one `T` from `bytes` as [`State::load`]'s default does;
/// use it to read an older schema's type in a custom `load`.
///
/// # Errors
/// bincode's error, or trailing bytes, in words.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let (value, used) =
        bincode::serde::decode_from_slice(bytes, config()).map_err(|e| e.to_string())?;
    if used != bytes.len() {
        return Err(format!(
            "{} bytes of state left over after decoding",
            bytes.len() - used
        ));
    }
    Ok(value)
}

/// The bytes `stasis_save_state` hands over: the schema, then the state.
pub(crate) fn save<A: State>(actor: &A) -> Result<Vec<u8>, String> {
    let mut bytes = A::SCHEMA.to_le_bytes().to_vec();
    bytes.extend(actor.save()?);
    Ok(bytes)
}

/// The actor from bytes `stasis_load_state` was given.
pub(crate) fn load<A: State>(bytes: &[u8]) -> Result<A, String> {
    let Some((schema, state)) = bytes.split_first_chunk::<4>() else {
        return Err(format!(
            "{} bytes of state: fewer than its 4-byte schema version",
            bytes.len()
        ));
    };
    A::load(u32::from_le_bytes(*schema), state)
}
