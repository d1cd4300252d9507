"""Parallel layouts (kvmath.layout) in a deployment's step: communication and FLOP terms by hand (the
expert-parallel all-to-all, the context-parallel log-sum-exp combine, the logits skipped by a prefill,
routed work under ep), and expert parallelism (redundant experts, the all-to-alls of a step).

A made-up link (W = 100 GB/s, alpha = 1 us, no in-switch reduction) keeps the arithmetic short:
the best all-reduce of S bytes over n chips is 2 (n - 1) / n * S / W + alpha, an all-to-all of S
bytes per chip is (n - 1) / n * S / W + alpha (kvmath/links.py). Tolerance: 1e-12 relative.
"""

from __future__ import annotations

import pytest

import numpy as np

import kvmath as km
from kvmath import Formats, Link, ParallelLayout

get_model = km.Model.preset

LINK = Link(name="test-link", bandwidth=100e9, latency_s=1e-6)
W, ALPHA = 100e9, 1e-6
REL = 1e-12


def _step(model, batch, layout, **kw):
    """One decode step at 4,096 tokens on H100s (3.35 TB/s, 989.4 TFLOP/s) joined by LINK."""
    return km.Deployment(model, "h100-sxm", layout, link=LINK).step(batch, 4096, **kw)


#: Llama 2 70B's attention FLOPs of one token over 4,096 cached tokens, all layers: 4 L h d_h S
ATTENTION_70B = 4 * 80 * 64 * 128 * 4096


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


@pytest.mark.parametrize("batch", [1, 5])
def test_expert_parallel_counts_only_the_tokens_the_batch_holds(batch):
    # batch 1 (or 5) over dp = 8: the fullest group holds one sequence, but the experts serve only the batch's
    # tokens, not one token per group (8): routed FLOPs 2 * B * routed_active / 8, and a batch-B read of experts.
    m = get_model("mixtral-8x7b")
    s = _step(m, batch, ParallelLayout(dp=8, ep=8), routing="uniform")
    routed_active = 32 * 2 * 3 * 4096 * 14336
    dense_active = m.matmul_params_per_token() - routed_active
    assert s.weight_flops == pytest.approx(2 * 1 * dense_active + 2 * batch * routed_active / 8, rel=REL)
    own = m.weight_bytes_read_by_group(1, "bf16", "uniform", 1)
    experts = m.weight_bytes_resident_by_group("bf16")["experts"]
    assert s.weight_bytes_read == pytest.approx(
        sum(v for k, v in own.items() if k != "experts") + experts * (1 - 0.75 ** batch) / 8, rel=1e-9)


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
    # chip, layer and token: 2 * 260 * 32 * 80 * 2 = 2,662,400; the chip does a quarter of 2 sequences' attention.
    s = _step(get_model("llama-2-70b"), 2, ParallelLayout(tp=2, cp=2))
    assert s.attention_flops == pytest.approx(2 * ATTENTION_70B / 4 + 2 * (2 * 128 + 4) * 32 * 80 * 2, rel=REL)
    # links: 160 all-reduces of 2 * 8,192 * 2 B over the 4 weight shards, and 80 of the partial outputs
    # (2 tokens * 32 heads * (128 + 1) values * 2 B = 16,512 B) over the 2 context shards
    def best(size, n):
        return 2 * (n - 1) / n * size / W + ALPHA
    assert s.comm_s == pytest.approx(160 * best(32_768, 4) + 80 * best(16_512, 2), rel=REL)
    assert s.comm_s == pytest.approx(3.318528e-4, rel=1e-6)


def test_without_context_parallelism_there_is_no_combine():
    s = _step(get_model("llama-2-70b"), 2, ParallelLayout(tp=2))
    assert s.attention_flops == pytest.approx(2 * ATTENTION_70B / 2, rel=REL)


def test_a_prefill_skips_the_logits_of_all_but_its_last_token():
    dep = km.Deployment("llama-2-70b", "h100-sxm", ParallelLayout(tp=2), link=LINK)
    full = dep.step(2, 512, tokens_per_seq=512)  # a verify step: logits for every token
    last = dep.prefill(2, 512)                   # a prefill pass: logits for the last token only
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


# ----- expert parallelism: redundant experts in a layout, the all-to-alls of a step ---------------
# Values are hand computations written out here (exact up to float rounding,
# ``rel=1e-12``) or figures from DeepSeek's published deployment and the
# DeepEP README.

DS = km.Model.preset("deepseek-v3")
IB = km.Link.preset("ib-ndr400")
NVL = km.Link.preset("nvlink4-h800")


def expert_parallel_comm_s(tokens, ep, port, *, dispatch_bytes=2, combine_bytes=2, chips_per_node=None, in_node=None,
                           model=DS):
    """The all-to-alls of one DeepSeek-V3 decode step, dp = ep, ``tokens`` per chip: the step's comm_s.

    ``port`` is each chip's link between nodes, ``in_node`` the link inside a node (default: the port for
    every peer), as the old ``expert_parallel_comm_s(model, tokens, ep, link, node_link=...)`` took them.
    """
    layout = ParallelLayout(dp=ep, ep=ep, redundant_experts=32 if ep == 144 else 0)
    formats = Formats(activations={2: "bf16", 1: "fp8"}[combine_bytes], dispatch={2: "bf16", 1: "fp8"}[dispatch_bytes])
    dep = km.Deployment(model, "h800", layout, link=port if in_node is None else in_node, node_link=port,
                        chips_per_node=chips_per_node, formats=formats)
    return dep.step(np.multiply(tokens, ep), 4096).comm_s


def test_link_presets_for_the_h800_deployment():
    # DeepEP README: a CX7 400 Gb/s NIC per H800, ~50 GB/s; nccl#1374: H800 NVLink 200 GB/s one way
    assert IB.bandwidth == 400e9 / 8 and IB.stated_as == "per direction"
    assert NVL.bandwidth == 200e9 and NVL.bandwidth < km.Link.preset("nvlink4").bandwidth


def test_all_to_all_by_hand_two_levels():
    # 88 tokens x top-8 x 7168: 5,046,272 B in fp8; 136 of 144 chips are on other nodes, 7 on this one
    # (the same-node share may also take the port: all 143 peers' copies over both paths, 250 GB/s)
    s = 88 * 8 * 7168
    dispatch = max(136 / 144 * s / 50e9 + 0.5e-6, 143 / 144 * s / 250e9 + 0.5e-6)
    combine = max(136 / 144 * 2 * s / 50e9 + 0.5e-6, 143 / 144 * 2 * s / 250e9 + 0.5e-6)
    t = expert_parallel_comm_s(88, 144, IB, dispatch_bytes=1, combine_bytes=2, chips_per_node=8, in_node=NVL)
    assert t == pytest.approx(58 * (dispatch + combine), rel=1e-12)  # 61 layers, 3 dense
    assert t == pytest.approx(16.64e-3, abs=0.005e-3)


def test_all_to_all_one_level_is_the_links_all_to_all():
    one = expert_parallel_comm_s(128, 128, IB, dispatch_bytes=1, combine_bytes=2)
    by_hand = 58 * (km.formulas.all_to_all_time(128 * 8 * 7168, 128, IB) + km.formulas.all_to_all_time(128 * 8 * 7168 * 2, 128, IB))
    assert one == pytest.approx(by_hand, rel=1e-12)
    # one node: every peer is near, and its copies may take NVLink or the port (200 + 50 GB/s);
    # one chip: nothing moves
    inside = expert_parallel_comm_s(8, 8, IB, chips_per_node=8, in_node=NVL)
    assert inside == pytest.approx(2 * 58 * (7 / 8 * 8 * 8 * 7168 * 2 / 250e9 + 0.5e-6), rel=1e-12)
    assert expert_parallel_comm_s(8, 1, IB) == 0
    # a group smaller than a node is all near; without node_link, near traffic uses link
    assert expert_parallel_comm_s(8, 8, IB, chips_per_node=16, in_node=NVL) == inside
    assert expert_parallel_comm_s(8, 16, IB, chips_per_node=8) == pytest.approx(
        expert_parallel_comm_s(8, 16, IB), rel=1e-12)


def test_all_to_all_is_monotone_in_tokens_and_broadcasts():
    t = expert_parallel_comm_s([1, 10, 100], 144, IB, chips_per_node=8, in_node=NVL)
    assert t[0] < t[1] < t[2]


def test_all_to_all_refuses_bad_input():
    with pytest.raises(ValueError, match="dense"):
        expert_parallel_comm_s(8, 8, IB, model=km.Model.preset("llama-2-70b"))
    with pytest.raises(ValueError, match="chips_per_node"):
        expert_parallel_comm_s(8, 8, IB, chips_per_node=0)
    with pytest.raises(ValueError, match="batch"):  # the tokens are the step's batch
        expert_parallel_comm_s(0, 8, IB)


def test_redundant_experts_in_a_layout():
    # DeepSeek's decode unit: EP144 over 256 + 32 redundant experts, 2 per GPU
    layout = km.ParallelLayout(dp=144, ep=144, redundant_experts=32).check(DS)
    with pytest.raises(ValueError, match="must divide the 256 experts"):
        km.ParallelLayout(dp=144, ep=144).check(DS)
    with pytest.raises(ValueError, match="256 \\+ 31 redundant"):
        km.ParallelLayout(dp=144, ep=144, redundant_experts=31).check(DS)
    with pytest.raises(ValueError, match="ep > 1"):
        km.ParallelLayout(redundant_experts=4)
    with pytest.raises(ValueError, match="redundant_experts"):
        km.ParallelLayout(dp=8, ep=8, redundant_experts=-1)
    assert repr(layout) == "ParallelLayout(tp=1, cp=1, dp=144, pp=1, ep=144, redundant_experts=32)"
    assert repr(km.ParallelLayout(tp=8)) == "ParallelLayout(tp=8, cp=1, dp=1, pp=1, ep=1)"
    step = km.Deployment(DS, "h100-sxm", layout, link=None, weights="fp8", kv="fp8").step(144 * 88, 4989)
    # each chip holds 2 routed experts of 3 x 7168 x 2048 fp8 weights in each of 58 layers
    routed_resident = 2 * 3 * 7168 * 2048 * 58
    others = DS.weight_bytes_resident("fp8") - DS.param_groups()["experts"]
    assert step.weight_bytes_resident == pytest.approx(others + routed_resident, rel=1e-12)
    # reads: the non-routed weights whole (dp; embedding rows of the chip's 88 tokens), and the
    # floor's 8 experts per layer, which every chip's tokens pick, split 144 ways
    read = DS.weight_bytes_read_by_group(88, "fp8")
    assert step.weight_bytes_read == pytest.approx(sum(read.values()) - read["experts"]
                                                   + 8 * 3 * 7168 * 2048 * 58 / 144, rel=1e-12)
    assert step.kv_bytes_read == pytest.approx(88 * 4989 * 61 * 576, rel=1e-12)


def test_two_level_bound_is_below_each_path_alone():
    # the two-path bound never exceeds the port alone carrying every copy (all_to_all_time on the port),
    # nor NVLink carrying the same-node share while the port carries the rest (the one-path split)
    for ep in (2, 8, 16, 32, 144, 256):
        for n in (1, 2, 4, 8, 16):
            t = expert_parallel_comm_s(128, ep, IB, chips_per_node=n, in_node=NVL)
            port_only = expert_parallel_comm_s(128, ep, IB)
            m = min(n, ep)
            split = 2 * 58 * max((ep - m) / ep * 128 * 8 * 7168 * 2 / 50e9 + 0.5e-6 if ep > m else 0.0,
                                 (m - 1) / ep * 128 * 8 * 7168 * 2 / 200e9 + 0.5e-6 if m > 1 else 0.0)
            assert t <= port_only * (1 + 1e-12) and t <= split * (1 + 1e-12)


def test_an_all_reduce_over_an_array_of_chip_counts_is_elementwise():
    # a scalar message with an array of group sizes once took the scalars' fast path and asked numpy for one truth
    # value; each group is its own all-reduce (0 on one chip)
    t = km.formulas.allreduce_time(16384.0, [1, 8], "nvlink4")
    assert t[0] == 0.0 and t[1] == pytest.approx(km.formulas.allreduce_time(16384.0, 8, "nvlink4"), rel=1e-15)
    assert list(km.formulas.allreduce_estimate(0.0, [1, 1], "nvlink4")) == [0.0, 0.0]


# --- the collectives of a pass, listed (Deployment.collectives) --------------------------------------

def test_collectives_list_the_chain_of_a_tensor_expert_and_pipeline_layout_by_hand():
    # Mixtral 8x7B, tp = 2, ep = 4, dp = 2, pp = 2 (16 chips on LINK, one node), batch 64: a micro-batch of
    # ceil(64 / 2) / 2 = 16 tokens. 32 layers, all MoE: 2 * 32 - 32 = 32 all-reduces of 16 * 4,096 * 2 B =
    # 131,072 B over 2 chips; 32 dispatches and 32 combines of 16 * top_k 2 * 4,096 / g 2 * 2 B = 131,072 B
    # from each chip over 4; pp - 1 = 1 hop of 131,072 B.
    dep = km.Deployment("mixtral-8x7b", "h100-sxm", ParallelLayout(tp=2, ep=4, dp=2, pp=2), link=LINK,
                        chips_per_node=16)
    c = dep.collectives(64)
    assert c.tokens == 16
    rows = [(k.name, k.kind, k.count, k.message_bytes, k.n_chips) for k in c.collectives]
    assert rows == [("tensor-parallel all-reduce", "all_reduce", 32, 131_072, 2),
                    ("expert-parallel dispatch", "all_to_all", 32, 131_072, 4),
                    ("expert-parallel combine", "all_to_all", 32, 131_072, 4),
                    ("pipeline hop", "p2p", 1, 131_072, 2)]
    all_reduce = 2 * 1 / 2 * 131_072 / W + ALPHA
    all_to_all = 3 / 4 * 131_072 / W + ALPHA
    hop = 131_072 / W + ALPHA
    times = [k.time_s for k in c.collectives]
    assert times == pytest.approx([all_reduce, all_to_all, all_to_all, hop], rel=REL)
    assert c.collectives[1].bytes_per_pass == 32 * 131_072
    assert c.comm_s == pytest.approx(32 * all_reduce + 64 * all_to_all + hop, rel=REL)
    assert c.comm_s == pytest.approx(sum(k.total_s for k in c.collectives), rel=REL)
    assert c.comm_s == dep.step(64, 4096).comm_s


def test_collectives_name_the_hops_across_nodes_and_keep_their_bytes_without_a_link():
    # Llama 3 70B on 16 chips of 8 per node, pp = 16: one stage boundary of the 15 is a node boundary
    c = km.Deployment("llama-3-70b", "h100-sxm", "pp=16").collectives(16)
    assert [(k.name, k.count) for k in c.collectives] == [("pipeline hop across nodes", 1), ("pipeline hop", 14)]
    free = km.Deployment("llama-3-70b", "h100-sxm", "tp=8", link=None).collectives(8)
    (tp,) = free.collectives
    assert (tp.count, tp.message_bytes, tp.time_s, free.comm_s) == (160, 8 * 8192 * 2, 0.0, 0.0)
    assert km.Deployment("llama-3-8b", "h100-sxm").collectives(8).collectives == ()
    assert km.Deployment("llama-3-8b", "h100-sxm", "tp=2").collectives(8).to_dict()["collectives"][0]["count"] == 64


def test_collectives_broadcast_over_batches_and_refuse_a_bad_batch():
    c = km.Deployment("llama-2-70b", "h100-sxm", "tp=8").collectives(np.array([1.0, 64.0]))
    assert list(c.collectives[0].message_bytes) == [16_384, 1_048_576]
    with pytest.raises(ValueError, match="batch"):
        km.Deployment("llama-2-70b", "h100-sxm", "tp=8").collectives(0)


# ----- pins the mutation check asked for (scripts/mutation_check.py) ------------------

def test_a_stage_of_context_parallel_groups_fills_nodes_by_all_its_chips():
    # tp=2, cp=2, pp=4 on nodes of 8 H100s: each stage is 4 chips, so stages 1-2 fill node 1 and 3-4 node 2: of the
    # 3 hops one crosses a node boundary (counting 2 chips a stage, without cp, none would)
    c = km.Deployment("llama-3-70b", "h100-sxm", "tp=2,cp=2,pp=4", link="nvlink4").collectives(1)
    assert [(k.name, k.count) for k in c.collectives] == [
        ("tensor-parallel all-reduce", 160), ("context-parallel combine", 80), ("pipeline hop across nodes", 1),
        ("pipeline hop", 2)]


def test_collectives_and_their_estimate_carry_every_token_of_a_multi_token_pass():
    # 16 sequences verifying 4 tokens each move 64 tokens' activations: 64 x 8,192 x 2 B per all-reduce, the same
    # messages (and the same measured-curve estimate) as 64 sequences of one token
    dep = km.Deployment("llama-2-70b", "h100-sxm", "tp=8")
    (ar,) = dep.collectives(16, tokens_per_seq=4).collectives
    assert ar.message_bytes == 64 * 8192 * 2
    e = dep.comm_estimate(16, tokens_per_seq=4)
    assert e.tokens == 64 and e.estimate_s == dep.comm_estimate(64).estimate_s > dep.comm_estimate(16).estimate_s
