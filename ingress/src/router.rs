//! Ingress: finds the actor a request is for and hands the request to it.
//!
//! The actor comes from, in this order: the `stasis-actor: NAME` header
//! (stripped before the guest sees the request); the authority of an
//! absolute-form request target or HTTP/2 `:authority`; the `Host` header.
//! Host names are normalised as RFC 9110 §4.2.3 / §7.2 say: compared
//! case-insensitively, port ignored, one trailing dot allowed. The name must
//! end in `.actors.<domain>` at a label boundary, and what is left must be
//! one RFC 1123 label, the actor's name in the `default` namespace, or two,
//! the actor's name and its namespace (`stasis-actor: NAMESPACE/ACTOR`
//! likewise). Before any of this, the
//! request passes the strict checks of [`crate::ingress`] (ports, HTTP/2
//! `Host` against `:authority`, `Transfer-Encoding`), so a malformed
//! request is a 400 even when `stasis-actor` names the actor.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Request, Response, StatusCode};

use crate::access::Access;
use crate::{ingress, ingress_auth, sockets};
use stasis_contract::client_gone::ClientGone;
use stasis_contract::error::{ApiError, ErrorKind, echo_cut, echo_name};
use stasis_contract::names::{self, is_label};

use stasis_control::ControlPlane;
use stasis_control::ask_leader::AskLeader;
use stasis_host_api::sockets::{SOCKET_HEADER, STREAM_HEADER, STREAM_OPEN};
use stasis_http::serve::{Body, UnreadBody, collect_body, text_error};

pub use stasis_contract::headers::ACTOR_HEADER;
use stasis_contract::headers::{HOP_BY_HOP, is_host_only, not_passed_on};

mod first_use;
mod spans;

use first_use::first_use;
use spans::{end_span, ingress_span};

/// Normalises a host name: lower-case, one trailing dot removed.
///
/// # Errors
/// 400 if it is empty or ends in more than one dot.
fn normalise_host(host: &str) -> Result<String, ApiError> {
    let host = host.to_ascii_lowercase();
    let host = host.strip_suffix('.').unwrap_or(&host);
    if host.is_empty() || host.ends_with('.') {
        return Err(ApiError::bad_request(format!(
            "unparsable host name {host:?}"
        )));
    }
    Ok(host.to_owned())
}

/// The actor named by `host` (already without port) under `domain`: its
/// full name (`stasis_contract::names`).
///
/// # Errors
/// 400 for an unparsable host; 404 naming the host when it is not
/// `<actor>.actors.<domain>` or `<actor>.<namespace>.actors.<domain>`.
pub fn actor_from_host(host: &str, domain: &str) -> Result<String, ApiError> {
    let host = normalise_host(host)?;
    let domain = domain.trim_end_matches('.').to_ascii_lowercase();
    let suffix = format!(".actors.{domain}");
    let not_routed = || {
        ApiError::not_found(format!(
            "no actor at host {}: actors are reached at <actor>.actors.{domain} or <actor>.<namespace>.actors.{domain}",
            echo_cut(&host, 255)
        ))
    };
    let prefix = host.strip_suffix(&suffix).ok_or_else(not_routed)?;
    let (label, namespace) = prefix
        .split_once('.')
        .unwrap_or((prefix, names::DEFAULT_NAMESPACE));
    if label.is_empty() || namespace.is_empty() || namespace.contains('.') {
        return Err(not_routed());
    }
    for part in [label, namespace] {
        if !is_label(part) {
            // The host has the right shape; the name in it is not one.
            return Err(ApiError::not_found(format!(
                "no actor at host {}: {} is not an actor or namespace name (1-63 lower-case \
                 letters, digits and '-', not starting or ending with '-')",
                echo_cut(&host, 255),
                echo_name(part)
            )));
        }
    }
    Ok(names::full_name(namespace, label))
}

/// The actor a `stasis-actor` header names: `ACTOR` (namespace
/// `default`) or `NAMESPACE/ACTOR`; its full name.
fn actor_from_header(value: &str) -> Result<String, ApiError> {
    let (namespace, label) = value
        .split_once('/')
        .unwrap_or((names::DEFAULT_NAMESPACE, value));
    if !is_label(namespace) || !is_label(label) {
        return Err(ApiError::bad_request(format!(
            "stasis-actor header {} is not a valid actor name (ACTOR or NAMESPACE/ACTOR)",
            echo_name(value)
        )));
    }
    Ok(names::full_name(namespace, label))
}

/// The actor a request is for (rules in the module docs).
///
/// # Errors
/// 400 for a missing, empty, repeated or unparsable `Host` (or
/// `stasis-actor`) header; 404 when the host is not an actor's.
pub fn actor_of(parts: &Parts, domain: &str) -> Result<String, ApiError> {
    let named: Vec<&HeaderValue> = parts.headers.get_all(ACTOR_HEADER).iter().collect();
    match named.as_slice() {
        [] => {}
        [value] => {
            let name = value
                .to_str()
                .map(|v| v.trim().to_ascii_lowercase())
                .map_err(|_| ApiError::bad_request("stasis-actor header is not ASCII"))?;
            return actor_from_header(&name);
        }
        _ => return Err(ApiError::bad_request("repeated stasis-actor header")),
    }
    if let Some(authority) = parts.uri.authority() {
        return actor_from_host(authority.host(), domain);
    }
    match ingress::host_header(parts)? {
        Some(authority) => actor_from_host(authority.host(), domain),
        None => Err(ApiError::bad_request("missing Host header")),
    }
}

/// Converts the HTTP request into the guest's request, dropping hop-by-hop
/// headers and the host-only ones (`stasis-actor`, `stasis-call-chain`).
fn guest_request(parts: &Parts, body: Bytes) -> stasis_host_api::Request {
    let uri = parts
        .uri
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |pq| pq.as_str().to_owned());
    let headers = parts
        .headers
        .iter()
        .filter(|(name, _)| {
            let name = name.as_str();
            // The host-only headers (the actor's name, the chain of
            // callers, the alarm marker) are the host's to set, never a
            // client's.
            !is_host_only(name) && !HOP_BY_HOP.contains(&name)
        })
        .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
        .collect();
    stasis_host_api::Request {
        method: parts.method.as_str().to_owned(),
        uri,
        headers,
        body: body.to_vec(),
        context: stasis_host_api::Context::default(),
    }
}

/// The answer to the client for the guest's `response`: an accepted
/// WebSocket (101), an open stream, or the response as it is.
fn answer_for(
    actor: &str,
    socket: Option<sockets::Reservation>,
    accept_key: Option<&str>,
    on_upgrade: Option<hyper::upgrade::OnUpgrade>,
    response: stasis_host_api::Response,
) -> Response<Body> {
    let stream = response.headers.iter().any(|(name, value)| {
        name.eq_ignore_ascii_case(STREAM_HEADER) && value == STREAM_OPEN.as_bytes()
    });
    match (socket, accept_key, on_upgrade) {
        (Some(socket), Some(key), Some(on_upgrade)) if response.status == 101 => {
            let accepted = http_response(actor, response);
            sockets::accept(actor, socket, key, on_upgrade, accepted)
        }
        (Some(socket), None, _) if stream => {
            let mut response = response;
            let first = Bytes::from(std::mem::take(&mut response.body));
            sockets::open_stream(actor, socket, http_response(actor, response), first)
        }
        _ => http_response(actor, response),
    }
}

/// Converts the guest's response into an HTTP response. Headers whose name
/// or value is not valid HTTP are dropped (and logged), and so is
/// `stasis-stream`, the host's.
fn http_response(actor: &str, response: stasis_host_api::Response) -> Response<Body> {
    let mut out = Response::new(Body::new(Bytes::from(response.body)));
    *out.status_mut() = StatusCode::from_u16(response.status).unwrap_or(StatusCode::BAD_GATEWAY);
    for (name, value) in response.headers {
        let lower = name.to_ascii_lowercase();
        if not_passed_on(&lower) || lower == STREAM_HEADER {
            continue;
        }
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(&value),
        ) {
            (Ok(n), Ok(v)) => {
                out.headers_mut().append(n, v);
            }
            _ => {
                tracing::warn!(actor, header = %name, "dropping invalid response header from guest")
            }
        }
    }
    out
}

/// The ingress router of one `stasis serve`.
pub struct Router {
    control: Arc<ControlPlane>,
    domain: Arc<str>,
    /// The check of a namespace's ingress auth (the admin API's).
    access: Arc<Access>,
    /// How a follower replica has the leader create an actor on first use.
    leader: Option<Arc<dyn AskLeader>>,
}

impl Router {
    /// A router for actors under `.actors.<domain>`, checking the tokens
    /// of namespaces that require one at the ingress with `access`.
    #[must_use]
    pub fn new(control: Arc<ControlPlane>, domain: &str, access: Arc<Access>) -> Self {
        Self {
            control,
            domain: Arc::from(domain),
            access,
            leader: None,
        }
    }

    /// On a follower replica: actors created on first use are created by
    /// the leader, asked through `leader`.
    #[must_use]
    pub fn with_leader(mut self, leader: Arc<dyn AskLeader>) -> Self {
        self.leader = Some(leader);
        self
    }

    /// Routes one request and answers it. The request runs in a task of
    /// its own, so that when hyper drops this future (the client left) the
    /// request is given up unless the guest runs it, and one that ran is
    /// still counted (see [`stasis_contract::client_gone`]).
    pub async fn handle(&self, request: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        let gone = ClientGone::new();
        let _left = gone.clone().drop_guard();
        let routed = tokio::spawn(route(
            self.control.clone(),
            self.domain.clone(),
            self.access.clone(),
            self.leader.clone(),
            request,
            (peer, gone),
        ));
        routed.await.unwrap_or_else(|e| {
            tracing::error!("routing a request: {e}");
            text_error(&ApiError::internal(
                "internal error while routing the request",
            ))
        })
    }
}

/// Routes one request to its actor and answers it; counts it under its
/// status, or as abandoned when its client left before it ran.
async fn route(
    control: Arc<ControlPlane>,
    domain: Arc<str>,
    access: Arc<Access>,
    leader: Option<Arc<dyn AskLeader>>,
    request: Request<Incoming>,
    (peer, gone): (SocketAddr, ClientGone),
) -> Response<Body> {
    let started = std::time::Instant::now();
    let mut request = request;
    let upgrade = sockets::is_upgrade(request.headers());
    let on_upgrade = upgrade.then(|| hyper::upgrade::on(&mut request));
    let (mut parts, body) = request.into_parts();
    let body = UnreadBody::new(&parts.headers, body); // read away if refused unread
    let actor = match ingress::check(&parts).and_then(|()| actor_of(&parts, &domain)) {
        Ok(actor) => actor,
        Err(e) => return text_error(&e),
    };
    // A namespace that requires a token: answered before anything about
    // the actor (a stranger learns nothing of its names), and the
    // credential is the ingress's, never passed on to the guest. The
    // placement is looked up meanwhile: neither waits on the other.
    let (authenticated, route) = tokio::join!(
        ingress_auth::authenticate(&control, &access, &mut parts, &actor),
        control.route(&actor)
    );
    let credential = match authenticated {
        Ok(credential) => credential,
        Err(e) => {
            // Counted under its template and status, as an answered request
            // (an actor that does not exist has no series).
            control.count_request(&actor, e.kind().status(), started.elapsed());
            return text_error(&e);
        }
    };
    let (route, admitted) = match route {
        Ok(route) => (route, false),
        Err(e) if e.is(ErrorKind::NotFound) => {
            match first_use(&control, leader.as_deref(), &actor, started).await {
                Ok(Some(route)) => (route, true),
                Ok(None) => return text_error(&e),
                Err(e) => return text_error(&e),
            }
        }
        Err(e) => return text_error(&e),
    };
    // A follower asks the leader to place an actor its request waits for.
    let route = route.with_leader(leader);
    // Over its namespace's request rate: refused, never delivered.
    if !admitted && let Err(e) = control.admit_request(&actor).await {
        control.count_request(&actor, e.kind().status(), started.elapsed());
        return text_error(&e);
    }
    // A request that may become a socket or stream gets one, open before
    // the actor answers (`stasis_host_api::sockets`): an upgrade over the
    // limit is refused; a request that only accepts a stream goes without.
    let reserved = if upgrade {
        sockets::check_handshake(&parts)
            .and_then(|key| Ok((key, sockets::Reservation::new(&control, &actor)?)))
            .map(|(key, socket)| (Some(key), Some(socket)))
    } else if sockets::accepts_event_stream(&parts.headers) {
        Ok((None, sockets::Reservation::new(&control, &actor).ok()))
    } else {
        Ok((None, None))
    };
    let (accept_key, socket) = match reserved {
        Ok(reserved) => reserved,
        Err(e) => return text_error(&e),
    };
    // A socket or stream is checked again while it lasts.
    if let Some(socket) = &socket {
        ingress_auth::watch(
            control.clone(),
            access,
            actor.clone(),
            socket.id(),
            credential,
        );
    }
    let max_body = control.config().limits.max_body;
    let answer = match collect_body(&parts, body.take(), max_body, "--max-body").await {
        Ok(body) => {
            let mut guest = guest_request(&parts, body);
            if let Some(socket) = &socket {
                let id = socket.id().to_string().into_bytes();
                guest.headers.push((SOCKET_HEADER.to_owned(), id));
            }
            if upgrade {
                // `Upgrade` is hop-by-hop: the guest sees it from the host.
                guest
                    .headers
                    .push(("upgrade".to_owned(), b"websocket".to_vec()));
            }
            let span = ingress_span(&actor, &mut guest, peer.ip());
            let answer = control
                .call(route, guest, &gone)
                .await
                .map(|r| answer_for(&actor, socket, accept_key.as_deref(), on_upgrade, r));
            end_span(&span, answer.as_ref().map(|r| r.status().as_u16()));
            answer
        }
        Err(e) => Err(e),
    };
    match answer {
        Ok(response) => {
            control.count_request(&actor, response.status().as_u16(), started.elapsed());
            response
        }
        Err(e) if e.is(ErrorKind::Abandoned) => {
            control.metrics().abandoned();
            text_error(&e)
        }
        // Nobody to answer, and whether it ran is unknown: not counted.
        Err(e) if e.is(ErrorKind::OutcomeUnknown) => text_error(&e),
        Err(e) => {
            control.count_request(&actor, e.kind().status(), started.elapsed());
            text_error(&e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut b = Request::builder().uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).expect("valid test request").into_parts().0
    }

    fn route(uri: &str, headers: &[(&str, &str)]) -> Result<String, u16> {
        actor_of(&parts(uri, headers), "localhost").map_err(|e| e.kind().status())
    }

    #[test]
    fn host_header_names_the_actor() {
        assert_eq!(
            route("/", &[("host", "c1.actors.localhost")]),
            Ok("c1".into())
        );
        assert_eq!(
            route("/", &[("host", "C1.Actors.LocalHost")]),
            Ok("c1".into())
        );
        assert_eq!(
            route("/", &[("host", "c1.actors.localhost:8000")]),
            Ok("c1".into())
        );
        assert_eq!(
            route("/", &[("host", "c1.actors.localhost.")]),
            Ok("c1".into())
        );
        assert_eq!(
            route("/", &[("host", "c1.actors.localhost.:80")]),
            Ok("c1".into())
        );
    }

    #[test]
    fn a_second_label_is_the_namespace_and_default_is_no_suffix() {
        let at = |host: &str| route("/", &[("host", host)]);
        assert_eq!(at("c1.team-a.actors.localhost"), Ok("c1.team-a".into()));
        assert_eq!(at("c1.default.actors.localhost"), Ok("c1".into()));
        let named = |value: &str| route("/", &[("host", "x"), ("stasis-actor", value)]);
        assert_eq!(named("team-a/c1"), Ok("c1.team-a".into()));
        assert_eq!(named("default/c1"), Ok("c1".into()));
        for bad in ["team-a/", "/c1", "a/b/c", "c1.team-a", "../c1", "%2e%2e/c1"] {
            assert_eq!(named(bad), Err(400), "{bad}");
        }
    }

    #[test]
    fn bad_host_headers_are_400() {
        assert_eq!(route("/", &[]), Err(400));
        assert_eq!(route("/", &[("host", "")]), Err(400));
        assert_eq!(route("/", &[("host", "  ")]), Err(400));
        assert_eq!(
            route(
                "/",
                &[
                    ("host", "a.actors.localhost"),
                    ("host", "b.actors.localhost")
                ]
            ),
            Err(400)
        );
        assert_eq!(route("/", &[("host", "a b.actors.localhost")]), Err(400));
        assert_eq!(route("/", &[("host", "u@a.actors.localhost")]), Err(400));
        assert_eq!(route("/", &[("host", "a.actors.localhost..")]), Err(400));
    }

    #[test]
    fn suffix_must_match_at_a_label_boundary_with_one_or_two_labels() {
        assert_eq!(route("/", &[("host", "xactors.localhost")]), Err(404));
        assert_eq!(route("/", &[("host", "actors.localhost")]), Err(404));
        assert_eq!(route("/", &[("host", ".actors.localhost")]), Err(404));
        assert_eq!(route("/", &[("host", "a.b.c.actors.localhost")]), Err(404));
        assert_eq!(route("/", &[("host", "a..actors.localhost")]), Err(404));
        assert_eq!(
            route("/", &[("host", "c1.actors.localhost.evil")]),
            Err(404)
        );
        assert_eq!(route("/", &[("host", "c1.actors.otherhost")]), Err(404));
        assert_eq!(route("/", &[("host", "-c1.actors.localhost")]), Err(404));
        assert_eq!(route("/", &[("host", "c_1.actors.localhost")]), Err(404));
        assert_eq!(route("/", &[("host", "127.0.0.1:8000")]), Err(404));
        assert_eq!(route("/", &[("host", "[::1]:8000")]), Err(404));
        let long = format!("{}.actors.localhost", "a".repeat(64));
        assert_eq!(route("/", &[("host", &long)]), Err(404));
        let max = "a".repeat(63);
        assert_eq!(
            route("/", &[("host", &format!("{max}.actors.localhost"))]),
            Ok(max)
        );
    }

    #[test]
    fn a_host_of_the_right_shape_with_a_bad_name_says_so() {
        let refused =
            actor_from_host("Bad_Name.actors.localhost", "localhost").expect_err("not a label");
        assert!(refused.is(ErrorKind::NotFound), "{refused:?}");
        assert!(
            refused
                .message()
                .contains(r#""bad_name" is not an actor or namespace name"#),
            "{refused}"
        );
        let elsewhere =
            actor_from_host("a.b.c.actors.localhost", "localhost").expect_err("three labels");
        assert!(
            elsewhere.message().contains("actors are reached at"),
            "{elsewhere}"
        );
    }

    #[test]
    fn actor_header_wins_and_is_validated() {
        assert_eq!(
            route(
                "/",
                &[("host", "x.actors.localhost"), ("stasis-actor", "c2")]
            ),
            Ok("c2".into())
        );
        assert_eq!(route("/", &[("stasis-actor", "C2")]), Ok("c2".into()));
        assert_eq!(route("/", &[("stasis-actor", "not valid")]), Err(400));
        assert_eq!(
            route("/", &[("stasis-actor", "a"), ("stasis-actor", "b")]),
            Err(400)
        );
    }

    #[test]
    fn absolute_form_authority_beats_host() {
        assert_eq!(
            route(
                "http://c3.actors.localhost:8000/x?y=1",
                &[("host", "other.actors.localhost")]
            ),
            Ok("c3".into())
        );
        assert_eq!(
            route("http://nope.example/x", &[("host", "c3.actors.localhost")]),
            Err(404)
        );
    }

    #[test]
    fn domains_are_normalised_too() {
        assert_eq!(
            actor_from_host("a.actors.example.com", "Example.COM.").map_err(|e| e.kind().status()),
            Ok("a".into())
        );
    }

    #[test]
    fn guest_request_strips_actor_and_hop_by_hop_headers() {
        let p = parts(
            "/k?q=1",
            &[
                ("stasis-actor", "a"),
                ("connection", "keep-alive"),
                ("x-one", "1"),
                ("host", "h"),
            ],
        );
        let req = guest_request(&p, Bytes::from_static(b"body"));
        assert_eq!(req.uri, "/k?q=1");
        assert_eq!(req.body, b"body");
        let names: Vec<&str> = req.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["x-one", "host"]);
    }
}
