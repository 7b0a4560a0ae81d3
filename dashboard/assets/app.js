// nodewise dashboard: keeps the server-rendered page live and runs the
// actions. The page is whole without this script. A rollout's page has an
// event stream of its own, which sends what changed on it: the script
// restyles the cells, replaces the rows and sections it names, in place.
// Any other page's stream names the objects that changed, and the script
// fetches its <main> again.
"use strict";
(function () {
  const main = document.getElementById("main");
  const live = document.getElementById("live");
  const topic = main.dataset.topic;
  let es = null, stream = "", cells = null;
  let inFlight = false, again = false;

  async function refresh() {
    if (inFlight) { again = true; return; }
    inFlight = true;
    let ok = false;
    try {
      const r = await fetch(location.pathname + location.search, { headers: { "X-Nodewise-Fragment": "1" }, cache: "no-store" });
      if (r.ok || r.status === 404) { main.innerHTML = await r.text(); cells = null; bind(); ok = true; }
    } catch (e) { /* the stream's own error handler shows the state */ }
    inFlight = false;
    if (again) { again = false; refresh(); return; }
    if (ok && own() !== stream) connect();
    else if (!ok && !es) setTimeout(refresh, 2000); // no stream to say when the server is back
  }

  // own is the id of the page's own event stream ("" for none).
  function own() {
    const el = main.querySelector("[data-stream]");
    return el ? el.dataset.stream : "";
  }

  function connect() {
    if (es) es.close();
    stream = own();
    es = new EventSource(stream ? "/events?stream=" + encodeURIComponent(stream) : "/events");
    es.onopen = () => { live.textContent = "live"; live.className = "live on"; if (!stream) refresh(); };
    es.onerror = () => { live.textContent = "reconnecting…"; live.className = "live off"; };
    es.addEventListener("change", (ev) => {
      if (topic === "*" || ev.data === topic) refresh();
    });
    es.addEventListener("patch", (ev) => apply(JSON.parse(ev.data)));
    // The server no longer knows this page's stream: load the page again.
    es.addEventListener("resync", () => { es.close(); es = null; stream = null; refresh(); });
  }

  // apply puts one change on the page: sections by id, cells by node name
  // (their class and label), rows by node name.
  function apply(p) {
    for (const id in p.parts || {}) {
      const el = document.getElementById(id);
      if (el) el.outerHTML = p.parts[id];
      if (id === "map") cells = null;
    }
    if (p.cells) {
      if (!cells) index();
      for (const [name, cls, label] of p.cells) {
        const a = cells.get(name);
        if (a) { a.className = cls; a.setAttribute("aria-label", label); }
      }
    }
    for (const [name, html] of p.rows || []) {
      const tr = document.getElementById("node-" + name);
      if (tr) tr.outerHTML = html;
    }
  }

  // index maps node names to the map's cells, whose links end in the name.
  function index() {
    cells = new Map();
    for (const a of document.querySelectorAll("#map a")) {
      const href = a.getAttribute("href");
      cells.set(href.slice(href.lastIndexOf("/") + 1), a);
    }
  }

  // Actions: a confirmation dialog, then a POST with the user's credentials
  // (the dashboard's kubeconfig); "forbidden" comes back in words.
  const dialog = document.getElementById("confirm");
  const words = {
    pause: "Pause NodeRollout %s? No new node starts; nodes in flight finish.",
    resume: "Resume NodeRollout %s? A halt is cleared and failed nodes are retried from preflight.",
    abort: "Abort NodeRollout %s? It stops once the nodes in flight are made safe. This cannot be undone.",
    rollback: "Roll back NodeRollout %s? Upgraded nodes are swapped back in reverse order; restore the old Istio template first.",
  };
  function bind() {
    const bar = main.querySelector(".actions");
    if (!bar) return;
    bar.querySelectorAll("button[data-action]").forEach((b) => {
      b.addEventListener("click", () => ask(bar.dataset.rollout, b.dataset.action));
    });
  }
  function ask(name, verb) {
    document.getElementById("confirm-text").textContent = words[verb].replace("%s", name);
    dialog.returnValue = "";
    dialog.onclose = () => { if (dialog.returnValue === "ok") act(name, verb); };
    dialog.showModal();
  }
  async function act(name, verb) {
    const out = document.getElementById("action-result");
    out.className = "";
    out.textContent = verb + "…";
    try {
      const r = await fetch("/rollouts/" + encodeURIComponent(name) + "/actions/" + verb, { method: "POST", headers: { "X-Nodewise-Action": "1" } });
      const body = await r.json();
      out.textContent = body.message;
      out.className = r.ok ? "ok" : (r.status === 403 ? "forbidden" : "error");
    } catch (e) {
      out.textContent = verb + " failed: " + e;
      out.className = "error";
    }
  }
  bind();
  connect();
})();
