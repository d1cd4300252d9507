"""Memory budgets, the vLLM engine budget and TP of linear states: the review's items 11-15, 18-20.

Expected numbers are computed by hand in the comments; exact unless stated.
"""

import numpy as np
import pytest

import kvmath as km
from kvmath import GiB, get_chip, get_model
from kvmath.memory import (
    memory_budget, runtime_total_bytes, vllm_engine, vllm_kv_cache, vllm_kv_groups, vllm_page_bytes,
)
from tests.unit.test_hf_config import NEXT, edited
from tests.unit.test_hf_config import GPT_OSS

LLAMA_3_8B = get_model("llama-3-8b")


# ----- item 11: linear-attention layers in the vLLM budget --------------------


def test_vllm_budget_refuses_linear_attention_layers():
    # Qwen3-Next: 12 full + 36 Gated DeltaNet layers, which vLLM sizes with a MambaSpec; was (48, 1, 0)
    m = km.Model.from_hf_config(NEXT)
    with pytest.raises(ValueError, match="linear layers.*MambaSpec.*not model"):
        vllm_kv_groups(m)
    with pytest.raises(ValueError, match="linear layers"):
        vllm_kv_cache(m, 10 * GiB, 8192)
    with pytest.raises(ValueError, match="linear layers"):
        vllm_engine(m, get_chip("b200"), 131072, tensor_parallel=8)
    chunked = km.Model.from_hf_config(edited(layer_types=["chunked_attention", "full_attention"] * 16,
                                             attention_chunk_size=8192))
    with pytest.raises(ValueError, match="chunked layers"):
        vllm_kv_groups(chunked)


def test_vllm_groups_count_sliding_layers_from_the_layer_list():
    # gpt-oss-20b from its config.json: 12 sliding + 12 full layers, as the review computed by hand
    m = km.Model.from_hf_config(GPT_OSS)
    assert vllm_kv_groups(m) == (12, 1, 1)


# ----- item 12: tensor parallelism splits linear states by their own heads ----


def test_tp_splits_linear_state_by_its_value_heads():
    # Qwen3-Next at 1,024 tokens: 64,684,032 B per sequence, of which 36 x 1,097,728 = 39,518,208 B GDN state
    # and 25,165,824 B attention KV. On 8 chips: the 2 KV heads replicate, ceil(2/8)/2 = 1/2 -> 12,582,912 B;
    # the state splits over its 32 value heads, ceil(32/8)/32 = 1/8 -> 4,939,776 B. Total 17,522,688 B per chip
    # (it was 32,342,016, half the whole cache).
    m = km.Model.from_hf_config(NEXT)
    step = km.decode_step(m, get_chip("b200"), batch=1, context=1024, n_chips=8)
    assert step.work.kv_bytes_per_seq == 64_684_032
    assert step.kv_bytes_per_chip == pytest.approx(12_582_912 + 4_939_776, rel=1e-12)
    # one chip: everything; batch sharding: whole sequences, unchanged
    assert km.decode_step(m, get_chip("b200"), batch=1, context=1024).kv_bytes_per_chip == pytest.approx(64_684_032)
    by_batch = km.decode_step(m, get_chip("b200"), batch=8, context=1024, n_chips=8, shard="batch")
    assert by_batch.kv_bytes_per_chip == pytest.approx(64_684_032)


# ----- item 13: a budget that is not positive ---------------------------------


def test_reserve_budget_refuses_non_torch_above_the_total():
    with pytest.raises(ValueError, match="non_torch_bytes"):
        memory_budget(get_chip("h100-sxm"), "reserve", non_torch_bytes=1e12)  # was -914,938,172,703


# ----- item 14: settings under which vLLM refuses to start --------------------


def test_no_block_is_refused():
    with pytest.raises(ValueError, match="No available memory for the cache blocks"):
        vllm_kv_cache(LLAMA_3_8B, 0, 8192)
    with pytest.raises(ValueError, match="No available memory"):
        vllm_kv_cache(LLAMA_3_8B, 1, 8192)


def test_concurrency_below_one_is_refused_naming_max_model_len():
    # 1 GiB / (65,536 x 32) = 512 blocks = 8,192 tokens: 8,192 fits (1.00x), 8,208 does not
    assert vllm_kv_cache(LLAMA_3_8B, 1 * GiB, 8192).max_concurrency == 1.0
    with pytest.raises(ValueError, match="max_model_len 8,208.*0.9981x; 512 blocks, 8,192 tokens.*vLLM refuses"):
        vllm_kv_cache(LLAMA_3_8B, 1 * GiB, 8208)
    with pytest.raises(ValueError, match="max_model_len"):
        vllm_kv_cache(LLAMA_3_8B, 1 * GiB, np.array([4096, 10**6]))


# ----- item 15: tensor-parallel sizes vLLM refuses ----------------------------


@pytest.mark.parametrize("tp, why", [(3, "32 attention heads"), (10**6, "32 attention heads")])
def test_tp_not_dividing_the_heads_is_refused(tp, why):
    with pytest.raises(ValueError, match=f"tensor_parallel {tp} does not divide the {why}"):
        vllm_engine(LLAMA_3_8B, get_chip("h100-sxm"), 8192, tensor_parallel=tp)
    with pytest.raises(ValueError, match=f"tensor_parallel {tp}"):
        vllm_page_bytes(LLAMA_3_8B, tensor_parallel=tp)


def test_tp_not_dividing_the_kv_heads_is_refused():
    # 12 heads, 6 KV heads, TP 4: 12 % 4 == 0 but 6 % 4 != 0
    m = km.Model("t", 2, 768, 12, 6, 64, 3072, 1000, attention="gqa")
    with pytest.raises(ValueError, match="tensor_parallel 4 neither divides the 6 KV heads"):
        vllm_page_bytes(m, tensor_parallel=4)
    # 16 ranks over 8 KV heads: replicated twice, accepted (16 x 2 x 1 x 128 x 2)
    assert vllm_page_bytes(LLAMA_3_8B, tensor_parallel=16) == 8192


# ----- item 18: chips without a reported total --------------------------------


@pytest.mark.parametrize("call", [
    lambda: memory_budget(get_chip("h200"), "reserve"),
    lambda: memory_budget(get_chip("h200"), "engine"),
    lambda: km.min_chips_for_weights(1e9, get_chip("h200"), budget="engine"),
    lambda: runtime_total_bytes(get_chip("h200")),
])
def test_a_chip_without_a_reported_total_names_a_real_budget(call):
    with pytest.raises(ValueError, match="'h200' has no reported total") as err:
        call()
    assert "'runtime'" not in str(err.value) and "'device' budget" in str(err.value)


def test_a_tiny_reported_total_names_the_argument():
    with pytest.raises(ValueError, match="device_bytes.*0.5 GiB") as err:
        memory_budget(0.25 * GiB, "reserve")
    assert "DRIVER_RESERVE_BYTES" not in str(err.value)


# ----- item 19: no int64 wrap --------------------------------------------------


def test_huge_counts_raise_instead_of_wrapping():
    with pytest.raises(ValueError, match="too large"):
        vllm_kv_cache(LLAMA_3_8B, np.array([1e30, 1e10]), 8192)  # tokens wrapped to -2**63
    with pytest.raises(ValueError, match="max_model_len is too large"):
        vllm_kv_cache(LLAMA_3_8B, 1e30, np.array([1e20, 8192]))
    with pytest.raises(ValueError, match="too large|overflows|int64"):
        km.max_kv_tokens(np.array([1e30]), 1)
    with pytest.raises(ValueError, match="too large|overflows|int64"):
        km.max_kv_tokens(1e12, 1e-300)  # was OverflowError: cannot convert float infinity
    with pytest.raises(ValueError, match="too large|overflows|int64"):
        km.min_chips_for_weights(np.array([1e30]), 1e-10)
    assert km.max_kv_tokens(np.array([16e9]), 2 * 2**20).tolist() == [7629]


# ----- item 20: small leniencies -----------------------------------------------


def test_small_leniencies_are_refused():
    with pytest.raises(ValueError, match="hybrid must be True or False"):
        vllm_kv_groups(LLAMA_3_8B, hybrid="no")
    with pytest.raises(ValueError, match="hybrid must be True or False"):
        vllm_kv_cache(LLAMA_3_8B, 10 * GiB, 1024, hybrid="no")
    with pytest.raises(ValueError, match="layers \\(100\\) exceeds the model's 32 layers"):
        vllm_kv_cache(LLAMA_3_8B, 10 * GiB, 1024, layers=100)
    with pytest.raises(ValueError, match="block_size must be one of vLLM's"):
        vllm_kv_cache(LLAMA_3_8B, 10 * GiB, 1024, block_size=7)
    with pytest.raises(ValueError, match="model must be a kvmath Model"):
        vllm_page_bytes(None)
    assert vllm_kv_cache(LLAMA_3_8B, 10 * GiB, 1024, block_size=256).block_size == 256
