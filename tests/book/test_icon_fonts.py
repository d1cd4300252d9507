"""The theme's icon fonts, cut down to the glyphs its stylesheets still draw (kvbook.sphinx.book_pages).

Review R22r-8: the subsets came out empty because pydata-sphinx-theme writes its icons as literal
private-use characters, which the escape-only reading missed; the 48 GitHub marks of the references page and
every admonition icon were blank.
"""

from __future__ import annotations

import re
from pathlib import Path

from fontTools.ttLib import TTFont

from kvbook.sphinx.book_pages import css_glyphs

FONTS = ("fa-solid-900", "fa-regular-400", "fa-brands-400")


def test_a_stylesheets_glyphs_escaped_and_written_out():
    css = '.a:before{content:"\\f107"}.b{--pst-icon-github:"\uf09b";--x:"\uf058"}.c{content:"#"}'
    assert css_glyphs(css) == {0xF107, 0xF09B, 0xF058}
    assert css_glyphs('p{content:"A"}') == set()


def test_every_glyph_the_built_stylesheets_draw_is_in_its_fonts_subset(built_book):
    import pydata_sphinx_theme

    originals = Path(pydata_sphinx_theme.__file__).parent / "theme" / "pydata_sphinx_theme" / "static" / \
        "vendor" / "fontawesome" / "webfonts"
    webfonts = built_book / "_static" / "vendor" / "fontawesome" / "webfonts"
    drawn = set()
    for css in (built_book / "_static").rglob("*.css"):
        drawn |= css_glyphs(css.read_text(encoding="utf-8", errors="replace"))
    missing = {}
    for name in FONTS:
        held = set(TTFont(originals / f"{name}.ttf").getBestCmap())
        subset = set(TTFont(webfonts / f"kvmath-{name}-subset.ttf").getBestCmap() or {})
        assert subset <= held, name
        if drawn & held - subset:
            missing[name] = sorted(hex(c) for c in drawn & held - subset)
    assert not missing, f"glyphs drawn but cut from the subsets: {missing}"
    # the marks the review found blank: GitHub (brands) and an admonition's circle-check (solid)
    brands = TTFont(webfonts / "kvmath-fa-brands-400-subset.ttf").getBestCmap() or {}
    solid = TTFont(webfonts / "kvmath-fa-solid-900-subset.ttf").getBestCmap() or {}
    assert 0xF09B in brands and 0xF058 in solid
    references = (built_book / "book" / "references.html").read_text(encoding="utf-8")
    assert len(re.findall(r'class="[^"]*\bgithub\b', references)) >= 40
