"""The in-browser runtime's pieces, without a browser: vendoring and the figure code cut.

* ``packages/kvbook/kvbook/live/vendor_pyodide.py`` takes exactly the lock's closure of numpy and
  matplotlib and refuses any wheel whose sha256 differs from the official
  ``pyodide-lock.json``.
* ``packages/kvbook/kvbook/live/figure_code.py`` keeps what a figure needs and nothing else (no
  glue, no checks), and every chapter's figure code runs natively and makes
  the figures its page shows.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from kvbook.live import figure_code, vendor_pyodide

ROOT = Path(__file__).resolve().parents[2]

NPM = ROOT / "node_modules" / "pyodide"


def test_the_wheels_are_the_lock_closure_of_numpy_and_matplotlib():
    if not (NPM / "pyodide-lock.json").exists():
        pytest.skip("node_modules/pyodide missing (npm ci)")
    lock = vendor_pyodide.read_lock()
    names = vendor_pyodide.closure(lock)
    # the design note's 13 wheels (shared/design/browser-python.md)
    assert names == sorted(["contourpy", "cycler", "fonttools", "kiwisolver", "matplotlib",
                            "matplotlib-pyodide", "numpy", "packaging", "pillow", "pyparsing",
                            "python-dateutil", "pytz", "six"])
    assert lock["info"]["version"] == vendor_pyodide.VERSION == "0.27.7"


def _fake_npm(tmp_path: Path, wheel_bytes: bytes) -> Path:
    npm = tmp_path / "npm"
    npm.mkdir()
    (npm / "package.json").write_text(json.dumps({"version": vendor_pyodide.VERSION}))
    for name in vendor_pyodide.CORE:
        if name != "pyodide-lock.json":
            (npm / name).write_bytes(b"core " + name.encode())
    lock = {"info": {"version": vendor_pyodide.VERSION, "python": "3.12.7", "platform": "emscripten_3_1_58"},
            "packages": {name: {"name": name, "version": "1.0", "depends": [],
                                "file_name": f"{name}-1.0-py3-none-any.whl",
                                "sha256": hashlib.sha256(wheel_bytes).hexdigest()}
                         for name in vendor_pyodide.PACKAGES}}
    (npm / "pyodide-lock.json").write_text(json.dumps(lock))
    return npm


def _vendor_fake_wheels(tmp_path, member: str, text: str):
    """Vendor one fake wheel (holding ``member``) per package, with a lock that matches it.

    Returns the wheel's bytes, the wheel source, the fake npm package and the filled cache."""
    import io
    import zipfile

    good = io.BytesIO()
    with zipfile.ZipFile(good, "w") as zf:
        zf.writestr(member, text)
    npm = _fake_npm(tmp_path, good.getvalue())
    source = tmp_path / "wheels"
    source.mkdir()
    for name in vendor_pyodide.PACKAGES:
        (source / f"{name}-1.0-py3-none-any.whl").write_bytes(good.getvalue())
    cache = vendor_pyodide.vendor(tmp_path / "cache", wheels_from=source, npm_dir=npm, fontlist=False)
    return good, source, npm, cache


def test_a_wheel_that_does_not_match_the_lock_fails_the_vendoring(tmp_path):
    good, source, npm, cache = _vendor_fake_wheels(tmp_path, "x-1.0.dist-info/LICENSE", "MIT licence text")
    assert vendor_pyodide.vendored(cache) == cache
    assert "MIT licence text" in (cache / vendor_pyodide.LICENSES).read_text()

    (source / "numpy-1.0-py3-none-any.whl").write_bytes(good.getvalue() + b"tampered")
    (cache / "numpy-1.0-py3-none-any.whl").unlink()
    with pytest.raises(vendor_pyodide.VendorError, match="does not match the official"):
        vendor_pyodide.vendor(tmp_path / "cache", wheels_from=source, npm_dir=npm, fontlist=False)


def test_a_cache_with_a_changed_file_is_not_complete(tmp_path):
    _, _, _, cache = _vendor_fake_wheels(tmp_path, "x-1.0.dist-info/METADATA", "Name: x\nLicense: BSD\n\nbody")
    (cache / "numpy-1.0-py3-none-any.whl").write_bytes(b"short")
    assert vendor_pyodide.vendored(cache) is None


def _notebook(*sources: str) -> dict:
    return {"cells": [{"cell_type": "code", "metadata": {}, "source": s} for s in sources]}


def test_the_cut_keeps_what_the_figure_reads_and_drops_glue_and_checks():
    nb = _notebook(
        "import numpy as np\nimport kvmath\nfrom myst_nb import glue",
        "SCALE = 2.0\nunused = kvmath.Chip.preset('h100-sxm')\nglue('x', 1, display=False)",
        "rows = []\nfor k in range(3):\n    rows.append(k * SCALE)",
        "kvbook.check_table([('a', None, '1')])\nprint(rows)",
        "%matplotlib inline\nfrom kvbook.interactive import Slider, interactive_figure\n"
        "def setup(fig):\n    ax = fig.add_subplot()\n    (line,) = ax.plot([0, 1], [0, 1])\n"
        "    def update(slope):\n        line.set_ydata([0, slope * SCALE + len(rows)])\n    return update\n"
        "interactive_figure(setup, {'slope': Slider([1, 2, 4], default=2)})",
        "after = 1",
    )
    found = figure_code.extract(nb)
    code = found["code"]
    assert "SCALE = 2.0" in code and "rows.append(k * SCALE)" in code
    assert "unused" not in code and "check_table" not in code and "print(rows)" not in code
    assert "glue('x'" not in code and "myst_nb" not in code and "after = 1" not in code
    assert "%matplotlib" not in code
    assert found["figures"] == [{"cell": 4, "static": False, "reason": ""}]
    from kvbook.live import helpers as kvmath_live

    figs = kvmath_live.run(code)
    assert len(figs) == 1 and figs[0].main == "slope"
    png, texts = kvmath_live.render(0, json.dumps({"slope": 2}))
    assert png[:4] == b"\x89PNG"


def test_a_figure_that_measures_the_machine_is_static():
    nb = _notebook("import kvmath.measure as measure\nW = measure.memory_bandwidth(1e6)",
                   "from kvbook.interactive import Slider, interactive_figure\n"
                   "def setup(fig):\n    def update(s):\n        return s * W\n    return update\n"
                   "interactive_figure(setup, {'s': Slider([1, 2])})")
    found = figure_code.extract(nb)
    assert "measure.memory_bandwidth" in found["code"]
    assert found["figures"][0]["static"] and "kvmath.measure" in found["figures"][0]["reason"]


FIGURE_NOTEBOOKS = [p for p in sorted((ROOT / "notebooks").glob("*.ipynb"))
                    if figure_code.extract_file(p) is not None]


@pytest.mark.parametrize("path", FIGURE_NOTEBOOKS, ids=lambda p: p.stem)
def test_every_chapter_figure_code_runs_and_makes_its_figures(path):
    from kvbook.live import helpers as kvmath_live

    found = figure_code.extract_file(path)
    if all(f["static"] for f in found["figures"]):
        pytest.skip("static figure: its code measures the machine (not run in the browser)")
    cwd = os.getcwd()
    os.chdir(ROOT / "notebooks")
    try:
        figs = kvmath_live.run(found["code"], path.name)
    finally:
        os.chdir(cwd)
    assert len(figs) == len(found["figures"])
    specs = json.loads(kvmath_live.specs())
    for fig, spec in zip(figs, specs):
        assert spec["main"] == fig.main
        assert [c["name"] for c in spec["controls"]] == list(fig.controls)
