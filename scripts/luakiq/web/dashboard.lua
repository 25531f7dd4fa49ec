-- luakiq.web.dashboard: the page served at GET / by `luakiq run --web` (luakiq.web).
-- One self-contained HTML page (inline CSS and JS, no build step, no external
-- requests) kept as a Lua string so the embedder compiles it into the binary
-- like every other module. It polls /api/web/dashboard every second and shows
-- the enqueued, busy and dead jobs of a worker from /api/web/workers/NAME/jobs;
-- every action sits behind a confirm() dialog. With web_token set, a 401 shows
-- a sign-in form (POST /api/web/login sets an HttpOnly cookie; the page never
-- holds the token) and a Sign out button. Job data is user data: it only
-- ever reaches the page through textContent, never as HTML.
return [==[<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>luakiq</title>
<link rel="icon" href="data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E%3Crect width='16' height='16' rx='3' fill='%231d2330'/%3E%3Cpath d='M4 3v10h8' stroke='%23fff' stroke-width='2' fill='none'/%3E%3C/svg%3E">
<style>
  :root { --fg:#1d2330; --muted:#6b7385; --bg:#f5f6f8; --card:#fff; --line:#e2e5eb;
          --accent:#2f6fde; --ok:#1f9d55; --bad:#d64545; --warn:#c98a00; }
  * { box-sizing: border-box; }
  body { margin:0; font:14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color:var(--fg); background:var(--bg); }
  header { display:flex; align-items:center; gap:16px; padding:10px 20px; background:#1d2330; color:#fff; }
  header a { color:#fff; text-decoration:none; font-weight:600; }
  header .status { margin-left:auto; font-size:12px; color:#b8c0d0; }
  header .status.err { color:#ff9b9b; }
  header form { display:flex; gap:4px; }
  header input, header select { font-size:12px; }
  main { padding:16px 20px; max-width:1400px; margin:0 auto; }
  h2 { font-size:16px; margin:18px 0 8px; }
  .cards { display:grid; grid-template-columns:repeat(auto-fill, minmax(120px, 1fr)); gap:8px; }
  .card { background:var(--card); border:1px solid var(--line); border-radius:6px; padding:8px 10px; }
  .card .k { font-size:11px; color:var(--muted); text-transform:uppercase; letter-spacing:.04em; }
  .card .v { font-size:20px; font-weight:600; font-variant-numeric:tabular-nums; }
  table { width:100%; border-collapse:collapse; background:var(--card); border:1px solid var(--line); }
  th, td { text-align:left; padding:6px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
  th { font-size:12px; color:var(--muted); font-weight:600; background:#fafbfc; }
  td.n, th.n { text-align:right; font-variant-numeric:tabular-nums; }
  td a { color:var(--accent); text-decoration:none; }
  td a:hover { text-decoration:underline; }
  pre { margin:0; white-space:pre-wrap; word-break:break-all; max-height:8em; overflow:auto; font-size:12px; }
  .err { color:var(--bad); }
  .chart { background:var(--card); border:1px solid var(--line); border-radius:6px; padding:8px; }
  canvas { width:100%; height:180px; display:block; }
  .legend span { margin-right:14px; font-size:12px; }
  .legend i { display:inline-block; width:10px; height:10px; margin-right:4px; border-radius:2px; }
  .bar { display:flex; flex-wrap:wrap; gap:8px; align-items:center; margin:8px 0; }
  .bar label { font-size:12px; color:var(--muted); }
  input, select, button { font:inherit; padding:4px 8px; border:1px solid var(--line); border-radius:4px; background:#fff; }
  button { cursor:pointer; }
  button.act { border-color:var(--accent); color:var(--accent); }
  button.danger { border-color:var(--bad); color:var(--bad); }
  span.paused { color:var(--bad); font-size:12px; }
  button:disabled { opacity:.5; cursor:default; }
  .tabs a { margin-right:12px; color:var(--accent); text-decoration:none; }
  .tabs a.on { font-weight:700; color:var(--fg); }
  #toast { position:fixed; right:16px; bottom:16px; padding:8px 12px; border-radius:6px; background:#1d2330; color:#fff; display:none; max-width:50ch; }
  .muted { color:var(--muted); }
  tr.late td { background:#fff1d6; color:#8a5a00; font-weight:600; }
  p.warning { background:#fff1d6; color:#8a5a00; border:1px solid #e8c77a; border-radius:6px; padding:8px 10px; font-weight:600; }
</style>
</head>
<body>
<header>
  <a href="#/">luakiq</a>
  <a href="#/failures" id="nav-failures">Failures</a>
  <form id="search"><input id="search-q" type="search" placeholder="id or tag" aria-label="job id or tag">
    <select id="search-by" aria-label="search by"><option value="id">by id</option><option value="tag">by tag</option></select>
    <button type="submit">find</button></form>
  <span id="hostinfo" class="muted"></span>
  <span id="status" class="status">connecting...</span>
  <button id="signout" type="button" style="display:none">Sign out</button>
</header>
<main id="view"></main>
<div id="toast"></div>
<script>
"use strict";
(function () {
  // The chart: jobs per minute from GET /api/v1/history (all hosts, kept
  // 7 days in Redis), over the range picked (the last hour on load).
  var RANGES = { "1h": { minutes: 60, step: 1, label: "last hour" },
                 "24h": { minutes: 1440, step: 10, label: "last 24 hours" },
                 "7d": { minutes: 10080, step: 60, label: "last 7 days" } };
  var range = "1h", history = null, historyAt = 0;
  var last = null;                 // last /api/web/dashboard answer
  var pending = false;
  var viewEl = document.getElementById("view");
  var statusEl = document.getElementById("status");

  // --- DOM helpers: data only ever goes in as text --------------------------
  function h(tag, attrs) {
    var el = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      var v = attrs[k];
      if (v == null || v === false) continue;
      if (k === "text") el.textContent = String(v);
      else if (k.slice(0, 2) === "on") el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c == null) continue;
      if (Array.isArray(c)) c.forEach(function (x) { if (x != null) el.appendChild(x.nodeType ? x : document.createTextNode(String(x))); });
      else el.appendChild(c.nodeType ? c : document.createTextNode(String(c)));
    }
    return el;
  }
  function fmtNum(n) { return n == null ? "-" : Number(n).toLocaleString("en-US"); }
  function fmtLag(s) {
    if (!s) return "0 s";
    if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + " s";
    if (s < 3600) return (s / 60).toFixed(1) + " min";
    if (s < 86400) return (s / 3600).toFixed(1) + " h";
    return (s / 86400).toFixed(1) + " d";
  }
  function fmtTime(t) {
    if (t == null) return "-";
    var d = new Date(t * 1000);
    return isNaN(d.getTime()) ? String(t) : d.toISOString().replace("T", " ").replace("Z", " UTC");
  }
  function toast(msg, bad) {
    var el = document.getElementById("toast");
    el.textContent = msg;
    el.style.background = bad ? "#d64545" : "#1d2330";
    el.style.display = "block";
    clearTimeout(toast.t);
    toast.t = setTimeout(function () { el.style.display = "none"; }, 4000);
  }
  function enc(s) { return encodeURIComponent(s); }

  // --- HTTP ----------------------------------------------------------------
  // With web_token set, every request carries the session cookie that
  // signing in sets (HttpOnly: this script never sees the token); a 401
  // shows the sign-in form instead of the page.
  function answer(r) {
    return r.json().then(function (body) {
      if (r.status === 401) { signIn(); throw new Error("sign in first"); }
      if (!r.ok) throw new Error(body && body.error || ("HTTP " + r.status));
      return body;
    });
  }
  function getJSON(url) {
    return fetch(url, { cache: "no-store", credentials: "same-origin" }).then(answer);
  }
  function post(url, body) {
    return fetch(url, { method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" },
                        body: JSON.stringify(body || {}) }).then(answer);
  }

  // --- signing in and out ----------------------------------------------------
  var locked = false;              // the sign-in form is up: polls wait
  function signIn() {
    if (locked) return;
    locked = true;
    document.getElementById("signout").style.display = "none";
    statusEl.textContent = "signed out";
    statusEl.className = "status";
    var input = h("input", { type: "password", id: "token", autocomplete: "current-password", size: 40 });
    var msg = h("p", { class: "err", id: "signin-error" });
    var form = h("form", { id: "signin", onsubmit: function (ev) {
      ev.preventDefault();
      fetch("/api/web/login", { method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" },
                                body: JSON.stringify({ token: input.value }) }).then(function (r) {
        return r.json().then(function (res) {
          if (!r.ok) { msg.textContent = res && res.error || ("HTTP " + r.status); input.select(); return; }
          locked = false;
          render(true);
          poll();
        });
      }).catch(function (e) { msg.textContent = e.message; });
    } }, h("h2", { text: "Sign in" }),
      h("p", { class: "muted", text: "This host's web_token (or LUAKIQ_WEB_TOKEN):" }),
      h("div", { class: "bar" }, input, h("button", { class: "act", type: "submit", text: "Sign in" })), msg);
    viewEl.replaceChildren(form);
    input.focus();
  }
  function signOut() {
    fetch("/api/web/logout", { method: "POST", credentials: "same-origin" }).then(function () { signIn(); });
  }
  // An action behind confirm(); reports what was done, then refreshes.
  function action(question, worker, path, body, after) {
    if (!window.confirm(question)) return;
    post("/api/web/workers/" + enc(worker) + "/" + path, body).then(function (res) {
      var parts = [];
      for (var k in res) parts.push(k + " " + res[k]);
      toast(worker + ": " + parts.join(", "));
      if (after) after(res);
      render(true);
    }).catch(function (e) { toast(e.message, true); });
  }

  // --- routing: #/, #/w/NAME/queue|busy|morgue?order=..&dir=..&min=..&max=..&offset=.., #/w/NAME/timing?day=..,
  // #/failures, #/failures/jobs?error=..&worker=..&cursor=.., #/search?by=id|tag&q=.. --
  function route() {
    var hash = location.hash.replace(/^#/, "") || "/";
    var qs = {}, qi = hash.indexOf("?");
    if (qi >= 0) {
      hash.slice(qi + 1).split("&").forEach(function (p) {
        if (!p) return;
        var kv = p.split("=");
        qs[decodeURIComponent(kv[0])] = decodeURIComponent((kv[1] || "").replace(/\+/g, " "));
      });
      hash = hash.slice(0, qi);
    }
    var m = hash.match(/^\/w\/([^\/]+)\/(queue|busy|morgue|timing)$/);
    if (m) return { page: m[2], worker: decodeURIComponent(m[1]), q: qs };
    if (hash === "/failures") return { page: "failures", q: qs };
    if (hash === "/failures/jobs") return { page: "failure-jobs", q: qs };
    if (hash === "/search") return { page: "search", q: qs };
    return { page: "dashboard", q: qs };
  }
  function link(worker, page, q) {
    var s = "#/w/" + enc(worker) + "/" + page, parts = [];
    for (var k in (q || {})) if (q[k] !== "" && q[k] != null) parts.push(enc(k) + "=" + enc(q[k]));
    return parts.length ? s + "?" + parts.join("&") : s;
  }

  // --- dashboard -------------------------------------------------------------
  function poll() {
    if (pending || locked) return;
    pending = true;
    getJSON("/api/web/dashboard").then(function (d) {
      pending = false;
      if (locked) return; // signed out while it was in flight: the form stays
      last = d;
      if (Date.now() - historyAt > 10000) loadHistory();
      statusEl.textContent = "updated " + new Date().toLocaleTimeString();
      statusEl.className = "status";
      document.getElementById("signout").style.display = d.host.auth ? "" : "none";
      document.getElementById("hostinfo").textContent = "v" + d.host.version + " \u00b7 pid " + d.host.pid +
        " \u00b7 " + d.host.threads + " threads \u00b7 Redis " + (d.redis_info.version || "?") +
        (d.redis_info.cluster ? " (cluster of " + d.redis_info.nodes.length + " masters)" : "");
      if (route().page === "dashboard") renderDashboard(); else if (autoRefresh()) render(false);
    }).catch(function (e) {
      pending = false;
      if (locked) return;
      statusEl.textContent = "error: " + e.message;
      statusEl.className = "status err";
    });
  }
  function autoRefresh() { var c = document.getElementById("auto"); return !c || c.checked; }

  function card(k, v, id) { return h("div", { class: "card", id: id }, h("div", { class: "k", text: k }), h("div", { class: "v", text: v })); }

  function renderDashboard() {
    if (!last) { viewEl.replaceChildren(h("p", { class: "muted", text: "loading..." })); return; }
    var d = last, t = d.total, r = d.redis_info;
    var rows = d.queues.map(function (q) {
      function cell(v, page, extra) { return h("td", { class: "n" }, h("a", { href: link(q.name, page, extra), text: fmtNum(v) })); }
      return h("tr", { "data-worker": q.name },
        h("td", null, h("a", { href: link(q.name, "queue"), text: q.name }),
          q.paused ? h("span", { class: "paused", "data-field": "paused", text: " paused" }) : null),
        h("td", { class: "n", "data-field": "processed", text: fmtNum(q.processed) }),
        h("td", { class: "n", "data-field": "failed", text: fmtNum(q.failed) }),
        h("td", { class: "n", "data-field": "lag", text: fmtLag(q.lag) }),
        cell(q.busy, "busy"),
        cell(q.enqueued, "queue"),
        cell(q.fresh, "queue", { order: "retry_count", dir: "desc", max: "-1" }),
        cell(q.retries, "queue", { order: "retry_count", min: "0" }),
        cell(q.dead, "morgue"));
    });
    var canvas = h("canvas", { id: "chart", width: 1200, height: 180 });
    viewEl.replaceChildren(
      h("div", { id: "eviction-box" },
        r.eviction_warning ? h("p", { class: "warning", id: "eviction-warning", text: r.eviction_warning }) : null),
      h("div", { class: "cards", id: "totals" },
        card("Processed", fmtNum(t.processed), "total-processed"), card("Failed", fmtNum(t.failed), "total-failed"),
        card("Lag", fmtLag(t.lag), "total-lag"), card("Busy", fmtNum(t.busy), "total-busy"),
        card("Enqueued", fmtNum(t.enqueued), "total-enqueued"), card("Fresh", fmtNum(t.fresh), "total-fresh"),
        card("Retries", fmtNum(t.retries), "total-retries"), card("Dead", fmtNum(t.dead), "total-dead")),
      h("h2", { text: "Jobs per minute" }),
      h("div", { class: "chart" },
        h("div", { class: "tabs", id: "ranges" }, Object.keys(RANGES).map(function (k) {
          return h("a", { href: "#/", id: "range-" + k, class: k === range ? "on" : null, text: RANGES[k].label,
                          onclick: function (e) { e.preventDefault(); pickRange(k); } });
        })),
        canvas,
        h("div", { class: "legend" },
          h("span", null, h("i", { style: "background:#1f9d55" }), "processed/min"),
          h("span", null, h("i", { style: "background:#d64545" }), "failed/min"),
          h("span", { class: "muted", id: "chart-note" }))),
      h("h2", null, "Workers ", h("a", { href: "#/failures", id: "failures-link", class: "muted", text: "(failures by error)" })),
      h("table", { id: "workers" },
        h("thead", null, h("tr", null, ["Worker", "Processed", "Failed", "Lag", "Busy", "Enqueued", "Fresh", "Retries", "Dead"]
          .map(function (x, i) { return h("th", { class: i ? "n" : null, text: x }); }))),
        h("tbody", null, rows)),
      h("h2", { text: "Running calls" }),
      d.calls.length === 0 ? h("p", { class: "muted", id: "calls-none", text: "no perform call is running on this host" }) :
      h("table", { id: "calls" },
        h("thead", null, h("tr", null, ["Thread", "Worker", "Shard", "State", "Running", "Timeout"]
          .map(function (x, i) { return h("th", { class: i > 3 ? "n" : null, text: x }); }))),
        h("tbody", null, d.calls.map(function (c) {
          // past 80% of its timeout: about to be failed (and maybe the process replaced)
          var late = c.running > 0.8 * c.timeout;
          return h("tr", { class: late ? "late" : null, "data-worker": c.worker, title: late ? "past 80% of its timeout" : null },
            h("td", { text: c.thread }), h("td", { text: c.worker }), h("td", { text: String(c.shard) }),
            h("td", { text: c.waiting ? "waiting (I/O)" : "on CPU" }),
            h("td", { class: "n", text: c.running.toFixed(1) + " s" }), h("td", { class: "n", text: fmtNum(c.timeout) + " s" }));
        }))),
      h("h2", { text: "Hosts" }),
      h("table", { id: "hosts" },
        h("thead", null, h("tr", null, ["Host", "Version", "Started", "Threads: shards \u00b7 calls running"]
          .map(function (x) { return h("th", { text: x }); }))),
        h("tbody", null, (d.hosts || []).map(function (o) {
          return h("tr", { "data-host": o.hostname + ":" + o.pid },
            h("td", { text: o.hostname + ":" + o.pid + (o.web ? " (web " + o.web + ")" : "") }),
            h("td", { text: o.version }), h("td", { text: fmtTime(o.started) }),
            h("td", null, o.threads.map(function (t) {
              var shards = t.shards.map(function (x) { return x.worker + x.shard; }).join(", ");
              var calls = t.calls.map(function (c) {
                return c.worker + c.shard + " " + c.running.toFixed(1) + " s" + (c.waiting ? " (I/O)" : "");
              }).join(", ");
              return h("div", { "data-thread": t.thread, text: t.thread + ": " + shards + (calls ? " \u00b7 " + calls : "") });
            })));
        }))),
      h("div", { id: "schedules-box" }, (d.schedules || []).length === 0 ? null : [
        h("h2", { text: "Recurring jobs" }),
        h("table", { id: "schedules" },
          h("thead", null, h("tr", null, ["Name", "Worker", "Id", "When", "Last tick", "Next tick"]
            .map(function (x) { return h("th", { text: x }); }))),
          h("tbody", null, d.schedules.map(function (s) {
            var rule = s.cron ? s.cron + " (" + s.timezone + ")" : "every " + s.every + " s";
            return h("tr", { "data-schedule": s.name },
              h("td", { text: s.name }), h("td", { text: s.worker }), h("td", { text: s.id }),
              h("td", { text: rule }), h("td", { "data-field": "last", text: s.last ? fmtTime(s.last) : "-" }),
              h("td", { "data-field": "next", text: s.next ? fmtTime(s.next) : "-" }));
          })))]),
      h("h2", { text: "Redis" }),
      h("div", { class: "cards", id: "redis" },
        card("Version", r.version || "-"), card("Uptime", fmtLag(r.uptime_in_seconds)),
        card("Clients", fmtNum(r.connected_clients)), card("Memory", r.used_memory_human || "-"),
        card("Peak memory", r.used_memory_peak_human || "-"), card("Host RSS", d.host.rss ? (d.host.rss / 1048576).toFixed(1) + "M" : "-")),
      h("p", { class: "muted", text: r.url }));
    drawChart(canvas);
  }

  function loadHistory() {
    historyAt = Date.now();
    var r = RANGES[range];
    getJSON("/api/v1/history?minutes=" + r.minutes + "&step=" + r.step).then(function (hd) {
      history = hd;
      var c = document.getElementById("chart");
      if (c) drawChart(c);
    }).catch(function () { historyAt = 0; });
  }
  function pickRange(r) {
    range = r;
    history = null;
    loadHistory();
    if (route().page === "dashboard") renderDashboard();
  }

  // Jobs per minute (a point's sum over its step, divided by the minutes in
  // it), processed and failed, as two lines over the picked range.
  function drawChart(canvas) {
    var ctx = canvas.getContext("2d");
    var W = canvas.width, H = canvas.height, left = 40, top = 8, bottom = 18;
    ctx.clearRect(0, 0, W, H);
    var r = RANGES[range], pts = [];
    if (history) {
      var per = history.step / 60;
      history.total.processed.forEach(function (p, i) {
        pts.push({ t: history.from + i * history.step, p: p / per, f: history.total.failed[i] / per });
      });
    }
    var max = 1;
    pts.forEach(function (x) { max = Math.max(max, x.p, x.f); });
    var plotH = H - top - bottom, n = Math.max(pts.length - 1, 1);
    function X(i) { return left + (W - left) * i / n; }
    ctx.strokeStyle = "#e2e5eb"; ctx.fillStyle = "#6b7385"; ctx.font = "11px system-ui, sans-serif";
    for (var g = 0; g <= 4; g++) {
      var y = top + plotH * g / 4;
      ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(W, y); ctx.stroke();
      ctx.fillText((max * (4 - g) / 4).toFixed(max < 4 ? 1 : 0), 2, y + 4);
    }
    ctx.fillText("-" + r.label.replace("last ", ""), left, H - 4);
    ctx.fillText("now", W - 24, H - 4);
    function line(field, color) {
      ctx.strokeStyle = color; ctx.lineWidth = 2; ctx.beginPath();
      pts.forEach(function (x, j) {
        var py = top + plotH * (1 - x[field] / max);
        if (j === 0) ctx.moveTo(X(j), py); else ctx.lineTo(X(j), py);
      });
      ctx.stroke(); ctx.lineWidth = 1;
    }
    line("p", "#1f9d55"); line("f", "#d64545");
    var sum = { p: 0, f: 0 };
    pts.forEach(function (x) { sum.p += x.p * (history.step / 60); sum.f += x.f * (history.step / 60); });
    var note = document.getElementById("chart-note");
    if (note) note.textContent = history ? fmtNum(sum.p) + " processed, " + fmtNum(sum.f) + " failed in the " + r.label +
      " (all hosts)" : "loading...";
  }

  // --- job lists -----------------------------------------------------------------
  var ORDERS = { queue: ["perform_in", "id", "retry_count"], morgue: ["updated_at", "id"] };

  function renderJobs(r) {
    var paint = painter(); // (fills the view only if the page is still the one asked for)
    var w = r.worker, page = r.page, q = r.q;
    var known = last && last.queues.some(function (x) { return x.name === w; });
    var tabs = h("div", { class: "tabs" }, ["queue", "busy", "morgue", "timing"].map(function (p) {
      return h("a", { href: link(w, p), class: p === page ? "on" : null, id: "tab-" + p,
        text: { queue: "Enqueued", busy: "Busy", morgue: "Dead", timing: "Timing" }[p] });
    }));
    if (page === "timing") return renderTiming(w, q, tabs, known);
    var params = { what: page };
    var filters = null, bulk = null;
    if (page !== "busy") {
      var order = q.order || ORDERS[page][0], dir = q.dir || "asc";
      params.order = order; params.dir = dir; params.min = q.min || ""; params.max = q.max || "";
      params.offset = q.offset || "0";
      if (q.cursor) params.cursor = q.cursor; // "next" follows the API's cursor: the same cost at any depth
      var sel = h("select", { id: "f-order" }, ORDERS[page].map(function (o) { return h("option", { value: o, selected: o === order, text: o }); }));
      var dsel = h("select", { id: "f-dir" }, ["asc", "desc"].map(function (o) { return h("option", { value: o, selected: o === dir, text: o === "asc" ? "ascending" : "descending" }); }));
      var min = h("input", { id: "f-min", size: 14, value: q.min || "", placeholder: "min" });
      var max = h("input", { id: "f-max", size: 14, value: q.max || "", placeholder: "max" });
      filters = h("form", { class: "bar", onsubmit: function (e) {
        e.preventDefault();
        location.hash = link(w, page, { order: sel.value, dir: dsel.value, min: min.value, max: max.value });
      } }, h("label", { text: "order by" }), sel, dsel, min, max, h("button", { type: "submit", text: "filter" }),
        h("span", { class: "muted", text: "ids: exact value or Redis lex range ([a, (a, -, +); numbers: value, (value, -inf, +inf" }));
      if (page === "queue") {
        var isPaused = known && last.queues.some(function (x) { return x.name === w && x.paused; });
        bulk = h("div", { class: "bar" },
          isPaused ?
            h("button", { class: "act", id: "resume", text: "resume",
              onclick: function () { action("Let every host run " + w + " again?", w, "queue/resume"); } }) :
            h("button", { class: "danger", id: "pause", text: "pause",
              onclick: function () { action("Stop every host from starting calls of " + w + "? (running calls finish; enqueue goes on)", w, "queue/pause"); } }),
          h("button", { class: "act", id: "perform-now", text: "perform all now",
            onclick: function () { action("Make every queued job of " + w + " due now?", w, "queue/perform_now"); } }),
          h("button", { class: "danger", id: "kill-failed", text: "kill all failed",
            onclick: function () { action("Move every queued job of " + w + " that failed before to the morgue?", w, "queue/kill_failed"); } }),
          h("button", { class: "danger", id: "delete-failed", text: "delete all failed",
            onclick: function () { action("Delete every queued job of " + w + " that failed before?", w, "queue/delete_failed"); } }));
      } else {
        bulk = h("div", { class: "bar" },
          h("button", { class: "act", id: "requeue-all", text: "requeue all",
            onclick: function () { action("Requeue every dead job of " + w + "?", w, "morgue/requeue", { all: true }); } }),
          h("button", { class: "danger", id: "delete-all", text: "delete all",
            onclick: function () { action("Delete every dead job of " + w + " for good?", w, "morgue/delete", { all: true }); } }));
      }
    }
    var qs = Object.keys(params).map(function (k) { return enc(k) + "=" + enc(params[k]); }).join("&");
    return getJSON("/api/web/workers/" + enc(w) + "/jobs?" + qs).then(function (res) {
      var rows = res.jobs.map(function (j) {
        var payloads = j.payloads.map(function (p) { return JSON.stringify(p[0]) + "  (score " + p[1] + ")"; }).join("\n");
        var cells = [h("td", { class: "id", text: j.id })];
        if (page === "morgue") cells.push(h("td", { text: fmtTime(j.updated_at) }));
        else cells.push(h("td", { text: fmtTime(j.perform_in) }), h("td", { class: "n", text: j.retry_count }));
        cells.push(h("td", null, h("pre", { text: payloads })), h("td", null, j.error != null ? h("pre", { class: "err", text: typeof j.error === "string" ? j.error : JSON.stringify(j.error) }) : null));
        var acts = h("td");
        if (page === "morgue") {
          acts.appendChild(h("button", { class: "act", "data-action": "requeue", "data-id": j.id, text: "requeue",
            onclick: function () { action("Requeue dead job " + j.id + "?", w, "morgue/requeue", { ids: [j.id] }); } }));
          acts.appendChild(document.createTextNode(" "));
          acts.appendChild(h("button", { class: "danger", "data-action": "delete", "data-id": j.id, text: "delete",
            onclick: function () { action("Delete dead job " + j.id + " for good?", w, "morgue/delete", { ids: [j.id] }); } }));
        } else if (page === "queue") {
          acts.appendChild(h("button", { class: "danger", "data-action": "delete", "data-id": j.id, text: "delete",
            onclick: function () { action("Delete queued job " + j.id + "?", w, "queue/delete", { ids: [j.id] }); } }));
        }
        cells.push(acts);
        return h("tr", { "data-id": j.id }, cells);
      });
      var head = page === "morgue" ? ["id", "updated at", "payloads", "error", ""] : ["id", "perform in", "retries", "payloads", "error", ""];
      var off = Number(res.offset) || 0;
      var pager = page === "busy" ? null : h("div", { class: "bar" },
        h("button", { id: "prev-page", text: "\u2190 previous", disabled: off === 0, onclick: function () {
          location.hash = link(w, page, Object.assign({}, q, { cursor: "", offset: Math.max(0, off - res.limit) })); } }),
        h("span", { class: "muted", id: "page-range", text: res.jobs.length ? (off + 1) + "\u2013" + (off + res.jobs.length) : "none" }),
        h("button", { id: "next-page", text: "next \u2192", disabled: !res.more, onclick: function () {
          location.hash = link(w, page, Object.assign({}, q, { offset: "", cursor: res.next })); } }));
      var auto = document.getElementById("auto");
      var keep = auto ? auto.checked : true;
      paint(
        h("h2", null, h("a", { href: "#/", text: "\u2190" }), " " + w + (known ? "" : " (unknown worker?)")),
        tabs, filters, bulk,
        h("div", { class: "bar" }, h("label", null, h("input", { type: "checkbox", id: "auto", checked: keep }), " refresh every second")),
        h("table", { id: "jobs", "data-page": page }, h("thead", null, h("tr", null, head.map(function (x) { return h("th", { text: x }); }))),
          h("tbody", null, rows.length ? rows : h("tr", null, h("td", { colspan: head.length, class: "muted", text: "no jobs" })))),
        pager);
    });
  }

  // A worker's wait and run times of one UTC day (GET /api/v1/workers/NAME/timing).
  function fmtSecs(x) {
    if (x < 1) return +(x * 1000).toPrecision(3) + " ms";
    return fmtLag(x);
  }
  function renderTiming(w, q, tabs, known) {
    var paint = painter(); // (fills the view only if the page is still the one asked for)
    var day = q.day || new Date().toISOString().slice(0, 10);
    return getJSON("/api/v1/workers/" + enc(w) + "/timing?day=" + enc(day)).then(function (t) {
      function part(kind, title) {
        var r = t[kind], top = Math.max.apply(null, [1].concat(r.histogram.map(function (b) { return b.count; })));
        return h("div", { id: "timing-" + kind },
          h("h2", { text: title }),
          h("div", { class: "cards" }, card("Count", fmtNum(r.count), kind + "-count"),
            card("Mean", r.count ? fmtSecs(r.mean) : "-", kind + "-mean"), card("Std dev", r.count ? fmtSecs(r.std) : "-", kind + "-std")),
          r.histogram.length === 0 ? h("p", { class: "muted", text: "nothing recorded this day (histograms are kept 7 days)" }) :
          h("table", { class: "histogram" },
            h("thead", null, h("tr", null, h("th", { text: "from" }), h("th", { text: "to" }), h("th", { class: "n", text: "jobs" }), h("th"))),
            h("tbody", null, r.histogram.map(function (b) {
              return h("tr", { "data-to": String(b.to) }, h("td", { text: fmtSecs(b.from) }), h("td", { text: fmtSecs(b.to) }),
                h("td", { class: "n", text: fmtNum(b.count) }),
                h("td", { style: "width:50%" }, h("div", { style: "background:var(--accent);height:10px;width:" + (100 * b.count / top).toFixed(1) + "%" })));
            }))));
      }
      // (a refresh that was already loading when someone typed a day paints
      // after it, whatever has focus: the day typed is carried over, not
      // reset to the day shown, so "show" submits what was typed)
      var typed = document.getElementById("f-day");
      var input = h("input", { type: "date", id: "f-day", "data-day": day,
        value: typed && typed.getAttribute("data-day") === day ? typed.value : day });
      var auto = document.getElementById("auto");
      var keep = auto ? auto.checked : true;
      paint(
        h("h2", null, h("a", { href: "#/", text: "\u2190" }), " " + w + (known ? "" : " (unknown worker?)")),
        tabs,
        h("form", { class: "bar", onsubmit: function (e) { e.preventDefault(); location.hash = link(w, "timing", { day: input.value }); } },
          h("label", { text: "UTC day" }), input, h("button", { type: "submit", text: "show" }),
          h("label", null, h("input", { type: "checkbox", id: "auto", checked: keep }), " refresh every second")),
        part("wait", "Wait: from due to the start of its call"), part("run", "Run: one perform call"));
    });
  }

  // --- failures grouped by error (GET /api/v1/failures; docs/operations.md, "Failures") ---
  // Each group: its count per worker, a link to its jobs, and Requeue all /
  // Delete all (behind confirm()). A walk over every shard: refreshed on
  // demand, not every second.
  function failuresLink(q) {
    var parts = [];
    for (var k in q) if (q[k] !== "" && q[k] != null) parts.push(enc(k) + "=" + enc(q[k]));
    return "#/failures/jobs?" + parts.join("&");
  }
  function groupAction(question, what, body) {
    if (!window.confirm(question)) return;
    post("/api/v1/failures/" + what, body).then(function (res) {
      var parts = [];
      for (var k in res) parts.push(k.replace("_", " ") + " " + res[k]);
      toast("failures: " + parts.join(", "));
      render(true);
    }).catch(function (e) { toast(e.message, true); });
  }
  function failuresHead(title) {
    return [h("h2", null, h("a", { href: "#/", text: "\u2190" }), " " + title),
            h("div", { class: "bar" }, h("button", { id: "refresh", text: "refresh", onclick: function () { render(true); } }),
              h("span", { class: "muted", text: "jobs waiting for a retry and dead jobs, grouped by their error " +
                "with numbers, ids and addresses masked (in-flight jobs are not counted)" }))];
  }
  function renderFailures() {
    var paint = painter(); // (fills the view only if the page is still the one asked for)
    return getJSON("/api/v1/failures").then(function (res) {
      var rows = res.failures.map(function (g) {
        var names = Object.keys(g.workers).sort();
        return h("tr", { "data-group": g.error },
          h("td", null, h("pre", { class: "err", text: g.error })),
          h("td", { class: "n", "data-field": "count" }, h("a", { href: failuresLink({ error: g.error }), text: fmtNum(g.count) })),
          h("td", { class: "n", "data-field": "queued", text: fmtNum(g.queued) }),
          h("td", { class: "n", "data-field": "dead", text: fmtNum(g.dead) }),
          h("td", null, names.map(function (w) {
            var pw = g.workers[w];
            return h("div", { "data-worker": w },
              h("a", { href: failuresLink({ error: g.error, worker: w }), text: w + ": " + fmtNum(pw.count) }),
              h("span", { class: "muted", text: " (" + pw.queued + " waiting, " + pw.dead + " dead)" }));
          })),
          h("td", null,
            h("button", { class: "act", "data-action": "requeue", text: "requeue all", onclick: function () {
              groupAction("Requeue all " + g.count + " jobs of \u201c" + g.error + "\u201d? (dead ones go back to the queue, " +
                "waiting ones become due now)", "requeue", { error: g.error }); } }), " ",
            h("button", { class: "danger", "data-action": "delete", text: "delete all", onclick: function () {
              groupAction("Delete all " + g.count + " jobs of \u201c" + g.error + "\u201d for good?", "delete", { error: g.error }); } })));
      });
      paint.apply(null, failuresHead("Failures").concat([
        h("table", { id: "failures" },
          h("thead", null, h("tr", null, ["Error", "Jobs", "Waiting", "Dead", "Per worker", ""]
            .map(function (x, i) { return h("th", { class: i && i < 4 ? "n" : null, text: x }); }))),
          h("tbody", null, rows.length ? rows : h("tr", null, h("td", { colspan: 6, class: "muted", text: "no failed jobs" }))))]));
    });
  }
  function renderFailureJobs(q) {
    var paint = painter(); // (fills the view only if the page is still the one asked for)
    var qs = "error=" + enc(q.error || "") + (q.worker ? "&worker=" + enc(q.worker) : "") + (q.cursor ? "&cursor=" + enc(q.cursor) : "");
    return getJSON("/api/v1/failures/jobs?" + qs).then(function (res) {
      var rows = res.jobs.map(function (j) {
        var page = j.state === "dead" ? "morgue" : "queue";
        return h("tr", { "data-id": j.id, "data-worker": j.worker },
          h("td", { text: j.worker }),
          h("td", null, h("a", { href: link(j.worker, page, { order: "id", min: j.id, max: j.id }), text: j.id })),
          h("td", { text: j.state === "dead" ? "dead" : "waiting for a retry" }));
      });
      paint.apply(null, failuresHead((q.worker ? q.worker + ": " : "") + "jobs of a failure group").concat([
        h("pre", { class: "err", id: "group", text: q.error || "" }),
        h("p", null, h("a", { href: "#/failures", text: "all groups" })),
        h("table", { id: "group-jobs" },
          h("thead", null, h("tr", null, ["Worker", "Id", "State"].map(function (x) { return h("th", { text: x }); }))),
          h("tbody", null, rows.length ? rows : h("tr", null, h("td", { colspan: 3, class: "muted", text: "no jobs" })))),
        h("div", { class: "bar" },
          h("button", { id: "next", text: "next \u2192", disabled: !res.next, onclick: function () {
            location.hash = failuresLink({ error: q.error, worker: q.worker, cursor: res.next }); } }))]));
    });
  }

  // --- search by id (every worker: GET /api/v1/search?id=ID) or by
  // tag (GET /api/v1/tags/T/jobs; docs/operations.md, "Tags") ---
  function jobLink(j) {
    if (j.state === "in_flight") return link(j.worker, "busy");
    return link(j.worker, j.state === "dead" ? "morgue" : "queue", { order: "id", min: "[" + j.id, max: "[" + j.id });
  }
  function renderSearch(q) {
    var paint = painter(); // (fills the view only if the page is still the one asked for)
    var by = q.by === "tag" ? "tag" : "id", text = q.q || "";
    document.getElementById("search-q").value = text;
    document.getElementById("search-by").value = by;
    var found;
    if (text === "") {
      found = Promise.resolve([]);
    } else if (by === "tag") {
      found = getJSON("/api/v1/tags/" + enc(text) + "/jobs").then(function (res) { return res.jobs; });
    } else {
      found = getJSON("/api/v1/search?id=" + enc(text)).then(function (res) { return res.jobs; });
    }
    return found.then(function (jobs) {
      var rows = jobs.map(function (j) {
        return h("tr", { "data-id": j.id, "data-worker": j.worker, "data-state": j.state },
          h("td", null, h("a", { href: link(j.worker, "queue"), text: j.worker })),
          h("td", null, h("a", { href: jobLink(j), text: j.id })),
          h("td", { text: j.state.replace("_", " ") }),
          h("td", { text: (j.tags || []).join(", ") }),
          h("td", { class: "err", text: j.error == null ? "" : typeof j.error === "string" ? j.error : JSON.stringify(j.error) }));
      });
      paint(
        h("h2", null, h("a", { href: "#/", text: "\u2190" }), " Jobs " + (by === "tag" ? "tagged " : "with id ") + "\u201c" + text + "\u201d"),
        h("table", { id: "search-results" },
          h("thead", null, h("tr", null, ["Worker", "Id", "State", "Tags", "Error"].map(function (x) { return h("th", { text: x }); }))),
          h("tbody", null, rows.length ? rows : h("tr", null, h("td", { colspan: 5, class: "muted", text: "no jobs" })))));
    });
  }
  document.getElementById("search").addEventListener("submit", function (e) {
    e.preventDefault();
    var text = document.getElementById("search-q").value.trim();
    if (text === "") return;
    location.hash = "#/search?by=" + document.getElementById("search-by").value + "&q=" + enc(text);
  });

  // A view's data comes back later than it was asked for: a page left
  // meanwhile (a click on "next" while a refresh of the page before was in
  // flight), or the sign-in form put up meanwhile, must not be painted over.
  function painter() {
    var at = location.hash;
    return function () { if (location.hash === at && !locked) viewEl.replaceChildren.apply(viewEl, arguments); };
  }

  var rendering = false;
  function render(force) {
    if (locked) return;
    var r = route();
    if (r.page === "dashboard") { renderDashboard(); return; }
    if (rendering && !force) return;
    // Do not replace the form while someone types in it.
    var a = document.activeElement;
    if (!force && a && (a.tagName === "INPUT" && a.type !== "checkbox" || a.tagName === "SELECT")) return;
    var walks = r.page === "failures" || r.page === "failure-jobs" || r.page === "search";
    if (walks && !force) return; // a walk over every shard: on demand only
    rendering = true;
    (r.page === "failures" ? renderFailures() : r.page === "failure-jobs" ? renderFailureJobs(r.q) :
     r.page === "search" ? renderSearch(r.q) : renderJobs(r)).catch(function (e) {
      if (locked) return; // the sign-in form replaced the view
      viewEl.replaceChildren(h("p", { class: "err", text: e.message }), h("a", { href: "#/", text: "back to the dashboard" }));
    }).then(function () { rendering = false; });
  }

  document.getElementById("signout").addEventListener("click", signOut);
  window.addEventListener("hashchange", function () { if (!locked) render(true); });
  render(true);
  poll();
  setInterval(poll, 1000);
})();
</script>
</body>
</html>
]==]
