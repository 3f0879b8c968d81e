//! The module graph without the engine: names, resolution (TypeScript's
//! `.js` imports, packages), erased types keeping positions, and each
//! refusal's message.

use std::path::Path;

use super::*;

fn write(root: &Path, file: &str, text: &str) {
    let path = root.join(file);
    std::fs::create_dir_all(path.parent().expect("a folder")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

fn collect_in(root: &Path, entry: &str) -> anyhow::Result<Bundle> {
    let path = root.join(entry);
    let source = std::fs::read(&path).expect("the entry");
    collect(&path, &source)
}

#[test]
fn typescript_graph_names_modules_by_path_and_keeps_positions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(
        root,
        "app.ts",
        "import { add } from \"./src/lib.js\";\nimport { shout } from \"pkg\";\n\
         import { call } from \"stasis\";\ninterface X { a: number }\n\
         export default { fetch(r: Request): Response { return new Response(shout(String(add(1, 2)))); } };\n",
    );
    write(
        root,
        "src/lib.ts",
        "export function add(a: number, b: number): number {\n  return a + b;\n}\n",
    );
    write(
        root,
        "node_modules/pkg/package.json",
        r#"{"name":"pkg","type":"module","exports":{".":{"import":"./esm/index.js","require":"./cjs/index.cjs"}}}"#,
    );
    write(
        root,
        "node_modules/pkg/esm/index.js",
        "export const shout = (s) => s.toUpperCase();\n",
    );
    let bundle = collect_in(root, "app.ts").expect("bundled");
    let names: Vec<&str> = bundle.modules.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names,
        ["app.ts", "src/lib.ts", "node_modules/pkg/esm/index.js"]
    );
    assert_eq!(
        bundle.modules[0].imports,
        [
            ("./src/lib.js".to_owned(), "src/lib.ts".to_owned()),
            ("pkg".to_owned(), "node_modules/pkg/esm/index.js".to_owned()),
        ]
    );
    // Types are blanks: the same lines, the same columns.
    let lib = &bundle.modules[1].source;
    assert!(
        lib.starts_with("export function add(a        , b        )         {\n"),
        "{lib}"
    );
    assert_eq!(lib.lines().count(), 3);
    let app = &bundle.modules[0].source;
    assert!(
        !app.contains("interface") && !app.contains(": Request"),
        "{app}"
    );
    assert_eq!(app.lines().count(), 5);
    // The table the engine reads starts with the module count.
    assert_eq!(bundle.encode()[..4], 3u32.to_le_bytes());
}

#[test]
fn typescript_refusals_name_the_file_line_and_what_is_wrong() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let refusal = |entry: &str, text: &str| -> String {
        write(root, entry, text);
        match collect_in(root, entry) {
            Ok(_) => panic!("{entry} was bundled"),
            Err(e) => format!("{e:#}"),
        }
    };
    let missing = refusal(
        "a.ts",
        "const x = 1;\nimport { y } from \"./nowhere\";\nexport default {};\n",
    );
    assert!(
        missing.contains("a.ts:2: cannot find module \"./nowhere\""),
        "{missing}"
    );
    assert!(!missing.contains(&root.display().to_string()), "{missing}");
    write(
        root,
        "node_modules/old/package.json",
        r#"{"name":"old","main":"index.js"}"#,
    );
    write(
        root,
        "node_modules/old/index.js",
        "module.exports = { f: () => require(\"fs\") };\n",
    );
    let cjs = refusal("b.ts", "import old from \"old\";\nexport default {};\n");
    assert!(
        cjs.contains("node_modules/old/index.js is a CommonJS module"),
        "{cjs}"
    );
    let node = refusal("c.js", "import fs from \"node:fs\";\nexport default {};\n");
    assert!(
        node.contains("c.js:1") && node.contains("Node.js built-in"),
        "{node}"
    );
    let enumeration = refusal(
        "d.ts",
        "let a = 1;\n\nenum Color { Red, Green }\nexport default {};\n",
    );
    assert!(
        enumeration.contains("d.ts at line 3, column 1: TypeScript enum is not supported"),
        "{enumeration}"
    );
    let syntax = refusal("e.ts", "let a: number = ;\nexport default {};\n");
    assert!(
        syntax.contains("e.ts at line 1") && syntax.contains("syntax error"),
        "{syntax}"
    );
    let big = format!("export const s = \"{}\";\n", "x".repeat(MAX_SOURCE_BYTES));
    let over = refusal("f.js", &big);
    assert!(
        over.contains("more than 8 MiB of source (8388608 bytes"),
        "{}",
        &over[..over.len().min(300)]
    );
}
