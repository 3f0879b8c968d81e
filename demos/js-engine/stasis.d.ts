// Types of a Stasis JavaScript or TypeScript actor: the module "stasis"
// (the host API), the default export's handlers, and the globals the
// engine provides (demos/js-engine/src/prelude.js and subtle.js of
// Stasis). Written by `stasis new ts`; with `"lib": ["ES2023"]` and no
// DOM types, `tsc --noEmit` checks a script against what the engine has.
// docs/javascript.md of Stasis is the guide.

declare module "stasis" {
  /** What `fetch`/`call`/`send` take as the request. */
  export type RequestInfo = string | URL | Request;

  /** Calls another actor and waits for its answer. */
  export function call(actor: string, input: RequestInfo, init?: RequestInit): Promise<Response>;
  /** Sends a request to another actor without waiting (fire and forget). */
  export function send(actor: string, input: RequestInfo, init?: RequestInit): Promise<void>;
  /** Sets this actor's alarm at `when` (a Date or Unix milliseconds); `alarm()` runs then. */
  export function setAlarm(when: Date | number): void;
  /** Cancels the pending alarm, if any. */
  export function cancelAlarm(): void;
  /** The pending alarm's time in Unix milliseconds, or null. */
  export function getAlarm(): number | null;
  /** This actor's name. */
  export function selfName(): string;
  /** A request to the outside (hosts the server's --allow-outbound allows). */
  export const fetch: (input: RequestInfo, init?: RequestInit) => Promise<Response>;
  /** The id a request's WebSocket or stream will have if the handler accepts it, or null. */
  export function socketId(request: Request): number | null;
  /** The answer that accepts a WebSocket upgrade. */
  export function acceptWebSocket(): Response;
  /** An answer that keeps the response open as a stream (server-sent events). */
  export function openStream(body?: BodyInit | null, init?: ResponseInit): Response;
  /** Sends a string (a text message) or bytes (binary) on one socket or stream. */
  export function socketSend(id: number, data: string | Uint8Array): void;
  /** Sends to every open socket and stream of this actor. */
  export function broadcast(data: string | Uint8Array): void;
  /** Closes a socket (code 1000 or 3000-4999) or ends a stream. */
  export function socketClose(id: number, code?: number, reason?: string): void;
  /** The ids of this actor's open sockets and streams. */
  export function sockets(): number[];

  /** The template's environment (`stasis template push NAME app.ts --env K=V`). */
  export type Env = Readonly<Record<string, string>>;

  /** The third argument of `fetch`. */
  export interface Context {
    /** This actor's name. */
    readonly actor: string;
    /** The worker it runs on. */
    readonly worker: string;
    /** Does nothing (the actor's memory outlives the request). */
    waitUntil(promise: Promise<unknown>): void;
    /** Does nothing. */
    passThroughOnException(): void;
  }

  /** An event on one of the actor's WebSockets or streams. */
  export interface SocketEvent {
    readonly socket: number;
    readonly type: "message" | "close";
    /** A string for a text message, bytes for a binary one; undefined for "close". */
    readonly data?: string | Uint8Array;
    readonly code: number;
    readonly reason: string;
  }

  /** What `save()` may return and `load()` receives (structured clone, without cycles). */
  export type Cloneable =
    | null
    | undefined
    | boolean
    | number
    | string
    | bigint
    | Date
    | RegExp
    | ArrayBuffer
    | ArrayBufferView
    | Cloneable[]
    | Map<Cloneable, Cloneable>
    | Set<Cloneable>
    | { [key: string]: Cloneable };

  /** The module's default export. */
  export interface Handler<State extends Cloneable = Cloneable> {
    /** What the next version's `load` is told as `fromVersion`. */
    version?: number;
    /** One HTTP request; any value other than a Response is sent as its string. */
    fetch(request: Request, env: Env, ctx: Context): Response | string | Promise<Response | string>;
    /** The actor's alarm fired (see setAlarm); an exception is retried with backoff. */
    alarm?(): void | Promise<void>;
    /** An event on one of the actor's WebSockets or streams. */
    socket?(event: SocketEvent): void | Promise<void>;
    /** The state handed to the next version at an upgrade. */
    save?(): State | Promise<State>;
    /** Takes the state the running version saved (`fromVersion`: its `version`). */
    load?(value: State, fromVersion: number | undefined): void | Promise<void>;
  }
}

// The globals of the engine (a Workers-like subset; no DOM).

type BodyInit = string | ArrayBuffer | ArrayBufferView | null;
type HeadersInit = Headers | [string, string][] | Record<string, string>;

interface RequestInit {
  method?: string;
  headers?: HeadersInit;
  body?: BodyInit;
}

interface ResponseInit {
  status?: number;
  statusText?: string;
  headers?: HeadersInit;
}

declare class Headers implements Iterable<[string, string]> {
  constructor(init?: HeadersInit | Iterable<[string, string]>);
  append(name: string, value: string): void;
  set(name: string, value: string): void;
  get(name: string): string | null;
  has(name: string): boolean;
  delete(name: string): void;
  forEach(f: (value: string, name: string, headers: Headers) => void, self?: unknown): void;
  keys(): IterableIterator<string>;
  values(): IterableIterator<string>;
  entries(): IterableIterator<[string, string]>;
  [Symbol.iterator](): IterableIterator<[string, string]>;
}

/** Bodies are whole byte arrays (no streams). */
declare abstract class Body {
  readonly bodyUsed: boolean;
  arrayBuffer(): Promise<ArrayBuffer>;
  bytes(): Promise<Uint8Array>;
  text(): Promise<string>;
  json<T = unknown>(): Promise<T>;
}

declare class Request extends Body {
  constructor(input: string | URL | Request, init?: RequestInit);
  /** `http://<Host header><path and query>` for the request a handler gets. */
  readonly url: string;
  readonly method: string;
  readonly headers: Headers;
  clone(): Request;
}

declare class Response extends Body {
  constructor(body?: BodyInit, init?: ResponseInit);
  readonly status: number;
  readonly statusText: string;
  readonly headers: Headers;
  readonly ok: boolean;
  clone(): Response;
  static json(data: unknown, init?: ResponseInit): Response;
  static redirect(url: string | URL, status?: number): Response;
}

declare class URLSearchParams implements Iterable<[string, string]> {
  constructor(query?: string);
  get(name: string): string | null;
  getAll(name: string): string[];
  has(name: string): boolean;
  entries(): IterableIterator<[string, string]>;
  [Symbol.iterator](): IterableIterator<[string, string]>;
  toString(): string;
}

/** A subset of URL: no setters. */
declare class URL {
  constructor(url: string | URL, base?: string | URL);
  readonly protocol: string;
  readonly host: string;
  readonly hostname: string;
  readonly port: string;
  readonly pathname: string;
  readonly search: string;
  readonly hash: string;
  readonly searchParams: URLSearchParams;
  readonly origin: string;
  readonly href: string;
  toString(): string;
  toJSON(): string;
}

declare class TextEncoder {
  readonly encoding: "utf-8";
  encode(text?: string): Uint8Array;
}

declare class TextDecoder {
  constructor(label?: "utf-8" | "utf8", options?: { fatal?: boolean; ignoreBOM?: boolean });
  readonly encoding: string;
  decode(bytes?: ArrayBuffer | ArrayBufferView, options?: { stream?: boolean }): string;
}

/** To the actor's log (stdout / stderr). */
declare const console: {
  log(...data: unknown[]): void;
  error(...data: unknown[]): void;
};

declare class DOMException extends Error {
  constructor(message?: string, name?: string);
  readonly name: string;
}

declare class CryptoKey {
  readonly type: "secret";
  readonly extractable: boolean;
  readonly algorithm: { name: "HMAC"; hash: { name: string }; length: number };
  readonly usages: ("sign" | "verify")[];
}

type HashAlgorithm = "SHA-1" | "SHA-256" | "SHA-384" | "SHA-512" | { name: "SHA-1" | "SHA-256" | "SHA-384" | "SHA-512" };
type HmacAlgorithm = { name: "HMAC"; hash: HashAlgorithm; length?: number };
type BufferSource = ArrayBuffer | ArrayBufferView;
interface JsonWebKey {
  kty?: string;
  k?: string;
  alg?: string;
  ext?: boolean;
  key_ops?: string[];
}

/** SHA digests and HMAC only (docs/javascript.md). */
declare class SubtleCrypto {
  digest(algorithm: HashAlgorithm, data: BufferSource): Promise<ArrayBuffer>;
  importKey(format: "raw", key: BufferSource, algorithm: HmacAlgorithm, extractable: boolean, usages: ("sign" | "verify")[]): Promise<CryptoKey>;
  importKey(format: "jwk", key: JsonWebKey, algorithm: HmacAlgorithm, extractable: boolean, usages: ("sign" | "verify")[]): Promise<CryptoKey>;
  exportKey(format: "raw", key: CryptoKey): Promise<ArrayBuffer>;
  exportKey(format: "jwk", key: CryptoKey): Promise<JsonWebKey>;
  generateKey(algorithm: HmacAlgorithm, extractable: boolean, usages: ("sign" | "verify")[]): Promise<CryptoKey>;
  sign(algorithm: "HMAC" | { name: "HMAC" }, key: CryptoKey, data: BufferSource): Promise<ArrayBuffer>;
  verify(algorithm: "HMAC" | { name: "HMAC" }, key: CryptoKey, signature: BufferSource, data: BufferSource): Promise<boolean>;
}

declare const crypto: {
  getRandomValues<T extends ArrayBufferView>(array: T): T;
  randomUUID(): string;
  readonly subtle: SubtleCrypto;
};

declare function fetch(input: string | URL | Request, init?: RequestInit): Promise<Response>;
/** Runs while the delivery that set it is under way; dropped once it ends (use setAlarm). */
declare function setTimeout<A extends unknown[]>(fn: (...args: A) => void, ms?: number, ...args: A): number;
declare function setInterval<A extends unknown[]>(fn: (...args: A) => void, ms?: number, ...args: A): number;
declare function clearTimeout(id?: number): void;
declare function clearInterval(id?: number): void;
declare function queueMicrotask(fn: () => void): void;
declare function atob(text: string): string;
declare function btoa(text: string): string;
declare function structuredClone<T>(value: T): T;

declare const performance: {
  /** Milliseconds since the template's push, never going back (also across pauses and moves). */
  now(): number;
  readonly timeOrigin: number;
};
