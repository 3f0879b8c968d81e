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
