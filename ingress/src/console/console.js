// The Stasis web console: a page over the admin API (docs/api.md), served
// at /ui/ on the admin port. Everything it shows comes from /v1 routes,
// with the token the user gives (kept in this tab's session storage).
"use strict";

const view = document.getElementById("view");
const statusLine = document.getElementById("status");
const login = document.getElementById("login");
// The view's timers and log follower, stopped when the view changes.
let stopView = () => {};
// Request counts seen at the last refresh, for the request rate.
let lastCounts = { at: 0, counts: new Map() };

function token() { return sessionStorage.getItem("stasis-token"); }

// The namespace the lists show (kept in this tab), and the routes of it:
// the default namespace's are the unprefixed ones (docs/api.md,
// "Namespaces").
function namespace() { return sessionStorage.getItem("stasis-namespace") || "default"; }
function listBase() {
  const ns = namespace();
  return ns === "default" ? "/v1" : `/v1/namespaces/${encodeURIComponent(ns)}`;
}
// An actor's routes, by its full name (`c1.team-a`, or `c1` in default).
function actorBase(full) {
  const dot = full.indexOf(".");
  const ns = dot < 0 ? "default" : full.slice(dot + 1);
  return `/v1/namespaces/${encodeURIComponent(ns)}/actors/${encodeURIComponent(full)}`;
}

class Unauthorized extends Error {}

// `method path` with the token; the answer's text and headers.
async function request(method, path, body) {
  const headers = {};
  if (token()) headers.authorization = `Bearer ${token()}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401) throw new Unauthorized("a token is required");
  const text = await response.text();
  if (!response.ok) {
    let message = text;
    try { message = JSON.parse(text).error || text; } catch (_) { /* text */ }
    const error = new Error(`${method} ${path}: ${response.status} ${message}`);
    error.status = response.status;
    throw error;
  }
  return { text, headers: response.headers };
}

async function api(method, path, body) {
  const { text } = await request(method, path, body);
  return text ? JSON.parse(text) : null;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) node.setAttribute(k, v);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child ?? "")));
  }
  return node;
}

function bytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function say(text, isError) {
  statusLine.textContent = text;
  statusLine.className = isError ? "error" : "";
}

async function guarded(work) {
  try {
    login.hidden = true;
    await work();
  } catch (e) {
    if (e instanceof Unauthorized) {
      login.hidden = false;
      view.replaceChildren();
      say("sign in with the admin token", true);
    } else {
      say(e.message, true);
    }
  }
}

function every(ms, work) {
  let stopped = false;
  const tick = async () => {
    if (stopped) return;
    await guarded(work);
    if (!stopped) setTimeout(tick, ms);
  };
  tick();
  return () => { stopped = true; };
}

async function action(method, path, body, done) {
  await guarded(async () => {
    await api(method, path, body);
    say(`${method} ${path}: done`);
    if (done) await done();
  });
}

// The load of the server (or of the namespace shown) and the memory of
// its workers, fed every SAMPLE_MS whatever the view, so that the charts
// have a past; and of each actor whose page was shown.
const server = { load: null, memory: null, ns: null };
const watched = new Map();
// The actor whose page is shown (full name), and the charts to redraw.
let watching = null;
let redrawCharts = () => {};

function namespaceOf(full) {
  const dot = full.indexOf(".");
  return dot < 0 ? "default" : full.slice(dot + 1);
}
function metricsPath(ns) {
  return ns === "default" ? "/metrics" : `/v1/namespaces/${encodeURIComponent(ns)}/metrics`;
}
function requestHistogram(name) { return name.startsWith("stasis_request_duration_seconds") || name.startsWith("stasis_actor_request_duration_seconds"); }
function resetServer() {
  server.ns = namespace();
  server.load = new Load("stasis_request_duration_seconds", () => true);
  server.memory = new Track();
}
function watch(full) {
  if (!watched.has(full)) {
    watched.set(full, { load: new Load("stasis_actor_request_duration_seconds", (l) => l.actor === full),
      memory: new Track(), requests: null });
  }
  return watched.get(full);
}

async function sample() {
  const at = Date.now();
  if (server.ns !== namespace()) resetServer();
  const parsed = new Map();
  const metrics = (path) => {
    if (!parsed.has(path)) parsed.set(path, request("GET", path).then((r) => parseMetrics(r.text, requestHistogram)));
    return parsed.get(path);
  };
  const load = server.load;
  try { load.update(await metrics(metricsPath(server.ns)), at); } catch (_) { /* not readable: no point */ }
  try {
    const workers = await api("GET", "/v1/workers");
    server.memory.push(at, workers.reduce((sum, w) => sum + (w.memory_bytes || 0), 0));
  } catch (_) { /* a namespace's token does not read the workers */ }
  if (watching) {
    try { watch(watching).load.update(await metrics(metricsPath(namespaceOf(watching))), at); } catch (_) { /* none */ }
  }
  redrawCharts();
}
resetServer();
(async function sampling() {
  await sample();
  setTimeout(sampling, SAMPLE_MS);
})();

// One actor: its fields, the buttons, its log following live, its events.
function actorView(name) {
  const base = actorBase(name);
  const facts = el("dl", { id: "facts" });
  const log = el("pre", { id: "log" });
  const events = el("ul", { class: "events", id: "events" });
  const forkName = el("input", { id: "fork-name", placeholder: "name of the copy", size: 20 });
  const confirmDelete = el("button", {
    class: "danger", id: "confirm-delete", hidden: "",
    onclick: () => action("DELETE", base, undefined, async () => { location.hash = "#/"; }),
  }, "really delete");
  const seen = watch(name);
  watching = name;
  const charts = chartRow("actor-charts", seen.load, seen.memory, "per-actor latency needs serve --metrics-per-actor");
  redrawCharts = charts.redraw;
  const refresh = async () => {
    const a = await api("GET", base);
    const at = Date.now();
    seen.memory.push(at, a.memory_bytes ?? null);
    // Without per-actor series (`--metrics-per-actor`), the rate from the
    // actor's request count.
    if (!seen.load.seen && seen.requests && at > seen.requests.at && a.requests >= seen.requests.n) {
      seen.load.rate.push(at, ((a.requests - seen.requests.n) * 1000) / (at - seen.requests.at));
    }
    seen.requests = { at, n: a.requests };
    charts.redraw();
    const fields = [["state", a.state], ["template", `${a.template} v${a.template_version}`],
      ["worker", a.worker], ["memory", bytes(a.memory_bytes)], ["snapshot", a.snapshot ? `#${a.snapshot.seq} (${bytes(a.snapshot.bytes)})` : ""],
      ["snapshots", (a.snapshots || []).length], ["requests", a.requests], ["resumes", a.resumes],
      ["durability", a.durability], ["created", a.created_at || ""], ["last request", a.last_request_at || ""], ["last snapshot", a.last_snapshot_at || ""],
      ["last pause", a.last_pause_at || ""], ["last resume", a.last_resume_at || ""],
      ["alarm", a.alarm_at || "none"], ["last error", a.error ? `${a.error} (${a.last_error_at || ""})` : "none"],
      ["labels", labelChips(a.labels)]];
    facts.replaceChildren(...fields.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-field": k }, v)]));
  };
  view.replaceChildren(
    el("h1", {}, `Actor ${name}`),
    el("div", { class: "actions" },
      el("button", { id: "pause", onclick: () => action("POST", `${base}/pause`, undefined, refresh) }, "pause"),
      el("button", { id: "resume", onclick: () => action("POST", `${base}/resume`, undefined, refresh) }, "resume"),
      forkName,
      el("button", {
        id: "fork",
        onclick: () => action("POST", `${base}/fork`, { name: forkName.value }, async () => {
          say(`forked into ${forkName.value}`);
        }),
      }, "fork"),
      el("button", { class: "danger", id: "delete", onclick: () => { confirmDelete.hidden = false; } }, "delete"),
      confirmDelete),
    charts.row,
    facts,
    el("h2", {}, "Log (following)"), log,
    el("h2", {}, "Recent events"), events);
  const stopFacts = every(2000, refresh);
  let stopped = false;
  // Long polls of the log and of the events (docs/api.md, "Logs").
  const follow = async (query, show) => {
    let after = null;
    while (!stopped) {
      try {
        const path = `${base}/logs?wait=25${query}${after === null ? "&tail=200" : `&after=${after}`}`;
        const headers = token() ? { authorization: `Bearer ${token()}` } : {};
        const response = await fetch(path, { headers });
        if (response.status === 404) return;
        if (!response.ok) throw new Error(`${response.status}`);
        for (const line of (await response.text()).split("\n").filter(Boolean)) {
          const entry = JSON.parse(line);
          after = entry.seq;
          show(entry);
        }
      } catch (_) {
        await new Promise((done) => setTimeout(done, 1000));
      }
    }
  };
  follow("", (entry) => {
    log.append(el("span", { class: entry.stream }, `${entry.at} ${entry.worker} ${entry.stream}: ${entry.text}\n`));
    log.scrollTop = log.scrollHeight;
  });
  follow("&stream=event", (entry) => {
    events.prepend(el("li", {}, `${entry.at} ${entry.worker}: ${entry.text}`));
  });
  return () => { stopped = true; stopFacts(); };
}

function route() {
  stopView();
  watching = null;
  redrawCharts = () => {};
  const hash = location.hash || "#/";
  const actor = hash.match(/^#\/actor\/(.+)$/);
  if (actor) stopView = actorView(decodeURIComponent(actor[1]));
  else if (hash === "#/templates") stopView = templatesView();
  else if (hash === "#/workers") stopView = workersView();
  else stopView = actorsView();
}

// The namespaces there are, as suggestions (a token of one namespace may
// not list them: it types its own).
const chooser = document.getElementById("namespace");
chooser.value = namespace();
chooser.addEventListener("change", () => {
  const ns = chooser.value.trim().toLowerCase() || "default";
  sessionStorage.setItem("stasis-namespace", ns);
  chooser.value = ns;
  resetServer();
  pageTokens = [null];
  filters.template = "";
  if (location.hash.startsWith("#/actor/")) location.hash = "#/";
  else route();
});
async function suggestNamespaces() {
  try {
    const namespaces = await api("GET", "/v1/namespaces");
    document.getElementById("namespaces").replaceChildren(
      ...namespaces.map((n) => el("option", { value: n.name }, `${n.actors} actors`)));
  } catch (_) { /* typed instead */ }
}

login.addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem("stasis-token", document.getElementById("token").value);
  route();
  suggestNamespaces();
});
window.addEventListener("hashchange", route);
route();
suggestNamespaces();
