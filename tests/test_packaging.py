"""kvmath is the library only: numpy is its one dependency, and the book's machinery is kvbook.

The wheels are the ones the live figures ship to the browser
(``kvbook.live.vendor_pyodide.build_wheel``: ``pip wheel --no-deps --no-build-isolation
--no-index`` of a copy of the package), so these checks are about what a reader's
browser loads, not only about ``pyproject.toml``.
"""

from __future__ import annotations

import email.parser
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kvbook.live import vendor_pyodide

ROOT = Path(__file__).resolve().parents[1]
BOOK_ONLY = ("matplotlib", "ipywidgets", "IPython", "sphinx", "docutils", "myst_nb", "kvbook")


def _loaded_after(statement: str, top_level: bool = True) -> list[str]:
    """Names of the modules loaded by ``statement`` in a fresh interpreter (top-level packages, or every module)."""
    code = f"import sys; {statement}; import json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return sorted({name.split(".")[0] if top_level else name for name in json.loads(out.stdout)})


def test_import_kvmath_loads_no_plotting_widget_or_sphinx_code():
    # the public names load on first use: ask for one, and every kvmath module a question needs is loaded
    asked = "import kvmath; kvmath.Deployment('llama-3-8b', 'h100-sxm').step(1, 1); kvmath.formulas"
    loaded = _loaded_after(asked, top_level=False)
    assert "kvmath.deployment" in loaded and "kvmath.formulas" in loaded and "numpy" in loaded
    assert [name for name in _loaded_after(asked) if name in BOOK_ONLY] == []
    assert "kvmath.deployment" not in _loaded_after("import kvmath", top_level=False)  # the bare import: nothing more


def test_import_kvbook_loads_no_matplotlib_until_a_figure_is_asked_for():
    # the tables are light (the JupyterLite kernel and every chapter import them);
    # kvbook.plots / kvbook.interactive bring matplotlib when a chapter imports them
    loaded = _loaded_after("import kvbook")
    assert "kvbook" in loaded and "kvmath" in loaded
    assert [name for name in loaded if name in ("matplotlib", "ipywidgets", "sphinx")] == []
    assert "matplotlib" in _loaded_after("import kvbook.plots")


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(z.read(name).decode("utf-8"))


def _top_levels(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {n.split("/")[0] for n in z.namelist() if not n.split("/")[0].endswith(".dist-info")}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    return {name: vendor_pyodide.build_wheel(out / name, name) for name in ("kvmath", "kvbook")}


def test_the_kvmath_wheel_depends_on_numpy_alone_and_holds_only_kvmath(wheels):
    meta = _metadata(wheels["kvmath"])
    assert meta["Name"] == "kvmath"
    assert meta.get_all("Requires-Dist") == ["numpy>=1.23"]
    assert meta.get_all("Provides-Extra") is None  # no plots/interactive extras any more
    assert _top_levels(wheels["kvmath"]) == {"kvmath"}
    with zipfile.ZipFile(wheels["kvmath"]) as z:
        names = set(z.namelist())
    for gone in ("plots.py", "interactive.py", "tables.py"):
        assert f"kvmath/{gone}" not in names, gone


def test_the_kvbook_wheel_holds_the_book_side_and_the_runtime_assets(wheels):
    assert _top_levels(wheels["kvbook"]) == {"kvbook"}
    with zipfile.ZipFile(wheels["kvbook"]) as z:
        names = set(z.namelist())
    # what the page's worker imports (helpers, the figure code's plots and interactive
    # layer) and the two scripts the book build copies beside the pages
    for need in ("kvbook/plots.py", "kvbook/interactive.py", "kvbook/tables.py", "kvbook/live/helpers.py",
                 "kvbook/live/worker.js", "kvbook/live/live.js"):
        assert need in names, need
    assert "kvmath" in " ".join(_metadata(wheels["kvbook"]).get_all("Requires-Dist"))


def test_the_cli_runs_where_kvbook_cannot_be_imported():
    # the CLI is the library's: sys.modules[name] = None makes any import of it fail
    code = ("import sys; sys.modules['kvbook'] = sys.modules['matplotlib'] = None; from kvmath.cli import main; "
            "sys.exit(main(['decode', '--model', 'llama-2-7b', '--hardware', 'h100-sxm', '--batch', '1', "
            "'--context', '4096', '--json']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    # Llama 2 7B, bf16: 2 (K and V) x 32 layers x 32 KV heads x 128 x 2 bytes = 524 288 bytes per token, 4,096 of them
    assert json.loads(out.stdout)["kv_bytes_read"] == 524288 * 4096
