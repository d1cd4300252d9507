"""The book's own interactive figures, taken from the chapters' notebooks.

``book_figures(path)`` runs a notebook's code cells in this process, in
order, up to its last ``interactive_figure`` call, with ``myst_nb.glue`` and
``IPython.display.display`` stubbed, and returns one factory per figure: the
chapter's own ``setup`` and ``controls``, so a test or a benchmark can make
the figure again with other options (``make(blit=False)``). The code is the
notebook's, unchanged: no figure is written a second time.

Used by tests/book/test_plots_interactive.py (blitted pixels equal full redraws)
and benchmarks/bench_slider.py (time per move on real figures).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import types
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


class BookFigure:
    """One interactive figure of a chapter: ``make(**options)`` builds it anew."""

    def __init__(self, name: str, setup: Callable, controls: dict, kwargs: dict) -> None:
        self.name, self.setup, self.controls, self.kwargs = name, setup, controls, kwargs

    def make(self, **options: Any):
        from kvbook.interactive import InteractiveFigure

        return InteractiveFigure(self.setup, self.controls, **{**self.kwargs, **options})

    def __repr__(self) -> str:
        return f"<BookFigure {self.name} controls={list(self.controls)}>"


@contextlib.contextmanager
def _stubs(record: Callable):
    import kvbook.interactive as ki

    saved_mod = {k: sys.modules.get(k) for k in ("myst_nb",)}
    fake = types.ModuleType("myst_nb")
    fake.glue = lambda *a, **k: None
    sys.modules["myst_nb"] = fake
    import IPython.display as ipd

    saved = (ki.interactive_figure, ipd.display)
    ki.interactive_figure = record
    ipd.display = lambda *a, **k: None
    try:
        yield
    finally:
        ki.interactive_figure = saved[0]
        ipd.display = saved[1]
        for k, v in saved_mod.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def book_figures(path: str | Path) -> list[BookFigure]:
    """Run ``path``'s code cells up to its last figure; one :class:`BookFigure` per figure."""
    import matplotlib

    matplotlib.use("Agg")
    from kvbook.interactive import InteractiveFigure

    path = Path(path)
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    sources = ["".join(c["source"]) for c in cells]
    last = max(i for i, s in enumerate(sources) if "interactive_figure(" in s)
    found: list[BookFigure] = []

    def record(setup, controls, main=None, **kwargs):
        found.append(BookFigure(f"{path.stem}#{len(found) + 1}", setup, dict(controls),
                                {"main": main, **kwargs}))
        return InteractiveFigure(setup, controls, main=main, **kwargs)

    # `display` is a builtin in a Jupyter kernel; the cells' printed text is not needed
    namespace: dict[str, Any] = {"__name__": "__main__", "display": lambda *a, **k: None}
    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        with _stubs(record), contextlib.redirect_stdout(io.StringIO()):
            for i, src in enumerate(sources[: last + 1]):
                code = "\n".join(line for line in src.splitlines()
                                 if not line.lstrip().startswith(("%", "!")))
                exec(compile(code, f"{path.name}[cell {i}]", "exec"), namespace)
    finally:
        os.chdir(cwd)
    return found


if __name__ == "__main__":  # list what each notebook gives, and how long it takes
    import time

    for nb in sys.argv[1:] or sorted(NOTEBOOKS.glob("*.ipynb")):
        t0 = time.perf_counter()
        try:
            figs = book_figures(nb)
        except ValueError as e:
            print(Path(nb).name, "no figure", e)
            continue
        print(f"{Path(nb).name}: {figs} in {time.perf_counter() - t0:.1f} s")
