//! The admin API's route table, as far as answering a request that matches
//! no route needs it: which methods a path takes. A path that some route
//! takes under another method is answered `405` with `Allow` listing them
//! (RFC 9110 §15.5.6); a path no route takes is `404`.

use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::proto::ControlPath;
use stasis_contract::tokens::Role;

/// The methods the route of `path` takes (empty: no such route).
#[must_use]
pub fn allowed(path: &str) -> &'static [&'static str] {
    if let Some(internal) = ControlPath::parse(path) {
        return match internal {
            ControlPath::Join
            | ControlPath::Heartbeat(_)
            | ControlPath::Drain(_)
            | ControlPath::Call(_)
            | ControlPath::Send(_)
            | ControlPath::Sockets(_) => &["POST"],
            ControlPath::Template(_) => &["GET"],
            ControlPath::Snapshot(..) => &["PUT"],
            ControlPath::Alarm(_) => &["GET", "PUT", "DELETE"],
        };
    }
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["healthz" | "metrics"] | ["v1", "templates" | "workers"] => &["GET"],
        ["v1", "templates", _] => &["GET", "PUT", "POST", "DELETE"],
        ["v1", "templates", _, "rollout"] => &["GET", "POST"],
        ["v1", "actors"] => &["GET", "POST"],
        ["v1", "actors", _] => &["GET", "DELETE"],
        ["v1", "actors", _, "logs"] => &["GET"],
        ["v1", "tokens"] => &["GET", "POST"],
        ["v1", "tokens", _] => &["DELETE"],
        [
            "v1",
            "actors",
            _,
            "fork" | "pause" | "checkpoint" | "resume" | "migrate" | "upgrade",
        ]
        | ["v1", "templates", _, "rollback"]
        | ["v1", "workers", _, "drain" | "undrain"]
        | ["v1", "rebalance" | "gc"] => &["POST"],
        _ => &[],
    }
}

/// The role a request for `method` on `path` needs (see
/// [`stasis_contract::tokens::Role`]): reads need a reader; changes to
/// templates and actors a writer; workers, moves, `gc` and tokens (even
/// listing them) an admin.
#[must_use]
pub fn needs(method: &hyper::Method, path: &str) -> Role {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["v1", "tokens", ..]
        | ["v1", "workers", _, "drain" | "undrain"]
        | ["v1", "actors", _, "migrate"]
        | ["v1", "rebalance" | "gc"] => Role::Admin,
        _ if matches!(*method, hyper::Method::GET | hyper::Method::HEAD) => Role::Reader,
        _ => Role::Writer,
    }
}

/// The error for `method` on `path`, which no route took: `405` naming the
/// methods the path takes, or `404` when no route takes it.
#[must_use]
pub fn unrouted(method: &hyper::Method, path: &str) -> ApiError {
    match allowed(path) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_paths_are_404_and_known_ones_405_with_their_methods() {
        let get = hyper::Method::GET;
        assert!(unrouted(&get, "/v1/nothing").is(ErrorKind::NotFound));
        assert!(unrouted(&get, "/v1/actors/a/extra").is(ErrorKind::NotFound));
        assert!(unrouted(&get, "/nope").is(ErrorKind::NotFound));
        let refused = unrouted(&get, "/v1/actors/a/pause");
        assert!(refused.is(ErrorKind::MethodNotAllowed), "{refused:?}");
        assert!(refused.message().ends_with("use POST"), "{refused}");
        assert_eq!(allowed("/v1/actors"), ["GET", "POST"]);
        assert_eq!(
            unrouted(&hyper::Method::DELETE, "/v1/actors").message(),
            "method DELETE not allowed on /v1/actors; use GET or POST"
        );
    }

    #[test]
    fn reads_need_a_reader_changes_a_writer_and_the_cluster_an_admin() {
        use hyper::Method;
        for (method, path, role) in [
            (Method::GET, "/v1/actors", Role::Reader),
            (Method::GET, "/metrics", Role::Reader),
            (Method::GET, "/v1/actors/a/logs", Role::Reader),
            (Method::POST, "/v1/actors", Role::Writer),
            (Method::POST, "/v1/actors/a/pause", Role::Writer),
            (Method::DELETE, "/v1/actors/a", Role::Writer),
            (Method::PUT, "/v1/templates/t", Role::Writer),
            (Method::POST, "/v1/actors/a/migrate", Role::Admin),
            (Method::POST, "/v1/workers/w1/drain", Role::Admin),
            (Method::POST, "/v1/gc", Role::Admin),
            (Method::GET, "/v1/tokens", Role::Admin),
            (Method::DELETE, "/v1/tokens/x", Role::Admin),
        ] {
            assert_eq!(needs(&method, path), role, "{method} {path}");
        }
    }
}
