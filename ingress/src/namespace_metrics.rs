//! `/metrics` as one namespace sees it: the samples whose `actor` or
//! `template` label is of that namespace (full names, see
//! [`stasis_contract::names`]), and none of the rest — the server-wide
//! series (workers, placements, every template's) are not a namespace's to
//! read. What a token made for a namespace gets from `/metrics`, and what
//! `/v1/namespaces/{ns}/metrics` answers.

use stasis_contract::names::namespace_of;

/// The labels that name a namespace's actor or template.
const SCOPING_LABELS: [&str; 2] = ["actor", "template"];

/// The exposition `text` (Prometheus/OpenMetrics text format) with only
/// the samples of namespace `namespace`; comment lines (`# HELP`, `# TYPE`,
/// `# EOF`) are kept, so every family is still described.
#[must_use]
pub fn only_namespace(text: &str, namespace: &str) -> String {
    let mut kept = String::with_capacity(text.len() / 4);
    for line in text.lines() {
        let keep = line.starts_with('#')
            || labels(line).is_some_and(|labels| {
                labels.iter().any(|(name, value)| {
                    SCOPING_LABELS.contains(&name.as_str()) && namespace_of(value) == namespace
                })
            });
        if keep {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

/// The labels of sample line `line` (`name{a="x",b="y"} value`), values
/// unescaped; `None` for a line without labels or one that does not parse.
fn labels(line: &str) -> Option<Vec<(String, String)>> {
    let open = line.find('{')?;
    let mut rest = line[open + 1..].chars().peekable();
    let mut labels = Vec::new();
    loop {
        while rest.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            rest.next();
        }
        if rest.peek() == Some(&'}') {
            return Some(labels);
        }
        let name: String = rest.by_ref().take_while(|c| *c != '=').collect();
        if rest.next()? != '"' {
            return None;
        }
        let mut value = String::new();
        loop {
            match rest.next()? {
                '"' => break,
                '\\' => match rest.next()? {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                c => value.push(c),
            }
        }
        labels.push((name.trim().to_owned(), value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP stasis_requests Requests answered, by template and status.
# TYPE stasis_requests counter
stasis_requests_total{template="counter",status="200"} 3
stasis_requests_total{template="counter.team-a",status="200"} 2
stasis_requests_total{status="404",template="counter.team-b"} 1
# TYPE stasis_actor_requests counter
stasis_actor_requests_total{actor="c1.team-a",status="200"} 2
# TYPE stasis_workers gauge
stasis_workers 2
stasis_resumes_total{worker="w1.team-a"} 4
# EOF
"#;

    #[test]
    fn a_namespace_sees_its_actors_and_templates_only() {
        let seen = only_namespace(TEXT, "team-a");
        assert!(seen.contains(r#"template="counter.team-a""#), "{seen}");
        assert!(seen.contains(r#"actor="c1.team-a""#), "{seen}");
        for foreign in [
            r#"template="counter","#,
            "counter.team-b",
            "stasis_workers 2",
            "w1.team-a",
        ] {
            assert!(!seen.contains(foreign), "{foreign} in {seen}");
        }
        assert!(seen.contains("# TYPE stasis_workers gauge"), "{seen}");
        assert!(seen.ends_with("# EOF\n"), "{seen}");
        let default = only_namespace(TEXT, "default");
        assert!(default.contains(r#"template="counter","#), "{default}");
        assert!(!default.contains("team-a\""), "{default}");
    }

    #[test]
    fn labels_are_read_with_their_escapes() {
        assert_eq!(
            labels(r#"m{a="x\"y",b="\\"} 1"#),
            Some(vec![
                ("a".to_owned(), "x\"y".to_owned()),
                ("b".to_owned(), "\\".to_owned())
            ])
        );
        assert_eq!(labels("m 1"), None);
        assert_eq!(labels(r#"m{a=x} 1"#), None);
    }
}
