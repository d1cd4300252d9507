"""`make pdf` prints the whole book to one PDF; open it with poppler and look at it.

The PDF is made by scripts/make_pdf.py (headless Debian Chromium, as the
browser test) into _build/html/kvmath-book.pdf; this test makes it when it
is missing or older than the built book. poppler-utils (pdfinfo, pdftotext,
pdftoppm, pdfimages) is installed by `make test` / `make poppler`. Printing the book is
slow, so these tests run in `make test-full`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from make_pdf import main as make_pdf, page_count, reading_order

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # prints every page of the book with Chromium

TOOLS = ("pdfinfo", "pdftotext", "pdftoppm", "pdfimages", "pdfunite")


@pytest.fixture(scope="module")
def book_pdf(built_book, browser) -> Path:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: `make poppler` installs poppler-utils")
    pdf = built_book / "kvmath-book.pdf"
    if not pdf.exists() or pdf.stat().st_mtime < (built_book / "index.html").stat().st_mtime:
        browser_free = make_pdf(str(built_book.relative_to(ROOT)))
        assert browser_free == 0
    return pdf


def first_page_of(pdf: Path, doc: str) -> int:
    return json.loads(Path(str(pdf) + ".json").read_text())["first_page"][doc]


def test_the_pdf_holds_the_whole_book(book_pdf):
    pages = page_count(book_pdf)
    docs = reading_order()
    assert pages == json.loads(Path(str(book_pdf) + ".json").read_text())["pages"]
    assert len(docs) <= pages <= 40 * len(docs), pages  # every document, and no runaway page breaks
    starts = [first_page_of(book_pdf, d) for d in docs]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)  # in reading order


def chapter_one_pages(pdf: Path) -> tuple[int, int]:
    docs = reading_order()
    i = docs.index("notebooks/01_roofline")
    return first_page_of(pdf, docs[i]), first_page_of(pdf, docs[i + 1]) - 1


def figures_on(pdf: Path, first: int, last: int) -> list[str]:
    """Colour images at least 300 px wide (figures; not icons or rasterised shadows)."""
    rows = subprocess.run(["pdfimages", "-f", str(first), "-l", str(last), "-list", str(pdf)],
                          capture_output=True, text=True, check=True).stdout.splitlines()[2:]
    return [r for r in rows if r.split()[5] in ("rgb", "icc", "index") and int(r.split()[3]) >= 300]


def test_chapter_one_starts_with_its_numbered_title_and_text(book_pdf, tmp_path):
    n, _ = chapter_one_pages(book_pdf)
    text = subprocess.run(["pdftotext", "-f", str(n), "-l", str(n), "-layout", str(book_pdf), "-"],
                          capture_output=True, text=True, check=True).stdout
    assert "1. Why the GPU waits" in " ".join(text.split()), text[:300]
    assert len(text.split()) > 80, text[:500]  # prose, not just a title
    # and it renders: the page is not blank
    subprocess.run(["pdftoppm", "-f", str(n), "-l", str(n), "-r", "40", "-gray", "-png", str(book_pdf),
                    str(tmp_path / "p")], check=True)
    from PIL import Image

    (png,) = tmp_path.glob("p*.png")
    with Image.open(png) as im:
        dark = sum(im.convert("L").histogram()[:128])
        assert dark > 0.01 * im.size[0] * im.size[1]


def test_chapter_one_prints_its_figures(book_pdf):
    first, last = chapter_one_pages(book_pdf)
    assert len(figures_on(book_pdf, first, last)) >= 3  # two static figures and the interactive one


def test_chapter_one_first_page_has_a_figure(book_pdf):
    n, _ = chapter_one_pages(book_pdf)
    assert figures_on(book_pdf, n, n), "no figure on chapter one's first page"


def test_print_hides_dead_controls_and_shows_solutions(book_pdf):
    text = subprocess.run(["pdftotext", "-layout", str(book_pdf), "-"], capture_output=True, text=True,
                          check=True).stdout
    assert "Show code cell source" not in text
    assert "Drag the slider" not in text
