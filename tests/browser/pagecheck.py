"""Check the text of a built book's pages against what issue 22 (item 4) asks of its prose.

Used by ``tests/browser/test_site.py``; also runnable by hand on any build::

    python -m tests.browser.pagecheck _build/html

It reads each page's HTML as the browser gets it (the article: prose, shown and collapsed code, outputs, tables,
solutions in their dropdowns), and reports

* ``raw label``: an equation label anywhere in the text, or any label (equation, exercise, target) in
  parentheses: ``floor eq bc-moe``, ``(equation pq-prefill-flops)``, ``# (pit-plain)``. The reader should see
  the equation's number or its name in words (labels from tests/book/reader_text.py);
* ``directive text``: ``:label:``, ``:class:`` or ``````{`` on the page, a directive MyST did not parse;
* ``preset id in a select``: an option of a ``<select>``, or of an interactive figure's choice control (the JSON
  the page's script builds its selects from), that is a model or chip preset id (``kipply-52b``) where the preset
  has a display name;
* ``preset id in a table``: a table cell or caption whose text, outside ``<code>``, holds such an id, or a link
  preset's (``nvlink4``; code and CLI examples keep their ids);
* ``no takeaway``: a chapter (a page under notebooks/) whose last section before the exercises is not
  "What to take from this".

Everything here is in the HTML the server sends; nothing needs a script to run, so the pages are parsed, not
driven in Chromium.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from tests.book.reader_text import DIRECTIVE_TEXT, raw_label_hits
from tests.browser.sitecheck import html_pages

TAKEAWAY = "What to take from this"
_SECTION_NUMBER = re.compile(r"^[\d.]+\s+")


def _preset_pattern():
    import kvmath
    from kvbook.interactive import preset_ids

    # a table also names the links (a select never offers one): their ids are code too
    links = {n for n in kvmath.Link.presets() if kvmath.Link.preset(n).display_name != n}
    names = sorted(preset_ids() | links, key=len, reverse=True)
    return re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, names)) + r")(?![\w-])")


def _heading(h) -> str:
    for link in h.select("a.headerlink"):
        link.decompose()
    return _SECTION_NUMBER.sub("", h.get_text(" ", strip=True)).strip()


def page_problems(path: Path, rel: str, ids: re.Pattern | None = None) -> list[str]:
    """What on one built page breaks item 4 of issue 22 (see the module docstring)."""
    from bs4 import BeautifulSoup

    ids = ids or _preset_pattern()
    soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
    article = soup.select_one("article.bd-article") or soup.select_one("main") or soup.body or soup
    problems = []
    # interactive figures build their selects from this JSON: the labels a reader will see
    for script in article.select("script.kvmath-interactive-data"):
        for control in json.loads(script.string or "{}").get("controls", []):
            if control.get("kind") == "choice":
                problems += [f"preset id in a select ({control.get('label')}): {label!r}"
                             for label in control.get("labels", []) if ids.fullmatch(str(label))]
    for option in article.select("select option"):
        if ids.fullmatch(option.get_text(strip=True)):
            problems.append(f"preset id in a select: {option.get_text(strip=True)!r}")
    for cell in article.select("table td, table th, table caption"):
        for code in cell.select("code"):
            code.decompose()
        text = cell.get_text(" ", strip=True)
        if ids.search(text):
            problems.append(f"preset id in a table: {text[:80]!r}")
    for node in article.select("script, style, mjx-container, mjx-assistive-mml, .MathJax"):
        node.decompose()
    text = article.get_text(" ")
    problems += [f"raw label: ...{hit}..." for hit in raw_label_hits(text)]
    problems += [f"directive text {markup!r}: ...{' '.join(text[max(0, i - 30):i + 30].split())}..."
                 for markup in DIRECTIVE_TEXT for i in [text.find(markup)] if i >= 0]
    if rel.startswith("notebooks/"):
        sections = [_heading(h) for h in article.select("h2")]
        if TAKEAWAY not in sections or sections.index(TAKEAWAY) != len(sections) - 1 - ("Exercises" in sections):
            problems.append(f"no takeaway: the sections end {sections[-3:]}")
    return problems


def check_pages(directory: Path, pages: list[str] | None = None) -> dict[str, list[str]]:
    """{page: problems} for every page of the site in ``directory`` (or the ``pages`` given)."""
    directory = Path(directory)
    ids = _preset_pattern()
    pages = html_pages(directory) if pages is None else pages
    return {rel: page_problems(directory / rel, rel, ids) for rel in pages}


def format_problems(reports: dict[str, list[str]]) -> str:
    return "\n".join(f"{rel}: {p}" for rel, problems in reports.items() for p in problems)


if __name__ == "__main__":
    site = Path(sys.argv[1] if len(sys.argv) > 1 else "_build/html")
    result = check_pages(site)
    text = format_problems(result)
    print(text or f"{len(result)} pages checked, no problems")
    sys.exit(1 if text else 0)
