"""The book's own interactive figures, from the chapters' figure functions (kvbook.figures).

``book_figures(path)`` calls every interactive figure function of a chapter
(``notebooks/03_min_step.ipynb`` -> ``kvbook.figures.ch03``) with its
defaults, records the ``setup`` and ``controls`` it hands to
``interactive_figure``, and returns one factory per figure, so a test or a
benchmark can make the figure again with other options (``make(blit=False)``).
No figure is written a second time, and nothing is cut out of a notebook.
A figure function whose parameters have no defaults (it draws the chapter's
own computed rows) is left out unless ``values`` supplies them (the test
passes tests/book/test_figures.py's record of the chapter's values).

Used by tests/book/test_plots_interactive.py (blitted pixels equal full redraws)
and benchmarks/bench_slider.py (time per move on real figures).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
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
def _recording(record: Callable):
    import kvbook.interactive as ki

    saved = ki.interactive_figure
    ki.interactive_figure = record  # the figure functions import it when called
    try:
        yield
    finally:
        ki.interactive_figure = saved


def _callable_with_defaults(fn: Callable) -> bool:
    return all(p.default is not inspect.Parameter.empty for p in inspect.signature(fn).parameters.values())


def book_figures(path: str | Path, values: dict | None = None) -> list[BookFigure]:
    """One :class:`BookFigure` per interactive figure function of ``path``'s chapter (``NN_*.ipynb``).

    ``values`` maps ``"chNN.name"`` to the keyword arguments of a figure whose
    parameters have no defaults (the chapter's own computations); one left out
    is skipped.
    """
    values = values or {}
    import matplotlib

    matplotlib.use("Agg")
    from kvbook import figures
    from kvbook.interactive import InteractiveFigure

    chapter = f"ch{Path(path).name[:2]}"
    try:
        importlib.import_module(f"kvbook.figures.{chapter}")  # registers the chapter's figures
    except ModuleNotFoundError:
        return []
    found: list[BookFigure] = []
    for name, fn in figures.REGISTRY.items():
        if not name.startswith(chapter + ".") or fn.static or not (name in values or _callable_with_defaults(fn)):
            continue

        def record(setup, controls, main=None, _name=name, **kwargs):
            found.append(BookFigure(_name, setup, dict(controls), {"main": main, **kwargs}))
            return InteractiveFigure(setup, controls, main=main, **kwargs)

        with _recording(record):
            fn(**values.get(name, {}))
    return found


if __name__ == "__main__":  # list what each chapter gives, and how long it takes
    import sys
    import time

    for nb in sys.argv[1:] or sorted(NOTEBOOKS.glob("*.ipynb")):
        t0 = time.perf_counter()
        print(f"{Path(nb).name}: {book_figures(nb)} in {time.perf_counter() - t0:.1f} s")
