//! What a call sends and prints: the module file it uploads, and its
//! answer as a table or as the server's JSON.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use hyper::StatusCode;

use super::plan::{Call, View};
use crate::client::Reply;
use crate::output::{self, Json};
use crate::verbs::OutputFormat;

/// Reads the module to push, naming the path in any error.
pub(super) async fn read_module(path: &PathBuf) -> anyhow::Result<Bytes> {
    let metadata = tokio::fs::metadata(path)
        .await
        .with_context(|| format!("cannot read {}", path.display()))?;
    let entry = if metadata.is_dir() {
        folder_entry(path)?
    } else {
        path.clone()
    };
    let bytes = tokio::fs::read(&entry)
        .await
        .with_context(|| format!("cannot read {}", entry.display()))?;
    module_of(&entry, bytes).await
}

/// The entry script of the JavaScript or TypeScript project in folder
/// `dir`: its `package.json`'s `module` or `main`, else the first of
/// `index.ts`, `index.mts`, `index.js`, `index.mjs` there.
///
/// # Errors
/// A `package.json` that is not JSON, or no entry found.
fn folder_entry(dir: &Path) -> anyhow::Result<PathBuf> {
    let manifest = dir.join("package.json");
    if manifest.is_file() {
        let text = std::fs::read_to_string(&manifest)
            .with_context(|| format!("cannot read {}", manifest.display()))?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", manifest.display()))?;
        for field in ["module", "main"] {
            if let Some(entry) = json[field].as_str() {
                return Ok(dir.join(entry));
            }
        }
    }
    ["index.ts", "index.mts", "index.js", "index.mjs"]
        .iter()
        .map(|name| dir.join(name))
        .find(|candidate| candidate.is_file())
        .with_context(|| {
            format!(
                "{} is a directory with no entry script: name the file to push (.wasm, .js, \
                 .mjs, .ts, .mts), or give the folder a package.json with \"module\" or \"main\", \
                 or an index.ts / index.js",
                dir.display()
            )
        })
}

/// The module to push for the bytes `bytes` read from `path`: a script
/// built into its template module, a module as it is.
///
/// # Errors
/// Empty bytes, a script that does not build, a module over the limit.
pub(super) async fn module_of(path: &Path, bytes: Vec<u8>) -> anyhow::Result<Bytes> {
    if bytes.is_empty() {
        bail!("{} is empty, not a .wasm module", path.display());
    }
    // A script becomes the engine module, pre-initialised with it.
    let bytes = if crate::js_template::is_script(path) {
        crate::js_template::build(path, &bytes).await?
    } else {
        bytes
    };
    // Refused here rather than by the server mid-upload, which the client
    // would only see as a broken pipe.
    let limit = stasis_runtime::control::MAX_TEMPLATE_BYTES;
    if bytes.len() > limit {
        bail!(
            "{} is {} bytes, larger than the module size limit ({limit} bytes)",
            path.display(),
            bytes.len()
        );
    }
    Ok(Bytes::from(bytes))
}

/// The text printed for a successful answer.
pub(super) fn render(call: &Call, reply: &Reply) -> anyhow::Result<String> {
    let parsed = if reply.body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let json = Json::parse(&reply.body).map_err(|e| {
            anyhow!(
                "the admin API at {} answered {} with a body that is not JSON ({e})",
                call.client.admin,
                reply.status.as_u16()
            )
        })?;
        Some(json)
    };
    if call.client.output == OutputFormat::Json {
        return Ok(match parsed {
            Some(json) => format!("{}\n", json.to_pretty()),
            None => "{}\n".to_owned(),
        });
    }
    if call.view == View::Deleted {
        // "template delete counter" -> "template counter deleted".
        let mut words = call.what.splitn(3, ' ');
        let kind = words.next().unwrap_or("");
        let name = words.nth(1).unwrap_or("");
        let done = if call.what.starts_with("token revoke") {
            "revoked"
        } else {
            "deleted"
        };
        return Ok(format!("{kind} {name} {done}\n"));
    }
    let json = parsed.unwrap_or(Json::Null);
    Ok(match call.view {
        View::Actors => output::actors_table(&json),
        View::Templates => output::templates_table(&json),
        View::Workers => output::workers_table(&json),
        View::Moves => output::moves_table(&json),
        View::Pushed => {
            let name = json.get("name").and_then(Json::as_str).unwrap_or("?");
            let version = json.get("version").and_then(Json::as_u64).unwrap_or(1);
            let outcome = match (reply.status == StatusCode::CREATED, version) {
                (true, 1) => "created".to_owned(),
                // A new version of a template that exists.
                (true, v) => format!("version {v} pushed"),
                (false, _) => "unchanged (same bytes and env)".to_owned(),
            };
            format!("template {name} {outcome}\n{}", output::details(&json))
        }
        View::Rollout { .. } => super::rollout::render(&json),
        View::Tokens => output::tokens_table(&json),
        View::TokenCreated => {
            let token = json.get("token").and_then(Json::as_str).unwrap_or("?");
            let rest = match &json {
                Json::Object(fields) => Json::Object(
                    fields
                        .iter()
                        .filter(|(k, _)| k != "token")
                        .cloned()
                        .collect(),
                ),
                other => other.clone(),
            };
            format!(
                "{token}\n(shown only now: keep it; the server keeps only its digest)\n{}",
                output::details(&rest)
            )
        }
        View::Details | View::Deleted => output::details(&json),
    })
}

/// Writes to stdout; a closed pipe (`| head`) is not an error.
pub(super) fn print(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow!("cannot write to stdout: {e}"))
        }
        _ => Ok(()),
    }
}
