"""Every chapter figure is a kvbook.figures function that builds with its defaults, and the live layer can repeat it.

The notebooks call these functions; the published page's Web Worker calls them
again from the call each interactive figure carries in its HTML
(kvbook.live.figure_calls), so a figure that does not rebuild from its call
would leave the page's controls dead.
"""

from __future__ import annotations

import pytest

from kvbook import figures
from kvbook.live import figure_calls

ALL = figures.load_all()


def test_some_chapters_have_figure_functions():
    assert "ch00.roofline_point" in ALL and "ch00.weights_against_math" in ALL


@pytest.mark.parametrize("name", sorted(ALL))
def test_each_figure_builds_with_its_defaults_and_an_interactive_one_carries_its_call(name):
    from matplotlib.figure import Figure

    from kvbook.interactive import InteractiveFigure

    made = ALL[name]()
    assert isinstance(made, (Figure, InteractiveFigure)), name
    if isinstance(made, InteractiveFigure):
        module, function = name.split(".")
        assert made.call == {"module": f"kvbook.figures.{module}", "function": function, "kwargs": {},
                             "static": ALL[name].static}
        page_calls = figure_calls.calls(made.to_html())
        assert page_calls == [made.call]
        namespace: dict = {}
        exec(figure_calls.code(page_calls)["code"], namespace)  # what the browser's worker runs
        again = namespace["_kvmath_figures"]
        assert len(again) == 1 and isinstance(again[0], InteractiveFigure)
        assert list(again[0].controls) == list(made.controls) and again[0].values == made.values


def test_a_figure_argument_must_be_a_json_value():
    with pytest.raises(ValueError, match="arguments must be JSON values"):
        ALL["ch00.roofline_point"](chip=object())


def test_the_page_code_imports_each_chapter_once_and_calls_in_display_order():
    calls = [{"module": "kvbook.figures.ch00", "function": "roofline_point", "kwargs": {"batch": 4}, "static": ""},
             {"module": "kvbook.figures.ch00", "function": "roofline_point", "kwargs": {}, "static": "why"}]
    out = figure_calls.code(calls)
    assert out["code"].count("import kvbook.figures.ch00 as _chapter0") == 1
    assert out["code"].index("(**{'batch': 4})") < out["code"].index("(**{})")
    assert out["figures"] == [{"cell": 0, "static": False, "reason": ""}, {"cell": 1, "static": True, "reason": "why"}]


def _chapter_figures(chapter: str, static: set, interactive: dict):
    """Chapter ``chapter``'s registered figures are exactly ``static`` (matplotlib) and ``interactive``.

    ``interactive`` maps a function to its controls' defaults, in the order the controls are shown.
    """
    from matplotlib.figure import Figure

    from kvbook.interactive import InteractiveFigure

    assert {n for n in ALL if n.startswith(f"{chapter}.")} == {f"{chapter}.{n}" for n in static | set(interactive)}
    for name in static:
        assert isinstance(ALL[f"{chapter}.{name}"](), Figure), name
    for name, defaults in interactive.items():
        made = ALL[f"{chapter}.{name}"]()
        assert isinstance(made, InteractiveFigure), name
        assert made.values == defaults and list(made.controls) == list(defaults), name
        assert made.call["function"] == name and made.call["module"] == f"kvbook.figures.{chapter}"
        assert figure_calls.calls(made.to_html()) == [made.call]


def test_chapter_11_figures_build():
    _chapter_figures("ch11", {"serving_frontier", "interference"},
                     {"serving_live": {"batch": 64, "model": "llama-3-8b", "chip": "h200"}})
    # the notebook's own values travel in the call, so the page's live layer repeats them
    fig = ALL["ch11.serving_live"](batch=8, price_per_chip_hour=3.0)
    assert fig.values["batch"] == 8 and fig.call["kwargs"] == {"batch": 8, "price_per_chip_hour": 3.0}


def test_chapter_13_figures_build():
    _chapter_figures("ch13", {"regimes", "overhead"}, {"two_costs_live": {"t0_ms": 3.5, "eta": 1.0}})


def test_chapter_14_figures_build():
    from kvbook.figures import MEASURES_THE_MACHINE

    # the build machine's measurements, passed as the chapter passes them: W, C and the sweep's medians
    steps = [[b, s, 1e-3 * b * s ** 0.5] for s in (16, 64) for b in (1, 2, 4, 8) if b * s <= 256]
    rates = {"bandwidth": 10e9, "flops": 50e9}
    for name in ("roofline", "knee", "measure_live"):
        assert ALL[f"ch14.{name}"].static == MEASURES_THE_MACHINE, name
    assert {n for n in ALL if n.startswith("ch14.")} == {"ch14.roofline", "ch14.knee", "ch14.measure_live"}
    from matplotlib.figure import Figure

    assert isinstance(ALL["ch14.roofline"](**rates), Figure)
    assert isinstance(ALL["ch14.knee"](steps=steps, **rates), Figure)
    live = ALL["ch14.measure_live"](context=64, steps=steps, **rates)
    # the slider offers exactly the contexts measured, and the call carries the measurements to the page
    assert list(live.controls["context"].values) == [16, 64] and live.values == {"context": 64}
    assert live.call["kwargs"]["steps"] == steps and live.call["static"] == MEASURES_THE_MACHINE
    assert figure_calls.calls(live.to_html()) == [live.call]


def test_chapter_15_figures_build():
    _chapter_figures("ch15", {"kv_by_kind"}, {})


def test_chapter_16_figures_build():
    _chapter_figures("ch16", {"ratios"}, {"windows_live": {"context": 8192}})


def test_chapter_12_figures_build():
    from kvbook.figures import ch12
    from kvmath.calibration import calibrate

    keys = [r["key"] for r in ch12.LIVE_ROWS]
    _chapter_figures("ch12", {"mbu", "comm"}, {"reality_live": {"row": "1", "fraction": 0.7}})
    assert list(ALL["ch12.reality_live"]().controls["row"].values) == keys
    # the defaults are the chapter's rows as computed when written: each phi is still kvmath.calibration's (6 digits)
    phis = [c.ratio for c in calibrate()]
    for r in ch12.LIVE_ROWS:
        assert min(abs(r["ratio"] / p - 1) for p in phis) < 1e-5, r["key"]
