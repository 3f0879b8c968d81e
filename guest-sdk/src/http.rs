//! Helpers for requests and responses: JSON bodies both ways, headers and
//! statuses set in a chain, and [`HttpError`], an error that is an answer.
//!
//! [`Request`] and [`Response`] are the host API's types, so the helpers
//! are the traits [`RequestExt`] and [`ResponseExt`]; bring them into
//! scope (`use stasis_guest_sdk::prelude::*` does) and call them as if
//! they were the types' own:
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use stasis_guest_sdk::{HttpError, Request, RequestExt, Response, ResponseExt};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Item {
//!     name: String,
//! }
//!
//! fn create(req: &Request) -> Result<Response, HttpError> {
//!     let item: Item = req.json()?; // 415 or 400 with the reason
//!     Ok(Response::json(&item).with_status(201).with_header("location", "/items/1"))
//! }
//!
//! let req = Request::new("POST", "/items")
//!     .with_header("content-type", "application/json")
//!     .with_body(r#"{"name":"milk"}"#);
//! let answer = create(&req).unwrap();
//! assert_eq!(answer.status, 201);
//! assert_eq!(answer.header("content-type"), Some(&b"application/json"[..]));
//! assert_eq!(answer.body, br#"{"name":"milk"}"#);
//!
//! let bad = Request::new("POST", "/items").with_body("{");
//! let answer = Response::from(create(&bad).unwrap_err());
//! assert_eq!(answer.status, 400);
//! ```

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Request, Response};

/// The content type [`ResponseExt::json`] writes.
pub const JSON: &str = "application/json";

/// An error that is also an answer: a status and a message for the client
/// (a `text/plain` body ending in a newline). Handlers that return
/// `Result<Response, HttpError>` can use `?` on [`RequestExt::json`] and
/// [`crate::router::Params::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    /// The HTTP status of the answer.
    pub status: u16,
    /// What went wrong, in words.
    pub message: String,
}

impl HttpError {
    /// An error answered with `status` and `message`.
    #[must_use]
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.status)
    }
}

impl std::error::Error for HttpError {}

impl From<HttpError> for Response {
    fn from(error: HttpError) -> Response {
        let mut body = error.message;
        if !body.ends_with('\n') {
            body.push('\n');
        }
        Response::text(error.status, body)
    }
}

/// What a handler may return: a [`Response`], an [`HttpError`], or a
/// `Result` of two such (so `?` works in handlers).
pub trait IntoResponse {
    /// The answer.
    fn into_response(self) -> Response;
}

impl IntoResponse for Response {
    fn into_response(self) -> Response {
        self
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        self.into()
    }
}

impl<T: IntoResponse, E: IntoResponse> IntoResponse for Result<T, E> {
    fn into_response(self) -> Response {
        match self {
            Ok(answer) => answer.into_response(),
            Err(error) => error.into_response(),
        }
    }
}

/// Helpers on [`Request`] (import the trait to call them).
pub trait RequestExt {
    /// The body as JSON of type `T`.
    ///
    /// # Errors
    /// [`HttpError`] 415 when the request says its body is something else
    /// (a `content-type` other than `application/json` or `*/*+json`; no
    /// `content-type` at all is taken as JSON), 400 when the body is not
    /// JSON or not a `T` (serde's reason, with line and column).
    fn json<T: DeserializeOwned>(&self) -> Result<T, HttpError>;
}

impl RequestExt for Request {
    fn json<T: DeserializeOwned>(&self) -> Result<T, HttpError> {
        if let Some(value) = self.header("content-type") {
            let value = String::from_utf8_lossy(value);
            let essence = value.split(';').next().unwrap_or("").trim();
            let essence = essence.to_ascii_lowercase();
            if essence != JSON && !essence.ends_with("+json") {
                return Err(HttpError::new(
                    415,
                    format!(
                        "expected a JSON body (content-type: {JSON}), got content-type: {value}"
                    ),
                ));
            }
        }
        serde_json::from_slice(&self.body)
            .map_err(|e| HttpError::new(400, format!("the body is not the JSON expected: {e}")))
    }
}

/// Helpers on [`Response`] (import the trait to call them).
pub trait ResponseExt: Sized {
    /// A response with `status`, no headers and no body.
    #[must_use]
    fn empty(status: u16) -> Self;

    /// A 200 response with `content-type: application/json` and `value`
    /// as JSON; a value that cannot be JSON (a map whose keys are not
    /// strings, a failing `Serialize`) gives a 500 saying why.
    #[must_use]
    fn json<T: Serialize + ?Sized>(value: &T) -> Self;

    /// This response with status `status`.
    #[must_use]
    fn with_status(self, status: u16) -> Self;

    /// This response with header `name` (lower-cased) set to `value`,
    /// replacing any header of that name.
    #[must_use]
    fn with_header(self, name: &str, value: impl Into<Vec<u8>>) -> Self;

    /// The first value of header `name` (case-insensitive).
    fn header(&self, name: &str) -> Option<&[u8]>;
}

impl ResponseExt for Response {
    fn empty(status: u16) -> Self {
        Response {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    fn json<T: Serialize + ?Sized>(value: &T) -> Self {
        match serde_json::to_vec(value) {
            Ok(body) => Response {
                status: 200,
                headers: vec![("content-type".to_owned(), JSON.as_bytes().to_vec())],
                body,
            },
            Err(e) => Response::text(500, format!("the answer cannot be JSON: {e}\n")),
        }
    }

    fn with_status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }

    fn with_header(mut self, name: &str, value: impl Into<Vec<u8>>) -> Self {
        let name = name.to_ascii_lowercase();
        self.headers.retain(|(k, _)| !k.eq_ignore_ascii_case(&name));
        self.headers.push((name, value.into()));
        self
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::{HttpError, IntoResponse, RequestExt, ResponseExt};
    use crate::{Request, Response};
    use std::collections::BTreeMap;

    #[test]
    fn json_requests_are_checked_for_their_type_and_body() {
        let ok = Request::new("POST", "/").with_body("[1,2]");
        assert_eq!(ok.json::<Vec<u8>>(), Ok(vec![1, 2]));
        let typed = ok.clone().with_header(
            "Content-Type",
            "application/merge-patch+json; charset=utf-8",
        );
        assert_eq!(typed.json::<Vec<u8>>(), Ok(vec![1, 2]));
        let form = ok.with_header("content-type", "application/x-www-form-urlencoded");
        let err = form.json::<Vec<u8>>().expect_err("not JSON");
        assert_eq!(err.status, 415);
        assert!(err.message.contains("x-www-form-urlencoded"), "{err}");
        let wrong = Request::new("POST", "/").with_body(r#"{"a":1}"#);
        let err = wrong.json::<Vec<u8>>().expect_err("a map, not a list");
        assert_eq!(err.status, 400);
        assert!(err.message.contains("line 1 column"), "{err}");
    }

    #[test]
    fn responses_build_in_a_chain() {
        let answer = Response::json(&BTreeMap::from([("a", 1)]))
            .with_status(201)
            .with_header("X-Id", "1")
            .with_header("x-id", "2");
        assert_eq!(answer.status, 201);
        assert_eq!(answer.body, br#"{"a":1}"#);
        assert_eq!(
            answer.header("content-type"),
            Some(&b"application/json"[..])
        );
        assert_eq!(
            answer.headers.iter().filter(|(k, _)| k == "x-id").count(),
            1
        );
        assert_eq!(answer.header("X-ID"), Some(&b"2"[..]));
        let bad = Response::json(&BTreeMap::from([((1, 2), 3)]));
        assert_eq!(bad.status, 500);
        let empty = Response::empty(204);
        assert!(empty.headers.is_empty() && empty.body.is_empty());
        let err: Result<Response, HttpError> = Err(HttpError::new(409, "taken"));
        let answer = err.into_response();
        assert_eq!((answer.status, answer.body), (409, b"taken\n".to_vec()));
    }
}
