//! The conformance test of docs/javascript.md's "Supported APIs" (issue
//! 48, item 3): every API the table names (each backticked name in a
//! row's first cell) has a check here that runs it in a JavaScript actor
//! through the real binary, and every check names an API of the table, so
//! the table and the engine cannot drift apart. The globals the docs list
//! as not supported are checked to be absent.

use std::collections::BTreeSet;

use crate::js::engine_built;
use crate::outbound::origin;
use crate::support::{Server, client, to_actor};

/// The actor. `GET /?origin=URL` runs every check and answers
/// `{"checks": {API: true | "what went wrong"}, "missing": {...}}`;
/// `/ping` answers `pong` and counts, `/pings` answers the count (the
/// peer's side of `stasis.call` and `send`).
const SCRIPT: &str = r##"
import * as stasis from "stasis";

let pinged = 0;
const enc = new TextEncoder();
const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, "0")).join("");
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b) || `${JSON.stringify(a)} != ${JSON.stringify(b)}`;
const rejects = (promise, name) => promise.then(
  () => `resolved where ${name} was expected`,
  (e) => e.name === name || `${e.name}: ${e.message}`,
);
class Tally { #n = 0; add() { return ++this.#n; } static of() { return new Tally(); } }
function* naturals() { let n = 0; while (true) yield n++; }

const checks = {
  "class": () => { const t = Tally.of(); t.add(); return same(t.add(), 2); },
  "Map": () => same([...new Map([[1, "a"], [2, "b"]]).entries()], [[1, "a"], [2, "b"]]),
  "Set": () => same(new Set([1, 1, 2]).size, 2),
  "Promise": async () => same([
    await Promise.all([1, Promise.resolve(2)]),
    await Promise.any([Promise.reject(new Error("x")), 3]),
    (await Promise.allSettled([Promise.reject(new Error("no"))]))[0].status,
  ], [[1, 2], 3, "rejected"]),
  "async": async () => same(await (async () => 7)(), 7),
  "await": async () => { let step = 0; const p = (async () => { await null; step = 2; })(); step = 1; await p; return same(step, 2); },
  "function*": () => { const it = naturals(); it.next(); return same(it.next().value, 1); },
  "Uint8Array": () => same([...new Uint8Array([1, 2, 300])], [1, 2, 44]),
  "DataView": () => { const v = new DataView(new ArrayBuffer(4)); v.setUint32(0, 0x01020304); return same(v.getUint8(3), 4); },
  "Proxy": () => same(new Proxy({}, { get: (_, key) => `got ${String(key)}` }).x, "got x"),
  "RegExp": () => same(/(?<year>\d{4})-(?<month>\d\d)/d.exec("on 2023-07").groups.year, "2023"),
  "JSON": () => same(JSON.parse(JSON.stringify({ a: [1, "b", null] })), { a: [1, "b", null] }),
  "Date": () => same(new Date(Date.UTC(2023, 6, 1)).toISOString(), "2023-07-01T00:00:00.000Z"),
  "BigInt": () => same(String(2n ** 64n), "18446744073709551616"),
  "Array.prototype.findLast": () => same([1, 2, 3, 4].findLast((n) => n % 2 === 1), 3),
  "Array.prototype.toSorted": () => { const a = [3, 1, 2]; return same([a.toSorted(), a], [[1, 2, 3], [3, 1, 2]]); },
  "Request": async (request) => {
    const made = new Request("http://example.test/a?b=1", { method: "PUT", body: "payload", headers: { "x-k": "v" } });
    return same([request.method, made.method, made.url, made.headers.get("X-K"), await made.text()],
      ["GET", "PUT", "http://example.test/a?b=1", "v", "payload"]);
  },
  "Response": async () => {
    const r = new Response("héllo", { status: 201, headers: { "x-a": "1" } });
    const bytes = await new Response("ab").bytes();
    const buffer = await new Response("abc").arrayBuffer();
    return same([r.status, r.ok, r.headers.get("x-a"), await r.text(), [...bytes], buffer.byteLength],
      [201, true, "1", "héllo", [97, 98], 3]);
  },
  "Response.json": async () => {
    const r = Response.json({ a: 1 }, { status: 202 });
    return same([r.status, r.headers.get("content-type").startsWith("application/json"), await r.json()],
      [202, true, { a: 1 }]);
  },
  "Response.redirect": () => {
    const r = Response.redirect("http://example.test/next", 307);
    return same([r.status, r.headers.get("location")], [307, "http://example.test/next"]);
  },
  "Headers": () => {
    const h = new Headers({ "Content-Type": "text/plain" });
    h.append("x-many", "1");
    h.append("X-Many", "2");
    h.set("x-one", "a");
    h.delete("x-one");
    return same([h.get("content-type"), h.get("x-many"), h.has("x-one")], ["text/plain", "1, 2", false]);
  },
  "URL": () => {
    const u = new URL("https://user.example:8443/p/q?x=1&x=2#frag");
    return same([u.protocol, u.host, u.hostname, u.port, u.pathname, u.search, u.hash, u.origin],
      ["https:", "user.example:8443", "user.example", "8443", "/p/q", "?x=1&x=2", "#frag", "https://user.example:8443"]);
  },
  "URLSearchParams": () => {
    const p = new URL("http://h/?a=1&a=2&b=%20x").searchParams;
    return same([p.get("a"), p.getAll("a"), p.has("b"), p.get("b"), p.has("c")], ["1", ["1", "2"], true, " x", false]);
  },
  "TextEncoder": () => same([...enc.encode("é€")], [0xc3, 0xa9, 0xe2, 0x82, 0xac]),
  "TextDecoder": () => same(new TextDecoder().decode(new Uint8Array([0xc3, 0xa9, 0xe2, 0x82, 0xac])), "é€"),
  "console.log": () => { console.log("conformance: console.log line"); return true; },
  "console.error": () => { console.error("conformance: console.error line"); return true; },
  "Math.random()": () => { const x = Math.random(); return (x >= 0 && x < 1 && x !== Math.random()) || `${x}`; },
  "crypto.getRandomValues()": () => {
    const a = crypto.getRandomValues(new Uint8Array(32));
    const b = crypto.getRandomValues(new Uint8Array(32));
    return hex(a) !== hex(b) || "two draws are equal";
  },
  "crypto.randomUUID()": () => {
    const id = crypto.randomUUID();
    return /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(id) || id;
  },
  "crypto.subtle": () => same([typeof crypto.subtle, crypto.subtle instanceof SubtleCrypto], ["object", true]),
  "digest": async () => same(hex(await crypto.subtle.digest("SHA-256", enc.encode("abc"))),
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
  "importKey": async () => {
    const key = await crypto.subtle.importKey("raw", enc.encode("key"), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    return same([key instanceof CryptoKey, key.type, key.algorithm.name, key.extractable], [true, "secret", "HMAC", false]);
  },
  "exportKey": async () => {
    const key = await crypto.subtle.importKey("raw", enc.encode("key"), { name: "HMAC", hash: "SHA-256" }, true, ["sign"]);
    const jwk = await crypto.subtle.exportKey("jwk", key);
    return same([hex(await crypto.subtle.exportKey("raw", key)), jwk.kty, jwk.alg, jwk.k], ["6b6579", "oct", "HS256", "a2V5"]);
  },
  "generateKey": async () => {
    const key = await crypto.subtle.generateKey({ name: "HMAC", hash: "SHA-512" }, true, ["sign", "verify"]);
    return same((await crypto.subtle.exportKey("raw", key)).byteLength, 128);
  },
  "sign": async () => {
    // RFC 4231, test case 2.
    const key = await crypto.subtle.importKey("raw", enc.encode("Jefe"), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    return same(hex(await crypto.subtle.sign("HMAC", key, enc.encode("what do ya want for nothing?"))),
      "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  },
  "verify": async () => {
    const key = await crypto.subtle.importKey("raw", enc.encode("k"), { name: "HMAC", hash: "SHA-1" }, false, ["sign", "verify"]);
    const signature = await crypto.subtle.sign("HMAC", key, enc.encode("m"));
    const bad = new Uint8Array(signature).slice();
    bad[0] ^= 1;
    return same([await crypto.subtle.verify("HMAC", key, signature, enc.encode("m")),
      await crypto.subtle.verify("HMAC", key, bad, enc.encode("m"))], [true, false]);
  },
  "Date.now()": () => { const now = Date.now(); return (now > Date.UTC(2024, 0, 1) && Math.abs(now - globalThis.askedAt) < 60000) || `${now}`; },
  "new Date()": () => { const d = new Date(); return Math.abs(d.getTime() - Date.now()) < 1000 || d.toISOString(); },
  "setTimeout": async () => { const t0 = performance.now(); await new Promise((r) => setTimeout(r, 20)); return performance.now() - t0 >= 19 || "woke early"; },
  "setInterval": async () => {
    let ticks = 0;
    await new Promise((r) => { const id = setInterval(() => { ticks += 1; if (ticks === 3) { clearInterval(id); r(); } }, 2); });
    return same(ticks, 3);
  },
  "clearTimeout": async () => {
    let ran = false;
    clearTimeout(setTimeout(() => { ran = true; }, 1));
    await new Promise((r) => setTimeout(r, 10));
    return same(ran, false);
  },
  "clearInterval": async () => {
    let ticks = 0;
    const id = setInterval(() => { ticks += 1; }, 1);
    clearInterval(id);
    await new Promise((r) => setTimeout(r, 10));
    return same(ticks, 0);
  },
  "queueMicrotask(fn)": async () => {
    const order = [];
    setTimeout(() => order.push("timer"), 0);
    queueMicrotask(() => order.push("microtask"));
    order.push("sync");
    await new Promise((r) => setTimeout(r, 5));
    return same(order, ["sync", "microtask", "timer"]);
  },
  "atob(text)": () => same([atob("aGk="), atob(" aGk ")], ["hi", "hi"]),
  "btoa(text)": () => { try { btoa("€"); return "btoa took a character outside Latin-1"; } catch (e) { return same([btoa("hi\u00ff"), e.name], ["aGn/", "InvalidCharacterError"]); } },
  "structuredClone(value)": () => {
    const original = { when: new Date(5), tags: new Set(["a"]), big: 1n, bytes: new Uint8Array([1, 2]) };
    const copy = structuredClone(original);
    return same([copy !== original, copy.when instanceof Date, copy.when.getTime(), copy.tags.has("a"), copy.big === 1n, [...copy.bytes]],
      [true, true, 5, true, true, [1, 2]]);
  },
  "performance.now()": () => { const a = performance.now(); const b = performance.now(); return (a >= 0 && b >= a) || `${a} then ${b}`; },
  "performance.timeOrigin": () => (performance.timeOrigin > Date.UTC(2024, 0, 1) && performance.timeOrigin <= Date.now()) || `${performance.timeOrigin}`,
  "fetch(input, init)": async (request) => {
    const to = new URL(request.url).searchParams.get("origin");
    const answer = await fetch(to, { method: "POST", body: "asked" });
    return same([answer.status, await answer.text()], [200, "origin says hi"]);
  },
  "stasis": async () => {
    const pings = async () => Number(await (await stasis.call("conformance-peer", "/pings")).text());
    const before = await pings();
    const answer = await stasis.call("conformance-peer", "/ping", { method: "POST" });
    stasis.send("conformance-peer", "/ping", { method: "POST" });
    // The send is one-way: its ping lands on the peer a moment later.
    let after = await pings();
    for (let i = 0; i < 200 && after < before + 2; i++) {
      await new Promise((r) => setTimeout(r, 10));
      after = await pings();
    }
    const at = Date.now() + 3600000;
    stasis.setAlarm(at);
    const set = stasis.getAlarm();
    stasis.cancelAlarm();
    return same([answer.status, await answer.text(), after - before, typeof stasis.fetch, stasis.selfName(), set, stasis.getAlarm()],
      [200, "pong", 2, "function", "conformance", at, null]);
  },
};

// What the docs list as not supported.
const missing = {
  "WeakRef": () => typeof WeakRef === "undefined",
  "FinalizationRegistry": () => typeof FinalizationRegistry === "undefined",
  "ReadableStream": () => typeof ReadableStream === "undefined",
  "WebSocketPair": () => typeof WebSocketPair === "undefined",
  "encrypt": () => rejects(crypto.subtle.encrypt({ name: "AES-GCM" }, null, new Uint8Array(1)), "NotSupportedError"),
  "deriveKey": () => rejects(crypto.subtle.deriveKey({ name: "PBKDF2" }, null, { name: "HMAC" }, false, ["sign"]), "NotSupportedError"),
};

async function run(table, request) {
  const out = {};
  for (const [name, check] of Object.entries(table)) {
    try {
      const result = await check(request);
      out[name] = result === true ? true : String(result);
    } catch (e) {
      out[name] = `threw ${e && e.name}: ${e && e.message}`;
    }
  }
  return out;
}

export default {
  async fetch(request) {
    const path = new URL(request.url).pathname;
    if (path === "/ping") {
      pinged += 1;
      return new Response("pong");
    }
    if (path === "/pings") return new Response(String(pinged));
    globalThis.askedAt = Number(new URL(request.url).searchParams.get("now"));
    return Response.json({ checks: await run(checks, request), missing: await run(missing, request) });
  },
};
"##;

/// The backticked names in the first cell of each row of the table under
/// `## Supported APIs` in docs/javascript.md.
fn documented_apis(doc: &str) -> BTreeSet<String> {
    let section = doc
        .split("\n## Supported APIs")
        .nth(1)
        .expect("docs/javascript.md has a Supported APIs section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut names = BTreeSet::new();
    for row in section.lines().filter(|l| l.starts_with("| ")).skip(1) {
        let first = row.split('|').nth(1).unwrap_or("");
        names.extend(first.split('`').skip(1).step_by(2).map(str::to_owned));
    }
    names
}

/// The paragraph after the table that starts "Not supported:".
fn not_supported(doc: &str) -> &str {
    let start = doc
        .find("\nNot supported:")
        .expect("docs/javascript.md lists what is not supported");
    let rest = &doc[start..];
    &rest[..rest.find("\n\n").unwrap_or(rest.len())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_the_docs_list_runs_and_the_missing_ones_are_missing() {
    if !engine_built() {
        return;
    }
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/javascript.md"))
        .expect("read docs/javascript.md");
    let documented = documented_apis(&doc);
    assert!(documented.len() > 40, "{documented:?}");

    let (origin, seen) = origin("HTTP/1.1 200 OK", "origin says hi").await;
    let rule = origin.to_string();
    let server = Server::start(&["--workers", "1", "--allow-outbound", &rule]);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("conformance.js");
    std::fs::write(&path, SCRIPT).expect("write the script");
    server.cli_ok(&["template", "push", "conf", path.to_str().expect("utf-8")]);
    server.create("conformance", "conf");
    server.create("conformance-peer", "conf");

    let c = client();
    for round in ["running", "after a pause"] {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis();
        let path = format!("/?origin=http://{origin}/&now={now}");
        let answer = to_actor(&c, server.ingress, "conformance", "GET", &path).await;
        assert_eq!(answer.status, 200, "{round}: {answer:?}");
        let got: serde_json::Value = serde_json::from_str(&answer.body).expect("JSON");
        let checks = got["checks"].as_object().expect("checks");
        let checked: BTreeSet<String> = checks.keys().cloned().collect();
        assert_eq!(
            checked, documented,
            "the checks and the docs' table name the same APIs"
        );
        let failed: Vec<_> = checks.iter().filter(|(_, v)| **v != true).collect();
        assert!(failed.is_empty(), "{round}: {failed:?}");
        let missing = got["missing"].as_object().expect("missing");
        let failed: Vec<_> = missing.iter().filter(|(_, v)| **v != true).collect();
        assert!(failed.is_empty(), "{round}: not missing: {failed:?}");
        server.cli_ok(&["actor", "pause", "conformance"]);
    }
    let listed = not_supported(&doc);
    for name in [
        "WeakRef",
        "FinalizationRegistry",
        "ReadableStream",
        "WebSocketPair",
        "encrypt",
        "deriveKey",
    ] {
        assert!(
            listed.contains(&format!("`{name}`")),
            "docs list {name} as not supported"
        );
    }
    assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 2);
    let logs = server.cli_ok(&["actor", "logs", "conformance"]);
    assert!(
        logs.contains("conformance: console.log line")
            && logs.contains("conformance: console.error line"),
        "{logs}"
    );
}
