//! An actor's labels (`key=value` pairs an operator attaches to find and
//! group actors), the rules a label obeys, and a change to an actor's
//! labels ([`LabelPatch`], a JSON merge patch of the map).
//!
//! A key is 1–63 characters of `a-z`, `A-Z`, `0-9`, `-`, `_`, `.` and `/`,
//! starting and ending with a letter or digit; a value is 0–63 characters
//! of the same alphabet without `/`; an actor holds at most
//! [`MAX_LABELS`] labels. Every refusal is a 400 naming the label and the
//! rule it broke.

use std::collections::BTreeMap;

use crate::error::ApiError;

/// An actor's labels, by key.
pub type Labels = BTreeMap<String, String>;

/// The most labels one actor holds.
pub const MAX_LABELS: usize = 16;

/// The longest key, and the longest value.
pub const MAX_LABEL_CHARS: usize = 63;

/// Checks label key `key`.
///
/// # Errors
/// 400 naming the key and the rule it broke.
pub fn check_key(key: &str) -> Result<(), ApiError> {
    check(key, "key", true)
}

/// Checks the value `value` of label `key`.
///
/// # Errors
/// 400 naming the label and the rule it broke.
pub fn check_value(key: &str, value: &str) -> Result<(), ApiError> {
    if value.is_empty() {
        return Ok(());
    }
    check(value, &format!("value of {key:?}"), false)
}

/// Checks every label of `labels` and their count.
///
/// # Errors
/// 400 naming the first label that breaks a rule, or the count.
pub fn check_labels(labels: &Labels) -> Result<(), ApiError> {
    for (key, value) in labels {
        check_key(key)?;
        check_value(key, value)?;
    }
    check_count(labels.len())
}

fn check_count(count: usize) -> Result<(), ApiError> {
    if count > MAX_LABELS {
        return Err(ApiError::bad_request(format!(
            "an actor holds at most {MAX_LABELS} labels; this would make {count}"
        )));
    }
    Ok(())
}

fn check(text: &str, what: &str, slash: bool) -> Result<(), ApiError> {
    let shown = || text.chars().take(MAX_LABEL_CHARS + 1).collect::<String>();
    if text.is_empty() {
        return Err(ApiError::bad_request(format!("label {what} is empty")));
    }
    if text.chars().count() > MAX_LABEL_CHARS {
        return Err(ApiError::bad_request(format!(
            "label {what} {:?}... is longer than {MAX_LABEL_CHARS} characters",
            shown()
        )));
    }
    let allowed =
        |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') || (slash && c == '/');
    if let Some(bad) = text.chars().find(|c| !allowed(*c)) {
        let alphabet = if slash {
            "a-z, A-Z, 0-9, '-', '_', '.' and '/'"
        } else {
            "a-z, A-Z, 0-9, '-', '_' and '.'"
        };
        return Err(ApiError::bad_request(format!(
            "label {what} {:?} holds {bad:?}: only {alphabet} are allowed",
            shown()
        )));
    }
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !edge(text.chars().next()) || !edge(text.chars().last()) {
        return Err(ApiError::bad_request(format!(
            "label {what} {:?} must start and end with a letter or digit",
            shown()
        )));
    }
    Ok(())
}

/// Parses `k=v` (a label to set) as the CLI and the list query take it.
///
/// # Errors
/// 400 if there is no `=`, or the label breaks a rule.
pub fn parse_pair(text: &str) -> Result<(String, String), ApiError> {
    let Some((key, value)) = text.split_once('=') else {
        return Err(ApiError::bad_request(format!(
            "label {text:?} is not KEY=VALUE"
        )));
    };
    check_key(key)?;
    check_value(key, value)?;
    Ok((key.to_owned(), value.to_owned()))
}

/// A change to an actor's labels: a JSON merge patch of the map (RFC
/// 7396): `{"tier": "gold", "beta": null}` sets `tier` and removes `beta`;
/// keys it does not name keep their values.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct LabelPatch(pub BTreeMap<String, Option<String>>);

impl LabelPatch {
    /// Checks every key and value it sets.
    ///
    /// # Errors
    /// 400 naming the first label that breaks a rule.
    pub fn check(&self) -> Result<(), ApiError> {
        for (key, value) in &self.0 {
            check_key(key)?;
            if let Some(value) = value {
                check_value(key, value)?;
            }
        }
        Ok(())
    }

    /// `labels` with this patch applied.
    ///
    /// # Errors
    /// 400 if the result would hold more than [`MAX_LABELS`] labels (then
    /// `labels` is unchanged).
    pub fn apply(&self, labels: &Labels) -> Result<Labels, ApiError> {
        let mut out = labels.clone();
        for (key, value) in &self.0 {
            match value {
                Some(value) => out.insert(key.clone(), value.clone()),
                None => out.remove(key),
            };
        }
        check_count(out.len())?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_follow_the_documented_rules() {
        for good in ["tier", "app.kubernetes.io/name", "a", "A-1_b.c"] {
            check_key(good).expect(good);
        }
        for bad in ["", "-a", "a-", "a b", "ü", &"k".repeat(64)] {
            let e = check_key(bad).expect_err(bad);
            assert!(e.to_string().contains("label key"), "{e}");
        }
        check_value("k", "").expect("an empty value");
        let e = check_value("k", "a/b").expect_err("a slash in a value");
        assert!(e.to_string().contains("value of \"k\""), "{e}");
        let e = parse_pair("tier").expect_err("no =");
        assert!(e.to_string().contains("KEY=VALUE"), "{e}");
        assert_eq!(parse_pair("t=g").expect("pair"), ("t".into(), "g".into()));
    }

    #[test]
    fn a_patch_sets_and_removes_within_the_bound() {
        let labels: Labels = [("a".into(), "1".into()), ("b".into(), "2".into())].into();
        let patch: LabelPatch =
            serde_json::from_str(r#"{"a":"9","b":null,"c":""}"#).expect("patch");
        let out = patch.apply(&labels).expect("applied");
        assert_eq!(
            out,
            [("a".into(), "9".into()), ("c".into(), String::new())].into()
        );
        let many = LabelPatch(
            (0..=MAX_LABELS)
                .map(|i| (format!("k{i}"), Some("v".into())))
                .collect(),
        );
        let e = many.apply(&Labels::new()).expect_err("too many");
        assert!(e.to_string().contains("at most 16 labels"), "{e}");
    }
}
