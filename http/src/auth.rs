//! The bearer-token check: how a request's `Authorization` header is read
//! ([`bearer`]) and compared with a configured token ([`same_token`]), the
//! base of every credential check (the remote worker API's, and the admin
//! API's role check in `stasis-ingress`'s `access`).

use hyper::header::{AUTHORIZATION, HeaderMap};
use hyper::{Request, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::serve::{Body, json_error};
use stasis_contract::error::{ApiError, ErrorKind};

/// Checks `request` against the configured bearer `token` (always accepted
/// when `token` is `None`).
///
/// Accepted: exactly one `Authorization` header of the form
/// `<scheme> <token>`, where the scheme is `Bearer` in any letter case
/// (RFC 9110 §11.1), followed by one or more spaces or tabs and the token.
/// The token is compared exactly, in constant time: the SHA-256 digests of
/// the given and the configured token are compared with `subtle`, so
/// neither the token's bytes nor its length show in the timing.
///
/// # Errors
/// The JSON error response to send (boxed): 400 if the request carries more than
/// one `Authorization` header; 401 with `WWW-Authenticate: Bearer` if it
/// carries none, another scheme, or a wrong token.
pub fn authorize<B>(request: &Request<B>, token: Option<&str>) -> Result<(), Box<Response<Body>>> {
    let Some(token) = token else {
        return Ok(());
    };
    check(request.headers(), token).map_err(|e| refusal(&e))
}

/// The response that refuses a request with `e`: its JSON error (with
/// `WWW-Authenticate: Bearer` when it is a 401, as every error answer).
#[must_use]
pub fn refusal(e: &ApiError) -> Box<Response<Body>> {
    Box::new(json_error(e))
}

/// The 401 of a missing or wrong token.
#[must_use]
pub fn unauthorized() -> ApiError {
    ApiError::new(ErrorKind::Unauthorized, "missing or wrong bearer token")
}

/// The 401 of a request with no bearer token at all.
#[must_use]
pub fn no_token() -> ApiError {
    ApiError::new(
        ErrorKind::Unauthorized,
        "no bearer token: send the header Authorization: Bearer TOKEN",
    )
}

/// The token a request presents: the one `Authorization` header's value
/// after its `Bearer` scheme (any letter case, RFC 9110 §11.1) and one or
/// more spaces or tabs, without the spaces around it.
///
/// # Errors
/// 400 if the request carries more than one `Authorization` header; 401
/// if it carries none, another scheme, or an empty token.
pub fn bearer(headers: &HeaderMap) -> Result<&[u8], ApiError> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let value = values.next().ok_or_else(no_token)?;
    if values.next().is_some() {
        return Err(ApiError::bad_request(
            "more than one Authorization header; send exactly one",
        ));
    }
    let value = value.as_bytes();
    let is_space = |b: &u8| *b == b' ' || *b == b'\t';
    let not_bearer = || {
        ApiError::new(
            ErrorKind::Unauthorized,
            "the Authorization header is not a bearer token: send Authorization: Bearer TOKEN",
        )
    };
    let scheme_end = value.iter().position(is_space).ok_or_else(not_bearer)?;
    let (scheme, rest) = value.split_at(scheme_end);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return Err(not_bearer());
    }
    let start = rest.iter().position(|b| !is_space(b)).unwrap_or(rest.len());
    let end = rest
        .iter()
        .rposition(|b| !is_space(b))
        .map_or(start, |i| i + 1);
    let given = &rest[start..end];
    if given.is_empty() {
        return Err(no_token());
    }
    Ok(given)
}

/// Whether `given` is `token`, compared in constant time: the SHA-256
/// digests of the two are compared with `subtle`, so neither the token's
/// bytes nor its length show in the timing.
#[must_use]
pub fn same_token(given: &[u8], token: &str) -> bool {
    bool::from(Sha256::digest(given).ct_eq(&Sha256::digest(token.as_bytes())))
}

fn check(headers: &HeaderMap, token: &str) -> Result<(), ApiError> {
    if same_token(bearer(headers)?, token) {
        Ok(())
    } else {
        Err(unauthorized())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(values: &[&str]) -> u16 {
        let mut builder = Request::builder().uri("/v1/actors");
        for v in values {
            builder = builder.header(AUTHORIZATION, *v);
        }
        let request = builder.body(()).expect("request");
        match authorize(&request, Some("s3cr3t")) {
            Ok(()) => 200,
            Err(response) => response.status().as_u16(),
        }
    }

    #[test]
    fn the_scheme_is_case_insensitive_and_the_token_exact() {
        for good in [
            "Bearer s3cr3t",
            "bearer s3cr3t",
            "BEARER  s3cr3t",
            "bEaReR\ts3cr3t",
            "Bearer s3cr3t ",
        ] {
            assert_eq!(status(&[good]), 200, "{good:?}");
        }
        for bad in [
            "Bearer S3CR3T",
            "Bearer s3cr3",
            "Bearer s3cr3tx",
            "Bearer s3 cr3t",
            "Bearer",
            "Bearer ",
            "Bearers3cr3t",
            "Basic s3cr3t",
            "s3cr3t",
            "",
        ] {
            assert_eq!(status(&[bad]), 401, "{bad:?}");
        }
        assert_eq!(status(&[]), 401);
    }

    #[test]
    fn two_authorization_headers_are_refused_even_if_one_is_right() {
        assert_eq!(status(&["Bearer s3cr3t", "Bearer s3cr3t"]), 400);
        assert_eq!(status(&["Bearer nope", "Bearer s3cr3t"]), 400);
        assert_eq!(status(&["Bearer s3cr3t", "Bearer nope"]), 400);
    }

    #[test]
    fn no_configured_token_accepts_everything() {
        let request = Request::builder().body(()).expect("request");
        assert!(authorize(&request, None).is_ok());
    }
}
