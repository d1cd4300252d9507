/* Every control of the page's kvmath figures, live, with the chapter's own Python.
 *
 * The page already shows each figure's build-time frames, and its main slider swaps them
 * with no Python at all (kvbook.interactive.InteractiveFigure.to_html). This layer adds the
 * figure's other controls (built from the figure's own Slider/Choice objects, which
 * to_html lists), a "Make every control live" button and a status line. Touching another
 * control, or the button, starts Python in a Web Worker (worker.js: Pyodide, numpy,
 * matplotlib and kvmath, all served by the book), runs the chapter's figure code and asks
 * each figure for renders; requests made while one is running are coalesced (only the
 * latest values are rendered). No formula is written here.
 *
 * Where it cannot run (file://, no WebAssembly, no workers, a static figure) the frames
 * stay and the note says why. window.kvmathLive exposes state and timings for the tests.
 */
(function () {
  "use strict";
  const script = document.currentScript;
  if (!script) return;
  const root = new URL(script.dataset.root || "./", document.baseURI);
  const at = (path) => new URL(path, root).href;
  const figs = [];
  const stats = {bootMs: null, stepMs: null, moves: [], renderMs: [], bytes: 0, errors: []};
  let spec = null;
  let worker = null;
  let state = "frames";       // frames -> booting -> live | failed | unavailable
  let bootPromise = null;
  let inflight = null;
  let seq = 0;
  let waiters = [];
  const api = {figures: figs, stats: stats, state: () => state, boot: () => boot(), settled: settled,
               alwaysLive: false};
  window.kvmathLive = api;

  function unavailable() {
    if (location.protocol === "file:")
      return "file";
    if (typeof WebAssembly !== "object" || typeof WebAssembly.instantiate !== "function")
      return "This browser has no WebAssembly, so the other controls stay at the values shown " +
             "(the slider's frames work).";
    if (typeof Worker !== "function")
      return "This browser has no Web Workers, so the other controls stay at the values shown " +
             "(the slider's frames work).";
    return null;
  }

  function mb(bytes) { return (bytes / 1e6).toFixed(1); }

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // --- one figure ---------------------------------------------------------------
  function setUp(div, index) {
    const dataEl = div.querySelector(".kvmath-interactive-data");
    if (!dataEl) return null;
    const data = JSON.parse(dataEl.textContent);
    if (!data.controls) return null;           // built by an older kvmath: frames only
    const info = (spec.figures || [])[index] || {};
    const f = {index: index, div: div, data: data, img: div.querySelector(".kvmath-interactive-img"),
               controls: {}, pending: null, pendingSince: 0, last: null, lastTexts: null,
               source: "frame", renders: 0, static: !!info.static};
    f.note = div.querySelector(".kvmath-interactive-note");
    const box = div.querySelector(".kvmath-interactive-controls");
    box.style.flexWrap = "wrap";
    // the main slider: a fresh copy, so that only this layer decides what it shows
    const oldRange = div.querySelector(".kvmath-interactive-range");
    const range = oldRange.cloneNode(true);
    oldRange.replaceWith(range);
    const mainOut = div.querySelector(".kvmath-interactive-value");
    f.controls[data.main] = {el: range, out: mainOut, spec: data.controls.find(c => c.name === data.main)};
    range.addEventListener("input", () => changed(f, data.main));
    if (f.static) {
      if (info.reason && f.note) f.note.textContent = info.reason;
      return f;
    }
    for (const c of data.controls) {
      if (c.name === data.main) continue;
      const id = div.id + "-" + c.name;
      const wrap = el("span", {class: "kvmath-live-control"});
      wrap.style.cssText = "display:inline-flex;gap:0.4em;align-items:center;max-width:100%;min-width:0;";
      const label = el("label", {for: id}, c.label);
      label.style.whiteSpace = "nowrap";
      wrap.appendChild(label);
      let input, out = null;
      if (c.kind === "choice") {
        input = el("select", {id: id, class: "kvmath-live-select"});
        c.labels.forEach((lab, k) => { const o = el("option", {value: String(k)}, lab); input.appendChild(o); });
        input.value = String(c.default);
        input.style.maxWidth = "100%";
        input.style.minWidth = "0";
        wrap.appendChild(input);
      } else {
        input = el("input", {type: "range", id: id, class: "kvmath-live-range", min: "0",
                             max: String(c.labels.length - 1), step: "1", value: String(c.default),
                             "aria-valuetext": c.label + " " + c.labels[c.default]});
        input.style.cssText = "flex:0 1 10em;min-width:4em;";
        out = el("output", {for: id, class: "kvmath-live-value", "aria-live": "polite"}, c.labels[c.default]);
        out.style.whiteSpace = "nowrap";
        wrap.appendChild(input);
        wrap.appendChild(out);
      }
      input.addEventListener(c.kind === "choice" ? "change" : "input", () => changed(f, c.name));
      // a head start: Python begins loading as the reader reaches for the control
      for (const ev of ["pointerdown", "keydown"])
        input.addEventListener(ev, () => { if (state === "frames" && !f.static) boot(); }, {passive: true});
      f.controls[c.name] = {el: input, out: out, spec: c};
      box.appendChild(wrap);
    }
    const why = unavailable();
    // a figure whose only control is its main slider has nothing to make live: no button, no note of its cost
    const others = data.controls.some(c => c.name !== data.main);
    f.status = el("p", {class: "kvmath-live-status", "aria-live": "polite"});
    f.status.style.cssText = "font-size:0.85em;opacity:0.85;margin:0.2em 0 0 0;";
    if (!others) {
      state = why ? "unavailable" : state;
    } else if (why) {
      for (const name in f.controls) if (name !== data.main) f.controls[name].el.disabled = true;
      f.status.textContent = why === "file" ?
        "Opened from a file: the other controls need the book served over HTTP (browsers do not " +
        "run WebAssembly from file://): run python3 -m http.server in _build/html and open " +
        "http://localhost:8000/." : why;
      state = "unavailable";
    } else {
      f.button = el("button", {type: "button", class: "kvmath-live-button"}, "Make every control live");
      f.button.addEventListener("click", () => boot());
      f.status.appendChild(f.button);
      f.status.appendChild(document.createTextNode(
        " Runs this chapter's own Python in your browser (" + mb(spec.bytes) +
        " MB, loaded once per page, all from this site)."));
    }
    if (f.note) {
      const others = data.controls.filter(c => c.name !== data.main)
        .map(c => c.label + " = " + c.labels[c.default]).join(", ");
      f.note.textContent = others ? "Shown with " + others + " until you change them." : f.note.textContent;
    }
    f.note ? f.note.after(f.status) : div.appendChild(f.status);
    return f;
  }

  function positions(f) {
    const out = {};
    for (const name in f.controls) out[name] = Number(f.controls[name].el.value);
    return out;
  }

  function atDefaults(f) {
    const p = positions(f);
    return f.data.controls.every(c => c.name === f.data.main || p[c.name] === c.default);
  }

  function changed(f, name) {
    const c = f.controls[name];
    const k = Number(c.el.value);
    if (c.out) c.out.textContent = c.spec.labels[k];
    if (c.el.type === "range") c.el.setAttribute("aria-valuetext", c.spec.label + " " + c.spec.labels[k]);
    show(f);
  }

  function show(f) {
    const p = positions(f);
    const k = p[f.data.main];
    if ((!api.alwaysLive || state !== "live") && atDefaults(f)) {
      f.pending = null;
      f.img.src = f.data.frames[k];
      f.img.alt = f.data.alts[k];
      f.source = "frame";
      f.last = p;
      f.lastTexts = null;
      maybeSettle();
      return;
    }
    if (f.static || state === "unavailable" || state === "failed") return;
    if (!f.pending) f.pendingSince = performance.now();
    f.pending = p;
    if (state === "live") pump(); else boot();
  }

  // --- the worker ---------------------------------------------------------------
  function statusAll(text, fraction) {
    for (const f of figs) {
      if (!f.status) continue;
      f.status.textContent = "";
      if (fraction !== undefined) {
        const bar = el("progress", {max: "1", value: String(fraction)});
        bar.style.cssText = "width:8em;vertical-align:middle;margin-right:0.5em;";
        f.status.appendChild(bar);
      }
      f.status.appendChild(document.createTextNode(text));
    }
  }

  function boot() {
    if (bootPromise) return bootPromise;
    if (unavailable()) return Promise.reject(new Error("unavailable"));
    state = "booting";
    const t0 = performance.now();
    statusAll("Starting Python in your browser\u2026", 0);
    bootPromise = new Promise((resolve, reject) => {
      worker = new Worker(at("_vendor/kvmath-live/worker.js"));
      const fail = (message) => {
        state = "failed";
        stats.errors.push(message);
        statusAll("Python could not start in this browser (" + message + "); the slider's frames still work.");
        maybeSettle();
        reject(new Error(message));
      };
      worker.onerror = (e) => fail(e.message || "the worker stopped");
      worker.onmessage = (e) => {
        const m = e.data;
        if (m.type === "progress") {
          stats.bytes = m.bytes;
          statusAll("Starting Python: step " + m.step + " of " + m.steps + ", " + m.text + " (" +
                    mb(m.bytes) + " of " + mb(spec.bytes) + " MB)", Math.min(1, m.bytes / spec.bytes));
        } else if (m.type === "ready") {
          stats.bootMs = performance.now() - t0;
          stats.bytes = m.bytes;
          stats.stepMs = m.steps;  // core, numpy+matplotlib, kvmath, figure code, first render
          const specs = JSON.parse(m.specs);
          const mismatch = specs.length !== figs.length ||
            specs.some((s, i) => JSON.stringify(s.controls) !== JSON.stringify(figs[i].data.controls));
          if (mismatch) { fail("the figure code does not match this page's figures"); return; }
          state = "live";
          worker.onmessage = received;
          statusAll("Live: every control runs this chapter's Python in your browser (started in " +
                    (stats.bootMs / 1000).toFixed(1) + " s).");
          for (const f of figs) {
            if (f.button) f.button.remove();
            // the controls now say what is shown: "Shown with ... until you change them" is done
            if (f.note && !f.static) f.note.hidden = true;
          }
          resolve();
          pump();
        } else if (m.type === "error") {
          fail(m.message);
        }
      };
      worker.postMessage({type: "boot", indexURL: at(spec.runtime), packages: spec.packages,
                          wheels: spec.wheels.map(at), helpers: spec.helpers, code: at(spec.code),
                          fontlist: spec.fontlist ? at(spec.fontlist) : null, scriptBytes: spec.script_bytes,
                          codeName: spec.code});
    });
    bootPromise.catch(() => {});
    return bootPromise;
  }

  function pump() {
    if (inflight || state !== "live") return;
    const f = figs.find(g => g.pending);
    if (!f) { maybeSettle(); return; }
    const p = f.pending;
    inflight = {f: f, p: p, since: f.pendingSince, id: ++seq};
    f.pending = null;
    worker.postMessage({type: "render", id: inflight.id, fig: f.index, positions: p});
  }

  function received(e) {
    const m = e.data;
    const job = inflight;
    inflight = null;
    if (m.type === "rendered" && job && m.id === job.id) {
      const f = job.f;
      const url = URL.createObjectURL(new Blob([m.png], {type: "image/png"}));
      const old = f.img.src;
      f.img.onload = () => {
        stats.moves.push(performance.now() - job.since);
        if (old.startsWith("blob:")) URL.revokeObjectURL(old);
        f.img.onload = null;
        maybeSettle();
      };
      f.img.src = url;
      const k = job.p[f.data.main];
      f.img.alt = f.data.alts[k] + ", " + f.data.controls.filter(c => c.name !== f.data.main)
        .map(c => c.label + " = " + c.labels[job.p[c.name]]).join(", ");
      f.source = "live";
      f.last = job.p;
      f.lastTexts = JSON.parse(m.texts);
      f.renders += 1;
      stats.renderMs.push(m.ms);
    } else if (m.type === "error") {
      stats.errors.push(m.message);
      if (job && job.f.status) job.f.status.textContent = "This figure could not render those values (" + m.message + ").";
    }
    pump();
  }

  function idle() {
    return !inflight && !figs.some(f => f.pending) &&
      figs.every(f => f.img.complete) && state !== "booting";
  }

  function maybeSettle() {
    if (!idle()) return;
    const w = waiters;
    waiters = [];
    w.forEach(r => r());
  }

  /** A promise resolved once nothing is rendering or waiting to render (for tests). */
  function settled() {
    return new Promise(r => { waiters.push(r); setTimeout(maybeSettle, 0); });
  }

  async function start() {
    try {
      const res = await fetch(script.dataset.figures);
      spec = await res.json();
    } catch (err) {
      return;  // file:// or a missing file: the page keeps its frames and its own note
    }
    document.querySelectorAll(".kvmath-interactive").forEach((div, i) => {
      const f = setUp(div, i);
      if (f) figs.push(f);
    });
  }

  if (location.protocol === "file:") {
    // fetch() of a local file is refused: say so beside each figure, keep the frames
    document.querySelectorAll(".kvmath-interactive").forEach((div) => {
      const note = div.querySelector(".kvmath-interactive-note");
      if (note) note.textContent = "Opened from a file: the slider's frames work; to make every " +
        "control live, serve the book over HTTP (python3 -m http.server in _build/html, then " +
        "http://localhost:8000/).";
    });
    state = "unavailable";
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
