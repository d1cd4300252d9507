"""The numbers the chapters print are those of 3f3cb8a, except the changes listed with their reasons.

``tests/data/book_numbers_3f3cb8a.json`` holds every glued value, check-cell text, CLI output and
other visible text output of the notebooks committed at 3f3cb8a (``tests/book/book_numbers.py``
describes each kind). The first test reads the notebooks in the tree (their committed outputs, as
``make refresh`` wrote them; nothing is executed) and fails on every key whose text differs or
that vanished, unless ``tests/data/book_numbers_changes.json`` lists it: a changed value with its
old and new text and why, or a value measured on the machine that ran the notebook (volatile).
New keys are reported, not failed. The other tests check the comparison itself on synthetic
records and on a notebook with one glued number changed, and that the record is what 3f3cb8a holds.
"""

from __future__ import annotations

import copy
import json
import subprocess
import warnings

import pytest

from tests.book.book_numbers import (CHANGES, GOLDEN, GOLDEN_COMMIT, ROOT, compare, extract, extract_notebook, flatten, load_json,
                          read_notebooks, read_notebooks_at)

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def without_glue(record: dict) -> dict:
    """A flat record, or a changes file, less its glue entries."""
    return {k: v for k, v in record.items() if "/glue/" not in k}


def test_the_chapters_print_the_recorded_numbers_or_a_listed_change():
    """Check cells, CLI runs and other visible outputs. The glued values of 3f3cb8a are now the prose's inline
    expressions: what the pages say, numbers included, is compared with the pages of 7042cf4 (the last build with
    glue, whose glued values are those of this record or a change listed here) by tests/book/test_book_text.py."""
    changes = load_json(CHANGES)
    changes = {kind: without_glue(entries) if isinstance(entries, dict) else entries for kind, entries in changes.items()}
    result = compare(without_glue(flatten(load_json(GOLDEN)["chapters"])), flatten(extract(read_notebooks(NOTEBOOKS))),
                     changes)
    if result["reported"]:
        warnings.warn(f"{len(result['reported'])} accepted or new book numbers:\n" + "\n".join(result["reported"]))
    assert not result["failed"], (
        f"{len(result['failed'])} book numbers differ from {GOLDEN.name} and are not listed in {CHANGES.name} "
        "(list each with its old and new text and why):\n" + "\n".join(result["failed"]))


def test_the_record_is_what_the_notebooks_held_at_3f3cb8a():
    """The committed record is the extraction of the commit's own notebooks, not edited by hand."""
    try:
        at_commit = read_notebooks_at(GOLDEN_COMMIT)
    except (subprocess.CalledProcessError, FileNotFoundError) as err:
        pytest.skip(f"no git history with {GOLDEN_COMMIT} here ({err})")
    assert load_json(GOLDEN)["chapters"] == extract(at_commit)


def test_the_record_counts_every_kind():
    """Counted by hand at 3f3cb8a: 1,373 glue outputs in 17 notebooks, 130 check cells (two of
    them chapter 15's CLI runs), and chapter 15's two commands."""
    golden = load_json(GOLDEN)["chapters"]
    assert len(golden) == 17
    assert sum(len(k["glue"]) for k in golden.values()) == 1373
    assert sum(len(k["check"]) for k in golden.values()) == 128
    assert sorted(golden["15_bring_your_own_model"]["cli"]) == [
        "$ kvmath capacity --config tests/data/hf_configs/openai--gpt-oss-20b/config.json --hardware h100-sxm "
        "--context 131072 --engine vllm --experts-dtype mxfp4",
        "$ kvmath decode --config tests/data/hf_configs/openai--gpt-oss-20b/config.json --hardware h100-sxm "
        "--batch 8 --context 8192 --experts-dtype mxfp4"]


# --- the comparison can fail ---------------------------------------------------------------

GOLDEN_TOY = {"ch/glue/a": "295.3", "ch/glue/b": "'2.54 ms'", "ch/check/c1": "B = 8\n", "ch/glue/t": "'37.2 GB/s'"}


def test_an_unlisted_change_and_a_vanished_key_fail_and_a_new_key_is_reported():
    now = {"ch/glue/a": "295.4", "ch/check/c1": "B = 8\n", "ch/glue/t": "'35.0 GB/s'", "ch/glue/new": "1"}
    result = compare(GOLDEN_TOY, now, {"volatile": {"ch/glue/t": "measured here"}})
    assert result["failed"] == ["ch/glue/a: '295.3' -> '295.4'", "ch/glue/b: vanished (was \"'2.54 ms'\")"]
    assert result["reported"] == ["ch/glue/t: volatile, \"'37.2 GB/s'\" -> \"'35.0 GB/s'\"", "ch/glue/new: new, '1'"]


def test_a_listed_change_passes_only_with_the_listed_new_value():
    changes = {"changes": {"ch/glue/a": {"old": "295.3", "new": "295.4", "why": "rounding fixed"}}}
    assert compare(GOLDEN_TOY, dict(GOLDEN_TOY, **{"ch/glue/a": "295.4"}), changes)["failed"] == []
    assert compare(GOLDEN_TOY, dict(GOLDEN_TOY, **{"ch/glue/a": "296"}), changes)["failed"] == [
        "ch/glue/a: '296', but the changes file accepts '295.4' (was '295.3')"]


def test_moves_removals_and_bad_entries_of_the_changes_file():
    now = dict(GOLDEN_TOY)
    now["ch/glue/b2"] = now.pop("ch/glue/b")
    del now["ch/check/c1"]
    changes = {"changes": {"ch/glue/b": {"old": "'2.54 ms'", "moved_to": "ch/glue/b2", "why": "renamed"},
                           "ch/check/c1": {"old": "B = 8\n", "new": None, "why": "cell merged"}}}
    result = compare(GOLDEN_TOY, now, changes)
    assert result["failed"] == [] and not any("new," in r for r in result["reported"])
    bad = {"changes": {"ch/glue/a": {"old": "1", "new": "2", "why": ""}, "ch/glue/zz": {"old": "1", "why": "x"}}}
    failed = compare(GOLDEN_TOY, GOLDEN_TOY, bad)["failed"]
    assert "ch/glue/a: listed in the changes file without a reason ('why')" in failed
    assert "ch/glue/a: the changes file's 'old' '1' is not the record's '295.3'" in failed
    assert "ch/glue/zz: listed in the changes file but not in the 3f3cb8a record" in failed


def test_one_check_number_changed_in_a_copy_of_a_chapter_is_reported():
    """A scratch copy of chapter 8 in memory, one check cell's output edited: exactly that key fails."""
    path = ROOT / "notebooks" / "08_fitting_52b.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    broken = copy.deepcopy(nb)
    cell = next(c for c in broken["cells"] if "nbval-check-output" in c.get("metadata", {}).get("tags", [])
                and any("16.00 GB" in "".join(o.get("data", {}).get("text/plain", "")) for o in c.get("outputs", [])))
    out = next(o for o in cell["outputs"] if "16.00 GB" in "".join(o.get("data", {}).get("text/plain", "")))
    out["data"]["text/plain"] = "".join(out["data"]["text/plain"]).replace("16.00 GB", "16.01 GB")
    golden = flatten({"08_fitting_52b": extract_notebook(nb)})
    result = compare(golden, flatten({"08_fitting_52b": extract_notebook(broken)}))
    assert len(result["failed"]) == 1 and result["failed"][0].startswith(f"08_fitting_52b/check/{cell['id']}: ")
    assert "16.01 GB" in result["failed"][0]


def test_check_cells_split_at_each_cli_command_and_glue_stays_apart():
    nb = {"cells": [
        {"cell_type": "code", "id": "k1", "metadata": {"tags": ["nbval-check-output"]}, "source": "run()", "outputs": [
            {"output_type": "stream", "name": "stdout", "text": "$ kvmath decode --batch 1\nstep 1.59 ms\n"},
            {"output_type": "stream", "name": "stdout", "text": "$ kvmath models\nllama\n"},
            {"output_type": "display_data", "metadata": {"scrapbook": {"name": "x"}},
             "data": {"application/papermill.record/text/plain": "3.5"}}]},
        {"cell_type": "code", "id": "k2", "metadata": {"tags": ["remove-cell"]}, "source": "", "outputs": [
            {"output_type": "stream", "name": "stdout", "text": "hidden\n"}]},
        {"cell_type": "code", "id": "k3", "metadata": {}, "source": "", "outputs": [
            {"output_type": "execute_result", "data": {"text/plain": "<Figure size 1400x720 with 1 Axes>"}},
            {"output_type": "stream", "name": "stdout", "text": "B = 4"}]}]}
    assert extract_notebook(nb) == {
        "glue": {"x": "3.5"}, "check": {}, "output": {"k3": "B = 4"},
        "cli": {"$ kvmath decode --batch 1": "step 1.59 ms\n", "$ kvmath models": "llama\n"}}


def test_a_glued_float_may_move_in_its_last_digits_only():
    golden = {"ch/glue/f": "0.012827439857349354", "ch/check/c": "0.0128\n"}
    ulps = compare(golden, {"ch/glue/f": "0.012827439857349576", "ch/check/c": "0.0128\n"})
    assert ulps["failed"] == [] and ulps["reported"][0].startswith("ch/glue/f: ")
    assert compare(golden, {"ch/glue/f": "0.01282744", "ch/check/c": "0.0128\n"})["failed"] == [
        "ch/glue/f: '0.012827439857349354' -> '0.01282744'"]
    assert compare(golden, {"ch/glue/f": "0.012827439857349354", "ch/check/c": "0.0128 \n"})["failed"] == [
        "ch/check/c: '0.0128\\n' -> '0.0128 \\n'"]
