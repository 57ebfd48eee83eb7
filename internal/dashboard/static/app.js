// The pgmsg dashboard: one page per hash route (#/, #/topics/T,
// #/topics/T/groups/G, #/queues/Q, #/jobs/ID, #/batches/ID, #/tokens). Every figure comes
// from the API through /ui/api/ (dashboard.go forwards /ui/api/v1 to /v1
// with the session's token); nothing is loaded from elsewhere.
//
// Text from the server is only ever set with textContent (h() below),
// never parsed as HTML.

const REFRESH_MS = 3000; // how often live figures are fetched again
const PAGE_SIZE = 50; // rows per page of the long tables
const CHART_POINTS = 60; // samples a chart keeps (3 minutes at REFRESH_MS)

let session = null;
let timers = [];

// h builds an element: h("a", {href: "#/"}, "text", child, ...).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

// api calls /ui/api/<path>; it throws an Error with the API's message.
async function api(path, opts = {}) {
  const init = { method: opts.method || "GET", headers: {}, credentials: "same-origin" };
  if (init.method !== "GET") init.headers["X-CSRF-Token"] = session ? session.csrf : "";
  if (opts.body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(opts.body);
  }
  const res = await fetch("/ui/api/" + path, init);
  if (res.status === 401) {
    location.href = "/ui/login";
    throw new Error("not logged in");
  }
  const text = await res.text();
  const body = text ? JSON.parse(text) : null;
  if (!res.ok) {
    const e = body && body.error ? body.error : { code: String(res.status), message: res.statusText };
    const err = new Error(e.message + " (" + e.code + ")");
    err.status = res.status;
    throw err;
  }
  return body;
}

const enc = encodeURIComponent;
const fmt = (n) => (n === undefined || n === null ? "—" : Number(n).toLocaleString("en-US"));
const rate = (n) => (n === null || n === undefined ? "—" : n.toFixed(n < 10 ? 2 : 0));
const when = (t) => (t ? new Date(t).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "—");
const secs = (s) => (s < 1 ? (s * 1000).toFixed(0) + " ms" : s.toFixed(2) + " s");

function toast(msg, isError) {
  const t = document.getElementById("toast");
  t.textContent = msg;
  t.className = isError ? "error" : "";
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => (t.textContent = ""), 6000);
}

// confirmAction asks in a modal dialog (keyboard: Tab, Enter, Escape).
function confirmAction(text) {
  const d = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  return new Promise((resolve) => {
    d.addEventListener("close", () => resolve(d.returnValue === "ok"), { once: true });
    d.returnValue = "";
    d.showModal();
    document.getElementById("confirm-ok").focus();
  });
}

// action is a button that runs fn after a confirmation; only admins see it.
function action(label, question, fn, opts = {}) {
  if (!session.admin) return null;
  return h("button", {
    type: "button", class: opts.primary ? "primary" : "danger", dataset: { action: opts.id || label },
    onclick: async (ev) => {
      if (question && !(await confirmAction(question))) return;
      const page = location.hash;
      ev.target.disabled = true;
      try {
        const msg = await fn();
        toast(msg || label + ": done");
      } catch (e) {
        toast(label + " failed: " + e.message, true);
      } finally {
        ev.target.disabled = false;
        // An action that leaves the page (a deleted group or job) must not
        // have the page it left poll for what is gone.
        if (location.hash === page) refreshNow();
      }
    },
  }, label);
}

function table(cols, rows, opts = {}) {
  return h("div", { class: "table-wrap" }, h("table", { id: opts.id },
    opts.caption ? h("caption", { class: "muted" }, opts.caption) : null,
    h("thead", {}, h("tr", {}, cols.map((c) => h("th", { scope: "col", class: c.num ? "num" : c.cls }, c.label)))),
    h("tbody", {}, rows.length ? rows.map((r) => h("tr", { dataset: r.dataset || {} },
      cols.map((c, i) => h("td", { class: c.num ? "num" : c.cls, dataset: { col: c.key || "" } }, r.cells[i]))))
      : h("tr", {}, h("td", { colspan: cols.length, class: "muted" }, opts.empty || "Nothing here yet.")))));
}

function stats(items) {
  return h("dl", { class: "stats" }, items.map(([label, value, key]) =>
    h("div", { class: "stat" }, h("dt", {}, label), h("dd", { dataset: { stat: key || label } }, value))));
}

// replace swaps a region's content unless keyboard focus is inside it,
// so that a refresh never steals the place of someone tabbing through.
function replace(el, ...children) {
  if (el.contains(document.activeElement) && document.activeElement !== document.body) return;
  el.replaceChildren(...children);
}

// Chart is a uPlot time series that keeps the last CHART_POINTS samples.
class Chart {
  constructor(el, title, series) {
    this.data = [[], ...series.map(() => [])];
    const width = Math.max(280, el.clientWidth - 10);
    this.plot = new uPlot({
      title, width, height: 200,
      // The x axis always ends now and spans the samples a chart keeps:
      // uPlot widens a range of one sample by days, which put a first
      // sample's axis years away.
      scales: { x: { time: true, range: () => {
        const hi = Date.now() / 1000;
        return [hi - (CHART_POINTS * REFRESH_MS) / 1000, hi];
      } } },
      series: [{}, ...series.map((s, i) => ({ label: s, stroke: ["#2557d6", "#d6452f", "#0e9f6e"][i % 3], width: 2, points: { show: true, size: 4 } }))],
      axes: [{}, { size: 60 }],
    }, this.data, el);
    this.ro = new ResizeObserver(() => this.plot.setSize({ width: Math.max(280, el.clientWidth - 10), height: 200 }));
    this.ro.observe(el);
  }
  push(values) {
    this.data[0].push(Date.now() / 1000);
    values.forEach((v, i) => this.data[i + 1].push(v));
    if (this.data[0].length > CHART_POINTS) this.data.forEach((d) => d.shift());
    this.plot.setData(this.data);
  }
}

// poll runs fn now and every REFRESH_MS while the page is shown.
function poll(fn) {
  const run = async () => {
    try {
      await fn();
    } catch (e) {
      toast(e.message, true);
    }
  };
  timers.push({ run, id: setInterval(run, REFRESH_MS) });
  return run();
}

function refreshNow() {
  for (const t of timers) t.run();
}

// ---- Overview ----

async function overview(main) {
  const topicsEl = h("div", {}), queuesEl = h("div", {}), eventsEl = h("div", {}), summary = h("div", {});
  const filter = h("input", { type: "search", id: "topic-filter", placeholder: "Filter topics", "aria-label": "Filter topics" });
  let page = 0, topics = [], prev = null, rates = {};
  const pager = h("div", { class: "pager" });
  main.replaceChildren(h("h1", {}, "Overview"), summary,
    h("section", { class: "card", "aria-labelledby": "h-topics" }, h("h2", { id: "h-topics" }, "Topics"), filter, topicsEl, pager),
    h("section", { class: "card", "aria-labelledby": "h-queues" }, h("h2", { id: "h-queues" }, "Queues"), queuesEl),
    h("section", { class: "card", "aria-labelledby": "h-events" }, h("h2", { id: "h-events" }, "Recent maintenance events"), eventsEl));
  const drawTopics = () => {
    const shown = topics.filter((t) => t.name.includes(filter.value.trim()));
    const pages = Math.max(1, Math.ceil(shown.length / PAGE_SIZE));
    page = Math.min(page, pages - 1);
    replace(topicsEl, table([
      { label: "Topic", key: "name" }, { label: "Partitions", num: true, key: "partitions" },
      { label: "Records", num: true, key: "records" }, { label: "Records/s", num: true, key: "rate" },
      { label: "Groups", num: true, key: "groups" }, { label: "Total lag", num: true, key: "lag" },
    ], shown.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE).map((t) => ({
      dataset: { topic: t.name },
      cells: [h("a", { href: "#/topics/" + enc(t.name) }, t.name), fmt(t.partitions), fmt(t.records),
        rate(rates[t.name]), fmt(t.groups), fmt(t.lag)],
    })), { id: "topics", empty: "No topics." }));
    pager.replaceChildren(
      h("button", { type: "button", disabled: page === 0, onclick: () => { page--; drawTopics(); } }, "Previous"),
      h("span", { class: "muted" }, `Page ${page + 1} of ${pages} · ${fmt(shown.length)} topics`),
      h("button", { type: "button", disabled: page >= pages - 1, onclick: () => { page++; drawTopics(); } }, "Next"));
  };
  filter.addEventListener("input", () => { page = 0; drawTopics(); });
  await poll(async () => {
    const [log, queues, events] = await Promise.all([api("log"), api("v1/queues"), api("events")]);
    const now = Date.parse(log.at);
    if (prev) {
      const dt = (now - prev.at) / 1000;
      for (const t of log.topics) {
        const before = prev.ends[t.name];
        if (before !== undefined && dt > 0) rates[t.name] = Math.max(0, (t.end_offset - before) / dt);
      }
    }
    prev = { at: now, ends: Object.fromEntries(log.topics.map((t) => [t.name, t.end_offset])) };
    topics = log.topics;
    const qs = queues.queues;
    const sum = (xs, f) => xs.reduce((a, x) => a + (f(x) || 0), 0);
    const rateTotal = Object.keys(rates).length ? sum(log.topics, (t) => rates[t.name]) : null;
    replace(summary, stats([
      ["Topics", fmt(topics.length), "topics"], ["Records/s", rate(rateTotal), "records-rate"],
      ["Total lag", fmt(sum(topics, (t) => t.lag)), "lag"], ["Queues", fmt(qs.length), "queues"],
      ["Jobs/s", rate(sum(qs, (q) => q.throughput)), "jobs-rate"],
      ["Queue depth", fmt(sum(qs, (q) => q.available + q.scheduled + q.retrying)), "depth"],
      ["Dead jobs", fmt(sum(qs, (q) => q.dead)), "dead"],
    ]));
    drawTopics();
    replace(queuesEl, table([
      { label: "Queue", key: "name" }, { label: "Available", num: true, key: "available" },
      { label: "Running", num: true, key: "running" }, { label: "Scheduled", num: true, key: "scheduled" },
      { label: "Retrying", num: true, key: "retrying" }, { label: "Dead", num: true, key: "dead" },
      { label: "Jobs/s", num: true, key: "throughput" }, { label: "State", key: "paused" },
    ], qs.map((q) => ({
      dataset: { queue: q.queue },
      cells: [h("a", { href: "#/queues/" + enc(q.queue) }, q.queue), fmt(q.available), fmt(q.running), fmt(q.scheduled),
        fmt(q.retrying), fmt(q.dead), rate(q.throughput), q.paused ? h("span", { class: "badge paused" }, "paused") : "running"],
    })), { id: "queues", empty: "No queues." }));
    replace(eventsEl, table([
      { label: "At" }, { label: "Kind" }, { label: "Topic" }, { label: "Partition", num: true }, { label: "Detail", cls: "wrap" },
    ], events.events.map((e) => ({ cells: [when(e.at), e.kind, e.topic + (e.group ? " / " + e.group : ""), e.partition, JSON.stringify(e.detail)] })),
    { id: "events", empty: "No maintenance events yet." }));
  });
}

// ---- Topic ----

// bytesOf turns a value the API encoded (json, text, base64) into bytes.
function bytesOf(value, encoding) {
  if (value === null) return null;
  if (encoding === "base64") return Uint8Array.from(atob(value), (c) => c.charCodeAt(0));
  return new TextEncoder().encode(encoding === "json" ? JSON.stringify(value) : value);
}

// showValue shows stored bytes: as they are (auto: text, or base64 when
// they are not UTF-8), as text, as hex, or as JSON pretty-printed (which
// parses the value: a number such as 18.50 is shown as 18.5).
function showValue(value, encoding, view) {
  if (value === null || value === undefined) return h("span", { class: "muted" }, "null");
  const bytes = bytesOf(value, encoding);
  if (view === "hex") return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join(" ");
  if (view === "text") return new TextDecoder().decode(bytes);
  if (view === "json") {
    try {
      return JSON.stringify(JSON.parse(new TextDecoder().decode(bytes)), null, 2);
    } catch {
      return h("span", { class: "muted" }, "(not JSON) " + new TextDecoder().decode(bytes));
    }
  }
  if (encoding === "json") return JSON.stringify(value, null, 2);
  return encoding === "base64" ? "base64: " + value : value;
}

async function topicPage(main, topic) {
  const info = h("div", {}), groupsEl = h("div", {}), chartEl = h("div", { class: "chart" }), recordsEl = h("div", {});
  main.replaceChildren(h("div", { class: "crumbs" }, h("a", { href: "#/" }, "Overview"), " / topic"),
    h("h1", {}, topic), info,
    h("div", { class: "grid" },
      h("section", { class: "card", "aria-label": "Publish rate" }, chartEl),
      h("section", { class: "card", "aria-labelledby": "h-groups" }, h("h2", { id: "h-groups" }, "Consumer groups"), groupsEl)),
    h("section", { class: "card", "aria-labelledby": "h-records" }, h("h2", { id: "h-records" }, "Records"), recordBrowser(topic, recordsEl), recordsEl));
  const chart = new Chart(chartEl, "Publish rate (records/s)", ["records/s"]);
  let prev = null;
  await poll(async () => {
    const [d, log] = await Promise.all([api("v1/topics/" + enc(topic)), api("log?topic=" + enc(topic))]);
    const end = d.partition_info.reduce((a, p) => a + p.next_offset, 0);
    const now = Date.now();
    if (prev) chart.push([Math.max(0, (end - prev.end) / ((now - prev.at) / 1000))]);
    prev = { end, at: now };
    const settings = Object.entries(d.settings || {});
    replace(info, stats([["Partitions", fmt(d.partitions), "partitions"], ["Segment records", fmt(d.segment_records), "segment_records"],
      ["Max record bytes", fmt(d.max_record_bytes), "max_record_bytes"]]),
    h("section", { class: "card", "aria-labelledby": "h-parts" }, h("h2", { id: "h-parts" }, "Partitions"),
      table([{ label: "Partition", num: true }, { label: "Start offset", num: true, key: "start" }, { label: "Next offset", num: true, key: "next" },
        { label: "Records", num: true }, { label: "Segments", num: true }, { label: "≈ bytes", num: true }],
      d.partition_info.map((p) => ({ dataset: { partition: p.partition },
        cells: [p.partition, fmt(p.start_offset), fmt(p.next_offset), fmt(p.records), p.segments, fmt(p.approx_bytes)] })), { id: "partitions" }),
      h("h2", {}, "Retention and backpressure settings"),
      settings.length ? table([{ label: "Setting" }, { label: "Value" }], settings.map(([k, v]) => ({ cells: [k, JSON.stringify(v)] })), { id: "settings" })
        : h("p", { class: "muted" }, "Defaults (no settings).")));
    const gs = log.groups.filter((g) => g.topic === topic);
    replace(groupsEl, table([{ label: "Group" }, { label: "Partitions", num: true }, { label: "Lag", num: true, key: "lag" }],
      gs.map((g) => ({ dataset: { group: g.group }, cells: [h("a", { href: `#/topics/${enc(topic)}/groups/${enc(g.group)}` }, g.group), g.partitions, fmt(g.lag)] })),
      { id: "groups", empty: "No consumer groups." }));
  });
}

function recordBrowser(topic, out) {
  const f = h("form", { class: "inline", id: "record-form" },
    h("label", {}, "Partition", h("input", { name: "partition", type: "number", min: 0, value: 0, required: true })),
    h("label", {}, "From offset", h("input", { name: "offset", type: "number", min: 0, placeholder: "0" })),
    h("label", {}, "or from time (UTC)", h("input", { name: "time", type: "datetime-local", step: 1 })),
    h("label", {}, "Show values as", h("select", { name: "view" }, ["auto", "json", "text", "hex"].map((v) => h("option", { value: v }, v)))),
    h("button", { type: "submit", class: "primary" }, "Browse"));
  f.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = Object.fromEntries(new FormData(f));
    let q = `records?topic=${enc(topic)}&partition=${enc(v.partition)}&limit=${PAGE_SIZE}`;
    if (v.time) q += "&time=" + enc(new Date(v.time + "Z").toISOString());
    else q += "&offset=" + enc(v.offset || "0");
    try {
      const res = await api(q);
      const view = v.view;
      out.dataset.shown = `partition=${v.partition};offset=${res.from};view=${view}`;
      out.replaceChildren(table([{ label: "Offset", num: true }, { label: "Timestamp" }, { label: "Key", cls: "wrap" },
        { label: "Headers", cls: "wrap" }, { label: "Value", cls: "wrap", key: "value" }],
      res.records.map((r) => ({ dataset: { offset: r.offset }, cells: [r.offset, when(r.timestamp),
        r.key === null ? h("span", { class: "muted" }, "null") : showValue(r.key, r.key_encoding, view === "hex" ? "hex" : "auto"),
        r.headers ? Object.entries(r.headers).map(([k, x]) => k + ": " + x).join("\n") : "",
        showValue(r.value, r.value_encoding, view)] })), { id: "records", empty: "No records from there.", caption: `From offset ${res.from}` }));
      if (res.records.length === PAGE_SIZE) {
        out.append(h("button", { type: "button", onclick: () => {
          f.elements.offset.value = res.records[res.records.length - 1].offset + 1;
          f.elements.time.value = "";
          f.requestSubmit();
        } }, "Next records"));
      }
    } catch (e) {
      out.replaceChildren(h("p", { class: "error", role: "alert" }, e.message));
    }
  });
  // The first records at once: partition 0 from its first offset.
  f.dispatchEvent(new Event("submit", { cancelable: true }));
  return f;
}

// ---- Consumer group ----

async function groupPage(main, topic, group) {
  const membersEl = h("div", {}), partsEl = h("div", {}), chartEl = h("div", { class: "chart" }), summary = h("div", {});
  const path = `v1/topics/${enc(topic)}/groups/${enc(group)}`;
  const reset = h("form", { class: "inline", id: "reset-form" },
    h("label", {}, "Reset to", h("select", { name: "to" }, ["earliest", "latest", "offset", "timestamp"].map((v) => h("option", { value: v }, v)))),
    h("label", {}, "Offset or time (RFC 3339)", h("input", { name: "value", placeholder: "e.g. 42 or 2026-12-02T10:00:00Z" })),
    h("label", {}, "Partition (empty: all)", h("input", { name: "partition", type: "number", min: 0 })),
    h("button", { type: "submit", class: "danger" }, "Reset"));
  reset.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = Object.fromEntries(new FormData(reset));
    const to = v.to === "offset" || v.to === "timestamp" ? v.value.trim() : v.to;
    if (!to) return toast("Give the offset or time to reset to.", true);
    const body = { to };
    if (v.partition !== "") body.partition = Number(v.partition);
    if (!(await confirmAction(`Reset group ${group} on ${topic} to ${to}${body.partition !== undefined ? " on partition " + body.partition : ""}?`))) return;
    try {
      await api(path + "/reset", { method: "POST", body });
      toast("Group reset to " + to);
    } catch (e) {
      toast("Reset failed: " + e.message, true);
    }
    refreshNow();
  });
  main.replaceChildren(h("div", { class: "crumbs" }, h("a", { href: "#/" }, "Overview"), " / ", h("a", { href: "#/topics/" + enc(topic) }, topic), " / group"),
    h("h1", {}, group), summary,
    h("div", { class: "grid" },
      h("section", { class: "card", "aria-label": "Lag over time" }, chartEl),
      h("section", { class: "card", "aria-labelledby": "h-members" }, h("h2", { id: "h-members" }, "Members"), membersEl)),
    h("section", { class: "card", "aria-labelledby": "h-gparts" }, h("h2", { id: "h-gparts" }, "Partitions"), partsEl),
    session.admin ? h("section", { class: "card", "aria-labelledby": "h-gact" }, h("h2", { id: "h-gact" }, "Actions"), reset,
      h("div", { class: "actions" }, action("Delete group", `Delete group ${group} on ${topic}? Its cursors are lost.`, async () => {
        await api(path, { method: "DELETE" });
        location.hash = "#/topics/" + enc(topic);
        return "Group deleted";
      }, { id: "delete-group" }))) : null);
  const chart = new Chart(chartEl, "Lag (records)", ["lag"]);
  await poll(async () => {
    const d = await api(path);
    const lag = d.partitions.reduce((a, p) => a + p.lag, 0);
    chart.push([lag]);
    replace(summary, stats([["Total lag", fmt(lag), "lag"], ["Members", fmt(d.members.length), "members"], ["Partitions", fmt(d.partitions.length), "partitions"]]));
    replace(membersEl, table([{ label: "Member" }, { label: "Partitions" }, { label: "Alive" }, { label: "Heartbeat" }],
      d.members.map((m) => ({ cells: [m.member_id, m.partitions.join(", "), h("span", { class: "badge" + (m.alive ? " alive" : "") }, m.alive ? "alive" : "expired"), when(m.heartbeat_at)] })),
      { id: "members", empty: "No members (an HTTP or Go consumer joins by heartbeats)." }));
    replace(partsEl, table([{ label: "Partition", num: true }, { label: "Cursor", num: true, key: "cursor" }, { label: "End offset", num: true, key: "end" },
      { label: "Lag", num: true, key: "lag" }, { label: "Owner" }, { label: "Claim owner" }, { label: "Committed" }],
    d.partitions.map((p) => ({ dataset: { partition: p.partition }, cells: [p.partition, fmt(p.next_offset), fmt(p.end_offset), fmt(p.lag), p.owner || "—", p.claim_owner || "—", when(p.committed_at)] })),
    { id: "group-partitions" }));
  });
}

// ---- Queue ----

const STATES = ["available", "scheduled", "running", "retrying", "pending", "dead", "completed", "cancelled"];

async function queuePage(main, queue) {
  const summary = h("div", {}), actionsEl = h("div", { class: "actions" }), jobsEl = h("div", { id: "jobs-box" });
  const heldEl = h("div", { id: "held-sequences" }), limitsEl = h("div", { id: "queue-limits" });
  const tputEl = h("div", { class: "chart" }), latEl = h("div", { class: "chart" });
  const filter = h("form", { class: "inline", id: "job-filter" },
    h("label", {}, "State", h("select", { name: "state" }, h("option", { value: "" }, "any"), STATES.map((s) => h("option", { value: s }, s)))),
    h("label", {}, "Kind", h("input", { name: "kind", placeholder: "any" })),
    h("label", {}, "Order", h("select", { name: "order" }, h("option", { value: "desc" }, "newest first"), h("option", { value: "asc" }, "oldest first"))),
    h("button", { type: "submit" }, "Show jobs"));
  // after_id of each page shown so far, in the list's order (0: the first
  // page; newest first, each next page holds smaller ids).
  let cursors = [0];
  const loadJobs = async () => {
    const v = Object.fromEntries(new FormData(filter));
    let q = `v1/queues/${enc(queue)}/jobs?limit=${PAGE_SIZE}&order=${enc(v.order)}&after_id=${cursors[cursors.length - 1]}`;
    if (v.state) q += "&state=" + enc(v.state);
    if (v.kind.trim()) q += "&kind=" + enc(v.kind.trim());
    try {
      const res = await api(q);
      jobsEl.dataset.shown = `state=${v.state};kind=${v.kind.trim()};order=${v.order};after=${cursors[cursors.length - 1]}`;
      jobsEl.replaceChildren(table([{ label: "ID", num: true }, { label: "Kind" }, { label: "State" }, { label: "Attempt", num: true },
        { label: "Enqueued", cls: "hide-narrow" }, { label: "Last error", cls: "wrap hide-narrow" }],
      res.jobs.map((j) => ({ dataset: { job: j.id }, cells: [h("a", { href: "#/jobs/" + j.id }, j.id), j.kind || "—",
        h("span", { class: "badge " + j.state }, j.state), `${j.attempt}/${j.max_attempts}`, when(j.enqueued_at),
        j.errors && j.errors.length ? j.errors[j.errors.length - 1].error : ""] })), { id: "jobs", empty: "No jobs match." }),
      h("div", { class: "pager" },
        h("button", { type: "button", id: "jobs-prev", disabled: cursors.length === 1, onclick: () => { cursors.pop(); loadJobs(); } }, "Previous"),
        h("button", { type: "button", id: "jobs-next", disabled: res.jobs.length < PAGE_SIZE, onclick: () => { cursors.push(res.jobs[res.jobs.length - 1].id); loadJobs(); } }, "Next")));
    } catch (e) {
      jobsEl.replaceChildren(h("p", { class: "error", role: "alert" }, e.message));
    }
  };
  filter.addEventListener("submit", (ev) => { ev.preventDefault(); cursors = [0]; loadJobs(); });
  main.replaceChildren(h("div", { class: "crumbs" }, h("a", { href: "#/" }, "Overview"), " / queue"), h("h1", {}, queue), summary, actionsEl,
    h("div", { class: "grid" }, h("section", { class: "card", "aria-label": "Throughput" }, tputEl), h("section", { class: "card", "aria-label": "Latency" }, latEl)),
    h("section", { class: "card", "aria-labelledby": "h-limits" }, h("h2", { id: "h-limits" }, "Limits and sequences"), limitsEl),
    h("section", { class: "card", "aria-labelledby": "h-held" }, h("h2", { id: "h-held" }, "Held sequences"), heldEl),
    h("section", { class: "card", "aria-labelledby": "h-jobs" }, h("h2", { id: "h-jobs" }, "Jobs"), filter, jobsEl));
  const tput = new Chart(tputEl, "Throughput (jobs/s, last minute)", ["jobs/s"]);
  const lat = new Chart(latEl, "Latency enqueue→done (s, last minute)", ["p50", "p99"]);
  let paused = null;
  await poll(async () => {
    const [st, latency, held, limits] = await Promise.all([api("v1/queues/" + enc(queue)), api("latency"),
      api(`v1/queues/${enc(queue)}/sequences?held=true&limit=100`), api("queue-limits?queue=" + enc(queue))]);
    replace(limitsEl, ...queueLimitsView(limits).filter(Boolean));
    // A sequence is held when a job of it went dead or was cancelled: its
    // other jobs wait until it is resumed (or the dead job requeued).
    replace(heldEl, table([{ label: "Sequence" }, { label: "Held by", num: true }, { label: "Reason" }, { label: "Since", cls: "hide-narrow" },
      { label: "Waiting", num: true }, { label: "" }],
    held.sequences.map((s) => ({ dataset: { sequence: s.key }, cells: [s.key, h("a", { href: "#/jobs/" + s.held_job_id }, s.held_job_id),
      h("span", { class: "badge " + s.held_reason }, s.held_reason), when(s.held_at), fmt(s.pending),
      action("Resume", `Resume sequence ${s.key}? Its next job runs; job ${s.held_job_id} stays ${s.held_reason}.`,
        () => api(`v1/queues/${enc(queue)}/sequences/${enc(s.key)}/resume`, { method: "POST" }).then(() => "Sequence resumed"), { id: "resume-sequence", primary: true })] })),
    { id: "held", empty: "No held sequence." }));
    const l = latency.queues.find((x) => x.queue === queue) || { completed: 0, latency_p50_seconds: 0, latency_p99_seconds: 0 };
    tput.push([st.throughput]);
    lat.push([l.latency_p50_seconds, l.latency_p99_seconds]);
    replace(summary, stats([...["available", "scheduled", "running", "retrying", "pending", "dead", "archived"].map((k) => [k[0].toUpperCase() + k.slice(1), fmt(st[k]), k]),
      ["Jobs/s", rate(st.throughput), "throughput"], ["p50 / p99", l.completed ? `${secs(l.latency_p50_seconds)} / ${secs(l.latency_p99_seconds)}` : "—", "latency"],
      ["State", st.paused ? "paused" : "running", "paused"]]));
    if (paused !== st.paused) {
      paused = st.paused;
      actionsEl.replaceChildren(...[
        st.paused ? action("Resume", null, () => api(`v1/queues/${enc(queue)}/resume`, { method: "POST" }).then(() => "Queue resumed"), { id: "resume", primary: true })
          : action("Pause", `Pause queue ${queue}? Workers stop claiming its jobs.`, () => api(`v1/queues/${enc(queue)}/pause`, { method: "POST" }).then(() => "Queue paused"), { id: "pause" }),
        action("Requeue dead jobs", `Requeue every dead job of ${queue}?`, async () => `Requeued ${(await api(`v1/queues/${enc(queue)}/dead/requeue`, { method: "POST" })).requeued} jobs`, { id: "requeue-dead" }),
        action("Purge dead jobs", `Delete every dead job of ${queue}? This cannot be undone.`, async () => `Purged ${(await api(`v1/queues/${enc(queue)}/dead/purge`, { method: "POST" })).purged} jobs`, { id: "purge-dead" }),
      ].filter(Boolean));
    }
  });
  await loadJobs();
}

async function jobPage(main, id) {
  const j = await api("v1/jobs/" + enc(id));
  const q = enc(j.queue);
  const fields = [["Queue", h("a", { href: "#/queues/" + q }, j.queue)], ["Kind", j.kind || "—"], ["State", h("span", { class: "badge " + j.state, dataset: { stat: "state" } }, j.state)],
    ["Attempt", `${j.attempt} of ${j.max_attempts}`], ["Priority", j.priority], ["Enqueued", when(j.enqueued_at)], ["Run at", when(j.run_at)],
    ["Attempted", when(j.attempted_at)], ["Finished", when(j.finished_at)], ["Worker", j.worker || "—"], ["Unique key", j.unique_key || "—"], ["Tags", (j.tags || []).join(", ") || "—"],
    ["Sequence key", j.sequence_key || "—"], ["Limit key", j.limit_key || "—"],
    ["Batch", j.batch_id ? h("a", { href: "#/batches/" + j.batch_id }, j.batch_id) : "—"],
    ["Workflow", j.workflow_id ? h("a", { href: "#/jobs/" + j.workflow_id }, j.workflow_id) : "—"]];
  const wfEl = h("div", { id: "workflow-box" }), seqEl = h("div", { id: "sequence-box" });
  const inWorkflow = Boolean(j.workflow_id || (j.depends_on && j.depends_on.length));
  if (j.metadata && j.metadata.batch && j.metadata.batch.id) fields.push(["Batch callback of", h("a", { href: "#/batches/" + j.metadata.batch.id }, "batch " + j.metadata.batch.id)]);
  const live = ["available", "scheduled", "running", "retrying"].includes(j.state);
  main.replaceChildren(h("div", { class: "crumbs" }, h("a", { href: "#/" }, "Overview"), " / ", h("a", { href: "#/queues/" + q }, j.queue), " / job"),
    h("h1", {}, "Job " + j.id),
    h("div", { class: "actions" },
      // Only the actions the job's state allows: a waiting job can run now,
      // a dead one is requeued; running and finished jobs have neither.
      ["scheduled", "retrying"].includes(j.state) ? action("Retry now", `Run job ${j.id} now?`, () => api(`v1/jobs/${j.id}/retry`, { method: "POST" }).then(() => "Job made available"), { id: "retry", primary: true }) : null,
      j.state === "dead" ? action("Requeue", `Requeue dead job ${j.id}?`, () => api(`v1/queues/${q}/dead/requeue`, { method: "POST", body: { ids: [j.id] } }).then(() => "Job requeued"), { id: "requeue", primary: true }) : null,
      live ? action("Cancel", `Cancel job ${j.id}?`, () => api(`jobs/${j.id}/cancel`, { method: "POST" }).then((r) => (r.cancelled ? "Job cancelled" : "Job had finished already")), { id: "cancel" }) : null,
      j.state === "dead" ? action("Delete", `Delete dead job ${j.id}? This cannot be undone.`, () => api(`v1/queues/${q}/dead/purge`, { method: "POST", body: { ids: [j.id] } }).then(() => { location.hash = "#/queues/" + q; return "Job deleted"; }), { id: "delete" }) : null),
    h("section", { class: "card" }, table([{ label: "Field" }, { label: "Value" }], fields.map(([k, v]) => ({ dataset: { field: k }, cells: [k, v] })), { id: "job" })),
    h("section", { class: "card", "aria-labelledby": "h-att" }, h("h2", { id: "h-att" }, "Attempts and errors"),
      table([{ label: "Attempt", num: true }, { label: "At" }, { label: "Error", cls: "wrap" }], (j.errors || []).map((e) => ({ cells: [e.attempt, when(e.at), e.error] })), { id: "attempts", empty: "No failed attempts." })),
    inWorkflow ? h("section", { class: "card", "aria-labelledby": "h-wf" }, h("h2", { id: "h-wf" }, "Workflow"), wfEl) : null,
    j.sequence_key ? h("section", { class: "card", "aria-labelledby": "h-seq" }, h("h2", { id: "h-seq" }, "Sequence"), seqEl) : null,
    h("section", { class: "card", "aria-labelledby": "h-pl" }, h("h2", { id: "h-pl" }, "Payload"),
      h("pre", { class: "wrap" }, showValue(j.payload, j.payload_encoding, "auto"))));
  const show = (p, el) => p.catch((e) => el.replaceChildren(h("p", { class: "error", role: "alert" }, e.message)));
  await Promise.all([inWorkflow ? show(workflowGraph(j.id, wfEl), wfEl) : null, j.sequence_key ? show(sequenceProgress(j, seqEl), seqEl) : null]);
  // Steps and logs (GET /v1/jobs/{id}/logs): the step checkpoints the job
  // recorded, then what its handlers logged, one block per attempt.
  const jl = await api(`v1/jobs/${enc(id)}/logs`);
  if (main.gen === routeGen) {
    document.getElementById("main").append(
      h("section", { class: "card", "aria-labelledby": "h-steps" }, h("h2", { id: "h-steps" }, "Steps"),
        table([{ label: "Step" }, { label: "Attempt", num: true }, { label: "At" }, { label: "Output", cls: "wrap" }],
          jl.steps.map((s) => ({ dataset: { step: s.name }, cells: [s.name, s.attempt, when(s.at), s.output === undefined ? "—" : JSON.stringify(s.output)] })),
          { id: "steps", empty: "No step recorded." })),
      h("section", { class: "card", "aria-labelledby": "h-logs", id: "logs" }, h("h2", { id: "h-logs" }, "Logs"),
        ...(jl.logs.length ? jl.logs.map((l) => h("div", { class: "log", dataset: { attempt: l.attempt } },
          h("h3", {}, `Attempt ${l.attempt} `, h("span", { class: "badge " + l.outcome }, l.outcome), " ", when(l.at)),
          h("pre", { class: "wrap" }, l.log))) : [h("p", {}, "Nothing logged.")])));
  }
  // A reload after an action redraws this page only while it is the one
  // shown: pushed by a superseded route (its data arrived after the user
  // moved on), it would redraw the page shown now, and wipe what that
  // page shows once (a new token's secret).
  const reload = () => { if (main.gen === routeGen) route(); };
  timers.push({ run: reload, id: null });
}

// ---- Workflows, sequences and per-key limits ----

const WF_MAX_JOBS = 2000; // jobs of a workflow the graph reads
const WF_LEVEL_MAX = 12; // a level with more jobs is drawn as one node per state
const WF_LEVELS_MAX = 40; // levels drawn; deeper ones are counted, not drawn
const WF_COL = 170, WF_ROW = 40, WF_NODE_W = 140, WF_NODE_H = 26;
const SVG_NS = "http://www.w3.org/2000/svg";

// svgEl builds an SVG element, as h() builds HTML ones (text by textContent).
function svgEl(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") for (const [dk, dv] of Object.entries(v)) el.setAttribute("data-" + dk, dv);
    else el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// workflowLayout turns GetWorkflow's jobs into the graph's nodes (one per
// job, or per state of a level with more than WF_LEVEL_MAX jobs) and
// edges (deduplicated between nodes), levels left to right.
function workflowLayout(jobs) {
  const levels = [];
  for (const j of jobs) (levels[j.level] = levels[j.level] || []).push(j);
  const drawn = levels.slice(0, WF_LEVELS_MAX);
  const nodes = [], nodeOf = new Map(), collapsed = [];
  drawn.forEach((js, level) => {
    js = js || [];
    if (js.length > WF_LEVEL_MAX) {
      collapsed.push({ level, jobs: js.length });
      const byState = new Map();
      for (const j of js) {
        let n = byState.get(j.state);
        if (!n) {
          n = { key: `L${level}:${j.state}`, level, state: j.state, count: 0, ids: [] };
          byState.set(j.state, n);
        }
        n.count++;
        n.ids.push(j.id);
        nodeOf.set(j.id, n);
      }
      [...byState.values()].forEach((n, row) => nodes.push(Object.assign(n, { row })));
    } else {
      js.forEach((j, row) => {
        const n = { key: "J" + j.id, level, state: j.state, job: j, row };
        nodes.push(n);
        nodeOf.set(j.id, n);
      });
    }
  });
  const edges = new Map();
  for (const j of jobs) {
    const to = nodeOf.get(j.id);
    if (!to) continue;
    for (const d of j.depends_on || []) {
      const from = nodeOf.get(d);
      if (from && from !== to) edges.set(from.key + ">" + to.key, { from, to });
    }
  }
  const hidden = levels.slice(WF_LEVELS_MAX).reduce((a, js) => a + (js ? js.length : 0), 0);
  return { nodes, edges: [...edges.values()], levels: drawn.length, collapsed, hidden };
}

// workflowGraph draws the workflow of job id as an SVG graph: one column
// per level, an edge from each dependency to its dependent, the state as
// the node's colour; a click on a job's node opens it.
async function workflowGraph(id, el) {
  const res = await api(`v1/jobs/${enc(id)}/workflow?limit=${WF_MAX_JOBS}`);
  const jobs = res.jobs;
  const g = workflowLayout(jobs);
  const rows = Math.max(1, ...g.nodes.map((n) => n.row + 1));
  const width = g.levels * WF_COL, height = rows * WF_ROW + 10;
  const pos = (n) => ({ x: n.level * WF_COL + 10, y: n.row * WF_ROW + 10 });
  const svg = svgEl("svg", { id: "workflow-graph", class: "wf", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": `Workflow of ${jobs.length} jobs in ${g.levels} levels` });
  for (const e of g.edges) {
    const a = pos(e.from), b = pos(e.to);
    const x1 = a.x + WF_NODE_W, y1 = a.y + WF_NODE_H / 2, x2 = b.x, y2 = b.y + WF_NODE_H / 2, mx = (x1 + x2) / 2;
    svg.append(svgEl("path", { class: "wf-edge", d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, dataset: { from: e.from.key, to: e.to.key } }));
  }
  for (const n of g.nodes) {
    const p = pos(n);
    const label = n.job ? `${n.job.id}${n.job.kind ? " " + n.job.kind : ""}` : `${n.state} ×${n.count}`;
    const node = svgEl("g", { class: "wf-node " + n.state + (n.job && String(n.job.id) === String(id) ? " current" : ""),
      transform: `translate(${p.x},${p.y})`, dataset: n.job ? { job: n.job.id, state: n.state, level: n.level } : { collapsed: n.count, state: n.state, level: n.level } },
    svgEl("title", {}, n.job ? `Job ${n.job.id}: ${n.state}` : `${n.count} ${n.state} jobs of level ${n.level}`),
    svgEl("rect", { width: WF_NODE_W, height: WF_NODE_H, rx: 5 }),
    svgEl("text", { x: 8, y: 17 }, label.length > 20 ? label.slice(0, 19) + "…" : label));
    if (n.job) {
      node.setAttribute("tabindex", "0");
      node.setAttribute("role", "link");
      const open = () => { location.hash = "#/jobs/" + n.job.id; };
      node.addEventListener("click", open);
      node.addEventListener("keydown", (ev) => { if (ev.key === "Enter") open(); });
    }
    svg.append(node);
  }
  const counts = {};
  for (const j of jobs) counts[j.state] = (counts[j.state] || 0) + 1;
  const notes = [];
  if (jobs.length >= WF_MAX_JOBS) notes.push(`Only the first ${fmt(WF_MAX_JOBS)} jobs are read.`);
  for (const c of g.collapsed) notes.push(`Level ${c.level}: ${fmt(c.jobs)} jobs, drawn as one node per state.`);
  if (g.hidden) notes.push(`${fmt(g.hidden)} jobs deeper than level ${WF_LEVELS_MAX - 1} are not drawn.`);
  el.replaceChildren(
    h("p", { class: "wf-legend", id: "workflow-states" }, `Workflow ${res.jobs.length ? (jobs[0].workflow_id || jobs[0].id) : id}: ${fmt(jobs.length)} jobs · `,
      Object.entries(counts).map(([st, n]) => h("span", { class: "badge " + st, dataset: { state: st } }, `${st} ${fmt(n)}`))),
    ...(notes.length ? [h("p", { class: "muted", id: "workflow-notes" }, notes.join(" "))] : []),
    h("div", { class: "wf-wrap" }, svg));
}

// sequenceProgress shows the sequence of job j: the job that runs or runs
// next, the ones waiting behind it in order, the one holding it, the last
// one archived.
async function sequenceProgress(j, el) {
  const sq = await api(`sequence?queue=${enc(j.queue)}&key=${enc(j.sequence_key)}`);
  const link = (x) => (String(x.id) === String(j.id) ? h("strong", {}, x.id + " (this job)") : h("a", { href: "#/jobs/" + x.id }, x.id));
  const rows = [];
  if (sq.last) rows.push({ dataset: { seq: "last" }, cells: ["last archived", link(sq.last), h("span", { class: "badge " + sq.last.state }, sq.last.state), when(sq.last.finished_at)] });
  if (sq.held) rows.push({ dataset: { seq: "held" }, cells: ["holds the sequence", link(sq.held), h("span", { class: "badge " + sq.held.state }, sq.held_reason), when(sq.held.finished_at)] });
  if (sq.head) rows.push({ dataset: { seq: "head" }, cells: [sq.head.state === "running" ? "running" : "next", link(sq.head), h("span", { class: "badge " + sq.head.state }, sq.head.state), when(sq.head.attempted_at)] });
  sq.pending.forEach((p, i) => rows.push({ dataset: { seq: "pending" }, cells: [`waiting #${i + 1}`, link(p), h("span", { class: "badge pending" }, "pending"), "—"] }));
  el.replaceChildren(h("p", { class: "muted" }, `Sequence ${sq.key}: ${fmt(sq.pending_total)} waiting` +
      (sq.pending_total > sq.pending.length ? ` (the first ${sq.pending.length} shown)` : "") + (sq.held ? ", held" : "") + "."),
    table([{ label: "Place" }, { label: "Job", num: true }, { label: "State" }, { label: "At" }], rows, { id: "sequence", empty: "No job of this sequence is live." }));
}

// queueLimitsView shows a queue's concurrency settings, its limit keys
// with the most running jobs, and its sequences.
function queueLimitsView(d) {
  const settings = [["Max running", d.max_running ? fmt(d.max_running) : "none", "max_running"],
    ["Rate limit", d.rate_limit ? d.rate_limit + "/s" : "none", "rate_limit"],
    ["Per-key limit", d.key_limit ? fmt(d.key_limit) : "none", "key_limit"],
    ["Key field", d.key_field || "—", "key_field"],
    ["Sequences", fmt(d.sequences) + (d.sequences_more ? "+" : ""), "sequences"], ["Held sequences", fmt(d.sequences_held), "sequences_held"]];
  return [stats(settings), d.key_limit ? table([{ label: "Limit key" }, { label: "Running", num: true, key: "running" }, { label: "Waiting", num: true },
    { label: "Pending", num: true }, { label: "Of limit", num: true }],
  d.top_keys.map((k) => ({ dataset: { key: k.key }, cells: [k.key, fmt(k.running), fmt(k.waiting), fmt(k.pending), `${k.running}/${d.key_limit}`] })),
  { id: "limit-keys", empty: "No key has admitted or pending jobs.",
    caption: `The ${d.top_keys.length} keys with the most running jobs, of ${fmt(d.limit_keys)}${d.limit_keys_more ? " (the first by key)" : ""}.` }) : null];
}

// ---- Tokens ----

async function tokensPage(main) {
  if (!session.admin) {
    main.replaceChildren(h("h1", {}, "Tokens"), h("p", {}, "Listing tokens needs the admin scope."));
    return;
  }
  const listEl = h("div", {}), created = h("div", { "aria-live": "polite" });
  const form = h("form", { class: "inline", id: "token-form" },
    h("label", {}, "Name", h("input", { name: "name", required: true, placeholder: "billing-worker" })),
    h("label", {}, "Scopes (comma-separated)", h("input", { name: "scopes", required: true, placeholder: "read, publish:orders.*", size: 30 })),
    h("label", {}, "Expires (UTC, optional)", h("input", { name: "expires", type: "datetime-local" })),
    h("button", { type: "submit", class: "primary" }, "Create token"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = Object.fromEntries(new FormData(form));
    const body = { name: v.name.trim(), scopes: v.scopes.split(",").map((s) => s.trim()).filter(Boolean) };
    if (v.expires) body.expires_at = new Date(v.expires + "Z").toISOString();
    try {
      const r = await api("tokens", { method: "POST", body });
      created.replaceChildren(h("p", {}, `Token ${r.token.name} created. Copy its secret now: it is not shown again.`),
        h("p", { class: "secret", id: "new-secret" }, r.secret));
      form.reset();
      refreshNow();
    } catch (e) {
      created.replaceChildren(h("p", { class: "error", role: "alert" }, e.message));
    }
  });
  main.replaceChildren(h("h1", {}, "Tokens"), h("section", { class: "card", "aria-labelledby": "h-new" }, h("h2", { id: "h-new" }, "New token"), form, created),
    h("section", { class: "card", "aria-labelledby": "h-toks" }, h("h2", { id: "h-toks" }, "Tokens"), listEl));
  await poll(async () => {
    const r = await api("tokens");
    replace(listEl, table([{ label: "ID", num: true }, { label: "Name" }, { label: "Prefix" }, { label: "Scopes" }, { label: "Created" },
      { label: "Expires" }, { label: "Last used" }, { label: "" }],
    r.tokens.map((t) => ({ dataset: { token: t.name }, cells: [t.id, t.name, t.prefix, t.scopes.join(", "), when(t.created_at), when(t.expires_at), when(t.last_used_at),
      t.revoked_at ? h("span", { class: "badge" }, "revoked") : action("Revoke", `Revoke token ${t.name}? This server refuses it at once, other pgmsg servers within their token cache time (2 s by default).`,
        () => api(`tokens/${t.id}/revoke`, { method: "POST" }).then(() => "Token revoked"), { id: "revoke" })] })), { id: "tokens" }));
  });
}

// ---- Router ----

// routeGen numbers the calls of route(): a call that a later one
// superseded (a page's reload still awaiting its data when the user
// navigates away) must not draw over the page shown now.
let routeGen = 0;

// batchPage (#/batches/ID) shows a batch's progress: its jobs by state and
// its callbacks, with the jobs they enqueued once every job was final. A
// callback job's page links here (its metadata's "batch").
async function batchPage(main, id) {
  const b = await api("v1/batches/" + enc(id));
  const q = enc(b.queue);
  const cbs = [["On complete", b.on_complete, b.complete_job_id], ["On discard", b.on_discard, b.discard_job_id], ["On finished", b.on_finished, b.finished_job_id]]
    .filter(([, spec]) => spec).map(([name, spec, jid]) => ({ cells: [name, spec.kind, jid ? h("a", { href: "#/jobs/" + jid }, jid) : "not yet"] }));
  const states = ["pending", "available", "scheduled", "retrying", "running", "completed", "cancelled", "dead"];
  main.replaceChildren(h("div", { class: "crumbs" }, h("a", { href: "#/" }, "Overview"), " / ", h("a", { href: "#/queues/" + q }, b.queue), " / batch"),
    h("h1", {}, "Batch " + b.id),
    h("p", {}, `${fmt(b.completed + b.cancelled + b.dead)} of ${fmt(b.total)} jobs final`, b.finished_at ? ` (finished ${when(b.finished_at)})` : ""),
    h("section", { class: "card" }, table([{ label: "State" }, { label: "Jobs", num: true }], states.map((st) => ({ cells: [st, fmt(b[st])] })), { id: "batch" })),
    h("section", { class: "card", "aria-labelledby": "h-cb" }, h("h2", { id: "h-cb" }, "Callbacks"),
      table([{ label: "Callback" }, { label: "Kind" }, { label: "Job" }], cbs, { id: "callbacks", empty: "No callbacks." })));
  timers.push({ run: () => { if (main.gen === routeGen) route(); }, id: null });
}

async function route() {
  const gen = ++routeGen;
  for (const t of timers) if (t.id !== null) clearInterval(t.id);
  timers = [];
  const view = document.getElementById("main");
  // A page passes null for a section it does not show (DOM replaceChildren
  // would draw it as the text "null").
  const main = { gen, replaceChildren: (...c) => { if (gen === routeGen) view.replaceChildren(...c.filter((x) => x !== null && x !== undefined)); } };
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  try {
    if (parts.length === 0) await overview(main);
    else if (parts[0] === "topics" && parts.length === 2) await topicPage(main, parts[1]);
    else if (parts[0] === "topics" && parts.length === 4 && parts[2] === "groups") await groupPage(main, parts[1], parts[3]);
    else if (parts[0] === "queues" && parts.length === 2) await queuePage(main, parts[1]);
    else if (parts[0] === "jobs" && parts.length === 2) await jobPage(main, parts[1]);
    else if (parts[0] === "batches" && parts.length === 2) await batchPage(main, parts[1]);
    else if (parts[0] === "tokens") await tokensPage(main);
    else main.replaceChildren(h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/" }, "Back to the overview")));
  } catch (e) {
    main.replaceChildren(h("h1", {}, "Error"), h("p", { class: "error", role: "alert" }, e.message));
  }
  if (gen === routeGen) document.body.dataset.ready = location.hash || "#/";
}

async function start() {
  session = await api("session");
  document.getElementById("who").textContent = session.name + (session.admin ? " (admin)" : " (read-only)");
  document.getElementById("nav-tokens").hidden = !session.admin;
  // Without auth (pgmsg dev) there is no session to end.
  document.getElementById("logout").hidden = !session.logout;
  document.getElementById("logout").addEventListener("click", async () => {
    await fetch("/ui/logout", { method: "POST", headers: { "X-CSRF-Token": session.csrf }, credentials: "same-origin" });
    location.href = "/ui/login";
  });
  window.addEventListener("hashchange", () => {
    delete document.body.dataset.ready;
    route().then(() => document.getElementById("main").focus({ preventScroll: true }));
  });
  await route();
}

start().catch((e) => toast(e.message, true));
