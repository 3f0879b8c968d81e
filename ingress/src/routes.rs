//! The admin API's route table, as far as answering a request that matches
//! no route needs it: which methods a path takes. A path that some route
//! takes under another method is answered `405` with `Allow` listing them
//! (RFC 9110 §15.5.6); a path no route takes is `404`.

use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::names;
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
        ["v1", "namespaces"] | ["v1", "namespaces", _] => &["GET"],
        [
            "v1",
            "namespaces",
            _,
            "quota" | "ingress-auth" | "calls-from",
        ] => &["PUT"],
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

/// An admin path with its namespace resolved: `/v1/namespaces/NS/...`
/// becomes the route it stands for, every actor or template name in it a
/// full name (`stasis_contract::names`); the unprefixed routes are the
/// `default` namespace's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scoped {
    /// The namespace of the actors and templates the route is about.
    pub namespace: String,
    /// The route's path, names resolved (`/v1/actors/c1.team-a/pause`).
    pub path: String,
    /// Whether the route is about no namespace (workers, moves of the
    /// cluster, `gc`, `/metrics`, tokens, the internal routes).
    pub global: bool,
}

/// Resolves `path`'s namespace (see [`Scoped`]).
///
/// # Errors
/// 400 for a namespace that is not a name, or an actor or template name
/// of another namespace than the path's; 404 for a namespaced path that
/// is not about templates or actors.
pub fn scope(path: &str) -> Result<Scoped, ApiError> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (namespace, rest): (&str, &[&str]) = match segments.as_slice() {
        ["v1", "namespaces", namespace, rest @ ..] => {
            names::check_namespace(namespace)?;
            // A namespace's view of /metrics (`crate::namespace_metrics`).
            if rest == ["metrics"] {
                return Ok(Scoped {
                    namespace: (*namespace).to_owned(),
                    path: "/metrics".to_owned(),
                    global: false,
                });
            }
            if matches!(rest, [] | ["quota" | "ingress-auth" | "calls-from"]) {
                return Ok(Scoped {
                    namespace: (*namespace).to_owned(),
                    path: path.trim_end_matches('/').to_owned(),
                    global: false,
                });
            }
            if !matches!(rest.first(), Some(&("actors" | "templates"))) {
                return Err(ApiError::not_found(format!(
                    "no admin route {path}: a namespace has /actors, /templates, /metrics, /quota, /ingress-auth and /calls-from"
                )));
            }
            (namespace, rest)
        }
        ["v1", rest @ ..] if matches!(rest.first(), Some(&("actors" | "templates"))) => {
            (names::DEFAULT_NAMESPACE, rest)
        }
        _ => {
            return Ok(Scoped {
                namespace: names::DEFAULT_NAMESPACE.to_owned(),
                path: path.to_owned(),
                global: true,
            });
        }
    };
    let mut resolved: Vec<String> = rest.iter().map(|s| (*s).to_owned()).collect();
    if let [kind, name, ..] = rest {
        let what = if *kind == "actors" {
            "actor"
        } else {
            "template"
        };
        resolved[1] = names::resolve(what, namespace, name)?;
    }
    Ok(Scoped {
        namespace: namespace.to_owned(),
        path: format!("/v1/{}", resolved.join("/")),
        global: false,
    })
}

/// The namespace `path` names (`/v1/namespaces/{ns}/...`), when it is a
/// namespace's name, whatever the rest of the path is.
#[must_use]
pub fn namespace_in(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/v1/namespaces/")?;
    let namespace = rest.split('/').next()?;
    names::check_namespace(namespace)
        .ok()
        .map(|()| namespace.to_owned())
}

/// The role a request for `method` on `path` needs (see
/// [`stasis_contract::tokens::Role`]): reads need a reader; changes to
/// templates and actors a writer; moving an actor, or what a namespace
/// lets in (its ingress auth, the namespaces it takes calls from), a
/// namespace-admin;
/// workers, the cluster's moves, `gc`, quotas and tokens (even listing
/// them) an admin.
#[must_use]
pub fn needs(method: &hyper::Method, path: &str) -> Role {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["v1", "tokens", ..]
        | ["v1", "workers", _, "drain" | "undrain"]
        | ["v1", "namespaces", _, "quota"]
        | ["v1", "rebalance" | "gc"] => Role::Admin,
        ["v1", "actors", _, "migrate"] | ["v1", "namespaces", _, "ingress-auth" | "calls-from"] => {
            Role::NamespaceAdmin
        }
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
    fn a_namespaced_path_is_its_route_with_full_names() {
        let scoped = scope("/v1/namespaces/team-a/actors/c1/pause").unwrap();
        assert_eq!(scoped.path, "/v1/actors/c1.team-a/pause");
        assert_eq!(
            (scoped.namespace.as_str(), scoped.global),
            ("team-a", false)
        );
        assert_eq!(
            scope("/v1/namespaces/team-a/actors").unwrap().path,
            "/v1/actors"
        );
        let metrics = scope("/v1/namespaces/team-a/metrics").unwrap();
        assert_eq!(
            (
                metrics.path.as_str(),
                metrics.namespace.as_str(),
                metrics.global
            ),
            ("/metrics", "team-a", false)
        );
        let default = scope("/v1/namespaces/default/templates/t").unwrap();
        assert_eq!(default.path, "/v1/templates/t");
        assert_eq!(scope("/v1/actors/c1").unwrap().namespace, "default");
        assert!(scope("/v1/gc").unwrap().global);
        for (bad, status) in [
            ("/v1/namespaces/../actors", 400),
            ("/v1/namespaces/%2e%2e/actors", 400),
            ("/v1/namespaces/team-a/workers", 404),
            ("/v1/namespaces/team-a/actors/c1.team-b", 400),
            ("/v1/actors/c1.team-b", 400),
            ("/v1/namespaces/Team/actors", 400),
        ] {
            let refused = scope(bad).unwrap_err();
            assert_eq!(refused.kind().status(), status, "{bad}: {refused}");
        }
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
            (Method::POST, "/v1/actors/a/migrate", Role::NamespaceAdmin),
            (Method::PUT, "/v1/namespaces/a/quota", Role::Admin),
            (Method::GET, "/v1/namespaces/a", Role::Reader),
            (
                Method::PUT,
                "/v1/namespaces/a/ingress-auth",
                Role::NamespaceAdmin,
            ),
            (Method::POST, "/v1/workers/w1/drain", Role::Admin),
            (Method::POST, "/v1/gc", Role::Admin),
            (Method::GET, "/v1/tokens", Role::Admin),
            (Method::DELETE, "/v1/tokens/x", Role::Admin),
        ] {
            assert_eq!(needs(&method, path), role, "{method} {path}");
        }
    }
}
