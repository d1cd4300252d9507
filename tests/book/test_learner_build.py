"""The learner build holds no solution text or code; the instructor build adds notes.

The stripping is checked on every chapter here (fast). The built learner book
(``_build/workshop-src/learner/_build/html``, made by ``make learner`` or
``make workshop``) is checked by the ``slow`` tests (``make test-full``, which
builds it first; a missing build fails them): the distinctive words of every
solution (identifiers and words of its code and prose that appear nowhere
else in the chapter) must be absent from the learner pages and the search
index, and present in the default build, which shows that the check can fail.
"""

from __future__ import annotations

import html as htmllib
import json
import re
from pathlib import Path

import pytest

from kvbook.workshop import workshop_build, workshop_pages

ROOT = Path(__file__).resolve().parents[2]

LEARNER = workshop_build.SRC / "learner" / "_build" / "html"
DEFAULT = ROOT / "_build" / "html"
CHAPTERS = workshop_pages.chapter_names()
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{5,}")
GLUE_KEY = re.compile(r"\{glue(?::\w+)?\}`[^`]*`|glue\(\s*[\"'][^\"']*[\"']")


def _text(cells) -> str:
    return "\n".join("".join(c["source"]) for c in cells)


def _outputs(cells) -> str:
    """The text of the cells' stored outputs: a table computed from kvmath's data shows words no source holds."""
    return "\n".join("".join(value) if isinstance(value, list) else str(value)
                     for c in cells for out in c.get("outputs", [])
                     for key, value in out.get("data", {}).items() if key.startswith("text/"))


def _elsewhere(notebook: str) -> set[str]:
    """Words of every other source the learner build holds (other chapters stripped, book pages), and of the
    outputs the learner's chapter keeps (chapter 13's table of the estimate's parameters says "streamed")."""
    words: set[str] = set()
    for other in CHAPTERS:
        nb = json.loads((ROOT / "notebooks" / f"{other}.ipynb").read_text())
        if other == notebook:
            nb = workshop_build.strip_solutions(nb)
            words |= set(WORD.findall(htmllib.unescape(_outputs(nb["cells"]))))
        words |= set(WORD.findall(_text(nb["cells"])))
    for md in (ROOT / "book").rglob("*.md"):
        words |= set(WORD.findall(md.read_text()))
    return words


def solution_only_words(notebook: str) -> set[str]:
    """Words of a chapter's solutions that appear in no other source of the learner build."""
    nb = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())
    # a glue key (in a role or a glue() call) is never shown on a page: only its value
    text = GLUE_KEY.sub(" ", _text(nb["cells"]))
    return set(WORD.findall(text)) - _elsewhere(notebook) - {"solution", "dropdown"}


def dropdown_words(path: Path) -> set[str]:
    """Words inside the page's notes dropdowns (``kvbook.tables.Dropdown``: ``<details class="kvmath-dropdown">``)."""
    inside = " ".join(re.findall(r'<details class="kvmath-dropdown">(.*?)</details>', path.read_text(), flags=re.S))
    return set(WORD.findall(htmllib.unescape(re.sub(r"<[^>]+>", " ", inside))))


def page_text(path: Path) -> str:
    raw = path.read_text()
    raw = re.sub(r"<(script|style)\b.*?</\1>", " ", raw, flags=re.S)
    return htmllib.unescape(re.sub(r"<[^>]+>", "", raw))


@pytest.mark.parametrize("notebook", CHAPTERS)
def test_stripping_removes_every_solution(notebook):
    nb = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())
    stripped = workshop_build.strip_solutions(nb)
    text = _text(stripped["cells"])
    assert "{solution" not in text
    assert text.count("{exercise-start}") == _text(nb["cells"]).count("{exercise-start}")
    if "{solution-start}" in _text(nb["cells"]):
        assert len(stripped["cells"]) < len(nb["cells"])


@pytest.mark.parametrize("notebook", CHAPTERS)
def test_a_name_an_exercise_gives_the_reader_is_bound_in_the_learners_copy(notebook):
    """An exercise that points the reader at a name of the page (in backticks, a name some code cell binds) must
    leave it bound once the solutions are gone: chapter 13's exercise 1 asked learners to compare with a
    measurement that only its solution held (review R21b-3); it is now M1_MAX_MEASURED, bound outside it."""
    from kvbook.inline import names_bound

    nb = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())
    learner = workshop_build.strip_solutions(nb)
    everywhere = set().union(*(names_bound("".join(c["source"])) for c in nb["cells"] if c["cell_type"] == "code"))
    kept = set().union(*(names_bound("".join(c["source"])) for c in learner["cells"]
                                if c["cell_type"] == "code"))
    statements = re.findall(r"\{exercise-start\}.*?\{exercise-end\}", _text(learner["cells"]), flags=re.S)
    named = {n for text in statements for n in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", text)} & everywhere
    assert named <= kept, f"{notebook}: exercises name {sorted(named - kept)}, bound only in solutions"
    if notebook == "13_calibration":
        assert "M1_MAX_MEASURED" in named
    # the learner book and its PDF run no cell: a name bound only where the page shows neither the code nor its
    # output is readable there only if the exercise prints it (review R21c-3: 35.73 tok/s was on no learner page)
    from kvbook.inline import expressions, names_read

    code = [c for c in learner["cells"] if c["cell_type"] == "code"]
    shown = set().union(*(names_bound("".join(c["source"])) for c in code if not _off_the_page(c)))
    unseen_values = set().union(*(_values_assigned("".join(c["source"])) for c in code if _off_the_page(c))) - shown
    for text in statements:
        printed = set().union(set(), *(names_read(e) for e in expressions(text)))
        unseen = {n for n in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", text) if n in unseen_values} - printed
        assert not unseen, f"{notebook}: an exercise names {sorted(unseen)}, whose value no learner page shows"
    if notebook == "13_calibration":
        assert "M1_MAX_MEASURED" in unseen_values


def _off_the_page(cell: dict) -> bool:
    """A code cell whose code and output the built book both leave out."""
    tags = set(cell.get("metadata", {}).get("tags", []))
    return "remove-cell" in tags or {"remove-input", "remove-output"} <= tags


def _values_assigned(source: str) -> set[str]:
    """The names a cell assigns a value to at its top level (not its imports or functions)."""
    import ast

    names = set()
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


@pytest.mark.parametrize("notebook", CHAPTERS)
def test_every_name_the_learners_prose_reads_is_bound_before_it_outside_the_solutions(notebook):
    """The learner's copy has no solutions, so each ``{eval}`` the copy keeps (in the exercises and everywhere
    else) must read only names that a kept code cell above it binds, or builtins: a name bound only in a solution
    would leave the prose unfilled (the kernel evaluates each expression where the reader meets it)."""
    import builtins

    from kvbook.inline import expressions, names_bound, names_read

    nb = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())
    bound, unbound = set(dir(builtins)), []
    for i, cell in enumerate(workshop_build.strip_solutions(nb)["cells"]):
        source = "".join(cell["source"])
        if cell["cell_type"] == "code":
            bound |= names_bound(source)
        elif cell["cell_type"] == "markdown":
            unbound += [f"cell {i}: {expr!r} reads {sorted(names_read(expr) - bound)}"
                        for expr in expressions(source) if names_read(expr) - bound]
    assert not unbound, f"{notebook}: the learner's copy reads names no kept cell above binds:\n" + "\n".join(unbound)


def test_the_check_of_the_learners_prose_catches_a_name_only_a_solution_binds(monkeypatch):
    nb = {"cells": [
        {"cell_type": "code", "metadata": {}, "source": "A = 1\n", "outputs": []},
        {"cell_type": "markdown", "metadata": {}, "source": "```{solution-start} ex-a\n:class: dropdown\n```\n"},
        {"cell_type": "code", "metadata": {}, "source": "B = 2\n", "outputs": []},
        {"cell_type": "markdown", "metadata": {}, "source": "```{solution-end}\n```\n\nA is {eval}`f\"{A}\"`, "
                                                            "B {eval}`f\"{B + len([k for k in range(A)])}\"`.\n"},
    ]}
    monkeypatch.setattr(json, "loads", lambda text: nb)
    with pytest.raises(AssertionError, match=r"reads \['B'\]"):
        test_every_name_the_learners_prose_reads_is_bound_before_it_outside_the_solutions("00_sample_rhythm")


def test_stripping_a_gated_solution_keeps_what_follows():
    nb = {"cells": [
        {"cell_type": "markdown", "metadata": {}, "source":
         "Intro.\n\n```{exercise-start}\n:label: ex-a\n```\nQ?\n```{exercise-end}\n```\n\n"
         "```{solution-start} ex-a\n:class: dropdown\n```\nSECRET prose.\n"},
        {"cell_type": "code", "metadata": {}, "source": "secret_code = 1", "outputs": []},
        {"cell_type": "markdown", "metadata": {}, "source": "```{solution-end}\n```\n\nAfter.\n"},
        {"cell_type": "markdown", "metadata": {}, "source": ":::{solution} ex-a\nSECRET too\n:::\nKept.\n"}]}
    out = _text(workshop_build.strip_solutions(nb)["cells"])
    assert "SECRET" not in out and "secret_code" not in out
    assert "Intro." in out and "Q?" in out and "After." in out and "Kept." in out


def test_instructor_copy_has_a_note_in_every_chapter():
    for notebook in CHAPTERS:
        nb = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())
        noted = workshop_build.add_facilitator_note(nb, notebook)
        assert len(noted["cells"]) == len(nb["cells"]) + 1
        assert "Facilitator's note" in _text(noted["cells"])


def _need(path: Path) -> None:
    if not (path / "index.html").exists():
        pytest.fail(f"{path} missing: run make learner (make test-full builds it first)")


def page_index_terms(site: Path) -> dict[str, set[str]]:
    """The search index's terms of each page (Sphinx's searchindex.js), by page name."""
    raw = (site / "searchindex.js").read_text()
    index = json.loads(raw[raw.index("(") + 1:raw.rindex(")")])
    out: dict[str, set[str]] = {name: set() for name in index["docnames"]}
    for key in ("terms", "titleterms"):
        for term, docs in index[key].items():
            for doc in (docs if isinstance(docs, list) else [docs]):
                out[index["docnames"][doc]].add(term)
    return out


@pytest.mark.slow
def test_learner_build_has_no_solution_text_or_code():
    _need(LEARNER)
    _need(DEFAULT)
    # a page's own terms: a solution word that another page shows (a source's title in a
    # computed table, say) is in the index for that page, not leaked from this one
    terms = page_index_terms(LEARNER)
    tested = 0
    # words any page may carry: the theme's own (search page) and the bibliography's (a solution may cite)
    chrome = set(WORD.findall(page_text(LEARNER / "search.html")))
    chrome |= set(WORD.findall(page_text(LEARNER / "book" / "references.html")))
    for notebook in CHAPTERS:
        page = LEARNER / "notebooks" / f"{notebook}.html"
        # a notes dropdown is made by the build from kvmath's data (its HTML is not committed): its words are a kept
        # cell's output, not the solution's (chapter 13's table of assumptions: "how the kernel unpacks int8")
        words = solution_only_words(notebook) - chrome - dropdown_words(page)
        tested += len(words)
        text = set(WORD.findall(page_text(page)))
        assert 'class="solution' not in page.read_text()
        index = terms[f"notebooks/{notebook}"]
        leaked = sorted(w for w in words if w in text or w.lower() in index)
        assert not leaked, f"{notebook}: solution words in the learner build: {leaked[:10]}"
        if words:
            shown = page_text(DEFAULT / "notebooks" / f"{notebook}.html")
            assert words & set(WORD.findall(shown)), f"{notebook}: the default build should show its solutions"
    assert tested >= 20, "too few distinctive solution words to test with"
    for source in (LEARNER / "_sources" / "notebooks").glob("*.ipynb"):
        assert "{solution-start}" not in source.read_text()
    problems = page_text(LEARNER / "book" / "teaching" / "problems.html")
    assert "Worked answer" not in problems


@pytest.mark.slow
def test_instructor_build_shows_a_facilitator_note_in_every_chapter():
    built = workshop_build.SRC / "instructor" / "_build" / "html"
    if not (built / "index.html").exists():
        pytest.skip("instructor build not made (make instructor)")
    for notebook in CHAPTERS:
        text = page_text(built / "notebooks" / f"{notebook}.html")
        assert "(instructor build)" in text and "Watch for" in text, notebook
        assert "Watch for" not in page_text(LEARNER / "notebooks" / f"{notebook}.html")


def test_every_tracked_top_level_entry_is_copied_linked_or_named_as_not_read():
    """The kits' copies of the sources once left out ``_static/`` (review R21b-1): a new top-level entry must be
    decided on."""
    import subprocess

    tracked = {line.split("/")[0] for line in subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines()}
    listed = [*workshop_build.COPIED, *workshop_build.LINKED, *workshop_build.NOT_READ]
    assert len(listed) == len(set(listed)), "an entry is listed twice"
    assert tracked - {"node_modules"} == set(listed) - {"node_modules"}, (
        sorted(tracked - set(listed)), sorted(set(listed) - tracked - {"node_modules"}))
    assert "_static" in workshop_build.COPIED


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["learner", "instructor"])
def test_a_kit_book_carries_the_books_own_stylesheet_and_script(variant):
    """Review R21b-1: without them the footer's source link was a 404, the PDF printed the toggle bars and the
    tables overflowed a phone. The files are the book's own (byte for byte), and every page links them."""
    built = workshop_build.SRC / variant / "_build" / "html"
    _need(built)
    for name in ("kvmath.css", "kvmath.js"):
        assert (built / "_static" / name).read_bytes() == (ROOT / "_static" / name).read_bytes(), name
    for page in ("book/intro.html", "notebooks/08_fitting_52b.html", "book/references.html"):
        text = (built / page).read_text()
        assert "_static/kvmath.css" in text and "_static/kvmath.js" in text, (variant, page)
