"""Committed notebooks were executed, top to bottom, by the refresh command.

`make refresh` (scripts/refresh_notebooks.py) re-executes every notebook in a
fresh kernel and drops volatile metadata; these tests fail when a notebook is
committed without that, so a reader of the repository (and of a diff) sees
real outputs.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]


def toc_files() -> set[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    found = {toc["root"]}

    def walk(entries):
        for e in entries or []:
            if "file" in e:
                found.add(e["file"])
            walk(e.get("sections"))
            walk(e.get("chapters"))

    walk(toc.get("parts"))
    walk(toc.get("chapters"))
    return found


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks under notebooks/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_code_cell_was_executed_in_order(path):
    nb = nbformat.read(path, as_version=4)
    cells = code_cells(nb)
    missing = [i for i, c in enumerate(cells) if c.execution_count is None]
    assert not missing, f"{path.name}: code cells {missing} have no execution_count: run `make refresh`"
    counts = [c.execution_count for c in cells]
    assert counts == list(range(1, len(cells) + 1)), (
        f"{path.name}: execution counts {counts} are not 1..n: re-run it top to bottom with `make refresh`")
    assert any(c.outputs for c in cells), f"{path.name}: no outputs at all"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_errors_and_no_volatile_metadata(path):
    nb = nbformat.read(path, as_version=4)
    for i, c in enumerate(code_cells(nb)):
        assert not [o for o in c.outputs if o.output_type == "error"], f"{path.name}: cell {i} raised"
        assert "execution" not in c.metadata, f"{path.name}: cell {i} has timestamps: use `make refresh`"
    assert "widgets" not in nb.metadata, f"{path.name}: stored widget state: use `make refresh`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_prose_numbers_are_inline_expressions_filled_for_jupyterlab(path):
    """No glue is left (it reads only inside the built book); every Markdown cell's inline expressions have their
    results stored (kvbook.inline, run by `make refresh`), so JupyterLab and JupyterLite show the numbers before any
    cell runs."""
    from kvbook.inline import expressions

    nb = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "myst_nb" not in code and "glue(" not in code, f"{path.name}: glue is left in its code"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        assert "{glue" not in cell.source, f"{path.name}: cell {i} still has a glue role"
        stored = [e["expression"] for e in cell.metadata.get("user_expressions", [])]
        assert stored == expressions(cell.source), (
            f"{path.name}: cell {i}'s stored inline-expression results do not match its text: run `make refresh`")
        assert all(e["result"]["status"] == "ok" for e in cell.metadata.get("user_expressions", []))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_name_the_prose_reads_is_bound_once(path):
    """After Run All, jupyterlab-myst evaluates a Markdown cell's expressions once the queued code cells have run, so a
    name a later cell binds again would show its later value in JupyterLab and JupyterLite (review R21-1: chapter 16's
    "0 have wider heads", a KeyError). No later code cell binds or changes a name the prose reads."""
    from kvbook.inline import rebound_names

    breaches = rebound_names(nbformat.read(path, as_version=4).cells)
    assert not breaches, "; ".join(f"{path.name}: Markdown cell {md} reads {names}, bound again in code cell {code}"
                                   for md, code, names in breaches)


def test_the_rebinding_check_finds_each_kind_of_binding():
    """The check above on hand-written cells: each way a later cell can change a name is caught, a name local to a
    function or comprehension and a name bound only before the sentence are not."""
    from kvbook.inline import names_bound, names_read, rebound_names

    assert names_read('f"{sum(v < 1 for v in r.values()):d} of {n}"') == {"sum", "r", "n"}
    assert names_read("max(xs, key=lambda x: x[1])") == {"max", "xs"}
    later = {
        "x = 1": {"x"}, "x, (y, *z) = t": {"x", "y", "z"}, "x += 1": {"x"}, "x[0] = 1": {"x"},
        "x.a = 1": {"x"}, "for x in t:\n    pass": {"x"}, "import numpy as x": {"x"}, "def x(): y = 1": {"x"},
        "x.append(1)": {"x"}, "print(x.update(a=1))": {"x"}, "if t:\n    with open(f) as x: pass": {"x"},
        "[y for y in t]": set(), "def f():\n    x = 2": {"f"}, "%timeit x = 1": set(),
    }
    for code, bound in later.items():
        assert names_bound(code) == bound, code
    cells = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_markdown_cell("x is {eval}`f'{x}'`"),
             nbformat.v4.new_code_cell("y = 2"), nbformat.v4.new_code_cell("x = 3")]
    assert rebound_names(cells) == [(1, 3, ["x"])]
    assert rebound_names(cells[:3]) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_code_the_book_hides_opens_collapsed_in_jupyterlab(path):
    """A cell the book hides (remove-input, hide-input, remove-output) opens collapsed the same way in JupyterLab and
    JupyterLite (metadata.jupyter, written by `make refresh`; review R21-2), and a shown cell opens open."""
    from kvbook.cell_view import collapsed_view

    nb = nbformat.read(path, as_version=4)
    wrong = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
             and c.metadata.get("jupyter", {}) != collapsed_view(c)]
    assert not wrong, f"{path.name}: code cells {wrong} do not open as the book shows them: run `make refresh`"
    hidden = [c for c in nb.cells if c.cell_type == "code" and "remove-input" in c.metadata.get("tags", [])]
    assert all(c.metadata["jupyter"]["source_hidden"] is True for c in hidden)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_code_cell_is_removed_whole(path):
    """myst-nb's inline mode runs a code cell when the page reaches it, and skips a cell tagged remove-cell until the
    next shown one: the prose between would be evaluated before the cell above it ran. A hidden computing cell is
    tagged remove-input and remove-output instead (run in place, nothing shown)."""
    nb = nbformat.read(path, as_version=4)
    removed = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "remove-cell" in c.metadata.get("tags", [])]
    assert not removed, f"{path.name}: code cells {removed} are tagged remove-cell"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_interactive_figure_has_a_numbered_caption_the_prose_can_cite(path):
    """The cell of an interactive figure carries myst-nb figure metadata (caption and a name), so the
    page numbers it like a static figure and {numref} can cite it; one display output per such cell
    (myst-nb would wrap each output in its own figure)."""
    for i, c in enumerate(code_cells(nbformat.read(path, as_version=4))):
        if not any("kvmath-interactive" in str(o.get("data", {}).get("text/html", "")) for o in c.outputs):
            continue
        figure = c.metadata.get("mystnb", {}).get("figure", {})
        assert figure.get("caption", "").strip() and figure.get("name", "").startswith("fig-"), (
            f"{path.name}: interactive figure in code cell {i} has no caption/name in metadata.mystnb.figure")
        assert len(c.outputs) == 1, f"{path.name}: code cell {i} has {len(c.outputs)} outputs besides its figure"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_in_the_table_of_contents(path):
    assert f"notebooks/{path.stem}" in toc_files(), f"add notebooks/{path.stem} to _toc.yml"


# --- small notebooks in git (issue 13, item 8) ------------------------------------------

# 200 KB of text: a committed notebook keeps its outputs' text and one default frame per interactive figure,
# drawn at its CSS size (1x; the book draws 2x frames when it builds). Chapter 13's table of every published
# measurement keeps its long "left unknown" text in a collapsed dropdown (kvbook.tables.Dropdown), and its six
# per-regime tables leave the configuration column to the HTML (kvbook.tables.Table's text_columns).
MAX_NOTEBOOK_BYTES = 200_000


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_is_under_200_kb(path):
    size = path.stat().st_size
    assert size <= MAX_NOTEBOOK_BYTES, (
        f"{path.name} is {size / 1e3:.0f} KB (> {MAX_NOTEBOOK_BYTES / 1e3:.0f} KB): images and frames are "
        "build outputs; refresh it with `scripts/refresh_notebooks.py --small`")


def test_refresh_small_keeps_the_checked_text_and_drops_images(tmp_path):
    """--small on a copy of the sample chapter: executed, checked text kept, no images, under MAX_NOTEBOOK_BYTES."""
    import shutil

    from refresh_notebooks import refresh

    source = ROOT / "notebooks" / "00_sample_rhythm.ipynb"
    copy = tmp_path / source.name
    shutil.copy(source, copy)
    refresh(copy, keep_images=False)
    before, after = nbformat.read(source, as_version=4), nbformat.read(copy, as_version=4)
    assert copy.stat().st_size < MAX_NOTEBOOK_BYTES
    outputs = [o for c in code_cells(after) for o in c.outputs]
    assert not [o for o in outputs if any(k.startswith("image/") for k in o.get("data", {}))]
    htmls = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert all("kvmath-interactive-data" not in h for h in htmls)
    assert any("kvmath-interactive-static" in h and h.count("data:image/png") == 1 for h in htmls)

    def checked_text(nb):
        return [[o.get("text") or o.get("data", {}).get("text/plain") for o in c.outputs]
                for c in code_cells(nb)
                if "NBVAL_CHECK_OUTPUT" in c.source or "nbval-check-output" in c.metadata.get("tags", [])]

    assert checked_text(after) == checked_text(before) and checked_text(after)
    assert [c.execution_count for c in code_cells(after)] == list(range(1, len(code_cells(after)) + 1))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_sentence_sends_the_reader_to_a_kernel_for_a_control_the_page_runs(path):
    """Every control of a figure that is not static runs on the published page (its first touch starts the chapter's
    Python in the browser: kvbook/live/live.js), so no sentence may say it needs a live kernel (issue 22, item 4: 13
    sentences in 12 chapters did). A chapter whose figures all keep their build-time frames (they measure the machine:
    figures(static=...)) may."""
    import re

    from kvbook import figures

    registry = figures.load_all()
    nb = nbformat.read(path, as_version=4)
    called = {m.group(1) for c in nb.cells if c.cell_type == "code"
              for m in re.finditer(r"\b(ch\d\d\.\w+)\(", c.source)}
    live = [name for name in called if name in registry and not registry[name].static]
    if not live:
        return
    text = " ".join(" ".join(c.source.split()) for c in nb.cells if c.cell_type == "markdown")
    said = re.findall(r"[^.]*\b(?:in|needs?|with) a live kernel[^.]*\.", text, re.I)
    assert not said, f"{path.name}: {said}"


@pytest.mark.parametrize("tool", ["refresh_notebooks", "kvbook.inline"])
def test_the_refresh_tools_answer_help_and_refuse_a_missing_notebook(tool, capsys):
    """--help prints the usage and exits 0 (it was read as a notebook's path, a traceback); a path that is not a
    file and an unknown option each exit 2 with one line naming it."""
    import importlib

    main = importlib.import_module(tool).main
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0 and "NOTEBOOK" in capsys.readouterr().out
    for argv, named in ((["no-such.ipynb"], "no such notebook: no-such.ipynb"), (["--bogus", "x.ipynb"], "--bogus")):
        with pytest.raises(SystemExit) as done:
            main(argv)
        err = capsys.readouterr().err
        assert done.value.code == 2 and named in err.splitlines()[-1]
