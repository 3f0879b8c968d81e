// The module `stasis`: the host API of a JavaScript actor.
const host = globalThis.__stasis_host;
const native = globalThis.__stasis_native;

// Calls another actor and waits for its answer (a Response).
export async function call(actor, input, init) { return host.call(actor, input, init); }
// Sends a request to another actor without waiting (fire and forget).
export async function send(actor, input, init) { host.send(actor, input, init); }
// Sets this actor's alarm at `when` (a Date or Unix milliseconds).
export function setAlarm(when) { native.setAlarm(+when); }
// Cancels the pending alarm, if any.
export function cancelAlarm() { native.cancelAlarm(); }
// The pending alarm's time in Unix milliseconds, or null.
export function getAlarm() { return native.getAlarm(); }
// This actor's name.
export function selfName() { return native.selfName(); }
// A request to the outside (hosts allowed by --allow-outbound).
export const fetch = globalThis.fetch;
// The id a request's WebSocket or stream will have if the handler accepts
// it (a WebSocket upgrade, or a request accepting text/event-stream), or null.
export function socketId(request) {
  const id = request.headers.get("stasis-socket");
  return id === null ? null : Number(id);
}
// The answer that accepts a WebSocket upgrade.
export function acceptWebSocket() { return new Response(null, { status: 101 }); }
// An answer that keeps the response open as a stream (server-sent events
// with content-type text/event-stream); later socketSend calls append to it.
export function openStream(body, init = {}) {
  const r = new Response(body, init);
  r.headers.set("stasis-stream", "open");
  return r;
}
// Sends a string (a text message) or a Uint8Array (binary) on one socket.
export function socketSend(id, data) { native.socketSend(id, data); }
// Sends to every open socket and stream of this actor.
export function broadcast(data) { native.socketSend(-1, data); }
// Closes a socket (code 1000 or 3000-4999) or ends a stream.
export function socketClose(id, code = 1000, reason = "") { native.socketClose(id, code, reason); }
// The ids of this actor's open sockets and streams.
export function sockets() { return native.sockets(); }
