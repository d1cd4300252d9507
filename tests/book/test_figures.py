"""Every chapter figure is a kvbook.figures function that builds with its defaults, and the live layer can repeat it.

The notebooks call these functions; the published page's Web Worker calls them
again from the call each interactive figure carries in its HTML
(kvbook.live.figure_calls), so a figure that does not rebuild from its call
would leave the page's controls dead.
"""

from __future__ import annotations

import inspect

import pytest
from kvbook import figures, plots
from kvbook.interactive import Choice, InteractiveFigure
from kvbook.live import figure_calls
from matplotlib.figure import Figure

ALL = figures.load_all()


# The chapter's values for the figures whose data only the chapter computes (their parameters are required):
# chapter 12's Rows and Gaps and chapter 16's pitfalls, as the refreshed notebooks passed them (6 and 4 digits).
# test_chapter_12_figures_build checks that kvmath.calibration still gives chapter 12's phis.
CH12_MBU_ROWS = (
    ('1', 'Llama-2-7B bf16', 'gpt-fast', 0.682686),
    ('2a', 'Llama-2-7B int8', 'gpt-fast', 0.508355),
    ('2b', 'Llama-2-7B int4 g32', 'gpt-fast', 0.403893),
    ('3a', 'Llama-2-70B int8', 'gpt-fast', 0.645006),
    ('3b', 'Llama-2-70B bf16 TP2', 'gpt-fast', 0.721407),
    ('3c', 'Llama-2-70B bf16 TP8', 'gpt-fast', 0.540758),
    ('4', 'LLaMA-7B fp16 A100', 'TensorRT-LLM', 0.779363),
    ('5', 'LLaMA-7B fp8 H100', 'TensorRT-LLM', 0.734692),
    ('6', 'LLaMA-70B fp8 2xH100 TP2', 'TensorRT-LLM', 0.257496),
    ('7', 'LLaMA-7B fp16 A100', 'TensorRT-LLM', 0.370075),
    ('9', 'PaLM 540B int8 64xTPU v4', 'Pope et al.', 0.249729),
    ('10', 'Llama-3-8B bf16 RTX 4090', 'llama.cpp', 0.882432),
)
CH12_RUN_PHI_7 = 0.599717
CH12_GAPS = (
    ('3b', 'Llama-2-70B bf16 TP2', 0.0338371, 8.87381e-05, 0.00161132, 0.0469043),
    ('3c', 'Llama-2-70B bf16 TP8', 0.00865212, 9.52917e-05, 0.00541181, 0.016),
    ('6', 'LLaMA-70B fp8 2xH100 TP2', 0.0150638, 0.000452827, 0.00123977, 0.0585009),
    ('#471', 'LLaMA 65B fp16 TP8', 0.00797264, 9.52917e-05, 0.00541181, 0.068),
)
CH12_LIVE_ROWS = (
    {'key': '1', 'label': 'Llama-2-7B bf16', 'batch': 1, 'context': 105, 'unit_s': 0.00650784, 'ratio': 0.682672,
     't_meas_s': 0.00953289, 'kind': 'seq', 'n_chips': 1, 'binds': 'memory'},
    {'key': '2a', 'label': 'Llama-2-7B int8', 'batch': 1, 'context': 105, 'unit_s': 0.00326735, 'ratio': 0.508335,
     't_meas_s': 0.00642756, 'kind': 'seq', 'n_chips': 1, 'binds': 'memory'},
    {'key': '2b', 'label': 'Llama-2-7B int4 g32', 'batch': 1, 'context': 105, 'unit_s': 0.00205217, 'ratio': 0.403868,
     't_meas_s': 0.0050813, 'kind': 'seq', 'n_chips': 1, 'binds': 'memory'},
    {'key': '3a', 'label': 'Llama-2-70B int8', 'batch': 1, 'context': 105, 'unit_s': 0.0337169, 'ratio': 0.645004,
     't_meas_s': 0.0522739, 'kind': 'seq', 'n_chips': 1, 'binds': 'memory'},
    {'key': '3b', 'label': 'Llama-2-70B bf16 TP2', 'batch': 1, 'context': 105, 'unit_s': 0.0338371, 'ratio': 0.721406,
     't_meas_s': 0.0469043, 'kind': 'seq', 'n_chips': 2, 'binds': 'memory'},
    {'key': '3c', 'label': 'Llama-2-70B bf16 TP8', 'batch': 1, 'context': 105, 'unit_s': 0.00865211, 'ratio': 0.540757,
     't_meas_s': 0.016, 'kind': 'seq', 'n_chips': 8, 'binds': 'memory'},
    {'key': '4', 'label': 'LLaMA-7B fp16 A100', 'batch': 60, 'context': 1152, 'unit_s': 0.0243983, 'ratio': 0.783998,
     't_meas_s': 0.0311203, 'kind': 'batch', 'n_chips': 1, 'binds': 'memory'},
    {'key': '5', 'label': 'LLaMA-7B fp8 H100', 'batch': 112, 'context': 1152, 'unit_s': 0.0121089, 'ratio': 0.73713,
     't_meas_s': 0.0164271, 'kind': 'batch', 'n_chips': 1, 'binds': 'memory'},
    {'key': '6', 'label': 'LLaMA-70B fp8 2xH100 TP2', 'batch': 64, 'context': 3072, 'unit_s': 0.0173136, 'ratio': 0.295955,
     't_meas_s': 0.0585009, 'kind': 'batch', 'n_chips': 2, 'binds': 'memory'},
    {'key': '7', 'label': 'LLaMA-7B fp16 A100', 'batch': 384, 'context': 192, 'unit_s': 0.0412265, 'ratio': 0.599717,
     't_meas_s': 0.0687433, 'kind': 'batch', 'n_chips': 1, 'binds': 'memory'},
    {'key': '9', 'label': 'PaLM 540B int8 64xTPU v4', 'batch': 1, 'context': 2048, 'unit_s': 0.00724214, 'ratio': 0.249729,
     't_meas_s': 0.029, 'kind': 'latency', 'n_chips': 64, 'binds': 'memory'},
    {'key': '10', 'label': 'Llama-3-8B bf16 RTX 4090', 'batch': 1, 'context': 256, 'unit_s': 0.0135349, 'ratio': 0.882614,
     't_meas_s': 0.0153351, 'kind': 'seq', 'n_chips': 1, 'binds': 'memory'},
)

CH16_PITFALLS = (
    ('d_h taken as d / h', 0.625, (0.875, 1.5, 0.625, 0.5, 0.7031, 0.9375, 1.25, 0.5, 0.7031, 1.312)),
    ('KV heads ignored', 8.0, (4.0, 8.0, 5.0, 8.0, 71.0)),
    ('MLA rotary part dropped', 0.8889, (0.8889, 0.8889)),
    ('MLA read as MHA', 71.11, (71.11, 35.56)),
    ('windows charged in full', 5.958, (2.0, 1.333, 5.958, 1.998, 1.998)),
    ('GiB printed as GB', 0.9313, (0.9313, 1.074)),
    ('KV charged twice per step', 1.821, (1.067, 1.364, 1.821, 1.948)),
    ('SwiGLU with 2 matrices', 0.766, (0.766, 0.7337, 0.744, 1.0)),
    ('embedding read every step', 1.161, (1.07, 1.082, 1.102, 1.161, 1.0)),
    ('linear layers as full', 3.952, (3.952,)),
)

#: Chapter 13's out-of-sample rows as computed when written: (id, regime, log(measured / estimate), interval ends).
CH13_ESTIMATE_ROWS = (
    ("gf-7b-bf16", "batch1", 0.0019, -0.2544, 0.1049),
    ("gf-7b-tp8", "multi_chip", -0.5528, -0.1972, 0.7456),
    ("trt-7b-a100-b60", "large_batch", -0.1273, -0.3269, 0.1928),
    ("trt-7b-h100-ttft", "prefill", -0.2030, -0.5568, 0.0915),
    ("meta-65b-tp8", "multi_chip", 1.3193, -0.2502, 0.6451),
    ("xd-4090-8b-q4km", "quantized", 0.0401, -0.2228, 0.1477),
    ("gg-spark-gptoss", "moe", 0.1216, -0.2845, 0.7595),
    ("pov-qwen30-gb200-128-2048", "moe", 0.6970, -0.3401, 0.7863),
)

#: "chNN.name" -> the chapter's keyword arguments for each figure with required parameters.
CHAPTER_VALUES = {
    "ch12.mbu": {"rows": [list(r) for r in CH12_MBU_ROWS], "run_phi": CH12_RUN_PHI_7},
    "ch12.comm": {"gaps": [list(g) for g in CH12_GAPS]},
    "ch12.reality_live": {"rows": [dict(r) for r in CH12_LIVE_ROWS]},
    "ch13.estimates": {"rows": [list(r) for r in CH13_ESTIMATE_ROWS]},
    "ch16.ratios": {"pitfalls": [[label, ratio, list(others)] for label, ratio, others in CH16_PITFALLS]},
}


def required(fn) -> list:
    """The parameters of a figure function without a default."""
    return [n for n, p in inspect.signature(fn).parameters.items() if p.default is inspect.Parameter.empty]


def test_some_chapters_have_figure_functions():
    assert "ch00.roofline_point" in ALL and "ch00.weights_against_math" in ALL


# a figure that measures this machine would time it with its defaults: test_chapter_14_figures_build passes it
# measurements, as the chapter does
@pytest.mark.parametrize("name", sorted(n for n, f in ALL.items() if f.static != figures.MEASURES_THE_MACHINE))
def test_each_figure_builds_with_its_defaults_and_an_interactive_one_carries_its_call(name):
    from kvbook.interactive import InteractiveFigure
    from matplotlib.figure import Figure

    values = CHAPTER_VALUES.get(name, {})  # the chapter's, where only the chapter computes them
    made = ALL[name](**values)
    assert isinstance(made, (Figure, InteractiveFigure)), name
    if isinstance(made, InteractiveFigure):
        module, function = name.split(".")
        assert made.call == {"module": f"kvbook.figures.{module}", "function": function, "kwargs": values,
                             "static": ALL[name].static}
        page_calls = figure_calls.calls(made.to_html())
        assert page_calls == [made.call]
        namespace: dict = {}
        exec(figure_calls.code(page_calls)["code"], namespace)  # what the browser's worker runs
        again = namespace["_kvmath_figures"]
        assert len(again) == 1 and isinstance(again[0], InteractiveFigure)
        assert list(again[0].controls) == list(made.controls) and again[0].values == made.values


def test_only_the_chapter_computed_data_is_required_and_a_bare_call_names_it():
    # a default that only the chapter can compute would go stale, so it is required instead; every such figure
    # has its chapter's values above, and refuses a bare call by naming what it lacks
    needs = {name: required(fn) for name, fn in ALL.items() if required(fn)}
    assert needs == {"ch12.mbu": ["rows", "run_phi"], "ch12.comm": ["gaps"], "ch12.reality_live": ["rows"],
                     "ch13.estimates": ["rows"],
                     "ch16.ratios": ["pitfalls"]}
    assert set(needs) == set(CHAPTER_VALUES)
    for name, params in needs.items():
        with pytest.raises(TypeError, match=params[-1]):
            ALL[name]()


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


# --- chapters 01-05: each chapter's figures, and each interactive one's controls and their defaults ---------


def chapter_figures(chapter: str) -> dict:
    """``{name: function}`` of the registered figures of ``chapter`` ("ch01")."""
    return {name.split(".", 1)[1]: fn for name, fn in ALL.items() if name.split(".", 1)[0] == chapter}


def check_chapter(chapter: str, expected: dict) -> None:
    """Call every figure of ``chapter`` with its defaults (and CHAPTER_VALUES) and compare with ``expected``.

    ``expected`` maps each function's name to ``None`` (a static figure) or to
    ``{control: (kind, default)}`` (an interactive one, controls in the order shown; kind "slider" or
    "choice"; a bare default leaves the kind unchecked).
    """
    functions = chapter_figures(chapter)
    assert sorted(functions) == sorted(expected), f"{chapter}'s registered figures"
    for name, fn in functions.items():
        values = CHAPTER_VALUES.get(f"{chapter}.{name}", {})
        fig = fn(**values)
        if expected[name] is None:
            assert isinstance(fig, Figure), f"{chapter}.{name} is not a static figure"
            plots.close(fig)
            continue
        assert isinstance(fig, InteractiveFigure), f"{chapter}.{name} is not interactive"
        kinds = {k: ("choice" if isinstance(c, Choice) else "slider", c.default) for k, c in fig.controls.items()}
        want = {k: v if isinstance(v, tuple) else (kinds.get(k, (None,))[0], v) for k, v in expected[name].items()}
        assert list(kinds) == list(want) and kinds == want, f"{chapter}.{name}'s controls"
        assert figure_calls.calls(fig.to_html()) == [fig.call]
        assert fig.call == {"module": f"kvbook.figures.{chapter}", "function": name, "kwargs": values, "static": ""}


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


def test_chapter_11_figures_build():
    check_chapter("ch11", {"serving_frontier": None, "interference": None, "day_load": None,
                           "serving_live": {"batch": 64, "model": "llama-3-8b", "chip": "h200"}})
    # the notebook's own values travel in the call, so the page's live layer repeats them
    fig = ALL["ch11.serving_live"](batch=8, price_per_chip_hour=3.0)
    assert fig.values["batch"] == 8 and fig.call["kwargs"] == {"batch": 8, "price_per_chip_hour": 3.0}


def test_chapter_11_knee_is_the_first_compute_bound_chunk():
    import numpy as np
    from kvbook.figures import ch11

    import kvmath

    dep = kvmath.Deployment("llama-3-8b", "h100-sxm")
    chunks = np.arange(0, 8193)
    knee = ch11.compute_bound_chunk(chunks, dep.mixed_step(64, 2000, chunks))
    assert knee == 595  # the chapter's c* (eq. serving-knee gives 599, without the chunk's attention and cache)
    pair = dep.mixed_step(64, 2000, np.array([knee - 1, knee]))
    assert pair.compute_s[0] <= pair.memory_s[0] and pair.compute_s[1] > pair.memory_s[1]
    with pytest.raises(ValueError, match="chunks"):
        ch11.compute_bound_chunk(chunks[:100], dep.mixed_step(64, 2000, chunks[:100]))


def test_chapter_13_figures_build():
    check_chapter("ch13", {"regimes": None, "estimates": None})


@pytest.mark.slow
def test_chapter_13_estimate_rows_are_the_cross_validations():
    """The test's rows are the chapter's as computed when written: each is still kvmath.estimate's (4 digits)."""
    from kvmath.estimate import cross_validate

    cv = cross_validate()
    at = {i: k for k, i in enumerate(cv.ids)}
    for row_id, regime, resid, low, high in CH13_ESTIMATE_ROWS:
        k = at[row_id]
        assert cv.regimes[k] == regime
        assert (cv.log_residuals[k], cv.low[k], cv.high[k]) == pytest.approx((resid, low, high), abs=1e-4), row_id


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
    check_chapter("ch15", {"kv_by_kind": None})


def test_chapter_16_figures_build():
    check_chapter("ch16", {"ratios": None, "windows_live": {"context": 8192}})


def test_chapter_12_figures_build():
    from kvmath.calibration import calibrate

    keys = [r["key"] for r in CH12_LIVE_ROWS]
    check_chapter("ch12", {"mbu": None, "comm": None, "reality_live": {"row": "1", "fraction": 0.7}})
    assert list(ALL["ch12.reality_live"](**CHAPTER_VALUES["ch12.reality_live"]).controls["row"].values) == keys
    # the test's rows are the chapter's as computed when written: each phi is still kvmath.calibration's (6 digits)
    phis = [c.ratio for c in calibrate()]
    for r in CH12_LIVE_ROWS:
        assert min(abs(r["ratio"] / p - 1) for p in phis) < 1e-5, r["key"]


# --- chapters 06-10 -------------------------------------------------------------------------------------------


def check_moved_controls_carry_their_call(chapter: str, name: str) -> None:
    """The interactive ``chapter.name``, built with every control off its default, shows and carries that call.

    The defaults alone would not catch a keyword the function takes but does
    not pass on to its control (the page would then rebuild the default figure).
    """
    fn = chapter_figures(chapter)[name]
    made = fn()
    other = {key: next(v for v in made.controls[key].values if v != default) for key, default in made.values.items()}
    moved = fn(**other)
    assert moved.values == other, f"{chapter}.{name}"
    assert moved.call == {"module": f"kvbook.figures.{chapter}", "function": name, "kwargs": other, "static": ""}


def test_chapter_06_figures_build():
    check_chapter("ch06", {
        "ttft_by_prompt": None,
        "tensor_parallel_scaling": None,
        "quantized_throughput": None,
        "paging": None,
        "step_and_memory": {"batch": ("slider", 16), "weights": ("choice", "bf16"), "kv": ("choice", "bf16"),
                            "chips": ("slider", 2)},
    })
    check_moved_controls_carry_their_call("ch06", "step_and_memory")


def test_chapter_07_figures_build():
    check_chapter("ch07", {
        "speed_by_context": None,
        "compute_ceiling": None,
        "bytes_by_split": None,
        "prefill_split": None,
        "bytes_per_gpu": {"context": ("slider", 8192), "kv_heads": ("slider", 32), "batch": ("slider", 16),
                          "n_gpu": ("slider", 2), "shard": ("choice", "heads"), "eff": ("slider", 0.7)},
    })
    check_moved_controls_carry_their_call("ch07", "bytes_per_gpu")


def test_chapter_08_figures_build():
    check_chapter("ch08", {
        "cache_by_batch": None,
        "step_by_batch": None,
        "largest_batch_by_chip": None,
        "planner": {"model": ("choice", "kipply-52b"), "chip": ("choice", "a100-kipply"), "n_chips": ("slider", 3),
                    "split": ("choice", "batch"), "weight_dtype": ("choice", "fp16"), "kv_dtype": ("choice", "fp16"),
                    "context": ("slider", 2048)},
    })
    check_moved_controls_carry_their_call("ch08", "planner")


def test_chapter_09_figures_build():
    check_chapter("ch09", {
        "experts_touched": None,
        "expert_parallel_all_to_all": None,
        "weight_bytes_read": {"batch": ("slider", 16), "model": ("choice", "deepseek-v3"),
                              "tokens_per_seq": ("choice", 1)},
    })
    check_moved_controls_carry_their_call("ch09", "weight_bytes_read")


def test_chapter_10_figures_build():
    check_chapter("ch10", {
        "verify_steps": None,
        "expected_tokens": None,
        "speedup_by_batch": None,
        "speedup_live": {"gamma": ("slider", 4), "acceptance": ("choice", 0.8), "model": ("choice", "llama-8b")},
    })
    check_moved_controls_carry_their_call("ch10", "speedup_live")


def test_chapter_00_figure_follows_the_bandwidth_the_reader_edits():
    """Chapter 0's figure takes the bandwidth of the chapter's own A100 (review R21-16: after a reader changed it to
    1.0 TB/s and re-ran, the figure still marked the old B_crit): B_crit = 312e12 x 2 / (2 x W), 208 at kipply's
    1.5 TB/s and 312 at 1.0 TB/s, by hand."""
    import nbformat

    from kvbook.figures import ch00
    from tests.conftest import ROOT

    def marked(fig):
        return [t.get_text() for ax in fig.axes for t in ax.texts if "B" in t.get_text()]

    assert any("208" in t for t in marked(ch00.weights_against_math()))
    assert any("312" in t for t in marked(ch00.weights_against_math(bandwidth=1.0e12)))
    nb = nbformat.read(ROOT / "notebooks" / "00_sample_rhythm.ipynb", as_version=4)
    call = next(c.source for c in nb.cells if c.cell_type == "code" and "ch00.weights_against_math(" in c.source)
    assert "bandwidth=kipply_a100.bandwidth" in call
