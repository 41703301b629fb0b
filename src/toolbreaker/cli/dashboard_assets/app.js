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

  const ANY_UNPRINTABLE = new RegExp(UNPRINTABLE.source);

  function printable(text) {
    const str = String(text);
    if (!ANY_UNPRINTABLE.test(str)) return str; // the common case, without building a copy
    return str.replace(UNPRINTABLE, (c) => {
      const code = c.charCodeAt(0);
      return code <= 0xff ? "\\x" + code.toString(16).padStart(2, "0") : "\\u" + code.toString(16).padStart(4, "0");
    });
  }

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    if (attrs) {
      for (const k in attrs) {
        const v = attrs[k];
        if (k === "class") { if (v) el.className = v; }
        else if (k.startsWith("data-") || k.startsWith("aria-")) el.setAttribute(k, v);
        else el[k] = v;
      }
    }
    for (const c of children) {
      if (c instanceof Node) el.appendChild(c);
      else el.appendChild(document.createTextNode(printable(c)));
    }
    return el;
  }

  // Times a person reads are wall-clock times in the viewer's time zone: the board gives
  // every time as Unix seconds (wall, first_wall, last_wall, open_until_wall), never the
  // breaker's own clock.
  function clock(wall) {
    return wall == null ? "" : new Date(wall * 1000).toLocaleTimeString();
  }

  function span(first, last) {
    const a = clock(first), b = clock(last == null ? first : last);
    return a === b ? a : a + "–" + b;
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

  function reasonCounts(obj) {
    return Object.entries(obj || {}).sort((a, b) => b[1] - a[1]).map(([k, v]) => k + " " + v).join(", ");
  }

  // A history line as words: a run of rejections or of calls is counted and spanned; a
  // transition is its event.
  function lineWhat(t) {
    if (t.group === "rejected") return t.count + " rejected locally";
    if (t.group === "calls") return t.count + (t.count === 1 ? " call" : " calls") + ", no change (" + counts(t.events) + ")";
    return t.event.type + (t.attempted ? " · attempted" : "") + (t.rejected ? " · rejected" : "");
  }

  function lineWhen(t) {
    return t.group ? span(t.first_wall, t.last_wall) : clock(t.wall);
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
    document.getElementById("notices-unbound").textContent = printable(loose.length
      ? "run guard limits on tools without a breaker: " + noticeCounts(loose[0].limit) : "");
    const body = document.createDocumentFragment();
    for (const n of doc.recent) {
      const when = span(n.first_wall, n.wall) + (n.count > 1 ? " · ×" + n.count : "");
      body.append(h("tr", { "data-kind": n.kind, "data-name": n.name, "data-count": n.count },
        h("td", { title: n.count + " identical" }, when),
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
    if (t.group) return lineWhat(t) + ", " + lineWhen(t);
    return t.event.type + " → " + t.reason + " (" + ago(Date.now() / 1000 - t.wall) + " ago)";
  }

  // The operator's hold on the row: what, why (masked where it was made) and who.
  function operatorText(op) {
    const what = op.action === "isolate" ? "isolated" : "forced closed";
    return what + " by " + (op.by || "?") + " at " + clock(op.wall) + ": " + op.reason;
  }

  function stateCell(r) {
    const td = h("td", { class: "state-cell" }, h("span", { class: "state " + r.phase }, phaseLabel(r)));
    if (r.operator) {
      // The reason first (what on-call needs), then who and when; the whole in the tooltip.
      const op = r.operator;
      td.append(h("div", { class: "operator", title: printable(operatorText(op)) }, op.reason),
        h("div", { class: "operator muted" }, "by " + (op.by || "?") + ", " + clock(op.wall)));
    }
    return td;
  }

  // The breaker's names; under them, when they apply, that it runs on the sheet's
  // defaults (no row of its own) and the exceptions its classifier never counted.
  function breakerCell(r) {
    const td = h("td", { class: "breaker", title: printable(r.dependency + " · " + r.operation + " · tool " + r.tool) },
      h("div", { class: "dep" }, r.dependency),
      h("div", { class: "tool muted" }, r.operation + " · tool " + r.tool));
    if (r.on_defaults) {
      td.append(h("div", { class: "flag on-defaults", title: "the boundary sheet has no row for this breaker: it runs on [defaults]" },
        "on sheet defaults"));
    }
    const unknown = Object.entries(r.unclassified || {}).sort((a, b) => b[1] - a[1]);
    if (unknown.length) {
      const text = "unclassified: " + unknown.map(([k, v]) => k + " ×" + v).join(", ");
      td.append(h("div", { class: "flag unclassified", title: printable(text + " (never counted toward opening: classify them)") }, text));
    }
    return td;
  }

  // The policy as people name it (the sheet it came from, or what it does); its
  // version, a hash, only in the tooltip.
  function policyTitle(version) {
    return version ? "policy version " + printable(version) : "";
  }

  function policyCell(r) {
    return h("td", { class: "policy", title: policyTitle(r.policy_version) }, r.policy || r.policy_version || "–");
  }

  function render() {
    dirty = false;
    const filter = document.getElementById("filter").value.trim().toLowerCase();
    const rows = [...breakers.values()]
      .filter((r) => !filter || (r.dependency + " " + r.operation + " " + r.tool).toLowerCase().includes(filter))
      .sort((a, b) => (ORDER[a.phase] - ORDER[b.phase]) || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    const body = document.createDocumentFragment();
    for (const r of rows.slice(0, LIMIT)) {
      // Rows act as buttons (click, Enter or Space when focused): one listener on the table.
      const tr = h("tr", { "data-key": r.key, "data-phase": r.phase, tabIndex: 0,
        class: r.key === selected ? "selected" : "", "aria-selected": String(r.key === selected) },
        breakerCell(r),
        stateCell(r),
        noticeCell("degrade", r.notices && r.notices.degrade),
        noticeCell("limit", r.notices && r.notices.limit),
        h("td", { class: "for" }, since(r)),
        h("td", { class: "fallback" }, r.fallback || "–"),
        h("td", { class: "n" }, r.demand), h("td", { class: "n" }, r.admitted), h("td", { class: "n" }, r.rejected),
        h("td", { class: "opens" }, counts(r.opens)),
        h("td", { class: "probes" }, r.probes.ok + " / " + r.probes.failed + " / " + r.probes.expired),
        policyCell(r), h("td", { class: "last" }, lastText(r)));
      body.append(tr);
    }
    const tbody = document.querySelector("#breakers tbody");
    const focused = document.activeElement && document.activeElement.closest && document.activeElement.closest("#breakers tbody tr");
    const refocus = focused ? focused.dataset.key : null;
    tbody.replaceChildren(body);
    if (refocus != null) {
      for (const tr of tbody.children) if (tr.dataset.key === refocus) { tr.focus({ preventScroll: true }); break; }
    }
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
    if (res.ok && key === selected) {
      const first = !detail || detail.key !== key;
      detail = await res.json();
      renderDetail();
      if (first) document.getElementById("detail").scrollIntoView({ block: "nearest" });
    }
  }

  function renderDetail() {
    const section = document.getElementById("detail");
    const row = detail && detail.key === selected ? detail : null;
    section.hidden = !row;
    if (!row) return;
    const keyEl = document.getElementById("detail-key");
    keyEl.textContent = printable(row.key + "  (tool " + row.tool + ", policy " + (row.policy || row.policy_version) + ")");
    keyEl.title = policyTitle(row.policy_version);
    document.getElementById("detail-operator").textContent = row.operator ? printable(operatorText(row.operator)) : "";
    document.getElementById("actions").hidden = !actions;
    const s = row.signals;
    document.getElementById("detail-signals").textContent = printable(s
      ? s.opens_rate + " · open " + Math.round(s.open_share * 100) + " % of " +
        Math.round(s.span_ms / 1000) + " s · half-open reopen ratio " + Math.round(s.reopen_ratio * 100) +
        " % · re-calls before the told retry time " + s.early_recalls + " · failures by class " +
        (Object.entries(s.failures_by_class).map(([k, v]) => k + ": " + v).join(", ") || "–")
      : "");
    const body = document.createDocumentFragment();
    for (const t of row.last) {
      const grouped = Boolean(t.group);
      body.append(h("tr", { "data-group": t.group || "", class: grouped ? "run" : "" },
        h("td", {}, lineWhen(t)), h("td", {}, lineWhat(t)),
        h("td", {}, grouped ? "" : t.event.call || ""),
        h("td", {}, grouped ? t.phase : t.from + " → " + t.to),
        h("td", {}, grouped ? reasonCounts(t.reasons) : t.reason),
        h("td", {}, t.generation),
        h("td", {}, t.open_until_wall == null ? "" : clock(t.open_until_wall)),
        h("td", {}, grouped ? reasonCounts(t.classes) : t.class || ""),
        h("td", { title: policyTitle(t.policy_version) }, t.policy || t.policy_version)));
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

  // The time axis: labels in the viewer's format, hours and minutes (seconds only when
  // the ticks are less than a minute apart), and ticks far enough apart for the widest
  // label plus a gap, measured in the axis's own font, so no two labels ever overlap.
  const AXIS_FONT = "12px system-ui, -apple-system, \"Segoe UI\", sans-serif";
  const measurer = document.createElement("canvas").getContext("2d");
  function textWidth(text) {
    measurer.font = AXIS_FONT;
    return measurer.measureText(text).width;
  }
  function timeLabel(t, step) {
    const options = step < 60 ? { hour: "2-digit", minute: "2-digit", second: "2-digit" }
      : { hour: "2-digit", minute: "2-digit" };
    return new Date(t * 1000).toLocaleTimeString([], options);
  }
  const widestTime = Math.ceil(Math.max(textWidth(timeLabel(Date.UTC(2000, 0, 1, 23, 59, 59) / 1000, 1)),
    textWidth(timeLabel(Date.UTC(2000, 0, 1, 12, 59, 59) / 1000, 1))));
  function timeValues(u, splits, axis, space, step) {
    const texts = splits.map((t) => timeLabel(t, step));
    // Where each label is drawn (centre, CSS px) and how wide: read by the page's tests.
    u.root.parentElement.dataset.timeLabels = JSON.stringify(splits.map((t, i) =>
      ({ text: texts[i], x: u.valToPos(t, "x"), width: textWidth(texts[i]) })));
    return texts;
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
        axes: [{ font: AXIS_FONT, space: widestTime + 24, values: timeValues },
          { font: AXIS_FONT, label: "calls/s" }],
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
    document.getElementById("stream").textContent = printable(doc.stream + " · " + doc.entries + " entries");
    series = doc.series;
    renderChart();
    renderFindings(doc.findings);
    if (doc.stops) renderStops(doc.stops);
    if (doc.notices) renderNotices(doc.notices);
    renderWindow(doc);
    const status = document.getElementById("status");
    status.textContent = doc.error ? printable("stream unavailable: " + doc.error) : "live";
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
        document.body.dataset.renderedAt = String(Math.round(performance.now()));
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
      out.textContent = printable(body.ok ? kind + " done: " + body.record.reason : "refused: " + body.error);
      out.className = body.ok ? "done" : "refused";
    } catch (err) {
      out.textContent = "refused: " + err;
      out.className = "refused";
    }
  }

  function choose(tr) {
    if (!tr || !tr.dataset.key) return;
    selected = tr.dataset.key;
    dirty = true;
    loadDetail();
  }
  const table = document.querySelector("#breakers tbody");
  table.addEventListener("click", (e) => choose(e.target.closest("tr")));
  table.addEventListener("keydown", (e) => {
    if (e.key !== "Enter" && e.key !== " ") return;
    e.preventDefault();
    choose(e.target.closest("tr"));
  });
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
  document.getElementById("zone").textContent = "times in " + zone;
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
