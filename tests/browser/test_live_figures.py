"""Every control of every figure live in the published book.

The browser test boots the in-browser runtime (Pyodide, served by the book)
on a page, moves every control of every figure through several values, and
asserts that the image changes, that the figure's texts (its readouts: step
times, bounds) are those CPython renders for the same values from the same
code, and that no request leaves localhost. It prints the boot time and the
median move. ``make test`` drives :data:`QUICK_PAGES`; the ``slow`` variant
(``make test-full``) drives every other page with a live figure.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.browser.sitecheck import html_pages, is_local, serve

ROOT = Path(__file__).resolve().parents[2]

QUICK_PAGES = ["notebooks/00_sample_rhythm.html", "notebooks/03_min_step.html"]
REPORT_DIR = ROOT / "_build"  # livecheck-quick.json and, from make test-full, livecheck-others.json
MEDIAN_MOVE_MAX_MS = 1000  # generous: the machine is shared; the target (100 ms) is reported


@pytest.fixture(scope="module")
def runtime(built_book) -> Path:
    wasm = built_book / "_vendor" / "pyodide" / "pyodide.asm.wasm"
    if not wasm.exists():
        message = ("the in-browser runtime is missing from the built book (_vendor/pyodide/): "
                   "run `make runtime` (packages/kvbook/kvbook/live/vendor_pyodide.py), then `make book`")
        pytest.fail(message)
    return built_book


def figure_pages(site: Path) -> list[str]:
    return [rel for rel in html_pages(site) if 'class="kvmath-interactive"' in (site / rel).read_text(encoding="utf-8")]


def live_pages(site: Path) -> list[str]:
    out = []
    for rel in figure_pages(site):
        spec = site / "_figures" / rel.replace(".html", ".json")
        if spec.exists() and any(not f["static"] for f in json.loads(spec.read_text())["figures"]):
            out.append(rel)
    return out


def test_every_figure_page_ships_its_figure_code(runtime):
    pages = figure_pages(runtime)
    assert len(pages) >= 10, pages
    for rel in pages:
        stem = rel.replace(".html", "")
        assert (runtime / "_figures" / f"{stem}.py").exists(), rel
        spec = json.loads((runtime / "_figures" / f"{stem}.json").read_text())
        text = (runtime / rel).read_text(encoding="utf-8")
        assert "_vendor/kvmath-live/live.js" in text, rel
        assert text.count('class="kvmath-interactive"') == len(spec["figures"]), rel
        # kvmath's wheel as built from the tree, and kvbook's (the figure code's plots and helpers)
        assert [Path(w).name.split("-")[0] for w in spec["wheels"]] == ["kvmath", "kvbook"], spec["wheels"]
        assert all((runtime / w).exists() for w in spec["wheels"]) and (runtime / spec["runtime"] / "pyodide.js").exists()


def test_the_licences_of_the_runtime_ship_with_the_book(runtime):
    text = (runtime / "_vendor" / "pyodide" / "LICENSES.txt").read_text(encoding="utf-8")
    for name in ("Mozilla Public License", "PYTHON SOFTWARE FOUNDATION LICENSE", "numpy", "matplotlib",
                 "pillow", "fonttools", "kiwisolver", "contourpy"):
        assert name in text, name
    intro = (runtime / "book" / "intro.html").read_text(encoding="utf-8")
    assert "_vendor/pyodide/LICENSES.txt" in intro


def test_the_measuring_chapter_says_why_it_stays_static(runtime):
    spec = json.loads((runtime / "_figures" / "notebooks" / "14_measure_your_machine.json").read_text())
    assert spec["figures"] and all(f["static"] for f in spec["figures"])
    assert "WebAssembly" in spec["figures"][0]["reason"]


def _context(browser, **kw):
    context = browser.new_context(**kw)
    off: list[str] = []

    def route(r):
        if is_local(r.request.url):
            r.continue_()
        else:
            off.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    return context, off


@pytest.mark.parametrize("pages_chosen", ["quick", pytest.param("others", marks=pytest.mark.slow)])
def test_live_figures_match_the_kernel(runtime, browser, capsys, pages_chosen):
    from tests.browser import livecheck

    if pages_chosen == "quick":
        pages = QUICK_PAGES
    else:
        pages = [rel for rel in live_pages(runtime) if rel not in QUICK_PAGES]
    reports, problems = {}, []
    with serve(runtime) as base:
        for rel in pages:
            # a fresh context per page: cold cache, as a first-time reader
            context, off = _context(browser)
            try:
                report = livecheck.drive(context, base + rel)
                if rel == pages[0]:  # the same page again, its files now in the browser's cache
                    report["boot_cached_s"] = livecheck.boot_time(context, base + rel)
            finally:
                context.close()
            report["off_localhost"] += off
            found = livecheck.check(report, runtime / "_figures" / rel.replace(".html", ".py"))
            problems += [f"{rel}: {p}" for p in found]
            reports[rel] = {k: v for k, v in report.items() if k != "moves"} | {"moves": len(report["moves"])}
    (REPORT_DIR / f"livecheck-{pages_chosen}.json").write_text(json.dumps(reports, indent=1), encoding="utf-8")
    for rel, rep in reports.items():
        cached = f" (from cache {rep['boot_cached_s']:.1f} s)" if "boot_cached_s" in rep else ""
        line = (f"live figures {rel}: boot {rep['boot_s']:.1f} s{cached}, {rep['bytes'] / 1e6:.1f} MB, "
                f"{rep['moves']} moves, median move {rep['median_move_ms'] or 0:.0f} ms "
                f"(main slider {rep['median_main_move_ms'] or 0:.0f} ms, other controls "
                f"{rep['median_other_move_ms'] or 0:.0f} ms; render in Python "
                f"{rep['median_render_ms'] or 0:.0f} ms); boot steps "
                f"{rep['boot_steps_ms']} ms (core, numpy+matplotlib, kvmath, figure code, first render)")
        with capsys.disabled():
            print("\n" + line)
    assert not problems, "\n".join(problems)
    slow = [f"{rel}: {rep['median_move_ms']:.0f} ms" for rel, rep in reports.items()
            if (rep["median_move_ms"] or 0) > MEDIAN_MOVE_MAX_MS]
    assert not slow, slow


def test_without_webassembly_the_page_keeps_its_frames_and_says_why(runtime, browser):
    context, off = _context(browser)
    context.add_init_script("delete window.WebAssembly;")
    try:
        with serve(runtime) as base:
            page = context.new_page()
            page.goto(base + QUICK_PAGES[0], wait_until="load")
            page.wait_for_selector(".kvmath-live-status")
            status = page.locator(".kvmath-live-status").first.text_content()
            disabled = page.evaluate("() => Array.from(document.querySelectorAll('.kvmath-live-select, "
                                     ".kvmath-live-range')).every(e => e.disabled)")
    finally:
        context.close()
    assert "no WebAssembly" in status, status
    assert disabled
    assert not off


def test_a_file_url_keeps_the_frames_and_says_how_to_serve(runtime, browser):
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto((runtime / QUICK_PAGES[0]).as_uri(), wait_until="load")
        page.wait_for_function("() => window.kvmathLive && kvmathLive.state() === 'unavailable'")
        note = page.locator(".kvmath-interactive-note").first.text_content()
        frame_before = page.locator(".kvmath-interactive-img").first.get_attribute("src")
        page.evaluate("() => { const r = document.querySelector('.kvmath-interactive-range'); "
                      "r.value = r.min; r.dispatchEvent(new Event('input')); }")
        frame_after = page.locator(".kvmath-interactive-img").first.get_attribute("src")
    finally:
        context.close()
    assert "http.server" in note, note
    assert frame_before != frame_after
