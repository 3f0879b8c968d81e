//! The admin API's route table ([`ROUTES`]): every route, the role a token
//! needs for it, the body it may send and its handler. Paths are the ones
//! [`crate::scope`] resolved (a namespace's actors and templates under
//! `/v1/actors` and `/v1/templates`, with full names).
//!
//! Roles: reads need a reader; changes to templates and actors a writer;
//! moving an actor, or what a namespace lets in (its ingress auth, the
//! namespaces it takes calls from), a namespace-admin; workers, the
//! cluster's moves, `gc`, quotas and tokens (even listing them) an admin.

use std::sync::LazyLock;

use hyper::Method;

use stasis_contract::tokens::Role::{self, Admin, NamespaceAdmin, Reader, Writer};

use crate::routes::BodyLimit::{Json, Module};
use crate::routes::{Slashes, Table, route};

use super::{actors, cluster, templates};

/// The admin API's routes. The order of a path's entries is the order of
/// the methods in its `Allow`; a template's routes read up to a module
/// whatever their method (the body is read before the method is refused).
pub(super) static ROUTES: LazyLock<Table<Role>> = LazyLock::new(|| {
    use Method as M;
    Table::new(
        Slashes::Trimmed,
        vec![
            route(M::GET, "/healthz", Reader, Json, |c| {
                Box::pin(cluster::healthz(c))
            }),
            route(M::GET, "/metrics", Reader, Json, |c| {
                Box::pin(cluster::metrics(c))
            }),
            // Templates.
            route(M::GET, "/v1/templates", Reader, Json, |c| {
                Box::pin(templates::list(c))
            }),
            route(M::GET, "/v1/templates/{name}", Reader, Module, |c| {
                Box::pin(templates::get(c))
            }),
            route(M::PUT, "/v1/templates/{name}", Writer, Module, |c| {
                Box::pin(templates::push(c))
            }),
            route(M::POST, "/v1/templates/{name}", Writer, Module, |c| {
                Box::pin(templates::push(c))
            }),
            route(M::DELETE, "/v1/templates/{name}", Writer, Module, |c| {
                Box::pin(templates::delete(c))
            }),
            route(M::GET, "/v1/templates/{name}/rollout", Reader, Json, |c| {
                Box::pin(templates::rollout_status(c))
            }),
            route(M::POST, "/v1/templates/{name}/rollout", Writer, Json, |c| {
                Box::pin(templates::start_rollout(c))
            }),
            route(
                M::POST,
                "/v1/templates/{name}/rollback",
                Writer,
                Json,
                |c| Box::pin(templates::rollback(c)),
            ),
            // Actors.
            route(M::GET, "/v1/actors", Reader, Json, |c| {
                Box::pin(actors::list(c))
            }),
            route(M::POST, "/v1/actors", Writer, Json, |c| {
                Box::pin(actors::create(c))
            }),
            route(M::GET, "/v1/actors/{name}", Reader, Json, |c| {
                Box::pin(actors::get(c))
            }),
            route(M::DELETE, "/v1/actors/{name}", Writer, Json, |c| {
                Box::pin(actors::delete(c))
            }),
            route(M::GET, "/v1/actors/{name}/logs", Reader, Json, |c| {
                Box::pin(actors::logs(c))
            }),
            route(M::POST, "/v1/actors/{name}/fork", Writer, Json, |c| {
                Box::pin(actors::fork(c))
            }),
            route(M::POST, "/v1/actors/{name}/pause", Writer, Json, |c| {
                Box::pin(actors::pause(c))
            }),
            route(M::POST, "/v1/actors/{name}/checkpoint", Writer, Json, |c| {
                Box::pin(actors::checkpoint(c))
            }),
            route(M::POST, "/v1/actors/{name}/resume", Writer, Json, |c| {
                Box::pin(actors::resume(c))
            }),
            route(
                M::POST,
                "/v1/actors/{name}/migrate",
                NamespaceAdmin,
                Json,
                |c| Box::pin(actors::migrate(c)),
            ),
            route(M::POST, "/v1/actors/{name}/upgrade", Writer, Json, |c| {
                Box::pin(actors::upgrade(c))
            }),
            // Namespaces.
            route(M::GET, "/v1/namespaces", Reader, Json, |c| {
                Box::pin(cluster::namespaces(c))
            }),
            route(M::GET, "/v1/namespaces/{ns}", Reader, Json, |c| {
                Box::pin(cluster::namespace(c))
            }),
            route(M::PUT, "/v1/namespaces/{ns}/quota", Admin, Json, |c| {
                Box::pin(cluster::set_quota(c))
            }),
            route(
                M::PUT,
                "/v1/namespaces/{ns}/ingress-auth",
                NamespaceAdmin,
                Json,
                |c| Box::pin(cluster::set_ingress_auth(c)),
            ),
            route(
                M::PUT,
                "/v1/namespaces/{ns}/calls-from",
                NamespaceAdmin,
                Json,
                |c| Box::pin(cluster::set_calls_from(c)),
            ),
            // Tokens.
            route(M::GET, "/v1/tokens", Admin, Json, |c| {
                Box::pin(cluster::tokens(c))
            }),
            route(M::POST, "/v1/tokens", Admin, Json, |c| {
                Box::pin(cluster::create_token(c))
            }),
            route(M::DELETE, "/v1/tokens/{id}", Admin, Json, |c| {
                Box::pin(cluster::revoke_token(c))
            }),
            // Workers and the cluster's moves.
            route(M::GET, "/v1/workers", Reader, Json, |c| {
                Box::pin(cluster::workers(c))
            }),
            route(M::POST, "/v1/workers/{name}/drain", Admin, Json, |c| {
                Box::pin(cluster::drain(c))
            }),
            route(M::POST, "/v1/workers/{name}/undrain", Admin, Json, |c| {
                Box::pin(cluster::undrain(c))
            }),
            route(M::POST, "/v1/rebalance", Admin, Json, |c| {
                Box::pin(cluster::rebalance(c))
            }),
            route(M::POST, "/v1/gc", Admin, Json, |c| Box::pin(cluster::gc(c))),
        ],
    )
});

#[cfg(test)]
mod tests {
    use super::*;
    use stasis_contract::error::ErrorKind;

    /// Every entry is the one its own pattern finds (none shadows
    /// another), no two entries of one method take the same path, and the
    /// entries of one pattern share a body limit.
    #[test]
    fn every_entry_is_reachable_and_none_overlaps() {
        let routes = ROUTES.routes();
        assert!(routes.len() >= 30, "{}", routes.len());
        for (i, entry) in routes.iter().enumerate() {
            let path = entry.pattern.example("x");
            let (found, params) = ROUTES.find(&entry.method, &path).expect(&path);
            assert!(std::ptr::eq(found, entry), "{} {path}", entry.method);
            assert_eq!(params.len(), entry.pattern.params(), "{path}");
            for other in &routes[i + 1..] {
                let pair = format!("{} and {}", entry.pattern.as_str(), other.pattern.as_str());
                assert!(
                    other.method != entry.method || !other.pattern.overlaps(&entry.pattern),
                    "{} {pair} overlap",
                    entry.method
                );
                if other.pattern.as_str() == entry.pattern.as_str() {
                    assert_eq!(other.limit, entry.limit, "{pair}");
                }
            }
        }
    }

    #[test]
    fn each_path_allows_its_methods_in_order() {
        for (path, methods) in [
            ("/metrics", &["GET"][..]),
            ("/healthz/", &["GET"]),
            ("/v1/templates", &["GET"]),
            ("/v1/workers", &["GET"]),
            ("/v1/templates/t", &["GET", "PUT", "POST", "DELETE"]),
            ("/v1/templates/t/rollout", &["GET", "POST"]),
            ("/v1/templates/t/rollback", &["POST"]),
            ("/v1/actors", &["GET", "POST"]),
            ("/v1/actors/", &["GET", "POST"]),
            ("/v1/actors/a", &["GET", "DELETE"]),
            ("/v1/actors/a/logs", &["GET"]),
            ("/v1/actors/a/upgrade", &["POST"]),
            ("/v1/tokens", &["GET", "POST"]),
            ("/v1/tokens/x", &["DELETE"]),
            ("/v1/namespaces", &["GET"]),
            ("/v1/namespaces/n", &["GET"]),
            ("/v1/namespaces/n/calls-from", &["PUT"]),
            ("/v1/workers/w/undrain", &["POST"]),
            ("/v1/gc", &["POST"]),
            ("/v1/actors/a/extra", &[]),
            ("/v1/nothing", &[]),
        ] {
            assert_eq!(ROUTES.allowed(path), methods, "{path}");
        }
    }

    #[test]
    fn unknown_paths_are_404_and_known_ones_405_with_their_methods() {
        let get = Method::GET;
        assert!(ROUTES.unrouted(&get, "/v1/nothing").is(ErrorKind::NotFound));
        assert!(
            ROUTES
                .unrouted(&get, "/v1/actors/a/extra")
                .is(ErrorKind::NotFound)
        );
        assert!(ROUTES.unrouted(&get, "/nope").is(ErrorKind::NotFound));
        let refused = ROUTES.unrouted(&get, "/v1/actors/a/pause");
        assert!(refused.is(ErrorKind::MethodNotAllowed), "{refused:?}");
        assert!(refused.message().ends_with("use POST"), "{refused}");
        assert_eq!(ROUTES.allowed("/v1/actors"), ["GET", "POST"]);
        assert_eq!(
            ROUTES.unrouted(&Method::DELETE, "/v1/actors").message(),
            "method DELETE not allowed on /v1/actors; use GET or POST"
        );
    }

    #[test]
    fn reads_need_a_reader_changes_a_writer_and_the_cluster_an_admin() {
        use Method as M;
        for (method, path, role) in [
            (M::GET, "/v1/actors", Reader),
            (M::GET, "/metrics", Reader),
            (M::GET, "/v1/actors/a/logs", Reader),
            (M::POST, "/v1/actors", Writer),
            (M::POST, "/v1/actors/a/pause", Writer),
            (M::DELETE, "/v1/actors/a", Writer),
            (M::PUT, "/v1/templates/t", Writer),
            (M::POST, "/v1/actors/a/migrate", NamespaceAdmin),
            (M::PUT, "/v1/namespaces/a/quota", Admin),
            (M::GET, "/v1/namespaces/a", Reader),
            (M::PUT, "/v1/namespaces/a/ingress-auth", NamespaceAdmin),
            (M::POST, "/v1/workers/w1/drain", Admin),
            (M::POST, "/v1/gc", Admin),
            (M::GET, "/v1/tokens", Admin),
            (M::DELETE, "/v1/tokens/x", Admin),
        ] {
            assert_eq!(ROUTES.need(&method, path), role, "{method} {path}");
        }
    }

    /// A request no entry takes needs what it needed before the table:
    /// the role of an admin's path whatever the method, a reader for a
    /// read and a writer for anything else.
    #[test]
    fn a_request_no_entry_takes_needs_its_paths_role_or_its_methods() {
        use Method as M;
        for (method, path, role) in [
            (M::GET, "/v1/workers/w1/drain", Admin),
            (M::GET, "/v1/gc", Admin),
            (M::PATCH, "/v1/tokens", Admin),
            (M::GET, "/v1/tokens/x", Admin),
            (M::GET, "/v1/tokens/x/y", Admin),
            (M::GET, "/v1/tokens//y", Admin),
            (M::GET, "/v1/namespaces/a/quota", Admin),
            (M::GET, "/v1/actors/a/migrate", NamespaceAdmin),
            (M::GET, "/v1/namespaces/a/calls-from", NamespaceAdmin),
            (M::GET, "/v1/actors/a/pause", Reader),
            (M::HEAD, "/v1/actors", Reader),
            (M::POST, "/v1/workers", Writer),
            (M::DELETE, "/v1/actors", Writer),
            (M::POST, "/metrics", Writer),
            (M::GET, "/v1/actors/a/migrate/x", Reader),
            (M::POST, "/v1/workers/w1/drain/x", Writer),
            (M::POST, "/v1/gc/x", Writer),
            (M::GET, "/v1/nothing", Reader),
            (M::OPTIONS, "/v1/nothing", Writer),
        ] {
            assert_eq!(ROUTES.need(&method, path), role, "{method} {path}");
        }
    }

    #[test]
    fn a_path_reads_its_routes_body_limit_whatever_the_method() {
        assert_eq!(ROUTES.limit("/v1/templates/t"), Module);
        assert_eq!(ROUTES.limit("/v1/templates/t/"), Module);
        assert_eq!(ROUTES.limit("/v1/templates/t/rollout"), Json);
        assert_eq!(ROUTES.limit("/v1/actors"), Json);
        assert_eq!(ROUTES.limit("/v1/nothing"), Json);
    }
}
