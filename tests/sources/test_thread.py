"""Every figure of the 256K thread (shared/reference/errata.md), recomputed.

Each test shows the thread's figure under the thread's own assumption and the
exact figure. Expected values are hand computations written out in the test;
tolerances are stated per assertion (rel=1e-3 means the errata's 3-4
significant figures).
"""

import pytest

import kvmath as km

A100_80 = km.Chip.preset("a100-80gb")
CODELLAMA = km.Model.preset("codellama-7b")
BATCH = 16
CONTEXT_8K = 8192  # the thread's "8K"


def test_weight_flops_per_step_is_224_gflop_for_16_sequences():
    # 7e9 * 2 * 16: two FLOPs per parameter per token, times 16 sequences in one step.
    assert km.formulas.weight_flops_per_step(BATCH, 7e9) == pytest.approx(2.24e11, rel=1e-12)
    # per token it is only 14 GFLOP
    assert km.formulas.weight_flops_per_step(1, 7e9) == pytest.approx(1.4e10, rel=1e-12)


def test_attention_flops_left_out_at_8k():
    # 4 * n_layers * d_model * context = 4 * 32 * 4096 * 8192 = 4.295e9 per token
    per_token = km.formulas.attention_flops_per_step(1, CONTEXT_8K, 32, 32, 128)
    assert per_token == pytest.approx(4 * 32 * 4096 * 8192, rel=1e-12)
    assert per_token / 1e9 == pytest.approx(4.29, abs=0.005)
    assert km.formulas.attention_flops_per_step(BATCH, CONTEXT_8K, 32, 32, 128) / 1e9 == pytest.approx(68.7, abs=0.05)


def test_codellama_has_6_74e9_parameters_so_7e9_is_about_4_percent_high():
    count = CODELLAMA.param_count()
    # Hugging Face reports 6,738,546,688 for CodeLlama-7b-hf (embeddings, head and norms included).
    assert count == 6_738_546_688
    assert 7e9 / count - 1 == pytest.approx(0.039, abs=0.001)


def test_a100_is_312_tflops_not_300():
    assert A100_80.flops("bf16") == 312e12


def test_weights_14_gb_thread_and_13_48_gb_exact():
    assert km.formulas.weight_bytes(7e9, 2) == 14e9
    assert km.formulas.weight_bytes(CODELLAMA.param_count(), 2) / 1e9 == pytest.approx(13.48, abs=0.005)


def test_kv_cache_is_64_gib_not_67_gb():
    per_token = km.formulas.kv_bytes_per_token(32, 32, 128)
    assert per_token == 524_288  # 0.5 MiB
    cache = km.formulas.kv_cache_bytes(per_token, CONTEXT_8K, BATCH)
    assert cache == 64 * 2**30  # exactly 64 GiB
    assert cache / 1e9 == pytest.approx(68.72, abs=0.005)
    # "67GB" only if 8K meant 8000 tokens
    assert km.formulas.kv_cache_bytes(per_token, 8000, BATCH) / 1e9 == pytest.approx(67.11, abs=0.005)


def test_bytes_read_per_step_81_vs_82_7_gb():
    per_token = km.formulas.kv_bytes_per_token(32, 32, 128)
    assert (14e9 + km.formulas.kv_cache_bytes(per_token, CONTEXT_8K, BATCH)) / 1e9 == pytest.approx(82.7, abs=0.05)
    assert (14e9 + km.formulas.kv_cache_bytes(per_token, 8000, BATCH)) / 1e9 == pytest.approx(81.1, abs=0.05)


@pytest.mark.parametrize("context, steps_per_s", [(8000, 34.5), (8192, 33.8)])
def test_35_tok_s_is_per_sequence_at_70_percent_of_2_tb_s(context, steps_per_s):
    per_token = km.formulas.kv_bytes_per_token(32, 32, 128)
    kv = km.formulas.kv_cache_bytes(per_token, context, BATCH)
    kv_gpu = km.formulas.kv_bytes_per_chip(kv, 2, 32)  # MHA: 32 KV heads split over tp=2
    step = km.formulas.min_step_simple(BATCH, kv_gpu / BATCH, 14e9 / 2, 0.7 * 2e12)
    assert km.formulas.tokens_per_s_per_seq(step) == pytest.approx(steps_per_s, abs=0.05)
    # the whole batch produces 16 tokens per step: ~550 tok/s
    assert km.formulas.tokens_per_s(step, BATCH) == pytest.approx(16 * steps_per_s, abs=1)


def test_40_gb_per_gpu_at_8000_tokens_takes_28_97_ms():
    kv = km.formulas.kv_cache_bytes(524_288, 8000, BATCH)
    per_gpu = (14e9 + kv) / 2
    assert per_gpu / 1e9 == pytest.approx(40.55, abs=0.005)
    assert per_gpu / 1.4e12 * 1e3 == pytest.approx(28.97, abs=0.005)
    # which A100: 40 GB of weights+KV per GPU does not fit a 40 GB card
    assert per_gpu > km.Chip.preset("a100-40gb").hbm_bytes
    assert per_gpu < A100_80.hbm_bytes


def test_mqa_at_256k_has_the_same_cache_as_mha_at_8k():
    mha = km.formulas.kv_cache_bytes(km.formulas.kv_bytes_per_token(32, 32, 128), 8192, BATCH)
    mqa = km.formulas.kv_cache_bytes(km.formulas.kv_bytes_per_token(32, 1, 128), 8192 * 32, BATCH)
    assert 8192 * 32 == 262_144
    assert mqa == mha


def test_attention_flops_at_256k_are_2_2_tflops_per_step():
    flops = km.formulas.attention_flops_per_step(BATCH, 262_144, 32, 32, 128)
    assert flops == 2 * 128 * 262_144 * 16 * 32 * 32 * 2  # QK^T and AV as the thread writes them
    assert flops / 1e12 == pytest.approx(2.199, abs=0.0005)


def test_compute_ceiling_is_about_8x_the_memory_limit():
    attention = km.formulas.attention_flops_per_step(BATCH, 262_144, 32, 32, 128)
    assert km.formulas.compute_ceiling_steps_per_s(2.2e12, 600e12) == pytest.approx(272.7, abs=0.05)
    with_weights = km.formulas.compute_ceiling_steps_per_s(attention + 0.22e12, 2 * 312e12)
    assert with_weights == pytest.approx(258, abs=0.5)
    assert with_weights / 34.5 == pytest.approx(7.5, abs=0.1)  # memory caps it near 1/8


def test_mqa_with_tp2_reads_the_whole_cache_on_each_gpu_unless_sharded_by_batch():
    kv = km.formulas.kv_cache_bytes(km.formulas.kv_bytes_per_token(32, 1, 128), 262_144, BATCH)
    by_heads = km.formulas.kv_bytes_per_chip(kv, 2, 1)
    by_batch = km.formulas.kv_bytes_per_chip(kv, 2, 1, batch=BATCH, shard="batch")
    assert by_heads == kv
    assert (7e9 + by_heads) / 1e9 == pytest.approx(75.7, abs=0.05)  # ~76 GB per GPU per step
    assert (7e9 + by_batch) / 1e9 == pytest.approx(41.4, abs=0.05)  # ~41 GB


def test_what_tensor_parallelism_adds_to_the_mqa_step():
    # Chapter 7's "what the tensor-parallel split adds": 2 all-reduces in each of 32 layers, of 16 x 4096 bf16
    # values (131,072 B), on 2 A100s over NVLink 3 (links.csv: 300e9 B/s a direction, 0.5 us a hop assumed, 10.14 us
    # measured by nccl-tests for a small all-reduce on two A100s).
    from kvmath.links import allreduce_estimate, allreduce_time, get_link

    nv3, message = get_link("nvlink3"), 16 * 4096 * 2
    assert message == 131_072
    # on two chips the fewest bytes any algorithm sends are 2 (N - 1) / N = 1 message each way; the floor is one hop
    assert 64 * allreduce_time(message, 2, nv3) == pytest.approx(64 * (message / 300e9 + 0.5e-6), rel=1e-12)
    assert 64 * (message / 300e9 + 0.5e-6) == pytest.approx(59.96e-6, abs=5e-9)
    assert 64 * allreduce_estimate(message, 2, nv3) == pytest.approx(64 * (10.14e-6 + message / 300e9), rel=1e-12)
    assert 64 * (10.14e-6 + message / 300e9) == pytest.approx(676.92e-6, abs=5e-9)
    # one KV head: W_K and W_V (4096 x 128 each, 32 layers, bf16) whole on both GPUs, half of it beyond their share
    assert 2 * 4096 * 128 * 32 * 2 * (1 - 1 / 2) == 33_554_432
