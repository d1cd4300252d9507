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


def _chapter_figures(chapter: str) -> dict:
    return {name.split(".", 1)[1]: fn for name, fn in ALL.items() if name.split(".", 1)[0] == chapter}


def _check_chapter_figures(chapter: str, static: set[str], interactive: dict[str, dict]):
    """Every figure of ``chapter`` builds; the interactive ones have these controls at these defaults.

    Each interactive one is also built with every control off its default and
    must carry exactly that call, so the page repeats the reader's own figure.
    """
    from matplotlib.figure import Figure

    from kvbook.interactive import InteractiveFigure

    found = _chapter_figures(chapter)
    assert set(found) == static | set(interactive), sorted(found)
    for name in static:
        assert isinstance(found[name](), Figure), name
    for name, values in interactive.items():
        made = found[name]()
        assert isinstance(made, InteractiveFigure), name
        assert made.values == values, name
        other = {key: next(v for v in made.controls[key].values if v != default)
                 for key, default in values.items()}
        moved = found[name](**other)
        assert moved.values == other, name
        assert moved.call == {"module": f"kvbook.figures.{chapter}", "function": name, "kwargs": other,
                              "static": ""}


def test_chapter_06_figures_build():
    _check_chapter_figures("ch06", {"ttft_by_prompt", "tensor_parallel_scaling", "quantized_throughput", "paging"},
                   {"step_and_memory": {"batch": 16, "weights": "bf16", "kv": "bf16", "chips": 2}})


def test_chapter_07_figures_build():
    _check_chapter_figures("ch07", {"speed_by_context", "compute_ceiling", "bytes_by_split", "prefill_split"},
                           {"bytes_per_gpu": {"context": 8192, "kv_heads": 32, "batch": 16, "n_gpu": 2,
                                              "shard": "heads", "eff": 0.7}})


def test_chapter_08_figures_build():
    _check_chapter_figures("ch08", {"cache_by_batch", "step_by_batch", "largest_batch_by_chip"},
                           {"planner": {"model": "kipply-52b", "chip": "a100-kipply", "n_chips": 3, "split": "batch",
                                        "weight_dtype": "fp16", "kv_dtype": "fp16", "context": 2048}})


def test_chapter_09_figures_build():
    _check_chapter_figures("ch09", {"experts_touched", "expert_parallel_all_to_all"},
                           {"weight_bytes_read": {"batch": 16, "model": "deepseek-v3", "tokens_per_seq": 1}})


def test_chapter_10_figures_build():
    _check_chapter_figures("ch10", {"verify_steps", "expected_tokens", "speedup_by_batch"},
                           {"speedup_live": {"gamma": 4, "acceptance": 0.8, "model": "llama-8b"}})
