"""`make pdf` prints the whole book as one document; read the PDF as a reader would, and look at it.

The PDF is made by scripts/make_pdf.py (headless Debian Chromium, as the
browser test) into _build/html/kvmath-book.pdf; this test makes it when it is
missing or older than the built book. The file is read with pypdf
(tests/browser/pdfcheck.py: bookmarks, labels, links, where each page's text and
images lie) and poppler-utils (pdftotext, pdftoppm, pdfimages; `make poppler`).
Printing the book is slow, so these tests run in `make test-full`.

Three pages are also compared, as pictures, with references committed in
tests/browser/pdf_reference/ (100 dpi, grayscale). A change to what those pages
print (their chapter's text, a figure) changes the picture: look at the page, then
write the references anew with

    KVMATH_PDF_REFERENCES=write .venv/bin/python -m pytest tests/browser/test_pdf.py -k picture
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from make_pdf import main as make_pdf
from make_pdf import parts, reading_order, slug

from tests.browser import pdfcheck

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = Path(__file__).with_name("pdf_reference")

pytestmark = pytest.mark.slow  # prints every page of the book with Chromium

TOOLS = ("pdftotext", "pdftoppm", "pdfimages")


@pytest.fixture(scope="module")
def book_pdf(built_book, browser) -> Path:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: `make poppler` installs poppler-utils")
    pdf = built_book / "kvmath-book.pdf"
    if not pdf.exists() or pdf.stat().st_mtime < (built_book / "index.html").stat().st_mtime:
        assert make_pdf(str(built_book.relative_to(ROOT))) == 0
    return pdf


@pytest.fixture(scope="module")
def reader(book_pdf):
    import logging

    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # Chromium's trailer undercounts its objects
    return PdfReader(book_pdf)


@pytest.fixture(scope="module")
def page_map(book_pdf) -> dict:
    return json.loads(Path(str(book_pdf) + ".json").read_text())


@pytest.fixture(scope="module")
def boxes(reader):
    return [pdfcheck.page_boxes(reader, p) for p in reader.pages]


@pytest.fixture(scope="module")
def page_texts(book_pdf) -> list[str]:
    out = subprocess.run(["pdftotext", "-layout", str(book_pdf), "-"], capture_output=True, text=True,
                         check=True).stdout
    return out.split("\f")[:-1]


def _built(built_book: Path, doc: str):
    from bs4 import BeautifulSoup

    return BeautifulSoup((built_book / f"{doc}.html").read_text(encoding="utf-8"), "html.parser")


def _words(text: str) -> str:
    return " ".join(text.split())


# --- the whole book, in order ----------------------------------------------------------------

def test_the_pdf_holds_the_whole_book_in_reading_order(reader, page_map):
    docs = reading_order()
    assert len(reader.pages) == page_map["pages"]
    assert len(docs) <= len(reader.pages) <= 40 * len(docs)  # every document, and no runaway page breaks
    starts = [page_map["first_page"][d] for d in docs]
    assert starts == sorted(starts) and len(set(starts)) == len(starts), starts
    captions = [p.caption for p in parts() if p.caption]
    assert list(page_map["part_page"]) == captions


def test_chapter_one_starts_with_its_numbered_title_and_text(book_pdf, page_map, page_texts):
    n = page_map["first_page"]["notebooks/01_roofline"]
    text = _words(page_texts[n - 1])
    assert text.startswith("1. Why the GPU waits"), text[:200]
    assert len(text.split()) > 80, text[:500]  # prose, not just a title


def _figures_on(pdf: Path, first: int, last: int) -> list[str]:
    """Colour images at least 300 px wide (the figures)."""
    rows = subprocess.run(["pdfimages", "-f", str(first), "-l", str(last), "-list", str(pdf)],
                          capture_output=True, text=True, check=True).stdout.splitlines()[2:]
    return [r for r in rows if r.split()[5] in ("rgb", "icc", "index") and int(r.split()[3]) >= 300]


def test_chapter_one_prints_its_figures(book_pdf, page_map, built_book):
    first = page_map["first_page"]["notebooks/01_roofline"]
    last = page_map["first_page"]["notebooks/02_kv_cache"] - 1
    figures = _built(built_book, "notebooks/01_roofline").select("article figure img")
    assert len(figures) >= 3
    assert len(_figures_on(book_pdf, first, last)) == len(figures)  # each once, the interactive one at its first frame
    assert _figures_on(book_pdf, first, first), "no figure on chapter one's first page"


# --- bookmarks, page labels, page numbers, contents ---------------------------------------------

def _title(h) -> str:
    """A heading's text as the page shows it; where it holds a formula, its text up to the formula."""
    for a in h.select("a.headerlink"):
        a.decompose()
    math = h.select_one("span.math")
    if math is not None:
        math.insert_before("\0")
    return _words(h.get_text("")).split("\0")[0].rstrip()


def _bookmarked(by_title: dict, title: str) -> list:
    """The bookmarks (depth, page) whose title is ``title``, or starts with it (a title cut at a formula)."""
    return [e for t, entries in by_title.items() if t == title or t.startswith(title) for e in entries]


def test_every_part_chapter_and_section_has_a_bookmark_to_its_page(reader, page_map, built_book):
    outline = pdfcheck.outline_titles(reader)
    by_title = {}
    for depth, title, page in outline:
        by_title.setdefault(_words(title), []).append((depth, page + 1))
    for caption, page in page_map["part_page"].items():
        assert (0, page) in by_title.get(caption, []), (caption, by_title.get(caption))
    for part in parts():
        for doc in part.docs:
            article = _built(built_book, doc).select_one("article.bd-article")
            title = _title(article.find("h1"))
            depth = 1 if part.caption else 0  # a page before the first part stands on its own
            assert (depth, page_map["first_page"][doc]) in _bookmarked(by_title, title), (doc, title)
            if article.find("h1").select_one(".section-number"):  # a chapter: each section, under it
                for h2 in article.find_all("h2"):
                    entries = _bookmarked(by_title, _title(h2))
                    assert any(d == depth + 1 and page >= page_map["first_page"][doc] for d, page in entries), \
                        (doc, _title(h2))


def test_pages_carry_labels_and_print_the_same_number(book_pdf, reader, page_map):
    labels = reader.page_labels
    body = page_map["body_start"]
    first_part = min(page_map["part_page"].values())
    assert body == first_part  # arabic numbers start at the first part's opening page
    assert labels[: body - 1] == [_roman(i) for i in range(1, body)]        # the front matter: i, ii, ...
    assert labels[body - 1:] == [str(i) for i in range(1, len(labels) - body + 2)]
    # the number printed in each page's bottom margin is its label; the title page has none
    height = float(reader.pages[0].mediabox.height)
    top = int(height - pdfcheck.MARGINS_PT["bottom"])
    footers = subprocess.run(["pdftotext", "-x", "0", "-y", str(top), "-W", "600", "-H", str(int(height) - top),
                              str(book_pdf), "-"], capture_output=True, text=True, check=True).stdout.split("\f")
    # the number is the margin's last line: a stretched glyph of a display equation (MathJax's brace extender in
    # chapter 15's (15.1)) can report a text position in the margin while it is drawn inside the page
    printed = [(f.strip().splitlines() or [""])[-1].strip() for f in footers[: len(labels)]]
    assert printed[0] == ""
    assert printed[1:] == labels[1:], [(i + 1, p, l) for i, (p, l) in enumerate(zip(printed, labels)) if p != l][:5]


def _roman(n: int) -> str:
    """Lower-case roman numerals, written out for the test (i..xxxix)."""
    tens, ones = divmod(n, 10)
    return "x" * tens + ["", "i", "ii", "iii", "iv", "v", "vi", "vii", "viii", "ix"][ones]


def test_the_contents_give_each_chapters_page(reader, page_map, page_texts, built_book):
    contents = [i for i, t in enumerate(page_texts) if i < page_map["body_start"] and "Contents" in t]
    assert contents, "no contents page in the front matter"
    text = "\n".join(page_texts[contents[0]: page_map["body_start"] - 1])
    labels = reader.page_labels
    checked = 0
    for doc in reading_order():
        h1 = _built(built_book, doc).select_one("article.bd-article h1")
        number = h1.select_one(".section-number")
        if number is None:
            continue
        title = _title(h1)[len(number.get_text()):].strip()
        line = next((ln for ln in text.splitlines() if _words(ln).startswith(f"{number.get_text().strip()[:-1]} "
                                                                             f"{title[:30]}")), None)
        assert line is not None, (doc, title)
        assert line.split()[-1] == labels[page_map["first_page"][doc] - 1], (doc, line)
        checked += 1
    assert checked >= 16


# --- no empty or mostly blank page ------------------------------------------------------------

def _exempt(page_map: dict) -> dict[int, str]:
    """Pages that may be mostly blank: the title page, each part opener, each page's last page."""
    starts = sorted(set(page_map["first_page"].values()) | set(page_map["part_page"].values()))
    out = {1: "title page"}
    out.update({p: "part opener" for p in page_map["part_page"].values()})
    out.update({s - 1: "last page of a page of the book (or of the contents)" for s in starts
                if s > 1 and s - 1 not in out})
    out[page_map["pages"]] = "last page"
    return out


def test_the_blank_measure_tells_a_full_page_from_an_opener(boxes, page_map):
    """The measure itself: the book's pages are mostly covered (median), a part opener nearly empty."""
    import statistics

    opener = boxes[min(page_map["part_page"].values()) - 1]
    body = [b.blank_fraction() for b in boxes[page_map["body_start"]:]]
    assert statistics.median(body) < 0.3, statistics.median(body)
    assert opener.blank_fraction() > 0.8, opener.blank_fraction()


def test_no_page_holds_only_an_empty_frame(boxes, reader):
    labels = reader.page_labels
    empty = [labels[i] for i, b in enumerate(boxes) if b.empty_frame]
    bare = [labels[i] for i, b in enumerate(boxes) if b.blank_fraction() >= 0.999]
    assert not empty, f"pages that draw a box and hold nothing in it: {empty}"
    assert not bare, f"pages with no text and no image: {bare}"


def test_no_page_is_more_than_60_percent_blank_but_openers_and_last_pages(boxes, reader, page_map):
    exempt = _exempt(page_map)
    labels = reader.page_labels
    blank = [(labels[i], round(b.blank_fraction(), 2)) for i, b in enumerate(boxes)
             if i + 1 not in exempt and b.blank_fraction() > 0.6]
    assert not blank, f"pages (label, blank share of the text area) more than 60% blank: {blank}"


def test_nothing_is_wider_than_the_page(page_map):
    """No table, code block, image or equation reaches past the text's right edge (it would be cut)."""
    assert page_map["too_wide"] == []


# --- links ------------------------------------------------------------------------------------

def test_links_resolve_inside_the_pdf_or_go_to_the_web(reader, built_book, page_map):
    found = pdfcheck.links(reader)
    names = {n.lstrip("/") for n in reader.named_destinations}
    local = [t for _, kind, t in found if kind != "dest" and re.search(r"//(localhost|127\.|0\.0\.0\.0|\[::1\])|^file:", t)]
    assert not local, local[:5]
    assert not [t for _, kind, t in found if kind == "other"]
    dead = [(i + 1, t) for i, kind, t in found if kind == "dest" and t not in names]
    assert not dead, dead[:5]
    # every cross-reference and citation of the pages is a link inside the PDF (headers' permalinks
    # and a figure's link to its own image are not printed)
    internal = 0
    for doc in reading_order():
        article = _built(built_book, doc).select_one("article.bd-article")
        internal += sum(1 for a in article.select("a.reference.internal")
                        if "headerlink" not in a.get("class", []) and "image-reference" not in a.get("class", []))
    inside = sum(kind == "dest" for _, kind, _ in found)
    assert inside >= internal, (inside, internal)


def test_a_citation_goes_to_the_references_page(reader, page_map):
    """Chapter one cites Williams et al. (2009): the link lands on the References pages."""
    first = page_map["first_page"]["book/references"]
    last = min(p for p in list(page_map["first_page"].values()) + list(page_map["part_page"].values())
               if p > first) - 1
    ch1 = range(page_map["first_page"]["notebooks/01_roofline"] - 1, page_map["first_page"]["notebooks/02_kv_cache"] - 1)
    to_refs = [t for i, kind, t in pdfcheck.links(reader) if i in ch1 and kind == "dest"
               and t.startswith(slug("book/references") + "--")]
    assert to_refs
    dests = reader.named_destinations
    assert all(first <= reader.get_destination_page_number(dests["/" + t]) + 1 <= last for t in to_refs)


# --- nothing that only works on screen; hidden code printed ----------------------------------------

#: text that a page shows only for its controls, each with the source that writes it
LIVE_ONLY = {
    "Make every control live": "packages/kvbook/kvbook/live/live.js",
    "Drag the slider": "packages/kvbook/kvbook/interactive.py",
    "Tap to enlarge": "_static/kvmath.js",
    "Show code cell source": "_build/html/notebooks/01_roofline.html",
    "Hide code cell source": "_build/html/notebooks/01_roofline.html",
    "Toggle hidden content": "_build/html/notebooks/01_roofline.html",
}


def test_no_text_that_only_works_on_screen(page_texts, built_book):
    """No control, button or toggle prints; a phrase may still print where the prose itself says it."""
    prose = []
    for doc in reading_order():
        article = _built(built_book, doc).select_one("article.bd-article")
        for el in article.select("script, summary, .kvmath-interactive"):
            el.decompose()
        prose.append(_words(article.get_text(" ")))
    prose = " ".join(prose)
    text = _words(" ".join(page_texts))
    for phrase, source in LIVE_ONLY.items():
        assert phrase in (ROOT / source).read_text(encoding="utf-8"), (phrase, source)  # still what the page says
        assert text.count(phrase) <= prose.count(phrase), phrase


def test_each_interactive_figure_says_the_settings_it_prints(page_texts, built_book):
    expected = []
    for doc in reading_order():
        for data in _built(built_book, doc).select("article script.kvmath-interactive-data"):
            controls = json.loads(data.string).get("controls") or []
            if controls:
                expected.append("Printed with " + ", ".join(f"{c['label']} = {c['labels'][c['default']]}"
                                                              for c in controls) + ".")
    assert len(expected) >= 10
    text = _words(" ".join(page_texts))
    assert [e for e in expected if _words(e) not in text] == []


def test_hidden_code_is_printed_as_code(page_texts, page_map, built_book):
    first = page_map["first_page"]["notebooks/01_roofline"]
    last = page_map["first_page"]["notebooks/02_kv_cache"] - 1
    chapter = _words(" ".join(page_texts[first - 1: last]))
    hidden = _built(built_book, "notebooks/01_roofline").select("article details.hide .cell_input pre")
    assert len(hidden) >= 3
    for pre in hidden:
        first_line = _words(pre.get_text().strip().splitlines()[0])
        assert first_line in chapter, first_line


# --- three pages, looked at -------------------------------------------------------------------

def _hidden_code_page(page_texts, page_map, built_book) -> int:
    """The page that prints chapter one's longest hidden code cell (its first line)."""
    cells = _built(built_book, "notebooks/01_roofline").select("article details.hide .cell_input pre")
    code = max(cells, key=lambda pre: len(pre.get_text())).get_text().strip().splitlines()[0]
    first = page_map["first_page"]["notebooks/01_roofline"]
    return next(i + 1 for i in range(first - 1, len(page_texts)) if _words(code) in _words(page_texts[i]))


def _figure_page(page_texts, page_map, built_book) -> int:
    """The page of chapter three's first static figure (found by its caption)."""
    article = _built(built_book, "notebooks/03_min_step").select_one("article")
    fig = next(f for f in article.select("figure") if f.select_one("a > img") and f.figcaption)
    caption = _words(fig.figcaption.get_text(" "))[:60]
    first = page_map["first_page"]["notebooks/03_min_step"]
    return next(i + 1 for i in range(first - 1, len(page_texts)) if caption in _words(page_texts[i]))


#: each picture's page, and how it is found: name -> function of (page_texts, page_map, built_book)
PICTURES = {
    "chapter-opener": lambda texts, pm, built: pm["first_page"]["notebooks/02_kv_cache"],
    "hidden-code": _hidden_code_page,
    "figure": _figure_page,
}
#: how far a page may differ from its reference: the mean of |difference| over all pixels, in grey
#: levels of 255, and the share of pixels that differ by more than a quarter of the scale. Anti-aliasing
#: of another FreeType or poppler moves edges by a pixel (well under both); one word more or less, a
#: figure redrawn or a line moved exceeds them.
MEAN_LEVELS, CHANGED_SHARE = 2.0, 0.004


def _render(pdf: Path, page: int, out: Path):
    """The page at 100 dpi in 16 grey levels (what the references hold: about 50 KB a page)."""
    from PIL import Image

    subprocess.run(["pdftoppm", "-f", str(page), "-l", str(page), "-r", "100", "-gray", "-png", "-singlefile",
                    str(pdf), str(out)], check=True)
    with Image.open(out.with_suffix(".png")) as im:
        grey = im.convert("L").point(lambda v: round(v / 17) * 17)
    palette = Image.new("P", (1, 1))
    palette.putpalette([v for level in range(0, 256, 17) for v in (level, level, level)])
    return grey.convert("RGB").quantize(palette=palette, dither=Image.Dither.NONE)


@pytest.mark.parametrize("name", list(PICTURES))
def test_picture_of_a_page_matches_its_reference(name, book_pdf, page_texts, page_map, built_book, tmp_path):
    from PIL import Image, ImageChops

    page = PICTURES[name](page_texts, page_map, built_book)
    shot = _render(book_pdf, page, tmp_path / name)
    reference = REFERENCES / f"{name}.png"
    if os.environ.get("KVMATH_PDF_REFERENCES") == "write":
        REFERENCES.mkdir(exist_ok=True)
        shot.save(reference, optimize=True, bits=4)
        pytest.skip(f"wrote {reference.relative_to(ROOT)} from page {page}")
    assert reference.exists(), f"{reference} missing: see this file's docstring"
    with Image.open(reference) as ref:
        a, b = shot.convert("L"), ref.convert("L")
    assert a.size == b.size, (a.size, b.size)
    diff = ImageChops.difference(a, b)
    hist = diff.histogram()
    pixels = a.size[0] * a.size[1]
    mean = sum(level * count for level, count in enumerate(hist)) / pixels
    changed = sum(hist[64:]) / pixels
    if mean > MEAN_LEVELS or changed > CHANGED_SHARE:
        a.save(tmp_path / f"{name}-page.png")
        diff.point(lambda v: 255 - min(255, 4 * v)).save(tmp_path / f"{name}-diff.png")
    assert mean <= MEAN_LEVELS and changed <= CHANGED_SHARE, (
        f"page {page} ({name}) differs from {reference.name}: mean {mean:.2f} levels, {changed:.2%} of pixels "
        f"changed; the page and the difference are in {tmp_path}")
