// `crypto.subtle` of a Stasis JavaScript actor: digest (SHA-1, SHA-256,
// SHA-384, SHA-512) and HMAC keys (importKey and exportKey as "raw" or
// "jwk", generateKey, sign, verify), enough to check an HS256 JWT. The
// hashing is native (src/subtle.rs, RustCrypto's sha1, sha2 and hmac);
// this file checks the arguments and fails as browsers do: a rejected
// promise with a DOMException (NotSupportedError, InvalidAccessError,
// DataError, SyntaxError, OperationError) or a TypeError, its message
// naming what was wrong. Evaluated after the prelude, whose `crypto` it
// extends; also defines `CryptoKey`, `SubtleCrypto` and, where the engine
// has none, `DOMException`.
(() => {
  "use strict";
  const native = globalThis.__stasis_native;

  // The legacy `code` of the DOMException names used here.
  const CODES = { SyntaxError: 12, NotSupportedError: 9, InvalidAccessError: 15 };
  class DOMException extends Error {
    constructor(message = "", name = "Error") {
      super(message);
      Object.defineProperty(this, "name", { value: String(name), writable: true, configurable: true });
    }
    get code() { return CODES[this.name] || 0; }
  }
  const DOMError = globalThis.DOMException || DOMException;
  const fail = (name) => (message) => new DOMError(message, name);
  const notSupported = fail("NotSupportedError");
  const invalidAccess = fail("InvalidAccessError");
  const dataError = fail("DataError");
  const syntaxError = fail("SyntaxError");
  const operationError = fail("OperationError");

  // WebCrypto's hash names, their HMAC block sizes in bits and JWK `alg`s.
  const HASHES = {
    "SHA-1": { block: 512, jwk: "HS1" },
    "SHA-256": { block: 512, jwk: "HS256" },
    "SHA-384": { block: 1024, jwk: "HS384" },
    "SHA-512": { block: 1024, jwk: "HS512" },
  };
  const SUPPORTED = Object.keys(HASHES).join(", ");
  const FORMATS = ["raw", "spki", "pkcs8", "jwk"];
  const USAGES = ["encrypt", "decrypt", "sign", "verify", "deriveKey", "deriveBits", "wrapKey", "unwrapKey"];

  // A copy of a BufferSource's bytes, or a TypeError naming `what`.
  function bytesOf(what, value) {
    if (value instanceof ArrayBuffer) return new Uint8Array(value.slice(0));
    if (ArrayBuffer.isView(value)) {
      return new Uint8Array(value.buffer.slice(value.byteOffset, value.byteOffset + value.byteLength));
    }
    const got = value === null ? "null" : typeof value === "object" ? "an object" : `a ${typeof value}`;
    return typeError(`${what} is ${got}, not an ArrayBuffer, a TypedArray or a DataView`);
  }

  function typeError(message) { throw new TypeError(message); }

  // An ArrayBuffer holding exactly the bytes of the Uint8Array `u8`.
  function bufferOf(u8) {
    return u8.byteOffset === 0 && u8.byteLength === u8.buffer.byteLength ? u8.buffer : u8.slice().buffer;
  }

  // The name of an AlgorithmIdentifier (a string or an object with `name`).
  function algorithmName(what, algorithm) {
    if (typeof algorithm === "string") return algorithm;
    if (algorithm !== null && typeof algorithm === "object") {
      if (algorithm.name === undefined) typeError(`${what}: the algorithm object has no "name"`);
      return String(algorithm.name);
    }
    return typeError(`${what}: the algorithm is not a string or an object with a "name"`);
  }

  // The WebCrypto name of a hash (matched regardless of case), or a
  // NotSupportedError naming it.
  function hashName(what, algorithm) {
    const name = algorithmName(what, algorithm);
    const known = Object.keys(HASHES).find((h) => h === name.toUpperCase());
    if (!known) throw notSupported(`${what}: unsupported hash algorithm "${name}" (supported: ${SUPPORTED})`);
    return known;
  }

  // Only HMAC has keys here: anything else is a NotSupportedError.
  function checkHmac(what, algorithm) {
    const name = algorithmName(what, algorithm);
    if (name.toUpperCase() !== "HMAC") {
      throw notSupported(`${what}: unsupported algorithm "${name}" (supported: HMAC)`);
    }
  }

  // The hash of HMAC parameters ({name: "HMAC", hash, length}).
  function hmacHash(what, algorithm) {
    if (typeof algorithm !== "object" || algorithm.hash === undefined) {
      typeError(`${what}: HMAC needs its hash: {name: "HMAC", hash: "SHA-256"}`);
    }
    return hashName(`${what}: HMAC`, algorithm.hash);
  }

  // HMAC key usages: known, only "sign" and "verify", at least one.
  function hmacUsages(what, usages) {
    if (usages === null || typeof usages !== "object" || typeof usages[Symbol.iterator] !== "function") {
      typeError(`${what}: the key usages are not an array`);
    }
    const list = [...usages].map(String);
    for (const u of list) {
      if (!USAGES.includes(u)) typeError(`${what}: "${u}" is not a key usage (${USAGES.join(", ")})`);
      if (u !== "sign" && u !== "verify") {
        throw syntaxError(`${what}: an HMAC key is for "sign" and "verify", not "${u}"`);
      }
    }
    if (list.length === 0) throw syntaxError(`${what}: a secret key needs at least one usage ("sign", "verify")`);
    return ["sign", "verify"].filter((u) => list.includes(u));
  }

  function checkFormat(what, format) {
    if (!FORMATS.includes(format)) typeError(`${what}: "${format}" is not a key format (${FORMATS.join(", ")})`);
    if (format !== "raw" && format !== "jwk") {
      throw notSupported(`${what}: the key format "${format}" is not supported for HMAC (supported: raw, jwk)`);
    }
  }

  // The key length in bits an HMAC import asks for (`length`, optional).
  function keyLength(what, length, bits) {
    if (length === undefined) return bits;
    const n = Number(length);
    if (!Number.isInteger(n) || n < 0 || n > 0xffffffff) typeError(`${what}: the length ${length} is not a number of bits`);
    if (n > bits) throw dataError(`${what}: length ${n} is longer than the key's ${bits} bits`);
    if (n <= bits - 8) throw dataError(`${what}: length ${n} is shorter than the key's ${bits} bits`);
    if (n !== bits) throw notSupported(`${what}: a key length that is not a multiple of 8 (${n}) is not supported`);
    return n;
  }

  const B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  function toBase64url(bytes) {
    let out = "";
    for (let i = 0; i < bytes.length; i += 3) {
      const n = (bytes[i] << 16) | ((bytes[i + 1] || 0) << 8) | (bytes[i + 2] || 0);
      const chars = Math.min(4, Math.ceil(((bytes.length - i) * 8) / 6));
      for (let j = 0; j < chars; j++) out += B64URL[(n >> (18 - 6 * j)) & 63];
    }
    return out;
  }
  // Unpadded base64url, or null.
  function fromBase64url(text) {
    if (!/^[A-Za-z0-9_-]*$/.test(text) || text.length % 4 === 1) return null;
    const out = new Uint8Array(Math.floor((text.length * 3) / 4));
    let acc = 0, bits = 0, n = 0;
    for (const c of text) {
      acc = ((acc << 6) | B64URL.indexOf(c)) & 0xffff;
      bits += 6;
      if (bits >= 8) { bits -= 8; out[n++] = (acc >> bits) & 0xff; }
    }
    return out;
  }

  // The secret of a JSON Web Key for HMAC with `hash`, checked as
  // WebCrypto does (kty, k, alg, use, key_ops, ext).
  function fromJwk(what, jwk, hash, usages, extractable) {
    if (jwk === null || typeof jwk !== "object" || jwk instanceof ArrayBuffer || ArrayBuffer.isView(jwk)) {
      typeError(`${what}: a "jwk" key is a JSON Web Key object`);
    }
    if (jwk.kty !== "oct") throw dataError(`${what}: the JWK's "kty" is ${JSON.stringify(jwk.kty)}, not "oct"`);
    if (typeof jwk.k !== "string") throw dataError(`${what}: the JWK has no "k" string`);
    const raw = fromBase64url(jwk.k);
    if (!raw) throw dataError(`${what}: the JWK's "k" is not unpadded base64url`);
    const alg = HASHES[hash].jwk;
    if (jwk.alg !== undefined && jwk.alg !== alg) {
      throw dataError(`${what}: the JWK's "alg" is ${JSON.stringify(jwk.alg)} but the hash is ${hash} ("${alg}")`);
    }
    if (jwk.use !== undefined && jwk.use !== "sig") {
      throw dataError(`${what}: the JWK's "use" is ${JSON.stringify(jwk.use)}, not "sig"`);
    }
    if (jwk.key_ops !== undefined) {
      if (!Array.isArray(jwk.key_ops)) typeError(`${what}: the JWK's "key_ops" is not an array`);
      const missing = usages.filter((u) => !jwk.key_ops.includes(u));
      if (missing.length) throw dataError(`${what}: the JWK's "key_ops" do not allow "${missing.join('", "')}"`);
    }
    if (jwk.ext === false && extractable) throw dataError(`${what}: the JWK has "ext": false but extractable is true`);
    return raw;
  }

  // A key's internal slots (its secret bytes, hash, usages, extractable).
  const slots = new WeakMap();
  class CryptoKey {
    constructor() { typeError("Illegal constructor: CryptoKeys come from crypto.subtle"); }
    get [Symbol.toStringTag]() { return "CryptoKey"; }
  }
  function newKey(raw, hash, length, extractable, usages) {
    const key = Object.create(CryptoKey.prototype);
    const fixed = (value) => ({ value, enumerable: true });
    Object.defineProperties(key, {
      type: fixed("secret"),
      extractable: fixed(extractable),
      algorithm: fixed({ name: "HMAC", hash: { name: hash }, length }),
      usages: fixed([...usages]),
    });
    slots.set(key, { raw, hash, extractable, usages: [...usages] });
    return key;
  }

  // The slots of `key`, an HMAC key allowed `usage`.
  function usableKey(what, algorithm, key, usage) {
    const slot = slots.get(Object(key));
    if (!slot) typeError(`${what}: the key is not a CryptoKey`);
    checkHmac(what, algorithm);
    if (!slot.usages.includes(usage)) {
      throw invalidAccess(`${what}: the key's usages (${slot.usages.join(", ")}) do not include "${usage}"`);
    }
    return slot;
  }

  function unsupportedMethod(method) {
    return async function () {
      throw notSupported(`crypto.subtle.${method} is not supported (crypto.subtle has digest with ${SUPPORTED}, and HMAC keys: importKey, exportKey, generateKey, sign, verify)`);
    };
  }

  class SubtleCrypto {
    constructor() { typeError("Illegal constructor: use crypto.subtle"); }
    async digest(algorithm, data) {
      const what = "crypto.subtle.digest";
      const hash = hashName(what, algorithm);
      return bufferOf(native.digest(hash, bytesOf(`${what}: the data`, data)));
    }
    async importKey(format, keyData, algorithm, extractable, keyUsages) {
      const what = "crypto.subtle.importKey";
      format = String(format);
      checkHmac(what, algorithm);
      const hash = hmacHash(what, algorithm);
      const usages = hmacUsages(what, keyUsages);
      checkFormat(what, format);
      const raw = format === "raw"
        ? bytesOf(`${what}: the raw key data`, keyData)
        : fromJwk(what, keyData, hash, usages, Boolean(extractable));
      if (raw.length === 0) throw dataError(`${what}: the key is empty`);
      const length = keyLength(what, algorithm.length, raw.length * 8);
      return newKey(raw, hash, length, Boolean(extractable), usages);
    }
    async exportKey(format, key) {
      const what = "crypto.subtle.exportKey";
      format = String(format);
      const slot = slots.get(Object(key));
      if (!slot) typeError(`${what}: the key is not a CryptoKey`);
      checkFormat(what, format);
      if (!slot.extractable) throw invalidAccess(`${what}: the key is not extractable`);
      if (format === "raw") return slot.raw.slice().buffer;
      return { kty: "oct", k: toBase64url(slot.raw), alg: HASHES[slot.hash].jwk, key_ops: [...slot.usages], ext: true };
    }
    async generateKey(algorithm, extractable, keyUsages) {
      const what = "crypto.subtle.generateKey";
      checkHmac(what, algorithm);
      const hash = hmacHash(what, algorithm);
      const usages = hmacUsages(what, keyUsages);
      const bits = algorithm.length === undefined ? HASHES[hash].block : Number(algorithm.length);
      if (!Number.isInteger(bits) || bits <= 0 || bits > 65536 * 8) {
        throw operationError(`${what}: the length ${algorithm.length} is not a number of bits from 1 to ${65536 * 8}`);
      }
      if (bits % 8) throw notSupported(`${what}: a key length that is not a multiple of 8 (${bits}) is not supported`);
      return newKey(native.randomBytes(bits / 8), hash, bits, Boolean(extractable), usages);
    }
    async sign(algorithm, key, data) {
      const what = "crypto.subtle.sign";
      const slot = usableKey(what, algorithm, key, "sign");
      return bufferOf(native.hmacSign(slot.hash, slot.raw, bytesOf(`${what}: the data`, data)));
    }
    async verify(algorithm, key, signature, data) {
      const what = "crypto.subtle.verify";
      const slot = usableKey(what, algorithm, key, "verify");
      const mac = bytesOf(`${what}: the signature`, signature);
      return native.hmacVerify(slot.hash, slot.raw, mac, bytesOf(`${what}: the data`, data));
    }
  }
  for (const method of ["encrypt", "decrypt", "deriveKey", "deriveBits", "wrapKey", "unwrapKey"]) {
    Object.defineProperty(SubtleCrypto.prototype, method, {
      value: unsupportedMethod(method), writable: true, configurable: true,
    });
  }
  Object.defineProperty(SubtleCrypto.prototype, Symbol.toStringTag, { value: "SubtleCrypto" });

  Object.defineProperty(globalThis.crypto, "subtle", {
    value: Object.create(SubtleCrypto.prototype), enumerable: true, configurable: true,
  });
  // atob and btoa (HTML's forgiving base64), for the JWTs and keys the
  // functions above take.
  const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const invalidCharacter = fail("InvalidCharacterError");
  function btoa(data) {
    if (arguments.length < 1) throw new TypeError("btoa: 1 argument required, but only 0 present");
    const s = String(data);
    let out = "";
    for (let i = 0; i < s.length; i += 3) {
      const n = Math.min(3, s.length - i);
      let bits = 0;
      for (let k = 0; k < 3; k++) {
        const code = k < n ? s.charCodeAt(i + k) : 0;
        if (code > 0xff) {
          throw invalidCharacter(`btoa: the character at ${i + k} is outside Latin-1 (encode the text to bytes first)`);
        }
        bits = (bits << 8) | code;
      }
      out += B64[(bits >> 18) & 63] + B64[(bits >> 12) & 63]
        + (n > 1 ? B64[(bits >> 6) & 63] : "=") + (n > 2 ? B64[bits & 63] : "=");
    }
    return out;
  }
  function atob(data) {
    if (arguments.length < 1) throw new TypeError("atob: 1 argument required, but only 0 present");
    let s = String(data).replace(/[\t\n\f\r ]/g, "");
    if (s.length % 4 === 0) s = s.replace(/==?$/, "");
    if (s.length % 4 === 1 || /[^A-Za-z0-9+/]/.test(s)) {
      throw invalidCharacter("atob: the string is not valid base64");
    }
    let out = "";
    let bits = 0;
    let count = 0;
    for (const ch of s) {
      bits = ((bits << 6) | B64.indexOf(ch)) & 0x3fff;
      count += 6;
      if (count >= 8) {
        count -= 8;
        out += String.fromCharCode((bits >> count) & 0xff);
      }
    }
    return out;
  }

  const globals = { CryptoKey, SubtleCrypto, DOMException: DOMError, atob, btoa };
  for (const [name, value] of Object.entries(globals)) {
    Object.defineProperty(globalThis, name, { value, writable: true, configurable: true });
  }
})();
