// The status page: polls GET /v1/status every second and shows it. Text only goes through
// textContent (no HTML is ever parsed from data), so names and key values cannot become
// markup. Rates are the server's (over real time since an earlier poll at least a second
// old), not computed from the browser's clock, which may be throttled or virtual.
"use strict";

const POLL_MS = 1000;
// The hour of history is sampled every server.history_interval (10 s by default): fetched
// every few seconds, not at every poll.
const HISTORY_MS = 5000;
const SVG = "http://www.w3.org/2000/svg";
let polls = 0;
let history = null;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function set(id, text, cls) {
  const e = document.getElementById(id);
  e.textContent = text;
  e.className = cls || "";
}

function fmtMs(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 1) return (ms * 1000).toFixed(0) + " µs";
  if (ms < 100) return ms.toFixed(2) + " ms";
  return ms.toFixed(0) + " ms";
}

function fmtRate(r) {
  if (r === null || r === undefined) return "–";
  return r < 10 ? r.toFixed(1) : r.toFixed(0);
}

function fmtDuration(ms) {
  let s = Math.floor(ms / 1000);
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  return (d ? d + "d " : "") + (d || h ? h + "h " : "") + (d || h || m ? m + "m " : "") + s + "s";
}

function quota(l) {
  let q = l.limit + " / " + l.period;
  if (l.burst !== undefined) q += ", burst " + l.burst;
  if (l.buckets !== undefined) q += ", " + l.buckets + " buckets";
  return q;
}

function fmtAge(ms) {
  return (ms / 1000).toFixed(1) + " s ago";
}

function svgEl(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const k of Object.keys(attrs)) e.setAttribute(k, String(attrs[k]));
  return e;
}

// A line of `values` (nulls are gaps), scaled to its maximum, in a 100 × 24 box.
function sparkline(values, cls, label) {
  const svg = svgEl("svg", { viewBox: "0 0 100 24", preserveAspectRatio: "none", role: "img" });
  const present = values.filter((v) => v !== null && v !== undefined);
  const max = present.length ? Math.max(...present) : 0;
  svg.setAttribute("aria-label", label + ", max " + max);
  svg.dataset.max = String(max);
  svg.dataset.points = String(values.length);
  const n = values.length;
  let d = "";
  let pen = false;
  values.forEach((v, i) => {
    if (v === null || v === undefined) { pen = false; return; }
    const x = n > 1 ? (i * 100) / (n - 1) : 50;
    const y = 23 - (max > 0 ? (v * 22) / max : 0);
    d += (pen ? "L" : "M") + x.toFixed(2) + " " + y.toFixed(2);
    pen = true;
  });
  if (d) svg.appendChild(svgEl("path", { d, class: "line " + (cls || "") }));
  return svg;
}

// One cell per point: green when the store answered, red when not.
function upStrip(points) {
  const svg = svgEl("svg", { viewBox: "0 0 100 24", preserveAspectRatio: "none", role: "img" });
  const n = points.length;
  svg.setAttribute("aria-label", "store up, " + points.filter((p) => !p.up).length + " points down");
  svg.dataset.down = String(points.filter((p) => !p.up).length);
  points.forEach((p, i) => {
    svg.appendChild(svgEl("rect", {
      x: ((i * 100) / Math.max(n, 1)).toFixed(2), y: 4, width: (100 / Math.max(n, 1)).toFixed(2), height: 16,
      class: p.up ? "up" : "down",
    }));
  });
  return svg;
}

function clock(ms) {
  return new Date(ms).toISOString().slice(11, 19) + " UTC";
}

function renderOutage(outage, nowMs) {
  if (!outage) { set("store-outage", "none since the start", "ok"); return; }
  if (outage.to_ms === null) {
    set("store-outage", "down since " + clock(outage.from_ms) + " (" + fmtDuration(nowMs - outage.from_ms) +
      ", " + outage.error + ")", "bad");
  } else {
    set("store-outage", "last outage " + clock(outage.from_ms) + " – " + clock(outage.to_ms) + " (" +
      fmtDuration(outage.to_ms - outage.from_ms) + ", " + outage.error + "); recovered " +
      fmtDuration(nowMs - outage.to_ms) + " ago", "warn");
  }
}

function renderHistory(h) {
  const pts = h.points;
  const put = (id, svg) => document.getElementById(id).replaceChildren(svg);
  put("history-decisions", sparkline(pts.map((p) => p.decisions), "", "decisions"));
  put("history-refused", sparkline(pts.map((p) => p.refused), "refused", "refused"));
  put("history-errors", sparkline(pts.map((p) => p.store_errors), "errors", "store errors"));
  put("history-p99", sparkline(pts.map((p) => p.p99_ms), "", "p99 ms"));
  put("history-up", upStrip(pts));
  document.getElementById("history").dataset.points = String(pts.length);
  const span = pts.length ? fmtDuration(pts.length * h.interval_s * 1000) : "nothing yet";
  set("history-note", "one point every " + h.interval_s + " s; " + span + " kept (an hour at most). " +
    "Per-limit lines for at most 64 limits.");
  renderOutage(h.outage, h.now_ms);
}

async function pollHistory() {
  try {
    const response = await fetch("/v1/history", { cache: "no-store" });
    if (response.ok) {
      history = await response.json();
      renderHistory(history);
    }
  } catch (e) {
    // The status poll reports an unreachable service.
  } finally {
    setTimeout(pollHistory, HISTORY_MS);
  }
}

// A key as "user=42,ip=10.0.0.1"; a limit keyed by nothing has one key, the whole limit.
function keyText(key) {
  const parts = Object.keys(key);
  if (!parts.length) return "(no key: every request)";
  return parts.map((k) => k + "=" + key[k]).join(",");
}

function renderStore(s) {
  set("store-kind", s.kind);
  if (!s.connected) set("store-health", "not connected (connecting in the background)", "bad");
  else if (s.up) set("store-health", "up (probe " + fmtMs(s.probe_ms) + ", " + fmtAge(s.probe_age_ms) + ")", "ok");
  else set("store-health", "down: " + s.error + " (probe " + fmtAge(s.probe_age_ms) + ")", "bad");
  if (s.circuit_open === null) set("store-breaker", "–");
  else if (s.circuit_open) set("store-breaker", s.circuit_cause ? "open: " + s.circuit_cause : "open", "bad");
  else set("store-breaker", "closed", "ok");
  if (s.latency) {
    const l = s.latency;
    set("store-latency", "p50 " + fmtMs(l.p50_ms) + " · p90 " + fmtMs(l.p90_ms) + " · p99 " +
      fmtMs(l.p99_ms) + " · max " + fmtMs(l.max_ms) + " (" + l.samples + " calls)",
      l.p99_ms > 0.8 * s.timeout_ms ? "warn" : "");
  } else {
    set("store-latency", "no store call in the last minute");
  }
  set("store-timeout", fmtMs(s.timeout_ms));
  const dc = s.deny_cache;
  set("store-deny-cache", dc.enabled ? dc.entries + " of " + dc.capacity + " refusals held" : "off");
  if (s.max_keys === null) set("store-keys", "– (kept by Redis)");
  else set("store-keys", s.keys + " of " + s.max_keys, s.keys > 0.9 * s.max_keys ? "warn" : "");
}

// A time as "2026-12-07 14:02:11 UTC".
function fmtAt(ms) {
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

function renderReload(r, uptime) {
  set("uptime", fmtDuration(uptime));
  set("reload-watching", r.watching ? "yes (reloaded on change and SIGHUP)" : "no (started without --config)");
  if (!r.last) {
    set("reload-last", "none since start");
  } else {
    const at = fmtAt(r.last.at_ms);
    if (r.last.ok) set("reload-last", at + ": applied", "ok");
    else set("reload-last", at + ": refused: " + r.last.error, "bad");
  }
  const pending = r.pending_restart || [];
  if (pending.length) set("reload-restart", "changed in the file, waiting for a restart: " + pending.join(", "), "bad");
  else set("reload-restart", "none", "ok");
}

function renderPanics(p) {
  if (p === null) {
    set("panics", "not counted (no panic hook in this program)", "warn");
    return;
  }
  if (!p.count) {
    set("panics", "none since start", "ok");
    return;
  }
  let text = p.count + " since start (each a bug: the log says why)";
  if (p.last) {
    text += "; last " + fmtAt(p.last.at_ms) + " at " + p.last.location + ", thread " + p.last.thread;
  }
  set("panics", text, "bad");
}

function renderLimits(status) {
  const rows = status.limits.map((l) => {
    const d = l.decisions;
    const total = d.allowed + d.denied + d.store_error_allowed + d.store_error_denied;
    const tr = el("tr");
    tr.dataset.limit = l.name;
    const cell = (text, field, cls) => {
      const td = el("td", text, cls);
      if (field) td.dataset.field = field;
      tr.appendChild(td);
      return td;
    };
    cell(l.name + (l.shadow ? " (shadow)" : ""), "name");
    cell(l.algorithm, "algorithm");
    cell(quota(l), "quota");
    cell(l.on_store_error, "on_store_error");
    cell(fmtRate(l.rate && l.rate.decisions_per_s), "rate", "num");
    cell(fmtRate(l.rate && l.rate.denied_per_s), "denied_rate", "num");
    const ratio = l.deny_ratio === null ? "–" : (l.deny_ratio * 100).toFixed(1) + " %";
    cell(ratio, "deny_ratio", "num" + (l.deny_ratio > 0.5 ? " warn" : ""));
    cell(total, "total", "num");
    cell(d.denied, "denied", "num");
    const errors = d.store_error_allowed + d.store_error_denied;
    cell(errors, "store_errors", "num" + (errors > 0 ? " bad" : ""));
    const spark = cell(null, "history", "spark");
    // Own properties only: a limit may be named `constructor` or `toString`.
    const series = history && Object.hasOwn(history.limits, l.name) ? history.limits[l.name] : null;
    if (series) {
      spark.appendChild(sparkline(series.decisions, "", l.name + " decisions"));
    } else {
      spark.textContent = "–";
    }
    const keys = cell(null, "top");
    const ul = el("ul", null, "keys");
    for (const k of l.top_denied) {
      // Listed by the refusals each key certainly had (denied − error), most first. A key
      // whose count may be half or more overstatement (a one-off key after a flood inherits
      // the flood's count) is marked: it may have been refused only denied − error times.
      const certain = k.denied - k.error;
      const uncertain = "uncertain" in k ? k.uncertain === true : k.error > 0 && k.error >= certain;
      const text = keyText(k.key) + " ×" + k.denied + (k.error ? " (±" + k.error + ")" : "");
      const li = el("li", uncertain ? text + " uncertain" : text, uncertain ? "uncertain" : null);
      if (uncertain) li.title = "refused at least " + certain + " times; the rest of its count may be other keys'";
      ul.appendChild(li);
    }
    if (!l.top_denied.length) ul.appendChild(el("li", "–"));
    keys.appendChild(ul);
    return tr;
  });
  if (!rows.length) {
    const tr = el("tr");
    const td = el("td", "no limits configured");
    td.colSpan = 12;
    tr.appendChild(td);
    rows.push(tr);
  }
  document.getElementById("limits-body").replaceChildren(...rows);
}

async function poll() {
  try {
    const response = await fetch("/v1/status", { cache: "no-store" });
    if (!response.ok) throw new Error("GET /v1/status: HTTP " + response.status);
    const status = await response.json();
    set("version", "v" + status.version);
    renderStore(status.store);
    if (!history) renderOutage(status.store.outage, status.now_ms);
    renderReload(status.reload, status.uptime_ms);
    renderPanics(status.panics);
    renderLimits(status);
    polls += 1;
    document.body.dataset.polls = String(polls);
    const state = document.getElementById("state");
    state.dataset.state = "ok";
    state.textContent = "updated " + new Date(status.now_ms).toISOString().slice(11, 19) + " UTC";
  } catch (e) {
    const state = document.getElementById("state");
    state.dataset.state = "error";
    state.textContent = "cannot reach the service: " + e.message;
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
pollHistory();
