/* The book's Python, in a Web Worker: Pyodide + numpy + matplotlib + kvmath + kvbook, all
 * served from the book itself (_vendor/pyodide/, _vendor/kvmath/, _vendor/kvbook/), then the
 * chapter's figure functions, called as the page's figures were (_figures/<page>.py, written by
 * packages/kvbook/kvbook/live/figure_calls.py from the calls the figures' HTML carries).
 *
 * Messages in:  {type: "boot", indexURL, packages, wheels, helpers, code}
 *               {type: "render", id, fig, positions}        positions: {control: index}
 * Messages out: {type: "progress", step, steps, text, bytes}
 *               {type: "ready", specs, ms}                    specs: JSON from kvbook.live.helpers.specs()
 *               {type: "rendered", id, png (ArrayBuffer), texts, ms}
 *               {type: "error", id?, message}
 * No formula lives here: every pixel comes from the chapter's InteractiveFigure.render().
 */
"use strict";

let py = null;
let helpers = null;
let received = 0;
let step = 0;
const STEPS = 5;
const STEP_TEXT = ["", "the Python core", "numpy and matplotlib", "kvmath and kvbook", "this chapter's figure code",
                   "the first render"];
let lastPost = 0;
const MPLDIR = "/home/pyodide/.mpl";

function progress(force) {
  const now = Date.now();
  if (!force && now - lastPost < 100) return;
  lastPost = now;
  postMessage({type: "progress", step: step, steps: STEPS, text: STEP_TEXT[step], bytes: received});
}

const stepStart = [];
function setStep(n) { step = n; stepStart[n] = performance.now(); progress(true); }

// Count the bytes as they arrive, for the progress bar (every fetch Pyodide makes goes through here).
const baseFetch = self.fetch.bind(self);
self.fetch = async function (input, init) {
  const res = await baseFetch(input, init);
  if (!res.body || !res.ok) return res;
  const reader = res.body.getReader();
  const body = new ReadableStream({
    async pull(controller) {
      const {done, value} = await reader.read();
      if (done) { controller.close(); return; }
      received += value.byteLength;
      progress(false);
      controller.enqueue(value);
    },
    cancel(reason) { reader.cancel(reason); },
  });
  return new Response(body, {status: res.status, statusText: res.statusText, headers: res.headers});
};

async function boot(m) {
  const t0 = performance.now();
  setStep(1);
  importScripts(m.indexURL + "pyodide.js");
  py = await loadPyodide({indexURL: m.indexURL, env: {HOME: "/home/pyodide", MPLBACKEND: "Agg", MPLCONFIGDIR: MPLDIR},
                          stdout: () => {}, stderr: (s) => console.debug("python:", s)});
  received += m.scriptBytes || 0;   // pyodide.js and pyodide.asm.js came by importScripts
  setStep(2);
  await py.loadPackage(m.packages, {messageCallback: () => {}});
  if (m.fontlist) {
    // matplotlib's font list, built once at vendoring time: no "building the font cache"
    const r = await fetch(m.fontlist);
    if (r.ok) {
      py.FS.mkdirTree(MPLDIR);
      py.FS.writeFile(MPLDIR + "/" + m.fontlist.split("/").pop(), new Uint8Array(await r.arrayBuffer()));
    }
  }
  setStep(3);
  // kvmath's wheel unchanged, and kvbook's (plots, interactive, and the helpers below)
  await py.loadPackage(m.wheels, {messageCallback: () => {}});
  setStep(4);
  const r = await fetch(m.code);
  if (!r.ok) throw new Error("HTTP " + r.status + " for " + m.code);
  const code = await r.text();
  helpers = py.pyimport(m.helpers);  // a module name: kvbook.live.helpers
  const figs = helpers.run(code, m.codeName || "<figures>");
  const count = figs.length;
  figs.destroy();
  setStep(5);
  const specs = helpers.specs();
  const end = performance.now();
  const steps = stepStart.slice(1).map((t, i) => Math.round((stepStart[i + 2] || end) - t));
  postMessage({type: "ready", specs: specs, count: count, ms: end - t0, bytes: received, steps: steps});
}

function render(m) {
  const t0 = performance.now();
  const result = helpers.render(m.fig, JSON.stringify(m.positions));
  const png = result.get(0);
  const texts = result.get(1);
  result.destroy();
  const bytes = png.toJs();          // Python bytes -> Uint8Array (a copy)
  png.destroy();
  const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  postMessage({type: "rendered", id: m.id, fig: m.fig, png: buffer, texts: texts,
               ms: performance.now() - t0}, [buffer]);
}

self.onmessage = async (event) => {
  const m = event.data;
  try {
    if (m.type === "boot") await boot(m);
    else if (m.type === "render") render(m);
  } catch (err) {
    postMessage({type: "error", id: m.id, fig: m.fig, message: String(err && err.message || err)});
  }
};
