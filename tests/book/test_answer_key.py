"""The answer key collects what the notebooks glue under ans_<label>_<quantity>."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from kvbook.workshop import answer_key, workshop_pages

ROOT = Path(__file__).resolve().parents[2]

EXERCISES = """## Exercises

```{exercise-start}
:label: ex-toy-1
```
How many bytes does one token of a toy model take, with {glue:text}`L` layers?
```{exercise-end}
```

```{solution-start} ex-toy-1
:class: dropdown
```
Multiply.
"""
SOLUTION = """import kvmath
from myst_nb import glue
k = kvmath.formulas.kv_bytes_per_token(4, 2, 8, 2)
glue("L", 4, display=False)
glue("ans_ex-toy-1_bytes", f"{k:.0f} bytes", display=False)
glue("ans_ex-toy-10_tokens", "7 tokens", display=False)
glue("unrelated", 3.5, display=False)
"""
LATER = """```{solution-end}
```

```{exercise-start}
:label: ex-toy-10
```
A second exercise whose label starts with the first one's. How many tokens?
```{exercise-end}
```

:::{exercise}
:label: ex-toy-2

An exercise in the plain (not gated) syntax, with no recorded answer.
:::
"""


def toy_notebook(extra_source: str = "") -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A toy chapter"),
                nbformat.v4.new_markdown_cell(EXERCISES),
                nbformat.v4.new_code_cell(SOLUTION + extra_source),
                nbformat.v4.new_markdown_cell(LATER)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


@pytest.fixture(scope="module")
def executed_dir(tmp_path_factory) -> Path:
    """A toy chapter executed by a real kernel, so the glue outputs are myst-nb's own."""
    from nbclient import NotebookClient

    nb = toy_notebook()
    NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    d = tmp_path_factory.mktemp("nb")
    nbformat.write(nb, d / "99_toy.ipynb")
    return d


def test_collects_answers_by_label_from_real_glue_outputs(executed_dir):
    key = answer_key.collect(executed_dir)
    by_label = {e["label"]: e for e in key}
    assert [e["label"] for e in key] == ["ex-toy-1", "ex-toy-10", "ex-toy-2"]
    assert by_label["ex-toy-1"]["answers"] == [("bytes", "256 bytes")]
    assert by_label["ex-toy-10"]["answers"] == [("tokens", "7 tokens")]
    assert by_label["ex-toy-2"]["answers"] == []
    assert by_label["ex-toy-1"]["question"] == "How many bytes does one token of a toy model take, with 4 layers?"
    md = answer_key.to_markdown(key)
    assert md.count("\n- **") == 3
    assert "- **ex-toy-2**: An exercise in the plain (not gated) syntax, with no recorded answer. → *no recorded answer yet*" in md
    assert "bytes = 256 bytes" in md


def test_an_answer_for_no_label_fails_loudly(tmp_path):
    from nbclient import NotebookClient

    nb = toy_notebook('glue("ans_ex-toy-3_x", "1", display=False)\n')
    NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    nbformat.write(nb, tmp_path / "99_toy.ipynb")
    with pytest.raises(ValueError, match="ans_ex-toy-3_x"):
        answer_key.collect(tmp_path)


def test_glue_store_of_an_executed_build_is_read(tmp_path, executed_dir):
    """myst-nb's build moves glue of removed cells into <notebook>.glue.json."""
    nb = json.loads((executed_dir / "99_toy.ipynb").read_text())
    store = {}
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                store[name] = {"output_type": "display_data", "metadata": out["metadata"],
                               "data": {"text/plain": out["data"][answer_key.GLUE_MIME + "text/plain"]}}
        cell["outputs"] = []
    (tmp_path / "99_toy.ipynb").write_text(json.dumps(nb))
    (tmp_path / "99_toy.glue.json").write_text(json.dumps(store))
    key = answer_key.collect(tmp_path)
    assert key[0]["answers"] == [("bytes", "256 bytes")]


def test_the_books_key_has_one_line_per_exercise():
    key = answer_key.collect(ROOT / "notebooks")
    labels = [lab for nb in workshop_pages.chapter_names() for lab in workshop_pages.chapter(nb)["labels"]]
    assert [e["label"] for e in key] == labels
    assert len(labels) >= 40
    md = answer_key.to_markdown(key)
    for e in key:
        line = next(line for line in md.splitlines() if line.startswith(f"- **{e['label']}**"))
        if e["answers"]:
            nb = json.loads((ROOT / "notebooks" / f"{e['chapter']}.ipynb").read_text())
            glue = answer_key.glue_values(nb)
            for name, value in e["answers"]:
                assert answer_key.plain(glue[f"ans_{e['label']}_{name}"]) == value
                assert value in line
        else:
            assert line.endswith(f"*{answer_key.NO_ANSWER}*")


PEN_AND_PAPER = re.compile(r"^(`{3,}|:{3,})\{exercise(?:-start)?\}[^\n]*pen and paper", re.M | re.I)


def _keyed_chapters() -> list[str]:
    return [c for c in workshop_pages.chapter_names()]


def test_every_exercise_of_the_books_chapters_has_a_recorded_answer():
    """Issue 15 item 3: each exercise's solution glues ans_<label>_<quantity> for the key."""
    chapters = _keyed_chapters()
    assert {"00_sample_rhythm", "01_roofline", "08_fitting_52b", "14_measure_your_machine"} <= set(chapters)
    key = answer_key.collect(ROOT / "notebooks")
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
