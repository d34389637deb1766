// jobserver dashboard: local times, live refresh and confirmations. Plain script, no
// dependencies; the pages work without it (times in UTC, no live refresh, no dialog).
"use strict";

(function () {
  const stamp = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit",
  });

  // Every <time datetime="...Z"> shows the viewer's local time; its title keeps UTC.
  function localTimes(root) {
    for (const el of root.querySelectorAll("time[datetime]")) {
      const when = new Date(el.getAttribute("datetime"));
      if (!isNaN(when)) el.textContent = stamp.format(when);
    }
  }

  // A datetime-local input marked data-utc-field="NAME" edits, in local time, the
  // hidden input NAME, which holds (and sends) the same moment in UTC.
  function utcFields(root) {
    const pad = (n) => String(n).padStart(2, "0");
    for (const input of root.querySelectorAll("input[data-utc-field]")) {
      const hidden = input.form && input.form.elements.namedItem(input.dataset.utcField);
      if (!hidden) continue;
      const when = hidden.value ? new Date(hidden.value) : null;
      if (when && !isNaN(when)) {
        input.value = `${when.getFullYear()}-${pad(when.getMonth() + 1)}-${pad(when.getDate())}` +
          `T${pad(when.getHours())}:${pad(when.getMinutes())}:${pad(when.getSeconds())}`;
      }
      input.addEventListener("change", () => {
        const local = input.value ? new Date(input.value) : null;
        hidden.value = local && !isNaN(local) ? local.toISOString().replace(".000Z", "Z") : "";
      });
    }
  }

  function signInAgain() {
    const back = window.location.pathname + window.location.search;
    window.location.assign("/ui/sign-in?next=" + encodeURIComponent(back));
  }

  const confirmDialog = () => document.getElementById("confirm");

  // Elements marked data-refresh="URL" get their content from URL every few seconds
  // (a fragment route of the same page), while the page is visible and no dialog is
  // open. A 401 means the session ended: back to the sign-in page.
  async function refresh(el) {
    const dialog = confirmDialog();
    if (document.hidden || (dialog && dialog.open)) return;
    let answer;
    try {
      answer = await fetch(el.dataset.refresh, {credentials: "same-origin",
                                                headers: {"Accept": "text/html-fragment"}});
    } catch (error) {
      el.classList.add("stale");
      return;
    }
    if (answer.status === 401) { signInAgain(); return; }
    if (!answer.ok) { el.classList.add("stale"); return; }
    const html = await answer.text();
    if (dialog && dialog.open) return;
    // What the visitor opened stays open across the refresh.
    const opened = [...el.querySelectorAll("details[id][open]")].map((d) => d.id);
    const closed = [...el.querySelectorAll("details[id]:not([open])")].map((d) => d.id);
    el.innerHTML = html;
    for (const id of opened) { const d = document.getElementById(id); if (d) d.open = true; }
    for (const id of closed) { const d = document.getElementById(id); if (d) d.open = false; }
    el.classList.remove("stale");
    localTimes(el);
    if (el.querySelector("[data-refresh-stop]")) stopRefresh(el);
    el.dispatchEvent(new CustomEvent("ui:refreshed", {bubbles: true}));
  }

  const timers = new Map();

  function stopRefresh(el) {
    window.clearInterval(timers.get(el));
    timers.delete(el);
  }

  function startRefresh() {
    const every = Number(document.body.dataset.refreshMs) || 2000;
    for (const el of document.querySelectorAll("[data-refresh]")) {
      let busy = false;
      timers.set(el, window.setInterval(async () => {
        if (busy) return;
        busy = true;
        try { await refresh(el); } finally { busy = false; }
      }, every));
    }
  }

  // A form marked data-confirm="question" asks first, in the page's dialog.
  function confirmations() {
    document.addEventListener("submit", (event) => {
      const form = event.target;
      const dialog = confirmDialog();
      if (!form.dataset || !form.dataset.confirm || form.dataset.confirmed || !dialog) return;
      event.preventDefault();
      dialog.querySelector(".confirm-text").textContent = form.dataset.confirm;
      dialog.returnValue = "";
      dialog.onclose = () => {
        if (dialog.returnValue !== "ok") return;
        form.dataset.confirmed = "yes";
        form.requestSubmit();
      };
      dialog.showModal();
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    localTimes(document);
    utcFields(document);
    confirmations();
    startRefresh();
  });
})();
