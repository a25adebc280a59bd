// yoloq web page: refresh the queue table every few seconds (same origin, the session cookie).
"use strict";
(function () {
  const table = document.querySelector("table[data-refresh]");
  if (!table) return;
  const stamp = document.getElementById("refreshed");
  async function refresh() {
    try {
      const response = await fetch(table.dataset.refresh, { credentials: "same-origin" });
      if (response.status === 401) { window.location.assign("/login"); return; }
      if (!response.ok) return;
      table.innerHTML = await response.text();
      if (stamp) stamp.textContent = "As of " + new Date().toISOString().slice(11, 19) + " UTC";
    } catch (err) {
      if (stamp) stamp.textContent = "Refresh failed; retrying";
    }
  }
  setInterval(refresh, 5000);
})();
