//! The hashing behind `crypto.subtle` (`subtle.js`), on `__stasis_native`:
//! `digest(hash, bytes)`, `hmacSign(hash, key, bytes)` and
//! `hmacVerify(hash, key, signature, bytes)`, for the hashes `SHA-1`,
//! `SHA-256`, `SHA-384` and `SHA-512` (their WebCrypto names, as
//! `subtle.js` normalises them), with RustCrypto's `sha1`, `sha2` and
//! `hmac`. A verification compares in constant time (`Mac::verify_slice`).
//! Argument checks and the errors a browser gives are `subtle.js`'s; an
//! unknown hash name reaching here is a `TypeError`.

use hmac::{Hmac, KeyInit, Mac};
use javy::quickjs::{Ctx, Exception, Function, Object, Result, TypedArray};
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha384, Sha512};

/// Adds the functions to `native` (the prelude's `__stasis_native`).
pub(crate) fn register<'js>(ctx: &Ctx<'js>, native: &Object<'js>) -> Result<()> {
    native.set("digest", Function::new(ctx.clone(), digest)?)?;
    native.set("hmacSign", Function::new(ctx.clone(), hmac_sign)?)?;
    native.set("hmacVerify", Function::new(ctx.clone(), hmac_verify)?)?;
    Ok(())
}

/// The hashes `crypto.subtle` takes.
#[derive(Clone, Copy)]
enum Hash {
    Sha1,
    Sha256,
    Sha384,
    Sha512,
}

impl Hash {
    fn named(ctx: &Ctx<'_>, name: &str) -> Result<Self> {
        match name {
            "SHA-1" => Ok(Self::Sha1),
            "SHA-256" => Ok(Self::Sha256),
            "SHA-384" => Ok(Self::Sha384),
            "SHA-512" => Ok(Self::Sha512),
            _ => Err(Exception::throw_type(
                ctx,
                &format!("crypto.subtle: unknown hash {name:?}"),
            )),
        }
    }
}

/// The bytes of a `Uint8Array` (empty for a detached one).
fn bytes<'a>(array: &'a TypedArray<'_, u8>) -> &'a [u8] {
    array.as_bytes().unwrap_or_default()
}

fn digest<'js>(
    ctx: Ctx<'js>,
    hash: String,
    data: TypedArray<'js, u8>,
) -> Result<TypedArray<'js, u8>> {
    let data = bytes(&data);
    let out = match Hash::named(&ctx, &hash)? {
        Hash::Sha1 => Sha1::digest(data).to_vec(),
        Hash::Sha256 => Sha256::digest(data).to_vec(),
        Hash::Sha384 => Sha384::digest(data).to_vec(),
        Hash::Sha512 => Sha512::digest(data).to_vec(),
    };
    TypedArray::new(ctx, out)
}

/// A MAC keyed with `key` (HMAC takes a key of any length).
fn keyed<M: Mac + KeyInit>(key: &[u8], data: &[u8]) -> M {
    let mut mac = <M as KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
    Mac::update(&mut mac, data);
    mac
}

fn sign<M: Mac + KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
    keyed::<M>(key, data).finalize().into_bytes().to_vec()
}

/// Whether `signature` is the MAC of `data`, compared in constant time
/// (a signature of another length is `false`).
fn verify<M: Mac + KeyInit>(key: &[u8], signature: &[u8], data: &[u8]) -> bool {
    keyed::<M>(key, data).verify_slice(signature).is_ok()
}

fn hmac_sign<'js>(
    ctx: Ctx<'js>,
    hash: String,
    key: TypedArray<'js, u8>,
    data: TypedArray<'js, u8>,
) -> Result<TypedArray<'js, u8>> {
    let (key, data) = (bytes(&key), bytes(&data));
    let out = match Hash::named(&ctx, &hash)? {
        Hash::Sha1 => sign::<Hmac<Sha1>>(key, data),
        Hash::Sha256 => sign::<Hmac<Sha256>>(key, data),
        Hash::Sha384 => sign::<Hmac<Sha384>>(key, data),
        Hash::Sha512 => sign::<Hmac<Sha512>>(key, data),
    };
    TypedArray::new(ctx, out)
}

fn hmac_verify<'js>(
    ctx: Ctx<'js>,
    hash: String,
    key: TypedArray<'js, u8>,
    signature: TypedArray<'js, u8>,
    data: TypedArray<'js, u8>,
) -> Result<bool> {
    let (key, signature, data) = (bytes(&key), bytes(&signature), bytes(&data));
    Ok(match Hash::named(&ctx, &hash)? {
        Hash::Sha1 => verify::<Hmac<Sha1>>(key, signature, data),
        Hash::Sha256 => verify::<Hmac<Sha256>>(key, signature, data),
        Hash::Sha384 => verify::<Hmac<Sha384>>(key, signature, data),
        Hash::Sha512 => verify::<Hmac<Sha512>>(key, signature, data),
    })
}
