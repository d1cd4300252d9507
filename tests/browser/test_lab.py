"""A chapter opened in JupyterLab (`make lab`'s environment) reads as it does in the book.

Starts JupyterLab from this environment headless on localhost, as `make lab` does: on copies
of the chapters written by kvbook.lab (into a temporary folder, so nothing is written into
notebooks/ or _build/lab/), with the server extension that serves the built book at /book/.
Opens one chapter in a fresh workspace and reads its Markdown cells twice: as opened (the
numbers come from the results `make refresh` stored, before any cell runs) and after Run All
(the kernel evaluates every inline expression again, through jupyterlab-myst). Each time every
number the book prints in a paragraph is in that paragraph, and no role, label, directive fence
or numpy repr shows; every reference and citation is a link into the book that the server
serves (review R21-9: citations showed as bare keys). Another chapter, only opened and left to
JupyterLab's autosave (every 5 s here), is still the copy `make lab` wrote in what a reader
sees, so a newer chapter renews it (review R21c-2).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

import json

from kvbook import lab as kvbook_lab

from tests.browser.rendered_prose import (EDIT, book_link_problems, edit_code_cell, markdown_texts, prose_problems,
                                          run_all_cells)

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = EDIT["notebook"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    if not (kvbook_lab.BOOK_BUILD / "html" / "index.html").exists():
        pytest.fail("the built book is missing: make book")
    assert kvbook_lab.prepare(root) == []
    settings = root / "settings" / "@jupyterlab" / "docmanager-extension"
    settings.mkdir(parents=True)
    (settings / "plugin.jupyterlab-settings").write_text('{"autosaveInterval": 5}')
    port = _free_port()
    jupyter = Path(sys.executable).with_name("jupyter")
    proc = subprocess.Popen(
        [str(jupyter), "lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
         "--IdentityProvider.token=", "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True",
         f"--ServerApp.root_dir={root / 'notebooks'}", "--allow-root", "--LabApp.news_url=None",
         "--ServerApp.jpserver_extensions=kvbook.lab=True",
         "--LabServerApp.workspaces_dir=" + str(root / "workspaces"), f"--LabApp.user_settings_dir={root / 'settings'}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(url + "api/status", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not start in 60 s")
        yield url, root
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _run_all(page) -> None:
    """Run All Cells from the Run menu, wait until every cell has run, and give jupyterlab-myst time to ask the
    kernel for the inline expressions (it does so after each Markdown cell runs)."""
    run_all_cells(page, 180)
    page.wait_for_timeout(3000)


def test_a_chapter_in_jupyterlab_shows_the_books_numbers_and_follows_an_edited_input(lab, browser):
    url, root = lab
    nb = nbformat.read(root / "notebooks" / CHAPTER, as_version=4)
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    try:
        page.goto(f"{url}lab/workspaces/test/tree/{CHAPTER}?reset")
        page.wait_for_selector(".jp-MarkdownCell .jp-RenderedMarkdown, .jp-MarkdownCell .myst", timeout=120_000)
        opened = markdown_texts(page)
        # JupyterLab renders the Markdown cells one after another: on a loaded machine the last ones come seconds
        # later (CI saw cells 15 and 18 of 19 unrendered 3 s after the first), so wait for all, up to a minute
        for _ in range(60):
            if not any(p.startswith("Markdown cells never rendered") for p in prose_problems(nb, opened)):
                break
            page.wait_for_timeout(1000)
            opened = markdown_texts(page)
        assert not prose_problems(nb, opened), prose_problems(nb, opened)[:10]
        # references and citations are links into the book, which this server serves (review R21-9)
        served = root / "served"
        served.mkdir(exist_ok=True)
        if not (served / "book").exists():
            (served / "book").symlink_to(kvbook_lab.BOOK_BUILD / "html")
        source = nbformat.read(ROOT / "notebooks" / CHAPTER, as_version=4)
        links = book_link_problems(source, nb, page, served, "/book/", url + "book/")
        assert not links, links[:10]
        href = page.evaluate("() => document.querySelector('.jp-MarkdownCell a[href^=\"/book/\"]').getAttribute('href')")
        with urllib.request.urlopen(url + href.lstrip("/").split("#")[0], timeout=10) as reply:
            assert reply.status == 200 and b"<title>" in reply.read()
        # code the book hides opens collapsed (review R21-2): one input placeholder per such cell, none other
        hidden = sum(1 for c in nb.cells if c.cell_type == "code" and c.metadata.get("jupyter", {}).get("source_hidden"))
        assert hidden and page.locator(".jp-CodeCell .jp-InputPlaceholder").count() == hidden
        _run_all(page)
        after = markdown_texts(page)
        assert not prose_problems(nb, after), prose_problems(nb, after)[:10]
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").all_inner_texts()
        assert not [e for e in errors if "Traceback" in e or "Error" in e], errors[:3]
        # the reader changes an input and runs the chapter again: the prose follows
        assert EDIT["before"] in after[EDIT["prose_cell"]]
        edit_code_cell(page, EDIT["cell"], EDIT["old"], EDIT["new"])
        _run_all(page)
        edited = markdown_texts(page)
        assert EDIT["after"] in edited[EDIT["prose_cell"]], edited[EDIT["prose_cell"]]
    finally:
        page.close()


def test_a_chapter_only_opened_and_autosaved_is_renewed_when_its_chapter_changes(lab, browser):
    url, root = lab
    chapter = "11_serving.ipynb"
    path = root / "notebooks" / chapter
    written = path.read_bytes()
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    try:
        page.goto(f"{url}lab/workspaces/opened/tree/{chapter}?reset")
        page.wait_for_selector(".jp-MarkdownCell .myst", timeout=120_000)
        for _ in range(60):                 # the kernel starts, JupyterLab marks the tab changed and saves it
            page.wait_for_timeout(1000)
            if path.read_bytes() != written and not page.locator(".lm-TabBar-tab.jp-mod-dirty").count():
                break
        assert path.read_bytes() != written, "JupyterLab never saved the opened chapter: the check checks nothing"
    finally:
        page.close()
    manifest_path = root / kvbook_lab.MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest[chapter]["source"] = "0" * 64   # as if the chapter changed in notebooks/
    manifest_path.write_text(json.dumps(manifest))
    assert kvbook_lab.prepare(root) == []
    assert path.read_bytes() == written, "the copy only opened is written anew"
