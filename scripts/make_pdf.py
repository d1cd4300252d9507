"""Print the built book to one PDF, as one document, with the headless Chromium the tests use.

Usage: python scripts/make_pdf.py [HTML_DIR] [OUT] [TOC]   (or `make pdf`)
  HTML_DIR defaults to _build/html, OUT to HTML_DIR/kvmath-book.pdf, TOC (the
  build's table of contents, for the reading order and the parts) to the
  repository's _toc.yml; the workshop kit prints each of its books to a PDF beside
  it, with that build's own _toc.yml (kvbook/workshop/kit.py).

How (issue 22: a PDF worth printing):

* **One document.** The main content (``article.bd-article``) of every page of the
  table of contents, in reading order, goes into one HTML document behind a title
  page and a contents page, each part opening on a page of its own. Every id is
  prefixed with its page (``notebooks/01_roofline.html#fig-x`` becomes
  ``#notebooks-01_roofline--fig-x``) and every link between pages is rewritten to
  that anchor, so cross-references and citations are links inside the PDF; links
  to other sites stay as they are; links to files of the build or to this machine
  (which a PDF cannot follow) keep their text only.
* **Nothing that only works on screen.** No page script runs but MathJax: no
  buttons, no toggles, no live figures. Hidden code cells are opened (printed as
  code), a figure's controls are left out and a line says which settings it was
  printed at (its defaults, the frame the page shows first).
* **Printed once, by Chromium** (Debian's /usr/bin/chromium driven by Playwright, as
  in tests/browser/sitecheck.py; no browser is downloaded) with the book's print
  stylesheet (``_static/kvmath.css``, ``@media print``) and this script's page
  layout (``make_pdf.css``: page size, margins, the page number under each page,
  roman for the front matter, arabic from the first part). ``page.pdf`` writes the
  bookmarks from the headings (``outline``, which needs ``tagged``: parts, then
  chapters, then their sections) and a named destination for every link target.
* **Twice, for the contents' page numbers.** Chromium cannot print a link's target
  page number, so the first printing finds each contents entry's page (its named
  destination), the numbers are written into the contents (in a fixed-width
  column, so nothing moves) and the document is printed again.
* **Then pypdf** gives the pages their labels (i, ii, … for the front matter, 1, 2,
  … from the first part, as printed under them), the document its title and
  author, and opens it with the bookmarks shown.

Once the PDF is written, every page's download menu is pointed at it
(``kvbook.sphinx.book_pages.link_pdf``, by its path from the page): a build
offers the PDF only once this has made it. Beside the PDF, ``OUT.json`` records
the first PDF page (1-based) of every document and of every part opener, so a test
can find a chapter (tests/browser/test_pdf.py).
"""

from __future__ import annotations

import io
import json
import logging
import re
import sys
import time
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.browser.sitecheck import launch_browser, serve

PRINT_CSS = Path(__file__).with_name("make_pdf.css")
#: the one document's address on the local server (fulfilled by Playwright, never a file)
DOC_NAME = "kvmath-print-book.html"
_BOOK = "http://book.invalid/"  # a base to resolve a page's relative links against
_LOCAL_HOSTS = ("localhost", "0.0.0.0", "::1")  # and 127.*


# --- the book's structure ------------------------------------------------------------------

@dataclass
class Part:
    caption: str | None           # None: the pages before the first part (the root)
    docs: list[str] = field(default_factory=list)


def parts(toc_path: Path = ROOT / "_toc.yml") -> list[Part]:
    """The root, then each captioned part with its documents in reading order.

    A part without a caption continues the part before it (the table of contents
    numbers a part's chapters in a toctree of their own, after its introduction).
    """
    toc = yaml.safe_load(Path(toc_path).read_text())
    out = [Part(None, [toc["root"]])]

    def walk(entries, into):
        for e in entries or []:
            if "file" in e:
                into.append(e["file"])
            walk(e.get("sections"), into)

    for part in toc.get("parts", []):
        if part.get("caption") or len(out) == 1:
            out.append(Part(part.get("caption")))
        walk(part.get("chapters"), out[-1].docs)
    walk(toc.get("chapters"), out[0].docs)
    return out


def reading_order(toc_path: Path = ROOT / "_toc.yml") -> list[str]:
    """Documents of the book in reading order (the root first)."""
    return [doc for part in parts(toc_path) for doc in part.docs]


def slug(doc: str) -> str:
    """A document's anchor in the one document (its path, '/' as '-')."""
    return doc.replace("/", "-")


# --- one HTML document ---------------------------------------------------------------------

def _text(el) -> str:
    return " ".join(el.get_text(" ").split())


def _heading_text(h) -> str:
    """A heading's text without its permalink mark."""
    import copy

    h = copy.copy(h)
    for a in h.select("a.headerlink"):
        a.decompose()
    return " ".join(h.get_text("").split())


class Assembler:
    """The pages of a built book as one printable document."""

    def __init__(self, html: Path, book_parts: list[Part]):
        from bs4 import BeautifulSoup

        self.parts = book_parts
        self.docs = [d for p in book_parts for d in p.docs]
        self.soups = {d: BeautifulSoup((html / f"{d}.html").read_text(encoding="utf-8"), "html.parser")
                      for d in self.docs}
        self.unresolved: list[str] = []   # intra-book links whose target id is missing (to the page top)
        self.unlinked: list[str] = []     # links a PDF cannot follow (files of the build, this machine)

    # the head: every stylesheet the pages use, MathJax as the pages configure it
    def head(self) -> str:
        sheets, mathjax = [], []
        for doc, soup in self.soups.items():
            for link in soup.head.find_all("link", rel="stylesheet"):
                href = self._root_path(doc, link["href"])
                if href not in sheets:
                    sheets.append(href)
            if not mathjax:
                for s in soup.head.find_all("script"):
                    if "mathjax" in (s.get("src") or "").lower():
                        mathjax.append(f'<script defer src="{self._root_path(doc, s["src"])}"></script>')
                    elif s.string and "window.MathJax" in s.string:
                        mathjax.append(f"<script>{s.string}</script>")
        title = self.book_title()
        links = "\n".join(f'<link rel="stylesheet" href="{h}">' for h in sheets)
        return (f'<meta charset="utf-8"><title>{escape(title)}</title>\n{links}\n'
                f"<style>{PRINT_CSS.read_text(encoding='utf-8')}</style>\n" + "\n".join(mathjax))

    def book_title(self) -> str:
        title = self.soups[self.docs[0]].title.get_text()
        return title.split(" \u2014 ")[-1].strip()

    def book_author(self) -> str:
        el = self.soups[self.docs[0]].select_one(".component-author")
        return re.sub(r"^By\s+", "", _text(el)) if el else ""

    @staticmethod
    def _root_path(doc: str, href: str) -> str:
        u = urlsplit(urljoin(f"{_BOOK}{doc}.html", href))
        return u.path.lstrip("/") + (f"?{u.query}" if u.query else "")

    def _link(self, doc: str, href: str) -> str | None:
        """Where a link of ``doc`` points in the one document; None: keep its text only."""
        u = urlsplit(urljoin(f"{_BOOK}{doc}.html", href))
        if u.scheme == "mailto":
            return href
        if u.scheme in ("http", "https") and u.netloc != urlsplit(_BOOK).netloc:
            host = u.hostname or ""
            return None if host in _LOCAL_HOSTS or host.startswith("127.") else href
        if u.scheme not in ("http", "https"):
            return None
        path = u.path.lstrip("/")
        target = path[:-5] if path.endswith(".html") else None
        if target not in self.docs:
            return None
        if not u.fragment:
            return f"#{slug(target)}"
        if self.soups[target].find(id=u.fragment) is None:
            self.unresolved.append(f"{doc}: {href}")
            return f"#{slug(target)}"
        return f"#{slug(target)}--{u.fragment}"

    def article(self, doc: str, shift: int):
        """The page's main content, ready to print: its ids, links and images rewritten."""
        from bs4 import BeautifulSoup

        soup = self.soups[doc]
        art = soup.select_one("article.bd-article")
        art = BeautifulSoup(str(art), "html.parser").article
        # what only works on screen: the settings an interactive figure prints at replace its controls
        for fig in art.select(".kvmath-interactive"):
            self._printed_state(fig, soup)
        for el in art.select("script, noscript, button, input, select, .headerlink, .kvmath-interactive-controls, "
                             ".kvmath-interactive-hint, .kvmath-interactive-note"):
            el.decompose()
        for d in art.find_all("details"):
            d["open"] = ""
        # ids and links
        prefix = slug(doc) + "--"
        for el in art.find_all(id=True):
            el["id"] = prefix + el["id"]
        for el in art.find_all(attrs={"for": True}):
            del el["for"]
        for el in art.find_all(attrs={"aria-describedby": True}):
            del el["aria-describedby"]
        for a in art.find_all("a", href=True):
            to = self._link(doc, a["href"])
            if to is None:
                self.unlinked.append(f"{doc}: {a['href']}")
                a.unwrap()
            else:
                a["href"] = to
        for img in art.find_all(["img", "source"], src=True):
            if not img["src"].startswith("data:"):
                img["src"] = self._root_path(doc, img["src"])
        # headings one level down inside a part, so the bookmarks nest part > chapter > section
        if shift:
            for h in art.find_all(re.compile(r"^h[1-6]$")):
                h["aria-level"] = str(int(h.name[1]) + shift)
        art.name = "section"
        art["class"] = ["kvmath-doc"]
        art["id"] = slug(doc)
        return art

    @staticmethod
    def _printed_state(fig, soup) -> None:
        """Say under an interactive figure's image the settings its printed frame shows (its defaults)."""
        data_el = fig.select_one("script.kvmath-interactive-data")
        try:
            data = json.loads(data_el.string) if data_el is not None else {}
        except ValueError:
            data = {}
        controls = data.get("controls") or []
        if controls:
            said = ", ".join(f"{c['label']} = {c['labels'][c['default']]}" for c in controls)
            p = soup.new_tag("p", attrs={"class": "kvmath-print-state"})
            p.string = f"Printed with {said}."
            img = fig.select_one("img")
            (img.insert_after(p) if img is not None else fig.append(p))

    def contents_entries(self) -> list[tuple[int, str, str, str]]:
        """(level, anchor, number, title) of the contents: parts, pages, a numbered chapter's sections."""
        out = []
        for i, part in enumerate(self.parts):
            if part.caption:
                out.append((0, f"kvmath-part-{i}", "", part.caption))
            for doc in part.docs:
                art = self.soups[doc].select_one("article.bd-article")
                h1 = art.find("h1")
                if h1 is None:
                    continue
                num = h1.select_one(".section-number")
                number = num.get_text().strip() if num else ""
                title = _heading_text(h1)[len(number):].strip() if number else _heading_text(h1)
                out.append((1, slug(doc), number.rstrip("."), title))
                if number:
                    for h2 in art.find_all("h2"):
                        sec = h2.find_parent("section")
                        n2 = h2.select_one(".section-number")
                        n2 = n2.get_text().strip() if n2 else ""
                        t2 = _heading_text(h2)[len(n2):].strip()
                        if sec is not None and sec.get("id"):
                            out.append((2, f"{slug(doc)}--{sec['id']}", n2.rstrip("."), t2))
        return out

    def document(self) -> str:
        title, author = self.book_title(), self.book_author()
        body = [(f'<section class="kvmath-title-page"><p class="kvmath-book-title">{escape(title)}</p>'
                 f'<p class="kvmath-book-author">{escape(author)}</p></section>')]
        rows = []
        for level, anchor, number, text in self.contents_entries():
            rows.append(f'<li class="kvmath-toc-{level}"><a href="#{anchor}">'
                        f'<span class="kvmath-toc-num">{escape(number)}</span>'
                        f'<span class="kvmath-toc-title">{escape(text)}</span>'
                        f'<span class="kvmath-toc-page" data-target="{anchor}"></span></a></li>')
        body.append('<section class="kvmath-contents kvmath-front"><h1 id="kvmath-contents">Contents</h1>'
                    f'<ul>{"".join(rows)}</ul></section>')
        first_part = True
        for i, part in enumerate(self.parts):
            if part.caption:
                cls = "kvmath-part kvmath-first-part" if first_part else "kvmath-part"
                first_part = False
                body.append(f'<section class="{cls}"><h1 id="kvmath-part-{i}">{escape(part.caption)}</h1></section>')
            for doc in part.docs:
                art = self.article(doc, shift=1 if part.caption else 0)
                if not part.caption:
                    art["class"] = art["class"] + ["kvmath-front"]
                body.append(str(art))
        return ('<!DOCTYPE html><html lang="en" data-theme="light" data-mode="light" class="kvmath-print-book">'
                f"<head>{self.head()}</head><body><main class=\"bd-main\"><div class=\"bd-content\">"
                f'<div class="bd-article-container"><article class="bd-article">{"".join(body)}'
                "</article></div></div></main></body></html>")


# --- printing and the PDF --------------------------------------------------------------------

PDF_OPTIONS = {"prefer_css_page_size": True, "print_background": True}


# pypdf warns that Chromium's trailer undercounts its objects; it reads the file right
logging.getLogger("pypdf").setLevel(logging.ERROR)


def destination_pages(pdf: bytes) -> dict[str, int]:
    """Every named destination of the PDF and its page (0-based)."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(pdf))
    return {name.lstrip("/"): reader.get_destination_page_number(dest)
            for name, dest in reader.named_destinations.items()}


def label(index: int, body_start: int) -> str:
    """The page label (and printed number) of page ``index`` (0-based)."""
    if index >= body_start:
        return str(index - body_start + 1)
    return _roman(index + 1)


def _roman(n: int) -> str:
    out = ""
    for value, letters in ((1000, "m"), (900, "cm"), (500, "d"), (400, "cd"), (100, "c"), (90, "xc"),
                           (50, "l"), (40, "xl"), (10, "x"), (9, "ix"), (5, "v"), (4, "iv"), (1, "i")):
        while n >= value:
            out, n = out + letters, n - value
    return out


A4_WIDTH_MM = 210


def page_margins_mm(css: Path = PRINT_CSS) -> tuple[float, float, float, float]:
    """The book's page margins (top, right, bottom, left, mm), as make_pdf.css's @page rule sets them."""
    found = re.search(r"@page\s*\{[^}]*?margin:\s*([\d.]+)mm ([\d.]+)mm ([\d.]+)mm ([\d.]+)mm", css.read_text())
    return tuple(float(v) for v in found.groups())


#: tables, code, images and equations that reach past the printed text's right edge (Chromium
#: cuts them at the page's edge), each as "page id: tag: its first words"
_TOO_WIDE_JS = """(width) => [...document.querySelectorAll(
    '.kvmath-doc table, .kvmath-doc pre, .kvmath-doc img, .kvmath-doc div.math, .kvmath-doc mjx-container')]
  .filter(e => e.getBoundingClientRect().right > width + 1)
  .map(e => (e.closest('.kvmath-doc') || {}).id + ': ' + e.tagName.toLowerCase() + ': '
            + (e.textContent || e.getAttribute('src') || '').trim().slice(0, 50))"""

#: each heading's title as the page shows it (MathJax's formulas by their MathML text), in document order
_HEADINGS_JS = """() => [...document.querySelectorAll('h1, h2, h3, h4, h5, h6')]
  .filter(h => h.getClientRects().length > 0)
  .map(h => { const c = h.cloneNode(true);
              c.querySelectorAll('mjx-container').forEach(m => {
                const mml = m.querySelector('mjx-assistive-mml');
                m.replaceWith(document.createTextNode(mml ? mml.textContent : ''));
              });
              return c.textContent.replace(/\\s+/g, ' ').trim(); })"""


def _outline_items(writer):
    """The PDF's bookmarks, in document order (depth first)."""
    root = writer._root_object.get("/Outlines")
    stack = [root.get_object().get("/First")] if root is not None else []
    while stack:
        ref = stack.pop()
        if ref is None:
            continue
        item = ref.get_object()
        yield item
        stack.append(item.get("/Next"))
        stack.append(item.get("/First"))


def retitle_outline(writer, titles: list[str]) -> bool:
    """Give the bookmarks the headings' titles; False (and nothing changed) where they do not pair up.

    Chromium writes each bookmark from its heading's lines joined with no space, and a
    line broken at a hyphen twice ("bytes,FLOPs", "matrix-matrix productsmatrix products"),
    a formula left out. They pair up by their order and first characters.
    """
    from pypdf.generic import NameObject, TextStringObject

    items = list(_outline_items(writer))

    def key(t: str) -> str:
        return "".join(str(t).split())[:4]

    if len(items) != len(titles) or any(key(i["/Title"]) != key(t) for i, t in zip(items, titles)):
        return False
    for item, title in zip(items, titles):
        item[NameObject("/Title")] = TextStringObject(title)
    return True


def finish(pdf: bytes, body_start: int, titles: list[str], title: str, author: str, target: Path) -> int:
    """Bookmark titles, page labels, title, author, bookmarks shown; returns the page count."""
    from pypdf import PdfReader, PdfWriter
    from pypdf.constants import PageLabelStyle

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    if not retitle_outline(writer, titles):
        print("make_pdf: the bookmarks do not pair up with the headings: their titles are left as Chromium "
              "wrote them")
    n = len(writer.pages)
    if body_start > 0:
        writer.set_page_label(0, body_start - 1, style=PageLabelStyle.LOWERCASE_ROMAN, start=1)
    writer.set_page_label(body_start, n - 1, style=PageLabelStyle.DECIMAL, start=1)
    writer.add_metadata({"/Title": title, "/Author": author, "/Creator": "kvmath scripts/make_pdf.py"})
    writer.page_mode = "/UseOutlines"
    with target.open("wb") as f:
        writer.write(f)
    return n


def print_book(html: Path, target: Path, book_parts: list[Part]) -> dict:
    book = Assembler(html, book_parts)
    doc = book.document()
    with serve(html) as base, launch_browser() as browser:
        # laid out at the printed text's width, to find what would not fit across the page
        width = round((A4_WIDTH_MM - sum(page_margins_mm()[1::2])) * 96 / 25.4)
        tab = browser.new_page(viewport={"width": width, "height": 1400})
        tab.route(base + DOC_NAME, lambda route: route.fulfill(body=doc, content_type="text/html; charset=utf-8"))
        tab.goto(base + DOC_NAME, wait_until="networkidle", timeout=120_000)
        tab.evaluate("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
        tab.emulate_media(media="print")
        too_wide = tab.evaluate(_TOO_WIDE_JS, width)
        first = tab.pdf(**PDF_OPTIONS)
        pages = destination_pages(first)
        first_part = "kvmath-part-" + str(next(i for i, p in enumerate(book_parts) if p.caption))
        # The contents' numbers must be the pages of the targets they name. Filling them in can move a target: print
        # again with the numbers of the last print, as LaTeX reruns, until none of those targets moves; three
        # prints at most, since a layout that keeps moving is an error, not a number. Only the contents' targets
        # count: an anchor the contents does not name (the instructor book's exercise 13.4, at a page break)
        # can land on either side of the break from one print to the next, and no printed number depends on it.
        listed = set(tab.evaluate("() => [...document.querySelectorAll('.kvmath-toc-page')]"
                                  ".map(e => e.dataset.target)")) | {first_part}
        for _ in range(3):
            body_start = pages.get(first_part, 0)
            numbers = {a: label(i, body_start) for a, i in pages.items()}
            tab.evaluate("""(numbers) => document.querySelectorAll('.kvmath-toc-page').forEach(
                              e => { e.textContent = numbers[e.dataset.target] || ''; })""", numbers)
            final = tab.pdf(outline=True, tagged=True, **PDF_OPTIONS)
            again = destination_pages(final)
            moved = sorted(a for a in listed if again.get(a) != pages.get(a))
            if not moved:
                break
            pages = again
        titles = tab.evaluate(_HEADINGS_JS)
    if moved:
        raise RuntimeError(f"make_pdf: the contents' page numbers still moved {len(moved)} targets after three "
                           f"prints: {moved[:5]}")
    target.parent.mkdir(parents=True, exist_ok=True)
    n = finish(final, body_start, titles, book.book_title(), book.book_author(), target)
    return {"pages": n, "body_start": body_start + 1,
            "first_page": {d: again[slug(d)] + 1 for d in book.docs if slug(d) in again},
            "part_page": {p.caption: again[f"kvmath-part-{i}"] + 1 for i, p in enumerate(book_parts)
                          if p.caption and f"kvmath-part-{i}" in again},
            "unresolved_links": book.unresolved, "unlinked": sorted(set(book.unlinked)), "too_wide": too_wide}


def main(html_dir: str = "_build/html", out: str | None = None, toc: str | None = None) -> int:
    from kvbook.sphinx.book_pages import PDF_NAME, link_pdf

    html = (ROOT / html_dir).resolve()
    target = Path(out).resolve() if out else html / PDF_NAME
    if not (html / "index.html").exists():
        print(f"make_pdf: {html} has no built book: run `make book` first")
        return 1
    start = time.perf_counter()
    report = print_book(html, target, parts(Path(toc)) if toc else parts())
    Path(str(target) + ".json").write_text(json.dumps(report, indent=1))
    linked = link_pdf(html, target)
    print(f"wrote {target} ({report['pages']} pages, {target.stat().st_size / 1e6:.1f} MB) in "
          f"{time.perf_counter() - start:.0f} s; the download menu of {linked} pages links it")
    if report["too_wide"]:
        print(f"make_pdf: {len(report['too_wide'])} elements are wider than the page: {report['too_wide'][:5]}")
    if report["unresolved_links"]:
        print(f"make_pdf: {len(report['unresolved_links'])} links name an id their page lacks "
              f"(they go to the page's top): {report['unresolved_links'][:5]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
