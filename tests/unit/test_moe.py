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


# ---- crossings per weight group (kvmath.rates.group_critical_batches, group_weight_times) ----
# Rows of kvmath/data: H100 SXM 989.4e12 bf16 and 1978.9e12 fp8 FLOP/s, 3.35e12 B/s.
# Mixtral 8x7B: 32 layers, d = 4096, 32 heads, 8 KV heads, d_h = 128, 8 experts of d_ff 14336 (3 matrices), top 2,
# vocab 32000. DeepSeek-V3: 256 routed experts, top 8.
H100_BF16, H100_FP8, H100_W = 989.4e12, 1978.9e12, 3.35e12


def test_each_group_crosses_at_its_own_batch_by_hand():
    from kvmath import Chip, Model
    from kvmath.rates import group_critical_batches, model_critical_batch

    dense = H100_BF16 * 2 / (2 * H100_W)  # C b_w / (2 W) = 295.34
    mixtral = group_critical_batches(Model.preset("mixtral-8x7b"), Chip.preset("h100-sxm"))
    assert set(mixtral) == {"attention", "experts", "router", "lm_head"}  # no dense MLP, no shared expert
    for g in ("attention", "router", "lm_head"):
        assert mixtral[g] == pytest.approx(dense, rel=1e-9)
    # experts: 2 k B / C = touched(B) b / W, touched = E (1 - (1 - k/E)^B) = 8 to 1e-140 at B ~ 1181:
    # B = 8 * C * 2 / (2 * 2 * W) = 4 * 295.34 = 1181.37
    assert mixtral["experts"] == pytest.approx(8 * dense / 2, rel=1e-9)
    # DeepSeek-V3 in fp8 with fp8 math: every dense group at 1978.9e12 / (2 * 3.35e12) = 295.36; the experts at 256/8 times it
    ds = group_critical_batches(Model.preset("deepseek-v3"), Chip.preset("h100-sxm"), "fp8")
    assert ds["experts"] == pytest.approx(256 / 8 * H100_FP8 / (2 * H100_W), rel=1e-9)  # 9,451.5
    assert ds["mlp"] == ds["attention"] == pytest.approx(H100_FP8 / (2 * H100_W), rel=1e-9)
    # the aggregate crossing lies strictly between the groups' (5,404 for DeepSeek-V3, 1,079 for Mixtral)
    for model, w, groups in (("deepseek-v3", "fp8", ds), ("mixtral-8x7b", "bf16", mixtral)):
        agg = model_critical_batch(Model.preset(model), Chip.preset("h100-sxm"), w)
        assert min(groups.values()) < agg < max(groups.values())
    # floor routing: every token picks the same two experts, which then read a fixed k/E share and cross as dense
    floor = group_critical_batches(Model.preset("mixtral-8x7b"), Chip.preset("h100-sxm"), routing="floor")
    assert floor["experts"] == pytest.approx(dense, rel=1e-9)


def test_the_grouped_step_is_longer_than_the_aggregate_between_the_crossings_by_hand():
    from kvmath import Chip, Model
    from kvmath.rates import group_weight_times

    # Mixtral at B = 1000, bf16, by hand: attention 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024) = 1,342,177,280 params;
    # experts 32 * 8 * 3 * 4096 * 14336 = 45,097,156,608 stored, a quarter multiplied by each token;
    # router 32 * 4096 * 8 = 1,048,576; LM head 32000 * 4096 = 131,072,000.
    b = 1000
    attn, experts, router, head = 1_342_177_280, 45_097_156_608, 1_048_576, 131_072_000
    touched = 8 * (1 - 0.75 ** b)
    read = {"attention": attn * 2, "experts": touched / 8 * experts * 2, "router": router * 2, "lm_head": head * 2}
    math_ = {"attention": attn, "experts": experts / 4, "router": router, "lm_head": head}
    read_s = {g: v / H100_W for g, v in read.items()}
    math_s = {g: 2 * v * b / H100_BF16 for g, v in math_.items()}
    grouped = sum(max(read_s[g], math_s[g]) for g in read)
    aggregate = max(sum(read_s.values()), sum(math_s.values()))
    t = group_weight_times(Model.preset("mixtral-8x7b"), Chip.preset("h100-sxm"), b)
    assert t.grouped_s == pytest.approx(grouped, rel=1e-12) and t.aggregate_s == pytest.approx(aggregate, rel=1e-12)
    assert t.grouped_s > t.aggregate_s  # dense groups math-bound, experts read-bound: the max of sums hides both
    # far below every crossing the two agree (all read-bound), far above too (all math-bound)
    for far in (1, 1e6):
        t = group_weight_times(Model.preset("mixtral-8x7b"), Chip.preset("h100-sxm"), far)
        assert t.grouped_s == pytest.approx(t.aggregate_s, rel=1e-12)
    assert set(t.to_dict()) == {"read_s", "math_s", "grouped_s", "aggregate_s"}
    with pytest.raises(ValueError, match="batch"):
        group_weight_times(Model.preset("mixtral-8x7b"), Chip.preset("h100-sxm"), -1)


def test_the_saturated_limit_counts_matrices_only_and_is_what_the_solved_crossing_reaches():
    # Mixtral 8x7B (32 layers, d 4096, 32 query / 8 KV heads of 128, 8 experts of 3 x 4096 x 14336, top-2,
    # vocab 32000, untied): the matrices a saturated step reads, and those one token multiplies by
    from kvmath import Chip, Deployment, Model, formulas

    attention = 32 * (2 * 4096 * 4096 + 2 * 4096 * 8 * 128)
    expert = 3 * 4096 * 14336
    router, head = 32 * 4096 * 8, 32000 * 4096
    resident, per_token = attention + 32 * 8 * expert + router + head, attention + 32 * 2 * expert + router + head
    m = Model.preset("mixtral-8x7b")
    assert m.matmul_params_resident() == resident and m.matmul_params_per_token() == per_token
    h100 = Chip.preset("h100-sxm")
    limit = formulas.saturated_critical_batch(resident, per_token, h100.flops("bf16"), h100.bandwidth, 2)
    assert limit == pytest.approx(resident / per_token * 989.4e12 * 2 / (2 * 3.35e12), rel=1e-12)
    # the solved crossing sits on that limit (all 8 experts touched long before), within 0.05%
    assert Deployment(m, h100).critical_batch() == pytest.approx(limit, rel=5e-4)
