"""Benchmark: how long each chapter takes to run in the room's JupyterLite, on a slow laptop.

Run::

    python benchmarks/time_lite_chapters.py [CHAPTER ...] [--rate 4] [--throttle cdp|process]
                                            [--site _build/workshop] [--timeout 600] [--json FILE]

CHAPTER is a notebook name with or without ``.ipynb`` (``01_roofline``); none: every chapter.
The site is the folder served to the room, holding the ``lite/`` that ``make lite`` (or
``make workshop``) builds: ``_build/workshop/learner`` (or ``_build/workshop`` in a kit of the
earlier layout); ``--site``, or ``KVMATH_WORKSHOP_DIR`` for the kit, points at one built elsewhere.

What it does, as a learner in the room does: serves the kit on 127.0.0.1 (every request
off localhost aborted), opens headless Chromium in the room's LAN mode (no service
worker, as for a page over plain HTTP from a LAN address; see tests/browser/test_lite.py),
and for each chapter opens ``lite/notebooks/index.html?path=notebooks/<chapter>.ipynb`` in a
new tab of the same browser (a warm-up chapter is opened first and reported separately).
Playwright's request routing, which aborts the requests off localhost, turns the browser's
HTTP cache off: every chapter loads the kit afresh (``bytes_served``: about 45 MB each), so
each time includes a cold start, where a room's browsers cache the kit after their first
chapter. In each tab it clicks Run > Run All Cells and waits until the notebook's execution indicator is idle and no
cell shows ``[*]`` (``tests.browser.rendered_prose.run_all_cells``: the prompts alone miss the
cells whose code is hidden). It records the seconds
from opening the tab to the first cell's result (the kernel's start, mostly), from
Run All to the last cell done, the code cells that ran, and the bytes and files the server
sent for the chapter (for the first chapter, the room's first start: ``plans.yaml``'s
``first_load_mb``).

The stand-in for a room laptop is a CPU ``--rate`` times slower, in one of two ways:

- ``cdp`` (default): DevTools' ``Emulation.setCPUThrottlingRate`` on the tab, as the
  DevTools "4x slowdown" does. Chromium applies it to the page's main thread only
  (rendering, the notebook UI, the widgets); the Pyodide kernel runs in a Web Worker,
  which it does not slow (and a worker target refuses the command: "Operation is only
  supported for pages, not workers").
- ``process``: the browser's processes are stopped and continued in turn (SIGSTOP for
  (rate - 1) / rate of the time, in slices of about 10 ms run, 30 ms stopped at rate 4),
  so every thread, the kernel's worker included, gets 1 / rate of the CPU it would have
  had. Closer to a slow laptop for a kernel-bound chapter. Each row reports the
  slowdown achieved (``effective_rate``).

It prints a table, and ``--json`` writes the rows. Times are wall-clock on the machine it
runs on (printed: ``lscpu``'s model name and the core count, and the load average), so a
loaded machine reads slower. This is a benchmark, not a test: nothing fails.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.browser.rendered_prose import run_all_cells  # noqa: E402
from tests.browser.sitecheck import launch_browser  # noqa: E402

WARMUP = "00_sample_rhythm"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    """Serves the kit and counts what it sends: the bytes and files of each chapter's load (the first is the room's
    first start, every file then in the browser's cache)."""
    sent = {"bytes": 0, "files": 0}
    _lock = threading.Lock()

    def log_message(self, *args):
        pass

    def copyfile(self, source, outputfile):
        start = source.tell()
        super().copyfile(source, outputfile)
        with self._lock:
            self.sent["bytes"] += source.tell() - start
            self.sent["files"] += 1


@contextlib.contextmanager
def serve(directory: Path):
    handler = functools.partial(_Quiet, directory=str(directory))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}/"
    finally:
        srv.shutdown()


def machine() -> str:
    model = platform.processor() or "unknown CPU"
    with contextlib.suppress(Exception):
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{model}, {os.cpu_count()} cores (load average {load} at the start)"


# --- the whole-browser throttle ---------------------------------------------------
def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _browser_pids() -> list[int]:
    pids = []
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(OSError):
            if "chrom" in Path(f"/proc/{pid}/comm").read_text():
                pids.append(pid)
    return pids


class ProcessThrottle:
    """Stop the browser's processes for (rate - 1) / rate of the time.

    Each stop lasts (rate - 1) times the run just before it, as measured: on a loaded
    machine this thread wakes late, and a fixed schedule would let the browser run
    longer than its share. ``effective`` is the slowdown achieved (all time over run time).
    """

    def __init__(self, rate: float, run_s: float = 0.010):
        self.rate, self.run_s = rate, run_s
        self.ran = self.stopped = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    @property
    def effective(self) -> float:
        return (self.ran + self.stopped) / self.ran if self.ran else 1.0

    def _signal(self, pids, sig):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def _loop(self):
        pids, refreshed = _browser_pids(), time.monotonic()
        try:
            while not self._done.is_set():
                t0 = time.monotonic()
                self._signal(pids, signal.SIGCONT)
                time.sleep(self.run_s)
                self._signal(pids, signal.SIGSTOP)
                t1 = time.monotonic()
                if t1 - refreshed > 1.0:   # tabs and workers come and go; look while stopped
                    new = [p for p in _browser_pids() if p not in pids]
                    self._signal(new, signal.SIGSTOP)
                    pids, refreshed = pids + new, time.monotonic()
                time.sleep(max(0.0, (self.rate - 1) * (t1 - t0) - (time.monotonic() - t1)))
                self.ran += t1 - t0
                self.stopped += time.monotonic() - t1
        finally:
            self._signal(_browser_pids(), signal.SIGCONT)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()


# --- one chapter ------------------------------------------------------------------
def time_chapter(ctx, server: str, chapter: str, rate: float, throttle: str, timeout_s: float) -> dict:
    page = ctx.new_page()
    if throttle == "cdp" and rate != 1:
        page.context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": rate})
    row = {"chapter": chapter, "first_result_s": None, "run_all_s": None, "total_s": None,
           "cells": None, "cells_done": 0, "errors": 0, "finished": False}
    sent_before = dict(_Quiet.sent)

    def note(state):
        done = [p for p in state["prompts"] if any(ch.isdigit() for ch in p)]
        row["cells"], row["cells_done"] = len(state["prompts"]), len(done)
        if done and row["first_result_s"] is None:
            row["first_result_s"] = round(time.time() - t_open, 1)

    try:
        t_open = time.time()
        page.goto(f"{server}lite/notebooks/index.html?path=notebooks/{chapter}.ipynb")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=300_000)
        t_run = time.time()
        try:
            run_all_cells(page, timeout_s, on_poll=note)
            row["finished"] = True
        except AssertionError:  # still running at the timeout: reported as not finished
            pass
        now = time.time()
        row["run_all_s"], row["total_s"] = round(now - t_run, 1), round(now - t_open, 1)
        row["errors"] = page.evaluate(
            "() => [...document.querySelectorAll(\".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']\")]"
            ".filter(e => /Error|Traceback/.test(e.textContent)).length")
    finally:
        page.close()
    row["bytes_served"] = _Quiet.sent["bytes"] - sent_before["bytes"]
    row["files_served"] = _Quiet.sent["files"] - sent_before["files"]
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*")
    parser.add_argument("--rate", type=float, default=4.0, help="CPU slowdown factor (default 4)")
    parser.add_argument("--throttle", choices=("cdp", "process"), default="cdp")
    parser.add_argument("--site", type=Path, default=None,
                        help="the folder served to the room, holding lite/ (default: the kit's learner/)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per chapter before giving up")
    parser.add_argument("--no-warmup", action="store_true", help=f"skip the cold-cache start on {WARMUP}")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    if args.site is None:   # the kit's learner/ folder, or a kit of the earlier layout (lite/ at its top)
        kit = Path(os.environ.get("KVMATH_WORKSHOP_DIR", ROOT / "_build" / "workshop"))
        args.site = next((d for d in (kit / "learner", kit) if (d / "lite").is_dir()), kit / "learner")
    lite = args.site / "lite"
    if not (lite / "notebooks" / "index.html").exists():
        print(f"{lite} missing: run make lite", file=sys.stderr)
        return 1
    chapters = [c.removesuffix(".ipynb") for c in args.chapters] or sorted(
        p.stem for p in (lite / "files" / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    where = machine()
    print(f"machine: {where}")
    print(f"site: {lite}; CPU slowed {args.rate:g}x ({args.throttle}); LAN mode (no service worker)", flush=True)
    rows = []
    with serve(args.site) as server, launch_browser() as browser:
        ctx = browser.new_context(service_workers="block", viewport={"width": 1400, "height": 1000})
        ctx.add_init_script("Object.defineProperty(Navigator.prototype, 'serviceWorker', {get: () => undefined});")
        ctx.route("**/*", lambda r: r.continue_() if r.request.url.startswith((server, "data:", "blob:"))
                  else r.abort())
        throttle = ProcessThrottle(args.rate) if args.throttle == "process" and args.rate != 1 \
            else contextlib.nullcontext()
        with throttle:
            todo = ([] if args.no_warmup else [(WARMUP, True)]) + [(c, False) for c in chapters]
            for chapter, warm_up in todo:
                before = (throttle.ran, throttle.stopped) if isinstance(throttle, ProcessThrottle) else None
                row = time_chapter(ctx, server, chapter, args.rate, args.throttle, args.timeout)
                row["warmup"] = warm_up
                if before:
                    ran, stopped = throttle.ran - before[0], throttle.stopped - before[1]
                    row["effective_rate"] = round((ran + stopped) / ran, 2) if ran else None
                rows.append(row)
                print(json.dumps(row), flush=True)
        ctx.close()
    print()
    print("| chapter | tab open to first result (s) | Run All to last cell (s) | total (s) | cells run | slowdown achieved "
          "| MB served |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        name = r["chapter"] + (" (warm-up, cold cache)" if r["warmup"] else "")
        done = f"{r['cells_done']} of {r['cells']}" + ("" if r["finished"] else f", stopped at {args.timeout:g} s")
        achieved = r.get("effective_rate") or (f"{args.rate:g} (DevTools)" if args.throttle == "cdp" else "")
        print(f"| {name} | {r['first_result_s']} | {r['run_all_s']} | {r['total_s']} | {done} | {achieved} "
              f"| {r['bytes_served'] / 1e6:.1f} ({r['files_served']} files) |")
    if args.json:
        args.json.write_text(json.dumps({"machine": where, "rate": args.rate, "throttle": args.throttle,
                                         "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
