"""Alt text of the book's static figures (review R22r-10: 50 of 60 repeated their caption, 8 with raw LaTeX).

Each figure PNG carries a ``Description`` (kvbook.plots.describe: what is on it, panel by panel) that the build
writes into the page's alt text; a diagram's own description (kvbook.diagrams) takes its place. Interactive figures
keep the alt text their code wrote (kvbook.interactive), with the control's value.
"""

from __future__ import annotations

import html
import re

import pytest

from kvbook import plots


def _figure(draw):
    fig, ax = plots.new_figure((6, 3))
    draw(fig, ax)
    fig.canvas.draw()
    try:
        return plots.describe(fig)
    finally:
        plots.close(fig)


def test_plain_text_drops_mathtext_as_a_reader_hears_it():
    assert plots.plain_text(r"$B_\mathrm{crit}$, $P\,b_w / W$") == "B_crit, P b_w / W"
    assert plots.plain_text(r"$\mathdefault{10^{-1}}$, $\mathdefault{10^{0}}$, $\mathdefault{10^{9}}$") \
        == "0.1, 1, 10 to the 9"
    assert plots.plain_text(r"$\gamma$ drafts, $\alpha \leq 0.9$") == "gamma drafts, alpha ≤ 0.9"
    assert plots.plain_text("no math at all") == "no math at all"


def test_a_bar_chart_names_its_bars_and_its_scale():
    def draw(fig, ax):
        ax.barh(["Llama 3 8B", "Llama 3 70B"], [16.1, 141.1], label="weights")
        ax.set_xlabel("memory (GB)")
        ax.set_xlim(0, 160)  # ticks every 20: the first and last drawn are 0 and 160
        ax.legend()

    text = _figure(draw)
    assert text.startswith("A bar chart; y axis: Llama 3 8B, Llama 3 70B; x axis: memory (GB), 0 to 160")
    assert text.endswith("key: weights.")


def test_panels_are_numbered_and_a_title_comes_first():
    def draw(fig, ax):
        fig.clf()
        left, right = fig.subplots(1, 2)
        left.plot([1, 2], [1, 2])
        left.set_yscale("log")
        left.set_ylabel(r"time $t$ (ms)")
        right.scatter([1, 2], [3, 4])
        right.set_title("measured")
        fig.suptitle("Two views")

    text = _figure(draw)
    assert text.startswith("Two views. 2 panels. Panel 1: A line chart; y axis: time t (ms), log scale")
    assert "Panel 2: A scatter plot, measured;" in text


def _static_figures(built_book):
    for page in sorted((built_book / "notebooks").glob("*.html")):
        source = page.read_text(encoding="utf-8")
        for figure in re.findall(r"<figure\b.*?</figure>", source, re.S):
            if "kvmath-interactive" in figure:
                continue
            img = re.search(r'<img\b[^>]*\balt="([^"]*)"', figure)
            caption = re.search(r"<figcaption>(.*?)</figcaption>", figure, re.S)
            if img and caption:
                text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", caption.group(1))).split())
                yield page.stem, html.unescape(img.group(1)), text


@pytest.mark.book
def test_no_static_figure_repeats_its_caption_or_shows_latex(built_book):
    figures = list(_static_figures(built_book))
    assert len(figures) >= 40, len(figures)  # 45 static figures at this writing (the rest are interactive)
    for page, alt, caption in figures:
        body = re.sub(r"^Fig\. [\d.]+\s*", "", caption)
        assert alt and alt != body and body[:40] not in alt, (page, alt)
        assert "$" not in alt and "\\" not in alt, (page, alt)
        assert re.search(r"\d", alt), (page, alt)  # its scales' numbers, at least
