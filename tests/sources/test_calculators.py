"""The public calculator figures chapter 16 (Pitfalls) shows, recomputed.

Each test writes the calculator's formula by hand (it is not a kvmath rule)
next to kvmath's figure, and asserts both against the source's printed
number to the precision it is printed with, or against a hand computation
written in the test. Sources are cited in book/references.bib under the key
named in each test.
"""

import pytest

import kvmath as km

GiB = 2**30


def test_unsloth_pr4757_gemma3_27b_legacy_and_correct_figures_are_gib():
    # unsloth_pr4757: "Gemma-3 27B | Sliding Window | 81.38 GB | 10.41 GB"
    m = km.Model.preset("gemma-3-27b")
    s = 131_072  # not stated by the PR; this context (and bf16) reproduces both figures
    legacy = 2 * m.n_kv_heads * (m.d_model // m.n_heads) * m.n_layers * s * 2  # 2*16*168*62*S*2
    assert legacy == 87_375_740_928
    assert round(legacy / GiB, 2) == 81.38   # the PR's "GB" is GiB
    assert round(legacy / 1e9, 2) == 87.38   # in GB it would have printed 87.38
    # kvmath: 10 global layers hold S tokens, 52 windowed layers 1024, 2*16*128*2 B each per token
    assert m.kv_bytes_per_seq(s) == 8192 * (10 * s + 52 * 1024)
    assert round(m.kv_bytes_per_seq(s) / GiB, 2) == 10.41


def test_eleuther_cookbook_kv_ignores_heads_and_counts_k_and_v_once():
    # eleuther_cookbook_mem: per_gpu_kv_cache_mem = bytes * hidden * layers * tokens * batch
    m = km.Model.preset("llama-3-8b")
    cookbook = 2 * m.d_model * m.n_layers * 8192
    assert cookbook / GiB == 2.0
    assert m.kv_bytes_per_seq(8192) / GiB == 1.0  # 2 * 32 * 8 * 128 * 2 B per token = 128 KiB


def test_bekman_formula_is_exact_for_llama_31_8b_and_not_for_qwen3_32b():
    # bekman_mle_inference: dtype_bytes * 2 * L * hidden * h_kv / h; "0.131MB", "~134MB", "~17.2GB"
    def bekman(m):
        return 2 * 2 * m.n_layers * m.d_model * m.n_kv_heads / m.n_heads

    llama = km.Model.preset("llama-3.1-8b")
    assert bekman(llama) == llama.kv_bytes_per_token() == 131_072
    assert round(llama.kv_bytes_per_token() / 1e6, 3) == 0.131
    assert round(0.131 * 1024) == 134                      # the source's rounded chain
    assert round(0.131 * 1024 * 128 / 1e3, 1) == 17.2
    qwen = km.Model.preset("qwen3-32b")                       # head_dim 128, d / h = 80
    assert bekman(qwen) / qwen.kv_bytes_per_token() == pytest.approx(80 / 128, rel=1e-12)


def test_head_width_error_goes_both_ways_over_the_presets():
    ratios = {m.name: (m.d_model / m.n_heads) / m.head_dim
              for m in map(km.Model.preset, km.Model.presets())
              if m.attention != "mla" and m.head_dim * m.n_heads != m.d_model}
    assert ratios["qwen3-32b"] == 0.625 and ratios["gemma-3-27b"] == 168 / 128
    assert min(ratios.values()) < 1 < max(ratios.values())


def test_two_times_hidden_size_overcounts_gqa_by_the_group_size():
    # vllm_pr29736 review: 4x for Llama-3-8B
    for name, g in (("llama-3-8b", 4), ("llama-3-70b", 8), ("falcon-7b", 71)):
        m = km.Model.preset(name)
        assert 2 * m.n_layers * m.d_model * 2 / m.kv_bytes_per_token() == g


def test_mla_latent_only_and_mla_as_mha():
    m = km.Model.preset("deepseek-v3")
    assert m.kv_bytes_per_token() == 61 * (512 + 64) * 2 == 70_272
    assert 61 * 512 * 2 / m.kv_bytes_per_token() == pytest.approx(8 / 9, rel=1e-12)
    # per head: keys 128 + 64 wide, values 128
    assert 61 * 128 * (128 + 64 + 128) * 2 / m.kv_bytes_per_token() == pytest.approx(640 / 9, rel=1e-12)


def test_lmcache_prints_gib_as_gb():
    # lmcache_kvcalc: sizeGB = totalBytes / (1024 ** 3), printed "GB" with 4 decimals
    seq = km.Model.preset("llama-3.1-8b").kv_bytes_per_seq(131_072)
    assert f"{seq / 1024**3:.4f}" == "16.0000"
    assert round(seq / 1e9, 2) == 17.18


def test_llm_analysis_kv_twice_and_two_mlp_matrices():
    # llmanalysis022: kv_cache_latency = 2 * kv_cache_memory / bandwidth; MLP 2 * d * d_ff per layer
    m, h100 = km.Model.preset("llama-3-8b"), km.Chip.preset("h100-sxm")
    w = km.Deployment(m, h100).step(64, 8192)  # one chip: its reads are the totals
    kv_per_seq = m.kv_bytes_per_seq(8192)
    assert w.kv_bytes_read == 64 * kv_per_seq == 64 * GiB
    twice = (w.weight_bytes_read + 2 * w.kv_bytes_read) / (w.weight_bytes_read + w.kv_bytes_read)
    assert twice == pytest.approx(1.8207, abs=5e-5)
    # 1.5x exactly where the batch's cache weighs as much as the weights read
    b = w.weight_bytes_read / kv_per_seq
    assert (w.weight_bytes_read + 2 * b * kv_per_seq) / (w.weight_bytes_read + b * kv_per_seq) \
        == pytest.approx(1.5, rel=1e-12)
    # eleuther_cookbook_mem: num_mlp_linears 2 (default) of width intermediate_size, read from the config
    two = m.param_count() - m.n_layers * m.d_model * m.d_ff  # one of three MLP matrices dropped
    assert two == 8_030_261_248 - 32 * 4096 * 14336 == 6_151_213_056
    # llmanalysis022: 2 * hidden_dim * ffn_embed_dim with ffn_embed_dim = 4 * hidden_dim unless set
    # (intermediate_size is not read from a Hugging Face config, and 14336 is no multiple of 4096)
    assert 2 * 4 * m.d_model < 3 * m.d_ff and m.d_ff % m.d_model != 0
    # for Llama 2 7B (d_ff 11008) the 4d default almost makes up for the missing gate: 3 * 11008 / (2 * 16384)
    assert 3 * 11008 / (2 * 4 * 4096) == 1.0078125


def test_unsloth_pr4757_qwen3_06b_legacy_halves_the_cache():
    # unsloth_pr4757: "Qwen3-0.6B | Standard GQA | 2.19 GB | 4.38 GB | -50% under"
    # shape as lmcache_modelconfig lists it: 28 layers, hidden 1024, 16 heads, 8 KV heads, head_dim 128
    s = 40_960  # not stated by the PR; with bf16 it reproduces both figures
    legacy = 2 * 8 * (1024 // 16) * 28 * s * 2
    assert round(legacy / GiB, 2) == 2.19
    assert round(km.formulas.kv_bytes_per_token(28, 8, 128) * s / GiB, 2) == 4.38
    assert legacy * 2 == km.formulas.kv_bytes_per_token(28, 8, 128) * s


def test_lmcache_glm_entries_take_d_over_h():
    # lmcache_modelconfig: GLM-4.5 hidden_size 5120, 96 heads, head_dim 128; lmcache_kvcalc uses
    # hidden_size / num_attention_heads outside its Qwen3 and DeepSeek branches
    assert 5120 / 96 / 128 == pytest.approx(0.4167, abs=5e-5)


def test_embedding_table_read_every_step_overcounts_untied_models_only():
    for name in ("llama-3-8b", "gpt-oss-20b"):
        m = km.Model.preset(name)
        extra = m.active_param_count() * 2 - m.weight_bytes_read(1)
        # the input table less the one row the step really reads
        assert extra == pytest.approx((m.vocab - 1) * m.d_model * 2, rel=1e-12)
    tied = km.Model.preset("llama-3.2-1b")
    assert tied.active_param_count() * 2 == pytest.approx(tied.weight_bytes_read(1), rel=1e-12)


def test_moe_active_parameters_are_the_floor_not_a_batch_of_64():
    # Mixtral 8x7B's config.json (models.csv): 32 layers, hidden 4096, 32 heads, 8 KV heads of 128, expert MLP 14336,
    # vocab 32000, 8 experts, top 2, untied embeddings. Per layer: attention q, o 4096 x 4096, k, v 4096 x 1024;
    # an expert three 4096 x 14336 matrices; the router 4096 x 8.
    m = km.Model.preset("mixtral-8x7b")
    attention, expert, router, head = 2 * 4096 * 4096 + 2 * 4096 * 1024, 3 * 4096 * 14336, 4096 * 8, 32000 * 4096
    assert (attention, expert) == (41_943_040, 176_160_768)
    calculator = 2 * (32 * (attention + 2 * expert + router) + head)       # k experts a layer, any batch
    assert calculator == m.matmul_params_per_token() * 2 == 25_497_174_016
    touched = 8 * (1 - (1 - 2 / 8) ** 64)                                  # uniform routing, 64 tokens
    assert 8 - touched == pytest.approx(8.0726e-8, rel=1e-4)
    norms = 32 * 2 * 4096 + 4096                                           # two RMSNorms a layer and the last one
    uniform = 2 * (32 * (attention + router + touched * expert) + norms + head + 64 * 4096)  # 64 input rows looked up
    assert m.weight_bytes_read(64, routing="uniform") == pytest.approx(uniform, rel=1e-12)
    assert calculator / uniform == pytest.approx(0.2737, abs=5e-5)
    # the floor is the calculator's figure plus the embedding's one row and the norms
    assert m.weight_bytes_read(1) == pytest.approx(calculator + 2 * (norms + 4096), rel=1e-12)


def test_a_cache_split_over_more_chips_than_kv_heads_is_copied():
    # Llama 3.1 405B (models.csv): 126 layers, 8 KV heads of 128: 2 x 126 x 8 x 128 x 2 B = 516,096 B a token.
    # On tp = 16 each KV head sits on 2 chips, so a chip holds 1 of the 8: 64,512 B a token, not 516,096 / 16.
    m = km.Model.preset("llama-3.1-405b")
    assert m.kv_bytes_per_token() == 2 * 126 * 8 * 128 * 2 == 516_096
    for tp, held in ((16, 516_096 // 8), (32, 516_096 // 8)):
        cap = km.Deployment(m, "h100-sxm", f"tp={tp}").capacity(8192)
        budget = cap.kv_budget_bytes_per_chip
        assert cap.max_batch == budget // (held * 8192)
        calculator = budget // (516_096 / tp * 8192)
        assert calculator / cap.max_batch == pytest.approx(tp / 8, rel=0.02)   # the batch is a whole number
    cap16 = km.Deployment(m, "h100-sxm", "tp=16").capacity(8192)
    assert (int(cap16.kv_budget_bytes_per_chip // (32_256 * 8192)), int(cap16.max_batch)) == (110, 55)


def test_a_links_two_directions_are_not_its_rate():
    # links.csv, nvlink5: 900e9 B/s a direction, stated as 1800e9 bidirectional; 0.5 us a hop (assumed).
    # One layer's all-reduce in an 8,192-token prefill of Llama 3.1 70B (hidden 8192, bf16) on 8 chips, ring:
    # 2 x 7/8 x 134,217,728 B = 234,881,024 B each way, in 14 hops.
    from kvmath.links import allreduce_time, get_link

    link = get_link("nvlink5")
    assert (link.bandwidth, link.stated_bandwidth, link.stated_as) == (900e9, 1800e9, "bidirectional")
    sent = 2 * 7 / 8 * 8192 * 8192 * 2
    assert sent == 234_881_024
    kvmath_s = allreduce_time(8192 * 8192 * 2, 8, link, "ring")
    assert kvmath_s == pytest.approx(sent / 900e9 + 14 * 0.5e-6, rel=1e-12)    # 267.98 us
    calculator_s = sent / 1800e9                                                # 130.49 us
    assert calculator_s / kvmath_s == pytest.approx(0.48694, abs=5e-5)


def test_a_sparse_headline_rate_halves_a_compute_bound_prefill():
    # hardware.csv: the H200 row's source gives 'BF16 1,979 and FP8 3,958 TFLOPS with sparsity'; the row keeps the
    # dense 989.4e12 (the H100 datasheet's rates, whose headline figures assume 2:4 sparsity).
    from kvmath.requests import prefill_bound, prefill_chip_step

    h200 = km.Chip.preset("h200")
    assert "1,979" in h200.source and "with sparsity" in h200.source
    assert h200.flops("bf16") == 989.4e12 and round(2 * h200.flops("bf16") / 1e12) == 1979
    # Llama 3 8B, one prompt of 8,192 tokens: the weights' and the causal attention's FLOPs at one chip's dense
    # rate; the bytes are far behind at this length, so the bound is the FLOPs over the rate, and the headline halves it
    dep = km.Deployment("llama-3-8b", h200)
    step = prefill_chip_step(dep, 1, 8192)
    flops = step.weight_flops + step.attention_flops
    assert float(prefill_bound(dep, 1, 8192)) == pytest.approx(flops / 989.4e12, rel=1e-12)
    assert (flops / (2 * 989.4e12)) / float(prefill_bound(dep, 1, 8192)) == pytest.approx(0.5, rel=1e-12)


def test_a_quantized_cache_costs_its_scales_and_whole_pages():
    # lmcache_kvcalc: int8 is 1 byte an element; DeepSeek models L x tokens x (kv_lora_rank + qk_rope_head_dim).
    # vllm_quantized_kvcache: fp8 scales per tensor or per KV head, per layer, so 1 byte an element in the pages;
    # vLLM's blocks are 16 tokens (CacheConfig), so 1,000 tokens hold cdiv(1000, 16) = 63 blocks = 1,008 tokens.
    from kvmath.formats import get_format
    from kvmath.memory import VLLM_FP8_DS_MLA_BYTES, vllm_request_kv_bytes

    # Llama 3.1 8B (models.csv: 32 layers, 8 KV heads of 128)
    m = km.Model.preset("llama-3.1-8b")
    calculator = 1000 * 2 * 32 * 8 * 128 * 1
    assert calculator == 65_536_000
    assert vllm_request_kv_bytes(m, 1000, kv_dtype="fp8") == 1008 * 2 * 32 * 8 * 128 == 66_060_288
    assert calculator / 66_060_288 == pytest.approx(0.99206, abs=5e-6)
    assert vllm_request_kv_bytes(m, 1000, kv_dtype="fp8") * 2 == vllm_request_kv_bytes(m, 1000)   # exactly half
    # DeepSeek-V3.2 (models.csv: 61 layers, latent 512, rope 64, indexer keys of 128): flashmla2025's fp8 latent is
    # 512 fp8 values, 4 fp32 scales and 64 bf16 rope values; the indexer's keys 128 fp8 values and one fp32 scale
    assert VLLM_FP8_DS_MLA_BYTES == 512 + 4 * 4 + 64 * 2 == 656
    v32 = km.Model.preset("deepseek-v3.2")
    calculator = 61 * 1000 * (512 + 64) * 1
    assert calculator == 35_136_000
    # vLLM's MLA blocks are 64 tokens on CUDA (FlashMLA's block, vllm_block_size): 1,000 tokens hold 16 blocks,
    # 1,024 tokens
    held = 1024 * 61 * (656 + 128 + 4)
    assert vllm_request_kv_bytes(v32, 1000, kv_dtype="fp8") == held == 49_221_632
    assert calculator / held == pytest.approx(0.7138325, abs=5e-7)
    assert held / (1024 * 61 * (576 * 2 + 132)) == pytest.approx(0.61371, abs=5e-6)   # fp8 over bf16, not a half
    # flashinfer_nvfp4_kv: head_dim // 2 bytes and head_dim // 16 one-byte scales a token and head: 4.5 bits
    assert (128 // 2 + 128 // 16) * 8 / 128 == 4.5 == get_format("nvfp4").bits_per_weight


def test_a_prefill_holds_its_activation_peak_beside_the_weights_and_cache():
    # Llama 3.1 8B (models.csv: 32 layers, hidden 4096, 32 heads, 8 KV heads of 128, MLP 14336 with 3 matrices,
    # vocab 128256, untied): one prompt of 131,072 tokens in bf16, not chunked.
    from kvmath.memory import vllm_activation_peak_bytes

    m = km.Model.preset("llama-3.1-8b")
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096        # q, o; k, v; the MLP; two norms
    params = 32 * layer + 2 * 128256 * 4096 + 4096                                   # two tables, the last norm
    assert params == m.param_count() == 8_030_261_248
    weights, cache = params * 2, 131_072 * 2 * 32 * 8 * 128 * 2
    assert cache == m.kv_bytes_per_seq(131_072) == 17_179_869_184
    # the residual stream (2 d) and one layer's MLP intermediates (3 d_ff) of every token in bf16, and the
    # sampled position's fp32 logits
    peak = 131_072 * (2 * 4096 + 3 * 14336) * 2 + 1 * 128256 * 4
    assert vllm_activation_peak_bytes(m, 131_072, max_num_seqs=1) == peak == 13_422_285_824
    calculator = weights + cache
    assert calculator == 33_240_391_680
    assert calculator / (calculator + peak) == pytest.approx(0.712355, abs=5e-7)
    # the A100-40GB's reported 40,960 MiB holds the calculator's figure and not the peak
    assert calculator < 40_960 * 2**20 < calculator + peak
    # in chunks of 8,192 tokens the peak is 8,192 / 131,072 of the activations
    assert vllm_activation_peak_bytes(m, 8192, max_num_seqs=1) == 8192 * 51_200 * 2 + 128256 * 4
