"""Collectives routed over the link their group spans, and the measured curves of the estimates.

Every expected value is computed by hand in the test from the presets' figures (NVLink 4: 450e9 B/s per
direction, InfiniBand NDR: 50e9, 0.5 us assumed per step) and the cited rows of kvmath/data/collectives.csv;
the tolerance is float rounding (rel=1e-12) unless stated.
"""

import json

import numpy as np
import pytest

import kvmath as km
from kvmath.cli import main
from kvmath.links import COLLECTIVE_KINDS, _curves, collective_estimate, curves

NV4, IB = km.Link.preset("nvlink4"), km.Link.preset("ib-ndr400")
SMALL, LARGE = 16 * 1024, 256 * 2**20  # 16 KiB and 256 MiB


def run_json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# ----- the bound and the estimate of one all-reduce on 8 H100s over NVLink 4 ------------------------

@pytest.mark.parametrize("size", [SMALL, LARGE])
def test_ring_and_tree_bounds_on_nvlink4_by_hand(size):
    moved = 2 * 7 / 8 * size  # a ring's (and a double binary tree's) bytes per chip
    ring = moved / 450e9 + 2 * 7 * 0.5e-6  # 14 dependent steps
    tree = moved / 450e9 + 2 * 3 * 0.5e-6  # 2 log2 8 = 6
    assert km.formulas.allreduce_time(size, 8, NV4, "ring") == pytest.approx(ring, rel=1e-12)
    assert km.formulas.allreduce_time(size, 8, NV4, "tree") == pytest.approx(tree, rel=1e-12)
    # the bound ("best") is below both: one step and the switch's S bytes
    assert km.formulas.allreduce_time(size, 8, NV4) == pytest.approx(size / 450e9 + 0.5e-6, rel=1e-12)


def test_the_bound_figures_at_16_kib_and_256_mib():
    # 16 KiB: 28,672 B at 450 GB/s is 63.7 ns, so the steps dominate: 7.064 us (ring), 3.064 us (tree)
    assert km.formulas.allreduce_time(SMALL, 8, NV4, "ring") * 1e6 == pytest.approx(7.0637, abs=1e-4)
    assert km.formulas.allreduce_time(SMALL, 8, NV4, "tree") * 1e6 == pytest.approx(3.0637, abs=1e-4)
    # 256 MiB: 469,762,048 B at 450 GB/s is 1.0439 ms; the steps add 7 us and 3 us
    assert km.formulas.allreduce_time(LARGE, 8, NV4, "ring") * 1e3 == pytest.approx(1.0509, abs=1e-4)
    assert km.formulas.allreduce_time(LARGE, 8, NV4, "tree") * 1e3 == pytest.approx(1.0469, abs=1e-4)


@pytest.mark.parametrize("size", [SMALL, LARGE])
def test_measured_curves_on_nvlink4_by_hand(size):
    # NCCL ring: bus bandwidth 370 GB/s (nccl#1455); its 8-GPU small-message time is not published (30 us stand-in)
    ring = collective_estimate("all_reduce", size, 8, NV4, "ring")
    assert ring.estimate_s == pytest.approx(30e-6 + 2 * 7 / 8 * size / 370e9, rel=1e-12)
    assert ring.flagged and not ring.latency_measured and ring.bandwidth_measured
    # NVLS: 30 us per call (Azure ND H200 v5) and 274 GB/s algorithm bandwidth (nccl-tests#212)
    nvls = collective_estimate("all_reduce", size, 8, NV4, "in_switch")
    assert nvls.estimate_s == pytest.approx(30e-6 + size / 274e9, rel=1e-12) and not nvls.flagged
    # SGLang's custom kernel: 5.9 us at 2 KiB and 263 GB/s fitted to 4 MiB (sglang#2904)
    custom = collective_estimate("all_reduce", size, 8, NV4, "custom")
    assert custom.estimate_s == pytest.approx(5.9e-6 + 2 * 7 / 8 * size / 263e9, rel=1e-12)
    # an engine picks the fastest: its custom kernel at 16 KiB (6.01 us), NVLS at 256 MiB (1.010 ms)
    auto = collective_estimate("all_reduce", size, 8, NV4)
    assert auto.algorithm == ("custom" if size == SMALL else "in_switch")
    assert auto.estimate_s == pytest.approx(min(custom.estimate_s, nvls.estimate_s, ring.estimate_s), rel=1e-12)
    assert collective_estimate("all_reduce", size, 8, NV4, "nccl").estimate_s == pytest.approx(
        min(nvls.estimate_s, ring.estimate_s), rel=1e-12)
    # no tree curve is published for one NVLink 4 node (NCCL runs NVLS there)
    with pytest.raises(ValueError, match="no measured 'tree'"):
        collective_estimate("all_reduce", size, 8, NV4, "tree")


def test_between_measured_gpu_counts_the_latency_is_interpolated_in_the_steps():
    # nccl-tests#123, DGX A100 ring: 10 us on 2 GPUs, 33.7 us on 8; 4 GPUs (6 steps) interpolated between 2 and 14
    e = collective_estimate("all_reduce", 0.0, 4, "nvlink3", "ring")
    assert e.latency_s == pytest.approx(10e-6 + (33.7e-6 - 10e-6) * (6 - 2) / (14 - 2), rel=1e-12)
    assert e.latency_s == pytest.approx(16.88e-6, rel=0.07)  # the same issue measured 16.88 us on 4 GPUs
    assert e.from_gpus == (2, 8) and e.flagged
    # beyond the rows the nearest one is scaled by the steps: 16 GPUs' ring 30 / 14 of the 8-GPU latency
    assert collective_estimate("all_reduce", 0.0, 16, "nvlink3", "ring").latency_s == pytest.approx(
        33.7e-6 * 30 / 14, rel=1e-12)


def test_links_without_a_published_small_message_time_are_flagged():
    for link in ("amd-if-mi300x", "nvlink5"):
        e = collective_estimate("all_reduce", SMALL, 8, link)
        assert e.flagged and not e.latency_measured
    # no curve at all (no source): the bound's formula, flagged
    e = collective_estimate("all_reduce", SMALL, 8, "tpu-v5e-ici")
    assert e.algorithm == "floor" and e.estimate_s == e.bound_s and e.flagged
    # an all-to-all off DeepEP's two links (H800 nodes: their NVLink, their InfiniBand): the bound's formula, flagged
    e = collective_estimate("all_to_all", SMALL, 8, NV4)
    assert e.algorithm == "floor" and e.estimate_s == pytest.approx(7 / 8 * SMALL / 450e9 + 0.5e-6) and e.flagged


def test_every_curve_is_sourced_and_never_below_the_bound():
    sizes = np.geomspace(1, 2**30, 40)
    for (link, algorithm), rows in _curves().items():
        for row in rows:
            assert row.source.strip() and row.latency_s > 0 and row.bandwidth > 0
            assert row.kind == ("all_to_all" if algorithm == "deepep" else "all_reduce")
            if not (row.latency_measured and row.bandwidth_measured):
                assert row.note.strip(), (link, algorithm, row.n_gpus)  # a stand-in says which
        if km.Link.preset(link).scope == "between nodes":  # a curve across nodes: checked in the chains below
            continue
        kind = rows[0].kind
        for n in (2, 4, 8, 16):
            e = collective_estimate(kind, sizes, n, link, algorithm if kind == "all_reduce" else "auto")
            assert np.all(e.estimate_s >= e.bound_s), (link, algorithm, n)
    assert [c.n_gpus for c in curves("nvlink4") if c.algorithm == "custom"] == [2, 4, 8]
    # InfiniBand's curve is a two-level all-reduce over nodes: above the hierarchical floor of a group across nodes
    for layout in ("tp=16", "tp=8,cp=2", "tp=16,pp=2"):
        dep = km.Deployment("llama-3.1-405b", "h100-sxm", layout, node_link="ib-ndr400")
        e = dep.comm_estimate(np.geomspace(1, 4096, 30))
        assert np.all(e.estimate_s >= e.bound_s), layout
    # DeepEP's all-to-all across nodes, at every group it was measured on and between: above the two-tier floor,
    # also in nodes of another size than its 8 (where the floor, not the curve, may set it)
    for ep, per_node in ((16, 8), (64, 8), (128, 8), (256, 8), (64, 4), (128, 16)):
        dep = km.Deployment("deepseek-v3", "h800", f"dp={ep},ep={ep}", node_link="ib-ndr400",
                            chips_per_node=per_node)
        e = dep.comm_estimate(np.geomspace(1, 4096, 30))
        assert np.all(e.estimate_s >= e.bound_s), (ep, per_node)


def test_deepeps_curves_by_hand():
    """DeepEP's README (V1 low-latency kernels, H800 with one CX7 400 Gb/s card each, 8 GPUs a node, 128 tokens a
    chip, top-8 of d = 7168): dispatch in fp8 and combine in bf16, so S and 2 S bytes, at each group size. The curve
    t = latency + S / bandwidth through both points: latency 2 t_d - t_c, bandwidth S / (t_c - t_d)."""
    s = 128 * 8 * 7168
    readme = {8: (77e-6, 114e-6), 16: (118e-6, 195e-6), 32: (155e-6, 273e-6), 64: (173e-6, 314e-6),
              128: (192e-6, 369e-6), 256: (194e-6, 360e-6)}
    for ep, (dispatch, combine) in readme.items():
        link = "nvlink4-h800" if ep == 8 else IB
        e = collective_estimate("all_to_all", s, ep, link)
        assert e.algorithm == "deepep" and not e.flagged
        assert e.latency_s == pytest.approx(2 * dispatch - combine, rel=1e-12)
        assert e.bandwidth == pytest.approx(s / (combine - dispatch), rel=1e-5)  # six figures in the table
        assert collective_estimate("all_to_all", 2 * s, ep, link).estimate_s == pytest.approx(combine, rel=1e-5)
    # between the measured groups the latency is interpolated in log2 of the group and flagged
    e = collective_estimate("all_to_all", s, 96, IB)
    x = (np.log2(96) - 6) / (7 - 6)
    assert e.latency_s == pytest.approx(32e-6 + (15e-6 - 32e-6) * x, rel=1e-12) and e.flagged


def test_collective_estimate_refuses_bad_input_by_name():
    for kwargs, word in [(dict(kind="reduce"), "kind"), (dict(algorithm="mesh"), "algorithm"),
                         (dict(n_chips=0), "n_chips"), (dict(message_bytes=-1), "message_bytes"),
                         (dict(link="nvlink9"), "link"), (dict(kind="p2p", algorithm="ring"), "algorithm")]:
        args = dict(kind="all_reduce", message_bytes=SMALL, n_chips=8, link="nvlink4") | kwargs
        with pytest.raises(ValueError, match=word):
            collective_estimate(**args)
    assert set(COLLECTIVE_KINDS) == {"all_reduce", "all_to_all", "p2p"}
    assert collective_estimate("all_reduce", SMALL, 1, NV4).estimate_s == 0.0


# ----- routing: tensor parallelism in a node, the pipeline hop across ------------------------------

M405 = km.Model.preset("llama-3.1-405b")


def test_tp_inside_a_node_and_pp_across_two_on_the_command_line(capsys):
    """Llama 3.1 405B, tp = 8 in each of two H100 nodes, pp = 2 across, B = 32: the issue's command.

    A pass carries 16 sequences: 16 x 16,384 x 2 = 524,288 bytes per all-reduce, 252 of them (2 x 126 layers)
    over NVLink with in-switch reduction, and one hop over InfiniBand: 252 x (524,288 / 450e9 + 0.5 us)
    + 524,288 / 50e9 + 0.5 us = 0.4306 ms. All on InfiniBand it was 4.76 ms.
    """
    message = 16 * 16384 * 2
    by_hand = 252 * (message / 450e9 + 0.5e-6) + message / 50e9 + 0.5e-6
    common = ["decode", "--model", "llama-3.1-405b", "--hardware", "h100-sxm", "--parallel", "tp=8,pp=2",
              "--batch", "32", "--context", "4096"]
    step = run_json(capsys, *common, "--link", "ib-ndr400")
    assert step["comm_s"] == pytest.approx(by_hand, rel=1e-12)
    assert step["comm_s"] * 1e3 == pytest.approx(0.4306, abs=5e-5)
    # the same with the nodes spelled out
    assert run_json(capsys, *common, "--node-link", "ib-ndr400", "--nodes", "2")["comm_s"] == step["comm_s"]
    assert run_json(capsys, *common, "--node-link", "ib-ndr400", "--chips-per-node", "8")["comm_s"] == step["comm_s"]
    # both links named explicitly InfiniBand: the old all-on-one-link figure, 4.76 ms
    all_ib = run_json(capsys, *common, "--link", "ib-ndr400", "--node-link", "ib-ndr400")
    assert all_ib["comm_s"] == pytest.approx(252 * (2 * 7 / 8 * message / 50e9 + 0.5e-6) + message / 50e9 + 0.5e-6,
                                             rel=1e-12)


def test_a_tensor_parallel_group_across_nodes_takes_the_hierarchical_floor():
    # tp = 16 over two nodes of 8: each node reduces on NVLink, and the two nodes' 8 ports exchange
    # 2 (a - 1) / a x S = S bytes: S / (8 x 50e9) + 0.5 us, above S / (450e9 + 50e9) + 0.5 us (both paths)
    dep = km.Deployment(M405, "h100-sxm", "tp=16", node_link="ib-ndr400")
    assert dep.chips_per_node == 8  # the H100 preset's HGX node
    message = 32 * 16384 * 2
    assert dep.step(32, 4096).comm_s == pytest.approx(252 * (message / 400e9 + 0.5e-6), rel=1e-12)
    # charging the whole 16-chip ring on the port would be 15x that, no bound
    flat = 252 * (2 * 15 / 16 * message / 50e9 + 0.5e-6)
    assert dep.step(32, 4096).comm_s < flat / 10
    # one chip per node: the flat all-reduce over the ports
    one = km.Deployment(M405, "h100-sxm", "tp=16", node_link="ib-ndr400", chips_per_node=1).step(32, 4096)
    assert one.comm_s == pytest.approx(252 * (2 * 15 / 16 * message / 50e9 + 0.5e-6), rel=1e-12)


def test_groups_that_straddle_nodes_unevenly_are_refused_by_name():
    with pytest.raises(ValueError, match=r"chips_per_node \(6\).*tp groups of 8"):
        km.Deployment(M405, "h100-sxm", "tp=8,pp=2", node_link="ib-ndr400", chips_per_node=6)
    six = km.Chip.preset("h100-sxm").replace(name="h100-six", node_chips=6)  # a node size from the chip
    with pytest.raises(ValueError, match=r"h100-six preset's node.*tp groups of 4"):
        km.Deployment(M405, six, "tp=4,pp=3", node_link="ib-ndr400")
    # one fabric (no link of its own between nodes): where the nodes end changes nothing, so nothing is refused
    assert km.Deployment(M405, "h100-sxm", "tp=8,pp=2", chips_per_node=6).step(32, 4096).comm_s > 0


# ----- DeepSeek-V3's expert parallelism in fp8 over two tiers ---------------------------------------

def test_deepseek_v3_dispatch_in_fp8_over_two_tiers_on_the_command_line(capsys):
    """144 H800s in 18 nodes of 8, 88 sequences per GPU: the layout path gives the two-tier fp8 answer.

    Each chip dispatches 88 x 8 x 7,168 = 5,046,272 fp8 bytes per MoE layer and combines twice that in bf16;
    136 / 144 of it must leave through the 50 GB/s port, while all 143 / 144 may use the port and the
    200 GB/s NVLink together: 58 x (max(136/144 S / 50e9, 143/144 S / 250e9) + 0.5 us, for S and 2 S) = 16.64 ms.
    """
    s = 88 * 8 * 7168
    one = lambda b: max(136 / 144 * b / 50e9 + 0.5e-6, 143 / 144 * b / 250e9 + 0.5e-6)  # noqa: E731
    by_hand = 58 * (one(s) + one(2 * s))
    step = run_json(capsys, "decode", "--model", "deepseek-v3", "--hardware", "h800", "--parallel",
                    "dp=144,ep=144,redundant=32,dispatch=fp8", "--link", "ib-ndr400", "--weight-dtype", "fp8",
                    "--kv-dtype", "fp8", "--batch", str(88 * 144), "--context", "4989")
    assert step["comm_s"] == pytest.approx(by_hand, rel=1e-12)
    assert step["comm_s"] * 1e3 == pytest.approx(16.64, abs=0.005)
    # two experts per GPU resident: (256 + 32) / 144
    dep = km.Deployment("deepseek-v3", "h800", km.ParallelLayout(dp=144, ep=144, redundant_experts=32),
                        node_link="ib-ndr400", formats=km.Formats(weights="fp8", kv="fp8", dispatch="fp8"))
    assert dep.step(88 * 144, 4989).to_dict() == step


# ----- the command line's new options refuse bad input naming the option ------------------------------

@pytest.mark.parametrize("argv, words", [
    (["--parallel", "tp=8,pp=2", "--link", "ib-ndr400", "--nodes", "0"], "--nodes must be > 0"),
    (["--parallel", "tp=8,pp=2", "--link", "ib-ndr400", "--nodes", "3"], "--nodes 3 must divide the 16 chips"),
    (["--parallel", "tp=8,pp=2", "--link", "ib-ndr400", "--nodes", "2", "--chips-per-node", "4"], "disagree"),
    (["--parallel", "tp=8,pp=2", "--link", "ib-ndr400", "--chips-per-node", "6"], "--chips-per-node (6) splits the tp"),
    (["--parallel", "tp=8", "--link", "ib-ndr400"], "--link ib-ndr400 links nodes, but the layout's 8 chips fit"),
    (["--parallel", "tp=8,pp=2", "--nodes", "2"], "--nodes has no effect without a link between nodes"),
    (["--parallel", "tp=8,pp=2", "--chips-per-node", "8"], "--chips-per-node has no effect"),
    (["--parallel", "tp=8,dispatch=fp8"], "dispatch=fp8 needs expert parallelism"),
])
def test_bad_topology_options_exit_2_naming_the_option(capsys, argv, words):
    code = main(["decode", "--model", "llama-3.1-405b", "--hardware", "h100-sxm", *argv,
                 "--batch", "32", "--context", "4096"])
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("\n") == 1, err


def test_a_bad_dispatch_format_exits_2_naming_it(capsys):
    code = main(["decode", "--model", "deepseek-v3", "--hardware", "h800", "--parallel", "dp=8,ep=8,dispatch=fp9",
                 "--batch", "8", "--context", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "unknown dispatch 'fp9'" in err and "--parallel dp=8,ep=8,dispatch=fp9" in err


def test_parallel_text_with_redundant_experts_and_dispatch():
    layout, dispatch = km.layout.parse_parallel("dp=144,ep=144,redundant=32,dispatch=FP8")
    assert (layout.redundant_experts, dispatch) == (32, "fp8")
    with pytest.raises(ValueError, match="is a format"):
        km.layout.parse_layout("dp=8,ep=8,dispatch=fp8")
    with pytest.raises(ValueError, match="must look like"):
        km.layout.parse_parallel("dp=8,ep=8,redundant=two")


# ----- the chain's estimate --------------------------------------------------------------------------

def test_the_chains_estimate_by_hand():
    # Llama 2 70B on 8 H100s at batch 1: 160 all-reduces of 16 KiB at SGLang's custom kernel (an engine's pick)
    dep = km.Deployment("llama-2-70b", "h100-sxm", "tp=8")
    e = dep.comm_estimate(1)
    assert e.estimate_s == pytest.approx(160 * (5.9e-6 + 1.75 * SMALL / 263e9), rel=1e-12)
    assert e.bound_s == dep.step(1, 1).comm_s and not e.flagged
    # an engine that calls NCCL (gpt-fast, PyTorch) pays NVLS's 30 us
    assert dep.comm_estimate(1, algorithm="nccl").estimate_s == pytest.approx(160 * (30e-6 + SMALL / 274e9),
                                                                                rel=1e-12)
    # across nodes the pipeline hop has no measured curve: the bound's formula, flagged
    two = km.Deployment(M405, "h100-sxm", "tp=8,pp=2", node_link="ib-ndr400").comm_estimate(32)
    message = 16 * 16384 * 2
    assert two.estimate_s == pytest.approx(252 * (5.9e-6 + 1.75 * message / 263e9) + message / 50e9 + 0.5e-6,
                                           rel=1e-12)
    assert list(two.flags) == ["p2p over 2 chips on ib-ndr400"]
    with pytest.raises(ValueError, match="algorithm"):
        dep.comm_estimate(1, algorithm="mesh")


def test_a_point_to_point_bound_is_one_message_over_the_link():
    # 1e9 bytes over 1e11 B/s plus 2 us: 10 ms + 2 us = 0.010002 s; an empty message costs the latency;
    # one chip sends nothing (0 s, for every message size)
    link = km.Link("test", bandwidth=1e11, latency_s=2e-6)
    two = collective_estimate("p2p", np.array([0.0, 1e9]), 2, link).bound_s
    one = collective_estimate("p2p", np.array([0.0, 1e9]), 1, link).bound_s
    assert two == pytest.approx([2e-6, 0.010002], rel=1e-12)
    assert one.shape == (2,) and list(one) == [0.0, 0.0]
