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
//! # The default format: self-describing
//!
//! For a type that derives `serde::Serialize` and `serde::Deserialize`,
//! `impl State for MyActor {}` is all it takes. [`State::save`]'s default
//! ([`encode`]) writes [`FORMAT_TAG`] (the 4 bytes `FF 43 42 52`,
//! `"\xFFCBR"`) and then the value in CBOR (RFC 8949) with its field
//! names kept: a struct is a map from field name to value. So the handed
//! over bytes are:
//!
//! | bytes | what |
//! |---|---|
//! | `0..4` | [`State::SCHEMA`], `u32` little-endian |
//! | `4..8` | [`FORMAT_TAG`] (written by [`encode`], read by [`decode`]) |
//! | `8..` | the state in CBOR, one item, nothing after it |
//!
//! Because fields are found by name, a new version may change its type
//! the ways serde bridges, **with the same schema**: add a field marked
//! `#[serde(default)]` (it takes its default when the saved state lacks
//! it), remove a field (its saved value is skipped), reorder fields, or
//! rename one with `#[serde(alias = "old_name")]`. A change serde cannot
//! bridge (a field whose type changed, a new field without a default, a
//! value to compute) raises [`State::SCHEMA`] and migrates older schemas
//! in [`State::load`]:
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
//! A `save` and `load` of your own may write any bytes (they follow the
//! schema, with no tag unless they call [`encode`]).
//!
//! # State saved by an older SDK
//!
//! Before this format, the default wrote the state in bincode (standard
//! configuration, fields by position, no names) right after the schema,
//! with no tag. [`decode`] reads both: bytes that start with
//! [`FORMAT_TAG`] are CBOR, any others are taken as that bincode. No
//! bincode encoding begins with the byte `FF` unless the state's first
//! field is a `u8`, `i8` or float holding it (bincode's lengths, enum
//! variants, wider integers, `bool`, `Option` and `char` never do), and
//! the three bytes after it would have to spell `CBR` as well. Old state
//! is read once: the actor's next save writes CBOR. Since bincode has no
//! field names, old state loads only into a type with the same fields in
//! the same order: to add a field while leaving a version built with an
//! older SDK, either upgrade first to a version built with this SDK and
//! the same type, or raise [`State::SCHEMA`] and decode the old type in
//! [`State::load`] as above.
//!
//! A version built with an older SDK reads only bincode: a hand-over back
//! to one fails, and the actor stays where it is. Go back from such an
//! upgrade by resuming its `barrier_snapshot` instead (docs/api.md,
//! "History").
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
    /// saved state changes in a way serde cannot bridge by field names
    /// (see the module docs), and read the older ones in [`State::load`].
    const SCHEMA: u32 = 1;

    /// The state as bytes (default: [`encode`], the tag and CBOR of
    /// `self` with field names).
    ///
    /// # Errors
    /// Why the state cannot be saved (the upgrade is refused).
    fn save(&self) -> Result<Vec<u8>, String> {
        encode(self)
    }

    /// The actor value from bytes that a [`State::save`] of schema
    /// `schema` wrote (default: [`decode`] of `Self` when `schema` is
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

/// The 4 bytes [`encode`] writes before the CBOR of the state: `FF`, then
/// `CBR`. `FF` never begins a CBOR item (it is the "break" code), nor the
/// older SDK's bincode unless the state's first field is a byte or a float
/// holding it (see the module docs).
pub const FORMAT_TAG: [u8; 4] = *b"\xFFCBR";

/// Encodes `value` as [`State::save`]'s default does: [`FORMAT_TAG`], then
/// `value` in CBOR with field names kept.
///
/// # Errors
/// The encoder's error, in words (e.g. a `Serialize` impl that fails).
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, String> {
    let mut bytes = FORMAT_TAG.to_vec();
    ciborium::into_writer(value, &mut bytes).map_err(|e| match e {
        ciborium::ser::Error::Io(e) => e.to_string(),
        ciborium::ser::Error::Value(why) => why,
    })?;
    Ok(bytes)
}

/// Decodes exactly one `T` from `bytes` as [`State::load`]'s default does;
/// use it to read an older schema's type in a custom `load`. Bytes that
/// start with [`FORMAT_TAG`] are CBOR ([`encode`]); any others are the
/// bincode an older SDK's default wrote (see the module docs).
///
/// # Errors
/// Why the bytes are not one `T` (a missing field, a wrong type, bytes
/// left over), in words.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    match bytes.strip_prefix(&FORMAT_TAG) {
        // Old bincode whose first bytes happen to be the tag is read as
        // bincode when it is no CBOR `T`.
        Some(cbor) => decode_cbor(cbor).or_else(|e| decode_bincode(bytes).map_err(|_| e)),
        None => decode_bincode(bytes).map_err(|e| format!("{e} (state in an older SDK's bincode)")),
    }
}

fn decode_cbor<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    use ciborium::de::Error;
    let mut rest = bytes;
    let value = ciborium::from_reader(&mut rest).map_err(|e| match e {
        Error::Io(_) => format!("the state ends early ({} bytes of CBOR)", bytes.len()),
        Error::Syntax(at) => format!("malformed CBOR at byte {at} of the state"),
        Error::Semantic(Some(at), why) => format!("{why} (at byte {at} of the state's CBOR)"),
        Error::Semantic(None, why) => why,
        Error::RecursionLimitExceeded => "the state nests deeper than 256 levels".to_owned(),
    })?;
    if !rest.is_empty() {
        return Err(format!(
            "{} bytes of state left over after decoding",
            rest.len()
        ));
    }
    Ok(value)
}

/// The older SDK's default: bincode, standard configuration, exactly one
/// value.
fn decode_bincode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let (value, used) = bincode::serde::decode_from_slice(bytes, bincode::config::standard())
        .map_err(|e| e.to_string())?;
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

#[cfg(test)]
mod tests {
    use super::{FORMAT_TAG, State, load, save};
    use serde::{Deserialize, Serialize};
    use std::collections::BTreeMap;

    /// Version 1 of an actor's state.
    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    struct V1 {
        count: u64,
        name: String,
        tags: BTreeMap<u32, Vec<u8>>,
    }
    impl State for V1 {}

    /// Version 2: one field added with a default, one removed (`tags`),
    /// the same schema.
    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    struct V2 {
        name: String,
        count: u64,
        #[serde(default)]
        limit: Option<u32>,
        #[serde(default = "three")]
        retries: u8,
    }
    impl State for V2 {}

    fn three() -> u8 {
        3
    }

    fn v1() -> V1 {
        V1 {
            count: 7,
            name: "seven".to_owned(),
            tags: BTreeMap::from([(1, vec![0xFF, 0]), (2, Vec::new())]),
        }
    }

    #[test]
    fn a_field_added_with_a_default_or_removed_needs_no_new_schema() {
        let bytes = save(&v1()).expect("save");
        assert_eq!(&bytes[..4], &1u32.to_le_bytes(), "the schema, as before");
        assert_eq!(&bytes[4..8], &FORMAT_TAG);
        let v2: V2 = load(&bytes).expect("load");
        let expected = V2 {
            name: "seven".to_owned(),
            count: 7,
            limit: None,
            retries: 3,
        };
        assert_eq!(v2, expected);
        // And into a type without the added fields: they are skipped.
        #[derive(Serialize, Deserialize)]
        struct Count {
            count: u64,
        }
        impl State for Count {}
        let back: Count = load(&save(&v2).expect("save")).expect("load");
        assert_eq!(back.count, 7);
    }

    /// What the SDK's default wrote before the CBOR format: the schema,
    /// then bincode (standard configuration), no tag.
    fn old_sdk_save<T: Serialize>(schema: u32, value: &T) -> Vec<u8> {
        let mut bytes = schema.to_le_bytes().to_vec();
        bytes.extend(
            bincode::serde::encode_to_vec(value, bincode::config::standard()).expect("bincode"),
        );
        bytes
    }

    #[test]
    fn state_an_older_sdk_wrote_in_bincode_loads_and_is_saved_again_in_cbor() {
        let old = old_sdk_save(1, &v1());
        assert_ne!(&old[4..8], &FORMAT_TAG);
        let loaded: V1 = load(&old).expect("the old bincode loads");
        assert_eq!(loaded, v1());
        let again = save(&loaded).expect("save");
        assert_eq!(&again[4..8], &FORMAT_TAG, "converted on the next save");
        assert_eq!(load::<V1>(&again).expect("load"), v1());
        // Positional bincode has no names: a type with another field
        // list cannot take it, and says so.
        let err = load::<V2>(&old).expect_err("no names in bincode");
        assert!(err.contains("older SDK's bincode"), "{err}");
    }

    /// An explicit migration: version 3 changes a field's type.
    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    struct V3 {
        count: String,
    }
    impl State for V3 {
        const SCHEMA: u32 = 2;
        fn load(schema: u32, bytes: &[u8]) -> Result<Self, String> {
            match schema {
                1 => super::decode::<V1>(bytes).map(|old| V3 {
                    count: old.count.to_string(),
                }),
                2 => super::decode(bytes),
                other => Err(format!("schema {other}")),
            }
        }
    }

    #[test]
    fn explicit_migrations_read_both_formats_and_other_schemas_are_refused() {
        let expected = V3 {
            count: "7".to_owned(),
        };
        assert_eq!(load::<V3>(&save(&v1()).expect("save")), Ok(expected));
        let from_bincode = load::<V3>(&old_sdk_save(1, &v1())).expect("load");
        assert_eq!(from_bincode.count, "7");
        let v3 = save(&from_bincode).expect("save");
        assert_eq!(&v3[..4], &2u32.to_le_bytes());
        let err = load::<V1>(&v3).expect_err("schema 2 by schema 1");
        assert!(
            err.contains("schema 2 cannot be loaded by schema 1"),
            "{err}"
        );
    }

    #[test]
    fn broken_state_is_refused_in_words() {
        let mut bytes = save(&v1()).expect("save");
        bytes.push(0);
        let err = load::<V1>(&bytes).expect_err("trailing byte");
        assert!(err.contains("1 bytes of state left over"), "{err}");
        bytes.truncate(bytes.len() - 3);
        let err = load::<V1>(&bytes).expect_err("cut short");
        assert!(err.contains("ends early"), "{err}");
        let err = load::<V1>(&[1, 0]).expect_err("no schema");
        assert!(err.contains("fewer than its 4-byte schema"), "{err}");
        // A required field missing from the saved state.
        #[derive(Debug, Serialize, Deserialize)]
        struct Needs {
            count: u64,
            other: u64,
        }
        impl State for Needs {}
        let err = load::<Needs>(&save(&v1()).expect("save")).expect_err("missing");
        assert!(err.contains("missing field `other`"), "{err}");
    }
}
