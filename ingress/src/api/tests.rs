//! The admin API's route table, pinned: every entry reachable and alone,
//! the methods each path allows (in the order of its `Allow`), the role
//! each request needs (routed or not) and the body limit of each path.

use hyper::Method;

use stasis_contract::error::ErrorKind;
use stasis_contract::tokens::Role::{Admin, NamespaceAdmin, Reader, Writer};

use super::ROUTES;
use crate::routes::BodyLimit::{Json, Module};

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
