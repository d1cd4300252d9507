"""What a reader of a chapter sees, and the names that must never show in it (issue 22, item 4).

Shared by the static checks over the committed notebooks (tests/book/test_prose_matches_page.py) and the check
over the built pages (tests/browser/pagecheck.py):

* :func:`equation_labels`: every equation's label (``$$ ... $$ (name)`` or ``:label:`` in a ``{math}`` directive),
  a name for cross-references only. The reader sees "equation (4.3)" or the equation's name in words, never
  ``bc-moe``; any occurrence of one in the text, a shown code cell or an output is a leak.
* :func:`all_labels`: those, the exercises' labels and the ``(name)=`` targets; these may show only as a
  cross-reference's text, so "(name)" with the parentheses round a bare label is a leak too.
* :func:`raw_label_hits`: where a text leaks one.
* :func:`aligned_runs`: the longest run of lines in column layout, the mark of a table printed as text.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Chapters held to item 4 of issue 22: every chapter of the book.
CHAPTERS = ["00_sample_rhythm", "01_roofline", "02_kv_cache", "03_min_step", "04_critical_batch",
            "05_sharing_kv_heads", "06_prefill_parallel_quant", "07_thread_256k", "08_fitting_52b",
            "09_moe_decode", "10_speculative_decoding", "11_serving", "12_reality_check", "13_calibration",
            "14_measure_your_machine", "15_bring_your_own_model", "16_pitfalls"]

_DISPLAY_EQ = re.compile(r"\$\$\s*\(([\w-]+)\)")
_MATH_DIRECTIVE = re.compile(r"^(`{3,}|:{3,})\{math\}[^\n]*\n(?:\s*:[\w-]+:[^\n]*\n)*?\s*:label:\s*([\w-]+)", re.M)
_ANY_LABEL = re.compile(r"^\s*:label:\s*([\w-]+)", re.M)
_TARGET = re.compile(r"^\(([\w-]+)\)=\s*$", re.M)


def _sources() -> list[str]:
    import nbformat

    texts = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "book").rglob("*.md"))]
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        texts += [c.source for c in nb.cells if c.cell_type == "markdown"]
    return texts


@functools.lru_cache(maxsize=1)
def equation_labels() -> frozenset:
    """Every equation label of the book (notebooks and book/ pages)."""
    found = set()
    for text in _sources():
        found |= set(_DISPLAY_EQ.findall(text))
        found |= {m.group(2) for m in _MATH_DIRECTIVE.finditer(text)}
    return frozenset(found)


@functools.lru_cache(maxsize=1)
def all_labels() -> frozenset:
    """Equation labels, exercise labels and ``(name)=`` targets."""
    found = set(equation_labels())
    for text in _sources():
        found |= set(_ANY_LABEL.findall(text)) | set(_TARGET.findall(text))
    return frozenset(found)


def _alternation(names) -> str:
    return "|".join(map(re.escape, sorted(names, key=len, reverse=True)))


@functools.lru_cache(maxsize=1)
def _label_patterns():
    bare = re.compile(rf"(?<![\w./#-])({_alternation(equation_labels())})(?![\w-])")
    parenthesized = re.compile(rf"\(({_alternation(all_labels())})\)")
    return bare, parenthesized


def raw_label_hits(text: str) -> list[str]:
    """Each leaked label in ``text``, with a little context: an equation label anywhere, any label in parentheses."""
    bare, parenthesized = _label_patterns()
    hits = {}
    for pattern in (bare, parenthesized):
        for m in pattern.finditer(text):
            hits.setdefault(m.start(1), " ".join(text[max(0, m.start() - 30):m.end() + 10].split()))
    return [hits[k] for k in sorted(hits)]


#: Markup a reader never sees: roles with their targets, an equation's "(label)", directive fences and options,
#: and ``(name)=`` targets. What is left of a Markdown cell is (close to) what the page shows.
_HIDDEN_MARKUP = [
    re.compile(r"\{[\w:-]+\}`[^`]*`"),
    re.compile(r"(?<=\$\$)\s*\([\w-]+\)"),
    re.compile(r"^\s*(?:`{3,}|:{3,})\{[^}\n]*\}[^\n]*$", re.M),
    re.compile(r"^\s*:[\w-]+:[^\n]*$", re.M),
    _TARGET,
]


def markdown_as_shown(source: str) -> str:
    """A Markdown cell's source without the markup the page does not show."""
    for pattern in _HIDDEN_MARKUP:
        source = pattern.sub("", source)
    return source


#: Markup that must never reach a page as text.
DIRECTIVE_TEXT = (":label:", ":class:", "```{")

_COLUMN_GAP = re.compile(r"\S {2,}\S")


def aligned_runs(text: str) -> int:
    """The longest run of consecutive lines that each hold a gap of two or more spaces between words (leading
    indentation aside): a table printed as text. One line of prose, or a list of sentences, scores 0 or 1."""
    best = run = 0
    for line in text.splitlines():
        run = run + 1 if _COLUMN_GAP.search(line.strip()) else 0
        best = max(best, run)
    return best
