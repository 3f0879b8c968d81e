//! `crypto.subtle` in a JavaScript actor (issue 48, item 3), through the
//! real binary: `digest` for SHA-1/256/384/512 against the FIPS 180 "abc"
//! vectors, an HS256 JWT checked with `importKey("raw")` and `verify`
//! (a tampered payload and a wrong signature answered 401), an HMAC key
//! imported as a JWK signing as the raw one does and exported back, and
//! browsers' errors (NotSupportedError, DataError, InvalidAccessError,
//! TypeError) as rejections the actor survives. The key the script keeps
//! in a module variable still verifies after a pause.

use crate::js::engine_built;
use crate::support::{Server, client, to_actor};

/// The actor: `/digests`, `/verify?token=`, `/jwk?token=` and `/errors`
/// (anything else); its `SECRET` signed [`JWT`].
const SCRIPT: &str = r#"
const SECRET = "stasis-jwt-secret";
const enc = new TextEncoder();
const dec = new TextDecoder();
const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, "0")).join("");
function b64url(text) {
  const abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  const out = [];
  let acc = 0, bits = 0;
  for (const c of text) {
    acc = ((acc << 6) | abc.indexOf(c)) & 0xffff;
    bits += 6;
    if (bits >= 8) { bits -= 8; out.push((acc >> bits) & 0xff); }
  }
  return new Uint8Array(out);
}
const toB64url = (buf) => {
  const abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  let out = "", acc = 0, bits = 0;
  for (const b of new Uint8Array(buf)) {
    acc = ((acc << 8) | b) & 0xffff;
    bits += 8;
    while (bits >= 6) { bits -= 6; out += abc[(acc >> bits) & 63]; }
  }
  return bits ? out + abc[(acc << (6 - bits)) & 63] : out;
};
const caught = (promise) => promise.then(
  (v) => `resolved: ${v}`,
  (e) => `${e.name}: ${e.message}${e instanceof DOMException ? " (DOMException)" : ""}`,
);

// Kept across requests (and the pause): a CryptoKey lives in the heap.
let verifyKey;

export default {
  async fetch(request) {
    const url = new URL(request.url);
    const token = url.searchParams.get("token") || "";
    const [header, payload, signature] = token.split(".");
    if (url.pathname === "/digests") {
      const out = {};
      for (const alg of ["SHA-1", "SHA-256", "SHA-384", "SHA-512"]) {
        out[alg] = hex(await crypto.subtle.digest(alg, enc.encode("abc")));
      }
      const view = new DataView(enc.encode("xabcx").buffer, 1, 3);
      out.view = hex(await crypto.subtle.digest({ name: "sha-256" }, view));
      return Response.json(out);
    }
    if (url.pathname === "/verify") {
      verifyKey ??= await crypto.subtle.importKey(
        "raw", enc.encode(SECRET), { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
      const ok = await crypto.subtle.verify(
        "HMAC", verifyKey, b64url(signature || ""), enc.encode(`${header}.${payload}`));
      if (!ok) return new Response("invalid token", { status: 401 });
      return new Response(JSON.parse(dec.decode(b64url(payload))).sub);
    }
    if (url.pathname === "/jwk") {
      const key = await crypto.subtle.importKey(
        "jwk", { kty: "oct", k: "c3Rhc2lzLWp3dC1zZWNyZXQ", alg: "HS256", ext: true },
        { name: "HMAC", hash: { name: "SHA-256" } }, true, ["sign", "verify"]);
      const mac = await crypto.subtle.sign({ name: "HMAC" }, key, enc.encode(`${header}.${payload}`));
      const jwk = await crypto.subtle.exportKey("jwk", key);
      const raw = await crypto.subtle.exportKey("raw", key);
      return Response.json({
        signature: toB64url(mac), type: key.type, extractable: key.extractable,
        algorithm: key.algorithm, usages: key.usages, isKey: key instanceof CryptoKey,
        jwk, raw: dec.decode(raw),
      });
    }
    const verifyOnly = await crypto.subtle.importKey(
      "raw", enc.encode(SECRET), { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
    return Response.json({
      md5: await caught(crypto.subtle.digest("MD5", enc.encode("abc"))),
      text: await caught(crypto.subtle.digest("SHA-256", "abc")),
      signWithVerifyKey: await caught(crypto.subtle.sign("HMAC", verifyOnly, enc.encode("x"))),
      exportHidden: await caught(crypto.subtle.exportKey("raw", verifyOnly)),
      jwkAlg: await caught(crypto.subtle.importKey("jwk", { kty: "oct", k: "c2VjcmV0", alg: "HS512" },
        { name: "HMAC", hash: "SHA-256" }, false, ["verify"])),
      spki: await caught(crypto.subtle.importKey("spki", new Uint8Array(8),
        { name: "HMAC", hash: "SHA-256" }, false, ["verify"])),
      aes: await caught(crypto.subtle.importKey("raw", new Uint8Array(16), "AES-GCM", false, ["encrypt"])),
    });
  },
};
"#;

/// An HS256 JWT of `{"sub":"alice","name":"Alice"}` signed with the
/// script's secret, made once with Python's `hmac` and `hashlib`.
const JWT: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.\
                   eyJzdWIiOiJhbGljZSIsIm5hbWUiOiJBbGljZSJ9.\
                   F_hGjfioFV8IxUBayEdHJiOk89DbCD26WvwQ__1Ol3o";
/// `{"sub":"mallory","name":"Alice"}`, for a tampered payload.
const MALLORY: &str = "eyJzdWIiOiJtYWxsb3J5IiwibmFtZSI6IkFsaWNlIn0";

/// The FIPS 180 digests of "abc".
const ABC: [(&str, &str); 4] = [
    ("SHA-1", "a9993e364706816aba3e25717850c26c9cd0d89d"),
    (
        "SHA-256",
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
    ),
    (
        "SHA-384",
        "cb00753f45a35e8bb5a03d699ac65007272c32ab0eded163\
         1a8b605a43ff5bed8086072ba1e7cc2358baeca134c825a7",
    ),
    (
        "SHA-512",
        "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a\
         2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
    ),
];

/// The JSON of a 200 answer to `GET path`.
async fn json(server: &Server, path: &str) -> serde_json::Value {
    let answer = to_actor(&client(), server.ingress, "jwt", "GET", path).await;
    assert_eq!(answer.status, 200, "{path}: {answer:?}");
    serde_json::from_str(&answer.body).unwrap_or_else(|e| panic!("{path}: {e}: {answer:?}"))
}

/// Asserts the four "abc" digests (and one of a DataView).
async fn check_digests(server: &Server) {
    let got = json(server, "/digests").await;
    for (alg, want) in ABC {
        assert_eq!(got[alg], want, "{alg}: {got}");
    }
    assert_eq!(got["view"], ABC[1].1, "{got}");
}

/// The status and body of `/verify?token=TOKEN`.
async fn verify(server: &Server, token: &str) -> (u16, String) {
    let path = format!("/verify?token={token}");
    let answer = to_actor(&client(), server.ingress, "jwt", "GET", &path).await;
    (answer.status, answer.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subtle_digests_and_verifies_an_hs256_jwt() {
    if !engine_built() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("jwt.js");
    std::fs::write(&path, SCRIPT).expect("write the script");
    let server = Server::start(&["--workers", "1"]);
    server.cli_ok(&["template", "push", "jwt", path.to_str().expect("utf-8")]);
    server.create("jwt", "jwt");

    check_digests(&server).await;
    let parts: Vec<&str> = JWT.split('.').collect();
    assert_eq!(verify(&server, JWT).await, (200, "alice".to_owned()));
    let tampered = format!("{}.{MALLORY}.{}", parts[0], parts[2]);
    assert_eq!(
        verify(&server, &tampered).await.0,
        401,
        "a tampered payload"
    );
    // Another first character changes the signature's first bytes.
    let wrong = format!("{}.{}.A{}", parts[0], parts[1], &parts[2][1..]);
    assert_eq!(verify(&server, &wrong).await.0, 401, "a wrong signature");
    let short = format!("{}.{}.{}", parts[0], parts[1], &parts[2][..20]);
    assert_eq!(verify(&server, &short).await.0, 401, "a cut signature");

    // A JWK signs as the raw secret does, and exports back.
    let got = json(&server, &format!("/jwk?token={JWT}")).await;
    assert_eq!(got["signature"], parts[2], "{got}");
    assert_eq!(got["type"], "secret", "{got}");
    assert_eq!(got["extractable"], true, "{got}");
    assert_eq!(
        got["algorithm"],
        serde_json::json!({"name": "HMAC", "hash": {"name": "SHA-256"}, "length": 136}),
        "{got}"
    );
    assert_eq!(
        got["usages"],
        serde_json::json!(["sign", "verify"]),
        "{got}"
    );
    assert_eq!(got["isKey"], true, "{got}");
    assert_eq!(got["jwk"]["k"], "c3Rhc2lzLWp3dC1zZWNyZXQ", "{got}");
    assert_eq!(got["jwk"]["alg"], "HS256", "{got}");
    assert_eq!(got["raw"], "stasis-jwt-secret", "{got}");

    // Browsers' errors, as rejections the script catches.
    let got = json(&server, "/errors").await;
    let starts = |field: &str, prefix: &str, names: &str| {
        let text = got[field].as_str().unwrap_or_default();
        assert!(
            text.starts_with(prefix) && text.contains(names),
            "{field}: {text:?} should start with {prefix:?} and name {names:?}"
        );
    };
    starts("md5", "NotSupportedError: ", "\"MD5\"");
    starts("md5", "NotSupportedError: ", "(DOMException)");
    starts("text", "TypeError: ", "the data is a string");
    starts("signWithVerifyKey", "InvalidAccessError: ", "\"sign\"");
    starts("exportHidden", "InvalidAccessError: ", "not extractable");
    starts("jwkAlg", "DataError: ", "\"HS512\"");
    starts("spki", "NotSupportedError: ", "\"spki\"");
    starts("aes", "NotSupportedError: ", "\"AES-GCM\"");

    // The actor keeps serving, and its kept key survives a pause.
    check_digests(&server).await;
    server.cli_ok(&["actor", "pause", "jwt"]);
    assert_eq!(verify(&server, JWT).await, (200, "alice".to_owned()));
    assert_eq!(verify(&server, &tampered).await.0, 401, "after the pause");
}
