// nodewise dashboard: keeps the server-rendered page live and runs the
// actions. The page is whole without this script; the script only refreshes
// <main> from the server when the event stream says its object changed.
"use strict";
(function () {
  const main = document.getElementById("main");
  const live = document.getElementById("live");
  const topic = main.dataset.topic;
  let inFlight = false, again = false;

  async function refresh() {
    if (inFlight) { again = true; return; }
    inFlight = true;
    try {
      const r = await fetch(location.pathname + location.search, { headers: { "X-Nodewise-Fragment": "1" }, cache: "no-store" });
      if (r.ok || r.status === 404) { main.innerHTML = await r.text(); bind(); }
    } catch (e) { /* the stream's own error handler shows the state */ }
    inFlight = false;
    if (again) { again = false; refresh(); }
  }

  function connect() {
    const es = new EventSource("/events");
    es.onopen = () => { live.textContent = "live"; live.className = "live on"; refresh(); };
    es.onerror = () => { live.textContent = "reconnecting…"; live.className = "live off"; };
    es.addEventListener("change", (ev) => {
      if (topic === "*" || ev.data === topic) refresh();
    });
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
