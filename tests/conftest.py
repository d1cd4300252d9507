"""Shared fixtures (the built book, and a headless Chromium for it) and the markers' rules.

Markers (registered in pytest.ini): a test that uses the ``browser`` fixture is
marked ``browser``; a test under tests/book/ is marked ``book``; ``slow`` is
written on each test that takes more than about 30 s. ``make test`` runs
``-m "not slow"``, ``make test-full`` everything. A selected test that needs
Chromium, poppler or a build that `make test` / `make test-full` makes does not
skip when it is missing: it fails and names the make target.

``pytest`` alone works from a fresh clone: the ``built_book`` fixture builds
the book (``jupyter-book build . -W -n --keep-going``, after ``npm ci`` when
``node_modules`` is missing and the in-browser runtime's vendoring where it is not vendored, as
``make book`` does) if ``_build/html`` is missing or older than any source. ``make test`` builds it first, so the fixture finds it fresh.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
# what the built book depends on: the library, and kvbook's figures, tables, Sphinx
# extensions and live runtime (not its workshop tools, which the book build never runs)
SOURCES = ["_config.yml", "_toc.yml", "book", "notebooks", "kvmath", "packages/kvbook/kvbook/__init__.py",
           "packages/kvbook/kvbook/plots.py", "packages/kvbook/kvbook/diagrams.py", "packages/kvbook/kvbook/interactive.py",
           "packages/kvbook/kvbook/tables.py",
           "packages/kvbook/kvbook/sphinx", "packages/kvbook/kvbook/live", "_static",
           "package-lock.json"]


def _newest_source_mtime() -> float:
    newest = 0.0
    for name in SOURCES:
        path = ROOT / name
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()
                                                  and "__pycache__" not in p.parts
                                                  and ".ipynb_checkpoints" not in p.parts]
        for f in files:
            newest = max(newest, f.stat().st_mtime)
    return newest


def book_is_fresh() -> bool:
    stamp = HTML / "index.html"
    return stamp.exists() and (HTML / "_vendor").is_dir() and stamp.stat().st_mtime >= _newest_source_mtime()


def build_book() -> None:
    """Build the book exactly as `make book` does; fail the test on any warning."""
    if not (ROOT / "node_modules" / "mathjax").is_dir():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm not found: install Node.js with npm to build the book's offline assets")
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=ROOT, check=True)
    from kvbook.live import vendor_pyodide

    if vendor_pyodide.vendored() is None:  # as `make book`: no book without the in-browser runtime
        proc = subprocess.run([sys.executable, "-m", "kvbook.live.vendor_pyodide"], cwd=ROOT, capture_output=True,
                              text=True)
        if proc.returncode != 0:
            pytest.fail(f"the in-browser runtime could not be vendored: {proc.stderr.strip()[-1000:]}")
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb) if jb.exists() else "jupyter-book", "build", ".", "-W", "-n", "--keep-going"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"book build failed ({' '.join(cmd)}):\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}")


@pytest.fixture(scope="session")
def built_book() -> Path:
    """Path to _build/html, built now if missing or stale."""
    if not book_is_fresh():
        build_book()
    return HTML


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium (/usr/bin/chromium) driven by Playwright."""
    from tests.browser.sitecheck import CHROMIUM, launch_browser

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: `make chromium` installs it (apt-get install chromium), "
                    "or deselect these tests with -m 'not browser'")
    with launch_browser() as b:
        yield b


BOOK_TESTS = Path(__file__).resolve().parent / "book"


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these markers
def pytest_collection_modifyitems(config, items):
    """Mark by what a test needs: Chromium (it uses the ``browser`` fixture) or the book (tests/book/)."""
    for item in items:
        if "browser" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)
        if BOOK_TESTS in item.path.parents:
            item.add_marker(pytest.mark.book)
