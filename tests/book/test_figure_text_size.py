"""Every figure PNG records its smallest text (issue 22, item 2: the phone test reads it).

``kvbook.plots.min_text_px`` gives the smallest drawn text in image pixels (font size in
points x dpi / 72; a mathtext subscript at its shrunk size), and every writer of the book's
figure PNGs stores it in the PNG's ``kvbook:min-text-px`` text chunk: the canvas of static
figures and diagrams (savefig and IPython's display), ``InteractiveFigure.render`` (frames),
and the build's palette re-encoding keeps it. Expected values are worked out by hand here.
"""

from __future__ import annotations

import io

import matplotlib
import pytest

matplotlib.use("Agg")

from PIL import Image  # noqa: E402

from kvbook import plots  # noqa: E402
from kvbook.interactive import Slider, interactive_figure  # noqa: E402


def chunk(png: bytes) -> str | None:
    with Image.open(io.BytesIO(png)) as im:
        return im.text.get(plots.MIN_TEXT_KEY)


@pytest.fixture
def fig():
    figure, _ = plots.new_figure((4, 3))
    yield figure
    plots.close(figure)


def test_smallest_text_counts_what_is_drawn_at_its_size(fig):
    ax = fig.axes[0]
    ax.set_title("title", fontsize=12)
    ax.plot([0, 1], [0, 1], label="a line")
    ax.legend(fontsize=8)
    ax.tick_params(labelsize=10)
    ax.text(0.5, 0.5, "hidden", fontsize=3, visible=False)       # not drawn
    ax.text(0.2, 0.2, "   ", fontsize=3)                          # nothing written
    other = fig.add_axes((0.1, 0.1, 0.2, 0.2))
    other.set_title("in a hidden axes", fontsize=4)
    other.set_visible(False)
    fig.canvas.draw()
    # the legend's 8 pt at the figure's 200 dpi (100 CSS px per inch, 2 pixels per CSS px):
    # 8 x 200 / 72 = 22.222 pixels
    assert fig.dpi == 200
    assert plots.min_text_px(fig) == pytest.approx(8 * 200 / 72, abs=1e-9)
    assert plots.min_text_px(fig, dpi=100) == pytest.approx(8 * 100 / 72, abs=1e-9)
    # a subscript is drawn at 0.7 of its text's size (matplotlib's mathtext shrink factor):
    # a 10 pt "$x_1$" writes its 1 at 7 pt, 7 x 200 / 72 = 19.444 pixels
    ax.text(0.8, 0.1, r"$x_1$", fontsize=10)
    assert plots.min_text_px(fig) == pytest.approx(7 * 200 / 72, abs=1e-6)


def test_tick_labels_count_only_where_the_axis_draws_them(fig):
    ax = fig.axes[0]
    ax.set_axis_on()
    ax.set_xticks([0, 5, 10])
    ax.set_xlim(0, 6)                 # the tick at 10 is outside the view: its label is not drawn
    ax.tick_params(labelsize=9)
    fig.canvas.draw()
    ax.xaxis.get_major_ticks()[2].label1.set_fontsize(2)
    # 9 pt tick labels: 9 x 200 / 72 = 25.0 pixels; the 2 pt label at 10 is never drawn
    assert plots.min_text_px(fig) == pytest.approx(25.0, abs=1e-9)
    ax.xaxis.get_major_ticks()[1].label1.set_fontsize(6)          # the label at 5 is drawn: 6 pt
    assert plots.min_text_px(fig) == pytest.approx(6 * 200 / 72, abs=1e-9)


def test_a_figure_with_no_text_records_none(fig):
    fig.axes[0].set_axis_off()
    assert plots.min_text_px(fig) is None
    assert plots.png_text(fig) == {}


def test_savefig_and_ipython_display_write_the_chunk_at_the_dpi_they_render():
    from IPython.core.pylabtools import print_figure

    figure, ax = plots.new_figure((3, 2))
    try:
        ax.set_axis_off()
        ax.text(0.1, 0.5, "nine points", fontsize=9)
        plots.BookCanvas(figure)
        # IPython's inline display: the figure's dpi, 9 x 200 / 72 = 25.00 pixels
        assert chunk(print_figure(figure, "png", bbox_inches="tight")) == "25.00"
        buf = io.BytesIO()
        figure.savefig(buf, format="png", dpi=100, metadata={"Description": "kept"})
        # at 100 dpi: 9 x 100 / 72 = 12.50 pixels, beside the caller's own text chunk
        assert chunk(buf.getvalue()) == "12.50"
        assert Image.open(io.BytesIO(buf.getvalue())).text["Description"] == "kept"
    finally:
        plots.close(figure)


def test_a_chapter_figure_shows_with_the_chunk():
    """A static chapter figure, displayed as a notebook displays it: its 8 pt legend, 22.22 pixels."""
    from IPython.core.pylabtools import print_figure

    from kvbook.figures import ch11

    figure = ch11.interference(batch=64, context=2000)
    assert isinstance(figure.canvas, plots.BookCanvas)
    assert chunk(print_figure(figure, "png", bbox_inches="tight")) == f"{8 * 200 / 72:.2f}"
    plots.close(figure)


def test_interactive_frames_carry_the_chunk():
    def setup(fig):
        ax = fig.add_subplot()
        ax.set_axis_off()
        label = ax.text(0.1, 0.5, "", fontsize=9)

        def update(size):
            label.set_text(f"size {size}")
            label.set_fontsize(size)

        return update

    f = interactive_figure(setup, {"size": Slider([9, 7.2, 12], default=9)})
    # the frames at 9, 7.2 and 12 pt, 200 pixels per inch: 25.00, 20.00 and 33.33 pixels
    assert [chunk(png) for png in f.frames()] == ["25.00", "20.00", "33.33"]
    assert chunk(f.render(fast=True, size=12)) is None            # a live move skips it
    assert 'type="range"' in f.to_html()


def test_a_diagram_png_carries_the_chunk_beside_its_alt_text():
    import kvmath
    from kvbook import diagrams

    d = diagrams.speculative_step(kvmath.Deployment("llama-3-8b", "h100-sxm"), gamma=4, acceptance=0.8)
    png = d.png()
    # its smallest text is diagrams.FONT = 11 pt: 11 x 200 / 72 = 30.56 pixels
    assert chunk(png) == "30.56"
    assert Image.open(io.BytesIO(png)).text["Description"] == d.alt


def test_the_builds_palette_re_encoding_keeps_the_chunks():
    from kvbook.sphinx.book_pages import palette_png

    figure, ax = plots.new_figure((3, 2))
    try:
        ax.plot([0, 1], [0, 1])
        ax.set_title("a title", fontsize=9)
        plots.BookCanvas(figure)
        buf = io.BytesIO()
        figure.savefig(buf, format="png", metadata={"Description": "what it shows"})
        before = Image.open(io.BytesIO(buf.getvalue())).text
        smaller = palette_png(buf.getvalue())
    finally:
        plots.close(figure)
    assert smaller is not None and len(smaller) < len(buf.getvalue())
    after = Image.open(io.BytesIO(smaller))
    assert after.mode == "P"
    assert after.text[plots.MIN_TEXT_KEY] == before[plots.MIN_TEXT_KEY]
    assert after.text["Description"] == "what it shows"
