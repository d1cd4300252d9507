"""The text a reader sees on each chapter page of the built book, one line per block, for diffs between builds.

The prose's numbers moved from glue roles to inline expressions; what must not
move is what the page says. ``page_text`` reads a built page's article (the
chapter itself, not the navigation, footer or scripts) and returns one line
per block element (paragraph, heading, list item, table cell row, code line
shown), whitespace collapsed. ``record`` writes every chapter's lines to JSON;
``tests/book/test_book_text.py`` compares a build against the committed record.

Run: ``python -m tests.book.book_text _build/html OUT.json`` (from the repository root).
"""

from __future__ import annotations

import json
import sys
from html.parser import HTMLParser
from pathlib import Path

BLOCKS = {"p", "div", "section", "li", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "pre", "table",
          "td", "th", "figcaption", "caption", "blockquote", "details", "summary", "br", "ul", "ol", "dl", "figure", "aside"}
SKIP = {"script", "style", "noscript", "template", "button"}


class _Article(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.depth = 0  # inside <article>: nesting of article elements
        self.skip = 0
        self.lines: list[str] = []
        self.current: list[str] = []
        self.pre = 0

    def _flush(self):
        text = "".join(self.current)
        self.current = []
        if self.pre:
            self.lines.extend(line.rstrip() for line in text.split("\n") if line.strip())
        else:
            text = " ".join(text.split())
            if text:
                self.lines.append(text)

    def handle_starttag(self, tag, attrs):
        if tag == "article" and self.depth == 0:
            self.depth = 1
            return
        if not self.depth:
            return
        if tag == "article":
            self.depth += 1
        if tag in SKIP:
            self.skip += 1
        if tag in BLOCKS:
            self._flush()
        if tag == "pre":
            self.pre += 1

    def handle_endtag(self, tag):
        if not self.depth:
            return
        if tag == "article":
            self.depth -= 1
            if not self.depth:
                self._flush()
            return
        if tag in SKIP:
            self.skip = max(0, self.skip - 1)
        if tag in BLOCKS:
            self._flush()
        if tag == "pre":
            self.pre = max(0, self.pre - 1)

    def handle_data(self, data):
        if self.depth and not self.skip:
            self.current.append(data)


def page_text(html: str) -> list[str]:
    """The article's text of one built page, one line per block."""
    parser = _Article()
    parser.feed(html)
    parser.close()
    return parser.lines


def chapter_texts(html_dir: Path) -> dict[str, list[str]]:
    """Every chapter page's lines, by page name (``notebooks/08_fitting_52b``)."""
    pages = {}
    for path in sorted((html_dir / "notebooks").glob("*.html")):
        html = path.read_text(encoding="utf-8")
        if "<article" not in html:  # a redirect page of an earlier edition's name
            continue
        pages[f"notebooks/{path.stem}"] = page_text(html)
    return pages


def main(argv: list[str]) -> int:
    html_dir, out = Path(argv[0]), Path(argv[1])
    out.write_text(json.dumps(chapter_texts(html_dir), indent=0, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
