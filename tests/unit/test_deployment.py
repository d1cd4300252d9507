"""The deployment and its step model: bytes read by tensor group, formats, MoE, attention FLOPs, both bounds,
speculation, communication over the links, routing on every layout, and the checks made once at construction.

Expected values are hand computations written out in each test (exact
integers where the arithmetic is exact; tolerances stated otherwise).
"""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import kvmath as km
from kvmath.deployment import binds
from kvmath.formats import format_names, get_format
from kvmath.speculative import speculation_break_even_batch

settings.register_profile("kvmath", deadline=None, derandomize=True)
settings.load_profile("kvmath")


# ----- bytes read per step, by group ------------------------------------------------------------

def test_llama_3_8b_reads_one_embedding_row_and_the_whole_head():
    m = km.Model.preset("llama-3-8b")
    r = m.weight_bytes_read_by_group(batch=4)
    # L = 32, d = 4096, h = 32, h_kv = 8, d_h = 128, d_ff = 14336, vocab = 128256, bf16
    attention = 32 * (4096 * 32 * 128 + 2 * 4096 * 8 * 128 + 32 * 128 * 4096)
    mlp = 32 * 3 * 4096 * 14336
    assert r["attention"] == attention * 2
    assert r["mlp"] == mlp * 2
    assert r["lm_head"] == 128256 * 4096 * 2
    assert r["embedding"] == 4 * 4096 * 2  # four tokens, four rows
    assert r["norms"] == (2 * 32 + 1) * 4096 * 2
    assert r["experts"] == r["router"] == r["positions"] == 0
    assert m.weight_bytes_read(4) == sum(r.values())
    assert m.weight_bytes_resident() == m.param_count() * 2 == (attention + mlp + 2 * 128256 * 4096 + 65 * 4096) * 2


def test_tied_embeddings_read_the_shared_table_once():
    m = km.Model.preset("falcon-7b")  # tied, vocab 65024, d 4544
    r = m.weight_bytes_read_by_group(batch=16)
    assert r["lm_head"] == 65024 * 4544 * 2
    assert r["embedding"] == 0  # the looked-up rows are inside the table the head reads
    assert m.param_groups()["lm_head"] == 0 and m.param_groups()["embedding"] == 65024 * 4544
    assert m.weight_bytes_read(16) == pytest.approx(m.weight_bytes_resident(), rel=1e-15)


def test_learned_positions_are_looked_up_too():
    m = km.Model.preset("starcoder")  # 8192 learned positions of d = 6144
    assert m.weight_bytes_read_by_group(batch=3)["positions"] == 3 * 6144 * 2
    assert m.param_groups()["positions"] == 8192 * 6144
    # and a deployment's step reads them (its one step model): 3 tokens read 2 rows more than 1, 2 x 6,144 x 2 B
    # (the embedding rows are inside the tied head), and holds the table with every other weight, 2 B each
    dep = km.Deployment(m, "h100-sxm")
    assert dep.step(3, 100).weight_bytes_read - dep.step(1, 100).weight_bytes_read == 2 * 6144 * 2
    assert dep.step(3, 100).weight_bytes_read == m.weight_bytes_read(3)
    assert dep.step(1, 100).weight_bytes_resident == m.param_count() * 2


def test_a_precision_per_group():
    m = km.Model.preset("llama-3-8b")
    mixed = m.weight_bytes_read(1, {"default": "fp8", "lm_head": "bf16"})
    g = m.param_groups()
    body = g["attention"] + g["mlp"] + g["norms"]
    assert mixed == body * 1 + g["lm_head"] * 2 + 4096 * 1
    with pytest.raises(ValueError, match="unknown group"):
        m.weight_bytes_read(1, {"default": "fp8", "head": "bf16"})
    with pytest.raises(ValueError, match="default"):
        m.weight_bytes_read(1, {"lm_head": "bf16"})


# ----- number formats ---------------------------------------------------------------------------

@pytest.mark.parametrize("name, bits", [
    ("q8_0", (32 * 8 + 16) / 32),              # 32 int8 + one fp16 scale
    ("q4_0", (32 * 4 + 16) / 32),              # 32 nibbles + one fp16 scale
    ("q4_k", (256 * 4 + 12 * 8 + 2 * 16) / 256),  # 4-bit + 12 B of 6-bit scales/mins + fp16 d, dmin
    ("q5_k", (256 * 5 + 12 * 8 + 2 * 16) / 256),
    ("q6_k", (256 * 6 + 16 * 8 + 16) / 256),   # 6-bit + 16 int8 scales + fp16 d
    ("mxfp4", 4 + 8 / 32),                     # E8M0 scale per 32
    ("nvfp4", 4 + 8 / 16),                     # E4M3 scale per 16
    ("int4-g128", 4 + 16 / 128),               # fp16 scale per 128
    ("fp8-e4m3", 8), ("fp8-e5m2", 8), ("int8", 8), ("bf16", 16),
])
def test_bits_per_weight_include_scales(name, bits):
    assert get_format(name).bits_per_weight == bits
    assert km.units.dtype_bytes(name) == bits / 8


def test_q4_0_llama_2_7b():
    # 6,738,415,616 parameters x 4.5 bits / 8 = 3,790,358,784 bytes
    assert km.Model.preset("llama-2-7b").weight_bytes_resident("q4_0") == 6_738_415_616 * 4.5 / 8 == 3_790_358_784


def test_every_format_has_a_source_and_a_known_rate():
    for name in format_names():
        f = get_format(name)
        assert f.source and f.compute in ("bf16", "fp8", "int8", "fp4")


def test_format_rates_fall_back_to_bf16_where_the_chip_lacks_them():
    b200, a100 = km.Chip.preset("b200"), km.Chip.preset("a100-80gb")
    assert b200.flops_for_format("nvfp4") == 9e15 and b200.flops_for_format("mxfp4") == 9e15
    assert a100.flops_for_format("nvfp4") == a100.flops_for_format("fp8") == 312e12
    assert a100.flops_for_format("q4_0") == 624e12  # llama.cpp's MMQ: int8 dot products


# ----- mixture of experts -----------------------------------------------------------------------

def test_mixtral_expected_experts():
    # E = 8, k = 2: 8 * (1 - (6/8)^B)
    assert km.formulas.experts_touched(8, 2, 1) == 2.0
    assert km.formulas.experts_touched(8, 2, 8) == pytest.approx(8 * (1 - 0.75**8), rel=1e-12)  # 7.1992
    assert km.formulas.experts_touched(8, 2, 64) == pytest.approx(8 * (1 - 0.75**64), rel=1e-12)  # 8 - 8e-8
    assert km.formulas.experts_touched(8, 2, 64, "floor") == 2 and km.formulas.experts_touched(8, 2, 3, "ceiling") == 6


def test_mixtral_batch_1_reads_2_of_8_experts():
    m = km.Model.preset("mixtral-8x7b")
    r = m.weight_bytes_read_by_group(1)
    assert r["experts"] == 32 * 2 * 3 * 4096 * 14336 * 2
    assert m.param_groups()["experts"] == 32 * 8 * 3 * 4096 * 14336


def test_moe_critical_batch():
    h100 = km.Chip.preset("h100-sxm")
    # (46.70 / 12.88) * 989.4e12 * 2 / (2 * 3.35e12) = 1070.9
    assert km.formulas.saturated_critical_batch(46.70e9, 12.88e9, 989.4e12, 3.35e12, 2) == pytest.approx(1070.9, abs=0.1)
    own = km.Deployment("mixtral-8x7b", h100).critical_batch()
    assert own == pytest.approx(1070.9, rel=0.02)
    dense = km.Deployment("llama-2-70b", h100).critical_batch()
    assert dense == pytest.approx(989.4e12 * 2 / (2 * 3.35e12), rel=0.002)  # 295.3: the chip's figure


# ----- attention FLOPs --------------------------------------------------------------------------

def test_mla_absorbed_attention_flops_deepseek_v3():
    m = km.Model.preset("deepseek-v3")
    # per cached token per layer: 2 h (r + r_rope) for scores + 2 h r for values, h = 128, r = 512, r_rope = 64
    per = 2 * 128 * (512 + 64) + 2 * 128 * 512
    assert per == 278_528
    assert m.attention_flops_per_token(1000) == 61 * 1000 * per
    intensity = per / ((512 + 64) * 2)  # FLOPs per byte of bf16 latent: 241.8
    assert intensity == pytest.approx(241.8, abs=0.05)
    # above an H200's bf16 ridge (989e12 / 4.8e12 = 206), on one chip
    assert intensity > km.Chip.preset("h200").ridge_point("bf16")
    one = km.Deployment(m, "h200", weights="fp8", compute="bf16")
    step = one.step(64, 32768)
    assert binds(step.kv_read_s, step.attention_compute_s) == "compute"
    # tensor parallel by heads: every chip reads the whole latent for 1/8 of the heads
    tp = one.replace(layout="tp=8", link=None).step(64, 32768)
    assert binds(tp.kv_read_s, tp.attention_compute_s) == "memory"
    assert tp.attention_compute_s / tp.kv_read_s == pytest.approx(
        step.attention_compute_s / step.kv_read_s / 8, rel=1e-12)


def test_gqa_attention_flops_count_query_heads_and_windows():
    assert km.Model.preset("llama-2-70b").attention_flops_per_token(4096) == 4 * 80 * 64 * 128 * 4096
    g = km.Model.preset("gemma-2-9b")  # 21 of 42 layers attend over a 4096-token window
    assert g.attention_flops_per_token(10000) == 4 * 16 * 256 * (21 * 4096 + 21 * 10000)


# ----- the two forms of the bound ---------------------------------------------------------------

def test_strict_bound_of_the_notes_example():
    W, C = 16 * 8.2e11, 16 * 1.97e14
    # max((256 * 8192 * 100e3 + 30e9) / W, 2 * 30e9 * 256 / C) = 239.7e9 / 1.312e13 = 18.271 ms
    assert km.formulas.strict_step(256, 8192 * 100e3, 30e9, 30e9, W, C) == pytest.approx(
        (256 * 8192 * 100e3 + 30e9) / W, rel=1e-15)
    assert km.formulas.strict_step(256, 8192 * 100e3, 30e9, 30e9, W, C) * 1e3 == pytest.approx(18.27, abs=5e-3)
    assert km.formulas.min_step(256, 8192 * 100e3, 30e9, 30e9, W, C) * 1e3 == pytest.approx(20.86, abs=5e-3)


def test_overhead_adds_to_both_forms_and_makes_an_estimate():
    m, chip = km.Model.preset("llama-2-7b"), km.Chip.preset("a100-80gb")
    dep = km.Deployment(m, chip)
    base = dep.step(1, 512)
    slow = dep.step(1, 512, overhead_s=1e-3)
    assert slow.strict_s - base.strict_s == pytest.approx(1e-3, rel=1e-9)
    assert slow.no_overlap_s - base.no_overlap_s == pytest.approx(1e-3, rel=1e-9)
    assert base.is_lower_bound and not slow.is_lower_bound
    assert not dep.step(1, 512, efficiency=0.8).is_lower_bound


# ----- speculative decoding ---------------------------------------------------------------------

def test_expected_tokens_per_step():
    # (1 - 0.8^5) / (1 - 0.8) = 0.67232 / 0.2 = 3.3616
    assert km.formulas.expected_tokens_per_step(0.8, 4) == pytest.approx(3.3616, rel=1e-12)
    assert km.formulas.expected_tokens_per_step(1.0, 4) == 5.0
    with pytest.raises(ValueError, match="acceptance"):
        km.formulas.expected_tokens_per_step(1.2, 4)


def test_verify_step_reads_the_same_bytes_for_a_dense_model_more_for_moe():
    chip = km.Chip.preset("h100-sxm")
    dense = km.Model.preset("llama-3-8b")
    on_one = km.Deployment(dense, chip)  # one chip: its reads and FLOPs are the totals
    one, five = on_one.step(8, 1024), on_one.step(8, 1024, tokens_per_seq=5)
    assert five.weight_flops == 5 * one.weight_flops and five.attention_flops == 5 * one.attention_flops
    assert five.kv_bytes_read == one.kv_bytes_read
    assert five.weight_bytes_read - one.weight_bytes_read == (40 - 8) * 4096 * 2  # only embedding rows
    moe = km.Model.preset("mixtral-8x7b")
    moe_dep = km.Deployment(moe, chip)
    assert moe_dep.step(1, 1024, tokens_per_seq=5, routing="uniform").weight_bytes_read > \
        moe_dep.step(1, 1024, routing="uniform").weight_bytes_read
    s = on_one.speculate(np.array([1, 4096]), 128, 4, 0.8)
    assert s.speedup[0] == pytest.approx(3.3616, rel=0.01)  # memory-bound: verify costs about one step
    assert s.speedup[1] < 1  # compute-bound: speculation stops paying
    with_draft = km.Deployment("llama-2-70b", chip).speculate(1, 1024, 4, 0.8, draft=km.Model.preset("llama-2-7b"))
    # the 7B draft's four steps cost about 4 x 13.5 / 138 of the target's step
    assert 2.2 < with_draft.speedup < 2.6


# ----- properties -------------------------------------------------------------------------------

presets = st.sampled_from(km.Model.presets())
chips = st.sampled_from(km.Chip.presets())
batch = st.floats(0.5, 4096)
context = st.floats(1, 1_000_000)


@given(presets, chips, batch, context, st.sampled_from([1, 2, 8]), st.sampled_from(["heads", "batch"]))
def test_strict_bound_never_exceeds_the_no_overlap_form(name, chip, b, s, n, shard):
    model = km.Model.preset(name)
    assume(shard == "batch" or model.n_heads % n == 0)  # tensor parallelism by heads needs heads that divide
    layout = f"tp={n}" + (",kv=batch" if shard == "batch" else "")
    step = km.Deployment(model, chip, layout).step(b, s)  # the chip's own link: communication counted too
    assert step.strict_s <= step.no_overlap_s * (1 + 1e-12)
    assert step.strict_s >= max(step.kv_read_s, step.weight_read_s, step.weight_compute_s,
                                step.attention_compute_s, step.comm_s)


@given(presets, chips, batch, batch, context, context)
def test_both_forms_are_monotone_in_batch_and_context(name, chip, b1, b2, s1, s2):
    m, c = km.Model.preset(name), km.Chip.preset(chip)
    (b_lo, b_hi), (s_lo, s_hi) = sorted((b1, b2)), sorted((s1, s2))
    dep = km.Deployment(m, c)
    lo, hi = dep.step(b_lo, s_lo), dep.step(b_hi, s_hi)
    assert lo.strict_s <= hi.strict_s * (1 + 1e-12)
    assert lo.no_overlap_s <= hi.no_overlap_s * (1 + 1e-12)


@given(st.sampled_from(["mixtral-8x7b", "deepseek-v3"]), batch, batch, st.sampled_from(["floor", "uniform", "ceiling"]))
def test_moe_bytes_read_grow_with_batch_between_floor_and_resident(name, b1, b2, routing):
    m = km.Model.preset(name)
    lo, hi = sorted((b1, b2))
    read_lo, read_hi = m.weight_bytes_read(lo, routing=routing), m.weight_bytes_read(hi, routing=routing)
    assert read_lo <= read_hi * (1 + 1e-12)
    assert m.weight_bytes_read(lo) <= read_lo * (1 + 1e-12)  # the floor is the least
    assert read_hi <= m.weight_bytes_resident()


@given(presets, st.floats(1, 1e7), st.sampled_from(["floor", "uniform", "ceiling"]),
       st.sampled_from(["bf16", "fp8", "q4_k", "nvfp4"]))
def test_bytes_read_never_exceed_bytes_resident(name, b, routing, fmt):
    m = km.Model.preset(name)
    assert m.weight_bytes_read(b, fmt, routing) <= m.weight_bytes_resident(fmt)


def test_param_groups_sum_to_the_count_for_every_preset():
    for name in km.Model.presets():
        m = km.Model.preset(name)
        assert sum(m.param_groups().values()) == m.param_count(), name
        assert m.matmul_params_per_token() <= m.active_param_count(), name


def test_every_preset_has_a_sourced_supported_context_or_says_why_not():
    for name in km.Model.presets():
        m = km.Model.preset(name)
        assert m.context_source, name
        assert m.supported_context is None or m.supported_context >= 2048, name
    assert km.Model.preset("mistral-7b-v0.1").supported_context == 8192  # not the config's 32,768


# ----- found by review ----------------------------------------------------------------------------

def test_a_tied_table_is_stored_and_read_in_the_lm_head_format():
    m = km.Model.preset("falcon-7b")
    mixed = {"default": "q4_0", "lm_head": "bf16"}
    table = 65024 * 4544
    assert m.weight_bytes_resident(mixed) == pytest.approx(
        (m.param_count() - table) * 4.5 / 8 + table * 2, rel=1e-15)
    assert m.weight_bytes_read(1, mixed) <= m.weight_bytes_resident(mixed)


def test_groups_at_different_rates_combine_into_one_time():
    m, h100 = km.Model.preset("mixtral-8x7b"), km.Chip.preset("h100-sxm")
    p = m.matmul_params_by_group()
    rate = km.Deployment(m, h100, weights={"default": "bf16", "experts": "fp8"}).flops
    # the same time as each group at its own rate: fp8 experts at 1978.9e12, the rest at 989.4e12
    seconds_per_token = 2 * p["experts"] / 1978.9e12 + 2 * (sum(p.values()) - p["experts"]) / 989.4e12
    assert 2 * sum(p.values()) / rate == pytest.approx(seconds_per_token, rel=1e-12)
    from kvmath.rates import compute_rate  # the rule Deployment.flops uses; without a model it cannot combine

    with pytest.raises(ValueError, match="pass the model"):
        compute_rate(h100, {"default": "bf16", "experts": "fp8"})


def test_speculation_on_moe_pays_for_the_experts_its_drafts_touch():
    chip, m = km.Chip.preset("h100-sxm"), km.Model.preset("mixtral-8x7b")
    dep = km.Deployment(m, chip)
    s = dep.speculate(1, 1024, 4, 0.8)
    # five tokens touch 8 (1 - (3/4)^5) = 6.10 experts per layer against 2: the verify step is dearer
    assert s.verify_step_s > 2 * s.plain_step_s and s.speedup < 2
    floor = dep.speculate(1, 1024, 4, 0.8, routing="floor")
    assert floor.speedup == pytest.approx(3.3616, rel=0.01)


@given(batch, batch, st.sampled_from([2, 4, 8]))
def test_batch_sharding_is_monotone_in_a_fractional_batch(b1, b2, n):
    m, c = km.Model.preset("llama-3-8b"), km.Chip.preset("h100-sxm")
    lo, hi = sorted((b1, b2))
    dep = km.Deployment(m, c, f"tp={n},kv=batch", link=None)
    assert dep.step(lo, 4096).strict_s <= dep.step(hi, 4096).strict_s * (1 + 1e-12)


def test_speculation_stops_paying_where_the_verify_step_turns_compute_bound():
    m, h100 = km.Model.preset("llama-3-8b"), km.Chip.preset("h100-sxm")
    dep = km.Deployment(m, h100)
    b = speculation_break_even_batch(dep, 128, 4, 0.8)
    s = dep.speculate(np.array([b / 2, b, 2 * b]), 128, 4, 0.8)
    assert s.speedup[0] > 1 and s.speedup[1] == pytest.approx(1, abs=1e-6) and s.speedup[2] < 1
    # at the break-even batch the verify step is compute-bound: its math outlasts its reads
    verify = dep.step(b, 128, tokens_per_seq=5)
    assert verify.binds == "compute"
    with pytest.raises(ValueError, match="does not pay"):
        speculation_break_even_batch(dep, 128, 4, 0.0)


@pytest.mark.parametrize("kwargs, words", [
    (dict(gamma=0), "gamma"), (dict(gamma=2.5), "gamma"), (dict(acceptance=1.5), "acceptance"),
    (dict(acceptance=float("nan")), "acceptance"), (dict(context=-1), "context"), (dict(model="llama3-8b"), "model"),
])
def test_speculation_break_even_batch_refuses_bad_input_by_name(kwargs, words):
    args = dict(model=km.Model.preset("llama-3-8b"), chip=km.Chip.preset("h100-sxm"), context=128, gamma=4, acceptance=0.8)
    args.update(kwargs)
    with pytest.raises(ValueError, match=words):  # a bad model name is refused where the deployment is built
        speculation_break_even_batch(km.Deployment(args.pop("model"), args.pop("chip")), **args)


# ----- the deployment: hand computations, routing on every layout, one result shape, checks at construction ---------

def test_llama_2_70b_on_8_h100s_by_hand():
    """tp = 8, B = 64, S = 4096, bf16: each chip's reads, math and NVLink all-reduces, term by term."""
    dep = km.Deployment("llama-2-70b", "h100-sxm", "tp=8")
    assert dep.link.name == "nvlink4"  # the chip preset's own interconnect, without being told
    s = dep.step(64, 4096)
    # L = 80, d = 8192, h = 64, h_kv = 8, d_h = 128, d_ff = 28672, vocab = 32000 (untied), bf16
    attention = 8192 * 64 * 128 + 2 * 8192 * 8 * 128 + 64 * 128 * 8192
    mlp = 3 * 8192 * 28672
    # every layer's weights, the norms and the LM head split 8 ways, plus the batch's 64 embedding rows
    weights = 2 * (80 * (attention + mlp) + (2 * 80 + 1) * 8192 + 32000 * 8192 + 64 * 8192) / 8
    assert s.weight_bytes_read == pytest.approx(weights, rel=1e-15)
    # one KV head of 8 per chip: 64 sequences x 4096 tokens x 80 layers x K and V x 128 x 2 bytes
    assert s.kv_bytes_read == 64 * 4096 * 80 * 2 * 128 * 2 == 10_737_418_240
    # two all-reduces per layer of B d b_act = 1,048,576 bytes over 8 chips; NVSwitch reduces in the switch,
    # so the best all-reduce moves min(2 (N - 1) / N S, S) = S at 450 GB/s, plus one 0.5 us latency
    message = 64 * 8192 * 2
    allreduce = min(2 * 7 / 8 * message, message) / 450e9 + 0.5e-6
    assert s.comm_s == pytest.approx(2 * 80 * allreduce, rel=1e-12)  # 452.83 us
    assert s.comm_s * 1e6 == pytest.approx(452.83, abs=0.005)
    w, c = 3.35e12, 989.4e12
    memory = (weights + 10_737_418_240) / w
    flops = (2 * 64 * dep.model.matmul_params_per_token() + 64 * 4 * 80 * 64 * 128 * 4096) / 8
    assert s.weight_flops + s.attention_flops == pytest.approx(flops, rel=1e-12)
    assert s.strict_s == pytest.approx(max(memory, flops / c, s.comm_s), rel=1e-12)  # 8.333 ms, memory-bound
    assert s.strict_s * 1e3 == pytest.approx(8.333, abs=5e-4) and s.binds == "memory"
    assert s.no_overlap_s == pytest.approx(s.kv_read_s + s.weight_read_s + s.comm_s, rel=1e-12)  # both reads bind
    # the same step without a link: the old default, communication not counted
    assert dep.replace(link=None).step(64, 4096).comm_s == 0


def test_routing_works_on_every_layout():
    """Speculative decoding on tp = 2 of a dense model: the speed-up of the old n_chips=2 path (3.36)."""
    one = km.Deployment("llama-3-8b", "h100-sxm", link=None)
    two = one.replace(layout="tp=2")
    # verify and plain steps on one chip and on two are both memory-bound: (1 - 0.8^5) / (1 - 0.8) = 3.3616 tokens
    # per step for about one step's time; the old path gave 3.3615926695051552 for both
    assert two.speculate(1, 128, 4, 0.8).speedup == pytest.approx(3.3615926695051552, rel=1e-12)
    assert one.speculate(1, 128, 4, 0.8).speedup == pytest.approx(3.3615926695051552, rel=1e-12)
    for layout in ("tp=2", "tp=2,kv=batch", "pp=2", "dp=2", "cp=2", "tp=2,pp=2"):
        dep = one.replace(layout=layout)
        for routing in ("floor", "uniform", "ceiling"):  # a dense model: every routing reads the same weights
            assert dep.step(8, 1024, routing=routing).strict_s == dep.step(8, 1024).strict_s, (layout, routing)
        assert dep.speculate(1, 128, 4, 0.8).speedup > 1, layout
    moe = km.Deployment("mixtral-8x7b", "h100-sxm", "tp=2", link=None)
    floor, uniform = moe.step(1, 1024), moe.step(1, 1024, routing="uniform")
    assert floor.weight_bytes_read == uniform.weight_bytes_read  # one token touches exactly k = 2 experts
    assert moe.step(8, 1024, routing="uniform").weight_bytes_read > moe.step(8, 1024).weight_bytes_read


@pytest.mark.parametrize("layout", [None, "tp=8", "tp=2,kv=batch", "cp=2"])
def test_a_mixed_step_without_a_chunk_is_the_decode_step_exactly(layout):
    """The issue's ulp: mixed_step(chunk_tokens=0) and step must be the same floats, not approximately."""
    dep = km.Deployment("llama-3-8b", "h100-sxm", layout)
    for b, s in ((64, 2000), (1, 128), (np.array([1.0, 7.0, 512.0]), np.array([100.0, 4096.0, 8191.0]))):
        step, mixed = dep.step(b, s), dep.mixed_step(b, s, 0)
        assert np.all(mixed.strict_s == step.strict_s), (layout, b, s)
        assert np.all(mixed.decode_only_s == step.strict_s)
        assert np.all(mixed.weight_bytes_read == step.weight_bytes_read)
        assert np.all(mixed.kv_bytes_read == step.kv_bytes_read)
        assert np.all(mixed.comm_s == step.comm_s)
        assert np.all(mixed.slowdown == 1.0)


def _attribute_names(result) -> set:
    cls = type(result)
    names = {f.name for f in __import__("dataclasses").fields(result)}
    return names | {k for c in cls.__mro__ for k, v in vars(c).items() if isinstance(v, property) and not k.startswith("_")}


def test_every_result_dict_has_exactly_its_attribute_names():
    dep = km.Deployment("llama-3-8b", "h100-sxm", "tp=2")
    results = [dep.step(8, 1024), dep.prefill(1, 512), dep.request(8, 512, 64, price_per_chip_hour=2.0),
               dep.mixed_step(8, 1024, 256), dep.steady_state(8, 512, 64, price_per_chip_hour=2.0),
               dep.frontier(512, 64), dep.capacity(4096), dep.speculate(1, 128, 4, 0.8)]
    for result in results:
        d = result.to_dict()
        assert set(d) == _attribute_names(result), type(result).__name__
        for key, value in d.items():
            assert np.all(np.asarray(value, dtype=object) == np.asarray(
                km.results.plain_value(getattr(result, key)), dtype=object)), (type(result).__name__, key)
    import json
    json.dumps(results[0].to_dict())  # JSON-ready: plain numbers


@pytest.mark.parametrize("change, words", [
    (dict(model="llama2-7b"), "did you mean 'llama-2-7b'"),
    (dict(model=7), "model"),
    (dict(chip="h100"), "did you mean 'h100-sxm'"),
    (dict(chip=km.Model.preset("llama-2-7b")), "chip"),
    (dict(layout="tp=3"), r"layout: tp \(3\) must divide the 32 heads"),
    (dict(layout="tp=2.5"), "layout"),
    (dict(layout=(2, 1)), "layout"),
    (dict(weights="bf8"), "weights"),
    (dict(weights={"attn": "fp8"}), "weights"),
    (dict(kv="bf8"), "kv"),
    (dict(kv=0), "kv"),
    (dict(compute="fp32"), "compute"),
    (dict(formats="bf16"), "formats"),
    (dict(formats=km.Formats(activations="bf8")), "activations"),
    (dict(formats=km.Formats(dispatch="bf8")), "dispatch"),
    (dict(formats=km.Formats(), weights="fp8"), "either in formats or as arguments"),
    (dict(link="nvlink9"), "link: unknown link 'nvlink9'"),
    (dict(link=3), "link"),
    (dict(node_link="nvlink9"), "node_link"),
    (dict(chips_per_node=0), "chips_per_node"),
    (dict(chips_per_node=2.5), "chips_per_node"),
])
def test_a_deployment_refuses_bad_input_by_name_when_built(change, words):
    args = dict(model="llama-2-7b", chip="h100-sxm")
    args.update(change)
    with pytest.raises(ValueError, match=words):
        km.Deployment(**args)


def test_a_deployment_is_immutable_and_replace_checks_again():
    dep = km.Deployment("llama-2-7b", "h100-sxm")
    with pytest.raises(AttributeError, match="immutable"):
        dep.layout = km.ParallelLayout(tp=2)
    with pytest.raises(ValueError, match=r"tp \(3\) must divide"):
        dep.replace(layout="tp=3")
    assert dep.replace(layout="tp=4").n_chips == 4


def test_tensor_parallel_all_reduces_stay_on_nvlink_and_only_the_pipeline_hop_crosses_infiniband():
    """Llama 3.1 405B on two nodes of 8 H100s (tp = 8 in a node, pp = 2 across), B = 32.

    With pp = 2 each chip's pass carries B / pp = 16 sequences: T d b_act =
    16 x 16384 x 2 = 524,288 bytes per all-reduce, 2 L = 252 of them (L = 126)
    over 8 chips, and one point-to-point hop of the same bytes between stages.
    All on InfiniBand (the old all-on-one-link figure) the all-reduces take
    252 x (2 x 7/8 x 524,288 / 50e9 + 0.5 us) = 4.75 ms, 4.76 ms with the hop;
    inside the node over NVLink (in-switch reduction: S bytes) 252 x
    (524,288 / 450e9 + 0.5 us) = 0.4196 ms, and the hop over InfiniBand adds
    524,288 / 50e9 + 0.5 us = 10.99 us: 0.4306 ms.
    """
    m = km.Model.preset("llama-3.1-405b")
    assert (m.n_layers, m.d_model) == (126, 16384)
    message = 16 * 16384 * 2
    nvlink = message / 450e9 + 0.5e-6            # in-switch reduction: S bytes, one latency
    ib_allreduce = 2 * 7 / 8 * message / 50e9 + 0.5e-6
    hop = message / 50e9 + 0.5e-6
    two_tier = km.Deployment(m, "h100-sxm", "tp=8,pp=2", chips_per_node=8, link="nvlink4", node_link="ib-ndr400")
    s = two_tier.step(32, 4096)
    assert s.micro_batch == 16
    assert s.comm_s == pytest.approx(252 * nvlink + hop, rel=1e-12)
    assert s.comm_s * 1e3 == pytest.approx(0.4306, abs=5e-5)
    all_ib = two_tier.replace(link="ib-ndr400", node_link="ib-ndr400").step(32, 4096)
    assert all_ib.comm_s == pytest.approx(252 * ib_allreduce + hop, rel=1e-12)
    assert all_ib.comm_s * 1e3 == pytest.approx(4.76, abs=5e-3)
    one_node = two_tier.replace(chips_per_node=16).step(32, 4096)  # all 16 chips on one NVLink fabric
    assert one_node.comm_s == pytest.approx(252 * nvlink + nvlink, rel=1e-12)
    assert one_node.comm_s * 1e3 == pytest.approx(0.42, abs=5e-3)


@pytest.mark.parametrize("layout", [None, "tp=2", "tp=2,kv=batch", "pp=2", "dp=2", "cp=2", "tp=2,pp=2"])
def test_the_strict_time_alone_is_the_steps_strict_time(layout):
    """Deployment.strict_s keeps fewer arrays alive, and is the same bound as step(...).strict_s, preset by preset."""
    batch = np.array([1.0, 3.0, 64.0, 1000.0])[:, None]
    context = np.array([1.0, 300.0, 4096.0, 131072.0])[None, :]
    compared = 0
    for name in km.Model.presets():
        for link in (None, "nvlink4"):
            try:
                dep = km.Deployment(name, "h100-sxm", layout, link=link)
            except ValueError:
                continue  # a layout this model does not split
            np.testing.assert_allclose(dep.strict_s(batch, context), dep.step(batch, context).strict_s, rtol=1e-14)
            compared += 1
    assert compared >= 20


def test_strict_s_equals_the_steps_bound_with_a_replicated_lm_head():
    # gpt-fast's tensor parallelism keeps the whole LM head on every chip (review R2: the grid path had left it out)
    from kvmath.layout import ParallelLayout

    dep = km.Deployment("llama-2-70b", "a100-80gb", ParallelLayout(tp=8, replicate_lm_head=True))
    batch, context = np.array([1.0, 8.0, 64.0]), np.array([512.0, 4096.0, 32768.0])
    assert np.array_equal(dep.strict_s(batch, context), dep.step(batch, context).strict_s)
    assert dep.strict_s(1.0, 512.0) == dep.step(1.0, 512.0).strict_s
    plain = km.Deployment("llama-2-70b", "a100-80gb", "tp=8")
    assert dep.strict_s(1.0, 512.0) > plain.strict_s(1.0, 512.0)  # the head's other 7/8 are read too


# ----- KV-cache formats: scales are bytes too (issue 26, the missing topic) -----

@pytest.mark.parametrize("name, element_bits, block, scale_bits, zero_bits", [
    ("kivi2-g32", 2, 32, 16, 16),   # KIVI: an fp16 scale and an fp16 minimum per group of 32 (jy-yuan/KIVI)
    ("kivi4-g32", 4, 32, 16, 16),
    ("fp8-g128", 8, 128, 32, 0),    # FlashMLA: one fp32 scale per 128 fp8 values
    ("int4-g128", 4, 128, 16, 0),   # AWQ-style: one fp16 scale per 128
    ("mxfp4", 4, 32, 8, 0),         # OCP MX: one E8M0 scale per 32
    ("nvfp4", 4, 16, 8, 0),         # NVFP4: one E4M3 scale per 16 (the fp32 per-tensor scale is negligible)
])
def test_block_formats_count_their_scales(name, element_bits, block, scale_bits, zero_bits):
    from kvmath.formats import block_bits
    by_hand = element_bits + (scale_bits + zero_bits) / block
    assert get_format(name).bits_per_weight == by_hand == block_bits(element_bits, block, scale_bits, zero_bits)
    assert get_format(name).block_size == block


def test_flashmla_fp8_cache_is_656_bytes_per_token():
    # FlashMLA README: 512 fp8 values + 4 fp32 scales + 64 bf16 RoPE values = 512 + 16 + 128 = 656 bytes
    r, rope = 512, 64
    assert r * km.units.dtype_bytes("fp8-g128") + rope * 2 == 656


def test_block_bits_refuses_a_bad_group_by_name():
    from kvmath.formats import block_bits
    with pytest.raises(ValueError, match="block_size must be a whole number"):
        block_bits(4, 12.5)
    with pytest.raises(ValueError, match="scale_bits must be >= 0"):
        block_bits(4, 32, -1)


def test_capacity_counts_token_slots_by_hand():
    # Mixtral 8x7B on one H200: 141e9 B less 46,702,792,704 bf16 weights (93,405,585,408 B) leaves 47,594,414,592 B;
    # a token holds 2 x 8 KV heads x 128 x 32 layers x 2 B = 131,072 B: floor(363,116.3) = 363,116 token slots
    cap = km.Deployment("mixtral-8x7b", "h200", "tp=1").capacity(3000)
    assert cap.kv_budget_bytes_per_chip == 141e9 - 2 * 46_702_792_704
    assert cap.max_tokens == (141e9 - 2 * 46_702_792_704) // (2 * 8 * 128 * 32 * 2) == 363_116
    # two replicas hold twice the slots
    assert km.Deployment("mixtral-8x7b", "h200", "dp=2").capacity(3000).max_tokens == 2 * 363_116
    # tp=2 with the cache split by sequence (kv=batch): each chip holds half the weights (46,702,792,704 B) and whole
    # sequences, floor((141e9 - 46,702,792,704) / 131,072) = 719,430 slots, on each of the 2 chips
    assert (141e9 - 46_702_792_704) // 131_072 == 719_430
    assert km.Deployment("mixtral-8x7b", "h200", "tp=2,kv=batch").capacity(3000).max_tokens == 2 * 719_430
    # whole 3,000-token sequences (393,216,000 B): floor(47,594,414,592 / 393,216,000) = 121 a replica, and
    # floor(94,297,207,296 / 393,216,000) = 239 on each chip of tp=2 kv=batch
    assert cap.max_batch == 121
    assert km.Deployment("mixtral-8x7b", "h200", "dp=2").capacity(3000).max_batch == 2 * 121
    assert km.Deployment("mixtral-8x7b", "h200", "tp=2,kv=batch").capacity(3000).max_batch == 2 * 239


def test_the_fast_strict_bound_prices_every_token_of_a_sequence():
    # strict_s is the step model's strict bound without its other terms: with 8 tokens a sequence (a verify step)
    # too, where the 512 tokens' matmuls and all-reduces bind more than one token's
    dep = km.Deployment("llama-3-8b", "h100-sxm", "tp=2")
    assert dep.strict_s(64, 4096, tokens_per_seq=8) == pytest.approx(dep.step(64, 4096, tokens_per_seq=8).strict_s,
                                                                     rel=1e-12)
    assert dep.strict_s(64, 4096, tokens_per_seq=8) > dep.strict_s(64, 4096) * (1 + 1e-6)


def test_pipeline_hops_cross_where_a_stage_boundary_is_a_node_boundary():
    from kvmath.deployment import _hops
    from kvmath.layout import parse_layout

    # stages of tp x cp x dp chips fill 8-chip nodes in order. tp=4,dp=2: a stage is a node, its one hop crosses.
    # tp=2,dp=2,pp=4: stages of 4 chips, two a node: of the 3 hops, the one between stages 2 and 3 crosses
    # (ceil(4 x 4 / 8) - 1 = 1), the other 2 stay inside
    one = _hops(parse_layout("tp=4,dp=2,pp=2"), 8, 1.0)
    assert [(t.count, t.crosses) for t in one] == [(1, True)]
    four = _hops(parse_layout("tp=2,dp=2,pp=4"), 8, 1.0)
    assert [(t.count, t.crosses) for t in four] == [(1, True), (2, False)]


def test_a_context_parallel_group_of_whole_nodes_is_accepted():
    # tp=4 x cp=6 = 24 chips, three whole 8-chip H100 nodes: the cp group (stride 4) spans 24 chips, a whole
    # number of nodes, so the layout is accepted although 6 alone neither divides 8 nor is a multiple of it
    # (the check applies where the nodes are joined by a link of their own)
    dep = km.Deployment("llama-3-70b", "h100-sxm", "tp=4,cp=6", node_link="ib-ndr400")
    assert dep.layout.n_chips == 24
