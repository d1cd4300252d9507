"""Sphinx extension: every control of every kvmath figure live in the published page.

After the HTML build, for each notebook page with ``kvbook.interactive`` figures:

* the code those figures need, the calls of the ``kvbook.figures`` functions the
  page shows (``packages/kvbook/kvbook/live/figure_calls.py``: each figure's HTML
  carries its call), is written beside the build as ``_figures/<page>.py``, with
  ``_figures/<page>.json`` saying where the runtime is and which figures are
  static (a figure that measures the machine keeps its build-time frames);
* the page gets one deferred script, ``_vendor/kvmath-live/live.js``, which adds
  the figure's other controls and runs that code in a Web Worker on demand.

The runtime (Pyodide, numpy, matplotlib: ``packages/kvbook/kvbook/live/vendor_pyodide.py``) is copied
from its cache into ``_build/html/_vendor/pyodide/``; kvmath's wheel (the library,
unchanged) and kvbook's (the figure code's plots and interactive layer, and the
worker's helpers) are built from the tree into ``_vendor/kvmath/<hash>/`` and
``_vendor/kvbook/<hash>/``. Where the runtime was never
vendored, the build goes on and says so: pages keep their build-time frames (the
main slider works, the other controls are not offered). Nothing is fetched.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from sphinx.util import logging

from kvbook.live import figure_calls, vendor_pyodide

logger = logging.getLogger(__name__)
LIVE_SRC = Path(figure_calls.__file__).resolve().parent
LIVE_DIR = "_vendor/kvmath-live"
RUNTIME_DIR = "_vendor/pyodide"
FIGURES_DIR = "_figures"
MARK = 'class="kvmath-interactive"'


def _copy_if_changed(src: Path, dst: Path) -> None:
    if dst.exists() and dst.stat().st_size == src.stat().st_size and dst.stat().st_mtime >= src.stat().st_mtime:
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def _say(text: str) -> None:
    # printed, not a Sphinx warning: the book builds with -W, and a book without the
    # runtime is still a good book (frames only); `make test` refuses it
    from sphinx.util.console import red

    logger.info(red("WARNING (live figures): " + text))


def install_wheel(outdir: Path, package: str) -> Path:
    """Build ``package``'s wheel into ``_vendor/<package>/<hash>/`` (older hashes removed); its path."""
    wheel_tmp = outdir / "_vendor" / package / "_new"
    shutil.rmtree(wheel_tmp, ignore_errors=True)
    wheel = vendor_pyodide.build_wheel(wheel_tmp, package)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()[:16]
    final = outdir / "_vendor" / package / digest / wheel.name
    final.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(wheel), final)
    shutil.rmtree(wheel_tmp, ignore_errors=True)
    for old in (outdir / "_vendor" / package).iterdir():
        if old.is_dir() and old.name != digest:
            shutil.rmtree(old, ignore_errors=True)
    return final


def install_runtime(outdir: Path) -> dict | None:
    """Copy the vendored runtime and build kvmath's and kvbook's wheels into the build; their URLs, or None."""
    cache = vendor_pyodide.vendored()
    if cache is None:
        _say("the in-browser runtime is not vendored (run `python -m kvbook.live.vendor_pyodide`, "
             "which `make book` does): every page keeps its build-time frames, and only the "
             "main slider of each figure works")
        return None
    manifest = json.loads((cache / vendor_pyodide.MANIFEST).read_text())
    for name in manifest["files"]:
        _copy_if_changed(cache / name, outdir / RUNTIME_DIR / name)
    # the kvmath wheel as it is, and kvbook's beside it: the figure code the pages run
    # imports kvbook.plots / kvbook.interactive, and the worker's helpers are kvbook.live.helpers
    wheels = [install_wheel(outdir, package) for package in ("kvmath", "kvbook")]
    for src in LIVE_SRC.glob("*.js"):  # the page's layer and the worker (the Python comes in kvbook's wheel)
        if src.name != "pyodide_fontlist.js":
            _copy_if_changed(src, outdir / LIVE_DIR / src.name)
    core = sum(info["bytes"] for name, info in manifest["files"].items()
               if name != vendor_pyodide.LICENSES and name != vendor_pyodide.MANIFEST)
    # the two scripts the worker loads with importScripts (not through fetch, so not
    # counted as they arrive): added to the progress when Pyodide is up
    scripts = sum(manifest["files"][n]["bytes"] for n in ("pyodide.js", "pyodide.asm.js"))
    return {"runtime": RUNTIME_DIR + "/", "packages": list(vendor_pyodide.PACKAGES), "script_bytes": scripts,
            "wheels": [w.relative_to(outdir).as_posix() for w in wheels], "helpers": "kvbook.live.helpers",
            "fontlist": f"{RUNTIME_DIR}/{manifest['fontlist']}" if manifest.get("fontlist") else None,
            "bytes": core + sum(w.stat().st_size for w in wheels)}


def pages(app) -> list[tuple[str, Path]]:
    env = app.env
    out = []
    for docname in sorted(env.found_docs):
        path = Path(env.doc2path(docname))
        if path.suffix == ".ipynb":
            out.append((docname, path))
    return out


def make_live(outdir: Path, docname: str, runtime: dict) -> int:
    """Ship the figure code of one page and add the live layer to it; the number of live figures."""
    page = outdir / f"{docname}.html"
    if not page.exists():
        return 0
    html = page.read_text(encoding="utf-8")
    count = html.count(MARK)
    if not count:
        return 0
    page_calls = figure_calls.calls(html)
    if len(page_calls) != count or not all(page_calls):  # a figure not made by a kvbook.figures function
        _say(f"{docname}: {count} figures on the page but {sum(map(bool, page_calls))} made by kvbook.figures "
             "functions (which carry their call); the page keeps its frames")
        return 0
    found = figure_calls.code(page_calls)
    code_path = outdir / FIGURES_DIR / f"{docname}.py"
    code_path.parent.mkdir(parents=True, exist_ok=True)
    code_path.write_text(found["code"], encoding="utf-8")
    code_bytes = len(found["code"].encode("utf-8"))
    spec = {**runtime, "code": f"{FIGURES_DIR}/{docname}.py", "figures": found["figures"],
            "bytes": runtime["bytes"] + code_bytes}
    (outdir / FIGURES_DIR / f"{docname}.json").write_text(json.dumps(spec, indent=1), encoding="utf-8")
    rel_root = "../" * docname.count("/")
    tag = (f'<script defer src="{rel_root}{LIVE_DIR}/live.js" data-root="{rel_root}" '
           f'data-figures="{rel_root}{FIGURES_DIR}/{docname}.json"></script>')
    if LIVE_DIR + "/live.js" not in html:
        html = html.replace("</body>", tag + "\n</body>", 1)
        page.write_text(html, encoding="utf-8")
    return sum(not f["static"] for f in found["figures"])


def finish(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    runtime = install_runtime(outdir)
    if runtime is None:
        return
    live = sum(make_live(outdir, docname, runtime) for docname, _ in pages(app))
    logger.info(f"live figures: {live} figures run their chapter's Python in the browser "
                f"({runtime['bytes'] / 1e6:.1f} MB runtime in {RUNTIME_DIR}/)")


def setup(app):
    app.connect("build-finished", finish)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
