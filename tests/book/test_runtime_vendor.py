"""The in-browser runtime's pieces, without a browser: vendoring and the figures' code.

* ``packages/kvbook/kvbook/live/vendor_pyodide.py`` takes exactly the lock's closure of numpy and
  matplotlib and refuses any wheel whose sha256 differs from the official
  ``pyodide-lock.json``.
* ``packages/kvbook/kvbook/live/figure_calls.py`` repeats the calls of the page's figure functions,
  and every chapter's page code runs natively, as the worker runs it, and
  renders the figures its page shows.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from kvbook.live import figure_calls, vendor_pyodide

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


def _live_calls() -> dict[str, list[dict]]:
    """Each chapter's live figures as the page's HTML carries them: the call of every figure a bare call builds."""
    from kvbook import figures

    out: dict[str, list[dict]] = {}
    for name, fn in sorted(figures.load_all().items()):
        if fn.static or any(p.default is p.empty for p in __import__("inspect").signature(fn).parameters.values()):
            continue  # a figure of the machine's measurements, or one that needs the chapter's own rows
        made = fn()
        if hasattr(made, "to_html"):
            out.setdefault(name.split(".")[0], []).extend(figure_calls.calls(made.to_html()))
    return out


LIVE = _live_calls()


def test_most_chapters_have_live_figures():
    assert len(LIVE) >= 10, sorted(LIVE)


@pytest.mark.parametrize("chapter", sorted(LIVE))
def test_each_chapter_figure_code_runs_in_the_worker_and_renders(chapter):
    """The page's code (the figure calls) runs as the browser's worker runs it, and each figure renders."""
    from kvbook.live import helpers as kvmath_live

    page = figure_calls.code(LIVE[chapter])
    figs = kvmath_live.run(page["code"], f"{chapter}.py")
    assert len(figs) == len(LIVE[chapter]) == len(page["figures"])
    specs = json.loads(kvmath_live.specs())
    for fig, spec in zip(figs, specs):
        assert spec["main"] == fig.main
        assert [c["name"] for c in spec["controls"]] == list(fig.controls)
    png, texts = kvmath_live.render(0, json.dumps({figs[0].main: 0}))
    assert png[:4] == b"\x89PNG" and json.loads(texts)


def test_a_figure_that_measures_the_machine_is_static_on_its_page():
    from kvbook.figures import MEASURES_THE_MACHINE

    call = {"module": "kvbook.figures.ch14", "function": "measure_live", "kwargs": {}, "static": MEASURES_THE_MACHINE}
    assert figure_calls.code([call])["figures"] == [{"cell": 0, "static": True, "reason": MEASURES_THE_MACHINE}]
