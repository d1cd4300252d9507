"""What a reader of a notebook sees in JupyterLab or JupyterLite: the rendered Markdown cells, and what must not show.

Shared by the JupyterLab test (tests/browser/test_lab.py), the JupyterLite tests (test_lite.py) and the benchmark of
the chapters' times in the room (benchmarks/time_lite_chapters.py).
"""

from __future__ import annotations

import re
import time

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
      // a closed dropdown's body is not in innerText: open it, as a reader does, to read what it holds
      if (text) text.querySelectorAll('details:not([open])').forEach(d => { d.open = true; });
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


#: How far a notebook's run has got: the toolbar's execution indicator, which JupyterLab and the Notebook interface
#: keep "busy" until every cell scheduled has run, and the prompts on the page. The prompts alone cannot tell: a
#: cell whose code the book hides has none (JupyterLab detaches a hidden input), nor has a cell JupyterLab has not
#: drawn, so a wait on the prompts ended while the last, hidden cells still ran (review R21b-5).
RUN_STATE = """() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)') || document;
  const indicator = panel.querySelector('.jp-Notebook-ExecutionIndicator')
                 || document.querySelector('.jp-Notebook-ExecutionIndicator');
  const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')]
                  .map(e => e.textContent);
  return {status: indicator ? indicator.dataset.status : null, prompts};
}"""


def last_count(state: dict) -> int:
    """The highest execution count among the prompts shown (0 before any cell ran)."""
    return max([int(n) for p in state["prompts"] for n in re.findall(r"\d+", p)], default=0)


def run_all_cells(page, timeout_s: float, on_poll=None) -> float:
    """Run > Run All Cells, as a reader does, and wait until every cell has run; the seconds it took.

    The run has started once the indicator was seen busy, a cell waits (``[*]``) or the prompts changed (a run too
    short to be seen busy); it has ended when, after that, the indicator says idle and no shown cell waits, seen
    twice half a second apart (the indicator turns idle a moment after the last cell). ``on_poll`` is called with
    each state read (a benchmark notes when the first result shows)."""
    initial = page.evaluate(RUN_STATE)
    page.locator(".jp-Notebook").first.click()
    page.get_by_text("Run", exact=True).first.click()
    page.get_by_text("Run All Cells", exact=True).first.click()
    start = time.time()
    started, seen = False, 0
    while time.time() < start + timeout_s:
        state = page.evaluate(RUN_STATE)
        if state["status"] is None:
            raise AssertionError("no execution indicator in the notebook's toolbar: the run's end cannot be seen")
        if on_poll is not None:
            on_poll(state)
        waiting = any("*" in p for p in state["prompts"])
        started = started or state["status"] == "busy" or waiting or state["prompts"] != initial["prompts"]
        seen = seen + 1 if started and state["status"] == "idle" and not waiting else 0
        if seen == 2:
            return time.time() - start
        time.sleep(0.5)
    raise AssertionError(f"cells still running after {timeout_s} s: indicator {state['status']}, "
                         f"prompts {state['prompts'][:20]}")


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


#: What a reader changes and re-runs to see the prose follow, on chapter 0: kipply's A100 bandwidth (cell 4),
#: 1.5 TB/s to 1.0 TB/s. B_crit = C b_w / (2 W) = 312e12 * 2 / (2 * 1.0e12) = 312 (208 at 1.5 TB/s); cell 6 says
#: "the formula gives" it.
EDIT = {"notebook": "00_sample_rhythm.ipynb", "cell": 4, "old": "bandwidth=1.5e12", "new": "bandwidth=1.0e12",
        "prose_cell": 6, "before": "the formula gives 208", "after": "the formula gives 312"}


def edit_code_cell(page, index: int, old: str, new: str) -> None:
    """Change ``old`` to ``new`` in the code cell at ``index`` as a reader does: click into its editor, select all,
    and put the edited source in (inserted as one input, so the editor's auto-indent does not re-indent it)."""
    page.evaluate("""(index) => {   // JupyterLab draws only the cells near the viewport: bring this one in
      const outer = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer')
                 || document.querySelector('.jp-WindowedPanel-outer');
      if (outer) outer.scrollTop = 0;
    }""", index)
    page.wait_for_timeout(500)
    cell = page.locator(f".jp-Notebook .jp-Cell[data-windowed-list-index='{index}']")
    if cell.count() == 0:   # a notebook drawn whole carries no index attribute
        cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    editor = cell.locator(".cm-content")
    editor.scroll_into_view_if_needed()
    source = editor.inner_text()
    assert old in source, (old, source)
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(source.replace(old, new))


#: The roles whose targets the built book resolves and one notebook alone cannot (kvbook.workshop.book_links).
_BOOK_ROLE = re.compile(r"\{(doc|ref|numref|cite(?::[pt]s?)?)\}`([^`]*)`")


def book_link_problems(source, lite, page, served, base: str, book_url: str) -> list[str]:
    """In the room's JupyterLite (or `make lab`'s JupyterLab): every cross-reference and citation of the chapter
    (``source``, the notebook of notebooks/) renders as a link into the book, its address starting with ``base``
    (the room's: ``../../book/``, relative to the page; make lab's: ``/book/``) and the browser's resolving it with
    ``book_url`` (where the book is served: the learner folder's ``book/``, below whatever address serves it), for
    which ``served`` (a Path) holds ``book/`` with the page and the anchor (``lite``, the copy served, holds one link
    for each, opening in a new tab), and no citation key, label or file name shows bare where the book prints a title
    or an author."""
    import html
    from pathlib import Path

    problems = []
    anchors = page.evaluate("() => [...document.querySelectorAll('.jp-MarkdownCell a[href]')]"
                            ".map(a => [a.getAttribute('href'), a.getAttribute('target'), a.href])")
    book_links = [h for h, _, _ in anchors if h.startswith(base)]
    wanted = sum(cell.source.count(f'href="{base}') for cell in lite.cells if cell.cell_type == "markdown")
    if not wanted or len(book_links) < wanted:
        problems.append(f"{len(book_links)} links into the learner book for {wanted} references and citations")
    problems += [f"link into the book opens in the notebook's tab: {h}"
                 for h, target, _ in anchors if h.startswith(base) and target != "_blank"]
    problems += [f"link {h} resolves to {resolved}, not into {book_url}"
                 for h, _, resolved in anchors if h.startswith(base)
                 and resolved != book_url + h[len(base):]]
    pages: dict[str, str] = {}
    for href in book_links:
        path, _, anchor = ("book/" + href[len(base):]).partition("#")
        file = Path(served) / path
        if not file.exists():
            problems.append(f"link to a missing page: {href}")
            continue
        text = pages.setdefault(path, file.read_text(encoding="utf-8"))
        if anchor and f'id="{html.escape(anchor)}"' not in text:
            problems.append(f"link to a missing anchor: {href}")
    shown = " ".join(markdown_texts(page).values())
    for cell in source.cells:
        for m in _BOOK_ROLE.finditer(cell.source if cell.cell_type == "markdown" else ""):
            for target in m.group(2).split(","):
                target = target.strip().split("<")[-1].rstrip(">")
                if re.search(rf"(?<![\w/.-]){re.escape(target)}(?![\w-])", shown):
                    problems.append(f"{m.group(1)} target shown bare: {target!r}")
    return problems
