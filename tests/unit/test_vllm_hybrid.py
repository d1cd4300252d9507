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
            assert f"Padding mamba page size by {f['state_padding_pct']:.2f}%" in text


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
    attention up to v0.11 unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1) every layer is full:
    one group of 48, cdiv(131,072, 16) = 8,192 blocks a request."""
    m = km.Model.from_hf_config(edited(num_hidden_layers=48, attention_chunk_size=8192,
                                       layer_types=["chunked_attention"] * 3 * 12 + ["full_attention"] * 12))
    assert vllm_kv_groups(m) == (12, ("chunked",) * 3 + ("full",))
    kv = vllm_kv_cache(m, 30_000 * 12 * 65536, 131072, max_num_batched_tokens=8192)
    assert (kv.page_bytes, kv.num_blocks, kv.blocks_per_request) == (65536, 30_000, 11_264)
    assert kv.tokens == 30_000 // 4 * 16 and kv.max_concurrency == 30_000 / 11_264
    flat = vllm_kv_cache(m, 48 * 65536 * 9000, 131072, hybrid=False)
    assert (flat.group_kinds, flat.num_blocks, flat.blocks_per_request) == (("full",), 9000, 8192)


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
