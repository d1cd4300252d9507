"""Links, the parallelism model, whole requests and the serving frontier: hand computations and properties."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvmath as km
from kvmath import Deployment
from kvmath.cli import main
from kvmath.layout import parse_layout
from kvmath.requests import prefill_attention_flops

settings.register_profile("kvmath", deadline=None, derandomize=True)
settings.load_profile("kvmath")

H100, A100 = km.Chip.preset("h100-sxm"), km.Chip.preset("a100-80gb")
NV4 = km.Link.preset("nvlink4")


def run_json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def ttft(dep, batch, input_tokens, chunk_tokens=None):
    """The time to the first token of ``batch`` prompts (the old prefill_bound): a one-token request's."""
    return dep.request(batch, input_tokens, 1, chunk_tokens=chunk_tokens).ttft_s


# ----- links ----------------------------------------------------------------------------------


def test_link_presets_state_per_direction_bandwidth_with_sources():
    # NVIDIA: A100 has 12 NVLinks of 25 GB/s each way (nccl-tests#149); H100's 450 GB/s is the
    # line rate one way and 900 GB/s adds both (nccl#1442); TPU v5e docs give 400 GB/s bidirectional.
    assert km.Link.preset("nvlink3").bandwidth == 12 * 25e9
    assert km.Link.preset("nvlink4").bandwidth == 450e9
    v5e = km.Link.preset("tpu-v5e-ici")
    assert v5e.stated_as == "bidirectional" and v5e.stated_bandwidth == 2 * v5e.bandwidth == 400e9
    # PCIe 4.0 x16: 16 lanes x 16 GT/s x 128/130 / 8 bits
    assert km.Link.preset("pcie4-x16").bandwidth == pytest.approx(16 * 16e9 * 128 / 130 / 8, rel=2e-3)
    for name in km.Link.presets():
        link = km.Link.preset(name)
        assert link.source and link.latency_source
        assert link.latency_is_assumption  # no vendor publishes a per-hop latency


def test_ring_all_reduce_bytes_and_time_by_hand():
    # 8 chips, 16 KiB: each sends 2 * 7/8 * 16384 = 28,672 bytes in 14 steps
    assert km.formulas.ring_allreduce_bytes(16384, 8) == 28672
    ring = km.formulas.allreduce_time(16384, 8, NV4, "ring")
    assert ring == pytest.approx(28672 / 450e9 + 14 * 0.5e-6, rel=1e-12)
    # one-shot: 7 x 16384 bytes in one step; in-switch (NVLS): 16384 up and back, 2 steps
    assert km.formulas.allreduce_time(16384, 8, NV4, "one_shot") == pytest.approx(7 * 16384 / 450e9 + 0.5e-6, rel=1e-12)
    assert km.formulas.allreduce_time(16384, 8, NV4, "in_switch") == pytest.approx(16384 / 450e9 + 1e-6, rel=1e-12)
    # two-shot: ring's bytes in 2 steps
    assert km.formulas.allreduce_time(16384, 8, NV4, "two_shot") == pytest.approx(28672 / 450e9 + 1e-6, rel=1e-12)
    # the bound: one step and the fewest bytes a chip must receive (S with the switch's sum)
    big = 1e9
    assert km.formulas.allreduce_time(big, 8, NV4) == pytest.approx(big / 450e9 + 0.5e-6, rel=1e-12)
    with pytest.raises(ValueError, match="in-switch"):
        km.formulas.allreduce_time(16384, 8, km.Link.preset("pcie4-x16"), "in_switch")


def test_estimate_uses_the_measured_floor_and_is_above_the_bound():
    # Azure ND H200 v5 nccl-tests (NVLS): about 30 us per call up to 64 KB
    est = km.formulas.allreduce_estimate(16384, 8, NV4)
    assert est == pytest.approx(30e-6 + 16384 / 450e9 + 0 * 1e-6, rel=1e-3)
    assert est > km.formulas.allreduce_time(16384, 8, NV4)
    # published measurements are never below the bound: 2x A100 over NVLink, 32 B, 10.14 us (nccl#583)
    assert km.formulas.allreduce_time(32, 2, km.Link.preset("nvlink3")) < 10.14e-6
    # MSCCL++ one-shot NVLS all-reduce, 1 KB in 5.45 us (mscclpp#507): the bound stays below
    assert km.formulas.allreduce_time(1024, 8, NV4) < 5.45e-6


links = st.sampled_from([km.Link.preset(n) for n in km.Link.presets()])
messages = st.floats(0, 1e10)
chips = st.integers(1, 512)


@given(messages, chips, links, st.sampled_from(["best", "ring", "one_shot"]))
def test_communication_is_zero_on_one_chip_and_never_negative(size, n, link, algorithm):
    t = km.formulas.allreduce_time(size, n, link, algorithm)
    assert t >= 0 and km.formulas.all_to_all_time(size, n, link) >= 0
    if n == 1:
        assert t == 0 and km.formulas.all_to_all_time(size, 1, link) == 0
        assert Deployment("llama-2-70b", H100, link=link).step(1 + size / 1e6, 1).comm_s == 0


# ----- the parallelism model -------------------------------------------------------------------


def test_kv_heads_replicate_when_chips_outnumber_them():
    # Llama 3 8B: 8 KV heads of 128, 32 layers, bf16: 131,072 B per token. On 16 chips each holds
    # ceil(8 / 16) = 1 head, an eighth of the cache, not a sixteenth.
    m = km.Model.preset("llama-3-8b")
    kv_seq = 32 * 2 * 8 * 128 * 2 * 1000
    assert m.kv_bytes_per_seq(1000) == kv_seq
    s = Deployment(m, H100, km.ParallelLayout(tp=16)).step(4, 1000)
    assert s.kv_bytes_read == 4 * kv_seq / 8 == 65_536_000
    # by sequence (context parallelism) the same 16 chips split it 16 ways
    s = Deployment(m, H100, km.ParallelLayout(tp=8, cp=2)).step(4, 1000)
    assert s.kv_bytes_read == 4 * kv_seq / 16


def test_mla_latent_is_replicated_by_tensor_parallelism_and_split_by_sequence():
    # DeepSeek-V3: (512 + 64) elements x 61 layers x 2 B = 70,272 B per token, shared by all 128 heads
    m = km.Model.preset("deepseek-v3")
    total = 8 * 4096 * 70_272
    tp8 = Deployment(m, "h200", km.ParallelLayout(tp=8), weights="fp8").step(8, 4096)
    assert tp8.kv_bytes_read == total
    cp8 = Deployment(m, "h200", km.ParallelLayout(cp=8), weights="fp8").step(8, 4096)
    assert cp8.kv_bytes_read == total / 8
    dp8 = Deployment(m, "h200", km.ParallelLayout(dp=8, ep=8), link=NV4, weights="fp8").step(8, 4096)
    assert dp8.kv_bytes_read == total / 8
    assert dp8.comm_s > 0  # dispatch and combine all-to-alls


def test_expert_parallelism_replicates_attention_and_shares_routed_experts():
    m = km.Model.preset("deepseek-v3")
    resident = m.weight_bytes_resident_by_group("fp8")
    s = Deployment(m, "h200", km.ParallelLayout(dp=8, ep=8), weights="fp8").step(8, 4096)
    # every chip holds all of attention, dense MLPs, shared experts, router, tables, and 1/8 of the routed experts
    replicated = sum(resident.values()) - resident["experts"]
    assert s.weight_bytes_resident == pytest.approx(replicated + resident["experts"] / 8, rel=1e-12)
    with pytest.raises(ValueError, match="ep"):
        km.ParallelLayout(tp=2, ep=8).check(m)
    with pytest.raises(ValueError, match="dense"):
        km.ParallelLayout(dp=2, ep=2).check(km.Model.preset("llama-2-70b"))


def test_52b_on_three_gpus_cannot_use_three_way_tensor_parallelism_but_can_pipeline():
    # kipply: 52B in fp16 needs 3 A100-40GB; 64 heads do not split 3 ways
    m = km.Model.preset("kipply-52b")
    with pytest.raises(ValueError, match="tp \\(3\\) must divide the 64 heads"):
        km.ParallelLayout(tp=3).check(m)
    a100 = km.Chip.preset("a100-40gb")
    step = Deployment(m, a100, km.ParallelLayout(pp=3), link=km.Link.preset("nvlink3"), weights="fp16").step(1, 100)
    one = Deployment(m, a100, weights="fp16").step(1, 100)
    # at batch 1 a pipeline is no faster than one chip (each stage waits for the one before),
    # plus two point-to-point hops of 8192 x 2 bytes
    assert step.strict_s == pytest.approx(one.strict_s, rel=1e-12)
    assert step.comm_s == pytest.approx(2 * (16384 / 300e9 + 0.5e-6), rel=1e-12)
    assert step.memory_bytes < 40e9  # 22 of 64 layers and one table per chip: it fits


def test_tensor_parallel_layout_text_reproduces_the_tensor_parallel_step():
    # the old n_chips=8 path is the layout text "tp=8" now: the same numbers as the ParallelLayout
    m = km.Model.preset("llama-2-70b")
    for batch, context in ((1, 128), (64, 4096), (512, 32768)):
        old = Deployment(m, H100, "tp=8", link=None).step(batch, context)
        new = Deployment(m, H100, km.ParallelLayout(tp=8), link=None).step(batch, context)
        assert new.strict_s == pytest.approx(old.strict_s, rel=1e-12)
        assert new.no_overlap_s == pytest.approx(old.no_overlap_s, rel=1e-12)


def test_tp_comm_enters_the_strict_bound_as_a_max_and_the_no_overlap_form_as_a_sum():
    m = km.Model.preset("llama-2-70b")
    slow = NV4.replace(latency_s=100e-6)  # a link so slow that communication binds
    base = Deployment(m, H100, "tp=8", link=None).step(1, 4096)
    s = Deployment(m, H100, "tp=8", link=slow).step(1, 4096)
    assert s.comm_s == pytest.approx(160 * (16384 / 450e9 + 100e-6), rel=1e-12)  # the floor: S / W + alpha
    assert s.binds == "communication"
    assert s.strict_s == pytest.approx(max(base.strict_s, s.comm_s), rel=1e-12)
    assert s.no_overlap_s == pytest.approx(base.no_overlap_s + s.comm_s, rel=1e-12)


models = st.sampled_from(["llama-3-8b", "llama-2-70b", "mixtral-8x7b", "deepseek-v3", "gemma-2-9b", "falcon-40b"])


@given(models, st.integers(1, 2048), st.integers(1, 100_000), links)
def test_one_chip_reproduces_the_single_chip_bound(name, batch, context, link):
    m = km.Model.preset(name)
    single = Deployment(m, H100, link=None).step(batch, context)
    laid = Deployment(m, H100, km.ParallelLayout(), link=link).step(batch, context)
    assert laid.comm_s == 0
    assert laid.strict_s == pytest.approx(single.strict_s, rel=1e-12)
    assert laid.no_overlap_s == pytest.approx(single.no_overlap_s, rel=1e-12)


def _layouts(m):
    out = [km.ParallelLayout(tp=t, cp=c, dp=d, pp=p) for t in (1, 2, 4, 8) for c in (1, 2) for d in (1, 2) for p in (1, 2, 4)
           if m.n_heads % t == 0]
    if m.n_experts:
        out += [km.ParallelLayout(tp=t, dp=d, ep=t * d) for t in (1, 2) for d in (2, 4) if m.n_experts % (t * d) == 0]
    return out


@given(models, st.integers(1, 512), st.integers(1, 50_000), st.data())
def test_per_chip_memory_is_at_least_the_total_over_the_chips(name, batch, context, data):
    m = km.Model.preset(name)
    layout = data.draw(st.sampled_from(_layouts(m)))
    kv = m.kv_bytes_per_seq(context)
    s = Deployment(m, H100, layout, link=NV4).step(batch, context)
    total = m.weight_bytes_resident() + batch * kv
    assert s.memory_bytes >= total / layout.n_chips * (1 - 1e-12)
    assert s.comm_s >= 0


# ----- whole requests --------------------------------------------------------------------------


def test_ttft_and_decode_sum_for_a_small_case_by_hand():
    # Llama 2 7B on an A100-80GB (2.039e12 B/s, 312e12 FLOP/s), 2 requests of 3 tokens in, 4 out.
    m = km.Model.preset("llama-2-7b")
    L, d, h, dh, V = 32, 4096, 32, 128, 32000
    P = m.param_count()
    kv_token = L * 2 * h * dh * 2                        # 524,288 B
    matmul = P - V * d - (2 * L + 1) * d                 # the input embedding and norms do no matmuls
    # prefill: 2 x (2 (P_matmul - V d) 3 + 2 V d + 4 L h d_h (1 + 2 + 3)); reads the weights once
    flops = 2 * (2 * (matmul - V * d) * 3 + 2 * V * d + 4 * L * h * dh * 6)
    weights_read = (P - V * d) * 2 + 6 * d * 2           # 6 embedding rows looked up
    ttft = max(flops / 312e12, (weights_read + 2 * 3 * kv_token) / 2.039e12)
    r = Deployment(m, A100).request(2, 3, 4)
    assert r.ttft_s == pytest.approx(ttft, rel=1e-12)
    # decode: 3 steps over caches of 4, 5, 6 tokens, each memory-bound
    steps = [((P - V * d) * 2 + 2 * d * 2 + 2 * s * kv_token) / 2.039e12 for s in (4, 5, 6)]
    assert r.decode_s == pytest.approx(sum(steps), rel=1e-12)
    assert r.total_s == pytest.approx(ttft + sum(steps), rel=1e-12)
    assert r.time_per_output_token_s == pytest.approx(sum(steps) / 3, rel=1e-12)
    assert r.output_tokens_per_s == pytest.approx(8 / (ttft + sum(steps)), rel=1e-12)
    priced = Deployment(m, A100).request(2, 3, 4, price_per_chip_hour=3.6)
    assert priced.cost_per_million_tokens == pytest.approx(3.6 * (ttft + sum(steps)) / 3600 / 8 * 1e6, rel=1e-12)


@pytest.mark.parametrize("name, layout, link", [
    ("llama-3-8b", km.ParallelLayout(), None),
    ("gemma-2-9b", km.ParallelLayout(), None),                 # sliding windows fill up mid-request
    ("llama-2-70b", km.ParallelLayout(tp=8), NV4.replace(latency_s=20e-6)),  # communication binds at small batch
    ("mixtral-8x7b", km.ParallelLayout(tp=2, pp=2), NV4),
    # windows that are no model.sliding_window: a dsa layer's top-k of 2,048 tokens, Llama 4's 8,192-token chunks
    ("deepseek-v3.2", km.ParallelLayout(tp=8), NV4),
    ("llama-4-scout", km.ParallelLayout(tp=4), NV4),
])
def test_closed_form_decode_sum_equals_the_sum_of_step_bounds(name, layout, link):
    m = km.Model.preset(name)
    batches = np.array([1, 37, 512, 4096])[:, None]
    shapes = [(5, 1), (1, 2), (100, 300), (3000, 2500), (8000, 400)]
    dep = Deployment(m, H100, layout, link=link)  # link=None: no communication, as before
    r = dep.request(batches, [s for s, _ in shapes], [o for _, o in shapes])
    for i, b in enumerate(batches[:, 0]):
        for j, (s_in, s_out) in enumerate(shapes):
            steps = dep.step(b, np.arange(s_in + 1, s_in + s_out)) if s_out > 1 else None
            strict = 0.0 if steps is None else np.sum(steps.strict_s)
            loose = 0.0 if steps is None else np.sum(steps.no_overlap_s)
            assert r.decode_s[i, j] == pytest.approx(strict, rel=1e-11, abs=1e-15)
            assert r.decode_no_overlap_s[i, j] == pytest.approx(loose, rel=1e-11, abs=1e-15)


def test_decode_with_a_shared_prefix_by_hand():
    """Llama 3 8B on one H100 (3.35e12 B/s), 32 requests of 4,096 tokens in and 256 out, the first 2,048 tokens a
    prefix found cached (2,048 reused: whole 16-token blocks). Each of the 255 decode steps, over a cache of S =
    4,097 .. 4,351 tokens, is memory-bound (32 tokens against a ridge of ~295 FLOPs a byte): it reads the weights
    but the embedding table, 32 embedding rows, and each sequence's cache of S tokens (131,072 B a token) less the
    prefix's, read once for the 32 sequences that share it: h x 2,048 x 131,072 x (1 - 1/32) B left out of each.
    Summed in closed form here: 1.857721 s with every request hitting (the library said 1.143 s: it drew each
    line through the steps at contexts 1 and 2, where the prefix's share exceeds the cache and the reads, clipped
    at none, stop growing), 2.174435 s with half of them."""
    m = km.Model.preset("llama-3-8b")
    P, V, d, kv = m.param_count(), 128_256, 4096, 32 * 2 * 8 * 128 * 2
    weights = (P - V * d) * 2 + 32 * d * 2
    n, contexts = 255, sum(range(4097, 4352))
    for hit in (1.0, 0.5):
        shared = hit * 2048 * kv * (1 - 1 / 32)
        by_hand = (n * weights + 32 * (kv * contexts - n * shared)) / 3.35e12
        r = Deployment(m, H100).request(32, 4096, 256, prefix_tokens=2048, prefix_hit_rate=hit)
        assert r.reused_tokens == 2048
        assert r.decode_s == pytest.approx(by_hand, rel=1e-12), hit
        assert r.decode_no_overlap_s == pytest.approx(by_hand, rel=1e-12), hit
    assert by_hand == pytest.approx(2.174435, abs=1e-6)


@pytest.mark.parametrize("name, layout", [
    ("llama-3-8b", km.ParallelLayout()),
    ("gemma-3-27b", km.ParallelLayout(tp=2)),        # windows of 1,024 tokens, the prefix longer than them
    ("deepseek-v3.2", km.ParallelLayout(tp=8)),      # top-k reads: a long prefix's share exceeds them
    ("mixtral-8x7b", km.ParallelLayout(tp=2, pp=2)),
])
def test_closed_form_decode_sum_with_a_prefix_equals_the_sum_of_its_steps(name, layout):
    """With a cached prefix each decode step at context S reads its cache less the prefix's share (at least none):
    the closed form against that step at every context, summed. DeepSeek-V3.2 reads 2,048 tokens' latents and
    every token's indexer key, so with an 8,500-token prefix that 40% of 64 requests hit, the share exceeds the reads for
    the first ~5,700 contexts and not after: both sides of that crossing are asserted to occur."""
    from kvmath.prefix import reused_tokens
    from kvmath.requests import _pass

    dep = Deployment(km.Model.preset(name), H100, layout, link=NV4)
    plan = dep._plan
    batches = np.array([1, 3, 64])[:, None]
    s_in, s_out = np.array([100, 2000, 9000]), np.array([50, 3000, 9000])
    prefix, hit = np.array([64, 1999, 8500]), np.array([1.0, 0.6, 0.4])
    r = dep.request(batches, s_in, s_out, prefix_tokens=prefix, prefix_hit_rate=hit)
    crossings = set()
    for i, b in enumerate(batches[:, 0]):
        for j in range(3):
            reused = reused_tokens(prefix[j], 16, s_in[j])
            # read once by the chip's sequences (b, or its pipeline's micro-batch) that hit it
            shared = hit[j] * (plan.kv_per_seq(reused) - plan.state_bytes) * (1 - 1 / max(plan.micro(b), 1.0))
            contexts = np.arange(s_in[j] + 1, s_in[j] + s_out[j], dtype=float)
            crossings.update(np.sign(plan.kv_read_per_seq(contexts) - shared))
            steps = _pass(dep, float(b), contexts, kv_seq=plan.kv_per_seq(contexts) - shared)
            assert r.decode_s[i, j] == pytest.approx(np.sum(steps.strict_s), rel=1e-11), (b, j)
            assert r.decode_no_overlap_s[i, j] == pytest.approx(np.sum(steps.no_overlap_s), rel=1e-11), (b, j)
    if name == "deepseek-v3.2":
        assert crossings == {-1.0, 1.0}


def test_chunked_prefill_never_beats_one_pass_and_matches_it_when_compute_bound():
    m = km.Model.preset("llama-2-7b")
    dep = Deployment(m, A100)
    one = ttft(dep, 1, 2048)
    assert one == pytest.approx(dep.prefill(1, 2048).strict_s, rel=1e-12)  # one pass, on one chip
    assert ttft(dep, 1, 2048, chunk_tokens=512) == pytest.approx(one, rel=1e-12)
    assert ttft(dep, 1, 2048, chunk_tokens=64) > one   # 32 chunks, each reading 13 GB of weights
    assert ttft(dep, 1, 2048, chunk_tokens=4096) == pytest.approx(one, rel=1e-12)


def test_prefill_attention_flops_sum_causally_with_windows():
    # Gemma 2 9B: 21 of 42 layers attend over at most 4096 tokens; 4 h d_h = 16384 FLOPs per cached token per layer
    m = km.Model.preset("gemma-2-9b")
    s, w = 10_000, 4096
    full = 21 * s * (s + 1) / 2
    local = 21 * (w * (w + 1) / 2 + (s - w) * w)
    assert prefill_attention_flops(m, s) == pytest.approx(4 * 16 * 256 * (full + local), rel=1e-12)


@given(models, st.integers(1, 64), st.integers(1, 20_000), st.integers(1, 20_000))
def test_ttft_is_monotone_in_input_length(name, batch, s1, s2):
    lo, hi = sorted((s1, s2))
    m = km.Model.preset(name)
    dep = Deployment(m, H100)
    assert ttft(dep, batch, lo) <= ttft(dep, batch, hi)


@given(models, st.integers(1, 256), st.integers(1, 8000), st.integers(1, 4000), st.integers(1, 4000))
def test_total_time_is_monotone_in_output_length(name, batch, s_in, o1, o2):
    lo, hi = sorted((o1, o2))
    m = km.Model.preset(name)
    r = Deployment(m, H100, km.ParallelLayout(tp=2), link=NV4).request(batch, s_in, np.array([lo, hi]))
    assert r.total_s[0] <= r.total_s[1]


# ----- the serving frontier -------------------------------------------------------------------


def test_frontier_memory_cap_and_best_batch_by_hand():
    # Llama 3 70B in bf16 on 8 H100s: 141.1 GB of weights, 17.64 GB a chip; 80 GB less that holds
    # 1999-token caches of 327,680 / 8 B per token per chip
    m = km.Model.preset("llama-3-70b")
    f = Deployment(m, H100, km.ParallelLayout(tp=8), link=NV4).frontier([1000, 4000], [1000, 1000], tpot_limit_s=0.015)
    per_chip_weights = m.weight_bytes_resident() / 8
    for j, last in enumerate((1999, 4999)):
        assert f.max_batch[j] == math.floor((80e9 - per_chip_weights) / (327_680 / 8 * last))
    assert f.max_batch[0] == 761
    b = int(f.best_batch[0])
    assert f.requests.time_per_output_token_s[b - 1, 0] <= 0.015 < f.requests.time_per_output_token_s[b, 0]
    assert np.isnan(f.throughput_per_chip[int(f.max_batch[0]), 0])  # one past the cap does not fit


def test_frontier_gives_the_chip_with_more_hbm_the_higher_throughput_where_capacity_limits_the_batch():
    """Llama 3 8B in bf16, 100 tokens in and 2,000 out, on an H100 (80 GB, 3.35 TB/s, 989.4 TFLOP/s) and on the same
    chip with 141 GB (an H200's memory, the H100's rates). By hand: 16.06 GB of weights resident; the cache of the
    last step, 2,099 tokens of 131,072 B (32 layers x 8 KV heads x 128 x 2 x 2 B), fits 232 and 454 sequences. Every
    decode step reads the 15.01 GB of weights a step needs (the layers' 6.979e9 parameters and the 128,256 x 4,096
    head, 2 B each) plus each sequence's cache at contexts 101 .. 2,099 (mean 1,100), memory-bound, so throughput
    grows with the batch up to the cap; the prefill is the 100 prompt tokens' matmuls at the FLOP rate. Throughput
    per chip B x 2000 / (prefill + decode): 15,867 and 18,661 tokens/s, both at the cap (1%: norms and attention
    FLOPs left out by hand)."""
    layers = 32 * (4096 * (4096 + 1024 + 1024) + 4096 * 4096 + 3 * 4096 * 14336)
    head = 128256 * 4096
    W, C = 3.35e12, 989.4e12
    small = Deployment("llama-3-8b", H100)
    large = Deployment("llama-3-8b", H100.replace(hbm_bytes=141e9))
    expected = {}
    for dep, cap in ((small, 232), (large, 454)):
        decode = 1999 * 2 * (layers + head) / W + cap * 131072 * 1999 * 1100 / W
        prefill = 2 * cap * (100 * layers + head) / C
        expected[dep.chip.hbm_bytes] = cap * 2000 / (decode + prefill)
        f = dep.frontier(100, 2000)
        assert int(f.max_batch[0]) == cap == math.floor((dep.chip.hbm_bytes - 2 * 8.03e9) / (131072 * 2099))
        assert int(f.best_batch[0]) == cap  # the batch the KV capacity allows is the best one
        assert float(f.best_throughput_per_chip[0]) == pytest.approx(expected[dep.chip.hbm_bytes], rel=1e-2)
    assert expected[141e9] > 1.15 * expected[80e9]
    # the same through hbm_bytes, and in the estimate, which takes the bound's memory cap
    assert float(small.frontier(100, 2000, hbm_bytes=141e9).best_throughput_per_chip[0]) == pytest.approx(
        expected[141e9], rel=1e-2)
    from kvmath.estimate import estimate_frontier

    e_small, e_large = (estimate_frontier(d, 100, 2000) for d in (small, large))
    assert int(e_large.best_batch[0]) > int(e_small.best_batch[0])
    assert float(e_large.throughput_per_chip_estimate[0]) > float(e_small.throughput_per_chip_estimate[0])


# ----- the command line -----------------------------------------------------------------------


def test_run_json_has_every_key_and_agrees_with_the_library(capsys):
    r = run_json(capsys, "run", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--batch", "16", "--input", "1000",
                 "--output", "500", "--price-per-hour", "2")
    lib = Deployment(km.Model.preset("llama-3-8b"), H100).request(16, 1000, 500, price_per_chip_hour=2.0)
    assert list(r) == list(lib.to_dict())  # the JSON is the Request's to_dict()
    for key in ("ttft_s", "decode_s", "total_s", "time_per_output_token_s", "output_tokens_per_s", "cost_per_million_tokens"):
        assert r[key] == pytest.approx(float(getattr(lib, key)), rel=1e-12)
    unpriced = run_json(capsys, "run", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--input", "10", "--output", "5")
    assert unpriced["cost_per_million_tokens"] is None


def test_decode_json_comm_s(capsys):
    common = ["decode", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--batch", "1", "--context", "4096"]
    assert run_json(capsys, *common)["comm_s"] == 0
    assert run_json(capsys, *common, "--link", "nvlink4")["comm_s"] == 0  # one chip
    eight = run_json(capsys, *common, "--chips", "8", "--link", "nvlink4")
    assert eight["comm_s"] == pytest.approx(160 * (16384 / 450e9 + 0.5e-6), rel=1e-12)


def test_prefill_and_links_commands(capsys):
    p = run_json(capsys, "prefill", "--model", "llama-2-7b", "--hardware", "a100-80gb", "--input", "2048")
    assert p["request"]["ttft_s"] == pytest.approx(ttft(Deployment("llama-2-7b", A100), 1, 2048), rel=1e-12)
    assert p["prefill"]["binds"] == "compute"
    rows = run_json(capsys, "links")
    assert [r["name"] for r in rows] == km.Link.presets()


@pytest.mark.parametrize(
    "argv, words",
    [
        (["run", "--model", "kipply-52b", "--hardware", "a100-40gb", "--chips", "3", "--input", "9", "--output", "9"], "--chips"),
        (["run", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--parallel", "tp=two", "--input", "9", "--output", "9"], "--parallel"),
        (["run", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--parallel", "tp=2", "--chips", "4", "--input", "9",
          "--output", "9"], "--chips"),
        (["run", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--link", "nvlnk", "--input", "9", "--output", "9"], "--link"),
        (["run", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--input", "0", "--output", "9"], "--input"),
        (["run", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--input", "9", "--output", "1.5"], "--output"),
        (["run", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--input", "9", "--output", "9", "--price-per-hour", "-1"],
         "--price-per-hour"),
        (["run", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--input", "9"], "--output"),
        (["prefill", "--hardware", "h100-sxm", "--input", "9"], "--model"),
        (["prefill", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--input", "9", "--chunk-tokens", "0"], "--chunk-tokens"),
        (["decode", "--params", "7e9", "--kv-bytes-per-token", "1e5", "--hardware", "h100-sxm", "--batch", "1",
          "--context", "9", "--link", "nvlink4"], "--model"),
    ],
)
def test_bad_request_input_exits_2_with_one_line(capsys, argv, words):
    with pytest.raises(SystemExit) as exit_info:
        raise SystemExit(main(argv))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err


def test_decode_with_a_layout_from_the_command_line(capsys):
    common = ["decode", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--batch", "1", "--context", "4096", "--link", "nvlink4"]
    by_chips = run_json(capsys, *common, "--chips", "8")
    by_layout = run_json(capsys, *common, "--parallel", "tp=8")
    for key in ("strict_s", "no_overlap_s", "comm_s", "kv_bytes_read"):
        assert by_layout[key] == pytest.approx(by_chips[key], rel=1e-12)
    assert by_layout["n_chips"] == 8
    pipelined = run_json(capsys, *common, "--parallel", "tp=4,pp=2")
    assert pipelined["n_chips"] == 8 and pipelined["strict_s"] > by_layout["strict_s"]  # a pipeline does not cut batch-1 reads


def test_batch_one_on_eight_chips_against_a_published_measurement():
    # meta-llama/llama#471: LLaMA 65B on 8x A100-80GB (Meta's reference code, fp16), "one token latency
    # about 68~70 ms". Its shape: 80 layers, d = 8192, 64 heads, d_ff = 22016, vocab 32000.
    m = km.Model(name="llama-65b", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=64, head_dim=128,
                 d_ff=22016, vocab=32000)
    nv3 = km.Link.preset("nvlink3")
    s = Deployment(m, A100, "tp=8", link=nv3, weights="fp16").step(1, 512)
    assert s.strict_s < 0.068                             # the bound is not beaten
    assert 0.0080 < s.strict_s < 0.0081              # 130.6 GB / 8 / 2.039 TB/s plus the cache
    # 160 all-reduces of 16 KB: physics (0.5 us a hop, the floor 2 (N-1)/N S / W + alpha) 0.095 ms; at the
    # 10.14 us nccl-tests measured on two A100s (nccl#583) 1.6 ms: 0.15% and 2.7% of the 61 ms gap
    assert s.comm_s == pytest.approx(160 * (2 * 7 / 8 * 16384 / 300e9 + 0.5e-6), rel=1e-12)
    estimate = 160 * km.formulas.allreduce_estimate(16384, 8, nv3)
    gap = 0.069 - s.strict_s
    assert s.comm_s / gap < 0.003 and 0.02 < estimate / gap < 0.03


# ----- review-serving fixes (one test per item; each fails on the code before the fix) -------------

M8, M70, TP8 = km.Model.preset("llama-3-8b"), km.Model.preset("llama-3-70b"), km.ParallelLayout(tp=8)


@pytest.mark.parametrize("link", ["nvlink3", "nvlink4", "pcie4-x16", "amd-if-mi300x"])
def test_item1_best_all_reduce_is_below_two_shot_and_every_named_algorithm(link):
    L = km.Link.preset(link)
    sizes = np.array([32.0, 1024, 16384, 65536, 1 << 20, 16 << 20, 1e9])
    for n in (2, 3, 4, 8, 16):
        best = km.formulas.allreduce_time(sizes, n, L)
        names = ["ring", "one_shot", "two_shot"] + (["in_switch"] if L.in_switch_reduction else [])
        for name in names:
            assert np.all(best <= km.formulas.allreduce_time(sizes, n, L, name) * (1 + 1e-12))
        # by hand: one step, and the fewest bytes a chip must receive
        fewest = np.minimum(2 * (n - 1) / n * sizes, sizes) if L.in_switch_reduction else 2 * (n - 1) / n * sizes
        assert best == pytest.approx(fewest / L.bandwidth + L.latency_s, rel=1e-12)


def test_item1_two_shot_by_hand_and_the_step_it_changes():
    nv3, S = km.Link.preset("nvlink3"), 1 << 20
    two_shot = 2 * 7 / 8 * S / 300e9 + 2 * 0.5e-6                                  # 7.117 us
    assert km.formulas.allreduce_time(S, 8, nv3) == pytest.approx(two_shot - 0.5e-6, rel=1e-12)  # was 13.117 us (ring)
    assert km.formulas.allreduce_time(S, 8, nv3, "two_shot") == pytest.approx(two_shot, rel=1e-12)
    # Llama 2 70B on 8 A100s at B = 64: 160 all-reduces of 64 x 8192 x 2 bytes, below two-shot's 1.14 ms
    s = Deployment("llama-2-70b", "a100-80gb", "tp=8", link=nv3).step(64, 4096)
    message = 64 * 8192 * 2
    assert s.comm_s == pytest.approx(160 * (2 * 7 / 8 * message / 300e9 + 0.5e-6), rel=1e-12)
    assert s.comm_s < 160 * km.formulas.allreduce_time(message, 8, nv3, "two_shot") < 1.15e-3


def test_item2_ttft_under_pp_is_a_stage_share_plus_the_fill_not_the_whole_model():
    m, a40, nv3 = km.Model.preset("kipply-52b"), km.Chip.preset("a100-40gb"), km.Link.preset("nvlink3")
    flat_dep = Deployment(m, a40)
    one = ttft(flat_dep, 1, 2048)                              # 0.6907 s: every FLOP on one chip
    p = flat_dep.prefill(1, 2048)
    share = Deployment(m, a40, km.ParallelLayout(pp=3), link=None).prefill(1, 2048)
    assert share.weight_flops == pytest.approx(p.weight_flops / 3, rel=1e-12)
    assert share.weight_bytes_read == pytest.approx(p.weight_bytes_read / 3, rel=1e-12)
    # compute-bound: a third of the work, plus two stages that each read their weights and pass a token on
    fill = 2 * (p.weight_bytes_read / 3 / a40.bandwidth + 8192 * 2 / 300e9 + 0.5e-6)
    piped = ttft(Deployment(m, a40, km.ParallelLayout(pp=3), link=nv3), 1, 2048)
    assert piped == pytest.approx(one / 3 + fill, rel=1e-9)
    assert piped < 0.28 < one / 2
    # chunked: chunks overlap across stages: sum of the stage shares plus two chunks' fill, not the 1.095 s sum
    chunked = ttft(Deployment(m, a40, km.ParallelLayout(pp=3), link=None), 1, 2048, chunk_tokens=128)
    flat = ttft(flat_dep, 1, 2048, chunk_tokens=128)
    assert chunked < flat / 2
    first = ttft(Deployment(m, a40, km.ParallelLayout(pp=3, tp=1), link=None), 1, 128, chunk_tokens=128)
    # one 128-token chunk through 3 stages: 3 x its stage share; the 16-chunk prompt: 16 shares + 2 fills <= 18 / 3 x
    assert first == pytest.approx(ttft(flat_dep, 1, 128), rel=1e-9)
    assert chunked <= 18 / 3 * flat / 16 * 1.0001


@settings(max_examples=40)
@given(st.sampled_from(["kipply-52b", "llama-3-8b", "mixtral-8x7b", "gemma-2-9b"]), st.integers(1, 8),
       st.integers(16, 4096), st.integers(1, 4096), st.sampled_from([2, 3, 4]))
def test_item2_no_chunking_beats_the_unchunked_pp_bound(name, batch, prompt, chunk, pp):
    m = km.Model.preset(name)
    dep = Deployment(m, H100, km.ParallelLayout(pp=pp), link=NV4)
    free = ttft(dep, batch, prompt)
    assert free <= ttft(dep, batch, prompt, chunk_tokens=chunk) * (1 + 1e-12)


def test_item3_pipeline_micro_batches_are_not_rounded_up():
    m = km.Model.preset("llama-3.1-8b")
    dep = Deployment(m, H100, km.ParallelLayout(pp=2), link=None)
    b3, b4 = (dep.step(B, 131072) for B in (3, 4))
    # the whole model's figures at B = 4: the one-chip deployment's step
    whole = dep.replace(layout=None, link=None).step(4, 131072)
    w, kv = whole.weight_bytes_read, whole.kv_bytes_read / 4
    # three micro-batches of one: max(3 x (w + kv) / 2, w + kv) = 14.413 ms beats the old 14.737 ms "bound"
    schedule = max(3 * (w + kv) / 2, w + kv) / H100.bandwidth
    assert b3.strict_s <= schedule
    # the bound: max(B/pp, 1) sequences per pass, unrounded; B = 4 is two of two, as before
    assert b3.kv_read_s == pytest.approx(1.5 * kv / H100.bandwidth, rel=1e-12)
    assert b4.kv_read_s == pytest.approx(2 * kv / H100.bandwidth, rel=1e-12)


def test_item4_per_chip_figures_under_pp(capsys):
    common = ["prefill", "--model", "kipply-52b", "--hardware", "a100-40gb", "--input", "2048", "--link", "nvlink3"]
    # the one pass is a Step on one chip of the first stage: its kv_bytes_read is the cache it writes
    one, three = (run_json(capsys, *argv)["prefill"] for argv in (common, [*common, "--parallel", "pp=3"]))
    for key in ("weight_bytes_read", "kv_bytes_read", "weight_flops", "attention_flops"):
        assert three[key] == pytest.approx(one[key] / 3, rel=1e-12)
    assert three["weight_bytes_read"] < 36.5e9   # below what a chip holds
    m = km.Model.preset("llama-3-8b")
    d = run_json(capsys, "decode", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--batch", "3",
                 "--context", "8192", "--parallel", "pp=2")
    assert d["kv_bytes_read"] == pytest.approx(3 * m.kv_bytes_per_seq(8192) / 2, rel=1e-12)
    capsys.readouterr()


def test_item5_both_parallelism_paths_validate_alike(capsys):
    # the library and the command line refuse tp=3 of 64 heads alike, pointing at pp=3 and at kv=batch
    m, a40 = km.Model.preset("kipply-52b"), km.Chip.preset("a100-40gb")
    with pytest.raises(ValueError, match=r"layout: tp \(3\) must divide the 64 heads.*try pp=3"):
        Deployment(m, a40, "tp=3")
    Deployment(m, a40, "tp=3,kv=batch").step(1, 1000)  # by batch (the old shard="batch"), any count is valid
    with pytest.raises(ValueError, match="kv_split"):
        km.ParallelLayout(tp=8, kv_split="sequences")
    argv = ["decode", "--model", "kipply-52b", "--hardware", "a100-40gb", "--batch", "1", "--context", "1000",
            "--chips", "3"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--chips 3" in err and "--parallel pp=3" in err and len(err.strip().splitlines()) == 1
    assert main(["decode", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--batch", "1", "--context", "1000",
                 "--chips", "3", "--link", "nvlink4"]) == 2
    capsys.readouterr()


def test_item6_preset_names_are_accepted_and_other_types_refused_by_name():
    m, h = km.Model.preset("llama-3-8b"), H100
    by_object = Deployment(m, h, "tp=8", link=NV4).step(1, 4096)
    assert Deployment(m, h, "tp=8", link="nvlink4").step(1, 4096).comm_s == by_object.comm_s
    assert (Deployment(m, h, "tp=8").step(1, 4096).strict_s
            == Deployment(m, h, km.ParallelLayout(tp=8)).step(1, 4096).strict_s)
    assert Deployment("llama-3-8b", "h100-sxm").request(16, 1000, 500).ttft_s == Deployment(m, h).request(16, 1000, 500).ttft_s
    f = Deployment("llama-3-70b", h, "tp=8", link="nvlink4").frontier(1000, 1000, batch=[1, 64])
    assert f.found[0]
    with pytest.raises(ValueError, match="link must be a Link or a link preset name"):
        Deployment(m, h, "tp=8", link=450e9)
    with pytest.raises(ValueError, match="layout must be a ParallelLayout"):
        Deployment(m, h, 8)
    with pytest.raises(ValueError, match="model must be a Model"):
        Deployment(None, h)
    with pytest.raises(ValueError, match="unknown link"):
        km.formulas.allreduce_time(1024, 8, "nvlink9")


def test_item7_overflow_names_the_arguments_and_the_cli_prints_one_line(capsys):
    m = km.Model.preset("llama-3-8b")
    with pytest.raises(ValueError, match="request_times.*output_tokens=1e\\+300"):
        Deployment(m, H100).request(1, 1000, 1e300)
    with pytest.raises(ValueError, match="request_times.*batch=1e\\+300"):
        Deployment(m, H100).request(1e300, 1000, 10)
    with pytest.raises(ValueError, match="overflows"):
        Deployment(m, H100, "tp=2", link="nvlink4").step(1e300, 10)
    common = ["run", "--model", "llama-3-8b", "--hardware", "h100-sxm"]
    for extra in (["--input", "1000", "--output", "1e300"], ["--input", "1000", "--output", "10", "--batch", "1e300"],
                  ["--output", "10", "--input", "1e300"], ["--input", "1000", "--output", "10", "--batch", "1e300",
                                                           "--chips", "2", "--link", "nvlink4"]):
        assert main([*common, *extra, "--json"]) == 2
        cap = capsys.readouterr()
        assert cap.out == "" and len(cap.err.strip().splitlines()) == 1 and "overflows" in cap.err
    # a chunk longer than the prompt is the whole prompt: no overflow, no traceback
    whole = run_json(capsys, *common, "--input", "1000", "--output", "10")
    chunk = run_json(capsys, *common, "--input", "1000", "--output", "10", "--chunk-tokens", "1e300")
    assert chunk["ttft_s"] == whole["ttft_s"]


def test_item8_numpy_int32_degrees_do_not_wrap():
    L = km.ParallelLayout(dp=np.int32(65536), cp=np.int32(32768))
    assert L.n_chips == 2 ** 31 and type(L.dp) is int
    assert json.loads(json.dumps(dataclasses_asdict(km.ParallelLayout(tp=np.int32(8)))))["tp"] == 8


def dataclasses_asdict(x):
    import dataclasses
    return dataclasses.asdict(x)


def test_item9_one_output_token_has_no_tpot(capsys):
    r = Deployment(M8, H100).request(1, 100, 1)
    assert math.isnan(r.time_per_output_token_s) and math.isnan(r.tokens_per_s_per_user)
    assert r.decode_s == 0 and r.output_tokens_per_s == pytest.approx(1 / r.ttft_s, rel=1e-12)
    f = Deployment(M70, H100, TP8, link=None).frontier(1000, 1, batch=[1, 2], tpot_limit_s=0.01)
    assert not np.any(np.isinf(f.tokens_per_s_per_user)) and f.found[0]  # no TPOT: any limit is met
    common = ["run", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--input", "100", "--output", "1"]
    j = run_json(capsys, *common)
    assert j["time_per_output_token_s"] is None and j["tokens_per_s_per_user"] is None
    assert main(common) == 0
    assert "time per output token    n/a" in capsys.readouterr().out


def test_item10_price_broadcasts():
    r = Deployment(M8, H100).request(16, 1000, 500, price_per_chip_hour=np.array([1.0, 2.0]))
    one = Deployment(M8, H100).request(16, 1000, 500, price_per_chip_hour=2.0)
    assert r.cost_per_million_tokens[1] == pytest.approx(one.cost_per_million_tokens, rel=1e-12)
    assert r.cost_per_million_tokens[0] == pytest.approx(one.cost_per_million_tokens / 2, rel=1e-12)


def test_item11_shapes_named_and_a_2d_batch_refused():
    with pytest.raises(ValueError, match=r"batch \(3,\) and input_tokens \(2,\)"):
        Deployment(M8, H100).request([1, 2, 3], [100, 200], 500)
    with pytest.raises(ValueError, match=r"input_tokens \(3,\) and output_tokens \(2,\)"):
        Deployment(M8, H100).frontier([1000, 2000, 3000], [100, 200])
    with pytest.raises(ValueError, match=r"batch must be a number or a 1-D array"):
        Deployment(M70, H100, TP8).frontier(1000, 1000, batch=np.array([[1, 2], [3, 4]]))


def test_item12_frontier_takes_a_named_budget_and_run_reports_it(capsys):
    m = km.Model.preset("llama-3-70b")
    dep = Deployment(m, H100, TP8, link=None)
    f = dep.frontier(1000, 1000, batch=[1])
    assert f.budget == "device" and f.memory_bytes == 80e9 and int(f.max_batch[0]) == 761
    reserve = dep.frontier(1000, 1000, batch=[1], budget="reserve")
    # the review's figure with hbm_bytes=memory_budget(h, "reserve")
    assert reserve.memory_bytes == km.memory.memory_budget(H100, "reserve") and int(reserve.max_batch[0]) == 818
    engine = dep.frontier(1000, 1000, batch=[1], budget="engine")
    assert int(engine.max_batch[0]) < 761
    common = ["run", "--model", "llama-3-70b", "--hardware", "h100-sxm", "--input", "1000", "--output", "1000",
              "--batch", "761", "--chips", "8"]
    # run's JSON is the Request's to_dict(), which holds no memory figures: the text reports the fit and the budget
    assert main(common) == 0
    device = capsys.readouterr().out
    assert "(fits in 80.00 GB" in device and "budget: device)" in device
    assert main([*common, "--budget", "engine"]) == 0
    vllm = capsys.readouterr()
    room = km.formatting.fmt_bytes(km.memory.memory_budget(H100, "engine"))
    assert f"(does NOT fit in {room}, budget: engine)" in vllm.out and "do not fit" in vllm.err


def test_item13_layout_text_and_an_empty_link(capsys):
    for bad in ("tp=²", "tp=٣"):
        with pytest.raises(ValueError, match="parallel layout must look like"):
            parse_layout(bad)
    assert main(["run", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--input", "100", "--output", "10",
                 "--link", ""]) == 2
    assert "--link is empty" in capsys.readouterr().err


def test_item14_run_and_prefill_take_config(capsys):
    path = "tests/data/hf_configs/Qwen--Qwen2.5-7B/config.json"
    m = km.Model.from_hf_config(path)
    r = run_json(capsys, "run", "--config", path, "--hardware", "h100-sxm", "--input", "100", "--output", "10")
    assert r["ttft_s"] == pytest.approx(Deployment(m, H100).request(1, 100, 10).ttft_s, rel=1e-12)
    p = run_json(capsys, "prefill", "--config", path, "--hardware", "h100-sxm", "--input", "100")
    assert p["request"]["ttft_s"] == r["ttft_s"]


def test_item15_frontier_says_when_nothing_meets_the_limit():
    f = Deployment(M8, H100).frontier(1000, 100, batch=[1, 2], tpot_limit_s=1e-9)
    assert not f.found[0] and f.best_batch[0] == 0 and f.best_throughput_per_chip[0] == 0.0
    ok = Deployment(M8, H100).frontier(1000, 100, batch=[1, 2])
    assert ok.found[0] and ok.best_batch[0] == 2


def test_frontier_of_weights_that_do_not_fit_has_no_batch_not_an_error():
    # Mixtral 8x7B in bf16: 46.70e9 parameters x 2 bytes = 93.4 GB, over the H100's 80 GB
    # (the chapter 11 figure asks for exactly this pair); on the 141 GB H200 it fits
    m = km.Model.preset("mixtral-8x7b")
    assert 2 * m.param_count() > H100.hbm_bytes
    f = Deployment(m, H100).frontier(1000, 1000, batch=[1, 64])
    assert f.max_batch[0] == 0 and not f.fits.any() and not f.found[0] and f.best_batch[0] == 0
    assert np.isnan(f.throughput_per_chip).all()
    assert Deployment(m, "h200").frontier(1000, 1000, batch=[1, 64]).fits[:, 0].all()
