// poolwatch status page: polls the sidecar's JSON API and draws each rank's pools.
// No build step, no external assets. Pure functions first (exposed as window.poolwatch for
// tests), then rendering (DOM via textContent only), then the refresh loop.
"use strict";

(function () {
  const STATES = ["available", "evictable", "protected", "held", "session_held"];
  const DEFAULT_REFRESH_MS = 2000;

  // ---- pure functions --------------------------------------------------------------------

  /** Segments of one pool's bar: [{kind, slots, left, width}] in percent of the scale, plus the
   *  capacity marker. The scale is the larger of the size and the sum of the known terms, so a
   *  surplus shows as a stack running past the capacity line. */
  function poolBar(account, finding) {
    const size = account.size ?? 0;
    const known = STATES.filter((s) => account[s] !== null && account[s] !== undefined);
    const sum = known.reduce((acc, s) => acc + Math.max(0, account[s]), 0);
    const parts = known.map((s) => ({ kind: s, slots: Math.max(0, account[s]) }));
    if (known.length < STATES.length && size > sum) {
      parts.push({ kind: "unknown", slots: size - sum });
    } else if (finding && finding.balance === "deficit" && finding.gap > 0) {
      parts.push({ kind: "lost", slots: finding.gap });
    }
    const total = parts.reduce((acc, p) => acc + p.slots, 0);
    const scale = Math.max(size, total, 1);
    let left = 0;
    const segments = parts.map((p) => {
      const seg = { kind: p.kind, slots: p.slots, left: (100 * left) / scale, width: (100 * p.slots) / scale };
      left += p.slots;
      return seg;
    });
    const capacity = (100 * size) / scale;
    const surplus = total > size ? { left: capacity, width: 100 - capacity, slots: total - size } : null;
    return { segments, capacity, surplus };
  }

  /** CSS class and words for a finding of conservation.assess. */
  function gapView(finding) {
    if (!finding || finding.balance === "unknown" || finding.gap === null) {
      return { cls: "gap-unknown", text: "gap unknown (busy, coarse figures)" };
    }
    const n = Math.abs(finding.gap);
    const slots = n === 1 ? "slot" : "slots";
    const bound = finding.basis === "negative_used" ? "at least " : "";
    if (finding.balance === "surplus") {
      return { cls: "gap-surplus", text: `gap ${signed(finding.gap)}: surplus of ${bound}${n} ${slots} (double free)` };
    }
    if (finding.balance === "deficit") {
      return { cls: "gap-deficit", text: `gap ${signed(finding.gap)}: deficit of ${n} ${slots} (leak)` };
    }
    return { cls: "gap-balanced", text: "gap 0: balanced" };
  }

  function signed(n) {
    return n > 0 ? `+${n}` : n < 0 ? `\u2212${-n}` : "0";
  }

  function age(seconds) {
    if (seconds === null || seconds === undefined || !isFinite(seconds)) return "age unknown";
    if (seconds < 90) return `${seconds.toFixed(1)} s old`;
    if (seconds < 5400) return `${Math.round(seconds / 60)} min old`;
    return `${(seconds / 3600).toFixed(1)} h old`;
  }

  const SEVERITY_ORDER = { critical: 0, warning: 1, info: 2 };
  const STATE_ORDER = { firing: 0, pending: 1 };
  const CRASH_ALERTS = new Set(["PoolwatchSchedulerCrashed"]);

  /** The alerts API's answer as [{name, state, severity, labels, rank, text, since, runbook}]:
   *  a list, or {alerts: [...]}; labels as an object or as [name, value] pairs. Resolved ones are
   *  dropped; criticals first, then firing before pending, then the oldest first. ``text`` is the
   *  description (figures, slot ids, hook), the summary only when there is none. */
  function normaliseAlerts(doc) {
    const items = Array.isArray(doc) ? doc : (doc && (doc.alerts || doc.data)) || [];
    return items
      .map((a) => {
        const labels = Array.isArray(a.labels) ? Object.fromEntries(a.labels) : { ...(a.labels || {}) };
        const notes = a.annotations || {};
        return {
          name: a.name || a.alertname || labels.alertname || "alert",
          state: (a.state && (a.state.state || a.state)) || (a.status && a.status.state) || "firing",
          severity: a.severity || labels.severity || "",
          labels,
          rank: rankText(labels),
          text: notes.description || a.description || notes.summary || a.summary || "",
          since: a.fired_at ?? a.active_since ?? (a.startsAt ? Date.parse(a.startsAt) / 1000 : null),
          runbook: notes.runbook_url || a.runbook_url || "",
        };
      })
      .filter((a) => a.state !== "resolved" && a.state !== "inactive")
      .sort((a, b) => (SEVERITY_ORDER[a.severity] ?? 3) - (SEVERITY_ORDER[b.severity] ?? 3)
        || (STATE_ORDER[a.state] ?? 2) - (STATE_ORDER[b.state] ?? 2)
        || (a.since ?? Infinity) - (b.since ?? Infinity));
  }

  /** Where an alert is, in full: "decode-0 · prefill · dp0 tp1 pp0 · mamba" (a target alert: its target). */
  function rankText(labels) {
    const ranks = ["dp", "tp", "pp"].filter((r) => labels[`${r}_rank`] !== undefined)
      .map((r) => `${r}${labels[`${r}_rank`]}`).join(" ");
    const parts = [labels.namespace && labels.pod ? `${labels.namespace}/${labels.pod}` : labels.pod,
      labels.worker, labels.role, ranks, labels.pool, labels.target];
    return parts.filter(Boolean).join(" \u00b7 ");
  }

  /** The key of the rank an alert is about ("worker/dp0-tp1-pp0"), or "" for a target alert. */
  function rankKey(labels) {
    if (labels.worker === undefined || labels.dp_rank === undefined) return "";
    return `${labels.worker}/dp${labels.dp_rank}-tp${labels.tp_rank}-pp${labels.pp_rank}`;
  }

  /** What a rank's card says it is: "crashed" while a crash alert of it fires (a scheduler
   *  exception, or SGLang's strict idle check), "gone" while its figures are stale (nothing
   *  reports it), else its phase. */
  function rankStatus(worker, alerts) {
    const crashed = alerts.some((a) => a.state === "firing" && rankKey(a.labels) === worker.key
      && (CRASH_ALERTS.has(a.name) || (a.name === "PoolwatchIdleCheckFailed" && a.severity === "critical")));
    if (crashed) return { cls: "status-crashed", text: "crashed" };
    if (worker.stale) return { cls: "status-gone", text: "gone" };
    const phase = (worker.snapshot && worker.snapshot.phase) || "unknown";
    return { cls: `phase-${phase}`, text: phase };
  }

  /** A moment as "2026-11-30 09:31:02 UTC": date, time and zone (``timeZone``: the browser's when unset). */
  function stamp(epochMs, timeZone) {
    const format = new Intl.DateTimeFormat("en-GB", {
      timeZone, year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
      second: "2-digit", hourCycle: "h23", timeZoneName: "short",
    });
    const p = Object.fromEntries(format.formatToParts(new Date(epochMs)).map((x) => [x.type, x.value]));
    return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}:${p.second} ${p.timeZoneName}`;
  }

  function countProblems(workers) {
    let surplus = 0, deficit = 0, stale = 0;
    for (const w of workers) {
      if (w.stale) stale += 1;
      for (const f of w.findings || []) {
        if (f.balance === "surplus") surplus += 1;
        if (f.balance === "deficit") deficit += 1;
      }
    }
    return { surplus, deficit, stale };
  }

  /** What an incident's call site says: a lead sentence and one "file:line function" line per
   *  engine frame, innermost first (the line that called the free on top). */
  function callSiteView(site, hook) {
    if (!site || !site.frames || !site.frames.length) {
      return { lead: "No engine frame was on the stack when it was found.", frames: [] };
    }
    const frames = site.frames.map((f) => `${f.file}:${f.line} ${f.function}`);
    if (site.kind === "free") return { lead: "Freed by", frames };
    if (site.kind === "next_free") {
      return { lead: `The free had returned; the same free, caught again at iteration ${site.seq}, is made by`, frames };
    }
    return { lead: `The line that freed it is not known yet; found after ${hook || "a hook"}, which was called from`, frames };
  }

  /** One incident of GET api/v1/incidents as the page lists it. */
  function incidentView(item) {
    const what = `${item.record === "repair" ? "guard " : ""}${item.kind} \u00b7 ${item.pool} \u00b7 ${item.count}`;
    return {
      id: item.id,
      what,
      where: `${item.rank} \u00b7 ${item.engine} ${item.release}`.trim(),
      since: item.first_seen_at,
      site: callSiteView(item.call_site, item.hook),
      markdown: `api/v1/incidents/${encodeURIComponent(item.id)}/bundle.md`,
      json: `api/v1/incidents/${encodeURIComponent(item.id)}`,
    };
  }

  window.poolwatch = {
    poolBar, gapView, normaliseAlerts, countProblems, age, rankText, rankStatus, stamp, callSiteView, incidentView,
  };

  // ---- rendering -------------------------------------------------------------------------

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function renderPool(account, finding) {
    const row = el("div", "pool");
    row.dataset.pool = account.pool;
    row.append(el("div", "pool-name", account.pool));
    const bar = el("div", "bar");
    const view = poolBar(account, finding);
    for (const s of view.segments) {
      const seg = el("span", `seg ${s.kind}`);
      seg.style.left = `${s.left}%`;
      seg.style.width = `${s.width}%`;
      seg.title = `${s.kind}: ${s.slots}`;
      bar.append(seg);
    }
    if (view.surplus) {
      const over = el("span", "seg surplus");
      over.style.right = "0";
      over.style.width = `max(${view.surplus.width}%, 6px)`;  // one slot in 476 must still show
      over.title = `counted twice: ${view.surplus.slots}`;
      bar.append(over);
    }
    const cap = el("span", "capacity");
    cap.style.left = `calc(${view.capacity}% - 1px)`;
    cap.title = `capacity: ${account.size}`;
    bar.append(cap);
    row.append(bar);
    const figures = ["size", ...STATES].map((k) => `${k.replace("_", " ")} ${account[k] ?? "?"}`);
    row.append(el("div", "figures", figures.join(" \u00b7 ")));
    const gap = gapView(finding);
    row.append(el("div", `gap ${gap.cls}`, gap.text));
    row.classList.add(gap.cls.replace("gap-", "pool-"));
    return row;
  }

  function renderWorker(w, alerts) {
    const card = el("article", "worker");
    card.dataset.key = w.key;
    const status = rankStatus(w, alerts);
    card.dataset.status = status.text;
    if (w.stale) card.classList.add("stale");
    if (status.text === "crashed") card.classList.add("crashed");
    const balances = (w.findings || []).map((f) => f.balance);
    if (balances.includes("surplus")) card.classList.add("has-surplus");
    else if (balances.includes("deficit")) card.classList.add("has-deficit");
    const head = el("header", "worker-head");
    head.append(el("h3", "", w.key));
    head.append(el("span", `badge role-${w.worker.role}`, w.worker.role));
    const snap = w.snapshot || {};
    head.append(el("span", `badge status ${status.cls}`, status.text));
    head.append(el("span", w.stale ? "badge age stale-badge" : "badge age", (w.stale ? "stale, " : "") + age(w.age_seconds)));
    const facts = [snap.source, w.worker.model, w.worker.release && `SGLang ${w.worker.release}`];
    head.append(el("span", "facts", facts.filter(Boolean).join(" \u00b7 ")));
    card.append(head);
    const byPool = Object.fromEntries((w.findings || []).map((f) => [f.pool, f]));
    for (const [name, account] of Object.entries(snap.pools || {})) {
      card.append(renderPool({ pool: name, ...account }, byPool[name]));
    }
    return card;
  }

  function renderWorkers(workers, alerts) {
    const root = document.getElementById("workers");
    root.replaceChildren(...workers.map((w) => renderWorker(w, alerts)));
    if (!workers.length) root.append(el("p", "note", "No rank has reported yet."));
  }

  function renderAlerts(result) {
    const list = document.getElementById("alerts");
    const note = document.getElementById("alerts-note");
    note.hidden = true;
    if (result.missing) {
      list.replaceChildren();
      note.hidden = false;
      note.textContent = "This sidecar has no alert API; Prometheus rules still alert on the metrics.";
      return;
    }
    const alerts = normaliseAlerts(result.doc);
    list.replaceChildren(...alerts.map((a) => {
      const item = el("li", `alert severity-${a.severity} state-${a.state}`);
      item.append(el("strong", "", a.name), el("span", "badge", `${a.state} ${a.severity}`.trim()));
      item.append(el("span", "where", a.rank));
      if (a.since !== null && a.since !== undefined) item.append(el("span", "since", `since ${stamp(a.since * 1000)}`));
      item.append(el("span", "description", a.text));
      if (a.runbook) {
        const link = el("a", "", "runbook");
        link.href = a.runbook;
        item.append(link);
      }
      return item;
    }));
    if (!alerts.length) list.append(el("li", "alert none", "No alert is firing."));
  }

  function renderIncidents(result) {
    const section = document.getElementById("incidents-section");
    const list = document.getElementById("incidents");
    section.hidden = Boolean(result.missing);
    const items = (result.doc || []).map(incidentView);
    list.replaceChildren(...items.map((v) => {
      const item = el("li", "incident");
      item.dataset.id = v.id;
      item.append(el("strong", "", v.what), el("span", "where", v.where));
      if (v.since !== null && v.since !== undefined) item.append(el("span", "since", `since ${stamp(v.since * 1000)}`));
      const site = el("div", "call-site");
      site.append(el("span", "lead", v.site.lead));
      const frames = el("ol", "frames");
      frames.append(...v.site.frames.map((f) => el("li", "", f)));
      site.append(frames);
      item.append(site);
      for (const [label, href] of [["bundle", v.markdown], ["json", v.json]]) {
        const link = el("a", "", label);
        link.href = href;
        item.append(link);
      }
      return item;
    }));
    if (!items.length) list.append(el("li", "incident none", "No incident seen."));
  }

  function renderTargets(targets) {
    const body = document.getElementById("targets");
    body.replaceChildren(...targets.map((t) => {
      const row = el("tr", t.up ? "up" : "down");
      row.append(el("td", "", t.name), el("td", "", t.source), el("td", "state", t.up ? "up" : "down"),
        el("td", "", String(t.scrapes ?? "")), el("td", "error", t.last_error || ""));
      return row;
    }));
  }

  function renderSummary(workers) {
    const p = countProblems(workers);
    const parts = [`${workers.length} rank${workers.length === 1 ? "" : "s"}`];
    if (p.surplus) parts.push(`${p.surplus} pool${p.surplus === 1 ? "" : "s"} in surplus`);
    if (p.deficit) parts.push(`${p.deficit} pool${p.deficit === 1 ? "" : "s"} in deficit`);
    if (p.stale) parts.push(`${p.stale} stale`);
    if (!p.surplus && !p.deficit) parts.push("every known pool balanced");
    const summary = document.getElementById("summary");
    summary.textContent = parts.join(" \u00b7 ");
    summary.className = p.surplus ? "summary gap-surplus" : p.deficit ? "summary gap-deficit" : "summary";
    const problems = p.surplus + p.deficit;
    document.title = problems ? `(${problems}) poolwatch` : "poolwatch";
  }

  // ---- the refresh loop ------------------------------------------------------------------

  async function getJson(path) {
    const response = await fetch(new URL(path, document.baseURI), { cache: "no-store" });
    if (response.status === 404) return { missing: true };
    if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
    return { doc: await response.json() };
  }

  let lastState = "";

  async function refresh() {
    const connection = document.getElementById("connection");
    try {
      const [workers, targets, alerts, incidents] = await Promise.all([
        getJson("api/v1/workers"), getJson("api/v1/targets"), getJson("api/v1/alerts").catch(() => ({ missing: true })),
        getJson("api/v1/incidents").catch(() => ({ missing: true })),
      ]);
      const state = JSON.stringify([workers, targets, alerts, incidents]);
      if (state !== lastState) {  // redraw only what changed: no flicker, selections survive
        renderWorkers(workers.doc || [], alerts.missing ? [] : normaliseAlerts(alerts.doc));
        renderSummary(workers.doc || []);
        renderTargets(targets.doc || []);
        renderAlerts(alerts);
        renderIncidents(incidents);
        lastState = state;
      }
      connection.hidden = true;
      document.getElementById("updated").textContent = `updated ${stamp(Date.now())}`;
      document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
    } catch (err) {
      connection.hidden = false;
      connection.textContent = `sidecar unreachable (${err.message}); showing the last data`;
    }
  }

  function refreshInterval() {
    const asked = Number(new URLSearchParams(window.location.search).get("refresh"));
    return asked >= 200 ? asked : DEFAULT_REFRESH_MS;
  }

  async function loop() {
    await refresh();
    window.setTimeout(loop, refreshInterval());
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", loop);
  else loop();
})();
