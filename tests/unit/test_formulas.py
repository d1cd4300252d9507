"""The notes' closed forms in kvmath.formulas: the paged-cache admission count, the roofline verdict's
ends, and the step bound's compute side and tokens per sequence.

Expected values are hand computations written out in each test (exact: whole counts, and inputs chosen
so each float product is exact).
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


def test_the_roofline_verdict_includes_both_ends_in_near_the_ridge():
    # ridge 200 FLOP/byte, margin 0.25: near the ridge from 200 * 0.75 = 150 to 200 * 1.25 = 250, both included
    assert [F.roofline_regime(i, 200.0) for i in (149.0, 150.0, 200.0, 250.0, 251.0)] == [
        "memory", "near the ridge", "near the ridge", "near the ridge", "compute"]
    # a margin of 1 would make the memory side empty (ridge * 0 = 0): refused, as any margin >= 1
    with pytest.raises(ValueError, match="margin"):
        F.roofline_regime(10.0, 200.0, margin=1.0)


def test_a_compute_bound_strict_step_is_the_flops_over_the_rate():
    # B = 4 sequences, no cache, 1e9 parameters of 1 byte, W = C = 1e12, 5e8 attention FLOPs a sequence:
    # memory 1e9 / 1e12 = 1 ms; compute 4 * (5e8 + 2 * 1e9) / 1e12 = 4 * 2.5e9 / 1e12 = 10 ms, which binds
    assert F.strict_step(4, 0, 1e9, 1e9, 1e12, 1e12, attention_flops_per_seq=5e8) == pytest.approx(10e-3, rel=1e-12)


def test_tokens_per_sequence_multiply_the_weight_matmuls():
    # 4 tokens a sequence (a verify step), B = 2, 1e9 parameters, C = 1e12: 2 * 1e9 * 2 * 4 / 1e12 = 16 ms
    t = F.step_breakdown(2, 0, 1e9, 1e9, 1e12, 1e12, tokens_per_seq=4)
    assert t.weight_compute_s == pytest.approx(16e-3, rel=1e-12)


def test_a_tie_with_communication_goes_to_the_chip_resource():
    # the order of the verdict is memory, compute, communication: a tie goes to the earlier one
    assert F.binds(1e-3, 0.0, 1e-3) == "memory"
    assert F.binds(0.0, 1e-3, 1e-3) == "compute"
    assert F.binds(1e-3, 1e-3, 1e-3) == "memory"
