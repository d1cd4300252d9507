"""kvbook.lab: `make lab`'s copies of the chapters link into the built book and keep a reader's edits (review R21-9)."""

from __future__ import annotations

import collections
import html
import json
import re

import nbformat

from kvbook import lab
from kvbook.workshop import book_links, workshop_build


def test_the_copies_link_every_reference_and_citation_and_keep_the_stored_numbers(built_book, tmp_path):
    assert lab.prepare(tmp_path) == []
    book = book_links.BuiltBook.from_build(lab.BOOK_BUILD)
    folded = 0
    for source in sorted((lab.ROOT / "notebooks").glob("*.ipynb")):
        copy = json.loads((tmp_path / "notebooks" / source.name).read_text())
        original = json.loads(source.read_text())
        assert len(copy["cells"]) == len(original["cells"]), source.name
        solutions = set(workshop_build.solution_code_cells(original))
        folded += len(solutions)
        for i, (mine, theirs) in enumerate(zip(copy["cells"], original["cells"])):
            if i in solutions:   # a solution's code opens collapsed (review R21c-8)
                theirs = dict(theirs, metadata=dict(theirs["metadata"], jupyter={"source_hidden": True,
                                                                                 "outputs_hidden": True}))
            assert mine["metadata"] == theirs["metadata"] and mine.get("outputs") == theirs.get("outputs")
            if mine["cell_type"] == "markdown":
                text = "".join(mine["source"])
                assert not book_links.left_roles(text, "notebooks/" + source.stem, book), (source.name, text[:200])
            else:
                assert mine["source"] == theirs["source"]
    sample = "".join(c for cell in json.loads((tmp_path / "notebooks" / "00_sample_rhythm.ipynb").read_text())["cells"]
                     for c in cell["source"])
    assert '<a href="/book/book/references.html#' in sample and 'target="_blank"' in sample
    assert (tmp_path / "tests" / "data" / "serving_sweep.csv").exists()  # the chapters read ../tests/data
    assert folded >= 17, folded
    # each exercise and labelled equation carries the book's number (review R21c-7), an equation inside a list item
    # too (chapter 3's ms-attn-intensity): as many as Sphinx numbered in the chapters (67 exercises, 73 equations)
    numbered = sum(len(re.findall(r"^[ \t]*:enumerator: ", "".join(c["source"]), re.M))
                   for p in (tmp_path / "notebooks").glob("*.ipynb")
                   for c in json.loads(p.read_text())["cells"] if c["cell_type"] == "markdown")
    in_book = sum(len(book.numbers.get("notebooks/" + p.stem, {}).get(kind, {}))
                  for p in (lab.ROOT / "notebooks").glob("*.ipynb") for kind in ("exercise", "displaymath"))
    assert numbered == in_book >= 67 + 73, (numbered, in_book)


def test_an_edited_copy_is_kept_when_its_chapter_changes_and_an_unedited_one_is_renewed(built_book, tmp_path):
    lab.prepare(tmp_path)
    manifest_path = tmp_path / lab.MANIFEST
    edited, plain = tmp_path / "notebooks" / "01_roofline.ipynb", tmp_path / "notebooks" / "02_kv_cache.ipynb"
    nb = json.loads(edited.read_text())
    nb["cells"][0]["source"] += "\n(my note)"
    edited.write_text(json.dumps(nb))
    assert lab.prepare(tmp_path) == [], "an unchanged chapter leaves the reader's edit alone, silently"
    assert "(my note)" in edited.read_text()
    # both chapters "change" in notebooks/: the manifest's record of their sources no longer matches
    manifest = json.loads(manifest_path.read_text())
    for name in (edited.name, plain.name):
        manifest[name]["source"] = "0" * 64
    manifest_path.write_text(json.dumps(manifest))
    kept = lab.prepare(tmp_path)
    assert len(kept) == 1 and "01_roofline.ipynb" in kept[0] and "delete the copy" in kept[0], kept
    assert "(my note)" in edited.read_text()
    renewed = json.loads(manifest_path.read_text())
    assert renewed[plain.name]["source"] == lab._digest((lab.ROOT / "notebooks" / plain.name).read_bytes())
    assert renewed[edited.name]["source"] == "0" * 64, "the kept copy still waits for its new chapter"


def autosaved(path) -> None:
    """What JupyterLab 4's autosave wrote over a copy a reader only opened (review R21c-2, and here: chapter 11 opened
    in `make lab`'s JupyterLab for 45 s with a 15-s autosave): every source split into lines, the kernel's full
    language_info, "collapsed": true on the cells whose outputs are hidden; nbformat's writer, which splits the
    sources the same way, stands in for it. Also the execution counts (a kernel restarted, a count renumbered)."""
    nb = nbformat.read(path, as_version=4)
    nb.metadata["language_info"] = {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                                    "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                                    "pygments_lexer": "ipython3", "version": "3.11.7"}
    for n, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        if cell.metadata.get("jupyter", {}).get("outputs_hidden"):
            cell.metadata["collapsed"] = True
        cell.execution_count = n + 100
        for out in cell.outputs:
            if "execution_count" in out:
                out["execution_count"] = n + 100
    nbformat.write(nb, path)


def test_a_copy_only_opened_is_renewed_and_one_edited_or_run_is_kept(built_book, tmp_path):
    """Review R21c-2: JupyterLab's autosave of a copy that was only opened made `make lab` keep it over a newer
    chapter ("your edited copy is kept"). Changed means a cell's source or the outputs of a cell the reader ran."""
    lab.prepare(tmp_path)
    folder = tmp_path / "notebooks"
    opened, edited, ran, broken = (folder / f"{n}.ipynb" for n in
                                   ("11_serving", "01_roofline", "03_min_step", "12_reality_check"))
    for path in (opened, edited, ran):
        autosaved(path)
    assert opened.read_bytes() != (lab.ROOT / "notebooks" / opened.name).read_bytes()
    nb = json.loads(edited.read_text())
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    code["source"] = ["# my note\n", *code["source"]]
    edited.write_text(json.dumps(nb))
    nb = json.loads(ran.read_text())
    code = next(c for c in nb["cells"] if c["cell_type"] == "code" and c["outputs"])
    code["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["what my run printed\n"]}]
    ran.write_text(json.dumps(nb))
    broken.write_text(broken.read_text()[:-20])
    manifest_path = tmp_path / lab.MANIFEST
    manifest = json.loads(manifest_path.read_text())
    for path in (opened, edited, ran, broken):
        manifest[path.name]["source"] = "0" * 64      # as if each chapter changed in notebooks/
    manifest_path.write_text(json.dumps(manifest))
    kept = lab.prepare(tmp_path)
    assert sorted(line.split(": ", 1)[0].rsplit("/", 1)[-1] for line in kept) == sorted(
        p.name for p in (edited, ran, broken)), kept
    assert all("delete the copy" in line for line in kept)
    assert "# my note" in edited.read_text() and "what my run printed" in ran.read_text()
    assert json.loads(opened.read_text())["metadata"].get("language_info", {}).get("version") is None, \
        "the copy only opened is written anew"
    assert lab.prepare(tmp_path) == kept   # the kept ones stay kept, and say so each time


def test_what_counts_as_a_change():
    """content_digest by hand: the same cells written two ways agree; a source or an output differs."""
    one = {"cells": [{"cell_type": "code", "source": "x = 1\nx", "execution_count": 1, "metadata": {},
                      "outputs": [{"output_type": "execute_result", "execution_count": 1, "metadata": {},
                                   "data": {"text/plain": "1"}}]}], "metadata": {}}
    other = {"metadata": {"language_info": {"name": "python"}},
             "cells": [{"outputs": [{"data": {"text/plain": ["1"]}, "metadata": {"isolated": True},
                                     "execution_count": 7, "output_type": "execute_result"}],
                        "metadata": {"collapsed": True}, "execution_count": 7, "source": ["x = 1\n", "x"],
                        "cell_type": "code"}]}
    assert lab.content_digest(one) == lab.content_digest(other)
    edited = json.loads(json.dumps(one))
    edited["cells"][0]["source"] = "x = 2\nx"
    ran = json.loads(json.dumps(one))
    ran["cells"][0]["outputs"][0]["data"]["text/plain"] = "2"
    assert len({lab.content_digest(nb) for nb in (one, edited, ran)}) == 3


_BOOK_CITATION = re.compile(r'<span class="bibtex-citation" id="[^"]*">(.*?)</span>', re.S)
_BOOK_ANCHOR = re.compile(r'<a class="reference internal" href="[^"#]*references\.html#(id\d+)"[^>]*>(.*?)</a>', re.S)
_COPY_ANCHOR = re.compile(r'<a href="/book/book/references\.html#(id\d+)" target="_blank" rel="noopener">(.*?)</a>')


def _plain(markup: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", markup)).split())


def book_citations(page: str) -> collections.Counter:
    """(entry id, "author, year") of each citation a built page prints: "[author, year]" (parenthetical; several
    within one pair of brackets) or "author [year]" (textual)."""
    found = collections.Counter()
    for span in _BOOK_CITATION.findall(page):
        anchors = _BOOK_ANCHOR.findall(span)
        author = _plain(span.split("[", 1)[0])
        for anchor_id, inner in anchors:
            found[(anchor_id, f"{author}, {_plain(inner)}" if author else _plain(inner))] += 1
    return found


def test_every_citation_in_the_copies_reads_as_the_book_prints_it_on_the_same_page(built_book, tmp_path):
    """Review R21c-1: the notes, which have no year, were cited as "(n.d.)" in six chapters, where the book prints
    their title; every citation of a copy carries the text the chapter's built page prints for it."""
    lab.prepare(tmp_path)
    compared = 0
    for copy in sorted((tmp_path / "notebooks").glob("*.ipynb")):
        markdown = "\n".join("".join(c["source"]) for c in json.loads(copy.read_text())["cells"]
                             if c["cell_type"] == "markdown")
        # the copy prints a textual citation "author (year)", the book "author [year]": both are "author, year" here
        mine = collections.Counter((anchor_id, re.sub(r" \(([^()]*)\)$", r", \1", html.unescape(text)))
                                   for anchor_id, text in _COPY_ANCHOR.findall(markdown))
        theirs = book_citations((built_book / "notebooks" / f"{copy.stem}.html").read_text(encoding="utf-8"))
        assert mine == theirs, (copy.name, mine - theirs, theirs - mine)
        compared += sum(mine.values())
    assert compared > 100, compared
    eight = (tmp_path / "notebooks" / "08_fitting_52b.ipynb").read_text()
    assert "(theoretically) memory bound vs compute bound, n.d.</a>" in eight and ">n.d.</a>" not in eight


def test_a_solutions_code_cells_are_found_between_its_start_and_its_end():
    """Chapter 1's first solution as the chapter lays it out (exercise, solution-start, code, solution-end), by hand."""
    md = lambda text: {"cell_type": "markdown", "metadata": {}, "source": text}   # noqa: E731
    code = lambda text: {"cell_type": "code", "metadata": {}, "source": text, "outputs": []}   # noqa: E731
    nb = {"cells": [code("setup = 1"),
                    md("```{exercise-start}\n:label: ex-a\n```\nAsk.\n```{exercise-end}\n```\n\n"
                       "```{solution-start} ex-a\n:class: dropdown\n```\nWork it out."),
                    code("answer = 2"), code("print(answer)"),
                    md("```{solution-end}\n```\n\nThe next exercise."), code("after = 3")]}
    assert workshop_build.solution_code_cells(nb) == [2, 3]
    assert [c["metadata"] for c in lab.fold_solutions(nb)["cells"] if c["cell_type"] == "code"] == [
        {}, {"jupyter": {"source_hidden": True, "outputs_hidden": True}},
        {"jupyter": {"source_hidden": True, "outputs_hidden": True}}, {}]
