"""The code a page's interactive figures need: the calls of ``kvbook.figures`` functions the page shows.

Each figure made by a :func:`kvbook.figures.figure` function carries its call
in the page's HTML (``data-call``: module, function, keyword arguments,
static or not). This module reads those calls in display order and writes the
few lines the page's Web Worker runs to make the same figures again: import
the chapter's module, call the function with the same arguments. Nothing is
read from the notebook.
"""

from __future__ import annotations

import html
import json
import re

#: One interactive figure's opening tag, with the call that made it when it has one.
FIGURE_TAG = re.compile(r'<div class="kvmath-interactive" id="[^"]*" data-main="[^"]*"(?: data-call="([^"]*)")?>')

PRELUDE = """\
# The calls of this page's interactive figures (packages/kvbook/kvbook/live/figure_calls.py):
# the kvbook.figures functions the chapter calls, with the same arguments.
_kvmath_figures = []
"""


def calls(page_html: str) -> list[dict | None]:
    """Each interactive figure's call on the page, in display order (None for one made another way)."""
    return [None if m.group(1) is None else json.loads(html.unescape(m.group(1)))
            for m in FIGURE_TAG.finditer(page_html)]


def code(page_calls: list[dict]) -> dict:
    """``{"code": str, "figures": [{"cell", "static", "reason"}]}`` for the page's figures, all made by calls."""
    lines, modules = [PRELUDE], {}
    for call in page_calls:
        if call["module"] not in modules:
            modules[call["module"]] = f"_chapter{len(modules)}"
            lines.append(f"import {call['module']} as {modules[call['module']]}")
        lines.append(f"_kvmath_figures.append({modules[call['module']]}.{call['function']}(**{call['kwargs']!r}))")
    figures = [{"cell": i, "static": bool(c["static"]), "reason": c["static"]} for i, c in enumerate(page_calls)]
    return {"code": "\n".join(lines) + "\n", "figures": figures}
