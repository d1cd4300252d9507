"""The notes' closed forms in kvmath.formulas: the paged-cache admission count.

Expected values are hand computations written out in each test (exact: whole counts).
"""

from __future__ import annotations

import numpy as np
import pytest

from kvmath import formulas as F


def test_paged_admission_counts_whole_pages_in_order():
    # pages of 4 tokens: 3 -> 4, 4 -> 4, 5 -> 8, 1 -> 4 tokens held; running totals 4, 8, 16, 20
    lengths = [3, 4, 5, 1]
    assert [F.max_batch_paged(lengths, 4, budget, 1.0) for budget in (3, 4, 15, 16, 19, 20, 1e9)] == [0, 1, 2, 3, 3, 4, 4]
    # 100 bytes a token: the same running totals times 100
    assert F.max_batch_paged(lengths, 4, 1600, 100) == 3 and F.max_batch_paged(lengths, 4, 1599, 100) == 2
    # admission stops at the first sequence that does not fit, even if a later, shorter one would
    assert F.max_batch_paged([4, 100, 1], 4, 10, 1.0) == 1


def test_one_token_pages_hold_exactly_the_tokens_and_long_pages_reserve():
    lengths = np.array([7, 1, 30, 12])
    # page 1: no slack, 7 + 1 + 30 + 12 = 50 tokens for all four
    assert F.max_batch_paged(lengths, 1, 50, 1.0) == 4 and F.max_batch_paged(lengths, 1, 49, 1.0) == 3
    # a page of 32 >= every length: each holds 32 tokens, as reserving S_max = 32 does (max_batch)
    for budget in (31, 32, 95, 96, 128):
        assert F.max_batch_paged(lengths, 32, budget, 1.0) == min(F.max_batch(budget, 32), 4)


@pytest.mark.parametrize("args, words", [
    (([[3, 4]], 4, 10, 1), "lengths"), (([3, 0], 4, 10, 1), "lengths"), (([3, 2.5], 4, 10, 1), "lengths"),
    (([3], 0, 10, 1), "page"), (([3], 4.5, 10, 1), "page"), (([3], 4, -1, 1), "kv_budget_bytes"),
    (([3], 4, [10, 20], 1), "kv_budget_bytes"), (([3], 4, 10, 0), "kv_bytes_per_token"),
])
def test_paged_admission_names_the_bad_argument(args, words):
    with pytest.raises(ValueError, match=words):
        F.max_batch_paged(*args)
