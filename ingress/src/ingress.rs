//! Strict checks of a request at the ingress, before it is routed: a
//! request that fails one is answered 400 and never reaches an actor.
//!
//! * The authority (of an absolute-form target or HTTP/2 `:authority`, and
//!   the `Host` header) has no user info, and its port, when there is one,
//!   is a decimal number up to 65535 (an empty port, allowed by RFC 3986
//!   §3.2.3, means the default);
//! * at most one `Host` header;
//! * an HTTP/2 request with both `:authority` and `Host` names the same
//!   host and port in both (RFC 9113 §8.3.1), compared as normalised
//!   (case, one trailing dot);
//! * at most one `Transfer-Encoding` field line, naming no coding twice
//!   (RFC 9112 §6.1: chunked is applied once).

use hyper::Version;
use hyper::header::{HOST, HeaderValue, TRANSFER_ENCODING};
use hyper::http::request::Parts;
use hyper::http::uri::Authority;

use stasis_contract::error::ApiError;

/// A host and port as compared across `:authority` and `Host`: host
/// lower-case without a trailing dot, port as written (none if empty).
type Endpoint = (String, Option<u16>);

/// Checks `parts` as the module docs say.
///
/// # Errors
/// 400 naming the first rule broken.
pub fn check(parts: &Parts) -> Result<(), ApiError> {
    check_transfer_encoding(parts)?;
    let target = parts
        .uri
        .authority()
        .map(|a| endpoint(a, "request authority"))
        .transpose()?;
    let host = host_header(parts)?
        .map(|a| endpoint(&a, "Host header"))
        .transpose()?;
    if parts.version >= Version::HTTP_2
        && let (Some(target), Some(host)) = (&target, &host)
        && target != host
    {
        return Err(ApiError::bad_request(
            "Host header and :authority name different hosts",
        ));
    }
    Ok(())
}

/// The `Host` header, if there is one, checked: exactly one, ASCII,
/// a valid authority without user info and with a valid port.
///
/// # Errors
/// 400 for a repeated, empty, non-ASCII or malformed `Host` header.
pub fn host_header(parts: &Parts) -> Result<Option<Authority>, ApiError> {
    let hosts: Vec<&HeaderValue> = parts.headers.get_all(HOST).iter().collect();
    let value = match hosts.as_slice() {
        [] => return Ok(None),
        [value] => value,
        _ => return Err(ApiError::bad_request("repeated Host header")),
    };
    let text = value
        .to_str()
        .map_err(|_| ApiError::bad_request("Host header is not ASCII"))?
        .trim();
    if text.is_empty() {
        return Err(ApiError::bad_request("empty Host header"));
    }
    let authority: Authority = text
        .parse()
        .map_err(|_| ApiError::bad_request(format!("unparsable Host header {text:?}")))?;
    endpoint(&authority, "Host header")?;
    Ok(Some(authority))
}

/// The endpoint of `authority` (`what` names it in errors).
///
/// # Errors
/// 400 for user info or an invalid port.
fn endpoint(authority: &Authority, what: &str) -> Result<Endpoint, ApiError> {
    let text = authority.as_str();
    let unparsable = || ApiError::bad_request(format!("unparsable {what} {text:?}"));
    if text.contains('@') {
        return Err(unparsable());
    }
    let host = authority.host();
    let port = match text.get(host.len()..).ok_or_else(unparsable)? {
        "" | ":" => None,
        rest => {
            let digits = rest.strip_prefix(':').ok_or_else(unparsable)?;
            let valid = digits.bytes().all(|b| b.is_ascii_digit());
            let port = digits.parse::<u16>().ok().filter(|_| valid);
            Some(port.ok_or_else(|| {
                ApiError::bad_request(format!("invalid port {digits:?} in {what} {text:?}"))
            })?)
        }
    };
    let host = host.to_ascii_lowercase();
    let host = host.strip_suffix('.').unwrap_or(&host).to_owned();
    Ok((host, port))
}

/// Checks the `Transfer-Encoding` framing of `parts`.
///
/// # Errors
/// 400 for more than one `Transfer-Encoding` field line, or a coding
/// named twice.
fn check_transfer_encoding(parts: &Parts) -> Result<(), ApiError> {
    let lines: Vec<&HeaderValue> = parts.headers.get_all(TRANSFER_ENCODING).iter().collect();
    let line = match lines.as_slice() {
        [] => return Ok(()),
        [line] => line,
        _ => return Err(ApiError::bad_request("repeated Transfer-Encoding header")),
    };
    let text = line
        .to_str()
        .map_err(|_| ApiError::bad_request("Transfer-Encoding header is not ASCII"))?;
    let mut codings: Vec<String> = Vec::new();
    for coding in text.split(',').map(|c| c.trim().to_ascii_lowercase()) {
        if coding.is_empty() {
            continue;
        }
        if codings.contains(&coding) {
            return Err(ApiError::bad_request(format!(
                "Transfer-Encoding names {coding:?} twice"
            )));
        }
        codings.push(coding);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::Request;

    fn parts(version: Version, uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut b = Request::builder().version(version).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).expect("valid test request").into_parts().0
    }

    fn status(version: Version, uri: &str, headers: &[(&str, &str)]) -> Result<(), u16> {
        check(&parts(version, uri, headers)).map_err(|e| e.kind().status())
    }

    #[test]
    fn ports_must_be_decimal_and_at_most_65535() {
        let h1 = Version::HTTP_11;
        for good in [
            "a.actors.localhost",
            "a.actors.localhost:8000",
            "a:",
            "a:065535",
            "[::1]:80",
        ] {
            assert_eq!(status(h1, "/", &[("host", good)]), Ok(()), "{good}");
        }
        for bad in [
            "a:99999", "a:65536", "a:8o", "a:+80", "a:-1", "a: 80", "a:80:80", "u@a:80",
        ] {
            assert_eq!(status(h1, "/", &[("host", bad)]), Err(400), "{bad}");
        }
        assert_eq!(
            status(h1, "http://a.actors.localhost:99999/", &[]),
            Err(400)
        );
        assert_eq!(status(h1, "http://a.actors.localhost:80/", &[]), Ok(()));
    }

    #[test]
    fn http2_host_must_agree_with_authority() {
        let h2 = Version::HTTP_2;
        let uri = "http://a.actors.localhost:8000/";
        assert_eq!(
            status(h2, uri, &[("host", "b.actors.localhost:8000")]),
            Err(400)
        );
        assert_eq!(
            status(h2, uri, &[("host", "a.actors.localhost:8001")]),
            Err(400)
        );
        assert_eq!(status(h2, uri, &[("host", "a.actors.localhost")]), Err(400));
        assert_eq!(
            status(h2, uri, &[("host", "A.Actors.LocalHost.:8000")]),
            Ok(())
        );
        assert_eq!(status(h2, uri, &[]), Ok(()));
        // HTTP/1.1 absolute form: the target wins, Host is ignored (RFC 9112 §3.2.2).
        assert_eq!(
            status(Version::HTTP_11, uri, &[("host", "b.actors.localhost")]),
            Ok(())
        );
    }

    #[test]
    fn transfer_encoding_is_sent_once_with_each_coding_once() {
        let h1 = Version::HTTP_11;
        assert_eq!(status(h1, "/", &[("transfer-encoding", "chunked")]), Ok(()));
        assert_eq!(
            status(h1, "/", &[("transfer-encoding", "gzip, chunked")]),
            Ok(())
        );
        let twice = [
            ("transfer-encoding", "chunked"),
            ("transfer-encoding", "chunked"),
        ];
        assert_eq!(status(h1, "/", &twice), Err(400));
        assert_eq!(
            status(h1, "/", &[("transfer-encoding", "chunked, Chunked")]),
            Err(400)
        );
    }
}
