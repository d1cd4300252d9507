"""Figures a reader can read: HiDPI pixels, text size, and no clipped or colliding labels.

``kvbook.plots.layout_problems`` compares matplotlib's text extents with the
figure, the axes and each other; ``InteractiveFigure.layout_problems`` runs
it on every frame. The last test runs it on every interactive figure of
every chapter (it executes the notebooks; ``make test`` keeps three chapters, ``make test-full``
runs all), and its ``every-pair`` variant (``make test-full``) renders every pair of control values there.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

from kvbook import plots  # noqa: E402
from kvbook.interactive import Choice, Slider, interactive_figure  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def small():
    """A 4 x 3 inch figure and its axes, closed after the test."""
    fig, ax = plots.new_figure((4, 3))
    yield fig, ax
    plots.close(fig)


def test_clean_figure_has_no_problems():
    fig, ax = plots.new_figure((7, 4))
    try:
        ax.plot([1, 2, 3], [1, 4, 9], "o-", label="data")
        ax.set_xlim(0, 4)
        ax.set_ylim(0, 10)
        ax.set_xlabel("x (units)")
        plots.mark_vline(ax, 1.5, "B_crit = 1.5", y=0.95)
        assert plots.layout_problems(fig) == []
    finally:
        plots.close(fig)


def test_marker_cut_by_the_edge_and_marker_outside_are_reported(small):
    fig, ax = small
    ax.plot([1, 2, 5], [1, 2, 3], "o")
    ax.set_xlim(1, 3)
    ax.set_ylim(0, 4)
    problems = plots.layout_problems(fig)
    assert "marker at (1, 1) is cut by the axes edge" in problems
    assert "marker at (5, 3) is outside the axes and clipped away" in problems


def test_overlapping_labels_and_label_past_the_axes_are_reported(small):
    fig, ax = small
    ax.set_xlim(0, 1)
    ax.text(0.5, 0.5, "first label here")
    ax.text(0.52, 0.51, "second label")
    ax.text(0.95, 0.2, "runs off the right")
    problems = plots.layout_problems(fig, lines=False)
    assert "label 'first label here' overlaps label 'second label'" in problems
    assert "label 'runs off the right' runs past the edge of its axes" in problems


def test_label_crossed_by_a_line_is_reported(small):
    fig, ax = small
    ax.plot([0, 1], [0, 1], label="roof")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.text(0.3, 0.45, "crossed by the diagonal")
    assert "label 'crossed by the diagonal' is crossed by line 'roof'" in plots.layout_problems(fig)
    assert not any("crossed" in p for p in plots.layout_problems(fig, lines=False))


def test_vline_label_near_the_right_edge_is_not_clipped(small):
    fig, ax = small
    plots.log_batch_axis(ax)
    ax.set_xlim(1, 1024)
    ax.set_ylim(0, 1)
    plots.mark_vline(ax, 900, "B_crit = 900")
    assert plots.layout_problems(fig) == []


def test_static_figures_are_hidpi_and_text_is_at_least_10_css_px():
    assert plots.STYLE["figure.dpi"] >= 2 * plots.CSS_DPI
    smallest_pt = min(plots.STYLE[k] for k in ("font.size", "xtick.labelsize", "ytick.labelsize",
                                                "legend.fontsize"))
    assert smallest_pt / 72 * plots.CSS_DPI >= 10 * 0.9  # 9 pt at 100 CSS px/in is 12.5 px
    assert 9 / 72 * plots.CSS_DPI >= 10


def moving_marker(fig):
    ax = fig.add_subplot()
    (dot,) = ax.plot([1], [1], "o")
    marker = plots.mark_vline(ax, 1, "B = 1")
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)

    def update(x):
        dot.set_data([x], [5])
        marker.move(x, f"B = {x}")

    return update


def test_interactive_layout_check_renders_every_frame_and_names_the_bad_one():
    f = interactive_figure(moving_marker, {"x": Slider([2, 5, 10], default=5, label="x")},
                           figsize=(4, 3), dpi=50)
    problems = f.layout_problems()
    assert problems and all(p.startswith("x = 10: ") for p in problems), problems
    assert any("marker at (10, 5) is cut by the axes edge" in p for p in problems)
    assert f.values == {"x": 5}


def test_interactive_frames_are_hidpi_and_shown_at_css_size():
    f = interactive_figure(moving_marker, {"x": Slider([2, 5], default=5)}, figsize=(7, 4))
    png = f.frames()[0]
    import struct

    assert struct.unpack(">II", png[16:24]) == (1400, 800)  # 2x the 700 x 400 CSS px
    html = f.to_html()
    assert 'width="700"' in html and "max-width:700px" in html and "width:100%" in html


def test_fixed_limits_hold_the_axes_over_every_frame():
    def setup(fig):
        ax = fig.add_subplot()
        bars = ax.bar([0, 1], [1, 1])

        def update(h):
            for b in bars:
                b.set_height(h)
            ax.relim()
            ax.autoscale_view()

        return update

    f = interactive_figure(setup, {"h": Slider([1, 10, 100], default=10)}, fixed_limits=True)
    tops = []
    for h in (1, 10, 100):
        f.render(h=h)
        tops.append(f.figure.axes[0].get_ylim()[1])
    assert len(set(tops)) == 1 and tops[0] >= 100


def test_fixed_limits_rescale_when_another_control_moves():
    # bars of height h * scale, autoscaled by update: the axes hold over h, follow scale
    def setup(fig):
        ax = fig.add_subplot()
        bars = ax.bar([0, 1], [1, 1])

        def update(h, scale):
            for b in bars:
                b.set_height(h * scale)
            ax.relim()
            ax.autoscale_view()

        return update

    f = interactive_figure(setup, {"h": Slider([1, 10, 100], default=10),
                                   "scale": Choice([1, 1000], default=1)}, fixed_limits=True)
    ax = f.figure.axes[0]

    def tops(scale):
        out = []
        for h in (1, 10, 100):
            f.render(h=h, scale=scale)
            out.append(ax.get_ylim()[1])
        return out

    small, large = tops(1), tops(1000)
    assert len(set(small)) == 1 and 100 <= small[0] < 1000  # held over h; fits h = 100
    assert len(set(large)) == 1 and large[0] >= 100_000     # rescaled: fits 100 x 1000
    assert tops(1) == small                                   # the same limits again


def test_interactive_html_is_accessible():
    f = interactive_figure(moving_marker, {"x": Slider([2, 5], default=5, label="batch B")},
                           caption="Fig. 1: a dot moves")
    html = f.to_html()
    assert 'aria-valuetext="batch B 5"' in html
    assert 'aria-live="polite"' in html
    assert "kvmath-interactive-hint" in html and "\u2190/\u2192" in html
    assert 'alt="Fig. 1: a dot moves (batch B = 5)"' in html


# --- every interactive figure of every chapter ------------------------------------------

def all_pairs(sizes: list[int]) -> list[list[int]]:
    """Rows of value indices (one per control) in which every pair of values of every two
    controls appears at least once: a greedy covering array, far fewer rows than the
    product (chapter 8's seven controls: about 130 rows instead of 254,016)."""
    names = range(len(sizes))

    def key(a, i, b, j):
        return (a, i, b, j) if a < b else (b, j, a, i)

    todo = {(a, i, b, j) for a in names for b in names if a < b
            for i in range(sizes[a]) for j in range(sizes[b])}
    rows = []
    while todo:
        a, i, b, j = min(todo)
        row = {a: i, b: j}
        for n in names:
            if n not in row:
                row[n] = max(range(sizes[n]),
                             key=lambda v: sum(key(m, row[m], n, v) in todo for m in row))
        rows.append([row[n] for n in names])
        todo -= {key(a, row[a], b, row[b]) for a in names for b in names if a < b}
    return rows


def test_all_pairs_covers_every_pair_in_few_rows():
    import itertools

    sizes = [14, 9, 7, 2, 4, 4, 9]  # chapter 8's planner
    rows = all_pairs(sizes)
    for a, b in itertools.combinations(range(len(sizes)), 2):
        assert {(r[a], r[b]) for r in rows} == set(itertools.product(range(sizes[a]), range(sizes[b])))
    assert 14 * 9 <= len(rows) < 200
    assert all_pairs([5]) == [] and all_pairs([2, 3]) == [[i, j] for i in range(2) for j in range(3)]


PATCH = r"""
import json as _json, re as _re, kvbook.interactive as _ki
_kvmath_layout = []
_kvmath_to_html = _ki.InteractiveFigure.to_html
_NOT_A_NUMBER = _re.compile(r"\b(nan|inf)\b", _re.I)

def _pairwise_problems(self):
    # every pair of values of every two controls, as a reader can set them
    names = list(self.controls)
    previous, out = dict(self.values), []
    for row in all_pairs([len(self.controls[n].values) for n in names]):
        values = {n: self.controls[n].values[i] for n, i in zip(names, row)}
        try:
            self.render(fast=True, **values)
        except Exception as e:
            out.append(f"{values}: {type(e).__name__}: {e}")
            continue
        for t in self.figure.findobj(lambda a: hasattr(a, "get_text")):
            if t.get_visible() and _NOT_A_NUMBER.search(t.get_text()):
                out.append(f"{values}: text {t.get_text()!r} shows a number that is not one")
    self.render(**previous)
    return out

def _checked_to_html(self):
    _kvmath_layout.extend(self.layout_problems())
    if _ALL_PAIRS:
        _kvmath_layout.extend(_pairwise_problems(self))
    return _kvmath_to_html(self)
_ki.InteractiveFigure.to_html = _checked_to_html
"""


def chapter_layout_problems(path: Path, every_pair: bool = False) -> list[str]:
    import inspect

    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    pairs = f"_ALL_PAIRS = {every_pair}\n"
    nb.cells.insert(0, nbformat.v4.new_code_cell(inspect.getsource(all_pairs) + pairs + PATCH))
    nb.cells.append(nbformat.v4.new_code_cell("print(_json.dumps(_kvmath_layout))"))
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    out = nb.cells[-1].outputs[0]["text"]
    return json.loads(out)


NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

#: The chapters whose every frame ``make test`` lays out: one from each part of the book (the
#: sample chapter, the decode arithmetic, serving). Each chapter costs a second execution of its
#: notebook and a render of every frame (4 minutes for all 17 on two cores, a third of the suite),
#: so the other chapters' frames are checked in ``make test-full`` only.
FAST_LAYOUT = {"00_sample_rhythm", "04_critical_batch", "11_serving"}


@pytest.mark.parametrize("path", [p if p.stem in FAST_LAYOUT else pytest.param(p, marks=pytest.mark.slow)
                                  for p in NOTEBOOKS], ids=lambda p: p.stem)
@pytest.mark.parametrize("every_pair", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["each-value", "every-pair"])
def test_no_chapter_figure_fails_or_has_clipped_or_colliding_labels_at_any_frame(path, every_pair):
    """Every value of every control (the others at their defaults) is laid out cleanly; in the
    every-pair variant (make test-full: about 3 minutes more in all), also every pair of values of
    any two controls renders without an error or a NaN/inf in its text."""
    problems = chapter_layout_problems(path, every_pair)
    assert not problems, f"{path.name}:\n" + "\n".join(problems)
