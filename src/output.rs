//! Rendering admin API answers: pretty JSON that keeps the server's field
//! order (`-o json`), and aligned tables or `key: value` lines (`-o table`).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// A JSON value that keeps object keys in the order the server sent them
/// (`serde_json::Value` sorts them), so `-o json` prints exactly what the
/// server answered, only re-indented.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number, as `serde_json` reads it.
    Number(serde_json::Number),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Json>),
    /// An object, keys in the order they were read.
    Object(Vec<(String, Json)>),
}

impl Json {
    /// Parses a JSON document.
    ///
    /// # Errors
    /// The bytes are not one JSON value.
    pub(crate) fn parse(bytes: &[u8]) -> serde_json::Result<Self> {
        serde_json::from_slice(bytes)
    }

    /// The value under `key` when `self` is an object (the first one if the
    /// key repeats).
    #[must_use]
    pub(crate) fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string, if `self` is one.
    #[must_use]
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// The number as `u64`, if `self` is a non-negative integer.
    #[must_use]
    pub(crate) fn as_u64(&self) -> Option<u64> {
        match self {
            Json::Number(n) => n.as_u64(),
            _ => None,
        }
    }

    /// Indented JSON, two spaces per level, without a trailing newline.
    #[must_use]
    pub(crate) fn to_pretty(&self) -> String {
        // Serializing a tree of strings, numbers and containers cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// JSON on one line.
    #[must_use]
    pub(crate) fn to_compact(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => serializer.serialize_unit(),
            Json::Bool(b) => serializer.serialize_bool(*b),
            Json::Number(n) => n.serialize(serializer),
            Json::String(s) => serializer.serialize_str(s),
            Json::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Json::Object(fields) => {
                let mut map = serializer.serialize_map(Some(fields.len()))?;
                for (k, v) in fields {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Json, D::Error> {
        Json::deserialize(d)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Json::Null, Json::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
        while let Some((k, v)) = map.next_entry::<String, Json>()? {
            fields.push((k, v));
        }
        Ok(Json::Object(fields))
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

/// A size for people: `512 B`, `81.9 KiB`, `3.4 MiB`.
#[must_use]
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    #[allow(clippy::cast_precision_loss, reason = "one decimal is all we show")]
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A duration in milliseconds for people: `1.800 ms`.
#[must_use]
pub(crate) fn human_ms(ms: f64) -> String {
    format!("{ms:.3} ms")
}

/// One line with control characters (newlines, tabs, escapes) replaced by
/// spaces, so a server string cannot break the layout or the terminal.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A table cell for a plain value: `-` for missing or `null`.
fn cell(value: Option<&Json>) -> String {
    match value {
        None | Some(Json::Null) => "-".to_owned(),
        Some(Json::String(s)) if s.is_empty() => "-".to_owned(),
        Some(Json::String(s)) => one_line(s),
        Some(Json::Bool(b)) => b.to_string(),
        Some(Json::Number(n)) => n.to_string(),
        Some(other) => one_line(&other.to_compact()),
    }
}

/// A table cell for a byte count: human size, or the raw cell.
fn bytes_cell(value: Option<&Json>) -> String {
    match value.and_then(Json::as_u64) {
        Some(n) => human_bytes(n),
        None => cell(value),
    }
}

/// `K=V,K2=V2` for an env object, `-` when empty.
fn env_cell(value: Option<&Json>) -> String {
    match value {
        Some(Json::Object(fields)) if !fields.is_empty() => one_line(
            &fields
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{k}={}",
                        v.as_str().map_or_else(|| v.to_compact(), str::to_owned)
                    )
                })
                .collect::<Vec<_>>()
                .join(","),
        ),
        Some(Json::Object(_)) => "-".to_owned(),
        other => cell(other),
    }
}

/// `3 (12.1 KiB)` for a snapshot entry `{"seq": 3, "bytes": 12345}`.
fn snapshot_text(entry: &Json) -> String {
    match (
        entry.get("seq").and_then(Json::as_u64),
        entry.get("bytes").and_then(Json::as_u64),
    ) {
        (Some(seq), Some(bytes)) => format!("{seq} ({})", human_bytes(bytes)),
        (Some(seq), None) => seq.to_string(),
        _ => cell(Some(entry)),
    }
}

/// Aligned columns under a header line; columns are separated by three
/// spaces and the last one is not padded.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these column names.
    #[must_use]
    pub(crate) fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (missing cells render empty, extra cells are dropped).
    pub(crate) fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    /// The rendered table, one line per row, each ending in `\n`.
    #[must_use]
    pub(crate) fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, value) in widths.iter_mut().zip(row) {
                *width = (*width).max(value.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, width) in widths.iter().enumerate() {
                let value = row.get(i).map_or("", String::as_str);
                if i + 1 == columns {
                    line.push_str(value);
                } else {
                    line.push_str(value);
                    let pad = width - value.chars().count() + 3;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// The elements of a list answer (a lone object counts as a list of one).
fn items(list: &Json) -> Vec<&Json> {
    match list {
        Json::Array(items) => items.iter().collect(),
        Json::Null => Vec::new(),
        other => vec![other],
    }
}

/// `no <what>` when the list is empty, else the table.
fn table_or_none(table: &Table, what: &str) -> String {
    if table.rows.is_empty() {
        format!("no {what}\n")
    } else {
        table.render()
    }
}

/// Actors: NAME TEMPLATE VERSION STATE WORKER EPOCH SNAPSHOT RESUMES
/// LABELS (SNAPSHOT is the newest snapshot's sequence number, VERSION the
/// template version it runs).
#[must_use]
pub(crate) fn actors_table(list: &Json) -> String {
    let mut table = Table::new(&[
        "NAME", "TEMPLATE", "VERSION", "STATE", "WORKER", "EPOCH", "SNAPSHOT", "RESUMES", "LABELS",
    ]);
    for actor in items(list) {
        table.push(vec![
            cell(actor.get("name")),
            cell(actor.get("template")),
            cell(actor.get("template_version")),
            cell(actor.get("state")),
            cell(actor.get("worker")),
            cell(actor.get("epoch")),
            cell(actor.get("snapshot").and_then(|s| s.get("seq"))),
            cell(actor.get("resumes")),
            env_cell(actor.get("labels")),
        ]);
    }
    table_or_none(&table, "actors")
}

/// Templates: NAME VERSION (the newest) DIGEST (first 12 hex digits)
/// BYTES ACTORS (of every version) DURABILITY ENV.
#[must_use]
pub(crate) fn templates_table(list: &Json) -> String {
    let mut table = Table::new(&[
        "NAME",
        "VERSION",
        "DIGEST",
        "BYTES",
        "ACTORS",
        "DURABILITY",
        "ENV",
    ]);
    for template in items(list) {
        let digest = cell(template.get("digest"));
        table.push(vec![
            cell(template.get("name")),
            cell(template.get("version")),
            digest.chars().take(12).collect(),
            bytes_cell(template.get("bytes")),
            cell(template.get("actors")),
            cell(template.get("durability")),
            env_cell(template.get("env")),
        ]);
    }
    table_or_none(&table, "templates")
}

/// Workers: NAME ADDRESS STATE ACTORS MEMORY.
#[must_use]
pub(crate) fn workers_table(list: &Json) -> String {
    let mut table = Table::new(&["NAME", "ADDRESS", "STATE", "ACTORS", "MEMORY"]);
    for worker in items(list) {
        table.push(vec![
            cell(worker.get("name")),
            cell(worker.get("address")),
            cell(worker.get("state")),
            cell(worker.get("actors")),
            bytes_cell(worker.get("memory_bytes")),
        ]);
    }
    table_or_none(&table, "workers")
}

/// Scoped tokens: ID ROLE NAMESPACE CREATED EXPIRES DESCRIPTION (the
/// namespace `*` for a token of every namespace), or `no tokens`.
#[must_use]
pub(crate) fn tokens_table(list: &Json) -> String {
    let mut table = Table::new(&[
        "ID",
        "ROLE",
        "NAMESPACE",
        "CREATED",
        "EXPIRES",
        "DESCRIPTION",
    ]);
    for token in items(list) {
        table.push(vec![
            cell(token.get("id")),
            cell(token.get("role")),
            match token.get("namespace") {
                None => "*".to_owned(),
                namespace => cell(namespace),
            },
            cell(token.get("created_at")),
            match token.get("expires_at") {
                None => "never".to_owned(),
                expires => cell(expires),
            },
            cell(token.get("description")),
        ]);
    }
    table_or_none(&table, "tokens")
}

/// Rebalance moves: ACTOR FROM TO RESULT, or `no moves`. RESULT is the
/// downtime of a move done (`moved in 12.5 ms`) or why it failed
/// (`failed: ...`; the actor stayed on FROM).
#[must_use]
pub(crate) fn moves_table(answer: &Json) -> String {
    let mut table = Table::new(&["ACTOR", "FROM", "TO", "RESULT"]);
    for entry in answer.get("moves").map(items).unwrap_or_default() {
        let result = match (entry.get("error"), entry.get("downtime_ms")) {
            (Some(Json::String(e)), _) => format!("failed: {}", one_line(e)),
            (_, Some(Json::Number(ms))) => format!("moved in {ms} ms"),
            _ => "moved".to_owned(),
        };
        table.push(vec![
            cell(entry.get("actor")),
            cell(entry.get("from")),
            cell(entry.get("to")),
            result,
        ]);
    }
    table_or_none(&table, "moves")
}

/// How many of a rebalance's moves failed.
#[must_use]
pub(crate) fn failed_moves(answer: &Json) -> usize {
    answer
        .get("moves")
        .map(items)
        .unwrap_or_default()
        .iter()
        .filter(|m| matches!(m.get("error"), Some(Json::String(_))))
        .count()
}

/// The value of one `key: value` line, formatted by what the key means.
fn detail_value(key: &str, value: &Json) -> String {
    match (key, value) {
        (_, Json::Null) => "-".to_owned(),
        ("snapshot", Json::Object(_)) => snapshot_text(value),
        ("snapshots", Json::Array(entries)) if entries.is_empty() => "-".to_owned(),
        ("snapshots", Json::Array(entries)) => entries
            .iter()
            .map(snapshot_text)
            .collect::<Vec<_>>()
            .join(", "),
        ("env", Json::Object(_)) => env_cell(Some(value)),
        (k, Json::Number(n)) if k == "bytes" || k.ends_with("_bytes") || k == "bytes_written" => {
            n.as_u64().map_or_else(|| n.to_string(), human_bytes)
        }
        (k, Json::Number(n)) if k.ends_with("_unix_ms") => n.to_string(),
        (k, Json::Number(n)) if k.ends_with("_ms") => {
            n.as_f64().map_or_else(|| n.to_string(), human_ms)
        }
        _ => cell(Some(value)),
    }
}

/// One object as `key: value` lines in the server's field order, values
/// aligned; sizes and durations are shown for people. A non-object is
/// printed as pretty JSON.
#[must_use]
pub(crate) fn details(object: &Json) -> String {
    let Json::Object(fields) = object else {
        return format!("{}\n", object.to_pretty());
    };
    let width = fields
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (key, value) in fields {
        let key = one_line(key);
        let pad = width - key.chars().count() + 1;
        out.push_str(&key);
        out.push(':');
        out.extend(std::iter::repeat_n(' ', pad));
        out.push_str(&detail_value(&key, value));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;
