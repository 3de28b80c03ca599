// Gleaner's console: live updates (server-sent events) and job timelines.
// No framework, no build step.
"use strict";
(function () {
  const live = document.getElementById("live");
  const connection = document.getElementById("connection");
  const open = new Set(); // "Kind/Name" of the timelines shown
  // URLs are relative, so the console works behind an ingress's path prefix.
  const ns = "namespace=" + encodeURIComponent(document.body.dataset.namespace);

  async function loadTimeline(button) {
    const key = button.dataset.kind + "/" + button.dataset.name;
    const row = button.closest("tr").nextElementSibling;
    const box = row.querySelector(".timeline");
    const res = await fetch("job?" + ns + "&kind=" + encodeURIComponent(button.dataset.kind) + "&name=" + encodeURIComponent(button.dataset.name));
    box.innerHTML = res.ok ? await res.text() : "<p>The timeline is unavailable: " + res.status + "</p>";
    row.hidden = false;
    button.setAttribute("aria-expanded", "true");
    open.add(key);
  }

  live.addEventListener("click", function (ev) {
    const button = ev.target.closest("button.job");
    if (!button) return;
    const key = button.dataset.kind + "/" + button.dataset.name;
    if (button.getAttribute("aria-expanded") === "true") {
      button.closest("tr").nextElementSibling.hidden = true;
      button.setAttribute("aria-expanded", "false");
      open.delete(key);
      return;
    }
    loadTimeline(button).catch(function (err) { connection.textContent = "timeline: " + err; });
  });

  let refreshing = false;
  async function refresh() {
    if (refreshing) return;
    refreshing = true;
    try {
      const res = await fetch("live?" + ns, { cache: "no-store" });
      if (!res.ok) throw new Error(res.status + " " + res.statusText);
      const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.name : null;
      live.innerHTML = await res.text();
      for (const button of live.querySelectorAll("button.job")) {
        if (open.has(button.dataset.kind + "/" + button.dataset.name)) await loadTimeline(button);
        if (focused && button.dataset.name === focused) button.focus();
      }
      document.body.dataset.updated = String(Date.now());
    } catch (err) {
      connection.textContent = "update failed: " + err.message;
      connection.className = "connection lost";
    } finally {
      refreshing = false;
    }
  }

  const events = new EventSource("events?" + ns);
  events.addEventListener("open", function () {
    connection.textContent = "live";
    connection.className = "connection live";
  });
  events.addEventListener("changed", refresh);
  events.addEventListener("error", function () {
    connection.textContent = "reconnecting…";
    connection.className = "connection lost";
  });
})();
