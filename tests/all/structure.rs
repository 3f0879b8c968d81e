//! The layering docs/architecture.md states, checked against the code:
//! which crate may depend on which (read from each crate's `Cargo.toml`,
//! the arrows cargo itself enforces), and that no source file outside tests
//! and benches grows past 600 lines.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `stasis-*` crates `crate_dir`'s manifest names under
/// `[dependencies]` (dev-dependencies are not arrows of the build).
fn stasis_dependencies(crate_dir: &str) -> Vec<String> {
    let manifest = std::fs::read_to_string(root().join(crate_dir).join("Cargo.toml"))
        .unwrap_or_else(|e| panic!("{crate_dir}/Cargo.toml: {e}"));
    let mut in_dependencies = false;
    let mut found = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
            continue;
        }
        if in_dependencies
            && let Some(name) = line.split(['.', ' ', '=']).next()
            && name.starts_with("stasis-")
        {
            found.push(name.to_owned());
        }
    }
    found
}

#[test]
fn each_side_depends_on_the_contract_and_never_on_the_other() {
    let worker = stasis_dependencies("worker");
    let control = stasis_dependencies("control");
    assert!(worker.contains(&"stasis-contract".to_owned()), "{worker:?}");
    assert!(
        control.contains(&"stasis-contract".to_owned()),
        "{control:?}"
    );
    let upper = ["stasis-cluster", "stasis-ingress", "stasis-runtime"];
    for (side, deps, other) in [
        ("stasis-worker", &worker, "stasis-control"),
        ("stasis-control", &control, "stasis-worker"),
    ] {
        for forbidden in upper.iter().chain([&other]) {
            assert!(
                !deps.iter().any(|d| d == forbidden),
                "{side} depends on {forbidden}: {deps:?}"
            );
        }
    }
}

#[test]
fn the_contract_depends_on_neither_side() {
    let contract = stasis_dependencies("contract");
    let allowed = ["stasis-core", "stasis-host-api"];
    for dependency in &contract {
        assert!(
            allowed.contains(&dependency.as_str()),
            "stasis-contract depends on {dependency}: {contract:?}"
        );
    }
    let http = stasis_dependencies("http");
    assert_eq!(http, ["stasis-contract"], "stasis-http: {http:?}");
}

#[test]
fn the_edge_depends_on_the_control_side_only() {
    let ingress = stasis_dependencies("ingress");
    assert!(
        ingress.contains(&"stasis-control".to_owned()),
        "{ingress:?}"
    );
    for forbidden in ["stasis-worker", "stasis-cluster", "stasis-runtime"] {
        assert!(
            !ingress.iter().any(|d| d == forbidden),
            "stasis-ingress depends on {forbidden}: {ingress:?}"
        );
    }
    let cluster = stasis_dependencies("cluster");
    for forbidden in ["stasis-control", "stasis-ingress", "stasis-runtime"] {
        assert!(
            !cluster.iter().any(|d| d == forbidden),
            "stasis-cluster depends on {forbidden}: {cluster:?}"
        );
    }
}

/// The cluster backends (the etcd directory, leases, election, the client
/// of a remote worker) know a worker only through the contract's
/// `WorkerApi`: `stasis worker run`, which hosts a `stasis-worker` worker,
/// is assembled in `stasis-runtime`.
#[test]
fn the_cluster_backends_do_not_depend_on_the_worker() {
    let cluster = stasis_dependencies("cluster");
    assert!(
        cluster.contains(&"stasis-contract".to_owned()),
        "{cluster:?}"
    );
    assert!(
        !cluster.iter().any(|d| d == "stasis-worker"),
        "stasis-cluster depends on stasis-worker: {cluster:?}"
    );
    let runtime = stasis_dependencies("runtime");
    for needed in ["stasis-worker", "stasis-cluster"] {
        assert!(
            runtime.contains(&needed.to_owned()),
            "stasis-runtime (which assembles `stasis worker run`) lacks {needed}: {runtime:?}"
        );
    }
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files_in(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files_in(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every crate's source folder.
const SOURCES: [&str; 12] = [
    "src",
    "core/src",
    "host-api/src",
    "guest-sdk/src",
    "contract/src",
    "http/src",
    "worker/src",
    "control/src",
    "cluster/src",
    "ingress/src",
    "runtime/src",
    "test-util/src",
];

/// Every `.rs` file under each of `dirs` (relative to the project root).
fn rust_files(dirs: &[&str]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in dirs {
        rust_files_in(&root().join(dir), &mut files);
    }
    files
}

#[test]
fn no_source_file_outside_tests_and_benches_is_over_600_lines() {
    let files = rust_files(&SOURCES);
    assert!(files.len() > 50, "found only {} files", files.len());
    let long: Vec<String> = files
        .iter()
        .filter(|f| !f.components().any(|c| c.as_os_str() == "tests"))
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).ok()?.lines().count();
            (lines > 600).then(|| format!("{} ({lines} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "over 600 lines: {long:?}");
}

#[test]
fn every_source_file_opens_with_a_module_doc() {
    let files = rust_files(&[
        "contract/src",
        "http/src",
        "worker/src",
        "control/src",
        "cluster/src",
        "ingress/src",
        "runtime/src",
    ]);
    let undocumented: Vec<String> = files
        .iter()
        .filter(|f| {
            std::fs::read_to_string(f).is_ok_and(|text| !text.trim_start().starts_with("//!"))
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(undocumented.is_empty(), "no //! doc: {undocumented:?}");
}

/// The lines of `struct NAME { ... }` in `file` (from its opening line to
/// the first line that is only `}`).
fn struct_body(file: &str, name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let opening = format!("struct {name} {{");
    let body: Vec<String> = text
        .lines()
        .skip_while(|line| !line.contains(&opening))
        .skip(1)
        .take_while(|line| line.trim() != "}")
        .map(str::to_owned)
        .collect();
    assert!(!body.is_empty(), "no struct {name} in {file}");
    body
}

/// The actor task has an inside: its fields are its own (issue 45), and
/// the files of its paths (its child modules) take from it, never it from
/// them, so they form no circle.
#[test]
fn the_actor_task_keeps_its_fields_private_and_imports_none_of_its_paths() {
    for name in ["ActorTask", "Kept"] {
        let public: Vec<String> = struct_body("worker/src/actor/mod.rs", name)
            .into_iter()
            .filter(|line| line.trim_start().starts_with("pub"))
            .collect();
        assert!(public.is_empty(), "{name} has pub fields: {public:?}");
    }
    let text = std::fs::read_to_string(root().join("worker/src/actor/mod.rs")).unwrap();
    let children: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    assert!(children.len() >= 5, "{children:?}");
    let imports_child: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("use ") || line.starts_with("pub use "))
        .filter(|line| {
            children.iter().any(|child| {
                line.contains(&format!("use self::{child}"))
                    || line.contains(&format!("use {child}::"))
            })
        })
        .collect();
    assert!(imports_child.is_empty(), "{imports_child:?}");
}

/// Where a function that starts at `lines[start]` ends: the first later
/// line at its indentation that closes a brace (`None` for a declaration
/// without a body).
fn function_end(lines: &[&str], start: usize) -> Option<usize> {
    let indent = lines[start].len() - lines[start].trim_start().len();
    let opens = (start..lines.len()).find(|&i| {
        let line = lines[i].trim_end();
        line.ends_with('{') || line.ends_with(';')
    })?;
    if lines[opens].trim_end().ends_with(';') {
        return None;
    }
    (opens + 1..lines.len()).find(|&i| {
        let line = lines[i];
        line.len() - line.trim_start().len() == indent && line.trim_start().starts_with('}')
    })
}

/// Whether `line` starts a function (`fn`, after `pub`, `const`, `async`,
/// `unsafe` or `extern "C"`).
fn starts_function(line: &str) -> bool {
    let mut rest = line.trim_start();
    loop {
        let before = rest;
        for prefix in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "const ",
            "async ",
            "unsafe ",
        ] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        rest = rest.strip_prefix("extern \"C\" ").unwrap_or(rest);
        if rest == before {
            break;
        }
    }
    rest.starts_with("fn ")
}

/// Functions are cut by job: none outside tests is over 120 lines (issue
/// 45; the 600-line file limit above is the backstop).
#[test]
fn no_function_outside_tests_is_over_120_lines() {
    let files = rust_files(&SOURCES);
    let mut long = Vec::new();
    for file in files
        .iter()
        .filter(|f| !f.components().any(|c| c.as_os_str() == "tests"))
        .filter(|f| f.file_name().is_none_or(|n| n != "tests.rs"))
    {
        let text = std::fs::read_to_string(file).unwrap();
        // An inline test module closes a file: nothing after it counts.
        let lines: Vec<&str> = text
            .lines()
            .take_while(|line| *line != "#[cfg(test)]")
            .collect();
        for start in (0..lines.len()).filter(|&i| starts_function(lines[i])) {
            if let Some(end) = function_end(&lines, start)
                && end - start + 1 > 120
            {
                long.push(format!(
                    "{}:{} ({} lines)",
                    file.display(),
                    start + 1,
                    end - start + 1
                ));
            }
        }
    }
    assert!(long.is_empty(), "functions over 120 lines: {long:?}");
}

/// Every file under `dir`, recursively, whatever its kind.
fn files_in(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            files_in(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// The tests wait on events, not time (issue 45 item 7): a poll sleeps
/// only in `stasis_test_util::wait` (not under tests/), and the few sleeps
/// left in tests/ are the point of their test, each saying why in a
/// `// sleep: <reason>` comment on its line or the line above.
#[test]
fn tests_sleep_only_where_the_time_is_the_point_and_say_why() {
    /// At most this many sleeps in tests/ (issue 45 item 7: at most 30): a
    /// ratchet, lowered as more sleeps give way to waits on events.
    const MOST: usize = 27;
    // Built, so that this file's own text holds no call.
    let call = concat!("sleep", "(");
    let mut files = Vec::new();
    files_in(&root().join("tests"), &mut files);
    let mut sleeps = Vec::new();
    let mut unexplained = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            for _ in line.matches(call) {
                let at = format!("{}:{}", file.display(), i + 1);
                let said = line.contains("sleep:") || (i > 0 && lines[i - 1].contains("sleep:"));
                if !said {
                    unexplained.push(at.clone());
                }
                sleeps.push(at);
            }
        }
    }
    assert!(
        unexplained.is_empty(),
        "sleeps with no `// sleep: <reason>` on their line or the line above \
         (wait on the event instead: stasis_test_util::wait): {unexplained:#?}"
    );
    assert!(
        sleeps.len() <= MOST,
        "{} sleeps in tests/, more than {MOST}: {sleeps:#?}",
        sleeps.len()
    );
}

/// docs/architecture.md tells the truth about where things are: every
/// path it names under one of the repository's folders exists (issue 45).
#[test]
fn every_path_the_architecture_page_names_exists() {
    let page = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let folders = [
        "src/",
        "core/",
        "host-api/",
        "guest-sdk/",
        "contract/",
        "http/",
        "worker/",
        "control/",
        "cluster/",
        "ingress/",
        "runtime/",
        "test-util/",
        "tests/",
        "benches/",
        "scripts/",
        "demos/",
        "docs/",
    ];
    let named: Vec<&str> = page
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|quoted| folders.iter().any(|folder| quoted.starts_with(folder)))
        .filter(|quoted| !quoted.contains(char::is_whitespace))
        .collect();
    assert!(named.len() > 20, "found only {named:?}");
    let missing: Vec<&&str> = named
        .iter()
        .filter(|path| !root().join(path).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md names missing paths: {missing:?}"
    );
}

/// A control plane's role is a type, not a field (issue 45): the role is
/// read in one `match` where a control plane is built, never compared;
/// a follower has no decider; `ControlPlane` keeps at most 12 fields.
#[test]
fn the_role_is_read_once_and_the_control_plane_stays_small() {
    let files = rust_files(&["control/src", "runtime/src", "ingress/src", "cluster/src"]);
    let mut matches = Vec::new();
    let mut compared = Vec::new();
    for file in files
        .iter()
        .filter(|f| !f.components().any(|c| c.as_os_str() == "tests"))
    {
        let text = std::fs::read_to_string(file).unwrap();
        for (i, line) in text.lines().enumerate() {
            let at = || format!("{}:{}", file.display(), i + 1);
            if line.contains("match role") {
                matches.push(at());
            }
            if line.contains("== Role::") || line.contains("!= Role::") || line.contains(".role()")
            {
                compared.push(at());
            }
        }
    }
    assert_eq!(matches.len(), 1, "{matches:?}");
    assert!(compared.is_empty(), "the role compared: {compared:?}");
    let fields: Vec<String> = struct_body("control/src/lib.rs", "ControlPlane")
        .into_iter()
        .filter(|line| {
            let line = line.trim_start();
            !line.starts_with("//") && !line.starts_with('#') && line.contains(": ")
        })
        .collect();
    assert!(fields.len() <= 12, "{} fields: {fields:?}", fields.len());
}
