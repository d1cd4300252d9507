"""The cheat sheet's command-line examples print what the page says they print (issue 26, U2).

Each "`kvmath capacity ...` prints N tokens" on book/cheatsheet.md is run, and N is also computed by hand from
the notes' figures or from the preset's row of kvmath/data/models.csv, so that a change of the CLI, of the
preset or of the page fails here.
"""

import json
import re
from pathlib import Path

import pytest

from kvmath.cli import main

PAGE = Path(__file__).resolve().parents[2] / "book" / "cheatsheet.md"
CLAIM = re.compile(r"`kvmath (capacity [^`]+)`,?\s+prints\s+([\d,]+)\s+tokens")
MiB = 2**20


def claims() -> list[tuple[str, int]]:
    text = " ".join(PAGE.read_text(encoding="utf-8").split())  # the page wraps its lines anywhere
    return [(command, int(tokens.replace(",", ""))) for command, tokens in CLAIM.findall(text)]


def test_the_page_states_both_capacity_examples():
    commands = [c for c, _ in claims()]
    assert len(commands) == 2 and "--params 52e9" in commands[0] and "--model kipply-52b" in commands[1]


@pytest.mark.parametrize("command, tokens", claims())
def test_each_capacity_example_prints_the_tokens_the_page_says(capsys, command, tokens):
    assert main([*command.split(), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_tokens"] == tokens


def test_the_two_figures_by_hand():
    # chapter 8's question: 3 x 40e9 B less 52e9 fp16 weights, 2 MiB a token (2 x 64 layers x 8192 x 2 B)
    assert (3 * 40e9 - 52e9 * 2) // (2 * 64 * 8192 * 2) == 7629 == claims()[0][1]
    # the preset (models.csv, kipply-52b: 64 layers, d 8192, 64 heads of 128, MLP 32768 with 2 matrices, vocab
    # 65,536, tied): 64 heads do not split 3 ways, so 3 stages by layers, the busiest holding 22 of 64 layers'
    # weights (4 d^2 + 2 d d_ff and two norms of d a layer; the final norm counted with the layers) and the table
    layers = 64 * (4 * 8192**2 + 2 * 8192 * 32768 + 2 * 8192) + 8192
    stage = layers * 2 * 22 / 64 + 65536 * 8192 * 2
    assert stage == 36_507_948_544                                # the page's 36.51 GB
    left = 40e9 - stage                                           # 3.49 GB on each chip
    per_token = 2 * 22 * 64 * 128 * 2                             # the stage's 22 layers of every token's cache
    assert per_token == 22 / 64 * 2 * MiB
    assert left // per_token == 4844 == claims()[1][1]
