// The Workers-style globals of a Stasis JavaScript actor: Headers, Request,
// Response, URL (a small subset), crypto, fetch, and the dispatch functions
// the engine calls for each request and alarm. Evaluated once per template,
// before the actor's script; it lives in the snapshot like everything else.
(() => {
  "use strict";
  const native = globalThis.__stasis_native;
  const encoder = new TextEncoder();
  const decoder = new TextDecoder();

  function toBytes(body) {
    if (body === undefined || body === null) return new Uint8Array(0);
    if (typeof body === "string") return encoder.encode(body);
    if (body instanceof Uint8Array) return body;
    if (body instanceof ArrayBuffer) return new Uint8Array(body);
    if (ArrayBuffer.isView(body)) {
      return new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
    }
    return encoder.encode(String(body));
  }

  class Headers {
    constructor(init) {
      this._map = new Map();
      if (init instanceof Headers) init = init.entries();
      else if (init && !Array.isArray(init) && typeof init[Symbol.iterator] !== "function") {
        init = Object.entries(init);
      }
      if (init) for (const [k, v] of init) this.append(k, v);
    }
    append(name, value) {
      const k = String(name).toLowerCase();
      const old = this._map.get(k);
      this._map.set(k, old === undefined ? String(value) : old + ", " + value);
    }
    set(name, value) { this._map.set(String(name).toLowerCase(), String(value)); }
    get(name) {
      const v = this._map.get(String(name).toLowerCase());
      return v === undefined ? null : v;
    }
    has(name) { return this._map.has(String(name).toLowerCase()); }
    delete(name) { this._map.delete(String(name).toLowerCase()); }
    forEach(f, self) { for (const [k, v] of this._map) f.call(self, v, k, this); }
    keys() { return this._map.keys(); }
    values() { return this._map.values(); }
    entries() { return this._map.entries(); }
    [Symbol.iterator]() { return this._map.entries(); }
  }

  class Body {
    _init(body) { this._bytes = toBytes(body); this.bodyUsed = false; }
    _take() { this.bodyUsed = true; return this._bytes; }
    async arrayBuffer() { const b = this._take(); return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength); }
    async bytes() { return this._take(); }
    async text() { return decoder.decode(this._take()); }
    // Parsed before the promise is made: a SyntaxError's stack has the
    // caller's frame (the user's `await request.json()` line).
    json() {
      try { return Promise.resolve(JSON.parse(decoder.decode(this._take()))); } catch (e) { return Promise.reject(e); }
    }
  }

  class URLSearchParams {
    constructor(query) {
      this._pairs = [];
      const q = String(query || "").replace(/^\?/, "");
      if (q) for (const part of q.split("&")) {
        const i = part.indexOf("=");
        const dec = (s) => decodeURIComponent(s.replace(/\+/g, " "));
        this._pairs.push(i < 0 ? [dec(part), ""] : [dec(part.slice(0, i)), dec(part.slice(i + 1))]);
      }
    }
    get(name) { const p = this._pairs.find(([k]) => k === name); return p ? p[1] : null; }
    getAll(name) { return this._pairs.filter(([k]) => k === name).map(([, v]) => v); }
    has(name) { return this._pairs.some(([k]) => k === name); }
    entries() { return this._pairs[Symbol.iterator](); }
    [Symbol.iterator]() { return this._pairs[Symbol.iterator](); }
    toString() {
      return this._pairs.map(([k, v]) => encodeURIComponent(k) + "=" + encodeURIComponent(v)).join("&");
    }
  }

  class URL {
    constructor(url, base) {
      let s = String(url);
      if (!/^[a-zA-Z][a-zA-Z0-9+.-]*:/.test(s)) {
        if (base === undefined) throw new TypeError("Invalid URL: " + s);
        const b = new URL(base);
        s = b.origin + (s.startsWith("/") ? s : "/" + s);
      }
      const m = /^([a-zA-Z][a-zA-Z0-9+.-]*:)\/\/([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?$/.exec(s);
      if (!m) throw new TypeError("Invalid URL: " + s);
      this.protocol = m[1].toLowerCase();
      this.host = m[2];
      this.hostname = m[2].replace(/:\d+$/, "");
      this.port = (/:(\d+)$/.exec(m[2]) || [, ""])[1];
      this.pathname = m[3] || "/";
      this.search = m[4] && m[4] !== "?" ? m[4] : "";
      this.hash = m[5] || "";
      this.searchParams = new URLSearchParams(this.search);
    }
    get origin() { return this.protocol + "//" + this.host; }
    get href() { return this.origin + this.pathname + this.search + this.hash; }
    toString() { return this.href; }
    toJSON() { return this.href; }
  }

  class Request extends Body {
    constructor(input, init = {}) {
      super();
      const from = input instanceof Request ? input : null;
      this.url = from ? from.url : String(input);
      this.method = String(init.method || (from ? from.method : "GET")).toUpperCase();
      this.headers = new Headers(init.headers || (from ? from.headers : undefined));
      this._init(init.body !== undefined ? init.body : from ? from._bytes : null);
    }
    clone() { return new Request(this, { body: this._bytes }); }
  }

  class Response extends Body {
    constructor(body, init = {}) {
      super();
      this.status = init.status === undefined ? 200 : init.status | 0;
      this.statusText = init.statusText || "";
      this.headers = new Headers(init.headers);
      if (typeof body === "string" && !this.headers.has("content-type")) {
        this.headers.set("content-type", "text/plain;charset=UTF-8");
      }
      this._init(body);
    }
    get ok() { return this.status >= 200 && this.status < 300; }
    clone() { return new Response(this._bytes, this); }
    static json(data, init = {}) {
      const r = new Response(JSON.stringify(data), init);
      r.headers.set("content-type", "application/json");
      return r;
    }
    static redirect(url, status = 302) {
      return new Response(null, { status, headers: { location: String(url) } });
    }
  }

  // The path and query of a request's URL, as the host wants them for a
  // call or send to another actor.
  function pathOf(url) {
    if (url.startsWith("/")) return url;
    const u = new URL(url);
    return u.pathname + u.search;
  }

  function wire(req) {
    return [req.method, [...req.headers.entries()], req._bytes];
  }

  function answer(r) {
    return new Response(r.body, { status: r.status, headers: r.headers });
  }

  globalThis.__stasis_host = {
    call(actor, input, init) {
      const req = new Request(input, init);
      const [method, headers, body] = wire(req);
      return answer(native.call(String(actor), method, pathOf(req.url), headers, body));
    },
    send(actor, input, init) {
      const req = new Request(input, init);
      const [method, headers, body] = wire(req);
      native.send(String(actor), method, pathOf(req.url), headers, body);
    },
    fetch(input, init) {
      const req = new Request(input, init);
      const [method, headers, body] = wire(req);
      return answer(native.fetch(method, req.url, headers, body));
    },
  };

  Object.defineProperties(globalThis, {
    Headers: { value: Headers, writable: true, configurable: true },
    Request: { value: Request, writable: true, configurable: true },
    Response: { value: Response, writable: true, configurable: true },
    URL: { value: URL, writable: true, configurable: true },
    URLSearchParams: { value: URLSearchParams, writable: true, configurable: true },
  });
  globalThis.fetch = async (input, init) => globalThis.__stasis_host.fetch(input, init);
  globalThis.crypto = {
    getRandomValues(array) {
      const bytes = native.randomBytes(array.byteLength);
      new Uint8Array(array.buffer, array.byteOffset, array.byteLength).set(bytes);
      return array;
    },
    randomUUID() {
      const b = native.randomBytes(16);
      b[6] = (b[6] & 0x0f) | 0x40;
      b[8] = (b[8] & 0x3f) | 0x80;
      const h = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
      return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
    },
  };

  // Settles into __stasis_out (the response as [status, headers, bytes])
  // or __stasis_err (what was thrown); the engine runs the job queue.
  function settle(promise) {
    globalThis.__stasis_out = undefined;
    globalThis.__stasis_err = undefined;
    globalThis.__stasis_done = false;
    promise.then(
      (r) => { globalThis.__stasis_out = r; globalThis.__stasis_done = true; },
      (e) => { globalThis.__stasis_err = e; globalThis.__stasis_done = true; },
    );
  }

  const noop = () => {};
  globalThis.__stasis_dispatch = (method, url, headers, body, actor, worker, env) => {
    settle((async () => {
      const handler = globalThis.__stasis_handler;
      if (!handler || typeof handler.fetch !== "function") {
        throw new TypeError("the script's default export has no fetch(request) method");
      }
      const request = new Request(url, { method, headers, body });
      // A WebSocket upgrade reaches only a script that handles sockets.
      if (request.headers.get("upgrade") === "websocket" && typeof handler.socket !== "function") {
        return [501, [["content-type", "text/plain;charset=UTF-8"]],
          new TextEncoder().encode("this actor does not take WebSockets: its default export has no socket(event) method\n")];
      }
      // Workers' (request, env, ctx); ctx also names the actor and worker.
      const ctx = { actor, worker, waitUntil: noop, passThroughOnException: noop };
      let r = await handler.fetch(request, Object.fromEntries(env), ctx);
      if (!(r instanceof Response)) r = new Response(r === undefined ? "" : String(r));
      return [r.status, [...r.headers.entries()], r._bytes];
    })());
  };

  // One event on one of the actor's sockets or streams: `socket(event)`
  // with {socket, type: "message" | "close", data (a string for a text
  // message, else a Uint8Array), code, reason}.
  globalThis.__stasis_socket = (socket, type, bytes, text, code, reason) => {
    settle((async () => {
      const handler = globalThis.__stasis_handler;
      if (handler && typeof handler.socket === "function") {
        const data = type !== "message" ? undefined : text ? new TextDecoder().decode(bytes) : bytes;
        await handler.socket({ socket, type, data, code, reason });
      }
      return null;
    })());
  };

  // State hand-over (a live upgrade to another version of the template):
  // the running version's `save()` value goes, encoded, to the new
  // version's `load(value, fromVersion)`. What can travel is what
  // structured clone takes, but for cycles: null, undefined, booleans,
  // numbers (NaN, Infinity, -0 too), strings, BigInts, arrays, plain
  // objects, Map, Set, Date, RegExp, ArrayBuffer and typed arrays. A
  // function, symbol or class instance is refused, naming where it is.
  function encodeClone(value, path, seen, who = "save() returned") {
    switch (typeof value) {
      case "undefined": return { u: 1 };
      case "boolean": case "string": return value;
      case "number":
        if (Number.isNaN(value)) return { n: "NaN" };
        if (!Number.isFinite(value)) return { n: value > 0 ? "Infinity" : "-Infinity" };
        if (Object.is(value, -0)) return { n: "-0" };
        return value;
      case "bigint": return { b: value.toString() };
      case "function": case "symbol":
        throw new TypeError(`${who} a ${typeof value} at ${path}: it cannot be cloned`);
    }
    if (value === null) return null;
    if (seen.has(value)) throw new TypeError(`${who} a cycle at ${path}: it cannot be cloned`);
    seen.add(value);
    try {
      if (Array.isArray(value)) return { a: value.map((v, i) => encodeClone(v, `${path}[${i}]`, seen, who)) };
      if (value instanceof Map) return { m: [...value].map(([k, v], i) => [encodeClone(k, `${path}.key(${i})`, seen, who), encodeClone(v, `${path}.get(${i})`, seen, who)]) };
      if (value instanceof Set) return { s: [...value].map((v, i) => encodeClone(v, `${path}.item(${i})`, seen, who)) };
      if (value instanceof Date) return { d: encodeClone(value.getTime(), path, seen, who) };
      if (value instanceof RegExp) return { r: [value.source, value.flags] };
      if (value instanceof ArrayBuffer) return { ab: [...new Uint8Array(value)] };
      if (ArrayBuffer.isView(value)) {
        const bytes = new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
        return { t: [value.constructor.name, [...bytes]] };
      }
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) {
        const name = (proto.constructor && proto.constructor.name) || "an object with a prototype";
        throw new TypeError(`${who} a ${name} at ${path}: only plain objects, arrays, Map, Set, Date, RegExp and binary data can be cloned`);
      }
      const o = {};
      for (const [k, v] of Object.entries(value)) own(o, k, encodeClone(v, `${path}.${k}`, seen, who));
      return { o };
    } finally {
      seen.delete(value);
    }
  }

  function decodeClone(value) {
    if (value === null || typeof value !== "object") return value;
    if ("u" in value) return undefined;
    if ("n" in value) return value.n === "-0" ? -0 : Number(value.n);
    if ("b" in value) return BigInt(value.b);
    if ("a" in value) return value.a.map(decodeClone);
    if ("m" in value) return new Map(value.m.map(([k, v]) => [decodeClone(k), decodeClone(v)]));
    if ("s" in value) return new Set(value.s.map(decodeClone));
    if ("d" in value) return new Date(decodeClone(value.d));
    if ("r" in value) return new RegExp(value.r[0], value.r[1]);
    if ("ab" in value) return new Uint8Array(value.ab).buffer;
    if ("t" in value) {
      const [name, bytes] = value.t;
      const buffer = new Uint8Array(bytes).buffer;
      const Type = globalThis[name];
      return name === "DataView" ? new DataView(buffer) : new Type(buffer);
    }
    const o = {};
    for (const [k, v] of Object.entries(value.o)) own(o, k, decodeClone(v));
    return o;
  }

  // Sets an own property, `__proto__` too (an assignment would set the
  // prototype instead).
  function own(o, k, v) {
    Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
  }

  // structuredClone, by the same encoding (no transfer list; a cycle or an
  // object reachable twice is refused or copied, as for a hand-over).
  globalThis.structuredClone = (value) =>
    decodeClone(JSON.parse(JSON.stringify(encodeClone(value, "the value", new Set(), "structuredClone got"))));

  // Timers run while the delivery that set them is under way (its promise
  // pending): the engine sleeps until the next one is due and runs it. When
  // the delivery's promise settles, timers still pending are dropped (a
  // line in the log says how many): work for later is `setAlarm`'s.
  const timers = new Map();
  let nextTimer = 1;
  function addTimer(fn, ms, args, every) {
    if (typeof fn !== "function") throw new TypeError("setTimeout and setInterval take a function");
    const delay = Math.max(0, Number(ms) || 0);
    const id = nextTimer++;
    timers.set(id, { at: Date.now() + delay, delay, fn, args, every });
    return id;
  }
  globalThis.setTimeout = (fn, ms, ...args) => addTimer(fn, ms, args, false);
  globalThis.setInterval = (fn, ms, ...args) => addTimer(fn, ms, args, true);
  globalThis.clearTimeout = (id) => { timers.delete(id); };
  globalThis.clearInterval = globalThis.clearTimeout;
  globalThis.queueMicrotask = (fn) => { Promise.resolve().then(fn); };
  // Milliseconds until the next timer is due (0: now), or -1 for none.
  globalThis.__stasis_next_timer = () => {
    let first = Infinity;
    for (const t of timers.values()) first = Math.min(first, t.at);
    return first === Infinity ? -1 : Math.max(0, first - Date.now());
  };
  // Runs every timer due now, in order of due time.
  globalThis.__stasis_run_timers = () => {
    const now = Date.now();
    const due = [...timers].filter(([, t]) => t.at <= now).sort((a, b) => a[1].at - b[1].at || a[0] - b[0]);
    for (const [id, t] of due) {
      if (!timers.has(id)) continue;
      if (t.every) t.at = Date.now() + Math.max(1, t.delay); else timers.delete(id);
      t.fn(...t.args);
    }
  };
  // Drops the timers left when a delivery ends; how many.
  globalThis.__stasis_drop_timers = () => { const n = timers.size; timers.clear(); return n; };

  // performance.now(): milliseconds since the actor's template was pushed
  // (its heap's origin), never going back, also across pauses and moves.
  const timeOrigin = Date.now();
  let lastNow = 0;
  globalThis.performance = {
    timeOrigin,
    now() { lastNow = Math.max(lastNow, Date.now() - timeOrigin); return lastNow; },
  };

  // `save()` of the running version, as the text handed over: its value
  // and the `version` its default export declares.
  globalThis.__stasis_save = () => {
    settle((async () => {
      const handler = globalThis.__stasis_handler;
      if (!handler || typeof handler.save !== "function") {
        throw new TypeError("the script's default export has no save() method");
      }
      const state = encodeClone(await handler.save(), "the value", new Set());
      const version = typeof handler.version === "number" ? handler.version : null;
      return JSON.stringify({ stasis: 1, version, state });
    })());
  };

  // `load(value, fromVersion)` of the new version with what the running
  // one saved (`fromVersion`: the `version` its default export declared,
  // or undefined).
  globalThis.__stasis_load = (text) => {
    settle((async () => {
      const handler = globalThis.__stasis_handler;
      if (!handler || typeof handler.load !== "function") {
        throw new TypeError("the script's default export has no load(value, fromVersion) method");
      }
      const saved = JSON.parse(text);
      if (!saved || saved.stasis !== 1) {
        throw new TypeError("the state handed over was not saved by a JavaScript version of this template");
      }
      await handler.load(decodeClone(saved.state), saved.version === null ? undefined : saved.version);
      return null;
    })());
  };

  globalThis.__stasis_alarm = () => {
    settle((async () => {
      const handler = globalThis.__stasis_handler;
      if (handler && typeof handler.alarm === "function") await handler.alarm();
      return null;
    })());
  };
})();
