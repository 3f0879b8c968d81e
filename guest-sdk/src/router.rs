//! A small path router: [`Router`] sends a request to the handler of the
//! first route whose method and path pattern match, with the path's
//! parameters in [`Params`]; a path no route matches is a 404, and a path
//! some route matches under other methods is a 405 whose `allow` header
//! lists them.
//!
//! A pattern is a path whose segments are literals, `:name` (one
//! non-empty segment, percent-decoded) or, last, `*name` (the rest of the
//! path, possibly empty; each segment percent-decoded, an encoded `/`
//! left as `%2F`). Matching is on the path without its query, a
//! segment at a time: `/items` and `/items/` are two paths. `HEAD` takes
//! the `GET` route of a path that has no `HEAD` route.
//!
//! ```
//! use stasis_guest_sdk::prelude::*;
//!
//! #[derive(Default)]
//! struct Todo {
//!     items: Vec<String>,
//! }
//!
//! impl Todo {
//!     fn list(&mut self, _req: &Request, _params: &Params) -> Response {
//!         Response::json(&self.items)
//!     }
//!     fn add(&mut self, req: &Request, _params: &Params) -> Result<Response, HttpError> {
//!         self.items.push(req.json()?);
//!         Ok(Response::json(&self.items.len()).with_status(201))
//!     }
//!     fn get(&mut self, _req: &Request, params: &Params) -> Result<Response, HttpError> {
//!         let id: usize = params.parse("id")?;
//!         let item = self.items.get(id).ok_or_else(|| HttpError::new(404, "no such item"))?;
//!         Ok(Response::json(item))
//!     }
//! }
//!
//! impl Actor for Todo {
//!     fn handle(&mut self, req: Request) -> Response {
//!         Router::new()
//!             .get("/items", Todo::list)
//!             .post("/items", Todo::add)
//!             .get("/items/:id", Todo::get)
//!             .handle(self, &req)
//!     }
//! }
//!
//! let mut todo = Todo::default();
//! let add = Request::new("POST", "/items").with_body(r#""milk""#);
//! assert_eq!(todo.handle(add).status, 201);
//! assert_eq!(todo.handle(Request::new("GET", "/items/0")).body, br#""milk""#);
//! assert_eq!(todo.handle(Request::new("GET", "/items/x")).status, 400);
//! assert_eq!(todo.handle(Request::new("GET", "/nowhere")).status, 404);
//! let refused = todo.handle(Request::new("DELETE", "/items"));
//! assert_eq!(refused.status, 405);
//! assert_eq!(refused.header("allow"), Some(&b"GET, HEAD, POST"[..]));
//! ```
//!
//! Build the router in [`Actor::handle`](crate::Actor::handle), as above:
//! it costs a few small allocations. Do not keep one in the actor or in a
//! `static`: it holds function pointers, which an upgrade by memory
//! carry-over (a new version with other code and the same
//! `stasis-layout`) would leave pointing at other functions.

use std::fmt::Display;
use std::str::FromStr;

use crate::http::{HttpError, IntoResponse, ResponseExt};
use crate::{Request, Response};

/// One route's handler, its answer made a [`Response`].
type Handler<A> = Box<dyn Fn(&mut A, &Request, &Params) -> Response + Send + Sync>;

/// One segment of a route's pattern.
#[derive(Debug)]
enum Segment {
    /// Exactly this text.
    Literal(String),
    /// Any one non-empty segment, kept under this name.
    Param(String),
    /// The rest of the path (last only), kept under this name.
    Rest(String),
}

struct Route<A> {
    method: String,
    pattern: Vec<Segment>,
    handler: Handler<A>,
}

/// Routes requests to handlers of an actor `A` by method and path (see
/// the module docs). Handlers take the actor, the request and the path's
/// [`Params`], and return anything [`IntoResponse`]: a method
/// `fn(&mut self, &Request, &Params) -> Response` (or `-> Result<Response,
/// HttpError>`) is one.
pub struct Router<A> {
    routes: Vec<Route<A>>,
}

impl<A> Default for Router<A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A> Router<A> {
    /// A router with no routes (every request is a 404).
    #[must_use]
    pub const fn new() -> Self {
        Self { routes: Vec::new() }
    }

    /// Adds a route for `method` (upper case) and `pattern`; routes are
    /// tried in the order they were added.
    ///
    /// # Panics
    /// If `pattern` does not start with `/`, names an empty parameter, or
    /// has a `*name` segment that is not its last.
    #[must_use]
    pub fn route<H, R>(mut self, method: &str, pattern: &str, handler: H) -> Self
    where
        H: Fn(&mut A, &Request, &Params) -> R + Send + Sync + 'static,
        R: IntoResponse,
    {
        self.routes.push(Route {
            method: method.to_ascii_uppercase(),
            pattern: parse_pattern(pattern),
            handler: Box::new(move |actor, request, params| {
                handler(actor, request, params).into_response()
            }),
        });
        self
    }

    /// [`Router::route`] for `GET` (which also answers `HEAD`).
    #[must_use]
    pub fn get<H, R>(self, pattern: &str, handler: H) -> Self
    where
        H: Fn(&mut A, &Request, &Params) -> R + Send + Sync + 'static,
        R: IntoResponse,
    {
        self.route("GET", pattern, handler)
    }

    /// [`Router::route`] for `POST`.
    #[must_use]
    pub fn post<H, R>(self, pattern: &str, handler: H) -> Self
    where
        H: Fn(&mut A, &Request, &Params) -> R + Send + Sync + 'static,
        R: IntoResponse,
    {
        self.route("POST", pattern, handler)
    }

    /// [`Router::route`] for `PUT`.
    #[must_use]
    pub fn put<H, R>(self, pattern: &str, handler: H) -> Self
    where
        H: Fn(&mut A, &Request, &Params) -> R + Send + Sync + 'static,
        R: IntoResponse,
    {
        self.route("PUT", pattern, handler)
    }

    /// [`Router::route`] for `PATCH`.
    #[must_use]
    pub fn patch<H, R>(self, pattern: &str, handler: H) -> Self
    where
        H: Fn(&mut A, &Request, &Params) -> R + Send + Sync + 'static,
        R: IntoResponse,
    {
        self.route("PATCH", pattern, handler)
    }

    /// [`Router::route`] for `DELETE`.
    #[must_use]
    pub fn delete<H, R>(self, pattern: &str, handler: H) -> Self
    where
        H: Fn(&mut A, &Request, &Params) -> R + Send + Sync + 'static,
        R: IntoResponse,
    {
        self.route("DELETE", pattern, handler)
    }

    /// Answers `request` with the first route whose method and pattern
    /// match; else 405 with `allow` when a pattern matches under other
    /// methods, else 404.
    pub fn handle(&self, actor: &mut A, request: &Request) -> Response {
        let path = request.path();
        let method = request.method.as_str();
        let mut allowed: Vec<&str> = Vec::new();
        let mut head_by_get = None;
        for route in &self.routes {
            let Some(params) = match_path(&route.pattern, path) else {
                continue;
            };
            if route.method == method {
                return (route.handler)(actor, request, &params);
            }
            if method == "HEAD" && route.method == "GET" && head_by_get.is_none() {
                head_by_get = Some((route, params));
            }
            allowed.push(&route.method);
        }
        if let Some((route, params)) = head_by_get {
            return (route.handler)(actor, request, &params);
        }
        if allowed.is_empty() {
            return HttpError::new(404, format!("no route for {method} {path}")).into();
        }
        if allowed.contains(&"GET") {
            allowed.push("HEAD");
        }
        allowed.sort_unstable();
        allowed.dedup();
        let allow = allowed.join(", ");
        Response::from(HttpError::new(
            405,
            format!("method {method} not allowed for {path}; allowed: {allow}"),
        ))
        .with_header("allow", allow)
    }
}

/// The segments of `pattern` (see the module docs); panics on a bad one.
fn parse_pattern(pattern: &str) -> Vec<Segment> {
    let Some(rest) = pattern.strip_prefix('/') else {
        panic!("route pattern {pattern:?} does not start with '/'");
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let last = parts.len() - 1;
    parts
        .iter()
        .enumerate()
        .map(|(i, part)| {
            let (segment, name) = if let Some(name) = part.strip_prefix(':') {
                (Segment::Param(name.to_owned()), name)
            } else if let Some(name) = part.strip_prefix('*') {
                assert!(
                    i == last,
                    "route pattern {pattern:?}: {part} is not its last segment"
                );
                (Segment::Rest(name.to_owned()), name)
            } else {
                return Segment::Literal((*part).to_owned());
            };
            assert!(
                !name.is_empty(),
                "route pattern {pattern:?} names an empty parameter"
            );
            segment
        })
        .collect()
}

/// The parameters of `path` if it matches `pattern`.
fn match_path(pattern: &[Segment], path: &str) -> Option<Params> {
    let mut parts = path.strip_prefix('/').unwrap_or(path).split('/');
    let mut params = Params::default();
    for segment in pattern {
        match segment {
            Segment::Literal(text) => {
                if parts.next()? != text {
                    return None;
                }
            }
            Segment::Param(name) => {
                let part = parts.next().filter(|p| !p.is_empty())?;
                params.pairs.push((name.clone(), percent_decode(part)));
            }
            Segment::Rest(name) => {
                // Decoded a segment at a time: an encoded `/` (`%2F`) is
                // kept encoded, never taken for a separator.
                let rest: Vec<String> = parts
                    .by_ref()
                    .map(|part| percent_decode(part).replace('/', "%2F"))
                    .collect();
                params.pairs.push((name.clone(), rest.join("/")));
            }
        }
    }
    parts.next().is_none().then_some(params)
}

/// `%XX` sequences as bytes; the text as it is if the result is not UTF-8
/// (a `%` without two hex digits stays).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok());
        if bytes[i] == b'%'
            && let Some(byte) = hex.and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_owned())
}

/// The parameters a route's pattern took from the path, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    /// The value of parameter `name` (percent-decoded), if the pattern has
    /// one.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Parameter `name` parsed as a `T`.
    ///
    /// # Errors
    /// [`HttpError`] 400 naming the parameter and why it does not parse;
    /// 500 if the route's pattern has no parameter `name` (a bug in the
    /// actor).
    pub fn parse<T: FromStr>(&self, name: &str) -> Result<T, HttpError>
    where
        T::Err: Display,
    {
        let value = self.get(name).ok_or_else(|| {
            HttpError::new(500, format!("the route has no path parameter {name:?}"))
        })?;
        value
            .parse()
            .map_err(|e| HttpError::new(400, format!("path parameter {name} = {value:?}: {e}")))
    }

    /// Every parameter as `(name, value)`, in the pattern's order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::{Params, Router};
    use crate::http::ResponseExt;
    use crate::{Request, Response};

    fn echo(_: &mut u32, req: &Request, params: &Params) -> Response {
        let pairs: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        Response::text(200, format!("{} {}", req.method, pairs.join(" ")))
    }

    fn router() -> Router<u32> {
        Router::new()
            .get("/", echo)
            .get("/files/*path", echo)
            .put("/items/:id", echo)
            .delete("/items/:id", echo)
            .get("/items/:id/notes/:note", echo)
            .route("HEAD", "/head", echo)
            .post("/count", |n: &mut u32, _: &Request, _: &Params| {
                *n += 1;
                Response::text(200, n.to_string())
            })
    }

    fn answer(method: &str, uri: &str) -> (u16, String, Option<String>) {
        let mut n = 0;
        let response = router().handle(&mut n, &Request::new(method, uri));
        let allow = response
            .header("allow")
            .map(|a| String::from_utf8_lossy(a).into_owned());
        (
            response.status,
            String::from_utf8_lossy(&response.body).into_owned(),
            allow,
        )
    }

    #[test]
    fn paths_match_by_segment_with_their_parameters() {
        assert_eq!(answer("GET", "/").1, "GET ");
        assert_eq!(answer("PUT", "/items/a%20b?x=1").1, "PUT id=a b");
        assert_eq!(answer("GET", "/items/7/notes/2").1, "GET id=7 note=2");
        assert_eq!(answer("GET", "/files/a/b%2Fc").1, "GET path=a/b%2Fc");
        assert_eq!(answer("GET", "/files/a%20b/c").1, "GET path=a b/c");
        assert_eq!(answer("GET", "/files").1, "GET path=");
        assert_eq!(answer("HEAD", "/items/7/notes/2").1, "HEAD id=7 note=2");
        assert_eq!(answer("HEAD", "/head").1, "HEAD ");
        let mut n = 0;
        let router = router();
        for _ in 0..2 {
            router.handle(&mut n, &Request::new("POST", "/count"));
        }
        assert_eq!(n, 2, "handlers change the actor");
    }

    #[test]
    fn misses_are_404_and_other_methods_405_with_allow() {
        for uri in [
            "/items",
            "/items/",
            "/items//notes/1",
            "/nowhere",
            "/items/7/x",
        ] {
            assert_eq!(answer("PUT", uri).0, 404, "{uri}");
        }
        let (status, body, allow) = answer("POST", "/items/7");
        assert_eq!(status, 405);
        assert_eq!(allow.as_deref(), Some("DELETE, PUT"));
        assert!(body.contains("allowed: DELETE, PUT"), "{body}");
        let (status, _, allow) = answer("DELETE", "/items/7/notes/1");
        assert_eq!((status, allow.as_deref()), (405, Some("GET, HEAD")));
        assert_eq!(answer("GET", "/head").2.as_deref(), Some("HEAD"));
    }

    #[test]
    fn parameters_parse_or_say_why_not() {
        let mut params = Params::default();
        params.pairs.push(("id".to_owned(), "x1".to_owned()));
        let err = params.parse::<u64>("id").expect_err("not a number");
        assert_eq!(err.status, 400);
        assert!(err.message.contains("id = \"x1\""), "{err}");
        assert_eq!(
            params.parse::<u64>("other").expect_err("absent").status,
            500
        );
        assert_eq!(params.parse::<String>("id"), Ok("x1".to_owned()));
    }

    #[test]
    #[should_panic(expected = "is not its last segment")]
    fn a_rest_parameter_must_come_last() {
        let _ = Router::<u32>::new().get("/*all/x", echo);
    }
}
