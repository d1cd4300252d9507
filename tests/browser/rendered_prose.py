"""What a reader of a notebook sees in JupyterLab or JupyterLite: the rendered Markdown cells, and what must not show.

Shared by the JupyterLab test (tests/browser/test_lab.py) and the JupyterLite tests (test_lite.py).
"""

from __future__ import annotations

import re

from kvbook.inline import result_text

#: Markup that means a cell was not rendered as MyST, or a number is missing: roles, labels, directive fences,
#: and numpy's repr of a scalar where a formatted number belongs.
RAW_MARKUP = {
    "glue role": re.compile(r"\{glue"),
    "inline expression": re.compile(r"\{eval\}"),
    "cross-reference role": re.compile(r"\{(?:numref|ref|doc|eq|cite(?::[pt])?)\}`"),
    "label option": re.compile(r"^:label:", re.M),
    "directive fence": re.compile(r"^(?:`{3,}|:{3,})\{", re.M),
    "numpy scalar repr": re.compile(r"np\.(?:float|int)\d+\("),
}

# Each rendered Markdown cell's text, keyed by its index in the notebook. JupyterLab 4 renders only the cells near
# the viewport, so the page is scrolled from top to bottom and each cell read when it is drawn.
_READ_CELLS = """async () => {
  const outer = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer')
             || document.querySelector('.jp-WindowedPanel-outer');
  const seen = {};
  const read = () => {
    const cells = [...document.querySelectorAll('.jp-Notebook .jp-Cell')];
    cells.forEach((cell, position) => {
      if (!cell.classList.contains('jp-MarkdownCell')) return;
      const index = cell.getAttribute('data-windowed-list-index') ?? String(position);
      const text = cell.querySelector('.jp-MarkdownOutput, .jp-RenderedMarkdown, .myst');
      if (text && text.innerText.trim()) seen[index] = text.innerText;
    });
  };
  if (!outer) { read(); return seen; }
  outer.scrollTop = 0;
  for (let step = 0; step < 400; step++) {
    await new Promise(r => setTimeout(r, 120));
    read();
    if (outer.scrollTop + outer.clientHeight >= outer.scrollHeight - 2) break;
    outer.scrollTop += outer.clientHeight * 0.8;
  }
  return seen;
}"""


def markdown_texts(page) -> dict[int, str]:
    """{cell index: rendered text} of every Markdown cell of the notebook open in ``page``."""
    return {int(k): v for k, v in page.evaluate(_READ_CELLS).items()}


def raw_markup(text: str) -> list[str]:
    """What in a rendered cell's text is markup a reader should never see."""
    return [f"{what}: {m.group(0)!r}" for what, pattern in RAW_MARKUP.items() for m in pattern.finditer(text)]


FOOTNOTE = re.compile(r"^\[\^[^\]]+\]:", re.M)


def expected_numbers(nb) -> dict[int, list[str]]:
    """{cell index: the texts of its inline expressions' results} as the notebook stores them (``make refresh``):
    what the book shows in that paragraph, since the book evaluates the same expressions in the same order.
    Expressions in a footnote are left out: jupyterlab-myst shows a footnote when its mark is hovered, not in the
    cell's text."""
    out = {}
    for index, cell in enumerate(nb.cells):
        note = FOOTNOTE.search(cell.source)
        in_notes = set(re.findall(r"\{eval\}`([^`]+)`", cell.source[note.start():])) if note else set()
        results = [result_text(e["result"]) for e in cell.metadata.get("user_expressions", [])
                   if e["result"].get("status") == "ok" and e["expression"] not in in_notes]
        if cell.cell_type == "markdown" and results:
            out[index] = results
    return out


def _shows_text(source: str) -> bool:
    """Whether a Markdown cell renders any text: not only fences and options (a lone ``{solution-end}``)."""
    return any(line.strip() and not re.match(r"^(?:`{3,}|:{3,})(?:\{[\w:-]+\}.*)?$|^:\w[\w-]*:", line.strip())
               for line in source.splitlines())


def prose_problems(nb, texts: dict[int, str]) -> list[str]:
    """Every missing cell, missing number and raw markup of the rendered Markdown ``texts`` of notebook ``nb``."""
    problems = []
    markdown = [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and _shows_text(c.source)]
    missing = [i for i in markdown if i not in texts]
    if missing:
        problems.append(f"Markdown cells never rendered: {missing}")
    for index, numbers in expected_numbers(nb).items():
        text = " ".join(texts.get(index, "").split())
        problems += [f"cell {index}: {n!r} not on the page" for n in numbers if " ".join(n.split()) not in text]
    for index, text in texts.items():
        problems += [f"cell {index}: {p}" for p in raw_markup(text)]
    return problems
