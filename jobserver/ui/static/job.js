// The job page: a running step's elapsed time counts up every second between the
// page's refreshes. Plain script; without it the time is as the page was served.
// It counts from the seconds the node wrote (data-elapsed), not from the start time,
// so a browser whose clock is off still shows what the node measures.
"use strict";

(function () {
  const seen = new WeakMap();

  // As the step card writes it: 7 s, 3 min 12 s, 2 h 5 min.
  function text(seconds) {
    const s = Math.max(0, Math.floor(seconds));
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  }

  function tick() {
    const now = performance.now();
    for (const el of document.querySelectorAll("[data-elapsed]")) {
      if (!seen.has(el)) seen.set(el, now);
      const base = Number(el.dataset.elapsed);
      if (!isNaN(base)) el.textContent = text(base + (now - seen.get(el)) / 1000);
    }
  }

  // A live output shows its newest lines: scrolled to its end, unless the visitor
  // scrolled it up to read (then it stays where they are). Only the visitor's own
  // gestures count as reading: a scroll this script makes, or a layout change after it
  // (a stylesheet or font arriving), must never pin the output above its end.
  const reading = new Map();
  const GESTURES = ["wheel", "touchstart", "pointerdown", "keydown"];

  function watchVisitor(pre) {
    const name = pre.dataset.liveOutput;
    let touched = false;
    const note = () => {
      if (!touched || !pre.isConnected) return;
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      if (atEnd) reading.delete(name); else reading.set(name, pre.scrollTop);
    };
    // The browser may scroll before or after it tells the page about the gesture, so
    // the position is noted on the scrolls that follow and once the gesture settled.
    for (const type of GESTURES) {
      pre.addEventListener(type, () => {
        touched = true;
        window.setTimeout(note, 250);
      }, {passive: true});
    }
    pre.addEventListener("scroll", note, {passive: true});
  }

  function followOutputs() {
    for (const pre of document.querySelectorAll("pre.live-output")) {
      const name = pre.dataset.liveOutput;
      pre.scrollTop = reading.has(name) ? reading.get(name) : pre.scrollHeight;
      if (!pre.dataset.followed) { pre.dataset.followed = "1"; watchVisitor(pre); }
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    tick();
    followOutputs();
    window.addEventListener("load", followOutputs);
    window.setInterval(tick, 1000);
    document.addEventListener("ui:refreshed", () => { tick(); followOutputs(); });
  });
})();
