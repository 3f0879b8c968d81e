//! Names and namespaces. Every actor and template lives in a namespace; an
//! actor's **full name** is what its host name starts with:
//! `<actor>.<namespace>.actors.<domain>` gives `<actor>.<namespace>`, and
//! the `default` namespace's actors keep their plain name
//! (`<actor>.actors.<domain>`, every URL from before namespaces). A full
//! name is one RFC 1123 label (namespace `default`) or two joined by a
//! dot, the second not `default`; so no full name is `.` or `..`, none has
//! a `/`, and two namespaces never share one: a full name is safe as a
//! file name, a store key and an etcd key, and keeps each namespace's data
//! apart. Templates are named the same way.

use crate::error::{ApiError, echo_name};

/// The namespace of every name without one.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Whether `name` is an RFC 1123 label: 1–63 of `a-z`, `0-9`, `-`, not
/// starting or ending with `-`. Actor and template names must be.
#[must_use]
pub fn is_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && !name.starts_with('-')
        && !name.ends_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Checks `name` as an actor or template name (`what`).
///
/// # Errors
/// 400 naming the rule broken.
pub fn check_label(what: &str, name: &str) -> Result<(), ApiError> {
    if is_label(name) {
        Ok(())
    } else {
        let rule = if name.len() > 63 {
            "longer than the limit of 63 characters"
        } else {
            "use 1-63 lower-case letters, digits and '-', not starting or ending with '-'"
        };
        Err(ApiError::bad_request(format!(
            "invalid {what} name {}: {rule} (an RFC 1123 label)",
            echo_name(name)
        )))
    }
}

/// The full name of `name` (a label) in namespace `namespace` (a label).
#[must_use]
pub fn full_name(namespace: &str, name: &str) -> String {
    if namespace == DEFAULT_NAMESPACE {
        name.to_owned()
    } else {
        format!("{name}.{namespace}")
    }
}

/// A full name's name and namespace.
#[must_use]
pub fn split(full: &str) -> (&str, &str) {
    full.split_once('.').unwrap_or((full, DEFAULT_NAMESPACE))
}

/// The namespace of full name `full`.
#[must_use]
pub fn namespace_of(full: &str) -> &str {
    split(full).1
}

/// Whether `full` is a full name (module docs).
#[must_use]
pub fn is_full_name(full: &str) -> bool {
    match full.split_once('.') {
        None => is_label(full),
        Some((name, namespace)) => {
            is_label(name) && is_label(namespace) && namespace != DEFAULT_NAMESPACE
        }
    }
}

/// Checks `namespace` as a namespace name.
///
/// # Errors
/// 400 naming the rule broken.
pub fn check_namespace(namespace: &str) -> Result<(), ApiError> {
    check_label("namespace", namespace)
}

/// Checks `full` as the full name of a `what` (actor, template).
///
/// # Errors
/// 400 naming the rule broken.
pub fn check_full_name(what: &str, full: &str) -> Result<(), ApiError> {
    let Some((name, namespace)) = full.split_once('.') else {
        return check_label(what, full);
    };
    // The whole name is echoed (safely) when a part of it is not a label:
    // `../beta/secret` is not a name with an empty first part.
    if !is_label(name) || !is_label(namespace) {
        let rule = if name.len() > 63 || namespace.len() > 63 {
            "a part is longer than the limit of 63 characters"
        } else {
            "use NAME or NAME.NAMESPACE, each 1-63 lower-case letters, digits and '-', not \
             starting or ending with '-'"
        };
        return Err(ApiError::bad_request(format!(
            "invalid {what} name {}: {rule} (RFC 1123 labels)",
            echo_name(full)
        )));
    }
    check_namespace(namespace)?;
    if namespace == DEFAULT_NAMESPACE {
        return Err(ApiError::bad_request(format!(
            "invalid {what} name {}: the default namespace's names have no suffix",
            echo_name(full)
        )));
    }
    Ok(())
}

/// The full name a request in namespace `namespace` means by `given`: a
/// label is in `namespace`; a full name must be in it already.
///
/// # Errors
/// 400 if `given` is neither, or a full name of another namespace.
pub fn resolve(what: &str, namespace: &str, given: &str) -> Result<String, ApiError> {
    if is_label(given) {
        return Ok(full_name(namespace, given));
    }
    check_full_name(what, given)?;
    if namespace_of(given) != namespace {
        return Err(ApiError::bad_request(format!(
            "{what} {} is in namespace {}, not {namespace}",
            echo_name(given),
            namespace_of(given)
        )));
    }
    Ok(given.to_owned())
}

/// The full name an actor of namespace `caller` means by `given` when it
/// calls or sends to it: a plain name (a label) is an actor of `caller`;
/// `NAME.NAMESPACE` is actor `NAME` of namespace `NAMESPACE`
/// (`NAME.default`: of the default namespace). `None` for anything else.
#[must_use]
pub fn call_target(caller: &str, given: &str) -> Option<String> {
    match given.split_once('.') {
        None => is_label(given).then(|| full_name(caller, given)),
        Some((name, namespace)) => {
            (is_label(name) && is_label(namespace)).then(|| full_name(namespace, name))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_namespace_keeps_plain_names_and_others_a_suffix() {
        assert_eq!(full_name("default", "c1"), "c1");
        assert_eq!(full_name("team-a", "c1"), "c1.team-a");
        assert_eq!(split("c1.team-a"), ("c1", "team-a"));
        assert_eq!(split("c1"), ("c1", "default"));
        assert_eq!(resolve("actor", "team-a", "c1").unwrap(), "c1.team-a");
        assert_eq!(
            resolve("actor", "team-a", "c1.team-a").unwrap(),
            "c1.team-a"
        );
        assert!(resolve("actor", "team-a", "c1.team-b").is_err());
        assert!(resolve("actor", "default", "c1.team-b").is_err());
    }

    #[test]
    fn a_call_names_its_own_namespace_or_another() {
        assert_eq!(call_target("team-a", "c1").as_deref(), Some("c1.team-a"));
        assert_eq!(call_target("default", "c1").as_deref(), Some("c1"));
        assert_eq!(
            call_target("team-a", "c1.team-b").as_deref(),
            Some("c1.team-b")
        );
        assert_eq!(call_target("team-a", "c1.default").as_deref(), Some("c1"));
        for bad in ["", "C1", "a.b.c", "a/b", ".a", "a."] {
            assert_eq!(call_target("team-a", bad), None, "{bad:?}");
        }
    }

    #[test]
    fn no_full_name_reaches_outside_its_namespace() {
        for bad in [
            "",
            ".",
            "..",
            "a..b",
            "a.b.c",
            "a/b",
            "../a",
            "a.",
            ".a",
            "a.default",
            "A",
            "a%2e%2e",
            "а",
            "a.b/c",
            "a\u{2024}b",
            "-a",
            "a.-b",
        ] {
            assert!(!is_full_name(bad), "{bad:?}");
            assert!(check_full_name("actor", bad).is_err(), "{bad:?}");
        }
        for good in ["a", "a.b", "counter-1.team-a"] {
            assert!(is_full_name(good), "{good:?}");
        }
        // The refusal echoes the whole name, not an empty part of it.
        let why = check_full_name("actor", "../beta/secret")
            .expect_err("not a name")
            .message()
            .to_owned();
        assert!(why.contains(r#""../beta/secret""#), "{why}");
        assert!(!why.contains(r#""""#), "{why}");
    }
}
