"""Hand computations of chip_step's communication and FLOP terms that the rest of the suite leaves
unpinned (the mutation check's survivors in kvmath/parallel.py): expert-parallel all-to-all, the
context-parallel log-sum-exp combine, the logits skipped by a prefill, and routed work under ep.

A made-up link (W = 100 GB/s, alpha = 1 us, no in-switch reduction) keeps the arithmetic short:
the best all-reduce of S bytes over n chips is 2 (n - 1) / n * S / W + alpha, an all-to-all of S
bytes per chip is (n - 1) / n * S / W + alpha (kvmath/links.py). Tolerance: 1e-12 relative.
"""

from __future__ import annotations

import pytest

from kvmath import get_model
from kvmath.links import Link
from kvmath.parallel import ParallelLayout, chip_step

LINK = Link(name="test-link", bandwidth=100e9, latency_s=1e-6)
W, ALPHA = 100e9, 1e-6
REL = 1e-12


def _step(model, batch, layout, **kw):
    kw.setdefault("kv_bytes_per_seq", 1e6)
    kw.setdefault("attention_flops_per_seq", 1e9)
    return chip_step(model, batch, 4096, layout, 3.35e12, 989e12, link=LINK, **kw)


def test_expert_parallel_all_to_all_replaces_the_moe_layers_second_all_reduce():
    # Mixtral 8x7B, 8 chips of data-parallel attention, experts split 8 ways (g = tp * cp = 1), batch 64:
    # 8 sequences per chip, 8 tokens; activations 8 * 4,096 * 2 B = 65,536 B. 32 MoE layers: their one
    # all-reduce over g = 1 chip costs nothing; dispatch + combine move top_k = 2 copies each.
    s = _step(get_model("mixtral-8x7b"), 64, ParallelLayout(dp=8, ep=8))
    all_to_all = 7 / 8 * (65_536 * 2) / W + ALPHA
    assert s.comm_s == pytest.approx(2 * 32 * all_to_all, rel=REL)          # 1.3740032e-4 s
    assert s.comm_s == pytest.approx(1.3740032e-4, rel=REL)


def test_expert_parallel_tokens_and_flops_of_the_routed_experts():
    m = get_model("mixtral-8x7b")
    s = _step(m, 64, ParallelLayout(dp=8, ep=8))
    # every chip's experts serve the tokens of all 8 groups: 64 tokens' experts, split 8 ways
    own = m.weight_bytes_read_by_group(8, "bf16", "floor", 1)
    expected_read = (sum(v for k, v in own.items() if k != "experts")
                     + m.weight_bytes_read_by_group(64, "bf16", "floor", 1)["experts"] / 8)
    assert s.weight_bytes_read == pytest.approx(expected_read, rel=REL)
    # routed FLOPs: 2 * (64 tokens) * (active routed params) / 8 chips; active routed params by hand:
    # 32 layers * 2 of 8 experts * 3 matrices * 4,096 * 14,336 = 11,274,289,152
    routed_active = 32 * 2 * 3 * 4096 * 14336
    dense_active = m.matmul_params_per_token() - routed_active
    assert s.weight_flops == pytest.approx(2 * 8 * dense_active + 2 * 64 * routed_active / 8, rel=REL)


def test_expert_parallel_all_to_all_moves_each_weight_shards_share():
    # tp = 2 inside each of 4 data-parallel groups, experts over all 8 chips, batch 64: 16 tokens per
    # group, 16 * 4,096 * 2 B = 131,072 B of activations; the 32 attention all-reduces run over the 2
    # weight shards (2 (n - 1) / n = 1) and each MoE layer's dispatch and combine carry top_k / tp of them.
    s = _step(get_model("mixtral-8x7b"), 64, ParallelLayout(tp=2, dp=4, ep=8))
    act = 16 * 4096 * 2
    expected = 32 * (act / W + ALPHA) + 64 * (7 / 8 * act * 2 / 2 / W + ALPHA)
    assert expected == pytest.approx(2.1134336e-4, rel=1e-9)
    assert s.comm_s == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("batch", [8, 16])
def test_expert_parallel_routed_read_counts_every_groups_tokens(batch):
    # batch 8 over dp = 8: one token per chip, but the chip's experts serve all 8 tokens. Routed
    # uniformly, 8 tokens touch 8 (1 - (1 - 2/8)^8) of the 8 experts of a layer, one token only 2:
    # the chip reads its eighth of those.
    m = get_model("mixtral-8x7b")
    s = _step(m, batch, ParallelLayout(dp=8, ep=8), routing="uniform")
    experts = m.weight_bytes_resident_by_group("bf16")["experts"]
    own = m.weight_bytes_read_by_group(batch // 8, "bf16", "uniform", 1)
    touched = 1 - 0.75 ** batch
    assert s.weight_bytes_read == pytest.approx(
        sum(v for k, v in own.items() if k != "experts") + experts * touched / 8, rel=1e-9)


def test_without_expert_parallelism_routed_flops_split_like_the_rest():
    m = get_model("mixtral-8x7b")
    s = _step(m, 4, ParallelLayout(tp=2))
    assert s.weight_flops == pytest.approx(2 * 4 * m.matmul_params_per_token() / 2, rel=REL)


def test_context_parallel_combine_flops_and_its_all_reduce():
    # Llama 2 70B, tp = 2 and cp = 2, batch 2: the combine costs cp (2 d_v + 4) FLOPs per head on the
    # chip, layer and token: 2 * 260 * 32 * 80 * 2 = 2,662,400; the chip does 2 * 1e9 / 4 attention FLOPs.
    s = _step(get_model("llama-2-70b"), 2, ParallelLayout(tp=2, cp=2))
    assert s.attention_flops == pytest.approx(2 * 1e9 / 4 + 2 * (2 * 128 + 4) * 32 * 80 * 2, rel=REL)
    # links: 160 all-reduces of 2 * 8,192 * 2 B over the 4 weight shards, and 80 of the partial outputs
    # (2 tokens * 32 heads * (128 + 1) values * 2 B = 16,512 B) over the 2 context shards
    def best(size, n):
        return 2 * (n - 1) / n * size / W + ALPHA
    assert s.comm_s == pytest.approx(160 * best(32_768, 4) + 80 * best(16_512, 2), rel=REL)
    assert s.comm_s == pytest.approx(3.318528e-4, rel=1e-6)


def test_without_context_parallelism_there_is_no_combine():
    s = _step(get_model("llama-2-70b"), 2, ParallelLayout(tp=2))
    assert s.attention_flops == pytest.approx(2 * 1e9 / 2, rel=REL)


def test_a_prefill_skips_the_logits_of_all_but_its_last_token():
    m = get_model("llama-2-70b")
    full = _step(m, 2, ParallelLayout(tp=2), tokens_per_seq=512)
    last = _step(m, 2, ParallelLayout(tp=2), tokens_per_seq=512, lm_head_tokens_per_seq=1)
    # 2 sequences * 511 tokens * 2 * vocab 32,000 * d 8,192 FLOPs, split over tp = 2
    assert full.weight_flops - last.weight_flops == pytest.approx(2 * 511 * 2 * 32_000 * 8_192 / 2, rel=REL)


@pytest.mark.parametrize("layout, message", [
    (ParallelLayout(tp=2, ep=8), r"ep \(8\) must equal tp \* cp \* dp \(2\)"),
    (ParallelLayout(tp=2, cp=2, dp=2, ep=4), r"ep \(4\) must equal tp \* cp \* dp \(8\)"),
    (ParallelLayout(tp=4, dp=4, ep=16), r"ep \(16\) must divide the 8 experts"),
])
def test_expert_parallelism_must_span_a_stage_and_divide_the_experts(layout, message):
    with pytest.raises(ValueError, match=message):
        layout.check(get_model("mixtral-8x7b"))
    assert ParallelLayout(tp=2, cp=2, dp=2, ep=8).check(get_model("mixtral-8x7b")).n_chips == 8
