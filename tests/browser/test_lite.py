"""The workshop's JupyterLite site runs the notebooks in the browser, as in a room.

Serves the kit's learner folder, ``_build/workshop/learner`` (``make workshop``; the only
folder the room is served), on localhost with every request off localhost aborted and
recorded. In the room's LAN mode (service workers unavailable,
as for a page served over plain HTTP from a LAN address) it opens ``lite/notebooks/``
on 01_roofline, runs all its cells, asserts no error output and a rendered figure,
drags a figure's slider and sees its image change, changes a value in a cell, re-runs
it and sees a new result, and prints the time to the first result and the bytes
loaded. It runs the same notebook as a laptop serving its own copy on localhost does
(under JupyterLite's service worker), and every chapter.
The browser is the session's (conftest ``browser``): a second Playwright in the same
thread would find the first one's event loop running.

The tests that run the site are ``slow`` (a Pyodide kernel start: about two minutes on a
loaded 2-core machine; every chapter, 30-60 s more each): ``make test-full`` builds the site
and runs them, and a missing site fails them. ``KVMATH_WORKSHOP_DIR`` (a path, not a
selection) points them at a kit built elsewhere (its ``learner/`` is served).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import threading
import time
import json
import sys
from pathlib import Path

import pytest

from kvbook.workshop import book_links, workshop_lite

ROOT = Path(__file__).resolve().parents[2]
WORKSHOP = Path(os.environ.get("KVMATH_WORKSHOP_DIR", ROOT / "_build" / "workshop"))
SERVED = WORKSHOP / "learner"           # what the room is served (book/teaching/run-it.md)
LITE = SERVED / "lite"
NOTEBOOK = "notebooks/01_roofline.ipynb"


def test_lite_notebook_has_the_lite_kernelspec_and_no_outputs():
    nb = {"metadata": {"kernelspec": {"name": "python3"}}, "cells": [
        {"cell_type": "code", "source": "1", "outputs": [{"output_type": "stream"}], "execution_count": 3}]}
    out = workshop_lite.lite_notebook(nb)
    assert out["metadata"]["kernelspec"]["name"] == "python"      # no "Select kernel" dialog
    assert out["cells"][0]["outputs"] == [] and nb["cells"][0]["outputs"]


def test_check_site_fails_when_the_kernel_would_fetch_pyodide_from_a_cdn(tmp_path):
    # what a build run outside its lite dir writes: no pyodideUrl, no disablePyPIFallback
    (tmp_path / "jupyter-lite.json").write_text(json.dumps({"jupyter-config-data": {"litePluginSettings": {
        workshop_lite.KERNEL_PLUGIN: {"pipliteUrls": ["./pypi/all.json"]}}}}))
    with pytest.raises(workshop_lite.LiteError, match="pyodideUrl is None"):
        workshop_lite.check_site(tmp_path)


def _need_site():
    if not (LITE / "notebooks" / "index.html").exists():
        pytest.fail(f"{LITE} missing: run make lite (make test-full builds it first)")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The learner folder served below a path of its address (``/room/``), as a classroom server that holds more
    than the kit may serve it: the room's links into its book are relative, and must work there (review R21c-10)."""
    _need_site()
    top = tmp_path_factory.mktemp("served")
    (top / "room").symlink_to(SERVED.resolve())
    handler = functools.partial(_Quiet, directory=str(top))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}/room/"
    srv.shutdown()


@contextlib.contextmanager
def _lite_page(browser, server, lan=True):
    """A page on the lite site; every request off localhost aborted and recorded.

    ``lan``: as a room's LAN serves it. A page served over plain HTTP from a LAN address
    is not a secure context: navigator.serviceWorker is undefined there. Playwright's
    "block" alone lets register() resolve, so JupyterLite would mount its drive through
    a service worker that never answers and the kernel would hang; the API is removed
    as the room does. Without ``lan``: a laptop serving its own copy on localhost, a
    secure context, where JupyterLite registers its service worker.
    """
    off, loaded = [], [0]
    ctx = browser.new_context(service_workers="block" if lan else "allow",
                              viewport={"width": 1400, "height": 1000})

    def route(r):
        url = r.request.url
        if url.startswith(server) or url.startswith(("data:", "blob:")):
            r.continue_()
        else:
            off.append(url)
            r.abort()

    def on_finished(req):
        try:
            loaded[0] += req.sizes()["responseBodySize"]
        except Exception:   # a request whose sizes are gone
            pass

    ctx.route("**/*", route)
    if lan:
        ctx.add_init_script(
            "Object.defineProperty(Navigator.prototype, 'serviceWorker', {get: () => undefined});")
    ctx.on("requestfinished", on_finished)   # the page's and its kernel worker's
    try:
        yield ctx.new_page(), off, loaded
    finally:
        ctx.close()


def _run_all(page, server, notebook, timeout_s=300):
    """Open a notebook, Run All Cells; (seconds to the first result, to the last, tracebacks)."""
    from tests.browser.rendered_prose import last_count, run_all_cells

    t0 = time.time()
    page.goto(server + "lite/notebooks/index.html?path=" + notebook)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    assert page.locator(".jp-Dialog").count() == 0, page.locator(".jp-Dialog").inner_text()
    first = []  # when the first shown cell's result shows (the kernel's start, mostly)
    run_all_cells(page, timeout_s, on_poll=lambda state: first or not last_count(state)
                  or first.append(time.time() - t0))
    first_result = first[0] if first else None  # a chapter whose code is all hidden shows no count
    all_cells = time.time() - t0
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    tracebacks = [t for t in errors.all_inner_texts() if "Error" in t or "Traceback" in t]
    return first_result, all_cells, tracebacks


@pytest.mark.slow
def test_the_served_folder_offers_no_answer_key_or_instructor_page(server):
    import urllib.error
    import urllib.request
    for path in ("answer-key.md", "instructor/", "../instructor/index.html", "book/book/teaching/run-it.html",
                 "book/book/teaching/plan-90.html", "lite/files/notebooks/answer-key.md"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(server + path)
        assert err.value.code == 404, path
    with urllib.request.urlopen(server + "lite/files/notebooks/00_sample_rhythm.ipynb") as r:
        nb = json.loads(r.read())
    assert "{solution" not in json.dumps(nb["cells"])
    assert any(c.get("metadata", {}).get("user_expressions") for c in nb["cells"])
    assert workshop_lite.check_notebooks(LITE / "files" / "notebooks") == []


@pytest.mark.slow
def test_a_chapter_opened_from_the_front_page_fills_a_phones_width(server, browser):
    """Review R21b-4: the front page's live link opened JupyterLab, whose file browser left the notebook 62 px of a
    390-px phone. Each chapter's link now opens it alone, in the Notebook interface, as wide as the screen."""
    from kvbook.workshop import kit

    ctx = browser.new_context(viewport={"width": 390, "height": 844}, service_workers="block")
    ctx.add_init_script("Object.defineProperty(Navigator.prototype, 'serviceWorker', {get: () => undefined});")
    try:
        page = ctx.new_page()
        page.goto(server)
        chapters = kit.live_chapters()
        assert len(chapters) == len(CHAPTERS)
        href, text = chapters[2]
        page.get_by_text(text, exact=True).click()
        page.wait_for_selector(".jp-Notebook .jp-MarkdownCell .myst", timeout=180_000)
        assert page.url == server + href
        width = page.evaluate("() => document.querySelector('.jp-Notebook').getBoundingClientRect().width")
        assert width >= 360, width
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
        assert page.locator(".jp-DirListing").count() == 0 or not page.locator(".jp-DirListing").first.is_visible()
    finally:
        ctx.close()


@pytest.mark.slow
def test_lite_runs_edits_and_reruns_a_notebook_offline(server, browser):
    with _lite_page(browser, server) as (page, off, loaded):
        first_result, all_cells, tracebacks = _run_all(page, server, NOTEBOOK)
        assert not tracebacks, tracebacks[:3]
        figures = page.locator(".jp-OutputArea-output img, .jp-RenderedImage img").count()
        assert figures >= 1, "no figure rendered"
        widgets = page.locator(".jp-OutputArea-output .widget-slider, .jp-OutputArea-output .widget-dropdown").count()
        assert widgets >= 1, "no live ipywidgets control (kvbook.interactive)"
        # a slider move re-runs the figure's update in the kernel: its image changes
        # (dragged with the mouse, as a learner does)
        figure = page.locator(".jp-OutputArea-output .widget-vbox:has(.widget-slider)").first
        figure.scroll_into_view_if_needed()
        page.wait_for_timeout(800)  # let the scroll settle before reading where the handle is
        before = figure.evaluate("el => el.querySelector('.widget-image').getAttribute('src')")
        box = figure.locator(".widget-slider .noUi-handle").first.bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.mouse.move(x, y)
        page.mouse.down()
        page.mouse.move(x + 60, y, steps=6)
        page.mouse.up()
        t_move = time.time()
        page.wait_for_function(
            "([el, src]) => el.querySelector('.widget-image').getAttribute('src') !== src",
            arg=[figure.element_handle(), before], timeout=60_000)
        slider_move = time.time() - t_move
        # edit: after Run All the last cell is active; a new cell below it, run, change, re-run
        page.wait_for_timeout(1500)   # let Run All's last cell become active before typing
        page.evaluate("() => document.querySelector('.jp-Notebook').focus()")
        page.keyboard.press("Escape")
        page.keyboard.press("b")
        page.keyboard.press("Enter")
        page.keyboard.type("import kvmath; x = 2; print('lite result', x * 21, kvmath.__name__)")
        page.keyboard.press("Control+Enter")
        page.wait_for_function("() => document.body.innerText.includes('lite result 42 kvmath')",
                               timeout=60_000)
        page.keyboard.press("Enter")
        page.keyboard.press("Control+a")
        page.keyboard.type("import kvmath; x = 3; print('lite result', x * 21, kvmath.__name__)")
        page.keyboard.press("Control+Enter")
        page.wait_for_function("() => document.body.innerText.includes('lite result 63 kvmath')",
                               timeout=60_000)
    print(f"\nlite: first result {first_result:.1f} s, all cells {all_cells:.1f} s, "
          f"{figures} figures, {widgets} live widget controls, slider move {slider_move:.2f} s, "
          f"{loaded[0] / 1e6:.1f} MB loaded, off localhost {len(off)}")
    assert not off, off[:5]


@pytest.mark.slow
def test_lite_prose_follows_an_edited_input(server, browser):
    """The inline expressions are evaluated again by the room's Pyodide kernel (kvbook.pyodide_expressions):
    a reader who changes an input and runs the chapter again reads the new number in the prose."""
    from tests.browser.rendered_prose import EDIT, edit_code_cell, markdown_texts, run_all_cells

    with _lite_page(browser, server) as (page, off, loaded):
        _, _, tracebacks = _run_all(page, server, "notebooks/" + EDIT["notebook"])
        assert not tracebacks, tracebacks[:3]
        page.wait_for_timeout(2000)
        assert EDIT["before"] in markdown_texts(page)[EDIT["prose_cell"]]
        edit_code_cell(page, EDIT["cell"], EDIT["old"], EDIT["new"])
        run_all_cells(page, 300)
        page.wait_for_timeout(2000)  # jupyterlab-myst asks the kernel for the expressions after the cells ran
        edited = markdown_texts(page)[EDIT["prose_cell"]]
    assert EDIT["after"] in edited, edited
    assert not off, off[:5]


@pytest.mark.slow
def test_lite_on_a_laptops_own_localhost_runs_under_its_service_worker(server, browser):
    """The other way to use the kit: each laptop serves its own copy on localhost."""
    with _lite_page(browser, server, lan=False) as (page, off, loaded):
        first_result, all_cells, tracebacks = _run_all(page, server, NOTEBOOK)
        assert not tracebacks, tracebacks[:3]
        workers = page.evaluate("async () => (await navigator.serviceWorker.getRegistrations())"
                                ".map(r => (r.active || r.installing || r.waiting || {}).scriptURL)")
    print(f"\nlite on localhost: all cells {all_cells:.1f} s, service workers {workers}")
    assert any("/lite/service-worker.js" in str(w) for w in workers), workers
    assert not off, off[:5]


CHAPTERS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
#: What a chapter that cannot run in the browser says at its top (chapter 14 times the machine's own memory).
LOCAL_KERNEL_NOTICE = "local kernel"


@pytest.mark.slow
@pytest.mark.parametrize("notebook", CHAPTERS)
def test_every_chapter_runs_in_the_rooms_browser(server, browser, notebook):
    """Each chapter runs (or, if it says at the top that it is for a local kernel, says so on the page), and then
    reads as the book does: the book's numbers in each paragraph, no raw MyST, no solution."""
    import nbformat

    from tests.browser.rendered_prose import book_link_problems, markdown_texts, prose_problems

    source = nbformat.read(ROOT / "notebooks" / notebook, as_version=4)
    nb = nbformat.read(LITE / "files" / "notebooks" / notebook, as_version=4)
    local_only = LOCAL_KERNEL_NOTICE in nb.cells[0].source + nb.cells[1].source
    with _lite_page(browser, server) as (page, off, loaded):
        if local_only:
            page.goto(server + "lite/notebooks/index.html?path=notebooks/" + notebook)
            page.wait_for_selector(".jp-MarkdownCell .myst", timeout=120_000)
            texts = markdown_texts(page)
            assert LOCAL_KERNEL_NOTICE in " ".join(texts.values())
        else:
            first_result, all_cells, tracebacks = _run_all(page, server, "notebooks/" + notebook, timeout_s=600)
            print(f"\nlite {notebook}: all cells {all_cells:.1f} s, {loaded[0] / 1e6:.1f} MB")
            assert not tracebacks, tracebacks[:3]
            texts = markdown_texts(page)
        problems = prose_problems(nb, texts) + book_link_problems(source, nb, page, SERVED, book_links.LITE_BASE,
                                                                  server + "book/")
        solutions = [i for i, t in texts.items() if t.lstrip().startswith("Solution")]
    assert not problems, problems[:10]
    assert not solutions, f"solution text on the learner's page: cells {solutions}"
    assert not off, off[:5]


def test_kernel_closure_is_in_the_official_lock():
    from kvbook.live import vendor_pyodide
    lock_path = vendor_pyodide.NPM_DIR / "pyodide-lock.json"
    if not lock_path.exists():
        pytest.skip("node_modules/pyodide missing (npm ci)")
    names = vendor_pyodide.closure(json.loads(lock_path.read_text()),
                                   (*vendor_pyodide.PACKAGES, *vendor_pyodide.KERNEL_PACKAGES))
    # ipython's depends spell prompt_toolkit; the lock's key is prompt-toolkit
    for name in ("micropip", "ssl", "openssl", "sqlite3", "ipython", "traitlets", "prompt-toolkit",
                 "numpy", "matplotlib"):
        assert name in names


def test_the_files_wheel_places_the_repository_files_where_the_chapters_read_them(tmp_path):
    import subprocess
    import zipfile
    wheel = workshop_lite.build_files_wheel(tmp_path / "whl")
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    work = tmp_path / "drive" / "notebooks"
    work.mkdir(parents=True)
    code = ("import kvmath_lite_files, pathlib; "
            "p = pathlib.Path('..') / 'tests/data/hf_configs/openai--gpt-oss-20b/config.json'; "
            "assert p.is_file(), p; assert p.read_bytes() == pathlib.Path(kvmath_lite_files.__file__).parent.joinpath("
            "'_repo', 'tests/data/hf_configs/openai--gpt-oss-20b/config.json').read_bytes()")
    subprocess.run([sys.executable, "-c", code], cwd=work, check=True,
                   env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"})
