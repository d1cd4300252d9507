"""kvbook.plots and kvbook.interactive: behaviour, fallbacks and bad inputs."""

from __future__ import annotations

import base64
import re
import struct

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from kvbook import plots
from kvbook.figures import chip_options
from kvbook.interactive import Choice, Slider, interactive_figure

BATCHES = [1, 2, 4, 8, 16, 32, 64]


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


class Recorder:
    """A setup function that records every update call."""

    def __init__(self):
        self.calls = []
        self.setups = 0

    def __call__(self, fig):
        self.setups += 1
        ax = fig.add_subplot()
        (self.line,) = ax.plot([1, 2], [1, 2])

        def update(batch, chip):
            self.calls.append({"batch": batch, "chip": chip})
            self.line.set_ydata([1, batch])
            ax.set_ylim(0, max(BATCHES) + 1)

        return update


def make(rec=None, **kw):
    rec = rec or Recorder()
    fig = interactive_figure(
        rec,
        controls={"batch": Slider(BATCHES, default=16, label="batch B"),
                  "chip": Choice([("H100", "h100-sxm"), ("A100", "a100-80gb")], label="chip")},
        main="batch", figsize=(4, 3), dpi=50, **kw)
    # one first draw at the default values (it fixes the layout)
    assert rec.calls == [{"batch": 16, "chip": "h100-sxm"}]
    rec.calls.clear()
    return fig, rec


# --- interactive ------------------------------------------------------------------

def test_setup_runs_once_and_update_gets_every_control_by_keyword():
    fig, rec = make()
    fig.render(batch=4)
    fig.render(chip="a100-80gb")
    assert rec.setups == 1
    assert rec.calls == [{"batch": 4, "chip": "h100-sxm"}, {"batch": 4, "chip": "a100-80gb"}]


def test_one_frame_per_main_value_with_other_controls_at_defaults():
    fig, rec = make()
    frames = fig.frames()
    assert len(frames) == len(BATCHES)
    assert [c["batch"] for c in rec.calls[: len(BATCHES)]] == BATCHES
    assert {c["chip"] for c in rec.calls} == {"h100-sxm"}
    assert len(set(frames)) == len(BATCHES)  # each value draws something different
    assert all(png_size(f) == (400, 300) for f in frames)  # 4x3 in at 50 CSS dpi, 2x pixels
    assert fig.values == {"batch": 16, "chip": "h100-sxm"}  # back where it was


def test_frames_leave_the_live_values_alone():
    fig, rec = make()
    fig.render(batch=64, chip="a100-80gb")
    assert len(fig.frames()) == len(BATCHES)
    assert fig.values == {"batch": 64, "chip": "a100-80gb"}
    assert rec.calls[-1] == {"batch": 64, "chip": "a100-80gb"}


def test_fallback_html_is_self_contained_and_starts_at_the_default():
    fig, _ = make()
    html = fig.to_html()
    assert 'type="range"' in html and 'min="0"' in html and f'max="{len(BATCHES) - 1}"' in html
    assert f'value="{BATCHES.index(16)}"' in html
    assert "<script src" not in html and "http" not in html
    assert "make lab" in html and "chip = H100" in html  # the honest note names the fixed control
    img = re.search(r'<img class="kvmath-interactive-img" src="data:image/png;base64,([^"]+)"', html)
    default_png = base64.b64decode(img.group(1))
    assert default_png == fig.frames()[BATCHES.index(16)]


def test_fallback_has_no_note_about_other_controls_when_there_are_none():
    f = interactive_figure(lambda fig: (lambda x: None), {"x": Slider([1, 2, 3])})
    assert f.main == "x"
    assert "Changing those" not in f.to_html()


def test_mimebundle_outside_a_kernel_is_the_html_fallback():
    fig, _ = make()
    bundle = fig._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"}


def test_widget_reuses_one_figure_and_one_image():
    pytest.importorskip("ipywidgets")
    fig, rec = make()
    view = fig.widget()
    assert fig.widget() is view
    image = fig._image
    first = image.value
    fig._controls_w["batch"].value = 64
    assert image is fig._image and image.value != first
    fig._controls_w["chip"].value = "a100-80gb"
    assert rec.setups == 1
    assert rec.calls[-1] == {"batch": 64, "chip": "a100-80gb"}
    assert len(fig.timings_s) == 2


@pytest.mark.parametrize("kwargs, match", [
    ({"main": "context"}, "main must name one of the controls"),
    ({"controls": {}}, "controls must be a non-empty mapping"),
    ({"controls": {"not valid": Slider([1, 2])}}, "controls keys must be Python identifiers"),
    ({"controls": {"b": [1, 2]}}, r"controls\['b'\] must be a Slider or Choice"),
    ({"controls": {"b": Slider(list(range(40)))}}, "max_frames"),
    ({"figsize": (0, 3)}, "figsize"),
    ({"dpi": 0}, "dpi"),
    ({"setup": 3}, "setup must be a callable"),
    ({"setup": lambda fig: None}, "setup must return the update function"),
])
def test_bad_arguments_raise_value_error_naming_them(kwargs, match):
    args = {"setup": lambda fig: (lambda b: None), "controls": {"b": Slider([1, 2])}}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        interactive_figure(**args)


@pytest.mark.parametrize("make_control, match", [
    (lambda: Slider([1, 2, 4], default=3), "default must be one of values"),
    (lambda: Slider([1]), "at least two"),
    (lambda: Slider([1, 1, 2]), "must not repeat"),
    (lambda: Choice([]), "at least one"),
    (lambda: Choice([("a", 1, 2)]), r"\(label, value\) pairs"),
    (lambda: Choice(["a", "b"], default="c"), "default must be one of"),
])
def test_bad_controls_raise_value_error(make_control, match):
    with pytest.raises(ValueError, match=match):
        make_control()


def test_render_rejects_unknown_controls_and_values():
    fig, _ = make()
    with pytest.raises(ValueError, match="unknown control 'context'"):
        fig.render(context=4096)
    with pytest.raises(ValueError, match="batch must be one of"):
        fig.render(batch=3)


def test_layout_is_solved_once_unless_asked():
    fig, _ = make()
    assert fig.figure.get_layout_engine() is None or fig.figure.get_layout_engine().__class__.__name__ == "PlaceHolderLayoutEngine"
    again, _ = make(relayout=True)
    again.render(batch=64)
    assert type(again.figure.get_layout_engine()).__name__ == "ConstrainedLayoutEngine"


def test_setup_with_its_own_margins_gets_them_without_a_warning(recwarn):
    def setup(fig):
        ax = fig.add_subplot()
        fig.subplots_adjust(left=0.2, right=0.9, bottom=0.2, top=0.9)
        (line,) = ax.plot([1, 2], [1, 2])
        return lambda b: line.set_ydata([1, b])

    f = interactive_figure(setup, {"b": Slider([1, 2, 3])})
    assert not [w for w in recwarn if "subplots_adjust" in str(w.message)]
    left, bottom, right, top = f.figure.axes[0].get_position().extents
    assert (round(left, 2), round(right, 2), round(bottom, 2), round(top, 2)) == (0.2, 0.9, 0.2, 0.9)


def test_interactive_does_not_touch_global_rcparams():
    before = dict(matplotlib.rcParams)
    make()[0].to_html()
    assert dict(matplotlib.rcParams) == before


# --- plots ---------------------------------------------------------------------------

def test_style_is_scoped():
    before = matplotlib.rcParams["axes.spines.top"]
    with plots.style():
        assert matplotlib.rcParams["axes.spines.top"] is False
    assert matplotlib.rcParams["axes.spines.top"] == before


def test_formatters_scale_base_units():
    assert plots.bytes_formatter("GB")(68.72e9) == "68.72"
    assert plots.bytes_formatter("GiB", digits=2)(2**36) == "64.00"
    assert plots.seconds_formatter("ms")(2.5e-3) == "2.5"
    assert plots.flops_formatter("TFLOP/s")(312e12) == "312"
    with pytest.raises(ValueError, match="unit must be one of"):
        plots.bytes_formatter("gigabytes")


def test_axes_are_labelled_with_units():
    fig, ax = plots.new_figure((4, 3))
    try:
        plots.log_batch_axis(ax)
        plots.bytes_axis(ax, "y", "GiB", "KV cache")
        assert ax.get_xscale() == "log"
        assert ax.get_ylabel() == "KV cache (GiB)"
        assert "batch" in ax.get_xlabel()
        with pytest.raises(ValueError, match="which must be 'x' or 'y'"):
            plots.log_context_axis(ax, which="z")
    finally:
        plots.close(fig)


def test_mark_vline_names_the_line_in_mathtext_and_moves():
    fig, ax = plots.new_figure((4, 3))
    try:
        ax.set_xlim(1, 1024)
        ax.set_xscale("log")
        m = plots.mark_vline(ax, 16, "B_crit = 16")
        assert m.text.get_text().strip() == r"$B_\mathrm{crit}$ = 16"
        assert m.text.get_horizontalalignment() == "left"
        m.move(153, "B_crit = 153")
        assert list(m.line.get_xdata()) == [153, 153]
        assert m.text.get_text().strip() == r"$B_\mathrm{crit}$ = 153"
        m.move(900)  # near the right edge: the label moves to the left of the line
        assert m.text.get_horizontalalignment() == "right"
        assert m.text.get_text().strip() == r"$B_\mathrm{crit}$ = 153"
        plain = plots.mark_vline(ax, 4, "h_kv", math=False)
        assert plain.text.get_text().strip() == "h_kv"
    finally:
        plots.close(fig)


def test_roofline_is_min_of_compute_and_bandwidth():
    fig, ax = plots.new_figure((4, 3))
    try:
        art = plots.roofline(ax, 312e12, 1.5e12, points={"decode, B = 16": 16.0, "prefill": 4096.0})
        x, y = art["roof"].get_data()
        assert np.allclose(y, np.minimum(312e12, x * 1.5e12))
        assert art["ridge"].line.get_xdata()[0] == pytest.approx(208.0)
        dot, _ = art["points"]["decode, B = 16"]
        assert dot.get_ydata()[0] == pytest.approx(16 * 1.5e12)
        assert art["points"]["prefill"][0].get_ydata()[0] == pytest.approx(312e12)
        assert ax.get_xscale() == ax.get_yscale() == "log"
    finally:
        plots.close(fig)


@pytest.mark.parametrize("kwargs, match", [
    ({"flops": 0}, "flops must be > 0"),
    ({"bandwidth": -1}, "bandwidth must be > 0"),
    ({"intensity_range": (10, 1)}, "intensity_range"),
    ({"points": {"bad": 0}}, r"points\['bad'\]"),
])
def test_roofline_rejects_bad_inputs(kwargs, match):
    fig, ax = plots.new_figure((4, 3))
    try:
        args = {"flops": 312e12, "bandwidth": 1.5e12, **kwargs}
        with pytest.raises(ValueError, match=match):
            plots.roofline(ax, **args)
    finally:
        plots.close(fig)


def test_kvmath_core_does_not_import_matplotlib():
    import subprocess
    import sys

    code = "import sys, kvmath; kvmath.formulas.critical_batch(312e12, 1.5e12, 2); print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- blitting: a move redraws only what update touched, with a full redraw's pixels ------

def pixels(png: bytes) -> np.ndarray:
    from PIL import Image
    import io

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def same_renders(setup, controls, moves, fast=True, **kw):
    """Render ``moves`` with blitting and with a full redraw each time; return how each blitted
    render was drawn, after asserting the two give the same pixels (tolerance: none)."""
    blit = interactive_figure(setup, controls, blit=True, **kw)
    full = interactive_figure(setup, controls, blit=False, **kw)
    kinds = []
    for values in moves:
        a, b = blit.render(fast=fast, **values), full.render(fast=fast, **values)
        kinds.append(blit.last_draw)
        assert full.last_draw == "full"
        diff = np.abs(pixels(a).astype(int) - pixels(b).astype(int))
        assert diff.max() == 0, (values, blit.last_draw, int((diff.max(axis=2) > 0).sum()))
    return kinds, blit


def test_a_move_blits_and_gives_the_pixels_of_a_full_redraw():
    kinds, fig = same_renders(lambda f: Recorder()(f), {"batch": Slider(BATCHES, default=16),
                                           "chip": Choice(chip_options(["h100-sxm", "a100-80gb"]))},
                              [{"batch": b} for b in BATCHES] + [{"chip": "a100-80gb"}],
                              figsize=(4, 3), dpi=50)
    assert kinds[0] == "full"  # the first move after the first draw learns what update touches
    assert set(kinds[1:]) == {"blit"}
    assert fig._blitter.blits == len(kinds) - 1


def legend_and_moving_line(fig):
    ax = fig.add_subplot()
    (static,) = ax.plot([0, 10], [9, 9], label="static, above the moving line", zorder=3)
    (line,) = ax.plot([0, 10], [1, 1], label="moving")
    note = ax.text(0.5, 0.5, "", transform=ax.transAxes)
    ax.legend(loc="upper left")
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)

    def update(y, limit, shown):
        line.set_ydata([y, y])
        note.set_text(f"y = {y}")
        note.set_visible(shown == "yes")
        ax.set_ylim(0, limit)

    return update


def test_blitting_keeps_the_draw_order_limits_and_visibility():
    controls = {"y": Slider([1, 5, 8, 9, 9.5, 2]), "limit": Slider([10, 12]),
                "shown": Choice(["yes", "no"])}
    moves = ([{"y": y} for y in controls["y"].values] + [{"limit": 12}, {"y": 5}, {"shown": "no"},
             {"y": 9}, {"shown": "yes"}, {"limit": 10}, {"y": 1}])
    kinds, fig = same_renders(legend_and_moving_line, controls, moves, figsize=(4, 3), dpi=50)
    # the line moved under the legend and the static line drawn above it: both joined the redraw
    redrawn = {type(a).__name__ for _, a in fig._blitter.redraw}
    assert "Legend" in redrawn
    # a new y-limit redraws everything; going back to a seen state blits
    assert kinds[moves.index({"limit": 12})] == "full" and kinds[moves.index({"limit": 10})] == "full"
    assert kinds.count("blit") >= len(moves) // 2


def twin_axes_and_bars(fig):
    ax = fig.add_subplot()
    bars = ax.bar([0, 1, 2], [1, 2, 3])  # under the grid: the axis is redrawn above them
    twin = ax.twinx()
    (line,) = twin.plot([0, 1, 2], [3, 2, 1], color="k")
    fig.text(0.5, 0.02, "a figure text", ha="center")
    ax.set_ylim(0, 10)
    twin.set_ylim(0, 10)

    def update(h):
        for b, k in zip(bars, (1, 2, 3)):
            b.set_height(h * k)
        line.set_ydata([h, 2 * h, 3 - h])

    return update


def test_blitting_a_twin_axes_figure_with_bars_and_a_figure_text():
    kinds, fig = same_renders(twin_axes_and_bars, {"h": Slider([1, 2, 3], default=2)},
                              [{"h": 1}, {"h": 3}, {"h": 2}, {"h": 1}], figsize=(4, 3), dpi=50)
    assert "blit" in kinds


def test_a_legend_placed_best_moves_with_the_data():
    def setup(fig):
        ax = fig.add_subplot()
        (line,) = ax.plot([0, 1], [9, 9], label="a line that moves")
        ax.legend()  # loc="best": placed at draw time, away from the line
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 10)
        return lambda y: line.set_ydata([y, y])

    kinds, _ = same_renders(setup, {"y": Slider([9, 1, 5])},
                            [{"y": 9}, {"y": 5}, {"y": 9}, {"y": 1}, {"y": 5}], figsize=(3, 2), dpi=50)
    assert kinds.count("blit") >= 2


def test_a_text_box_reaching_a_legend_drawn_above_it():
    def setup(fig):
        ax = fig.add_subplot()
        ax.plot([0, 1], [0, 0], label="a legend entry")
        ax.legend(loc="upper left")  # drawn above texts (zorder 5 against 3)
        note = ax.text(0.9, 0.95, "note", transform=ax.transAxes, va="top",
                       bbox={"facecolor": "gold", "edgecolor": "none", "pad": 12})
        ax.set_xlim(0, 1)
        ax.set_ylim(-1, 1)

        def update(x):
            note.set_x(x)

        return update

    # the note's box (larger than its text) reaches the legend before the text does
    xs = [0.9, 0.8, 0.7, 0.65, 0.6, 0.55, 0.5, 0.45, 0.4]
    kinds, _ = same_renders(setup, {"x": Slider(xs)}, [{"x": x} for x in xs], figsize=(4, 3), dpi=50)
    assert "blit" in kinds


def test_adding_an_artist_or_drawing_elsewhere_forces_a_full_redraw():
    def setup(fig):
        ax = fig.add_subplot()
        (line,) = ax.plot([0, 1], [0, 1])
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 4)

        def update(k):
            line.set_ydata([0, k])
            if k == 3:
                ax.axhline(2)  # a new artist: the background changes

        return update

    kinds, fig = same_renders(setup, {"k": Slider([1, 2, 3, 4])},
                              [{"k": 2}, {"k": 4}, {"k": 3}, {"k": 2}, {"k": 4}], figsize=(3, 2), dpi=50)
    assert kinds == ["full", "blit", "full", "blit", "blit"]
    fig.figure.canvas.draw()  # someone else drew (e.g. layout_problems): the flags are cleared
    fig.render(k=1)
    assert fig.last_draw == "full"


def test_blit_false_redraws_in_full():
    fig, _ = make(blit=False)
    fig.render(batch=4)
    fig.render(batch=8)
    assert fig.last_draw == "full" and fig._blitter is None


def test_relayout_solves_the_layout_every_move_and_blits_when_no_axes_moved():
    def setup(fig):
        ax = fig.add_subplot()
        (line,) = ax.plot([0, 1], [0, 1])
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 100)

        def update(k, unit):
            line.set_ydata([0, k])
            ax.set_ylabel(f"y ({unit})")  # a longer label moves the axes

        return update

    controls = {"k": Slider([1, 2, 3, 4]), "unit": Choice(["s", "seconds per step"])}
    moves = [{"k": 2}, {"k": 3}, {"unit": "seconds per step"}, {"k": 4}, {"k": 1}, {"unit": "s"}]
    kinds, fig = same_renders(setup, controls, moves, relayout=True, figsize=(3, 2), dpi=50)
    assert type(fig.figure.get_layout_engine()).__name__ == "ConstrainedLayoutEngine"
    assert kinds == ["full", "blit", "full", "blit", "blit", "full"]


def test_frames_are_byte_identical_with_and_without_blitting():
    a, _ = make()
    b, _ = make(blit=False)
    assert a.frames() == b.frames()  # same pixels, same (non-fast) PNG encoder
    assert a._blitter.blits > 0


def test_the_fast_png_has_the_pixels_of_the_canvas():
    from kvbook.interactive import _fast_png

    fig, _ = make()
    png = fig.render(batch=4, fast=True)
    canvas = np.asarray(fig.figure.canvas.buffer_rgba())[:, :, :3]
    assert png_size(png) == (400, 300)
    assert np.array_equal(pixels(png), canvas)
    rgba = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    assert np.array_equal(pixels(_fast_png(rgba)), rgba[:, :, :3])


def test_widget_moves_blit():
    pytest.importorskip("ipywidgets")
    fig, _ = make()
    fig.widget()
    for b in (4, 8, 32):
        fig._controls_w["batch"].value = b
    assert fig.last_draw == "blit" and len(fig.timings_s) == 3


# --- the book's own figures: blitted renders equal full redraws --------------------------

BOOK = ["00_sample_rhythm", "03_min_step", "05_sharing_kv_heads", "12_reality_check"]


@pytest.mark.slow  # 74 s for the four chapters (27.7 + 21.1 + 19.5 + 5.8 s, review of 3f3cb8a)
@pytest.mark.parametrize("stem", BOOK)
def test_the_books_figures_blit_with_the_pixels_of_a_full_redraw(stem):
    """Every value of every control, then a walk over them: exact pixels, and most moves of
    the main control blit (a move of another control may rescale the axes: a full redraw)."""
    import random
    from pathlib import Path

    from book_figures import book_figures  # benchmarks/ is on pytest.ini's pythonpath

    from tests.book.test_figures import CHAPTER_VALUES  # the chapter's values for figures that require them

    root = Path(__file__).resolve().parents[2]
    found = book_figures(root / "notebooks" / f"{stem}.ipynb", CHAPTER_VALUES)
    assert found, f"{stem}: no interactive figure function callable with its defaults or the chapter's values"
    for bf in found:
        moves = [{name: v} for name, c in bf.controls.items() for v in c.values]
        rng = random.Random(0)
        names = list(bf.controls)
        moves += [{n: rng.choice(bf.controls[n].values)} for n in (rng.choice(names) for _ in range(8))]
        blit, full = bf.make(blit=True), bf.make(blit=False)
        kinds = []
        for values in moves:
            a, b = blit.render(fast=True, **values), full.render(fast=True, **values)
            kinds.append(blit.last_draw)
            assert np.array_equal(pixels(a), pixels(b)), (bf.name, values, blit.last_draw)
        main = [k for values, k in zip(moves, kinds) if blit.main in values]
        assert main.count("blit") >= len(main) // 2, (bf.name, kinds)
