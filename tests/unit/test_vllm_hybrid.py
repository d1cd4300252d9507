"""vLLM V1's sizing of hybrid models (kvmath.memory.vllm_kv_cache), against published start-up logs and hands.

The rules were read from vllm-project/vllm (kvmath.memory.VLLM_HYBRID_SOURCE): v0.10.2 / v0.11
``vllm/model_executor/models/config.py`` (``HybridAttentionMambaModelConfig.verify_and_update_config``: the
attention block size grows to ``16 x cdiv(state, 16 x attention bytes per token)``, the state page is padded
to it), and ``vllm/v1/core/kv_cache_utils.py`` / ``vllm/v1/kv_cache_interface.py`` at commit 001cabc1
(groups, ``get_num_blocks``, ``_report_kv_cache_config``, ``get_max_concurrency_for_kv_cache_config``,
the specs' ``max_memory_usage_bytes``). The logs are in tests/data/vllm_logs.json with their sources.

A logged "x GiB" stands for [x - 0.005, x + 0.005] GiB; the tests say where that interval allows more than
one block count and check every count in it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvmath as km
from kvmath.memory import vllm_engine, vllm_kv_cache, vllm_kv_groups
from kvmath.units import GiB
from tests.unit.test_hf_config import NEXT, edited

LOGS = {log["id"]: log for log in json.loads((Path(__file__).parents[1] / "data" / "vllm_logs.json").read_text())["logs"]}
HALF = 0.005 * GiB
RECONSTRUCTED = Path(__file__).parents[1] / "data" / "hf_configs" / "reconstructed"


def test_the_log_file_quotes_every_figure_it_states():
    # each figure a log entry states is in one of its quoted lines, as printed
    for log in LOGS.values():
        text = "\n".join(log["lines"])
        f = log["figures"]
        assert f"GPU KV cache size: {f['tokens']:,} tokens" in text
        assert f"per request: {f['max_concurrency']:.2f}x" in text
        if f["available_kv_gib"] is not None:
            assert f"Available KV cache memory: {f['available_kv_gib']:.2f} GiB" in text
        if f["attention_block_size"] is not None:
            assert f"Setting attention block size to {f['attention_block_size']} tokens" in text
            if f["state_padding_pct"]:
                assert f"Padding mamba page size by {f['state_padding_pct']:.2f}%" in text
            else:  # vLLM prints no padding line where the state fills the page exactly
                assert "Padding mamba page size" not in text


def test_qwen3_next_tp2_log_reproduced():
    """vLLM 0.10.2, Qwen3-Next-80B-A3B-Instruct, TP=2, bf16, max_model_len 262,144 (tests/data/vllm_logs.json).

    By hand, per rank: attention 2 KV heads / 2 ranks x 256 x 2 (K, V) x 2 B = 1,024 B per token; the Gated
    DeltaNet state: conv (2 x 16 x 128 + 32 x 128) / 2 = 4,096 channels x 3 + 32 / 2 = 16 heads x 128 x 128
    = 274,432 elements x 2 B = 548,864 B. Block: 16 x cdiv(548,864, 16 x 1,024) = 16 x 34 = 544 tokens (the
    log's 544); page 544 x 1,024 = 557,056 B, the state padded by 8,192 / 548,864 = 1.49% (the log's 1.49%).
    Groups: 12 full + 36 linear layers -> group size 12, 1 + 3 = 4 groups. Blocks: 44.59 GiB / 557,056 / 12
    = 7,162.4 -> 7,162; tokens 7,162 // 4 x 544 = 973,760 (the log). A 262,144-token request: cdiv(262,144,
    544) = 482 full blocks + 3 state pages = 485; 7,162 / 485 = 14.767 -> "14.77x" (the log).
    """
    log = LOGS["qwen3-next-80b-tp2-v0.10.2"]
    s, f = log["settings"], log["figures"]
    m = km.Model.from_hf_config(NEXT)
    assert vllm_kv_groups(m) == (12, ("linear",) * 3 + ("full",))
    kv = vllm_kv_cache(m, f["available_kv_gib"] * GiB, s["max_model_len"], tensor_parallel=s["tensor_parallel"],
                       max_num_batched_tokens=s["max_num_batched_tokens"])
    assert (kv.block_size, kv.page_bytes, kv.state_bytes) == (544, 557_056, 548_864)
    assert round(100 * kv.state_padding, 2) == f["state_padding_pct"]
    assert (kv.num_groups, kv.group_size, kv.num_blocks, kv.blocks_per_request) == (4, 12, 7162, 485)
    assert kv.tokens == f["tokens"] and round(kv.max_concurrency, 2) == f["max_concurrency"]
    # the printed 44.59 GiB allows 7,161.6 to 7,163.2 blocks, so 7,161 to 7,163: the tokens line holds for
    # each (// 4 = 1,790); the concurrency line (n / 485 printing 14.77) only for 7,162 and 7,163
    low, high = (vllm_kv_cache(m, x, 262144, tensor_parallel=2, max_num_batched_tokens=8192).num_blocks
                 for x in (f["available_kv_gib"] * GiB - HALF, f["available_kv_gib"] * GiB + HALF))
    assert (low, high) == (7161, 7163)
    fits = [n for n in range(low, high + 1)
            if n // 4 * 544 == f["tokens"] and round(n / 485, 2) == f["max_concurrency"]]
    assert fits == [7162, 7163]


def test_qwen3_next_fp8_kv_log_issue26646_fixes_the_block_size():
    """vLLM issue #26646: the same architecture at TP=2 with an fp8_e5m2 KV cache and fp16 weights; the thread
    shows 'GPU KV cache size: 90,048 tokens' and 'Maximum concurrency for 215,040 tokens per request: 1.66x'
    but no 'Available KV cache memory' line.

    fp8 halves the attention bytes (512 B per token per rank) but not the state, which stays in the model's
    dtype (548,864 B in fp16): block 16 x cdiv(548,864, 16 x 512) = 16 x 67 = 1,072 tokens. 90,048 = 84 x
    1,072, a whole number of blocks per group; an fp8 state (block 544) would need 165.5. A request:
    cdiv(215,040, 1,072) = 201 blocks + 3 = 204. The tokens line allows 84 x 4 = 336 to 339 blocks, the
    concurrency line (n / 204 printing 1.66) 338 or 339: both lines hold for exactly those two counts.
    """
    log = LOGS["qwen3-next-80b-int4-tp2-fp8kv-issue26646"]
    s, f = log["settings"], log["figures"]
    m = km.Model.from_hf_config(NEXT)
    page = 1072 * 512 * 12  # one block of a group of 12 layers
    fits = []
    for blocks in range(330, 346):
        kv = vllm_kv_cache(m, blocks * page, s["max_model_len"], tensor_parallel=2, kv_dtype="fp8")
        assert (kv.block_size, kv.blocks_per_request, kv.num_blocks) == (1072, 204, blocks)
        if kv.tokens == f["tokens"] and round(kv.max_concurrency, 2) == f["max_concurrency"]:
            fits.append(blocks)
    assert fits == [338, 339]
    # were the state cached in fp8 too, the block would be 544 and 90,048 tokens no whole number of blocks
    assert 90048 % 1072 == 0 and 90048 % (4 * 544) != 0


def test_state_stays_in_the_model_dtype_and_a_larger_block_asked_for_is_kept():
    # the block vLLM sets is a floor: a larger one asked for is used, and the state is padded to its page
    m = km.Model.from_hf_config(NEXT)
    kv = vllm_kv_cache(m, 40 * GiB, 32768, tensor_parallel=2)
    assert kv.block_size == 544
    # at one rank the attention page per token doubles (2 KV heads) and so does the state: still 544
    one = vllm_kv_cache(m, 80 * GiB, 32768)
    assert (one.block_size, one.state_bytes) == (544, 2 * 548_864)
    # alignment 32 (Blackwell, FlashInfer, head size 256): 32 x cdiv(548,864, 32 x 1,024) = 32 x 17 = 544 too;
    # at TP=4 (272-token block at 16) it gives 288
    assert vllm_kv_cache(m, 40 * GiB, 32768, tensor_parallel=4).block_size == 272
    assert vllm_kv_cache(m, 40 * GiB, 32768, tensor_parallel=4, block_alignment=32).block_size == 288


def test_chunked_local_attention_groups_by_hand():
    """Llama 4's pattern on the Llama 3.1 8B config: 36 chunked (8,192-token chunks) + 12 full layers, 8 KV
    heads of 128, bf16. Group size 12: 3 chunked groups + 1 full. A 131,072-token request with 8,192 batched
    tokens: full cdiv(131,072, 16) = 8,192 blocks, each chunked group cdiv(min(8,192 + 8,192, 131,072), 16)
    = 1,024 (ChunkedLocalAttentionSpec.max_memory_usage_bytes): 8,192 + 3 x 1,024 = 11,264 blocks of
    16 x 2 x 8 x 128 x 2 = 65,536 B per layer. Without the hybrid manager (vLLM's default for chunked
    attention up to v0.11 unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1, and kvmath's default too)
    every layer is full: one group of 48, cdiv(131,072, 16) = 8,192 blocks a request."""
    m = km.Model.from_hf_config(edited(num_hidden_layers=48, attention_chunk_size=8192,
                                       layer_types=["chunked_attention"] * 3 * 12 + ["full_attention"] * 12))
    assert vllm_kv_groups(m, hybrid=True) == (12, ("chunked",) * 3 + ("full",))
    assert vllm_kv_groups(m) == (48, ("full",))  # vLLM v0.10-v0.11's default for chunked local attention
    kv = vllm_kv_cache(m, 30_000 * 12 * 65536, 131072, max_num_batched_tokens=8192, hybrid=True)
    assert (kv.page_bytes, kv.num_blocks, kv.blocks_per_request) == (65536, 30_000, 11_264)
    assert kv.tokens == 30_000 // 4 * 16 and kv.max_concurrency == 30_000 / 11_264
    flat = vllm_kv_cache(m, 48 * 65536 * 9000, 131072, hybrid=False)
    assert (flat.group_kinds, flat.num_blocks, flat.blocks_per_request) == (("full",), 9000, 8192)
    default = vllm_kv_cache(m, 48 * 65536 * 9000, 131072)
    assert (default.num_blocks, default.hybrid_kv_cache_manager) == (9000, False)


def test_a_request_that_does_not_fit_is_refused_with_the_hybrid_figures():
    # 400 blocks of the Qwen3-Next TP=2 page (400 / 485 = 0.82 of a 262,144-token request; 400 // 4 x 544 =
    # 54,400 tokens): vLLM refuses to start, and so does kvmath, with the figures it would have logged
    m = km.Model.from_hf_config(NEXT)
    with pytest.raises(ValueError, match=r"max concurrency 0\.82x; 400 blocks, 54,400 tokens"):
        vllm_kv_cache(m, 400 * 12 * 557_056, 262144, tensor_parallel=2)


def test_engine_estimate_for_a_hybrid_model_runs_end_to_end():
    # Qwen3-Next bf16 on 4 H100s: weights 159.3 GB / 4 per rank; the engine estimate sizes the rest
    m = km.Model.from_hf_config(NEXT)
    e = vllm_engine(m, km.Chip.preset("h100-sxm"), 131072, tensor_parallel=4)
    assert e.block_size == 272 and e.group_kinds == ("linear",) * 3 + ("full",)
    assert e.num_blocks == int(e.available_kv_bytes // e.page_bytes // 12)


def _qwen35_layout(name, layers, heads, kv_heads, key_heads, value_heads, d_model):
    """A Qwen3.5-family (``qwen3_5`` / ``qwen3_5_moe``) layout, which kvmath has no reader for: three Gated
    DeltaNet layers to every full-attention one (``full_attention_interval`` 4), head_dim 256, linear heads of
    128, conv kernel 4, and the recurrent state in fp32 (``mamba_ssm_dtype`` float32; the conv state in bf16):
    ``value_heads x 128 x 128 x 4 + 3 x (2 x key_heads + value_heads) x 128 x 2`` bytes per layer."""
    from kvmath.layers import LayerSpec

    state = value_heads * 128 * 128 * 4 + 3 * (2 * key_heads + value_heads) * 128 * 2
    gdn = LayerSpec("linear", n_heads=value_heads, state_bytes=state)
    full = LayerSpec("full", heads, kv_heads, 256)
    return km.Model(name, layers, d_model, heads, kv_heads, 256, 4 * d_model, 248320, attention="gqa",
                    layers=((gdn,) * 3 + (full,)) * (layers // 4))


def test_qwen3_8_27b_log_of_vllm_0_29_reproduced_exactly():
    """vLLM 0.29.0, Qwen3.8-27B, one GPU, bf16, max_model_len 8,192, prefix caching on (mamba cache mode
    'align'), tests/data/vllm_logs.json.

    By hand: attention 2 x 4 KV heads x 256 x 2 B = 4,096 B per token per layer; a GDN layer's state 48 x 128 x
    128 x 4 (fp32) + 3 x (2 x 16 + 48) x 128 x 2 = 3,145,728 + 61,440 = 3,207,168 B (x 48 layers = 153,944,064
    B, the 146.8 MiB the report gives). Block 16 x cdiv(3,207,168, 16 x 4,096) = 16 x 49 = 784 tokens (the log's
    784), page 784 x 4,096 = 3,211,264 B, the state padded by 4,096 / 3,207,168 = 0.13% (the log's 0.13%).
    Groups: 16 full + 48 linear -> group size 16, 1 + 3 = 4 groups. Blocks: 31.24 GiB / 3,211,264 / 16 =
    652.85 -> 652 (the log's num_gpu_blocks; the printed 31.24 allows 652.75 to 652.96, so 652 only). A request:
    cdiv(8,192, 784) = 11 full blocks + 2 state pages in each of the 3 linear groups ('align') = 17;
    652 / 17 = 38.353 -> "38.35x". Tokens, vLLM 0.29's rule: int(652 / 17 x 8,192) = int(314,187.3) = 314,187
    (the log); the older rule would print 652 // 4 x 784 = 127,792.
    """
    log = LOGS["qwen3.8-27b-tp1-v0.29.0-align"]
    s, f, a = log["settings"], log["figures"], log["architecture"]
    m = _qwen35_layout("qwen3.8-27b", a["layers"], a["attention_heads"], a["kv_heads"], a["linear_key_heads"],
                       a["linear_value_heads"], 5120)
    assert vllm_kv_groups(m) == (16, ("linear",) * 3 + ("full",))
    kv = vllm_kv_cache(m, f["available_kv_gib"] * GiB, s["max_model_len"], max_num_batched_tokens=s["max_num_batched_tokens"],
                       mamba_cache_mode=s["mamba_cache_mode"], tokens_rule=s["tokens_rule"])
    assert (kv.block_size, kv.page_bytes, kv.state_bytes) == (f["attention_block_size"], 3_211_264, 3_207_168)
    assert 48 * kv.state_bytes == 153_944_064
    assert round(100 * kv.state_padding, 2) == f["state_padding_pct"]
    assert (kv.num_groups, kv.group_size, kv.num_blocks, kv.blocks_per_request) == (4, 16, f["num_gpu_blocks"], 17)
    assert kv.tokens == f["tokens"] and round(kv.max_concurrency, 2) == f["max_concurrency"]
    # the interval the printed GiB allows holds this one block count
    ends = [vllm_kv_cache(m, f["available_kv_gib"] * GiB + d, 8192, mamba_cache_mode="align").num_blocks
            for d in (-HALF, HALF)]
    assert ends == [652, 652]
    # what a tool that ignored the cache mode or the newer tokens line would print instead
    none = vllm_kv_cache(m, f["available_kv_gib"] * GiB, 8192, tokens_rule="concurrency")
    assert none.blocks_per_request == 14 and round(none.max_concurrency, 2) == 46.57
    old = vllm_kv_cache(m, f["available_kv_gib"] * GiB, 8192, mamba_cache_mode="align")
    assert old.tokens == 652 // 4 * 784 == 127_792


def test_qwen3_6_35b_a3b_log_of_vllm_0_20_reproduced_within_the_printed_memory():
    """vLLM 0.20.0, Qwen3.6-35B-A3B (NVFP4 weights), one GPU, fp8_e4m3 KV cache, max_model_len 8,192, prefix
    caching on ('align'), tests/data/vllm_logs.json.

    By hand: attention 2 x 2 KV heads x 256 x 1 B = 1,024 B per token per layer (fp8); a GDN layer's state in
    the model's dtype whatever the KV dtype: 32 x 128 x 128 x 4 + 3 x (2 x 16 + 32) x 128 x 2 = 2,146,304 B.
    Block 16 x cdiv(2,146,304, 16 x 1,024) = 16 x 131 = 2,096 tokens (the log's 2,096), a page of exactly the
    state (no padding line, none printed). Groups: 10 full + 30 linear -> group size 10, 4 groups; a block of a
    group 10 x 2,146,304 = 21,463,040 B. The printed 0.32 GiB allows [0.315, 0.325) GiB = 15.76 to 16.26 blocks:
    15 or 16. A request: cdiv(8,192, 2,096) = 4 + 3 x 2 = 10 blocks. The tokens line (v0.20: num_blocks // 4 x
    2,096) gives 6,288 for 12 to 15 blocks, 8,384 for 16; the concurrency line n / 10 = 1.50 for 15: both hold
    for 15 blocks only, that is for an available memory in [0.315 GiB, 16 blocks = 0.3198 GiB).
    """
    log = LOGS["qwen3.6-35b-a3b-nvfp4-tp1-fp8kv-v0.20.0-align"]
    s, f, a = log["settings"], log["figures"], log["architecture"]
    m = _qwen35_layout("qwen3.6-35b-a3b", a["layers"], a["attention_heads"], a["kv_heads"], a["linear_key_heads"],
                       a["linear_value_heads"], 2048)
    run = dict(kv_dtype="fp8", max_num_batched_tokens=s["max_num_batched_tokens"],
               mamba_cache_mode=s["mamba_cache_mode"], tokens_rule=s["tokens_rule"])
    low, high = (vllm_kv_cache(m, f["available_kv_gib"] * GiB + d, s["max_model_len"], **run) for d in (-HALF, HALF))
    assert (low.block_size, low.state_bytes, low.state_padding, low.blocks_per_request) == (2096, 2_146_304, 0.0, 10)
    assert (low.num_blocks, high.num_blocks) == (15, 16)
    page = 10 * 2_146_304
    fits = [n for n in range(low.num_blocks, high.num_blocks + 1)
            if (kv := vllm_kv_cache(m, n * page, s["max_model_len"], **run)).tokens == f["tokens"]
            and round(kv.max_concurrency, 2) == f["max_concurrency"]]
    assert fits == [15]
    assert f"{16 * page / GiB:.2f}" == "0.32"  # the upper end of the memory that gives 15 blocks still prints 0.32
    # a bf16 state would have needed a 1,072-token block, which the log does not print
    bf16_state = 32 * 128 * 128 * 2 + 3 * (2 * 16 + 32) * 128 * 2
    assert 16 * -(-bf16_state // (16 * 1024)) == 1072


@pytest.mark.filterwarnings("ignore:config.json num_nextn_predict_layers")  # the MTP layer: not a cache term
def test_deepseek_v32_indexer_cache_is_its_own_spec_in_one_group_by_hand():
    """DeepSeek-V3.2 (tests/data/hf_configs/reconstructed): every layer is MLA with the DSA indexer. vLLM gives
    each layer two specs, the latent's MLAAttentionSpec (576 elements) and the indexer's
    (``DeepseekV32IndexerCache``: one 132-byte uint8 key, 128 fp8 values and one fp32 scale), all full attention,
    so one group whose block spans all 122 (UniformTypeKVCacheSpecs). Block 64 (the sparse FlashMLA backend's).

    bf16: a block 61 x 64 x (576 x 2 + 132) = 61 x 64 x 1,284 = 5,012,736 B; 40 GiB / 5,012,736 = 8,568.05 ->
    8,568 blocks, 8,568 x 64 = 548,352 tokens; a 131,072-token request cdiv(131,072, 64) = 2,048 blocks,
    8,568 / 2,048 = 4.18x. fp8 (vLLM turns it into 'fp8_ds_mla', 656 B per token): 61 x 64 x (656 + 132) =
    3,076,352 B -> 13,961 blocks. Without the indexer (DeepSeek-V3's MLA) 61 x 64 x 1,152 = 4,497,408 B ->
    9,549 blocks: the indexer keys take 132 / 1,284 = 10.3% of the bf16 pool.
    """
    v32 = km.Model.from_hf_config(RECONSTRUCTED / "deepseek-ai--DeepSeek-V3.2.json")
    assert {s.kind for s in v32.layer_specs()} == {"dsa"}
    assert vllm_kv_groups(v32) == (1, ("dsa",))
    kv = vllm_kv_cache(v32, 40 * GiB, 131072, block_size=64, kv_dtype="bf16")
    assert (kv.page_bytes, kv.group_size, kv.num_groups) == (61 * 64 * 1284, 1, 1)
    assert (kv.num_blocks, kv.tokens, kv.blocks_per_request) == (8568, 548_352, 2048)
    assert round(kv.max_concurrency, 2) == 4.18
    fp8 = vllm_kv_cache(v32, 40 * GiB, 131072, block_size=64, kv_dtype="fp8")
    assert (fp8.page_bytes, fp8.num_blocks) == (61 * 64 * 788, 13_961)
    # tensor parallelism does not split an MLA latent or the indexer's key
    assert vllm_kv_cache(v32, 40 * GiB, 131072, block_size=64, tensor_parallel=8, kv_dtype="bf16").num_blocks == 8568
    v3 = km.Model.from_hf_config(RECONSTRUCTED / "deepseek-ai--DeepSeek-V3.json")
    assert vllm_kv_cache(v3, 40 * GiB, 131072, block_size=64).num_blocks == 9549
    with pytest.raises(ValueError, match="engine 'v0'.*DSA"):
        vllm_kv_cache(v32, 40 * GiB, 8192, engine="v0")


def test_shared_kv_layers_take_no_pages_by_hand():
    """KV shared with an earlier layer (Gemma 3n's last num_kv_shared_layers; no reader: kvmath refuses the key
    in configs) gets no spec of its own in vLLM (``kv_sharing_target_layer_name``, GPUModelRunner.get_kv_cache_spec).
    A Gemma-3n-E2B-like layout: 30 layers, 8 heads / 2 KV heads of 256, window 512, four sliding to one full;
    the last 10 (8 sliding, 2 full) share. Own layers 16 sliding + 4 full: group size 4 (16 >= 1.5 x 4), 4
    sliding groups + 1 full. Page 16 x 2 x 2 x 256 x 2 = 32,768 B; 1 GiB / 32,768 / 4 = 8,192 blocks; counting
    the shared layers as their own (24 sliding + 6 full: group size 6, 4 + 1 groups) gives 1 GiB / 32,768 / 6 =
    5,461. A 8,192-token request with 2,048 batched tokens: 512 full blocks + 4 x (cdiv(511 + 2,048, 16) + 1) =
    512 + 4 x 161 = 1,156; 8,192 / 1,156 = 7.09x."""
    from kvmath.layers import LayerSpec

    sliding, full = LayerSpec("sliding", 8, 2, 256, window=512), LayerSpec("full", 8, 2, 256)
    own = ((sliding,) * 4 + (full,)) * 4
    shared = tuple(LayerSpec("shared", 8, 2, 256, window=s.window) for s in ((sliding,) * 4 + (full,)) * 2)
    m = km.Model("gemma-3n-like", 30, 2048, 8, 2, 256, 8192, 262144, attention="gqa", layers=own + shared)
    assert vllm_kv_groups(m) == (4, ("sliding",) * 4 + ("full",))
    kv = vllm_kv_cache(m, 1 * GiB, 8192, max_num_batched_tokens=2048)
    assert (kv.page_bytes, kv.num_blocks, kv.blocks_per_request) == (32768, 8192, 1156)
    assert round(kv.max_concurrency, 2) == 7.09
    twice = km.Model("counted-twice", 30, 2048, 8, 2, 256, 8192, 262144, attention="gqa", layers=own + own[:10])
    assert vllm_kv_cache(twice, 1 * GiB, 8192).num_blocks == 5461


@pytest.mark.filterwarnings("ignore:config.json num_nextn_predict_layers")
def test_capacity_engine_vllm_sizes_deepseek_v32_from_its_config(capsys):
    # was refused by name ('dsa' layers); now sized: one group whose blocks span every layer's two pages
    from kvmath.cli import main

    config = str(RECONSTRUCTED / "deepseek-ai--DeepSeek-V3.2.json")
    assert main(["capacity", "--config", config, "--hardware", "h200", "--chips", "8", "--context", "32768",
                 "--engine", "vllm"]) == 0
    out = capsys.readouterr().out
    assert "1 spanning every layer (1 dsa)" in out and "max concurrency" in out


def test_maverick_is_sized_without_the_hybrid_manager_by_default_and_with_it_when_asked():
    """Llama 4 Maverick's file at TP=8, bf16 cache: 8 KV heads over 8 ranks, 1 x 128 x 2 x 2 B = 512 B per token and
    layer, a page 16 x 512 = 8,192 B. Default (vLLM v0.10-v0.11, chunked local attention): one group of all 48
    layers, 10,000 blocks from 10,000 x 48 x 8,192 B, a 131,072-token request 8,192 blocks: 1.2207x. Hybrid
    manager on (later releases): 36 chunked + 12 full, groups of 12 (4 groups): 40,000 blocks; a request 8,192
    full + 3 x cdiv(8,192 + 8,192, 16) = 3 x 1,024 chunked = 11,264: 3.5511x."""
    m = km.Model.from_hf_config(RECONSTRUCTED / "meta-llama--Llama-4-Maverick-17B-128E-Instruct.json")
    memory = 10_000 * 48 * 8192
    off = vllm_kv_cache(m, memory, 131072, tensor_parallel=8, max_num_batched_tokens=8192)
    on = vllm_kv_cache(m, memory, 131072, tensor_parallel=8, max_num_batched_tokens=8192, hybrid=True)
    assert (off.num_blocks, off.blocks_per_request, off.hybrid_kv_cache_manager) == (10_000, 8192, False)
    assert (on.num_blocks, on.blocks_per_request, on.hybrid_kv_cache_manager) == (40_000, 11_264, True)
    assert off.max_concurrency == 10_000 / 8192 and on.max_concurrency == 40_000 / 11_264


def test_both_tokens_lines_of_the_qwen3_next_log():
    # vLLM 0.10.2 printed 973,760 (7,162 // 4 x 544); from the concurrency rule of later releases the same pool
    # prints int(7,162 x 262,144 / 485) = int(3,871,083.1) = 3,871,083
    log = LOGS["qwen3-next-80b-tp2-v0.10.2"]
    kv = vllm_kv_cache(km.Model.from_hf_config(NEXT), log["figures"]["available_kv_gib"] * GiB, 262144,
                       tensor_parallel=2, max_num_batched_tokens=8192)
    assert 7162 * 262144 // 485 == 3_871_083
    assert kv.tokens_by_rule == {"blocks": 973_760, "concurrency": 3_871_083} and kv.tokens == 973_760


def test_a_float32_config_is_served_in_bf16_weights_and_states():
    """vLLM's --dtype auto runs a float32 checkpoint in bf16 (_resolve_auto_dtype), its Mamba state too (mamba_cache_dtype
    auto). Granite 4.0 H Micro's file with dtype float32, 40 GiB, 8,192 tokens, by hand: attention 2 x 8 x 64 x 2 B =
    2,048 B per token and layer; the state 537,344 elements per layer, 1,074,688 B in bf16: block 16 x cdiv(1,074,688,
    16 x 2,048) = 528, page 1,081,344 B; 4 full + 36 linear layers: groups of 4, 1 + 9 groups; floor(floor(40 GiB /
    1,081,344) / 4) = 9,929 blocks; a request cdiv(8,192, 528) = 16 + 9 = 25: 397.16x, tokens 9,929 // 10 x 528 =
    523,776. In fp32 (--dtype fp32) with a bf16 cache (--kv-cache-dtype bfloat16): 2,149,376 B, block 1,056, 4,964
    blocks, 8 + 9 = 17 a request: 292.0x. With vLLM's --kv-cache-dtype auto the cache is fp32 too, 4,096 B per
    token and layer: block 16 x cdiv(2,149,376, 65,536) = 528, page 2,162,688 B, floor(floor(40 GiB / 2,162,688) /
    4) = floor(19,859 / 4) = 4,964 blocks, 16 + 9 = 25 a request: 198.56x."""
    config = json.loads((RECONSTRUCTED / "ibm-granite--granite-4.0-h-micro.json").read_text())
    m = km.Model.from_hf_config({**config, "dtype": "float32"})
    auto = vllm_kv_cache(m, 40 * GiB, 8192, max_num_batched_tokens=2048)
    assert (auto.state_bytes, auto.block_size, auto.page_bytes) == (1_074_688, 528, 1_081_344)
    assert (auto.num_blocks, auto.blocks_per_request, auto.tokens) == (9929, 25, 523_776)
    assert round(auto.max_concurrency, 2) == 397.16
    fp32 = vllm_kv_cache(m, 40 * GiB, 8192, max_num_batched_tokens=2048, dtype="fp32", kv_dtype="bf16")
    assert (fp32.state_bytes, fp32.block_size, fp32.num_blocks, fp32.blocks_per_request) == (2_149_376, 1056, 4964, 17)
    assert round(fp32.max_concurrency, 2) == 292.0
    fp32 = vllm_kv_cache(m, 40 * GiB, 8192, max_num_batched_tokens=2048, dtype="fp32")
    assert (fp32.kv_cache_dtype, fp32.block_size, fp32.page_bytes) == ("fp32", 528, 2_162_688)
    assert (fp32.num_blocks, fp32.blocks_per_request, round(fp32.max_concurrency, 2)) == (4964, 25, 198.56)
    # OLMo-2 32B's float32 file on one H200: 32,233,886,720 parameters loaded in bf16, 64,467,773,440 B, not
    # the 128,935,546,880 B the file stores
    olmo = km.Model.from_hf_config(Path(__file__).parents[1] / "data" / "hf_configs" / "allenai--OLMo-2-0325-32B")
    stored = km.hf_config.weights_from_hf_config(Path(__file__).parents[1] / "data" / "hf_configs" /
                                                 "allenai--OLMo-2-0325-32B")
    assert stored == "fp32" and olmo.weight_bytes_resident(stored) == 4 * 32_233_886_720
    e = vllm_engine(olmo, km.Chip.preset("h200"), 4096, weights=stored)
    assert e.weight_bytes == 2 * 32_233_886_720 == 64_467_773_440 and e.weight_formats == "bf16"
    assert vllm_engine(olmo, km.Chip.preset("h200"), 4096, weights=stored, dtype="fp32").weight_bytes == 4 * 32_233_886_720


def test_the_recurrent_state_follows_mamba_ssm_dtype_and_the_flag():
    # Qwen3-Next's file with Qwen3.5's mamba_ssm_dtype float32, TP=2: per rank (24,576 x 2 B + 524,288 x 4 B) / 2 =
    # 1,073,152 B (vLLM reads the key, Qwen3_5ForConditionalGenerationConfig); --mamba-ssm-cache-dtype bfloat16
    # gives (24,576 + 524,288) x 2 / 2 = 548,864 B, the log's state
    m = km.Model.from_hf_config({**NEXT, "mamba_ssm_dtype": "float32"})
    assert vllm_kv_cache(m, 40 * GiB, 32768, tensor_parallel=2).state_bytes == 1_073_152
    assert vllm_kv_cache(m, 40 * GiB, 32768, tensor_parallel=2, mamba_ssm_cache_dtype="bf16").state_bytes == 548_864


@pytest.mark.filterwarnings("ignore:config.json num_nextn_predict_layers")
def test_mla_is_sized_in_vllms_mla_block_by_default():
    """vLLM forces 64-token blocks for MLA with FlashMLA (Hopper): DeepSeek-V3 at 40 GiB, a page 64 x 576 x 2 =
    73,728 B per layer: floor(floor(40 GiB / 73,728) / 61) = 9,549 blocks, 611,136 tokens (16-token blocks would
    give 38,199 and 611,184). On datacenter Blackwell CUTLASS MLA's 128; on an L4 (no FlashMLA) 16."""
    from kvmath.memory import vllm_block_size

    v3 = km.Model.from_hf_config(RECONSTRUCTED / "deepseek-ai--DeepSeek-V3.json")
    kv = vllm_kv_cache(v3, 40 * GiB, 8192)
    assert (kv.block_size, kv.page_bytes, kv.num_blocks, kv.tokens) == (64, 73_728, 9549, 611_136)
    assert vllm_kv_cache(v3, 40 * GiB, 8192, block_size=16).num_blocks == 38_199
    assert [vllm_block_size(v3, km.Chip.preset(c)) for c in ("h200", "b200", "l4")] == [64, 128, 16]
    assert vllm_block_size(km.Model.from_hf_config(NEXT), km.Chip.preset("h200")) == 16


@pytest.mark.filterwarnings("ignore:config.json num_nextn_predict_layers")
def test_dsa_block_is_64_wherever_vllms_sparse_backend_runs_whatever_is_asked():
    """Review J23-1. vLLM's ``CudaPlatform.check_and_update_config`` (vllm/platforms/cuda.py, commit 002db495 and
    the v0.11-era versions): ``use_sparse = hasattr(hf_config, "index_topk")``, then, after the FlashMLA (64) and
    CUTLASS MLA (128) rules, ``if use_sparse and block_size != 64: block_size = 64``. So DeepSeek-V3.2 is paged in
    64-token blocks on every chip its sparse backend runs on, and an asked 16 or 128 becomes 64; MLA alone
    (DeepSeek-V3) keeps the chip's rule: Hopper a multiple of 64, the B200 a multiple of 128.

    By hand, V3.2 at 40 GiB, bf16: a block of 61 layers x 64 x (1,152 + 132) B = 5,012,736 B, 8,568 blocks
    whatever block is asked (16 would give 61 x 16 x 1,284 = 1,253,184 B and 34,272 blocks)."""
    from kvmath.memory import MLA_BLOCK_SIZE, vllm_block_size

    v32 = km.Model.from_hf_config(RECONSTRUCTED / "deepseek-ai--DeepSeek-V3.2.json")
    v3 = km.Model.from_hf_config(RECONSTRUCTED / "deepseek-ai--DeepSeek-V3.json")
    # Hopper (9.0) and datacenter Blackwell (10.0, and the B300's 10.3): FlashMLASparse runs there
    for name in ("h100-sxm", "h200", "h800", "h20", "b200", "b200-hgx", "gb200", "b300", "gb300"):
        chip = km.Chip.preset(name)
        for asked in (None, 1, 16, 64, 128, 256):
            assert vllm_block_size(v32, chip, asked) == 64, (name, asked)
    assert MLA_BLOCK_SIZE == 64 and vllm_block_size(v32) == vllm_block_size(v32, None, 16) == 64
    # MLA alone: the chip's multiple replaces a block that is not one; a multiple asked for is kept
    assert [vllm_block_size(v3, km.Chip.preset("h200"), b) for b in (None, 16, 64, 128)] == [64, 64, 64, 128]
    assert [vllm_block_size(v3, km.Chip.preset("b200"), b) for b in (None, 16, 64, 256)] == [128, 128, 128, 256]
    assert [vllm_block_size(v3, km.Chip.preset("l4"), b) for b in (None, 32)] == [16, 32]
    # the engine uses that block: 8,568 blocks of 64 at 40 GiB, the same when 16 is asked
    for asked in (None, 16, 128):
        kv = vllm_kv_cache(v32, 40 * GiB, 131072, block_size=asked, kv_dtype="bf16")
        assert (kv.block_size, kv.page_bytes, kv.num_blocks) == (64, 5_012_736, 8568)
    b200 = vllm_engine(v32, km.Chip.preset("b200"), 8192, tensor_parallel=8, kv_dtype="bf16")
    assert b200.block_size == 64
    # AMD: vLLM's ROCm sparse backend takes block size 1 only and refuses to start otherwise
    assert vllm_block_size(v32, km.Chip.preset("mi300x"), 1) == 1
    with pytest.raises(ValueError, match="ROCm.*after v0.11.*block size 1"):
        vllm_block_size(v32, km.Chip.preset("mi300x"))
    with pytest.raises(ValueError, match="not size as vLLM does on tpu-v7"):
        vllm_block_size(v32, km.Chip.preset("tpu-v7"))


@pytest.mark.filterwarnings("ignore:config.json num_nextn_predict_layers")
@pytest.mark.parametrize("name, capability", [("a100-80gb", "8.0"), ("a100-40gb", "8.0"), ("rtx-3090", "8.6"),
                                              ("l4", "8.9"), ("l40s", "8.9"), ("rtx-4090", "8.9"),
                                              ("rtx-5090", "12.0"), ("rtx-pro-6000", "12.0"),
                                              ("rtx-pro-6000-server", "12.0"), ("dgx-spark", "12.1")])
def test_dsa_is_refused_where_vllm_has_no_sparse_backend(name, capability):
    """Review R26e-4. vLLM's one sparse MLA backend for DeepSeek-V3.2, FlashMLASparse, runs on compute capability
    9.x and 10.x only (``is_flashmla_sparse_supported``, vllm/attention/ops/flashmla.py, v0.11: ``[0] not in (9,
    10)``; ``supports_compute_capability``, ``capability.major in [9, 10]``, later): v0.11 picks it whatever the chip
    and its kernels fail on an A100 ("Only SM90 and SM100 are supported", vllm-project/vllm issue #30036), later
    releases refuse at start-up ("No valid attention backend found", issue #31936, RTX PRO 6000). kvmath refuses
    by name, from every entry point that takes the chip; DeepSeek-V3 (MLA, no DSA) is served there."""
    from kvmath.memory import vllm_block_size

    v32 = km.Model.from_hf_config(RECONSTRUCTED / "deepseek-ai--DeepSeek-V3.2.json")
    chip = km.Chip.preset(name)
    wanted = rf"vLLM cannot serve on {name} \(compute capability {capability}\).*9\.x and 10\.x only"
    for asked in (None, 16, 64):
        with pytest.raises(ValueError, match=wanted):
            vllm_block_size(v32, chip, asked)
    with pytest.raises(ValueError, match=wanted):
        vllm_kv_cache(v32, 40 * GiB, 8192, chip=chip)
    if chip.runtime_bytes is not None or chip.device_bytes is not None:
        with pytest.raises(ValueError, match=wanted):
            vllm_engine(v32, chip, 8192, tensor_parallel=8, weight_bytes=40 * GiB)
    # a memory size in place of the preset's keeps the chip's rule (Deployment.capacity with hbm_bytes)
    with pytest.raises(ValueError, match=wanted):
        km.Deployment(v32, chip, "tp=64").capacity(8192, hbm_bytes=200e9, engine="vllm")
    v3 = km.Model.from_hf_config(RECONSTRUCTED / "deepseek-ai--DeepSeek-V3.json")
    assert vllm_block_size(v3, chip) == 16  # MLA without FlashMLA or CUTLASS MLA: the default block, as asked


@pytest.mark.filterwarnings("ignore:config.json num_nextn_predict_layers")
def test_b300_and_gb300_mla_block_is_the_one_asked_for_in_vllm_v0_10_v0_11():
    """Review R26e-1. The B300 and GB300 are compute capability 10.3 (NVIDIA's CUDA GPUs table; vLLM logs "Device
    capability 10.3" on a B300, vllm-project/vllm issue #30630). vLLM v0.10-v0.11's CUTLASS MLA rule is
    ``cls.is_device_capability(100)``, exactly 10.0 (``Platform.is_device_capability``: ``to_int() == 100``), and
    FlashMLA needs ``get_device_capability()[0] == 9``: neither rule forces a block there, Triton MLA keeps the
    one asked for, 16 by default. By hand: 16 by default, any block of vLLM's kept (32 is not a multiple of 64 or
    128 and stays 32); the B200 (10.0) makes 16 and 32 into 128 and keeps 256."""
    from kvmath.memory import MLA_BLOCK_BY_CHIP, vllm_block_size

    v3 = km.Model.from_hf_config(RECONSTRUCTED / "deepseek-ai--DeepSeek-V3.json")
    for name in ("b300", "gb300"):
        chip = km.Chip.preset(name)
        assert [vllm_block_size(v3, chip, b) for b in (None, 16, 32, 64, 128)] == [16, 16, 32, 64, 128]
    assert [vllm_block_size(v3, km.Chip.preset("gb200"), b) for b in (None, 16, 32, 256)] == [128, 128, 128, 256]
    # the table, by hand from the compute capabilities: 9.x 64, exactly 10.0 128, nothing else
    assert MLA_BLOCK_BY_CHIP == {"h100-sxm": 64, "h200": 64, "h800": 64, "h20": 64,
                                 "b200": 128, "b200-hgx": 128, "gb200": 128}
    # the engine sizes in that block: at 40 GiB, 16-token pages of 16 x 576 x 2 = 18,432 B, floor(floor(40 GiB
    # / 18,432) / 61) = 38,199 blocks (the 16-token count of test_mla_is_sized_in_vllms_mla_block_by_default)
    kv = vllm_kv_cache(v3, 40 * GiB, 8192, chip=km.Chip.preset("b300"))
    assert (kv.block_size, kv.page_bytes, kv.num_blocks) == (16, 18_432, 38_199)


def test_every_nvidia_preset_has_its_compute_capability_and_no_other_chip_has_one():
    """NVIDIA's CUDA GPU Compute Capability table (https://developer.nvidia.com/cuda/gpus): A100 8.0, RTX 3090 8.6,
    L4 / L40S / RTX 4090 8.9, H100 / H200 9.0, B200 / GB200 10.0, B300 / GB300 10.3, RTX 5090 / RTX PRO 6000 12.0,
    GB10 12.1; the H800 and H20 are Hopper, 9.0. A new NVIDIA preset without one would be refused for MLA and DSA
    models, so every one has it."""
    from kvmath.memory import CUDA_COMPUTE_CAPABILITY, vllm_block_size

    nvidia = {n for n in km.Chip.presets() if km.Chip.preset(n).vendor == "nvidia"}
    assert set(CUDA_COMPUTE_CAPABILITY) == nvidia
    assert {n: CUDA_COMPUTE_CAPABILITY[n] for n in ("a100-40gb", "rtx-3090", "l4", "h100-sxm", "h20", "b200",
                                                    "b300", "gb300", "rtx-pro-6000", "dgx-spark")} == {
        "a100-40gb": (8, 0), "rtx-3090": (8, 6), "l4": (8, 9), "h100-sxm": (9, 0), "h20": (9, 0), "b200": (10, 0),
        "b300": (10, 3), "gb300": (10, 3), "rtx-pro-6000": (12, 0), "dgx-spark": (12, 1)}
    # an NVIDIA chip kvmath has no compute capability for is refused for an MLA model, not guessed
    other = km.Chip.preset("h100-sxm").replace(name="h100-pcie")
    with pytest.raises(ValueError, match="'h100-pcie'.*compute capability"):
        vllm_block_size(km.Model.preset("deepseek-v3"), other)
    assert vllm_block_size(km.Model.preset("llama-3-8b"), other) == 16  # no MLA, no DSA: no rule to test


def test_mamba2_state_under_tensor_parallelism_replicates_the_groups_by_hand():
    """Review J23-2. vLLM's ``MambaStateShapeCalculator.mamba2_state_shape`` (vllm/model_executor/layers/mamba/
    mamba_utils.py @ 02d71083) first sets ``n_groups += extra_groups_for_head_shards(n_groups, tp)``, ``tp -
    n_groups`` where tp does not divide n_groups, so every rank keeps the B/C groups its heads need; the conv
    state per rank is ``(d_inner + 2 (n_groups + extra) d_state) / tp x (d_conv - 1)`` and the SSM state
    ``n_heads / tp x d_head x d_state``. Gated DeltaNet (``gated_delta_net_state_shape``) splits evenly.

    Granite 4.0 H Micro (one group, d_inner 4,096 = 64 heads x 64, d_state 128, d_conv 4, bf16; attention 8 KV
    heads of 64), by hand:
      TP=1: (4,096 + 256) x 3 + 64 x 64 x 128 = 13,056 + 524,288 = 537,344 elements, 1,074,688 B;
      TP=2: (4,096 + 2 x 2 x 128) / 2 x 3 = 6,912 + 262,144 = 269,056 x 2 = 538,112 B (an even split: 537,344);
      TP=4: (4,096 + 2 x 4 x 128) / 4 x 3 = 3,840 + 131,072 = 134,912 x 2 = 269,824 B;
      TP=8: (4,096 + 2 x 8 x 128) / 8 x 3 = 2,304 + 65,536 = 67,840 x 2 = 135,680 B.
    The attention block: 16 x cdiv(state, 16 x bytes per token and layer), 2 x max(1, 8 / tp) x 64 x 2 B:
      TP=2: 4 heads, 1,024 B: 16 x cdiv(538,112, 16,384) = 16 x 33 = 528, padding 540,672 / 538,112 - 1 = 0.48%;
      TP=4: 2 heads, 512 B: 16 x cdiv(269,824, 8,192) = 528, padding 270,336 / 269,824 - 1 = 0.19%;
      TP=8: 1 head, 256 B: 16 x cdiv(135,680, 4,096) = 16 x 34 = 544 (528 without the replication), padding
      139,264 / 135,680 - 1 = 2.64%. Tokens at 30 GiB, 131,072 tokens, TP=8: 4 full + 36 linear layers, groups
      of 4, 10 groups; floor(floor(32,212,254,720 / 139,264) / 4) = floor(231,303 / 4) = 57,825 blocks;
      57,825 // 10 x 544 = 5,782 x 544 = 3,145,408.
    """
    from kvmath.layers import LayerSpec

    m = km.Model.from_hf_config(RECONSTRUCTED / "ibm-granite--granite-4.0-h-micro.json")
    spec = next(s for s in m.layer_specs() if s.kind == "linear")
    assert (spec.conv_groups, spec.group_conv_elems) == (1, 2 * 128 * 3)
    assert [spec.conv_elems_per_rank(tp) for tp in (1, 2, 4, 8)] == [13_056, 6_912, 3_840, 2_304]
    hand = {1: (1_074_688, 528, 0.0062), 2: (538_112, 528, 0.0048), 4: (269_824, 528, 0.0019),
            8: (135_680, 544, 0.0264)}
    for tp, (state, block, padding) in hand.items():
        kv = vllm_kv_cache(m, 30 * GiB, 131072, tensor_parallel=tp)
        assert (kv.state_bytes, kv.block_size) == (state, block), tp
        assert round(kv.state_padding, 4) == padding, tp  # vLLM prints it to 0.01%
    kv8 = vllm_kv_cache(m, 30 * GiB, 131072, tensor_parallel=8)
    assert (kv8.page_bytes, kv8.num_blocks, kv8.tokens) == (139_264, 57_825, 3_145_408)
    # Gated DeltaNet splits evenly (no groups): Qwen3-Next's state per rank is the state over TP
    gdn = next(s for s in km.Model.from_hf_config(NEXT).layer_specs() if s.kind == "linear")
    assert gdn.conv_groups == 0 and gdn.conv_elems_per_rank(2) == gdn.conv_elems // 2
    # groups that TP divides are split, not replicated: 8 groups at TP=4 (2 each), at TP=8 (1 each)
    eight = LayerSpec("linear", n_heads=64, state_bytes=2 * ((4096 + 2 * 8 * 128) * 3 + 524_288),
                      conv_elems=(4096 + 2 * 8 * 128) * 3, ssm_elems=524_288, state_dtype="bf16", conv_groups=8,
                      group_conv_elems=768)
    assert eight.conv_elems_per_rank(4) == (4096 + 2048) * 3 // 4 and eight.conv_elems_per_rank(8) == 6144 * 3 // 8
    with pytest.raises(ValueError, match="conv_groups .* go together"):
        LayerSpec("linear", state_bytes=2.0, conv_elems=1, state_dtype="bf16", conv_groups=1)


@pytest.mark.filterwarnings("ignore:config.json num_nextn_predict_layers")
def test_deepseek_v32_default_cache_is_fp8_ds_mla_as_vllm_v0_11_stores_it(capsys):
    """Review J23-3. vLLM v0.11's DeepseekV32ForCausalLM.verify_and_update_config (models/config.py; PR #25988,
    merged 2025-09-30) turns --kv-cache-dtype "auto" (the default) and any fp8 into fp8_ds_mla for DeepSeek-V3.2;
    an explicit bfloat16 keeps bf16 (what later releases' "auto" does). By hand, 40 GiB on one rank, 8,192 tokens:
    fp8_ds_mla, a block of 61 x 64 x (656 + 132) = 3,076,352 B: floor(42,949,672,960 / 3,076,352) = 13,961 blocks,
    893,504 tokens, 13,961 / 128 = 109.07x; bf16, 61 x 64 x (1,152 + 132) = 5,012,736 B: 8,568 blocks, 66.94x.
    Other models' "auto" is their 2-byte dtype: Llama 3.1 8B's figures are bf16's."""
    from kvmath.cli import main

    v32 = km.Model.from_hf_config(RECONSTRUCTED / "deepseek-ai--DeepSeek-V3.2.json")
    auto = vllm_kv_cache(v32, 40 * GiB, 8192)
    assert (auto.kv_cache_dtype, auto.page_bytes, auto.num_blocks, auto.tokens) == ("fp8_ds_mla", 3_076_352,
                                                                                     13_961, 893_504)
    assert round(auto.max_concurrency, 2) == 109.07
    assert vllm_kv_cache(v32, 40 * GiB, 8192, kv_dtype="fp8").num_blocks == 13_961
    bf16 = vllm_kv_cache(v32, 40 * GiB, 8192, kv_dtype="bf16")
    assert (bf16.kv_cache_dtype, bf16.page_bytes, bf16.num_blocks, round(bf16.max_concurrency, 2)) == (
        "bf16", 5_012_736, 8568, 66.94)
    llama = km.Model.preset("llama-3.1-8b")
    a, b = vllm_kv_cache(llama, 40 * GiB, 8192), vllm_kv_cache(llama, 40 * GiB, 8192, kv_dtype="bf16")
    assert (a.kv_cache_dtype, a.num_blocks) == ("bf16", b.num_blocks) and a.num_blocks == 20_480
    # the command line sizes vLLM at its own default and says which format that is
    config = str(RECONSTRUCTED / "deepseek-ai--DeepSeek-V3.2.json")
    assert main(["capacity", "--config", config, "--hardware", "h200", "--chips", "8", "--context", "8192",
                 "--engine", "vllm"]) == 0
    out = capsys.readouterr().out
    assert "KV cache dtype                       fp8_ds_mla  (vLLM v0.11's --kv-cache-dtype auto for DSA" in out
    assert main(["capacity", "--config", config, "--hardware", "h200", "--chips", "8", "--context", "8192",
                 "--engine", "vllm", "--kv-dtype", "bf16"]) == 0
    assert "KV cache dtype" not in capsys.readouterr().out


def test_no_test_model_has_a_layer_ratio_where_vllms_two_thresholds_differ():
    # vLLM v0.10-v0.11 groups by the most layers of any kind where they are under 1.25 times the fewest,
    # commit 001cabc1 under 1.5 (kvmath's VLLM_GROUP_SIZE_RATIO): the two differ for ratios in [1.25, 1.5) only
    import warnings
    from collections import Counter

    data = Path(__file__).parents[1] / "data" / "hf_configs"
    for config in sorted(data.glob("*/config.json")) + sorted((data / "reconstructed").glob("*.json")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            counts = Counter(s.kind for s in km.Model.from_hf_config(config).layer_specs()).values()
        assert not 1.25 <= max(counts) / min(counts) < 1.5, config


def test_a_model_of_linear_layers_only_counts_max_model_len_tokens_a_block():
    """Only linear (Mamba-style) layers: one group, whose block is one request's state page spanning max_model_len
    tokens (vLLM's MambaSpec block_size), so the tokens reported are num_blocks x max_model_len. 4 layers of a
    1,097,728-byte state in 1 GiB: floor(2^30 / 1,097,728 / 4) = floor(244.5) = 244 blocks, 244 x 8,192 tokens."""
    from kvmath.layers import LayerSpec

    linear = LayerSpec("linear", n_heads=8, state_bytes=1_097_728, state_flops=3_145_728.0, params=1)
    m = km.Model("mamba-like", 4, 2048, 8, 2, 256, 8192, 32000, attention="gqa", layers=(linear,) * 4)
    kv = vllm_kv_cache(m, 1 * GiB, 8192)
    assert (kv.num_groups, kv.num_blocks, kv.tokens) == (1, 244, 244 * 8192)


def test_a_runtime_total_beside_the_chip_keeps_the_chips_rules():
    """vllm_engine takes the runtime total beside the chip (``total_bytes``), so a memory size given keeps what the
    chip decides: vLLM's larger V1 defaults (8,192 tokens a pass, 1,024 sequences) go to a GPU of 70 GiB or more
    whose name is not an A100's (``EngineArgs.get_batch_defaults``, vllm/engine/arg_utils.py); a bare number of
    80 GiB stands for an unknown chip and gets them, an A100 with the same total does not. Deployment.capacity's
    hbm_bytes goes through the same path."""
    llama = km.Model.preset("llama-3.1-8b")
    a100 = km.Chip.preset("a100-80gb")
    assert vllm_engine(llama, 80 * GiB, 8192).max_num_batched_tokens == 8192
    given = vllm_engine(llama, a100, 8192, total_bytes=80 * GiB)
    assert (given.max_num_batched_tokens, given.total_bytes) == (2048, 80 * GiB)
    # the chip's own total through total_bytes is the chip's own run, figure for figure
    own = vllm_engine(llama, a100, 8192)
    assert vllm_engine(llama, a100, 8192, total_bytes=own.total_bytes).to_dict() == own.to_dict()
    engine = km.Deployment(llama, a100).capacity(8192, hbm_bytes=80e9, engine="vllm").engine
    assert engine.max_num_batched_tokens == 2048
    with pytest.raises(ValueError, match=r"give the runtime total once: chip is already a number"):
        vllm_engine(llama, 80 * GiB, 8192, total_bytes=80 * GiB)
    with pytest.raises(ValueError, match=r"total_bytes must be > 0, got -1"):
        vllm_engine(llama, a100, 8192, total_bytes=-1)
