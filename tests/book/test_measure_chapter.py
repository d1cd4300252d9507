"""Chapter 14 says what its measurements show and which run they come from.

The stream check (review R21c-4): the chapter's cell ``mm-03`` is run here as it stands, with the
bandwidth measurement replaced by rates given by hand (the learner kit's 10.6 and 15.4 GB/s among them),
so its sentence is the one the book prints for them: "the same within 20%" only where each rate is within
20% of the other. The run (review R21c-6): the book, the room's copies and `make lab`'s each show the
numbers of a different run, so the page names its run (machine and day) from the run itself, and so do
the answer key's chapter-14 answers.
"""

from __future__ import annotations

import json
import re
import types
from pathlib import Path

import numpy as np
import pytest

import kvmath.measure as measure

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = json.loads((ROOT / "notebooks" / "14_measure_your_machine.ipynb").read_text())
CELL = next("".join(c["source"]) for c in CHAPTER["cells"] if c.get("id") == "mm-03")


def stream_sentence(w_array: float, w_twice: float) -> str:
    """The cell's ``stream_check`` where reading N_BYTES gives ``w_array`` and twice as many ``w_twice`` (bytes/s)."""
    fake = types.SimpleNamespace(**{name: getattr(measure, name) for name in measure.__all__})
    fake.memory_bandwidth = lambda n, repeats=3, method="read", threads=1: w_twice if n > 128e6 else w_array
    scope = {"measure": fake, "np": np, "LLC": None, "MiB": 2**20, "THREADS": 1}
    exec(CELL, scope)
    return scope["stream_check"]


OPENINGS = {"same": "the same within 20%, so the passes stream from memory",
            "slower": "slower, so part of each pass may have come from cache",
            "faster": "faster, which no cache explains"}


@pytest.mark.parametrize("w_array, w_twice, verdict", [
    (15.8e9, 16.0e9, "same"),
    (16.0e9, 12.2e9, "slower"),
    (10.6e9, 15.4e9, "faster"),   # 15.4 / 10.6 = 1.45: the chapter said "the same within 20%"
])
def test_the_chapters_stream_sentence_follows_both_rates(w_array, w_twice, verdict):
    sentence = stream_sentence(w_array, w_twice)
    assert f"it ran at {w_array / 1e9:.1f} GB/s and the larger one at {w_twice / 1e9:.1f} GB/s" in sentence
    assert [k for k, opening in OPENINGS.items() if opening in sentence] == [verdict], sentence


def test_the_page_names_the_run_its_numbers_come_from():
    from kvbook.inline import expressions

    markdown = ["".join(c["source"]) for c in CHAPTER["cells"] if c["cell_type"] == "markdown"]
    said = [text for text in markdown if "Every measured number on this page" in text]
    assert len(said) == 1 and 'f"{RUN_ON}"' in expressions(said[0]), said
    assert not any("when the book was built" in text for text in markdown)
    stored = next(e["result"]["data"]["text/plain"] for c in CHAPTER["cells"]
                  for e in c.get("metadata", {}).get("user_expressions", []) if e["expression"] == 'f"{RUN_ON}"')
    assert re.fullmatch(r"'\S+ with \d+ CPU cores, \d{4}-\d{2}-\d{2}'", stored), stored


def test_the_answer_keys_measured_answers_name_their_run(built_book):
    from kvbook.workshop import answer_key, book_links

    book = book_links.BuiltBook.from_build(built_book.parent)
    measured = [e for e in answer_key.collect(ROOT / "notebooks", book) if e["chapter"] == "14_measure_your_machine"]
    answers = {e["label"]: dict(e["answers"]) for e in measured}
    assert re.fullmatch(r"\S+ with \d+ CPU cores, \d{4}-\d{2}-\d{2}, the run make refresh stored "
                        r"\(the instructor book's page shows its own run\)", answers["ex-measure-1"]["measured_on"])
    assert not [v for a in answers.values() for v in a.values() if "build machine" in v]
