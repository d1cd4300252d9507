"""Print the built book to one PDF with the headless Chromium the tests use.

Usage: python scripts/make_pdf.py [HTML_DIR] [OUT] [TOC]   (or `make pdf`)
  HTML_DIR defaults to _build/html, OUT to HTML_DIR/kvmath-book.pdf, TOC (the
  build's table of contents, for the reading order) to the repository's _toc.yml;
  the workshop kit prints each of its books to a PDF beside it, with that build's
  own _toc.yml (kvbook/workshop/kit.py).

Once the PDF is written, every page's download menu is pointed at it
(``kvbook.sphinx.book_pages.link_pdf``, by its path from the page): a build
offers the PDF only once this has made it.

Every page of the table of contents (_toc.yml), in reading order, is opened
from a local server in Debian's Chromium (/usr/bin/chromium, driven by
Playwright as in tests/browser/sitecheck.py; no browser is downloaded), with the
print stylesheet (_static/kvmath.css): hidden code and solutions opened,
controls hidden, code wrapped. Each page is printed once MathJax has typeset
it; poppler's ``pdfunite`` joins the pages into one file. Beside the PDF,
``OUT.json`` records the first PDF page of every document, so a test can
open chapter one's first page.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.browser.sitecheck import launch_browser, serve  # noqa: E402


def reading_order(toc_path: Path = ROOT / "_toc.yml") -> list[str]:
    """Documents of the book in reading order (the root first)."""
    toc = yaml.safe_load(toc_path.read_text())
    order = [toc["root"]]

    def walk(entries):
        for e in entries or []:
            if "file" in e:
                order.append(e["file"])
            walk(e.get("sections"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return order


def page_count(pdf: Path) -> int:
    out = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    return int(next(line.split()[-1] for line in out.splitlines() if line.startswith("Pages:")))


def main(html_dir: str = "_build/html", out: str | None = None, toc: str | None = None) -> int:
    from kvbook.sphinx.book_pages import PDF_NAME, link_pdf

    html = (ROOT / html_dir).resolve()
    target = Path(out).resolve() if out else html / PDF_NAME
    for tool in ("pdfunite", "pdfinfo"):
        if shutil.which(tool) is None:
            print(f"make_pdf: '{tool}' not found: install poppler-utils (`make poppler`)")
            return 1
    if not (html / "index.html").exists():
        print(f"make_pdf: {html} has no built book: run `make book` first")
        return 1
    docs = reading_order(Path(toc)) if toc else reading_order()
    first_pages: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp, serve(html) as base, launch_browser() as browser:
        parts = []
        page_no = 1
        for i, doc in enumerate(docs):
            tab = browser.new_page(viewport={"width": 1100, "height": 1400})
            tab.goto(f"{base}{doc}.html", wait_until="networkidle", timeout=60_000)
            tab.evaluate("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
            tab.evaluate("() => window.kvmathOpenAll && window.kvmathOpenAll()")
            tab.emulate_media(media="print")
            part = Path(tmp) / f"{i:03d}.pdf"
            tab.pdf(path=str(part), format="A4", print_background=True,
                    margin={"top": "16mm", "bottom": "16mm", "left": "14mm", "right": "14mm"})
            tab.close()
            first_pages[doc] = page_no
            page_no += page_count(part)
            parts.append(str(part))
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["pdfunite", *parts, str(target)], check=True)
    Path(str(target) + ".json").write_text(json.dumps({"pages": page_no - 1, "first_page": first_pages},
                                                      indent=1))
    linked = link_pdf(html, target)
    print(f"wrote {target} ({page_no - 1} pages, {target.stat().st_size / 1e6:.1f} MB); "
          f"the download menu of {linked} pages links it")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
