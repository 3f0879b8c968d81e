//! An admin path's namespace: `/v1/namespaces/NS/...` resolved to the
//! route it stands for ([`scope`]), names made full, before the route
//! table ([`crate::routes`]) matches it and [`crate::access`] checks the
//! token against its namespace.

use stasis_contract::error::ApiError;
use stasis_contract::names;

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
            if matches!(
                rest,
                [] | ["quota" | "ingress-auth" | "calls-from" | "on-demand"]
            ) {
                return Ok(Scoped {
                    namespace: (*namespace).to_owned(),
                    path: path.trim_end_matches('/').to_owned(),
                    global: false,
                });
            }
            if !matches!(rest.first(), Some(&("actors" | "templates"))) {
                return Err(ApiError::not_found(format!(
                    "no admin route {path}: a namespace has /actors, /templates, /metrics, /quota, /ingress-auth, /calls-from and /on-demand"
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
        // The name as its client wrote it (`bad name`, not `bad%20name`).
        let name = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
        resolved[1] = names::resolve(what, namespace, &name)?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
