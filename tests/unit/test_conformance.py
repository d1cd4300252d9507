"""tests/data/conformance-v1.json: what scripts/write_conformance.py writes now, and its hand-checked entries.

Every figure below is computed by hand in its comment from the config's own numbers (exact, bf16 cache).
"""

from __future__ import annotations

import json

import pytest

import write_conformance as wc

FILE = json.loads(wc.OUT.read_text())
BY_CONFIG = {m["config"].split("hf_configs/")[1]: m for m in FILE["models"]}


def test_the_committed_file_is_what_the_code_writes_now():
    # a changed rule changes the file: rerun `python scripts/write_conformance.py` and commit both
    assert wc.OUT.read_text() == wc.text()


def test_every_config_kvmath_is_tested_on_has_an_entry_and_the_format_is_versioned():
    assert {p.relative_to(wc.CONFIGS).as_posix() for p in wc.config_paths()} == set(BY_CONFIG)
    assert (FILE["format"], FILE["version"]) == ("kvmath-conformance", 1)


def test_llama_31_8b_by_hand():
    # 32 layers x 2 (K, V) x 8 KV heads x 128 x 2 B = 131,072 B per token; 1,024 tokens: 134,217,728 B.
    # vLLM at 40 GiB: a block is 16 tokens x 4,096 B x 32 layers = 2 MiB, 20,480 blocks, 327,680 tokens; an
    # 8,192-token request takes 512 blocks: 40.0x
    m = BY_CONFIG["meta-llama--Llama-3.1-8B/config.json"]
    assert m["kv_bytes_per_token"] == 131_072 and m["seq_bytes"]["1024"]["total"] == 134_217_728
    assert (m["vllm"]["num_blocks"], m["vllm"]["tokens"], m["vllm"]["max_concurrency"]) == (20_480, 327_680, 40.0)


def test_qwen3_next_by_hand():
    # 12 full layers x 2 x 2 KV heads x 256 x 2 B = 24,576 B per token; 36 Gated DeltaNet states of
    # (16 x 128 x 128 + 8,192 x 3) x 2 B = 1,097,728 B = 39,518,208 B per sequence. 131,072 tokens:
    # 24,576 x 131,072 + 39,518,208 = 3,260,743,680 B. Read as 48 full layers: 98,304 B per token.
    m = BY_CONFIG["reconstructed/Qwen--Qwen3-Next-80B-A3B-Instruct.json"]
    assert m["layers"] == {"linear": 36, "full": 12}
    assert (m["kv_bytes_per_token"], m["state_bytes_per_seq"]) == (24_576, 39_518_208)
    assert m["seq_bytes"]["131072"]["total"] == 3_260_743_680
    assert m["misreadings"]["linear-attention layers are counted as full attention"]["kv_bytes_per_token"] == 98_304
    # the published log's lines and kvmath's figures for them (tests/unit/test_vllm_hybrid.py derives them)
    log = next(x for x in m["vllm_logs"] if x["id"] == "qwen3-next-80b-tp2-v0.10.2")
    assert "GPU KV cache size: 973,760 tokens" in " ".join(log["lines"]) and log["kvmath"]["tokens"] == 973_760
    assert round(log["kvmath"]["max_concurrency"], 2) == 14.77


def test_gpt_oss_20b_and_deepseek_v3_by_hand():
    # gpt-oss-20b: 24 layers x 2 x 8 x 64 x 2 B = 49,152 B per token reserved; a 131,072-token sequence needs
    # 12 x 2,048 x (128 + 131,072) = 3,224,371,200 B, 6,442,450,944 B with the windows ignored
    oss = BY_CONFIG["openai--gpt-oss-20b/config.json"]
    assert oss["kv_bytes_per_token"] == 49_152 and oss["seq_bytes"]["131072"]["total"] == 3_224_371_200
    ignored = "sliding windows and chunks are ignored (every layer holds every token)"
    assert oss["misreadings"][ignored]["seq_bytes_131072"] == 6_442_450_944
    # DeepSeek-V3: 61 layers x (512 + 64) x 2 B = 70,272 B; read as MHA, 61 x 128 x (128 + 64 + 128) x 2 B
    v3 = BY_CONFIG["reconstructed/deepseek-ai--DeepSeek-V3.json"]
    assert v3["kv_bytes_per_token"] == 70_272
    assert v3["misreadings"]["MLA is read as full multi-head attention"]["kv_bytes_per_token"] == 4_997_120


@pytest.mark.parametrize("key", ["kv_bytes_per_token", "seq_bytes", "misreadings", "weights", "vllm"])
def test_every_entry_has_every_section(key):
    assert all(key in m for m in FILE["models"])


def test_the_entries_the_issue_23_review_recomputed_by_hand():
    # DeepSeek-V3 at 40 GiB in vLLM's 64-token MLA blocks: 61 x 64 x 576 x 2 = 4,497,408 B a block,
    # floor(42,949,672,960 / 73,728 / 61) = 9,549 blocks, 611,136 tokens; its weights as the fp8 release stores
    # them: 669,065,609,216 fp8 weights + 2 x 1,960,670,208 bf16 (test_hf_config_weights) = 672,986,949,632 B
    v3 = BY_CONFIG["reconstructed/deepseek-ai--DeepSeek-V3.json"]
    assert (v3["vllm"]["block_size"], v3["vllm"]["num_blocks"], v3["vllm"]["tokens"]) == (64, 9549, 611_136)
    assert v3["weights"]["bytes"] == 669_065_609_216 + 2 * 1_960_670_208 == 672_986_949_632
    assert v3["weights"]["misreadings"]["every weight is sized in the config's torch_dtype (bf16), not as stored"] \
        == 2 * (669_065_609_216 + 1_960_670_208)
    # DeepSeek-V3.2 misread: as MHA 61 x 128 x (128 + 64 + 128) x 2 = 4,997,120 B; without its indexer, V3's
    # 61 x 576 x 2 = 70,272 B a token
    v32 = BY_CONFIG["reconstructed/deepseek-ai--DeepSeek-V3.2.json"]["misreadings"]
    assert v32["MLA is read as full multi-head attention"]["kv_bytes_per_token"] == 61 * 128 * 320 * 2 == 4_997_120
    assert v32["the DSA indexer's keys are dropped (DeepSeek-V3.2 read as DeepSeek-V3)"]["kv_bytes_per_token"] == 70_272
    # Granite 4.0 H Micro, bf16 state (test_vllm_hybrid's hand computation): 9,929 blocks of 528, 25 a request
    g = BY_CONFIG["reconstructed/ibm-granite--granite-4.0-h-micro.json"]["vllm"]
    assert (g["block_size"], g["num_blocks"], g["blocks_per_request"], g["max_concurrency"]) == (528, 9929, 25, 397.16)
    assert g["tokens_by_rule"] == {"blocks": 9929 // 10 * 528, "concurrency": 9929 * 8192 // 25}
    # Llama 4 Maverick without the hybrid manager (vLLM v0.10-v0.11's default for chunked local attention): one
    # group of 48, 16 x 2 x 8 x 128 x 2 = 65,536 B a page, floor(42,949,672,960 / 65,536 / 48) = 13,653 blocks
    mav = BY_CONFIG["reconstructed/meta-llama--Llama-4-Maverick-17B-128E-Instruct.json"]["vllm"]
    assert (mav["hybrid_kv_cache_manager"], mav["group_size"], mav["num_blocks"]) == (False, 48, 13_653)
    assert all(m["file"].startswith("reconstructed") == ("reconstructed/" in m["config"]) for m in FILE["models"])
