//! The files of a new TypeScript project (`stasis new ts NAME`): the
//! counter of the JavaScript project as `actor.ts`, its count kept by a
//! class in `src/counter.ts` (a local import), `stasis.d.ts` (the
//! engine's types: the module `stasis`, the handlers, the globals) and a
//! `tsconfig.json` with which `tsc --noEmit` checks the project as the
//! engine will run it (no DOM, only erasable TypeScript).

use super::Language;

/// The types of the module `stasis`, the handlers and the engine's globals.
const STASIS_D_TS: &str = include_str!("../../demos/js-engine/stasis.d.ts");

/// `tsc --noEmit` settings: the engine's ECMAScript and globals, ES
/// modules, and only TypeScript that erasing runs (no `enum`, no
/// `namespace`, `import type` for types).
const TSCONFIG: &str = r#"{
  "compilerOptions": {
    "target": "ES2023",
    "lib": ["ES2023"],
    "types": [],
    "module": "ESNext",
    "moduleResolution": "Bundler",
    "allowImportingTsExtensions": true,
    "verbatimModuleSyntax": true,
    "erasableSyntaxOnly": true,
    "isolatedModules": true,
    "strict": true,
    "noEmit": true
  },
  "include": ["**/*.ts"]
}
"#;

const ACTOR: &str = r#"// A Stasis actor: GET /count reads a counter, POST /count adds one; both
// answer {"count":N}. Module variables are its state (kept across pauses
// and moves); save() and load() hand it to the next version at an upgrade.
import type { Handler } from "stasis";
import { Counter, type Saved } from "./src/counter.ts";

const counter = new Counter();

export default {
  version: 1,
  async fetch(request) {
    const { pathname } = new URL(request.url);
    if (pathname !== "/count") {
      return new Response("not found", { status: 404 });
    }
    if (request.method === "POST") {
      counter.add();
    } else if (request.method !== "GET") {
      return new Response("method not allowed", { status: 405, headers: { allow: "GET, POST" } });
    }
    return Response.json({ count: counter.count });
  },
  save() {
    return counter.save();
  },
  load(value, fromVersion) {
    counter.load(value);
  },
} satisfies Handler<Saved>;
"#;

const COUNTER: &str = r#"// The actor's count, and what it hands to the next version.
export type Saved = { count: number };

export class Counter {
  count = 0;

  add(): number {
    this.count += 1;
    return this.count;
  }

  save(): Saved {
    return { count: this.count };
  }

  load(value: Saved): void {
    this.count = value.count;
  }
}
"#;

/// A TypeScript project named `name`.
pub(super) fn files(name: &str) -> Vec<(String, String)> {
    vec![
        ("actor.ts".to_owned(), ACTOR.to_owned()),
        ("src/counter.ts".to_owned(), COUNTER.to_owned()),
        ("stasis.d.ts".to_owned(), STASIS_D_TS.to_owned()),
        ("tsconfig.json".to_owned(), TSCONFIG.to_owned()),
        (
            "README.md".to_owned(),
            super::files::readme(Language::Ts, name),
        ),
    ]
}

/// What to run next (see [`super::files::next_steps`]).
pub(super) fn next_steps(name: &str, dir: &str) -> String {
    format!(
        "made {dir}: a TypeScript actor\n\
         \x20 cd {dir}\n\
         \x20 stasis dev actor.ts --template {name}              # push, create {name}, follow its log; each save rolls out\n\
         \x20 curl -X POST -H 'Host: {name}.actors.localhost' http://127.0.0.1:8000/count\n\
         \x20 npx -p typescript tsc --noEmit                       # type checks (stasis.d.ts, tsconfig.json)"
    )
}

/// The README's words after the steps.
pub(super) const README_TAIL: &str = "\n`stasis template push` erases the types (an `enum`, a \
    `namespace` or a parameter property is refused: `tsconfig.json` sets `erasableSyntaxOnly`) \
    and bundles the modules `actor.ts` imports, packages from `node_modules` too (ES modules \
    only). `stasis.d.ts` types the module `stasis`, the handlers and the engine's globals; \
    `tsc --noEmit` checks the project. `save()` and `load()` hand the count to the next \
    version when it is rolled out (`stasis dev` does at each save); the guide is \
    docs/javascript.md of Stasis.\n";
