"""Every chapter's figure functions (kvbook.figures) build with their defaults.

A static figure is a matplotlib Figure; an interactive one has the controls
the chapter shows, with their defaults, and carries its call (module,
function, keyword arguments), which the page's live layer repeats.
"""

from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402

from kvbook import plots  # noqa: E402
from kvbook.figures import load_all  # noqa: E402
from kvbook.interactive import Choice, InteractiveFigure  # noqa: E402


def chapter_figures(chapter: str) -> dict:
    """``{name: function}`` of the registered figures of ``chapter`` ("ch01")."""
    return {name.split(".", 1)[1]: fn for name, fn in load_all().items() if name.split(".", 1)[0] == chapter}


def check_chapter(chapter: str, expected: dict) -> None:
    """Call every figure of ``chapter`` with its defaults and compare with ``expected``.

    ``expected`` maps each function's name to ``None`` (a static figure) or to
    ``{control: (kind, default)}`` (an interactive one; kind "slider" or "choice").
    """
    functions = chapter_figures(chapter)
    assert sorted(functions) == sorted(expected), f"{chapter}'s registered figures"
    for name, fn in functions.items():
        fig = fn()
        if expected[name] is None:
            assert isinstance(fig, Figure), f"{chapter}.{name} is not a static figure"
            plots.close(fig)
            continue
        assert isinstance(fig, InteractiveFigure), f"{chapter}.{name} is not interactive"
        controls = {k: ("choice" if isinstance(c, Choice) else "slider", c.default) for k, c in fig.controls.items()}
        assert controls == expected[name], f"{chapter}.{name}'s controls"
        assert fig.call == {"module": f"kvbook.figures.{chapter}", "function": name, "kwargs": {}, "static": ""}


def test_chapter_01_figures_build():
    check_chapter("ch01", {
        "step_at_batch_1": None,
        "roofline_h100": None,
        "intensity_vs_batch": None,
        "roofline_live": {"chip": ("choice", "h100-sxm"), "batch": ("slider", 1)},
    })


def test_chapter_02_figures_build():
    check_chapter("ch02", {
        "kvcache_presets": None,
        "kvcache_live": {"model": ("choice", "codellama-7b"), "context": ("slider", 8192), "batch": ("slider", 16),
                         "kv_dtype": ("choice", "bf16"), "chip": ("choice", "a100-80gb")},
    })


def test_chapter_03_figures_build():
    check_chapter("ch03", {
        "ms_example": None,
        "ms_curve": None,
        "minstep_live": {"batch": ("slider", 256), "context": ("slider", 8192), "chips": ("slider", 16),
                         "weights": ("choice", "int8"), "kv_per_token": ("slider", 100e3)},
    })


def test_chapter_04_figures_build():
    check_chapter("ch04", {
        "bc_crossing": None,
        "bc_fraction": None,
        "bcrit_live": {"batch": ("slider", 128), "chip": ("choice", "h100-sxm"), "weights": ("choice", "bf16"),
                       "math": ("choice", "bf16")},
    })


def test_chapter_05_figures_build():
    check_chapter("ch05", {
        "share_design": None,
        "share_h100": None,
        "share_window": None,
        "share_live": {"kv_heads": ("slider", 8), "model": ("choice", "llama-2-70b"), "chip": ("choice", "h100-sxm")},
    })
