// The console's lists: the actors (charts of the whole server above them,
// then a search by name prefix, label, template and state filters and
// pages), the templates with their versions and their last rollout's
// progress, and the workers. Loaded before console.js, which routes to
// them.
"use strict";

// The actors list's filters (kept while the tab moves between views), and
// the token of each page from the first to the one shown (null: the first).
const filters = { prefix: "", labels: "", template: "", state: "", limit: 50 };
let pageTokens = [null];
const STATES = ["creating", "running", "pausing", "paused", "resuming", "migrating", "failed", "unknown"];

// The `continue` token of the actors after `name`: the list API's own
// (contract/src/listing.rs, `continue_token`: "a" and the name's UTF-8 in
// hex). A search by prefix starts its first page there.
function tokenAfter(name) {
  return `a${[...new TextEncoder().encode(name)].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

// A name just before every name that starts with `prefix` (names are of
// `a-z`, `0-9`, `-` and `.`, all below `~`).
function justBefore(prefix) {
  return `${prefix.slice(0, -1)}${String.fromCharCode(prefix.charCodeAt(prefix.length - 1) - 1)}~`;
}

// The query of the page that starts at `start` (a token, or null).
function actorsQuery(start, limit) {
  const q = new URLSearchParams();
  for (const label of filters.labels.split(/[\s,]+/).filter(Boolean)) q.append("label", label);
  if (filters.template) q.set("template", filters.template);
  if (filters.state) q.set("state", filters.state);
  q.set("limit", String(limit));
  if (start) q.set("continue", start);
  return q.toString();
}

// The page at `start`: its actors and the token of the next page (null on
// the last). A search by prefix asks for one actor more than it shows, to
// know whether a next page has any that match.
async function actorsPage(start) {
  const limit = Number(filters.limit);
  const prefix = filters.prefix;
  const first = start || (prefix ? tokenAfter(justBefore(prefix)) : null);
  const { text, headers } = await request("GET",
    `${listBase()}/actors?${actorsQuery(first, prefix ? limit + 1 : limit)}`);
  const actors = JSON.parse(text);
  if (!prefix) return { actors, next: headers.get("stasis-continue") };
  const matching = actors.filter((a) => a.name.startsWith(prefix));
  const shown = matching.slice(0, limit);
  const next = matching.length > limit ? tokenAfter(shown[shown.length - 1].name) : null;
  return { actors: shown, next };
}

function filterForm(apply) {
  const input = (id, value, attrs) => el("input", { id, value, autocomplete: "off", spellcheck: "false", ...attrs });
  const select = (id, options, value) => {
    const node = el("select", { id }, ...options.map(([v, label]) => el("option", { value: v }, label)));
    node.value = value;
    return node;
  };
  const templates = select("template-filter", [["", "any template"]], filters.template);
  api("GET", `${listBase()}/templates`).then((list) => {
    templates.append(...list.map((t) => el("option", { value: t.name }, t.name)));
    templates.value = filters.template;
  }).catch(() => { /* the list says why */ });
  const form = el("form", { id: "filters", class: "filters" },
    el("label", {}, "Name ", input("search", filters.prefix, { placeholder: "prefix", size: 12, type: "search" })),
    el("label", {}, "Labels ", input("label-filter", filters.labels, { placeholder: "tier=gold, …", size: 18 })),
    templates,
    select("state-filter", [["", "any state"], ...STATES.map((s) => [s, s])], filters.state),
    el("label", {}, "Per page ", select("page-size", [10, 25, 50, 100, 500].map((n) => [n, n]), String(filters.limit))),
    el("button", { type: "submit", id: "apply" }, "Filter"));
  const read = (event) => {
    if (event) event.preventDefault();
    filters.prefix = form.querySelector("#search").value.trim();
    filters.labels = form.querySelector("#label-filter").value.trim();
    filters.template = templates.value;
    filters.state = form.querySelector("#state-filter").value;
    filters.limit = Number(form.querySelector("#page-size").value);
    pageTokens = [null];
    apply();
  };
  form.addEventListener("submit", read);
  for (const node of form.querySelectorAll("select")) node.addEventListener("change", () => read());
  return form;
}

function labelChips(labels) {
  return el("span", { class: "labels" }, ...Object.entries(labels || {}).map(([k, v]) =>
    el("button", { type: "button", class: "label", title: "filter by this label",
      onclick: () => {
        const pair = `${k}=${v}`;
        if (!filters.labels.split(/[\s,]+/).includes(pair)) filters.labels = [filters.labels, pair].filter(Boolean).join(", ");
        pageTokens = [null];
        if (location.hash.startsWith("#/actor/")) location.hash = "#/";
        else route();
      } }, `${k}=${v}`)));
}

function actorRow(a, rate) {
  return el("tr", { "data-actor": a.name },
    el("td", {}, el("a", { href: `#/actor/${a.name}` }, a.name)),
    el("td", { class: `state-${a.state}` }, a.state),
    el("td", {}, a.template),
    el("td", { class: "num version" }, `v${a.template_version}`),
    el("td", { class: "labels" }, labelChips(a.labels)),
    el("td", {}, a.worker),
    el("td", { class: "num" }, bytes(a.memory_bytes)),
    el("td", { class: "num" }, (a.snapshots || []).length),
    el("td", { class: "num rate" }, rate),
    el("td", { class: "error" }, a.error ? `${a.error}${a.last_error_at ? ` (${a.last_error_at})` : ""}` : ""));
}

// The actors: charts of the server, the filters, a page of actors with
// their state, version, labels, memory, request rate and last error.
function actorsView() {
  const table = el("table", { id: "actors" });
  const pageInfo = el("span", { id: "page-info" });
  const previous = el("button", { id: "previous", type: "button" }, "← previous");
  const next = el("button", { id: "next", type: "button" }, "next →");
  const scope = namespace() === "default" ? "All namespaces" : `Namespace ${namespace()}`;
  const charts = chartRow("server-charts", server.load, server.memory);
  let nextToken = null;
  let refresh = async () => {};
  previous.addEventListener("click", () => { if (pageTokens.length > 1) { pageTokens.pop(); refresh(); } });
  next.addEventListener("click", () => { if (nextToken) { pageTokens.push(nextToken); refresh(); } });
  view.replaceChildren(
    el("h1", {}, scope, el("span", { class: "note" }, " — requests and latency of the last 3 minutes, memory of every worker")),
    charts.row,
    el("h1", {}, "Actors"),
    filterForm(() => refresh()),
    table,
    el("div", { class: "pager" }, previous, pageInfo, next));
  redrawCharts = charts.redraw;
  // Only the newest refresh shows its page (a click may overtake a poll).
  let generation = 0;
  refresh = async () => guarded(async () => {
    generation += 1;
    const mine = generation;
    const page = await actorsPage(pageTokens[pageTokens.length - 1]);
    if (mine !== generation) return;
    const now = Date.now();
    const seconds = (now - lastCounts.at) / 1000;
    const counts = new Map(lastCounts.counts);
    const head = el("tr", {}, ...["actor", "state", "template", "version", "labels", "worker", "memory",
      "snapshots", "requests/s", "last error"].map((h) => el("th", {}, h)));
    const rows = page.actors.map((a) => {
      counts.set(a.name, a.requests);
      const before = lastCounts.counts.get(a.name);
      const rate = before === undefined || seconds <= 0 || a.requests < before
        ? "" : ((a.requests - before) / seconds).toFixed(1);
      return actorRow(a, rate);
    });
    lastCounts = { at: now, counts };
    table.replaceChildren(head, ...rows);
    nextToken = page.next;
    next.disabled = !nextToken;
    previous.disabled = pageTokens.length <= 1;
    pageInfo.textContent = `page ${pageTokens.length}: ${page.actors.length} actors${nextToken ? ", more after" : ""}`;
    say(`page ${pageTokens.length}: ${page.actors.length} actors in namespace ${namespace()}`);
  });
  return every(SAMPLE_MS, refresh);
}

// A rollout's progress: a bar of upgraded, failed and skipped actors out
// of its total, and a line of its figures.
function rolloutProgress(r) {
  const total = Math.max(1, r.total);
  const bar = svg("svg", { viewBox: "0 0 200 10", preserveAspectRatio: "none", class: "progress" });
  let x = 0;
  for (const [part, n] of [["upgraded", r.upgraded], ["failed", r.failed], ["skipped", r.skipped || 0]]) {
    const w = (200 * n) / total;
    bar.append(svg("rect", { x, y: 0, width: w, height: 10, class: part }));
    x += w;
  }
  const figures = `${r.kind} to v${r.to_version}: ${r.state} — ${r.upgraded}/${r.total} ${r.kind === "rollback" ? "moved back" : "upgraded"}`
    + `${r.failed ? `, ${r.failed} failed` : ""}${r.pending ? `, ${r.pending} pending` : ""}`
    + `${r.deferred ? ` (${r.deferred} deferred)` : ""}${r.skipped ? `, ${r.skipped} skipped` : ""}`
    + `${r.stop_reason ? `: ${r.stop_reason}` : ""}`;
  return el("div", { class: `rollout rollout-${r.state}`, "data-rollout": r.state }, bar, el("span", { class: "figures" }, figures),
    ...(r.failures || []).map((f) => el("div", { class: "error" }, `${f.actor}: ${f.reason}`)));
}

function templateRow(t, rollout, refresh) {
  const base = `${listBase()}/templates/${encodeURIComponent(t.name)}`;
  const versions = (t.versions || [{ version: t.version, actors: t.actors }]).map((v) =>
    el("span", { class: "version", "data-version": v.version, title: `sha256 ${v.digest || ""}` },
      `v${v.version}: ${v.actors} actor${v.actors === 1 ? "" : "s"}`));
  const to = el("input", { class: "to-version", type: "number", min: 1, value: t.version, size: 3 });
  const running = rollout && rollout.state === "running";
  return el("tr", { "data-template": t.name },
    el("td", {}, t.name), el("td", { class: "num" }, `v${t.version}`),
    el("td", { class: "versions" }, ...versions),
    el("td", { class: "num" }, t.actors), el("td", { class: "num" }, bytes(t.bytes)), el("td", {}, t.durability),
    el("td", { class: "rollout-cell" }, rollout ? rolloutProgress(rollout) : el("span", { class: "note" }, "none"),
      el("div", { class: "actions" }, to,
        el("button", { class: "roll-out", disabled: running ? "" : undefined,
          onclick: () => action("POST", `${base}/rollout`, { to_version: Number(to.value) }, refresh) }, "roll out"),
        rollout && rollout.kind === "rollout" && !running
          ? el("button", { class: "roll-back", onclick: () => action("POST", `${base}/rollback`, undefined, refresh) }, "roll back")
          : "")));
}

// The templates with every version and its actors, and each one's last
// rollout or rollback, followed live (every second while one runs).
function templatesView() {
  const table = el("table", { id: "templates" });
  view.replaceChildren(el("h1", {}, "Templates"), table);
  let stopped = false;
  let timer = null;
  const refresh = async () => {
    clearTimeout(timer);
    let busy = false;
    await guarded(async () => {
      const templates = await api("GET", `${listBase()}/templates`);
      const rollouts = await Promise.all(templates.map((t) =>
        api("GET", `${listBase()}/templates/${encodeURIComponent(t.name)}/rollout`).catch((e) => {
          if (e.status === 404) return null;
          throw e;
        })));
      busy = rollouts.some((r) => r && r.state === "running");
      table.replaceChildren(
        el("tr", {}, ...["template", "newest", "versions", "actors", "module", "durability", "rollout"].map((h) => el("th", {}, h))),
        ...templates.map((t, i) => templateRow(t, rollouts[i], refresh)));
      say(`${templates.length} templates in namespace ${namespace()}`);
    });
    if (!stopped) timer = setTimeout(refresh, busy ? 1000 : 5000);
  };
  refresh();
  return () => { stopped = true; clearTimeout(timer); };
}

function workersView() {
  const table = el("table", { id: "workers" });
  view.replaceChildren(el("h1", {}, "Workers"), table);
  return every(3000, async () => {
    const workers = await api("GET", "/v1/workers");
    table.replaceChildren(
      el("tr", {}, ...["worker", "state", "address", "actors", "memory"].map((h) => el("th", {}, h))),
      ...workers.map((w) => el("tr", {},
        el("td", {}, w.name), el("td", {}, w.state), el("td", {}, w.address),
        el("td", { class: "num" }, w.actors), el("td", { class: "num" }, bytes(w.memory_bytes)))));
    say(`${workers.length} workers`);
  });
}
