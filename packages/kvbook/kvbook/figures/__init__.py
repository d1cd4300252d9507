"""Each chapter's figures, as functions with explicit parameters.

A chapter's notebook shows a figure by calling its function as the cell's
last expression (``ch00.roofline_point()``, no trailing semicolon: the
returned figure is what the cell shows); the published page's live layer calls the same
function in the reader's browser, and the tests and benchmarks call it too.
So a figure's code exists once, here, and no tool has to cut it out of a
notebook. Module ``chNN`` holds chapter NN's figures.

:func:`figure` registers a function. An interactive figure it returns
remembers the call (``InteractiveFigure.call``: module, function and keyword
arguments), which the page's HTML carries, so the build knows exactly what
the browser must call, with what. Keyword arguments must be JSON values
(numbers, strings, lists): presets are passed by name.
"""

from __future__ import annotations

import functools
import importlib
import json
import pkgutil
from typing import Callable

#: kipply's A100 bandwidth: the A100-40GB's 1.555 TB/s rounded to 1.5 TB/s, as the thread does (chapters 0 and 8).
KIPPLY_BANDWIDTH = 1.5e12


def model_options(names=None) -> list[tuple[str, str]]:
    """``(display name, preset id)`` pairs for a model :class:`~kvbook.interactive.Choice` (every preset by default).

    A reader sees "Llama 2 7B", not ``llama-2-7b``: ids are for code and the CLI.
    """
    import kvmath

    return [(kvmath.Model.preset(n).display_name, n) for n in (kvmath.Model.presets() if names is None else names)]


def chip_options(names=None) -> list[tuple[str, str]]:
    """``(display name, preset id)`` pairs for a chip :class:`~kvbook.interactive.Choice` (every preset by default)."""
    import kvmath

    return [(kvmath.Chip.preset(n).display_name, n) for n in (kvmath.Chip.presets() if names is None else names)]


#: Every registered figure function, by "chNN.name".
REGISTRY: dict[str, Callable] = {}

#: Why a figure that measures this machine keeps its build-time frames in the browser.
MEASURES_THE_MACHINE = (
    "This figure stays as rendered when the book was built: its code measures the machine it runs on "
    "(kvmath.measure), at sizes (hundreds of MB copied, 2048\u00b3 matrix products) that take minutes in "
    "WebAssembly, and the figure shows the build machine's measurements. Every value of its slider was rendered "
    "then; run the chapter with make lab to measure your own machine.")


def figure(fn: Callable | None = None, *, static: str = "") -> Callable:
    """Register ``fn`` as a chapter figure; with ``static``, its page keeps the build's frames (say why).

    The wrapped function takes keyword arguments only, each a JSON value.
    """
    def register(fn: Callable) -> Callable:
        chapter = fn.__module__.rsplit(".", 1)[-1]

        @functools.wraps(fn)
        def call(**kwargs):
            try:
                json.dumps(kwargs)
            except TypeError as err:
                raise ValueError(f"{chapter}.{fn.__name__}: arguments must be JSON values (pass presets by "
                                 f"name): {err}") from None
            fig = fn(**kwargs)
            if type(fig).__name__ == "Figure":
                if getattr(fig, "number", None) is not None:
                    # a pyplot figure: the cell shows the returned figure once, not pyplot's copy at the cell's end too
                    import matplotlib.pyplot as plt

                    plt.close(fig)
                from kvbook.plots import BookCanvas

                BookCanvas(fig)  # the PNG the cell shows records its smallest text (kvbook.plots.png_text)
            if hasattr(fig, "to_html"):  # an InteractiveFigure: the page's live layer will call us again
                fig.call = {"module": fn.__module__, "function": fn.__name__, "kwargs": kwargs,
                            "static": static}
            return fig

        call.static = static
        REGISTRY[f"{chapter}.{fn.__name__}"] = call
        return call

    return register(fn) if fn is not None else register


def load_all() -> dict[str, Callable]:
    """Import every chapter module and return :data:`REGISTRY` (name -> function)."""
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("ch"):
            importlib.import_module(f"{__name__}.{info.name}")
    return dict(REGISTRY)
