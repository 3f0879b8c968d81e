//! The form of the admin port's route tables, and the one dispatcher that
//! answers a request from a table. A table is data: each [`Route`] is a
//! method, a path pattern (`/v1/actors/{name}/pause`), what a request
//! needs to be let in (a token's [`Role`] for the admin API, the internal
//! token for the internal routes), how large a body it may send
//! ([`BodyLimit`]) and its handler. Everything else is derived from the
//! entries: the `405` with `Allow` for a path that some entry takes under
//! another method (RFC 9110 §15.5.6), the `404` for a path none takes, the
//! role a request needs and the limit its body is read under.
//!
//! The tables are the admin API's (`crate::api`) and the internal
//! routes' (`crate::internal`).

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use hyper::body::Incoming;
use hyper::http::request::Parts;
use hyper::{Method, Request, Response};

use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::tokens::Role;
use stasis_control::{ControlPlane, MAX_TEMPLATE_BYTES};
use stasis_http::serve::{Body, collect_body};

use crate::access::Access;
use crate::scope::Scoped;

/// What a handler answers: the response, or the error it is made of.
pub type Answer<'a> = BoxFuture<'a, Result<Response<Body>, ApiError>>;

/// A route's handler: answers the request [`Call`] stands for.
pub type Handler<N> = for<'a> fn(Call<'a, N>) -> Answer<'a>;

/// A request matched to a route, as its handler gets it (its body read).
pub struct Call<'a, N> {
    /// The control plane the admin port serves.
    pub control: &'a Arc<ControlPlane>,
    /// The admin API's credential check (streams check again while they
    /// last; token routes forget a revoked token).
    pub access: &'a Arc<Access>,
    /// The request's method.
    pub method: &'a Method,
    /// The path's segments that the pattern's `{...}` stand for, in order.
    pub params: Vec<&'a str>,
    /// The query string (empty when there is none).
    pub query: &'a str,
    /// The request's head (headers, and the connection's extensions).
    pub parts: &'a Parts,
    /// The body, read under the route's [`BodyLimit`].
    pub body: Bytes,
    /// The path, its namespace resolved.
    pub scoped: &'a Scoped,
    /// What the route needs (checked before the call).
    pub need: N,
}

impl<'a, N> Call<'a, N> {
    /// The `i`th `{...}` segment of the path (empty past the last; each
    /// table's unit tests check that a match hands over as many segments
    /// as its pattern has).
    #[must_use]
    pub fn param(&self, i: usize) -> &'a str {
        self.params.get(i).copied().unwrap_or_default()
    }

    /// Whether `name` (an actor's or a template's full name) is of the
    /// path's namespace.
    #[must_use]
    pub fn in_namespace(&self, name: &str) -> bool {
        stasis_contract::names::namespace_of(name) == self.scoped.namespace
    }
}

/// How large a body a route reads (`413` past it, naming the limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLimit {
    /// A JSON body: 64 KiB.
    Json,
    /// A module: [`MAX_TEMPLATE_BYTES`].
    Module,
    /// A replicated snapshot: `--max-memory` plus 16 MiB.
    Snapshot,
    /// A remote actor's encoded call or send: `--max-body` plus 64 KiB.
    HostRequest,
}

/// Largest JSON body the admin API reads, in bytes.
const MAX_JSON: usize = 64 << 10;

impl BodyLimit {
    /// The limit in bytes under `control`'s configuration, and its name
    /// in the `413`.
    #[must_use]
    pub fn bytes(self, control: &ControlPlane) -> (usize, &'static str) {
        match self {
            BodyLimit::Json => (MAX_JSON, "the JSON body limit"),
            BodyLimit::Module => (MAX_TEMPLATE_BYTES, "the module size limit"),
            BodyLimit::Snapshot => (
                usize::try_from(control.config().limits.max_memory)
                    .unwrap_or(usize::MAX)
                    .saturating_add(16 << 20),
                "the snapshot size limit (--max-memory plus 16 MiB)",
            ),
            BodyLimit::HostRequest => (
                control.config().limits.max_body.saturating_add(64 << 10),
                "--max-body (plus 64 KiB for the request's head)",
            ),
        }
    }
}

/// One segment of a [`Pattern`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// This text only.
    Literal(String),
    /// Any one segment (even an empty one), handed to the handler.
    Param,
}

/// A path pattern: `/`-separated segments, each literal or `{name}` (any
/// one segment).
#[derive(Debug, Clone)]
pub struct Pattern {
    text: String,
    segments: Vec<Segment>,
}

impl Pattern {
    /// The pattern `text` stands for.
    #[must_use]
    pub fn new(text: &str) -> Self {
        let segments = text
            .strip_prefix('/')
            .unwrap_or(text)
            .split('/')
            .map(|s| {
                if s.starts_with('{') && s.ends_with('}') {
                    Segment::Param
                } else {
                    Segment::Literal(s.to_owned())
                }
            })
            .collect();
        Self {
            text: text.to_owned(),
            segments,
        }
    }

    /// The pattern as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The `{...}` segments of `segments`, if the pattern matches them.
    fn captures<'p>(&self, segments: &[&'p str]) -> Option<Vec<&'p str>> {
        if segments.len() != self.segments.len() {
            return None;
        }
        let mut params = Vec::new();
        for (want, got) in self.segments.iter().zip(segments) {
            match want {
                Segment::Literal(text) if text != got => return None,
                Segment::Literal(_) => {}
                Segment::Param => params.push(*got),
            }
        }
        Some(params)
    }

    /// Whether the pattern matches the first segments of `segments`,
    /// fewer than all, and ends in a `{...}`: `segments` is a path below
    /// one this pattern takes.
    fn is_below(&self, segments: &[&str]) -> bool {
        self.segments.last() == Some(&Segment::Param)
            && segments.len() > self.segments.len()
            && self.captures(&segments[..self.segments.len()]).is_some()
    }

    /// Whether some path matches both patterns.
    #[must_use]
    pub fn overlaps(&self, other: &Pattern) -> bool {
        self.segments.len() == other.segments.len()
            && self
                .segments
                .iter()
                .zip(&other.segments)
                .all(|pair| match pair {
                    (Segment::Literal(a), Segment::Literal(b)) => a == b,
                    _ => true,
                })
    }

    /// A path this pattern matches: each `{...}` made `param`.
    #[must_use]
    pub fn example(&self, param: &str) -> String {
        let segments: Vec<&str> = self
            .segments
            .iter()
            .map(|s| match s {
                Segment::Literal(text) => text.as_str(),
                Segment::Param => param,
            })
            .collect();
        format!("/{}", segments.join("/"))
    }

    /// How many `{...}` segments the pattern has.
    #[must_use]
    pub fn params(&self) -> usize {
        self.segments
            .iter()
            .filter(|s| **s == Segment::Param)
            .count()
    }
}

/// One entry of a route table.
pub struct Route<N> {
    /// The method it takes.
    pub method: Method,
    /// The paths it takes.
    pub pattern: Pattern,
    /// What a request needs to be let in.
    pub need: N,
    /// How large a body it reads.
    pub limit: BodyLimit,
    /// Its answer.
    pub handler: Handler<N>,
}

/// An entry: `method` on `pattern`, which needs `need`, reads a body up to
/// `limit` and is answered by `handler`.
#[must_use]
pub fn route<N>(
    method: Method,
    pattern: &str,
    need: N,
    limit: BodyLimit,
    handler: Handler<N>,
) -> Route<N> {
    Route {
        method,
        pattern: Pattern::new(pattern),
        need,
        limit,
        handler,
    }
}

/// How a table reads a path's slashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slashes {
    /// Leading and trailing slashes do not count (`/v1/actors/` is
    /// `/v1/actors`).
    Trimmed,
    /// The path is matched as written (`/internal/v1/workers/join/` is no
    /// route).
    Kept,
}

/// A route table: its entries, matched in order.
pub struct Table<N> {
    routes: Vec<Route<N>>,
    slashes: Slashes,
}

impl<N: Copy + Send + Sync> Table<N> {
    /// The table of `routes`, reading paths' slashes as `slashes` says.
    #[must_use]
    pub fn new(slashes: Slashes, routes: Vec<Route<N>>) -> Self {
        Self { routes, slashes }
    }

    /// The entries.
    #[must_use]
    pub fn routes(&self) -> &[Route<N>] {
        &self.routes
    }

    fn segments<'p>(&self, path: &'p str) -> Vec<&'p str> {
        match self.slashes {
            Slashes::Trimmed => path.trim_matches('/').split('/').collect(),
            Slashes::Kept => path.strip_prefix('/').unwrap_or(path).split('/').collect(),
        }
    }

    /// The entries whose pattern matches `path`, whatever their method.
    fn of_path<'t>(&'t self, path: &str) -> impl Iterator<Item = &'t Route<N>> {
        let segments = self.segments(path);
        self.routes
            .iter()
            .filter(move |r| r.pattern.captures(&segments).is_some())
    }

    /// The entry that takes `method` on `path`, and the path's `{...}`
    /// segments.
    #[must_use]
    pub fn find<'p>(&self, method: &Method, path: &'p str) -> Option<(&Route<N>, Vec<&'p str>)> {
        let segments = self.segments(path);
        self.routes
            .iter()
            .filter(|r| r.method == *method)
            .find_map(|r| Some((r, r.pattern.captures(&segments)?)))
    }

    /// The methods the entries of `path` take, in the table's order
    /// (empty: no such route).
    #[must_use]
    pub fn allowed(&self, path: &str) -> Vec<&str> {
        let mut methods: Vec<&str> = Vec::new();
        for route in self.of_path(path) {
            if !methods.contains(&route.method.as_str()) {
                methods.push(route.method.as_str());
            }
        }
        methods
    }

    /// The limit a request on `path` reads its body under, whatever its
    /// method (the body is read before a wrong method is refused): its
    /// entries' ([`BodyLimit::Json`] for a path no entry takes).
    #[must_use]
    pub fn limit(&self, path: &str) -> BodyLimit {
        self.of_path(path)
            .next()
            .map_or(BodyLimit::Json, |r| r.limit)
    }

    /// The error for `method` on `path`, which no entry takes: `405`
    /// naming the methods the path takes, or `404` when no entry takes it.
    #[must_use]
    pub fn unrouted(&self, method: &Method, path: &str) -> ApiError {
        match self.allowed(path).as_slice() {
            [] => ApiError::not_found(format!("no admin route {path}")),
            methods => ApiError::new(
                ErrorKind::MethodNotAllowed,
                format!(
                    "method {method} not allowed on {path}; use {}",
                    methods.join(" or ")
                ),
            ),
        }
    }

    /// Answers `request` (on `scoped`'s path, already let in): reads its
    /// body under the path's limit, then calls the entry that takes it.
    ///
    /// # Errors
    /// `413` for a body over the limit; `404` or `405` when no entry
    /// takes the request ([`Table::unrouted`]); the handler's errors.
    pub async fn dispatch(
        &self,
        control: &Arc<ControlPlane>,
        access: &Arc<Access>,
        request: Request<Incoming>,
        scoped: &Scoped,
    ) -> Result<Response<Body>, ApiError> {
        let path = scoped.path.as_str();
        let method = request.method().clone();
        let found = self.find(&method, path);
        let limit = found.as_ref().map_or(self.limit(path), |(r, _)| r.limit);
        let (bytes, limit_name) = limit.bytes(control);
        let (parts, body) = request.into_parts();
        let body = collect_body(&parts, body, bytes, limit_name).await?;
        let Some((route, params)) = found else {
            return Err(self.unrouted(&method, path));
        };
        let call = Call {
            control,
            access,
            method: &method,
            params,
            query: parts.uri.query().unwrap_or(""),
            parts: &parts,
            body,
            scoped,
            need: route.need,
        };
        (route.handler)(call).await
    }
}

impl Table<Role> {
    /// The role a token needs for `method` on `path`: its entry's. A
    /// request no entry takes needs the role its path's entries share
    /// when that is above writer's (moves of the cluster, quotas, tokens:
    /// refused below it whatever the method); a path below one that ends
    /// in a name (`/v1/tokens/{id}/...`) counts as that path. Otherwise
    /// a read (`GET`, `HEAD`) needs a reader, anything else a writer.
    #[must_use]
    pub fn need(&self, method: &Method, path: &str) -> Role {
        if let Some((route, _)) = self.find(method, path) {
            return route.need;
        }
        let mut near: Vec<Role> = self.of_path(path).map(|r| r.need).collect();
        if near.is_empty() {
            let segments = self.segments(path);
            near = (self.routes.iter())
                .filter(|r| r.pattern.is_below(&segments))
                .map(|r| r.need)
                .collect();
        }
        let shared = near
            .first()
            .filter(|first| near.iter().all(|r| r == *first));
        match shared {
            Some(&role) if role > Role::Writer => role,
            _ if matches!(*method, Method::GET | Method::HEAD) => Role::Reader,
            _ => Role::Writer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_matches_its_segments_and_hands_over_its_names() {
        let pattern = Pattern::new("/v1/actors/{name}/pause");
        assert_eq!(
            pattern.captures(&["v1", "actors", "a", "pause"]),
            Some(vec!["a"])
        );
        assert_eq!(
            pattern.captures(&["v1", "actors", "", "pause"]),
            Some(vec![""])
        );
        assert_eq!(pattern.captures(&["v1", "actors", "a"]), None);
        assert_eq!(pattern.captures(&["v1", "actors", "a", "resume"]), None);
        assert!(!pattern.is_below(&["v1", "actors", "a", "pause", "x"]));
        assert!(Pattern::new("/v1/tokens/{id}").is_below(&["v1", "tokens", "a", "b"]));
        assert!(pattern.overlaps(&Pattern::new("/v1/{kind}/b/pause")));
        assert!(!pattern.overlaps(&Pattern::new("/v1/actors/{name}/resume")));
        assert_eq!(pattern.example("x"), "/v1/actors/x/pause");
        assert_eq!(pattern.params(), 1);
    }
}
