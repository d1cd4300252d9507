"""Expert parallelism: redundant experts in a layout, and the all-to-alls of a step.

Values are hand computations written out here (exact up to float rounding,
``rel=1e-12``) or figures from DeepSeek's published deployment and the
DeepEP README.
"""

from __future__ import annotations

import pytest

import kvmath as km

DS = km.get_model("deepseek-v3")
IB = km.get_link("ib-ndr400")
NVL = km.get_link("nvlink4-h800")


def test_link_presets_for_the_h800_deployment():
    # DeepEP README: a CX7 400 Gb/s NIC per H800, ~50 GB/s; nccl#1374: H800 NVLink 200 GB/s one way
    assert IB.bandwidth == 400e9 / 8 and IB.stated_as == "per direction"
    assert NVL.bandwidth == 200e9 and NVL.bandwidth < km.get_link("nvlink4").bandwidth


def test_all_to_all_by_hand_two_levels():
    # 88 tokens x top-8 x 7168: 5,046,272 B in fp8; 136 of 144 chips are on other nodes, 7 on this one
    # (the same-node share may also take the port: all 143 peers' copies over both paths, 250 GB/s)
    s = 88 * 8 * 7168
    dispatch = max(136 / 144 * s / 50e9 + 0.5e-6, 143 / 144 * s / 250e9 + 0.5e-6)
    combine = max(136 / 144 * 2 * s / 50e9 + 0.5e-6, 143 / 144 * 2 * s / 250e9 + 0.5e-6)
    t = km.expert_parallel_comm_s(DS, 88, 144, IB, dispatch_bytes=1, combine_bytes=2,
                                  chips_per_node=8, node_link=NVL)
    assert t == pytest.approx(58 * (dispatch + combine), rel=1e-12)  # 61 layers, 3 dense
    assert t == pytest.approx(16.64e-3, abs=0.005e-3)


def test_all_to_all_one_level_is_the_links_all_to_all():
    one = km.expert_parallel_comm_s(DS, 128, 128, IB, dispatch_bytes=1, combine_bytes=2)
    by_hand = 58 * (km.all_to_all_time(128 * 8 * 7168, 128, IB) + km.all_to_all_time(128 * 8 * 7168 * 2, 128, IB))
    assert one == pytest.approx(by_hand, rel=1e-12)
    # one node: every peer is near, and its copies may take NVLink or the port (200 + 50 GB/s);
    # one chip: nothing moves
    inside = km.expert_parallel_comm_s(DS, 8, 8, IB, chips_per_node=8, node_link=NVL)
    assert inside == pytest.approx(2 * 58 * (7 / 8 * 8 * 8 * 7168 * 2 / 250e9 + 0.5e-6), rel=1e-12)
    assert km.expert_parallel_comm_s(DS, 8, 1, IB) == 0
    # a group smaller than a node is all near; without node_link, near traffic uses link
    assert km.expert_parallel_comm_s(DS, 8, 8, IB, chips_per_node=16, node_link=NVL) == inside
    assert km.expert_parallel_comm_s(DS, 8, 16, IB, chips_per_node=8) == pytest.approx(
        km.expert_parallel_comm_s(DS, 8, 16, IB), rel=1e-12)


def test_all_to_all_is_monotone_in_tokens_and_broadcasts():
    t = km.expert_parallel_comm_s(DS, [1, 10, 100], 144, IB, chips_per_node=8, node_link=NVL)
    assert t[0] < t[1] < t[2]


def test_all_to_all_refuses_bad_input():
    with pytest.raises(ValueError, match="dense"):
        km.expert_parallel_comm_s(km.get_model("llama-2-70b"), 8, 8, IB)
    with pytest.raises(ValueError, match="chips_per_node"):
        km.expert_parallel_comm_s(DS, 8, 8, IB, chips_per_node=0)
    with pytest.raises(ValueError, match="tokens"):
        km.expert_parallel_comm_s(DS, 0, 8, IB)


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
    kv, att = DS.kv_bytes_per_seq(4989, 1), DS.attention_flops_per_token(4989)
    step = km.chip_step(DS, 144 * 88, 4989, layout, 3.35e12, 1.9789e15, weights="fp8",
                        kv_bytes_per_seq=kv, attention_flops_per_seq=att)
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
            t = km.expert_parallel_comm_s(DS, 128, ep, IB, chips_per_node=n, node_link=NVL)
            port_only = km.expert_parallel_comm_s(DS, 128, ep, IB)
            m = min(n, ep)
            split = 2 * 58 * max((ep - m) / ep * 128 * 8 * 7168 * 2 / 50e9 + 0.5e-6 if ep > m else 0.0,
                                 (m - 1) / ep * 128 * 8 * 7168 * 2 / 200e9 + 0.5e-6 if m > 1 else 0.0)
            assert t <= port_only * (1 + 1e-12) and t <= split * (1 + 1e-12)
