"""Chapter 14's stream check says what its two measured rates show (review R21c-4).

The chapter's cell ``mm-03`` is run here as it stands, with the bandwidth measurement replaced by rates
given by hand (the learner kit's 10.6 and 15.4 GB/s among them), so its sentence is the one the book
prints for them: "the same within 20%" only where each rate is within 20% of the other.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import numpy as np
import pytest

import kvmath.measure as measure

ROOT = Path(__file__).resolve().parents[2]
CELL = next("".join(c["source"]) for c in json.loads((ROOT / "notebooks" / "14_measure_your_machine.ipynb")
                                                     .read_text())["cells"] if c.get("id") == "mm-03")


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
