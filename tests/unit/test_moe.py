"""Mixture of experts in kvmath.moe: the tokens that touch a given share of the experts.

Expected values are hand computations written out in each test, with the tolerance stated.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvmath import formulas as F
from kvmath.moe import experts_touched, tokens_for_share


def test_tokens_for_share_solves_the_uniform_estimate():
    # Mixtral, k/E = 2/8: 1 - 0.75**T = 0.9 at T = ln 0.1 / ln 0.75 = 2.302585 / 0.287682 = 8.0039
    assert tokens_for_share(8, 2, 0.9) == pytest.approx(math.log(0.1) / math.log(0.75), rel=1e-15)
    assert tokens_for_share(8, 2, 0.9) == pytest.approx(8.0039, abs=1e-4)
    # DeepSeek-V3, 8 of 256: 0.99 at ln 0.01 / ln(248/256) = 4.605170 / 0.031749 = 145.05
    assert tokens_for_share(256, 8, 0.99) == pytest.approx(145.05, abs=0.01)
    # one token touches exactly k of E
    assert tokens_for_share(8, 2, 0.25) == pytest.approx(1.0, rel=1e-15)
    # F re-exports it beside experts_touched
    assert F.tokens_for_share is tokens_for_share


def test_tokens_for_share_inverts_experts_touched_and_broadcasts():
    shares = np.array([0.25, 0.5, 0.9, 0.999])
    t = tokens_for_share(8, 2, shares)
    assert np.allclose(experts_touched(8, 2, t) / 8, shares, rtol=1e-12)
    # more experts each token, fewer tokens for the same share (Qwen3-235B 8/128 against DeepSeek 8/256)
    both = tokens_for_share(np.array([128, 256]), 8, 0.9)
    assert both[0] < both[1] and both == pytest.approx([35.68, 72.53], abs=0.01)


@pytest.mark.parametrize("args, words", [
    ((8, 2, 1.0), "share must be below 1"), ((8, 2, 0.1), r"share .* at least top_k / n_experts"),
    ((8, 2, 0.0), "share"), ((8, 8, 0.9), "top_k"), ((8, 2.5, 0.9), "top_k"), ((0, 2, 0.9), "n_experts"),
])
def test_tokens_for_share_names_the_bad_argument(args, words):
    with pytest.raises(ValueError, match=words):
        tokens_for_share(*args)
