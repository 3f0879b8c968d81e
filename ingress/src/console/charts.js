// The console's charts: request rate, latency p50/p99 and memory, computed
// in the browser from what the admin API already serves. Latency and rate
// come from the Prometheus histograms of `/metrics`
// (`stasis_request_duration_seconds`, and per actor
// `stasis_actor_request_duration_seconds` with `--metrics-per-actor`):
// each poll's bucket counts minus the previous poll's are the requests of
// that interval, whose percentiles are read off the buckets the way
// Prometheus's `histogram_quantile` does. Memory is the workers' (or the
// actor's) `memory_bytes`. Drawn as inline SVG; no library.
"use strict";

// How often the charts are fed, and how much of the past they show.
const SAMPLE_MS = 2000;
const WINDOW_MS = 3 * 60 * 1000;
const SVG = "http://www.w3.org/2000/svg";

// The samples of `text` (Prometheus text format) whose metric name
// `wanted` accepts: [{name, labels, value}].
function parseMetrics(text, wanted) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const brace = line.indexOf("{");
    const close = line.lastIndexOf("}");
    const labelled = brace >= 0 && close > brace;
    const name = labelled ? line.slice(0, brace) : line.split(" ")[0];
    if (!wanted(name)) continue;
    const labels = {};
    if (labelled) {
      const pairs = /([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
      const body = line.slice(brace + 1, close);
      let m;
      while ((m = pairs.exec(body)) !== null) {
        labels[m[1]] = m[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
      }
    }
    const rest = labelled ? line.slice(close + 1) : line.slice(name.length);
    const value = Number(rest.trim().split(/\s+/)[0]);
    if (!Number.isNaN(value)) samples.push({ name, labels, value });
  }
  return samples;
}

// Histogram `name` summed over the series `keep` accepts: its count and
// its cumulative bucket counts by upper bound (`le`, +Inf included).
function histogramOf(samples, name, keep) {
  const buckets = new Map();
  let count = 0;
  let found = false;
  for (const s of samples) {
    if (!keep(s.labels)) continue;
    if (s.name === `${name}_bucket`) {
      const le = s.labels.le === "+Inf" ? Infinity : Number(s.labels.le);
      buckets.set(le, (buckets.get(le) || 0) + s.value);
      found = true;
    } else if (s.name === `${name}_count`) {
      count += s.value;
      found = true;
    }
  }
  return found ? { count, buckets } : null;
}

// The `q` quantile (0..1) of the requests between histograms `before` and
// `after`, in seconds, interpolated inside its bucket; null without any.
function quantileBetween(q, before, after) {
  const bounds = [...after.buckets.keys()].sort((a, b) => a - b);
  const counts = bounds.map((le) => after.buckets.get(le) - (before.buckets.get(le) || 0));
  const total = counts[counts.length - 1];
  if (!(total > 0)) return null;
  const rank = q * total;
  let lower = 0;
  let below = 0;
  for (let i = 0; i < bounds.length; i += 1) {
    if (counts[i] >= rank) {
      if (bounds[i] === Infinity) return lower;
      const inside = counts[i] - below;
      return lower + (bounds[i] - lower) * (inside > 0 ? (rank - below) / inside : 0);
    }
    lower = bounds[i];
    below = counts[i];
  }
  return lower;
}

// Timed values of one line of a chart, the last WINDOW_MS of them; a null
// value is a gap (no request in that interval: no latency).
class Track {
  constructor() { this.points = []; }
  push(at, value) {
    this.points.push({ at, value });
    while (this.points.length && this.points[0].at < at - WINDOW_MS) this.points.shift();
  }
  last() {
    for (let i = this.points.length - 1; i >= 0; i -= 1) {
      if (this.points[i].value !== null) return this.points[i].value;
    }
    return null;
  }
}

// Rate and latency of one histogram, fed with each poll of `/metrics`.
class Load {
  constructor(name, keep) {
    this.name = name;
    this.keep = keep;
    this.previous = null;
    this.seen = false;
    this.rate = new Track();
    this.p50 = new Track();
    this.p99 = new Track();
  }
  update(samples, at) {
    const current = histogramOf(samples, this.name, this.keep);
    const before = this.previous;
    this.previous = current && { at, histogram: current };
    if (!current) return;
    this.seen = true;
    // The first poll that has the series is the start of the first interval.
    if (!before) return;
    const seconds = (at - before.at) / 1000;
    const requests = current.count - before.histogram.count;
    // A restart of the server starts its counters again: no point.
    if (seconds <= 0 || requests < 0) return;
    this.rate.push(at, requests / seconds);
    this.p50.push(at, quantileBetween(0.5, before.histogram, current));
    this.p99.push(at, quantileBetween(0.99, before.histogram, current));
  }
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

// A round number at or above `n`, the top of a chart's scale.
function ceiling(n) {
  if (!(n > 0)) return 1;
  const step = 10 ** Math.floor(Math.log10(n));
  for (const m of [1, 2, 5, 10]) if (m * step >= n) return m * step;
  return 10 * step;
}

// The same for a number of bytes: a round number of KiB, MiB or GiB.
function ceilingBytes(n) {
  const unit = 1024 ** Math.max(0, Math.floor(Math.log(Math.max(n, 1)) / Math.log(1024)));
  return ceiling(n / unit) * unit;
}

// An empty chart: a figure with a caption of its lines' last values and an
// SVG drawn by `drawChart`. `lines` are [{key, label}].
function chartFigure(id, title, lines) {
  const caption = document.createElement("figcaption");
  caption.append(Object.assign(document.createElement("span"), { className: "title", textContent: title }));
  for (const [i, line] of lines.entries()) {
    const value = document.createElement("span");
    value.className = `value line-${i}`;
    value.dataset.line = line.key;
    value.textContent = `${line.label ? `${line.label} ` : ""}–`;
    caption.append(" ", value);
  }
  const figure = document.createElement("figure");
  figure.className = "chart";
  figure.dataset.chart = id;
  figure.append(caption, svg("svg", { viewBox: "0 0 300 90", preserveAspectRatio: "none", role: "img" }));
  return figure;
}

// Draws `tracks` ({key, label, track}) in `figure`, values shown by
// `format`; `note` replaces the lines when there is nothing to draw.
function drawChart(figure, tracks, format, note, scaleOf = ceiling) {
  const W = 300;
  const H = 90;
  const now = Date.now();
  const values = tracks.flatMap((t) => t.track.points.map((p) => p.value)).filter((v) => v !== null);
  const top = scaleOf(Math.max(0, ...values));
  // The last WINDOW_MS, or less while the page has seen less (10 s at least).
  const first = Math.min(now, ...tracks.flatMap((t) => t.track.points.map((p) => p.at)));
  const span = Math.min(WINDOW_MS, Math.max(10000, now - first + SAMPLE_MS));
  const area = figure.querySelector("svg");
  const parts = [svg("line", { x1: 0, y1: H - 0.5, x2: W, y2: H - 0.5, class: "axis" }),
    svg("line", { x1: 0, y1: H / 2, x2: W, y2: H / 2, class: "grid" })];
  const scale = svg("text", { x: 2, y: 10, class: "scale" });
  scale.textContent = format(top);
  parts.push(scale);
  for (const [i, t] of tracks.entries()) {
    let d = "";
    let pen = "M";
    let drawn = 0;
    for (const p of t.track.points) {
      if (p.value === null) { pen = "M"; continue; }
      const x = (W * (1 - (now - p.at) / span)).toFixed(1);
      const y = (H - 2 - (p.value / top) * (H - 14)).toFixed(1);
      d += `${pen}${x},${y} `;
      pen = "L";
      drawn += 1;
    }
    const last = t.track.last();
    parts.push(svg("path", { d: d.trim() || "M0,0", class: `line line-${i}`, "data-line": t.key,
      "data-points": drawn, "data-last": last === null ? "" : last }));
    const shown = figure.querySelector(`.value[data-line="${t.key}"]`);
    if (shown) shown.textContent = `${t.label ? `${t.label} ` : ""}${last === null ? "–" : format(last)}`;
  }
  if (note && !values.length) {
    const text = svg("text", { x: W / 2, y: H / 2 - 4, class: "note", "text-anchor": "middle" });
    text.textContent = note;
    parts.push(text);
  }
  area.replaceChildren(...parts);
}

function perSecond(n) { return `${n < 10 ? n.toFixed(1) : Math.round(n)}/s`; }
function millis(seconds) {
  const ms = seconds * 1000;
  return ms < 1 ? `${ms.toFixed(2)} ms` : ms < 100 ? `${ms.toFixed(1)} ms` : `${Math.round(ms)} ms`;
}

// The three charts (rate, latency, memory) of `load` and `memory`, in a
// row with `id`; `redraw()` draws them again.
function chartRow(id, load, memory, latencyNote) {
  const rate = chartFigure("rate", "Requests/s", [{ key: "rate" }]);
  const latency = chartFigure("latency", "Latency", [{ key: "p50", label: "p50" }, { key: "p99", label: "p99" }]);
  const mem = chartFigure("memory", "Memory", [{ key: "memory" }]);
  const row = document.createElement("div");
  row.className = "charts";
  row.id = id;
  row.append(rate, latency, mem);
  const redraw = () => {
    drawChart(rate, [{ key: "rate", track: load.rate }], perSecond, "waiting for requests");
    drawChart(latency, [{ key: "p50", label: "p50", track: load.p50 }, { key: "p99", label: "p99", track: load.p99 }],
      millis, load.seen || !latencyNote ? "no requests" : latencyNote);
    drawChart(mem, [{ key: "memory", track: memory }], bytes, "no data", ceilingBytes);
  };
  redraw();
  return { row, redraw };
}
