"""Figures a reader can read: HiDPI pixels, text size, and no clipped or colliding labels.

``kvmath.plots.layout_problems`` compares matplotlib's text extents with the
figure, the axes and each other; ``InteractiveFigure.layout_problems`` runs
it on every frame. The last test runs it on every interactive figure of
every chapter (slow: it executes the notebooks, so only under `make test`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

from kvmath import plots  # noqa: E402
from kvmath.interactive import Slider, interactive_figure  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


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


def test_marker_cut_by_the_edge_and_marker_outside_are_reported():
    fig, ax = plots.new_figure((4, 3))
    try:
        ax.plot([1, 2, 5], [1, 2, 3], "o")
        ax.set_xlim(1, 3)
        ax.set_ylim(0, 4)
        problems = plots.layout_problems(fig)
        assert "marker at (1, 1) is cut by the axes edge" in problems
        assert "marker at (5, 3) is outside the axes and clipped away" in problems
    finally:
        plots.close(fig)


def test_overlapping_labels_and_label_past_the_axes_are_reported():
    fig, ax = plots.new_figure((4, 3))
    try:
        ax.set_xlim(0, 1)
        ax.text(0.5, 0.5, "first label here")
        ax.text(0.52, 0.51, "second label")
        ax.text(0.95, 0.2, "runs off the right")
        problems = plots.layout_problems(fig, lines=False)
        assert "label 'first label here' overlaps label 'second label'" in problems
        assert "label 'runs off the right' runs past the edge of its axes" in problems
    finally:
        plots.close(fig)


def test_label_crossed_by_a_line_is_reported():
    fig, ax = plots.new_figure((4, 3))
    try:
        ax.plot([0, 1], [0, 1], label="roof")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.text(0.3, 0.45, "crossed by the diagonal")
        assert "label 'crossed by the diagonal' is crossed by line 'roof'" in plots.layout_problems(fig)
        assert not any("crossed" in p for p in plots.layout_problems(fig, lines=False))
    finally:
        plots.close(fig)


def test_vline_label_near_the_right_edge_is_not_clipped():
    fig, ax = plots.new_figure((4, 3))
    try:
        plots.log_batch_axis(ax)
        ax.set_xlim(1, 1024)
        ax.set_ylim(0, 1)
        plots.mark_vline(ax, 900, "B_crit = 900")
        assert plots.layout_problems(fig) == []
    finally:
        plots.close(fig)


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


def test_interactive_html_is_accessible():
    f = interactive_figure(moving_marker, {"x": Slider([2, 5], default=5, label="batch B")},
                           caption="Fig. 1: a dot moves")
    html = f.to_html()
    assert 'aria-valuetext="batch B 5"' in html
    assert 'aria-live="polite"' in html
    assert "kvmath-interactive-hint" in html and "\u2190/\u2192" in html
    assert 'alt="Fig. 1: a dot moves (batch B = 5)"' in html


# --- every interactive figure of every chapter ------------------------------------------

PATCH = r'''
import json as _json, kvmath.interactive as _ki
_kvmath_layout = []
_kvmath_to_html = _ki.InteractiveFigure.to_html
def _checked_to_html(self):
    _kvmath_layout.extend(self.layout_problems())
    return _kvmath_to_html(self)
_ki.InteractiveFigure.to_html = _checked_to_html
'''


def chapter_layout_problems(path: Path) -> list[str]:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(PATCH))
    nb.cells.append(nbformat.v4.new_code_cell("print(_json.dumps(_kvmath_layout))"))
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    out = nb.cells[-1].outputs[0]["text"]
    return json.loads(out)


NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.skipif(os.environ.get("KVMATH_REQUIRE_BROWSER") != "1" and os.environ.get("KVMATH_SLOW") != "1",
                    reason="executes every notebook: runs under `make test` (or KVMATH_SLOW=1)")
@pytest.mark.xfail(strict=False, reason="the chapters' figures adopt mark_vline placement, fixed_limits "
                   "and padded limits in the chapter pass (issue 13); this reports what is left")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_chapter_figure_has_clipped_or_colliding_labels_at_any_frame(path):
    problems = chapter_layout_problems(path)
    assert not problems, f"{path.name}:\n" + "\n".join(problems)
