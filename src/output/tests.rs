//! The tables and details `stasis` prints, pinned.

use super::*;

fn parse(s: &str) -> Json {
    Json::parse(s.as_bytes()).expect("test JSON parses")
}

#[test]
fn json_keeps_field_order_and_values() {
    let text =
        r#"{"name":"c1","epoch":1,"snapshot":null,"ms":1.5,"neg":-3,"list":[true,"x"],"a":{}}"#;
    let value = parse(text);
    assert_eq!(value.to_compact(), text);
    assert_eq!(value.get("epoch").and_then(Json::as_u64), Some(1));
    assert_eq!(value.get("ms").and_then(Json::as_str), None);
    assert_eq!(value.get("missing"), None);
    assert!(
        value
            .to_pretty()
            .starts_with("{\n  \"name\": \"c1\",\n  \"epoch\": 1,")
    );
}

#[test]
fn human_sizes() {
    assert_eq!(human_bytes(0), "0 B");
    assert_eq!(human_bytes(1023), "1023 B");
    assert_eq!(human_bytes(1024), "1.0 KiB");
    assert_eq!(human_bytes(83_871), "81.9 KiB");
    assert_eq!(human_bytes(3_538_944), "3.4 MiB");
    assert_eq!(human_bytes(u64::MAX), "16384.0 PiB");
}

#[test]
fn table_aligns_columns() {
    let mut table = Table::new(&["NAME", "STATE", "N"]);
    table.push(vec!["a-long-name".into(), "running".into(), "1".into()]);
    table.push(vec!["b".into(), "-".into(), "12".into()]);
    assert_eq!(
        table.render(),
        "NAME          STATE     N\n\
         a-long-name   running   1\n\
         b             -         12\n"
    );
}

#[test]
fn actors_table_renders_the_list() {
    let list = parse(
        r#"[
          {"name":"c1","template":"counter","template_version":1,"state":"running","worker":"worker-1","epoch":1,
           "snapshot":{"seq":3,"bytes":12345},"snapshots":[],"resumes":1,"labels":{"app":"x","tier":"gold"}},
          {"name":"counter-2","template":"counter","template_version":2,"state":"paused","worker":"worker-2","epoch":2,
           "snapshot":null,"snapshots":[],"resumes":0,"labels":{}}
        ]"#,
    );
    assert_eq!(
        actors_table(&list),
        "NAME        TEMPLATE   VERSION   STATE     WORKER     EPOCH   SNAPSHOT   RESUMES   LABELS\n\
         c1          counter    1         running   worker-1   1       3          1         app=x,tier=gold\n\
         counter-2   counter    2         paused    worker-2   2       -          0         -\n"
    );
    assert_eq!(actors_table(&parse("[]")), "no actors\n");
}

#[test]
fn templates_table_shortens_digest_and_joins_env() {
    let list = parse(
        r#"[{"name":"counter","version":2,"digest":"0123456789abcdef0123","bytes":83871,
             "env":{"A":"1","B":"x y"},"actors":2,"durability":"request"},
            {"name":"kv","version":1,"digest":"fedcba9876543210","bytes":100,"env":{},"actors":0}]"#,
    );
    assert_eq!(
        templates_table(&list),
        "NAME      VERSION   DIGEST         BYTES      ACTORS   DURABILITY   ENV\n\
         counter   2         0123456789ab   81.9 KiB   2        request      A=1,B=x y\n\
         kv        1         fedcba987654   100 B      0        -            -\n"
    );
}

#[test]
fn workers_and_moves_tables() {
    let list = parse(
        r#"[{"name":"worker-1","address":"in-process","state":"ready","actors":3,"memory_bytes":3538944}]"#,
    );
    assert_eq!(
        workers_table(&list),
        "NAME       ADDRESS      STATE   ACTORS   MEMORY\n\
         worker-1   in-process   ready   3        3.4 MiB\n"
    );
    assert_eq!(moves_table(&parse(r#"{"moves":[]}"#)), "no moves\n");
    assert_eq!(
        moves_table(&parse(
            r#"{"moves":[{"actor":"a","from":"worker-1","to":"worker-2","downtime_ms":1.5,"error":null},
                {"actor":"b","from":"worker-1","to":"worker-2","downtime_ms":null,"error":"worker-2 is\nlost"}]}"#
        )),
        "ACTOR   FROM       TO         RESULT\n\
         a       worker-1   worker-2   moved in 1.5 ms\n\
         b       worker-1   worker-2   failed: worker-2 is lost\n"
    );
}

#[test]
fn details_formats_pause_answers() {
    let pause = parse(
        r#"{"name":"c1","state":"paused","snapshot":{"seq":3,"bytes":2048},
            "snapshots":[{"seq":2,"bytes":1000},{"seq":3,"bytes":2048}],
            "last_resume_ms":null,"error":"line one\nline two",
            "snapshot_bytes":2048,"bytes_written":24580,"duration_ms":1.8}"#,
    );
    assert_eq!(
        details(&pause),
        "name:           c1\n\
         state:          paused\n\
         snapshot:       3 (2.0 KiB)\n\
         snapshots:      2 (1000 B), 3 (2.0 KiB)\n\
         last_resume_ms: -\n\
         error:          line one line two\n\
         snapshot_bytes: 2.0 KiB\n\
         bytes_written:  24.0 KiB\n\
         duration_ms:    1.800 ms\n"
    );
    assert_eq!(details(&parse("[1]")), "[\n  1\n]\n");
}

#[test]
fn tokens_table_shows_never_for_no_expiry() {
    let list = parse(
        r#"[{"id":"0123456789abcdef","role":"reader","created_at":"2026-12-05T10:00:00Z"},
            {"id":"fedcba9876543210","role":"admin","created_at":"2026-12-05T10:00:00Z",
             "expires_at":"2026-12-06T10:00:00Z","description":"ci","namespace":"team-a"}]"#,
    );
    let table = tokens_table(&list);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("ID"), "{table}");
    assert!(lines[0].contains("NAMESPACE"), "{table}");
    assert!(
        lines[1].contains("reader") && lines[1].contains("never") && lines[1].contains(" * "),
        "{table}"
    );
    assert!(lines[2].contains("team-a"), "{table}");
    assert!(
        lines[2].contains("2026-12-06T10:00:00Z") && lines[2].ends_with("ci"),
        "{table}"
    );
    assert_eq!(tokens_table(&parse("[]")).trim(), "no tokens");
}
