// The IOP status page: Edges, Nodes and providers with capacity, in-flight
// and queue figures, and recent events, updated live from the Hub's event
// stream. No build step; every value is written with textContent.
"use strict";

let csrf = null;
let renderTimer = null;

const $ = (sel) => document.querySelector(sel);

// certWarning is how long before a Node's client certificate expires the
// page says so (as the Edge's log does).
const certWarning = 14 * 24 * 3600 * 1000;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

// cooling returns what of provider p answered "not now" and gets no slot
// from admission until its cooldown ends, as [model, until] pairs: model
// "" for the whole provider (503, 529), a model's name for one rate
// limited on its own (429).
function cooling(p) {
  const now = Date.now();
  const out = [];
  if (p.cooling_until && Date.parse(p.cooling_until) > now) out.push(["", p.cooling_until]);
  for (const [model, until] of Object.entries(p.cooling_models || {})) {
    if (Date.parse(until) > now) out.push([model, until]);
  }
  return out;
}

async function api(path, opts = {}) {
  opts.credentials = "same-origin";
  opts.headers = Object.assign({}, opts.headers || {});
  if (opts.method && opts.method !== "GET" && csrf) opts.headers["X-CSRF-Token"] = csrf;
  const resp = await fetch(path, opts);
  if (resp.status === 401) {
    showLogin();
    throw new Error("signed out");
  }
  return resp;
}

function showLogin() {
  $("#status").hidden = true;
  $("#logout").hidden = true;
  $("#login").hidden = false;
  $("#who").textContent = "";
}

async function login(token) {
  const resp = await fetch("/api/login", {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token }),
  });
  if (!resp.ok) return false;
  csrf = (await resp.json()).csrf;
  return true;
}

async function boot() {
  // A sign-in link carries the token in the fragment, which never reaches
  // a server or a log; it is removed from the address bar at once.
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    history.replaceState(null, "", location.pathname);
    await login(decodeURIComponent(m[1]));
  }
  const resp = await fetch("/api/session", { credentials: "same-origin" });
  if (!resp.ok) return showLogin();
  const s = await resp.json();
  csrf = s.csrf || null;
  start(s.operator);
}

function start(operator) {
  $("#login").hidden = true;
  $("#status").hidden = false;
  $("#logout").hidden = false;
  $("#who").textContent = operator;
  render();
  loadEvents();
  follow();
  setInterval(render, 5000);
}

function scheduleRender() {
  if (renderTimer) return;
  renderTimer = setTimeout(() => { renderTimer = null; render(); }, 150);
}

async function render() {
  let data;
  try {
    data = await (await api("/api/edges?nodes=1")).json();
  } catch (e) {
    return;
  }
  const root = $("#edges");
  root.replaceChildren();
  let online = 0, total = 0;
  const states = [];
  for (const edge of data.edges) {
    const box = el("div", { class: "edge" + (edge.connected ? "" : " stale"), "data-edge": edge.id });
    box.append(el("h2", {}, "Edge ", edge.id, " ",
      el("span", { class: edge.connected ? "online" : "offline" }, edge.connected ? "connected" : "not connected"),
      el("span", { class: "muted" }, `  routes ${edge.routes} · ${queueText(edge)} · in flight ${edge.in_flight}/${edge.capacity}`)));
    const table = el("table", {},
      el("tr", {}, ...["Node", "State", "Provider", "Adapter", "Category", "Status", "Health", "Capacity", "In flight", "Long ctx", "Queued"].map((h) => el("th", {}, h))));
    for (const node of edge.nodes || []) {
      total++;
      const state = node.connected ? (node.draining ? "draining" : "online") : "offline";
      // A client certificate two weeks or less from its end: nobody
      // renewed it yet (a Node presents a renewed one when it reconnects).
      const certEnding = node.certificate_expiry && Date.parse(node.certificate_expiry) - Date.now() < certWarning;
      if (node.connected) online++;
      const coolingIDs = node.providers.flatMap((p) => cooling(p).map(([model]) => (model ? `${p.id}/${model}` : p.id)));
      states.push(`${edge.id}/${node.id}:${state}` + (certEnding ? " (certificate expiring)" : "") +
        (coolingIDs.length ? ` (cooling ${coolingIDs.join(",")})` : ""));
      const provs = node.providers.length ? node.providers : [null];
      provs.forEach((p, i) => {
        const tr = el("tr", i === 0 ? { "data-node": `${edge.id}/${node.id}`, "data-state": state } : {});
        const stateCell = el("td", { class: i === 0 ? (node.connected ? "online" : "offline") : "" }, i === 0 ? state : "");
        if (i === 0 && certEnding) {
          stateCell.append(el("div", { class: "error", "data-cert-expiry": node.certificate_expiry },
            "certificate expires " + node.certificate_expiry.slice(0, 10)));
        }
        tr.append(el("td", {}, i === 0 ? node.id : ""), stateCell);
        if (p) {
          const statusCell = el("td", {}, p.status);
          for (const [model, until] of cooling(p)) {
            statusCell.append(el("div", { class: "muted", "data-cooling-until": until },
              (model ? model + " " : "") + "cooling until " + new Date(until).toLocaleTimeString()));
          }
          tr.append(el("td", {}, p.id), el("td", {}, p.adapter), el("td", {}, p.category),
            statusCell, el("td", {}, p.health), el("td", {}, p.capacity),
            el("td", {}, p.in_flight), el("td", {}, `${p.long_context_in_flight}/${p.long_context_capacity}`), el("td", {}, p.queued));
        }
        table.append(tr);
      });
    }
    box.append(table);
    root.append(box);
  }
  $("#summary").textContent = `${data.edges.length} edges · ${online}/${total} nodes online`;
  // The title summarizes the rows, so a glance at a tab (or a headless
  // browser's target list) shows every node's state.
  document.title = "IOP | " + states.join(" ");
}

// queueText says how many requests wait in an Edge's admission queue, of
// the most that may, what their bodies hold of the most they may, and how
// many it turned away because it was full.
function queueText(edge) {
  let t = `queued ${edge.queued}`;
  if (edge.max_queued) t += `/${edge.max_queued}`;
  if (edge.max_queued_bytes) t += ` (${sizeText(edge.queued_bytes)} of ${sizeText(edge.max_queued_bytes)})`;
  if (edge.queue_full) t += ` · ${edge.queue_full} turned away (queue full)`;
  return t;
}

// sizeText writes a byte count in binary units: "0 B", "1.5 KiB", "256 MiB".
function sizeText(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${Number.isInteger(n) ? n : n.toFixed(1)} ${units[i]}`;
}

// coolingText says what of provider p a provider_cooling event found
// cooling, and until when; nothing cooling means its cooldowns ended.
function coolingText(p) {
  const parts = [];
  if (p.cooling_until) parts.push("until " + new Date(p.cooling_until).toLocaleTimeString());
  for (const [model, until] of Object.entries(p.cooling_models || {})) {
    parts.push(`${model} until ${new Date(until).toLocaleTimeString()}`);
  }
  return parts.length ? "cooling " + parts.join(", ") : "cooling ended";
}

function addEvent(ev) {
  const list = $("#events");
  let prov = "";
  if (ev.provider) {
    prov = ev.kind === "provider_cooling" ? `${ev.provider.id} ${coolingText(ev.provider)}` : `${ev.provider.id} ${ev.provider.status}/${ev.provider.health}`;
  }
  const what = [ev.kind, ev.edge_id, ev.node_id, prov, ev.reason || ""].filter(Boolean).join(" ");
  list.prepend(el("li", {}, `${new Date(ev.time).toLocaleTimeString()} ${what}`));
  while (list.children.length > 100) list.lastChild.remove();
}

async function loadEvents() {
  try {
    const data = await (await api("/api/events")).json();
    for (const ev of data.events) addEvent(ev);
  } catch (e) { /* signed out */ }
}

function follow() {
  const es = new EventSource("/api/events/stream");
  const kinds = ["edge_connected", "edge_disconnected", "edge_resync", "node_ready", "node_disconnected", "provider_changed", "provider_cooling", "config_applied"];
  for (const k of kinds) {
    es.addEventListener(k, (m) => { addEvent(JSON.parse(m.data)); scheduleRender(); });
  }
  es.addEventListener("resync", () => scheduleRender());
}

$("#login-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  if (await login($("#token").value)) {
    $("#token").value = "";
    $("#login-error").textContent = "";
    boot();
  } else {
    $("#login-error").textContent = "That token was not accepted.";
  }
});

$("#logout").addEventListener("click", async () => {
  await api("/api/logout", { method: "POST" });
  csrf = null;
  showLogin();
});

boot();
