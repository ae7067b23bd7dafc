// The tree inspector: reads the service's own API with the key typed in (kept in
// sessionStorage only), renders the tree, node details and a retrieval with its scores.
"use strict";
const $ = (id) => document.getElementById(id);
let nodes = new Map();

function api(path, options = {}) {
  const ns = encodeURIComponent($("ns").value.trim());
  const headers = Object.assign({ "Authorization": "Bearer " + $("key").value.trim() },
                                options.body ? { "Content-Type": "application/json" } : {});
  return fetch(`/v1/${ns}${path}`, Object.assign({}, options, { headers })).then(async (r) => {
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(`${r.status} ${body.error || ""}: ${body.message || ""}`);
    return body;
  });
}

function status(text, isError = false) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

function colour(w) {  // low weight red, high green
  const hue = Math.round(120 * Math.max(0, Math.min(1, w)));
  return `hsl(${hue}, 65%, 45%)`;
}

function row(n, hasKids) {
  const div = document.createElement("div");
  div.className = "row";
  div.dataset.id = n.id;
  const toggle = document.createElement("span");
  toggle.className = "toggle";
  toggle.textContent = hasKids ? "▾" : "";
  const bar = document.createElement("span");
  bar.className = "bar";
  bar.title = `weight ${n.weight === null ? "?" : n.weight.toFixed(3)}`;
  const fill = document.createElement("span");
  fill.style.width = `${Math.round(100 * (n.weight || 0))}%`;
  fill.style.background = colour(n.weight || 0);
  bar.appendChild(fill);
  const type = document.createElement("span");
  type.className = "type";
  type.textContent = n.type;
  const text = document.createElement("span");
  text.className = "content";
  text.textContent = n.content.length > 90 ? n.content.slice(0, 89) + "…" : n.content;
  div.append(toggle, bar, type, text);
  return div;
}

function render(tree) {
  nodes = new Map(tree.nodes.map((n) => [n.id, n]));
  const kids = new Map();
  for (const n of tree.nodes) {
    const parent = nodes.has(n.parent_id) ? n.parent_id : null;
    if (!kids.has(parent)) kids.set(parent, []);
    kids.get(parent).push(n);
  }
  const active = new Set(tree.active_path);
  const build = (parent, ul) => {
    for (const n of kids.get(parent) || []) {
      const li = document.createElement("li");
      li.dataset.id = n.id;
      if (n.status !== "live") li.classList.add("archived");
      if (active.has(n.id)) li.classList.add("active");
      const sub = kids.get(n.id) || [];
      li.appendChild(row(n, sub.length > 0));
      if (sub.length) {
        const child = document.createElement("ul");
        build(n.id, child);
        li.appendChild(child);
      }
      ul.appendChild(li);
    }
  };
  const root = $("tree");
  root.replaceChildren();
  build(null, root);
  const live = tree.nodes.filter((n) => n.status === "live").length;
  $("counts").textContent = `${live} live, ${tree.nodes.length - live} archived`;
}

function show(id) {
  const n = nodes.get(id);
  document.querySelectorAll(".row.selected").forEach((r) => r.classList.remove("selected"));
  const r = document.querySelector(`.row[data-id="${id}"]`);
  if (r) r.classList.add("selected");
  const dl = $("details");
  dl.replaceChildren();
  if (!n) return;
  const fields = [["id", n.id], ["type", n.type], ["status", n.status], ["content", n.content],
    ["weight", n.weight === null ? "?" : n.weight.toFixed(3)], ["importance", n.importance],
    ["confidence", n.confidence], ["uses", n.access_count], ["pinned", n.pinned], ["depth", n.depth],
    ["created", new Date(n.created_at * 1000).toISOString()], ["meta", JSON.stringify(n.meta)]];
  for (const [k, v] of fields) {
    const dt = document.createElement("dt"); dt.textContent = k;
    const dd = document.createElement("dd"); dd.textContent = String(v);
    dl.append(dt, dd);
  }
}

function load() {
  status("loading…");
  sessionStorage.setItem("hm-ns", $("ns").value);
  sessionStorage.setItem("hm-key", $("key").value);
  return api(`/tree?archived=${$("archived").checked}`).then((t) => { render(t); status(""); })
    .catch((e) => status(e.message, true));
}

function search(query) {
  status("retrieving…");
  return api("/retrieve", { method: "POST", body: JSON.stringify({ query, explain: true }) }).then((r) => {
    const table = document.createElement("table");
    table.id = "result-table";
    table.innerHTML = "<thead><tr><th>reason</th><th>score</th><th>sim</th><th>weight</th><th>node</th></tr></thead>";
    const body = document.createElement("tbody");
    for (const s of r.nodes) {
      const tr = document.createElement("tr");
      tr.dataset.id = s.node.id;
      const cells = [s.reason, s.score.toFixed(3), s.similarity.toFixed(3), s.weight.toFixed(3), s.node.content];
      cells.forEach((c, i) => {
        const td = document.createElement("td");
        td.textContent = c;
        if (i > 0 && i < 4) td.className = "num";
        tr.appendChild(td);
      });
      tr.addEventListener("click", () => show(s.node.id));
      body.appendChild(tr);
    }
    table.appendChild(body);
    const note = document.createElement("p");
    note.className = "hint";
    note.textContent = `${r.tokens}/${r.budget_tokens} tokens; branches: ` +
      r.branches.map((b) => `${b.title} (${b.score.toFixed(3)})`).join(", ");
    $("results").replaceChildren(table, note);
    status("");
  }).catch((e) => status(e.message, true));
}

$("login").addEventListener("submit", (e) => { e.preventDefault(); load(); });
$("search").addEventListener("submit", (e) => {
  e.preventDefault();
  const q = $("query").value.trim();
  if (q) search(q);
});
$("tree").addEventListener("click", (e) => {
  const r = e.target.closest(".row");
  if (!r) return;
  if (e.target.classList.contains("toggle") && e.target.textContent) {
    const li = r.parentElement;
    li.classList.toggle("collapsed");
    e.target.textContent = li.classList.contains("collapsed") ? "▸" : "▾";
  } else {
    show(r.dataset.id);
  }
});
$("ns").value = sessionStorage.getItem("hm-ns") || "";
$("key").value = sessionStorage.getItem("hm-key") || "";
if ($("ns").value && $("key").value) load();
