"""Drive a page's live figures in headless Chromium and compare them with the kernel.

Used by ``tests/browser/test_live_figures.py``; also runnable by hand::

    PYTHONPATH=scripts/live python -m tests.browser.livecheck _build/html notebooks/03_min_step.html [...]

For one page it boots the in-browser runtime (the figure's "Make every control
live" button), moves every control of every figure through several values
(every render asked of Python, not of the build-time frames), and records for
each move the image's sha256, the figure's texts (its readouts: "B = 64 ...")
and the time from the move to the new image on screen. :func:`kernel_texts`
renders the same values with CPython from the same figure code, so the test
can assert the browser shows what the kernel computes. Every request is
recorded; any off localhost is aborted and reported.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

from tests.browser.sitecheck import is_local

ROOT = Path(__file__).resolve().parents[2]

BOOT_TIMEOUT_MS = 240_000
MOVES_PER_CONTROL = 3

_MOVE_JS = r"""
async (perControl) => {
  const L = window.kvmathLive;
  const digest = async (img) => {
    const buf = await (await fetch(img.src)).arrayBuffer();
    const h = await crypto.subtle.digest('SHA-256', buf);
    return Array.from(new Uint8Array(h)).map(b => b.toString(16).padStart(2, '0')).join('');
  };
  const out = [];
  for (const f of L.figures) {
    if (f.static) { out.push({fig: f.index, static: true}); continue; }
    let before = await digest(f.img);
    for (const name of Object.keys(f.controls)) {
      const c = f.controls[name];
      const n = c.spec.labels.length;
      const start = Number(c.el.value);
      const wanted = [n - 1, 0, Math.floor(n / 2), 1].filter((k, i, a) => k !== start && a.indexOf(k) === i);
      for (const k of wanted.slice(0, perControl).concat([start])) {
        c.el.value = String(k);
        c.el.dispatchEvent(new Event(c.el.tagName === 'SELECT' ? 'change' : 'input', {bubbles: true}));
        await L.settled();
        const after = await digest(f.img);
        const pos = {};
        for (const m of Object.keys(f.controls)) pos[m] = Number(f.controls[m].el.value);
        out.push({fig: f.index, control: name, main: name === f.data.main, position: k, positions: pos, source: f.source,
                  changed: after !== before, texts: f.lastTexts, ms: L.stats.moves[L.stats.moves.length - 1]});
        before = after;
      }
    }
  }
  return out;
}
"""


def _median(moves) -> float | None:
    ms = [m["ms"] for m in moves]
    return statistics.median(ms) if ms else None


def drive(context, url: str, per_control: int = MOVES_PER_CONTROL) -> dict:
    """Boot the runtime on ``url`` and move every control; the facts of the run."""
    requests: list[str] = []
    problems: list[str] = []
    page = context.new_page()
    page.on("request", lambda req: requests.append(req.url))
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("console", lambda msg: problems.append(f"console {msg.type}: {msg.text}")
            if msg.type == "error" else None)
    try:
        page.goto(url, wait_until="load", timeout=60_000)
        page.wait_for_function("() => window.kvmathLive && kvmathLive.figures.length > 0", timeout=30_000)
        page.evaluate("() => { kvmathLive.alwaysLive = true; }")
        if page.evaluate("() => kvmathLive.figures.every(f => f.static)"):
            return {"state": "static", "boot_s": 0, "bytes": 0, "errors": [], "moves": [], "boot_steps_ms": None,
                    "problems": problems, "off_localhost": [r for r in requests if not is_local(r)],
                    "requests": len(requests), "statuses": [], "median_move_ms": None,
                    "median_main_move_ms": None, "median_other_move_ms": None, "median_render_ms": None}
        live = page.locator(".kvmath-live-button")
        if live.count():
            live.first.click()
        else:
            page.evaluate("() => kvmathLive.boot()")
        page.wait_for_function("() => ['live', 'failed'].includes(kvmathLive.state())", timeout=BOOT_TIMEOUT_MS)
        stats = page.evaluate("() => kvmathLive.stats")
        state = page.evaluate("() => kvmathLive.state()")
        moves = page.evaluate(_MOVE_JS, per_control) if state == "live" else []
        stats = page.evaluate("() => kvmathLive.stats")
        statuses = page.evaluate("() => Array.from(document.querySelectorAll('.kvmath-live-status'))"
                                 ".map(e => e.textContent)")
    finally:
        page.close()
    off = [r for r in requests if not is_local(r)]
    live = [m for m in moves if m.get("ms") is not None and m.get("source") == "live"]
    timed = [m["ms"] for m in live]
    return {"state": state, "boot_s": (stats["bootMs"] or 0) / 1000, "bytes": stats["bytes"],
            "boot_steps_ms": stats.get("stepMs"),
            "errors": stats["errors"], "moves": moves, "problems": problems, "off_localhost": off,
            "requests": len(requests), "statuses": statuses,
            "median_move_ms": statistics.median(timed) if timed else None,
            # the main slider (dragged; blitted) and the other controls (a new combination of
            # them also recomputes the axes' held limits: several updates and a full redraw)
            "median_main_move_ms": _median(m for m in live if m["main"]),
            "median_other_move_ms": _median(m for m in live if not m["main"]),
            "median_render_ms": statistics.median(stats["renderMs"]) if stats["renderMs"] else None}


def boot_time(context, url: str) -> float:
    """Seconds from "Make every control live" to live, on a new page of ``context`` (its HTTP cache warm)."""
    page = context.new_page()
    try:
        page.goto(url, wait_until="load", timeout=60_000)
        page.wait_for_function("() => window.kvmathLive && kvmathLive.figures.length > 0", timeout=30_000)
        page.evaluate("() => kvmathLive.boot()")
        page.wait_for_function("() => ['live', 'failed'].includes(kvmathLive.state())", timeout=BOOT_TIMEOUT_MS)
        return page.evaluate("() => kvmathLive.stats.bootMs") / 1000
    finally:
        page.close()


def kernel_texts(code_file: Path, moves: list[dict]) -> list[list[str]]:
    """The figures' texts when CPython renders each move's values (same code, same helpers)."""
    from kvbook.live import helpers as kvmath_live

    if all(m.get("static") for m in moves):
        return [None] * len(moves)  # a static figure's code (it measures the machine) is not run
    cwd = os.getcwd()
    os.chdir(ROOT / "notebooks")
    try:
        kvmath_live.run(Path(code_file).read_text(encoding="utf-8"), str(code_file))
        out = []
        for m in moves:
            if m.get("static"):
                out.append(None)
                continue
            _, texts = kvmath_live.render(m["fig"], json.dumps(m["positions"]))
            out.append(json.loads(texts))
    finally:
        os.chdir(cwd)
    return out


def check(report: dict, code_file: Path) -> list[str]:
    """Problems of a :func:`drive` report, the kernel's texts compared."""
    problems = list(report["problems"]) + [f"request left localhost: {u}" for u in report["off_localhost"]]
    if report["state"] == "static":
        return problems
    if report["state"] != "live":
        return problems + [f"runtime did not start: {report['errors']} {report['statuses']}"]
    problems += [f"worker error: {e}" for e in report["errors"]]
    moves = report["moves"]
    if not any(not m.get("static") for m in moves):
        problems.append("no control was moved")
    expected = kernel_texts(code_file, moves)
    for m, want in zip(moves, expected):
        if m.get("static"):
            continue
        where = f"figure {m['fig']}, {m['control']} -> position {m['position']}"
        if m["source"] != "live":
            problems.append(f"{where}: shown from {m['source']}, not rendered by Python")
        if not m["changed"]:
            problems.append(f"{where}: the image did not change")
        if m["texts"] != want:
            problems.append(f"{where}: browser texts {m['texts']} != kernel {want}")
    return problems


if __name__ == "__main__":
    from tests.browser.sitecheck import launch_browser, serve

    site = Path(sys.argv[1]).resolve()
    with launch_browser() as browser, serve(site) as base:
        for rel in sys.argv[2:]:
            context = browser.new_context()
            context.route("**/*", lambda r: r.continue_() if is_local(r.request.url) else r.abort())
            rep = drive(context, base + rel)
            rep["boot_cached_s"] = boot_time(context, base + rel) if rep["state"] == "live" else 0
            context.close()
            code = site / "_figures" / rel.replace(".html", ".py")
            probs = check(rep, code)
            print(f"{rel}: {rep['state']}, boot {rep['boot_s']:.1f} s (from cache {rep['boot_cached_s']:.1f} s), "
                  f"{rep['bytes'] / 1e6:.1f} MB, "
                  f"{len(rep['moves'])} moves, median move {rep['median_move_ms'] or 0:.0f} ms "
                  f"(render in Python {rep['median_render_ms'] or 0:.0f} ms); boot steps (ms) "
                  f"{rep['boot_steps_ms']}")
            print("\n".join(probs) or "  no problems")
