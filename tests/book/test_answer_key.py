"""The answer key collects the answers each solution records (metadata expressions, evaluated by kvbook.inline)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from kvbook import inline
from kvbook.workshop import answer_key, book_links, workshop_pages

ROOT = Path(__file__).resolve().parents[2]

EXERCISES = """## Exercises

```{exercise-start}
:label: ex-toy-1
```
How many bytes does one token of a toy model take, with {eval}`f"{layers}"` layers, by {eq}`toy-kv`?
```{exercise-end}
```

```{solution-start} ex-toy-1
:class: dropdown
```
Multiply.
"""
SOLUTION = """import kvmath
k = kvmath.formulas.kv_bytes_per_token(layers, 2, 8, 2)
"""
LATER = """```{solution-end}
```

```{exercise-start}
:label: ex-toy-10
```
A second exercise whose label starts with the first one's. How many tokens?
```{exercise-end}
```

```{solution-start} ex-toy-10
:class: dropdown
```
Seven.
```{solution-end}
```

:::{exercise}
:label: ex-toy-2

An exercise in the plain (not gated) syntax, with no recorded answer.
:::
"""
ANSWERS = {"ex-toy-1": {"bytes": 'f"{k:.0f} bytes"'}, "ex-toy-10": {"tokens": '"7 tokens"'}}


def toy_notebook(answers: dict = ANSWERS) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    later = nbformat.v4.new_markdown_cell(LATER)
    later.metadata["kvbook"] = {"answers": answers}
    nb.cells = [nbformat.v4.new_markdown_cell("# A toy chapter"),
                nbformat.v4.new_code_cell("layers = 4"),
                nbformat.v4.new_markdown_cell(EXERCISES),
                nbformat.v4.new_code_cell(SOLUTION),
                later]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


#: The toy chapter as a built book would number it: chapter 9, its three exercises, and an equation of chapter 2.
TOY_BOOK = book_links.BuiltBook(
    titles={}, numbers={"notebooks/99_toy": {"exercise": {"ex-toy-1": (9, 1), "ex-toy-10": (9, 2), "ex-toy-2": (9, 3)}},
                        "notebooks/02_kv_cache": {"displaymath": {"equation-toy-kv": (2, 1)}}},
    labels={label: ("notebooks/99_toy", label, "Exercise") for label in ("ex-toy-1", "ex-toy-10", "ex-toy-2")},
    equations={"toy-kv": "notebooks/02_kv_cache"}, citations={}, cite_texts={})


@pytest.fixture(scope="module")
def book(built_book) -> book_links.BuiltBook:
    """The built book the fixture built (or found fresh): its exercise numbers, as make answer-key reads the
    instructor build's."""
    return book_links.BuiltBook.from_build(built_book.parent)


def filled(directory: Path, nb: nbformat.NotebookNode) -> Path:
    """The toy chapter written to ``directory`` and filled by a real kernel (kvbook.inline.fill)."""
    path = directory / "99_toy.ipynb"
    nbformat.write(nb, path)
    inline.fill(path)
    return directory


@pytest.fixture(scope="module")
def filled_dir(tmp_path_factory) -> Path:
    return filled(tmp_path_factory.mktemp("nb"), toy_notebook())


def test_collects_answers_by_label_from_the_evaluated_metadata(filled_dir):
    key = answer_key.collect(filled_dir, TOY_BOOK)
    by_label = {e["label"]: e for e in key}
    assert [e["label"] for e in key] == ["ex-toy-1", "ex-toy-10", "ex-toy-2"]
    assert [e["name"] for e in key] == ["Exercise 9.1", "Exercise 9.2", "Exercise 9.3"]
    assert by_label["ex-toy-1"]["answers"] == [("bytes", "256 bytes")]  # 2 * 4 layers * 2 heads * 8 * 2 B
    assert by_label["ex-toy-10"]["answers"] == [("tokens", "7 tokens")]
    assert by_label["ex-toy-2"]["answers"] == []
    # the equation as the book numbers it, not its label (review R21c-9)
    assert by_label["ex-toy-1"]["question"] == \
        "How many bytes does one token of a toy model take, with 4 layers, by (2.1)?"
    md = answer_key.to_markdown(key)
    assert md.count("\n- **") == 3
    # the exercise as learners see it, with the label the plans also give (review R21c-7)
    assert ("- **Exercise 9.3** (`ex-toy-2`): An exercise in the plain (not gated) syntax, with no recorded answer. → "
            "*no recorded answer yet*") in md
    assert "bytes = 256 bytes" in md


def test_an_answer_for_no_label_fails_loudly(tmp_path):
    with pytest.raises(ValueError, match="ex-toy-3"):
        answer_key.collect(filled(tmp_path, toy_notebook(dict(ANSWERS, **{"ex-toy-3": {"x": '"1"'}}))), TOY_BOOK)


def test_answers_never_evaluated_fail_loudly(tmp_path):
    nbformat.write(toy_notebook(), tmp_path / "99_toy.ipynb")  # not filled
    with pytest.raises(ValueError, match="not evaluated"):
        answer_key.collect(tmp_path, TOY_BOOK)


def test_an_answer_that_fails_to_evaluate_names_its_expression(tmp_path):
    with pytest.raises(RuntimeError, match="no_such_name"):
        filled(tmp_path, toy_notebook({"ex-toy-1": {"bytes": "no_such_name"}}))


def test_the_books_key_has_one_line_per_exercise(book):
    key = answer_key.collect(ROOT / "notebooks", book)
    labels = [lab for nb in workshop_pages.chapter_names() for lab in workshop_pages.chapter(nb)["labels"]]
    assert [e["label"] for e in key] == labels
    assert len(labels) >= 40
    md = answer_key.to_markdown(key)
    for e in key:
        line = next(line for line in md.splitlines() if line.startswith(f"- **{e['name']}** (`{e['label']}`): "))
        if e["answers"]:
            nb = json.loads((ROOT / "notebooks" / f"{e['chapter']}.ipynb").read_text())
            recorded = answer_key.answer_values(nb)[e["label"]]
            for name, value in e["answers"]:
                assert recorded[name] == value
                assert value in line
        else:
            assert line.endswith(f"*{answer_key.NO_ANSWER}*")


PEN_AND_PAPER = re.compile(r"^(`{3,}|:{3,})\{exercise(?:-start)?\}[^\n]*pen and paper", re.M | re.I)


def _keyed_chapters() -> list[str]:
    return [c for c in workshop_pages.chapter_names()]


def test_every_exercise_of_the_books_chapters_has_a_recorded_answer(book):
    """Issue 15 item 3: each exercise's solution records its answers for the key."""
    chapters = _keyed_chapters()
    assert {"00_sample_rhythm", "01_roofline", "08_fitting_52b", "14_measure_your_machine"} <= set(chapters)
    key = answer_key.collect(ROOT / "notebooks", book)
    keyed = [e for e in key if e["chapter"] in chapters]
    assert {e["chapter"] for e in keyed} == set(chapters), "a chapter without exercises"
    missing = [f"{e['chapter']}: {e['label']}" for e in keyed if not e["answers"]]
    assert not missing, "exercises with no recorded answer: " + ", ".join(missing)


@pytest.mark.parametrize("chapter", _keyed_chapters())
def test_each_chapter_has_three_exercises_one_for_pen_and_paper(chapter):
    """Issue 12: at least three exercises per chapter, one answerable with pen and paper (said in its title)."""
    nb = json.loads((ROOT / "notebooks" / f"{chapter}.ipynb").read_text())
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert len(answer_key.exercises(nb)) >= 3
    assert PEN_AND_PAPER.search(text), f"{chapter}: no exercise titled pen and paper"


def test_the_books_key_names_exercises_and_equations_as_the_book_prints_them(book, built_book):
    """Review R21c-7 and R21c-9: "Exercise 2.4", as the chapter's page prints it, and "(3.2)" where an exercise cites an
    equation (the key printed "(ms-general)"); no role and no bare label is left in any question."""
    key = answer_key.collect(ROOT / "notebooks", book)
    for e in key:
        page = (built_book / "notebooks" / f"{e['chapter']}.html").read_text(encoding="utf-8")
        shown = re.search(rf'id="{re.escape(e["label"])}".*?<span class="caption-number">([^<]*?)\s*</span>', page, re.S)
        assert shown and shown.group(1).strip() == e["name"], (e["label"], e["name"], shown and shown.group(1))
        assert not book_links.ROLE.search(e["question"]) and "{eval}" not in e["question"], e["question"]
        assert not re.search(r"\((?:" + "|".join(map(re.escape, book.equations)) + r")\)", e["question"]), e["question"]
    by_label = {e["label"]: e for e in key}
    assert re.search(r"Show from \(3\.\d\) that the all-memory bound \(3\.\d\)", by_label["ex-min-step-4"]["question"])
