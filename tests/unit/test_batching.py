"""Continuous batching: the mixed decode-and-prefill step, the steady state, and the cost of a token."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvmath as km

settings.register_profile("kvmath", deadline=None, derandomize=True)
settings.load_profile("kvmath")

A100, H100 = km.Chip.preset("a100-80gb"), km.Chip.preset("h100-sxm")
L7 = km.Model.preset("llama-2-7b")
L7_A100 = km.Deployment(L7, A100)
# Llama 2 7B by hand: 32 layers, d = 4096, 32 heads of 128, vocab 32000, not tied
L, D, H, DH, V = 32, 4096, 32, 128, 32000
P = L7.param_count()
MATMUL = P - V * D - (2 * L + 1) * D           # the input embedding and the norms do no matmuls
KV_TOKEN = L * 2 * H * DH * 2                  # 524,288 B per cached token, bf16
WEIGHTS = (P - V * D) * 2                      # every matrix once; embedding rows are added per token


def attention(t):
    return 4 * L * H * DH * t                  # one token attending to t cached tokens, all layers


@pytest.mark.parametrize("name, layout", [("llama-3-8b", None), ("mixtral-8x7b", None), ("gemma-2-9b", "tp=2"),
                                          ("llama-2-70b", "tp=8"), ("deepseek-v3", "tp=8")])
def test_no_chunk_is_the_decode_step(name, layout):
    m = km.Model.preset(name)
    w = "fp8" if name == "deepseek-v3" else "bf16"
    for batch, context in ((1, 100), (64, 4096), (512, 30000)):
        dep = km.Deployment(m, H100, layout, link="nvlink4", weights=w)
        s, d = dep.mixed_step(batch, context), dep.step(batch, context)
        assert s.strict_s == pytest.approx(d.strict_s, rel=1e-12)
        assert s.decode_only_s == pytest.approx(d.strict_s, rel=1e-12) and s.slowdown == pytest.approx(1.0)


@pytest.mark.parametrize("name, layout", [("llama-3-8b", "pp=2"), ("llama-2-70b", "tp=2,pp=2"), ("llama-3-8b", "dp=2"),
                                          ("llama-3-8b", "dp=3,pp=2"), ("llama-3-8b", "tp=2,kv=batch"),
                                          ("mixtral-8x7b", "tp=2,dp=2,ep=4"), ("mixtral-8x7b", "dp=4,pp=2,ep=4"),
                                          ("gemma-2-9b", "tp=2,cp=2,pp=3")])
def test_no_chunk_is_the_decode_step_on_every_layout(name, layout):
    # pipelines and replicas too: without a chunk the mixed step is Deployment.step's decode step, the same floats
    dep = km.Deployment(name, H100, layout, link="nvlink4", node_link="ib-ndr400", chips_per_node=4)
    for batch, context in ((1, 100), (3, 128), (63, 4096), (512, 30000)):
        s, d = dep.mixed_step(batch, context), dep.step(batch, context)
        assert s.strict_s == d.strict_s and s.decode_only_s == d.strict_s, (layout, batch)
        assert s.weight_bytes_read == d.weight_bytes_read and s.comm_s == d.comm_s and s.slowdown == 1.0


def test_a_pipeline_mixed_step_by_hand():
    # Llama 2 7B on two A100-80GB by layers (pp = 2), no link counted. A step must both let one micro-batch of
    # the decode sequences pass every stage (Deployment.step: the weights of every layer, and the cache of
    # max(B / pp, 1) sequences) and let each stage do its half of all the step's tokens (the weights once).
    dep = L7_A100.replace(layout="pp=2", link=None)
    bw, rate = 2.039e12, 312e12
    # 2 decode sequences at 10 tokens plus a 3-token chunk after 4 cached ones: the micro-batch's latency binds
    s = dep.mixed_step(2, 10, 3, 4)
    latency_bytes = WEIGHTS + 1 * D * 2 + 1 * 10 * KV_TOKEN                 # micro-batch of max(2 / 2, 1) = 1
    latency_flops = 2 * MATMUL + attention(10)
    half_bytes = (WEIGHTS + 5 * D * 2 + 2 * 10 * KV_TOKEN + 7 * KV_TOKEN) / 2  # 5 rows; the chunk reads 4, writes 3
    half_flops = (2 * 2 * MATMUL + 2 * attention(10) + 2 * 3 * (MATMUL - V * D) + sum(attention(t) for t in (5, 6, 7))) / 2
    assert latency_bytes / bw > max(latency_flops / rate, half_bytes / bw, half_flops / rate)
    assert s.strict_s == pytest.approx(latency_bytes / bw, rel=1e-12)       # 13.22 GB / 2.039 TB/s = 6.484 ms
    assert s.weight_bytes_read + s.kv_bytes_read == pytest.approx(latency_bytes, rel=1e-12)
    assert s.decode_only_s == s.strict_s and s.slowdown == 1.0
    # a whole 4,096-token prompt as the chunk: each stage's half of its FLOPs binds
    s = dep.mixed_step(2, 10, 4096)
    half_flops = (2 * 2 * MATMUL + 2 * attention(10) + 2 * 4096 * (MATMUL - V * D)
                  + 4 * L * H * DH * 4096 * 4097 / 2) / 2                    # causal: sum of attention(t), t = 1 .. 4096
    half_bytes = (WEIGHTS + 4098 * D * 2 + 2 * 10 * KV_TOKEN + 4096 * KV_TOKEN) / 2
    assert half_flops / rate > max(latency_bytes / bw, latency_flops / rate, half_bytes / bw)
    assert s.strict_s == pytest.approx(half_flops / rate, rel=1e-12)        # 2.874e13 FLOPs / 312 TFLOP/s = 92.11 ms
    assert s.total_flops == pytest.approx(half_flops, rel=1e-12)
    assert s.decode_only_s == pytest.approx(latency_bytes / bw, rel=1e-12)


def test_a_data_parallel_mixed_step_by_hand():
    # Llama 2 7B on two A100-80GB replicas (dp = 2; no collective). The chunk lands on one replica; the bound is
    # the larger of the fullest replica's ceil(B / dp) decode sequences alone and the even split: each replica
    # B / dp decode sequences and half the chunk (the mean over the replicas of any placement, by convexity).
    dep = L7_A100.replace(layout="dp=2")
    bw, rate = 2.039e12, 312e12
    fullest = WEIGHTS + 2 * D * 2 + 2 * 10 * KV_TOKEN                        # ceil(3 / 2) = 2 sequences at 10
    # 3 decode sequences, a 3-token chunk after 4 cached tokens: the fullest replica's decode binds
    s = dep.mixed_step(3, 10, 3, 4)
    even = WEIGHTS + 3 * D * 2 + 1.5 * 10 * KV_TOKEN + 0.5 * 7 * KV_TOKEN    # rows: min(2 x 3, V) / 2 = 3
    assert fullest > even
    assert s.strict_s == pytest.approx(fullest / bw, rel=1e-12)             # 13.23 GB / 2.039 TB/s = 6.486 ms
    # a 64-token chunk after 4: the even split binds, 1.5 sequences and half of the chunk's 68-token cache
    s = dep.mixed_step(3, 10, 64, 4)
    even = WEIGHTS + 33.5 * D * 2 + 1.5 * 10 * KV_TOKEN + 0.5 * 68 * KV_TOKEN
    even_flops = 2 * 1.5 * MATMUL + 1.5 * attention(10) + 0.5 * (2 * 64 * (MATMUL - V * D)
                                                                  + sum(attention(t) for t in range(5, 69)))
    assert even > fullest and even / bw > even_flops / rate
    assert s.strict_s == pytest.approx(even / bw, rel=1e-12)                # 13.24 GB / 2.039 TB/s = 6.494 ms
    assert s.weight_bytes_read + s.kv_bytes_read == pytest.approx(even, rel=1e-12)
    assert s.total_flops == pytest.approx(even_flops, rel=1e-12)
    assert s.batch == 3 and s.prefill_tokens == 64 and s.n_chips == 2


@settings(max_examples=60)
@given(st.sampled_from(["llama-3-8b", "mixtral-8x7b", "gemma-2-9b", "starcoder"]), st.sampled_from([2, 3, 4]),
       st.integers(1, 300), st.integers(1, 20000), st.integers(0, 8192), st.integers(0, 8192),
       st.sampled_from(["heads", "batch"]))
def test_replicas_never_beat_the_whole_chunk_on_one_replica_bound_and_never_fall_below_the_decode_step(
        name, dp, batch, context, chunk, start, kv_split):
    # The replica that takes the chunk, with the fullest replica's ceil(B / dp) decode sequences, is one placement:
    # its one-replica step (computed on a deployment of that one replica) is at least the bound over all placements.
    m = km.Model.preset(name)
    tp = 2 if kv_split == "batch" else 1
    layout = km.ParallelLayout(tp=tp, dp=dp, kv_split=kv_split)
    dep = km.Deployment(m, H100, layout, link="nvlink4")
    one = km.Deployment(m, H100, km.ParallelLayout(tp=tp, kv_split=kv_split), link="nvlink4")
    s = dep.mixed_step(batch, context, chunk, start)
    whole_chunk = one.mixed_step(-(-batch // dp), context, chunk, start)
    assert s.strict_s <= whole_chunk.strict_s * (1 + 1e-12)
    assert s.strict_s >= dep.step(batch, context).strict_s == s.decode_only_s
    # and the mean over the replicas of that placement (the chunk on one, B / dp decode sequences on each) is above
    # the even split's share: the bound is never above the dp replicas' summed work over dp
    assert s.strict_s >= one.mixed_step(batch / dp, context).strict_s * (1 - 1e-12)


@settings(max_examples=60)
@given(st.sampled_from(["llama-3-8b", "mixtral-8x7b", "gemma-2-9b"]), st.sampled_from([2, 3, 4]),
       st.integers(1, 300), st.integers(1, 20000), st.integers(0, 8192), st.integers(0, 8192))
def test_a_pipeline_step_is_between_its_stage_share_and_the_step_without_the_pipeline(name, pp, batch, context,
                                                                                       chunk, start):
    m = km.Model.preset(name)
    dep = km.Deployment(m, H100, f"pp={pp}", link=None)
    flat = km.Deployment(m, H100, link=None)
    s = dep.mixed_step(batch, context, chunk, start)
    alone = flat.mixed_step(batch, context, chunk, start)
    assert s.strict_s >= alone.strict_s / pp * (1 - 1e-12)                  # each stage does 1 / pp of all the work
    assert s.strict_s >= flat.step(batch, context).weight_read_s / pp * (1 - 1e-12)  # and reads its weights once
    assert s.strict_s >= dep.step(batch, context).strict_s                  # a micro-batch passes every stage
    assert s.strict_s <= alone.strict_s * (1 + 1e-12)                       # never above one stage group doing it all
    assert s.strict_s >= s.decode_only_s and s.slowdown >= 1.0


def test_mixed_step_by_hand():
    # 2 decode sequences at 10 tokens, plus a 3-token chunk of a prompt with 4 tokens cached, on an A100-80GB
    s = L7_A100.mixed_step(2, 10, 3, 4)
    bytes_ = WEIGHTS + 5 * D * 2 + 2 * 10 * KV_TOKEN + 7 * KV_TOKEN   # 5 embedding rows; the chunk reads 4, writes 3
    flops = 2 * 2 * MATMUL + 2 * attention(10) + 2 * 3 * (MATMUL - V * D) + sum(attention(t) for t in (5, 6, 7))
    assert s.weight_bytes_read + s.kv_bytes_read == pytest.approx(bytes_, rel=1e-12)
    assert s.total_flops == pytest.approx(flops, rel=1e-12)
    assert s.strict_s == pytest.approx(max(bytes_ / 2.039e12, flops / 312e12), rel=1e-12)
    assert s.prefill_tokens == 3 and s.n_chips == 1


def test_a_big_chunk_makes_the_step_compute_bound():
    # Llama 3 8B on an H100, 64 sequences at 2,000 tokens: 512 prompt tokens ride in the memory-bound step
    # (9.49 -> 9.51 ms); 4,096 make it compute-bound (63.3 ms), about 2 x 8.03e9 x 4160 / 989.4e12 = 67.5 ms
    # less the LM head the chunk does not need
    m = km.Model.preset("llama-3-8b")
    s = km.Deployment(m, H100).mixed_step(64, 2000, np.array([0, 512, 4096]))
    assert s.strict_s[1] < 1.01 * s.strict_s[0]
    assert s.compute_s[2] > s.memory_s[2] and 6 < s.slowdown[2] < 7
    assert s.compute_s[2] < 2 * m.matmul_params_per_token() * 4160 / H100.flops() + 0.002


def test_steady_state_by_hand():
    # 4 slots, 6 tokens in, 3 out: 2 decode steps a request, so 2 prompts (12 tokens) a step; decode at 7.5
    # embedding rows for the 4 decode tokens only: the prompts' share is an average, and prompts that come
    # bunched in one step read fewer rows over the steps (rows are concave in tokens), so they are not charged
    s = L7_A100.steady_state(4, 6, 3, price_per_chip_hour=3.6)
    bytes_ = WEIGHTS + 4 * D * 2 + 4 * 7.5 * KV_TOKEN + 2 * 6 * KV_TOKEN
    prompt_flops = 2 * (MATMUL - V * D) * 6 + 2 * V * D + sum(attention(t) for t in range(1, 7))
    flops = 4 * 2 * MATMUL + 4 * attention(7.5) + 2 * prompt_flops
    step = max(bytes_ / 2.039e12, flops / 312e12)
    assert s.time_per_output_token_s == pytest.approx(step, rel=1e-12)
    assert s.output_tokens_per_s_per_chip == pytest.approx(4 * 3 / 2 / step, rel=1e-12)  # 4 decode + 2 first tokens
    assert s.cost_per_million_tokens == pytest.approx(3.6 / 3600 / (6 / step) * 1e6, rel=1e-12)


def test_cost_per_million_tokens_by_hand():
    assert km.formulas.cost_per_million_tokens(3.6, 1.0) == pytest.approx(1000.0, rel=1e-15)  # 0.001 a second, a token a second
    assert np.allclose(km.formulas.cost_per_million_tokens(np.array([1.0, 2.0]), 1000.0), [1 / 3.6, 2 / 3.6], rtol=1e-15)


@settings(max_examples=40)
@given(st.sampled_from(["llama-3-8b", "mixtral-8x7b", "qwen2.5-7b", "llama-2-7b", "gemma-2-9b"]), st.integers(1, 512),
       st.integers(16, 32000), st.integers(2, 4000))
def test_steady_decode_is_at_most_the_static_batch_tpot(name, batch, s_in, s_out):
    # the static batch's mean step is a mean of max(affine, affine): at least the max at the mean context
    m = km.Model.preset(name)
    dep = km.Deployment(m, H100)
    s = dep.steady_state(batch, s_in, s_out)
    r = dep.request(batch, s_in, s_out)
    assert s.step.decode_only_s <= r.time_per_output_token_s * (1 + 1e-9)  # the closed-form sum rounds at 1e-12
    assert s.time_per_output_token_s >= s.step.decode_only_s


@settings(max_examples=40)
@given(st.sampled_from(["llama-3-8b", "mixtral-8x7b", "gemma-2-9b"]), st.integers(1, 256), st.integers(1, 20000),
       st.integers(0, 8192), st.integers(0, 8192), st.integers(0, 8192))
def test_step_is_monotone_in_the_chunk(name, batch, context, c1, c2, start):
    lo, hi = sorted((c1, c2))
    m = km.Model.preset(name)
    dep = km.Deployment(m, H100)
    a, b = (dep.mixed_step(batch, context, c, start).strict_s for c in (lo, hi))
    assert a <= b * (1 + 1e-12)


def test_each_data_parallel_replica_keeps_its_share_of_the_slots_full():
    # two replicas of B / 2 slots each step as one chip of B / 2 does (63 slots: 31.5 each, the even share that
    # bounds both the fuller replica's time and the two replicas' summed rate)
    for batch in (64, 63, 3, 0.5):
        one = km.Deployment(L7, H100).steady_state(batch / 2, 1000, 500)
        two = km.Deployment(L7, H100, layout="dp=2").steady_state(batch, 1000, 500)
        assert float(two.time_per_output_token_s) == pytest.approx(float(one.time_per_output_token_s), rel=1e-12)
        assert float(two.output_tokens_per_s_per_chip) == pytest.approx(float(one.output_tokens_per_s_per_chip),
                                                                       rel=1e-12)   # B over 2 chips = B/2 over 1


def test_pipelined_replicas_keep_their_share_of_the_slots_full():
    # dp = 2 replicas of a 2-stage pipeline step as one pipeline of B / 2 slots (no link counted; 64 slots, 32
    # each, at least pp a replica, so the micro-batch is the same 16; the decode rows are min(64, V) / 2 = 32)
    one = km.Deployment(L7, H100, "pp=2", link=None).steady_state(32, 1000, 500)
    two = km.Deployment(L7, H100, "dp=2,pp=2", link=None).steady_state(64, 1000, 500)
    assert float(two.time_per_output_token_s) == pytest.approx(float(one.time_per_output_token_s), rel=1e-12)
    assert float(two.output_tokens_per_s_per_chip) == pytest.approx(float(one.output_tokens_per_s_per_chip),
                                                                   rel=1e-12)  # 64 slots on 4 chips, 32 on 2


@pytest.mark.parametrize("layout", ["pp=2", "pp=4", "tp=2,pp=2", "dp=2,pp=2"])
def test_a_pipelined_steady_state_is_at_least_its_decode_step_and_its_stage_share(layout):
    # each step a micro-batch of the decode sequences passes every stage (Deployment.step at the shortest context
    # is below it: caches only grow), and each stage's chip does 1 / pp of the step without the pipeline
    dep = km.Deployment(L7, H100, layout, link="nvlink4")
    flat = dep.replace(layout=layout.replace(f"pp={dep.layout.pp}", "pp=1"))
    for batch in (1, 8, 64, 512):
        s = dep.steady_state(batch, 1000, 200)
        assert s.time_per_output_token_s >= s.step.decode_only_s
        if batch >= dep.layout.dp * dep.layout.pp:  # below that the replicas' even share drops the micro-batch's
            assert s.step.decode_only_s >= dep.step(batch, 1001).strict_s  # floor of one sequence (not convex)
        assert s.time_per_output_token_s >= flat.steady_state(batch, 1000, 200).time_per_output_token_s / dep.layout.pp
        assert s.step.n_chips == dep.n_chips


def test_expert_parallel_replicas_share_the_experts_reads():
    # Mixtral 8x7B by hand: an expert is 3 matrices of 4096 x 14336 in each of 32 layers, bf16. The bound charges
    # the top_k = 2 experts any routing touches; split over ep = 2 chips, each reads one fewer than one chip alone.
    mixtral = km.Model.preset("mixtral-8x7b")
    expert_bytes = 3 * 4096 * 14336 * 32 * 2
    alone = km.Deployment(mixtral, H100).steady_state(32, 1000, 500).step
    split = km.Deployment(mixtral, H100, layout="dp=2,ep=2").steady_state(64, 1000, 500).step
    assert alone.weight_bytes_read - split.weight_bytes_read == pytest.approx(expert_bytes, rel=1e-12)
    assert split.kv_bytes_read == pytest.approx(alone.kv_bytes_read, rel=1e-12)   # each replica its own 32


def test_bad_inputs_are_refused_by_name():
    # every layout is taken (pipelines and data-parallel replicas included); bad numbers are still refused by name
    for layout in ("pp=2", "dp=2", "tp=2,pp=2"):
        dep = L7_A100.replace(layout=layout)
        with pytest.raises(ValueError, match="chunk_tokens"):
            dep.mixed_step(1, 10, 2.5)
        with pytest.raises(ValueError, match="batch"):
            dep.mixed_step(0, 10)
        with pytest.raises(ValueError, match="context"):
            dep.mixed_step(1, 10.5)
        with pytest.raises(ValueError, match="output_tokens must be at least 2"):
            dep.steady_state(1, 10, 1)
        with pytest.raises(ValueError, match="overhead_s"):
            dep.steady_state(1, 10, 5, overhead_s=-1.0)
    with pytest.raises(ValueError, match="output_tokens must be at least 2"):
        L7_A100.steady_state(1, 10, 1)
    from kvmath.batching import mixed_step, steady_state
    with pytest.raises(ValueError, match="dep must be a kvmath.Deployment, got str"):
        mixed_step("llama-2-7b", 1, 10)
    with pytest.raises(ValueError, match="dep must be a kvmath.Deployment, got str"):
        steady_state("llama-2-7b", 1, 10, 5)
    with pytest.raises(ValueError, match="chunk_tokens"):
        L7_A100.mixed_step(1, 10, 2.5)
    with pytest.raises(ValueError, match="chunk_start"):
        L7_A100.mixed_step(1, 10, 2, -1)
    with pytest.raises(ValueError, match="price_per_chip_hour"):
        L7_A100.steady_state(1, 10, 5, price_per_chip_hour=-1.0)
    with pytest.raises(ValueError, match="tokens_per_s_per_chip"):
        km.formulas.cost_per_million_tokens(1.0, 0.0)


@pytest.mark.parametrize("question", ["mixed_step", "steady_state", "step"])
@pytest.mark.parametrize("bad", [[1], {"a": 1}, np.ones(2)])
def test_an_unhashable_compute_dtype_is_refused_by_name(question, bad):
    # a list, dict or array once reached a dict lookup and raised TypeError: unhashable type; the deployment
    # every question is asked of refuses it when built, as an argument or inside Formats
    args = (1, 10) + ((5,) if question == "steady_state" else ())
    for build in (lambda: km.Deployment(L7, A100, compute=bad), lambda: km.Deployment(L7, A100, formats=km.Formats(compute=bad))):
        with pytest.raises(ValueError, match="unknown compute"):
            getattr(build(), question)(*args)


# TensorRT-LLM's published "Total Output Throughput (tokens/sec)", nvidia/Llama-3.1-8B-Instruct-FP8, TP1,
# trtllm-bench offline throughput (requests queued at once), NVIDIA/TensorRT-LLM
# docs/source/performance/perf-overview.md (commit 00f37686aa854010d68bcbd0f4ab000221541ca6), (ISL, OSL): tok/s
TRTLLM_LLAMA31_8B_FP8 = {
    "h200": {(128, 128): 27911, (128, 2048): 26221, (128, 4096): 18027, (500, 2000): 20770, (1000, 1000): 17744,
             (1000, 2000): 16828, (2048, 128): 3538, (2048, 2048): 12194, (5000, 500): 3902, (20000, 2000): 1804},
    "h100-sxm": {(128, 128): 28312, (128, 2048): 22714, (128, 4096): 14325, (500, 2000): 17660, (1000, 1000): 15220,
                 (1000, 2000): 13899, (2048, 128): 3450, (2048, 2048): 9305, (5000, 500): 3459, (20000, 2000): 1351},
}


@pytest.mark.parametrize("chip", sorted(TRTLLM_LLAMA31_8B_FP8))
def test_no_published_throughput_beats_the_steady_state_bound(chip):
    # The most generous reading of each row: fp8 weights and fp8 cache, the marketed memory, and the paged
    # steady state's mean context (more sequences than at their longest). The bound at the largest batch
    # that fits must stay above the measurement (20 rows; the closest was 0.67 of the bound when written).
    m, c = km.Model.preset("llama-3.1-8b"), km.Chip.preset(chip)
    free = km.memory.memory_budget(c, "device") - m.weight_bytes_resident("fp8")
    for (s_in, s_out), measured in TRTLLM_LLAMA31_8B_FP8[chip].items():
        most = np.floor(free / m.kv_bytes_per_seq(s_in + s_out / 2, 1.0))
        s = km.Deployment(m, c, weights="fp8", kv="fp8").steady_state(np.arange(1, most + 1), s_in, s_out)
        assert measured < np.max(s.output_tokens_per_s_per_chip), (s_in, s_out)


def test_steady_caches_are_the_exact_mean_for_windows_given_as_layers():
    # windows may come as per-layer specs (Llama 4's chunked layers, configs with layer_types) instead of
    # sliding_window; the steady state's mean cache must still be the mean over every decode context
    from kvmath.layers import LayerSpec
    chunked = tuple(LayerSpec("full", 32, 8, 128) if i % 4 == 3 else LayerSpec("chunked", 32, 8, 128, window=8192)
                    for i in range(32))
    two = tuple(LayerSpec("sliding", 32, 8, 128, window=w) if i % 2 else LayerSpec("full", 32, 8, 128)
                for i, w in enumerate([512, 4096] * 16))
    for layers in (chunked, two):
        m = km.Model.preset("llama-3-8b").replace(layers=layers, name="windows-as-layers")
        for s_in, s_out in ((4000, 10000), (100, 9000), (9000, 500)):
            t = np.arange(s_in + 1, s_in + s_out)
            s = km.Deployment(m, H100).steady_state(8, s_in, s_out)
            decode = 8 * np.mean(m.kv_bytes_per_seq(t, 2.0))           # brute force over every context
            prompts = 8 / (s_out - 1) * m.kv_bytes_per_seq(s_in, 2.0)  # the prompts' share writes its cache
            assert s.step.kv_bytes_read == pytest.approx(decode + prompts, rel=1e-12)


def test_under_data_parallelism_the_chunk_is_never_cheaper_than_on_its_replica_alone():
    # review r2, R1: the chunk lands whole on one replica. Llama 3 8B on 8 H100s (dp = 8), B = 64 at S = 1,024,
    # a 4,096-token chunk: at least the chunk's own pass on one chip, 62.23 ms (review r3 by hand: 2 * 4,096 *
    # 6,979,321,856 matmul parameters (no LM head: no logits) + 524,288 * 4,096 * 4,097 / 2 attention FLOPs =
    # 6.1574e13 FLOPs at 989.4 TFLOP/s), not the even split's 7.9 ms.
    dp8 = km.Deployment("llama-3-8b", "h100-sxm", "dp=8")
    one = km.Deployment("llama-3-8b", "h100-sxm")
    step = dp8.mixed_step(64, 1024, 4096)
    alone = one.mixed_step(1e-9, 1, 4096)   # the chunk with (next to) no decode work, one chip
    assert step.strict_s == pytest.approx(alone.strict_s, rel=1e-9)
    assert step.strict_s == pytest.approx(0.06223, rel=1e-3)
    assert step.strict_s <= one.mixed_step(8, 1024, 4096).strict_s   # at most its replica with 8 sequences and the chunk
    assert dp8.mixed_step(64, 1024, 0).strict_s == dp8.step(64, 1024).strict_s   # no chunk: the decode step, exactly



def test_with_experts_over_several_chips_the_chunk_is_not_charged_its_routed_work_on_its_replica():
    # review r3, N1: Mixtral 8x7B on 8 H100s, dp = ep = 8, one decode sequence and a 4,096-token chunk. Every token's
    # two experts may sit on the other seven chips; a schedule by hand takes 15.76 ms, so no bound may exceed it
    # (the chunk-alone bound had given 27.24 ms).
    dep = km.Deployment("mixtral-8x7b", "h100-sxm", "dp=8,ep=8")
    step = dep.mixed_step(1, 1, 4096)
    assert step.strict_s <= 0.015758
    assert step.strict_s >= dep.step(1, 1).strict_s


# ---- routing: the MoE serving results under the k-expert floor (the bounds) and under uniform routing ----

MIXTRAL_H200 = km.Deployment("mixtral-8x7b", "h200")


def test_floor_routing_is_the_default_to_the_last_bit():
    for dep in (MIXTRAL_H200, km.Deployment("llama-3-8b", H100)):
        assert float(dep.steady_state(96, 1000, 500, routing="floor").time_per_output_token_s) == float(
            dep.steady_state(96, 1000, 500).time_per_output_token_s)
        assert float(dep.mixed_step(64, 2000, 512, routing="floor").strict_s) == float(
            dep.mixed_step(64, 2000, 512).strict_s)
        assert float(dep.request(8, 1000, 100, routing="floor").total_s) == float(dep.request(8, 1000, 100).total_s)


def test_uniform_routing_changes_nothing_on_a_dense_model():
    dep = km.Deployment("llama-3-8b", H100)
    assert float(dep.steady_state(64, 1000, 500, routing="uniform").time_per_output_token_s) == float(
        dep.steady_state(64, 1000, 500).time_per_output_token_s)
    assert float(dep.frontier(1000, 1000, batch=[64], routing="uniform").throughput_per_chip[0, 0]) == float(
        dep.frontier(1000, 1000, batch=[64]).throughput_per_chip[0, 0])


def test_uniform_routing_reads_more_experts_and_is_labelled_an_estimate():
    # Mixtral, 2 of 8 experts: at B = 1 both read 2 experts a layer; at B = 181 uniform routing touches
    # 8 (1 - (3/4)^181) = 8.0 of them, four times the floor's 2 (hand figures in tests/book/test_chapter_claims.py)
    one_f, one_u = (float(MIXTRAL_H200.mixed_step(1, 1000, routing=r).strict_s) for r in ("floor", "uniform"))
    assert one_u == pytest.approx(one_f, rel=1e-12)
    floor, uniform = (MIXTRAL_H200.steady_state(np.array([1.0, 8.0, 181.0]), 1000, 1000, routing=r)
                      for r in ("floor", "uniform"))
    assert np.all(np.asarray(uniform.time_per_output_token_s) >= np.asarray(floor.time_per_output_token_s))
    assert float(uniform.time_per_output_token_s[2]) > 2 * float(floor.time_per_output_token_s[2])
    assert MIXTRAL_H200.request(8, 1000, 100).is_lower_bound
    assert not MIXTRAL_H200.request(8, 1000, 100, routing="uniform").is_lower_bound


def test_disaggregation_under_uniform_routing_charges_the_decode_pool_more():
    from kvmath.disaggregation import disaggregate

    floor = disaggregate(MIXTRAL_H200, 2000, 500, decode_batch=64)
    uniform = disaggregate(MIXTRAL_H200, 2000, 500, decode_batch=64, routing="uniform")
    assert uniform.prefill_s == pytest.approx(floor.prefill_s, rel=1e-3)  # a 2,000-token prompt is compute-bound
    assert uniform.decode_chip_s > 2 * floor.decode_chip_s
    assert uniform.prefill_chips_per_decode_chip < floor.prefill_chips_per_decode_chip


@pytest.mark.parametrize("call", [
    lambda: MIXTRAL_H200.steady_state(8, 1000, 100, routing="spread"),
    lambda: MIXTRAL_H200.mixed_step(8, 1000, routing="spread"),
    lambda: MIXTRAL_H200.frontier(1000, 100, batch=[8], routing="spread"),
    lambda: __import__("kvmath.disaggregation", fromlist=["x"]).disaggregate(MIXTRAL_H200, 1000, 100, routing="spread"),
])
def test_an_unknown_routing_is_refused_by_name(call):
    with pytest.raises(ValueError, match="routing"):
        call()
