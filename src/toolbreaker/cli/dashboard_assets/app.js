// toolbreaker dashboard: renders the snapshots /api/events pushes. Everything shown comes
// from other processes' streams, so text goes through textContent, never innerHTML, and
// control and bidi characters are shown as visible escapes (\x1b, \u202e), as the CLI's
// printable() does for a terminal.
"use strict";
(function () {
  const breakers = new Map();
  const ORDER = { open: 0, half_open: 1, closed: 2 };
  const LIMIT = 2000;
  let selected = null;
  let detail = null; // the selected breaker's row with its last transitions, from /api/breaker
  let chart = null;
  let series = { t: [], demand: [], admitted: [], rejected: [] };
  let dirty = false;
  let actions = false;

  // C0 and C1 controls (but tab and newline), DEL, and the bidi/format characters that
  // reorder or hide text on screen.
  const UNPRINTABLE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/g;

  function printable(text) {
    return String(text).replace(UNPRINTABLE, (c) => {
      const code = c.charCodeAt(0);
      return code <= 0xff ? "\\x" + code.toString(16).padStart(2, "0") : "\\u" + code.toString(16).padStart(4, "0");
    });
  }

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") el.className = v;
      else if (k.startsWith("data-")) el.setAttribute(k, v);
      else el[k] = v;
    }
    for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(printable(c)));
    return el;
  }

  function ago(seconds) {
    if (seconds < 60) return Math.max(0, Math.floor(seconds)) + " s";
    if (seconds < 3600) return Math.floor(seconds / 60) + " min " + Math.floor(seconds % 60) + " s";
    return Math.floor(seconds / 3600) + " h " + Math.floor((seconds % 3600) / 60) + " min";
  }

  function since(row) {
    const text = ago(Date.now() / 1000 - row.since);
    return row.since_known ? text : "≥ " + text;
  }

  function phaseLabel(row) {
    const name = row.phase === "half_open" ? "half-open" : row.phase;
    return row.isolated ? name + " (isolated)" : name;
  }

  function counts(obj) {
    const parts = Object.entries(obj || {}).map(([k, v]) => k + ": " + v);
    return parts.length ? parts.join(", ") : "–";
  }

  function noticeCounts(obj) {
    const parts = Object.entries(obj || {}).sort().map(([k, v]) => k + " " + v);
    return parts.length ? parts.join(" · ") : "–";
  }

  function noticeCell(kind, obj) {
    const hot = Object.keys(obj || {}).length > 0;
    return h("td", { class: kind + (hot ? " hot" : "") }, noticeCounts(obj));
  }

  function noticeDetail(n) {
    const parts = [];
    if (n.stale_age_ms != null) parts.push("age " + ago(n.stale_age_ms / 1000));
    if (n.retry_after_ms != null) parts.push("retry after " + ago(n.retry_after_ms / 1000));
    if (n.task) parts.push("task " + n.task);
    for (const [mode, why] of n.skipped || []) parts.push("skipped " + mode + ": " + why);
    return parts.join(" · ");
  }

  // The series and the counts are over the window_s seconds up to as_of: the later of the
  // stream's newest entry and the server's clock. The server pushes when something leaves.
  function renderWindow(doc) {
    if (doc.as_of == null) return;
    const minutes = Math.round(doc.window_s / 60);
    const end = doc.as_of ? new Date(doc.as_of * 1000).toLocaleTimeString() : "–";
    document.getElementById("notices-window").textContent =
      "counts over the last " + minutes + " min, up to " + end + " (server clock)";
    document.getElementById("series-window").textContent =
      "per second, all breakers, last " + minutes + " min up to " + end;
    document.body.dataset.asOf = String(doc.as_of);
  }

  function renderNotices(doc) {
    const loose = doc.counts.filter((c) => c.key === null);
    document.getElementById("notices-unbound").textContent = loose.length
      ? "run guard limits on tools without a breaker: " + noticeCounts(loose[0].limit) : "";
    const body = document.createDocumentFragment();
    for (const n of doc.recent) {
      body.append(h("tr", { "data-kind": n.kind, "data-name": n.name },
        h("td", {}, new Date(n.wall * 1000).toLocaleTimeString()),
        h("td", {}, n.dependency || n.key || "–"), h("td", {}, n.tool || "–"),
        h("td", {}, n.kind === "degrade" ? "degradation" : "limit"),
        h("td", { class: "name" }, n.name), h("td", {}, n.reason || ""),
        h("td", {}, noticeDetail(n)), h("td", { class: "muted" }, n.source)));
    }
    if (!doc.recent.length) body.append(h("tr", {}, h("td", { class: "muted", colSpan: 8 }, "none yet")));
    document.querySelector("#notices tbody").replaceChildren(body);
  }

  function lastText(row) {
    const t = row.last && row.last[0];
    if (!t) return "–";
    return t.event.type + " → " + t.reason + " (" + ago(Date.now() / 1000 - t.wall) + " ago)";
  }

  function render() {
    dirty = false;
    const filter = document.getElementById("filter").value.trim().toLowerCase();
    const rows = [...breakers.values()]
      .filter((r) => !filter || (r.dependency + " " + r.operation + " " + r.tool).toLowerCase().includes(filter))
      .sort((a, b) => (ORDER[a.phase] - ORDER[b.phase]) || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    const body = document.createDocumentFragment();
    for (const r of rows.slice(0, LIMIT)) {
      const tr = h("tr", { "data-key": r.key, "data-phase": r.phase, class: r.key === selected ? "selected" : "" },
        h("td", {}, r.dependency), h("td", {}, r.operation), h("td", {}, r.tool),
        h("td", {}, h("span", { class: "state " + r.phase }, phaseLabel(r))),
        noticeCell("degrade", r.notices && r.notices.degrade),
        noticeCell("limit", r.notices && r.notices.limit),
        h("td", { class: "for" }, since(r)),
        h("td", {}, r.fallback || "–"),
        h("td", { class: "n" }, r.demand), h("td", { class: "n" }, r.admitted), h("td", { class: "n" }, r.rejected),
        h("td", {}, counts(r.opens)),
        h("td", {}, r.probes.ok + " / " + r.probes.failed + " / " + r.probes.expired),
        h("td", {}, r.policy_version), h("td", {}, lastText(r)));
      tr.addEventListener("click", () => { selected = r.key; dirty = true; loadDetail(); });
      body.append(tr);
    }
    const tbody = document.querySelector("#breakers tbody");
    tbody.replaceChildren(body);
    document.body.dataset.rows = String(tbody.children.length);
    if (!document.body.dataset.firstFull && breakers.size && tbody.children.length === Math.min(LIMIT, breakers.size)) {
      document.body.dataset.firstFull = String(Math.round(performance.now()));
    }
    document.getElementById("more").textContent =
      rows.length > LIMIT ? "showing " + LIMIT + " of " + rows.length + ": filter to see the rest" : "";
    const all = [...breakers.values()];
    const open = all.filter((r) => r.phase === "open").length;
    const half = all.filter((r) => r.phase === "half_open").length;
    document.getElementById("summary").textContent = all.length
      ? all.length + " breakers · " + open + " open · " + half + " half-open"
      : "no breakers in the stream yet";
    renderDetail();
  }

  async function loadDetail() {
    if (!selected) return;
    const key = selected;
    const res = await fetch("/api/breaker?key=" + encodeURIComponent(key));
    if (res.ok && key === selected) { detail = await res.json(); renderDetail(); }
  }

  function renderDetail() {
    const section = document.getElementById("detail");
    const row = detail && detail.key === selected ? detail : null;
    section.hidden = !row;
    if (!row) return;
    document.getElementById("detail-key").textContent = row.key + "  (tool " + row.tool + ", policy " + row.policy_version + ")";
    document.getElementById("actions").hidden = !actions;
    const s = row.signals;
    document.getElementById("detail-signals").textContent = s
      ? "opens/h " + s.opens_per_hour + " · open " + Math.round(s.open_share * 100) + " % of " +
        Math.round(s.span_ms / 1000) + " s · half-open reopen ratio " + Math.round(s.reopen_ratio * 100) +
        " % · re-calls before the told retry time " + s.early_recalls + " · failures by class " +
        (Object.entries(s.failures_by_class).map(([k, v]) => k + ": " + v).join(", ") || "–")
      : "";
    const body = document.createDocumentFragment();
    for (const t of row.last) {
      body.append(h("tr", {},
        h("td", {}, new Date(t.wall * 1000).toLocaleTimeString()),
        h("td", {}, t.event.type + " @" + t.event.at), h("td", {}, t.event.call || ""),
        h("td", {}, t.from + " → " + t.to), h("td", {}, t.reason),
        h("td", {}, t.attempted ? "yes" : ""), h("td", {}, t.rejected ? "yes" : ""),
        h("td", {}, t.generation), h("td", {}, t.open_until == null ? "" : t.open_until),
        h("td", {}, t.class || ""), h("td", {}, t.policy_version)));
    }
    document.querySelector("#transitions tbody").replaceChildren(body);
  }

  function renderFindings(list) {
    const ul = document.getElementById("findings");
    // No breaker in the stream is nothing to judge, never an all-clear.
    if (!list.length && !breakers.size) {
      ul.replaceChildren(h("li", { class: "muted", id: "no-breakers" },
        "no breaker events in the stream yet: nothing to judge. Publish them with " +
        "StreamPublisher(open_stream(URL)).attach(registry)"));
      return;
    }
    if (!list.length) { ul.replaceChildren(h("li", { class: "muted" }, "nothing crosses a rule of thumb")); return; }
    ul.replaceChildren(...list.map((f) => h("li", { "data-rule": f.rule },
      h("span", { class: "rule" }, "[" + f.rule + "] "), f.key + (f.tool !== f.key ? " (tool " + f.tool + ")" : "") + ": " + f.message,
      h("div", { class: "advice" }, "→ " + f.advice))));
  }

  function renderStops(stops) {
    const box = document.getElementById("stops");
    if (!stops.length) { box.replaceChildren(h("p", { class: "muted" }, "no stops")); return; }
    box.replaceChildren(...stops.map((s) => h("div", { class: "stop", "data-task": s.task },
      h("strong", {}, s.task), " · ", s.packet.condition || "", " · ", s.packet.detail || "",
      h("span", { class: "muted" }, "  " + new Date(s.wall * 1000).toLocaleTimeString() + " from " + s.source),
      h("pre", {}, JSON.stringify(s.packet, null, 2)))));
  }

  function renderChart() {
    const el = document.getElementById("chart");
    const data = [series.t, series.demand, series.admitted, series.rejected];
    if (typeof uPlot === "undefined") return;
    if (!chart) {
      chart = new uPlot({
        width: el.clientWidth || 700, height: 200,
        series: [{}, { label: "demand", stroke: "#3b6fd6", width: 2 },
          { label: "admitted", stroke: "#1f9d55", width: 2 }, { label: "rejected locally", stroke: "#d64545", width: 2 }],
        scales: { x: { time: true } },
        axes: [{}, { label: "calls/s" }],
      }, data, el);
      window.addEventListener("resize", () => chart.setSize({ width: el.clientWidth, height: 200 }));
    } else {
      chart.setData(data);
    }
  }

  function apply(doc) {
    actions = doc.actions;
    if (doc.full) breakers.clear();
    for (const row of doc.breakers) breakers.set(row.key, row);
    if (selected && doc.breakers.some((r) => r.key === selected)) loadDetail();
    document.getElementById("stream").textContent = doc.stream + " · " + doc.entries + " entries";
    series = doc.series;
    renderChart();
    renderFindings(doc.findings);
    if (doc.stops) renderStops(doc.stops);
    if (doc.notices) renderNotices(doc.notices);
    renderWindow(doc);
    const status = document.getElementById("status");
    status.textContent = doc.error ? "stream unavailable: " + doc.error : "live";
    status.className = "pill " + (doc.error ? "down" : "live");
    document.body.dataset.revision = doc.revision;
    if (doc.full) {
      const first = !document.body.dataset.renderMs && doc.breakers.length > 0;
      const start = performance.now();
      render();
      // The first full render, rows laid out (reading a size forces layout), for the
      // benchmark (benchmarks/bench_dashboard.py); nothing asserts it.
      if (first) {
        void document.getElementById("breakers").offsetHeight;
        document.body.dataset.renderMs = String(Math.round(performance.now() - start));
      }
    } else dirty = true;
  }

  function connect() {
    let since = -1;
    const initial = document.getElementById("initial");
    if (initial && initial.textContent.trim().startsWith("{")) {
      const doc = JSON.parse(initial.textContent);
      apply(doc);
      since = doc.revision;
    }
    const source = new EventSource("/api/events?since=" + since);
    source.onmessage = (e) => apply(JSON.parse(e.data));
    source.onerror = () => {
      const status = document.getElementById("status");
      status.textContent = "reconnecting…";
      status.className = "pill down";
    };
  }

  async function act(kind) {
    const out = document.getElementById("action-result");
    const reason = document.getElementById("reason").value;
    const token = document.getElementById("token").value;
    try {
      const res = await fetch("/api/action", {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-Toolbreaker-Token": token },
        body: JSON.stringify({ key: selected, action: kind, reason: reason }),
      });
      const body = await res.json();
      out.textContent = body.ok ? kind + " done: " + body.record.reason : "refused: " + body.error;
      out.className = body.ok ? "done" : "refused";
    } catch (err) {
      out.textContent = "refused: " + err;
      out.className = "refused";
    }
  }

  document.getElementById("filter").addEventListener("input", () => { dirty = true; });
  document.getElementById("isolate").addEventListener("click", () => act("isolate"));
  document.getElementById("release").addEventListener("click", () => act("release"));
  setInterval(() => { if (dirty) render(); }, 250);
  setInterval(() => {
    for (const td of document.querySelectorAll("#breakers td.for")) {
      const row = breakers.get(td.parentElement.dataset.key);
      if (row) td.textContent = since(row);
    }
  }, 1000);
  connect();
})();
