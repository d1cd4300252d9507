"""Bad input fails early with a ValueError that names the argument.

Each case is (callable, the words the message must contain).
"""

import math

import numpy as np
import pytest

import kvmath as km

W, C = 8.2e11, 1.97e14

CASES = [
    (lambda: km.kv_bytes_per_token(-1, 8, 128), "n_layers"),
    (lambda: km.kv_bytes_per_token(0, 8, 128), "n_layers"),
    (lambda: km.kv_bytes_per_token(32, 2.5, 128), "n_kv_heads"),
    (lambda: km.kv_bytes_per_token(32, 8, 0), "head_dim"),
    (lambda: km.kv_bytes_per_token(32, 8, 128, 0), "bytes_per_elem"),
    (lambda: km.kv_bytes_per_token(32, 8, 128, math.nan), "bytes_per_elem"),
    (lambda: km.kv_bytes_per_token("32", 8, 128), "n_layers"),
    (lambda: km.kv_bytes_per_token(None, 8, 128), "n_layers"),
    (lambda: km.kv_bytes_per_token(True, 8, 128), "n_layers"),
    (lambda: km.kv_bytes_per_token(np.array([32, -32]), 8, 128), "n_layers"),
    (lambda: km.min_step(-4, 1e6, 1e9, 1e9, W, C), "batch"),
    (lambda: km.min_step(0, 1e6, 1e9, 1e9, W, C), "batch"),
    (lambda: km.min_step(4, -1, 1e9, 1e9, W, C), "kv_bytes_per_seq"),
    (lambda: km.min_step(4, 1e6, 0, 1e9, W, C), "param_bytes"),
    (lambda: km.min_step(4, 1e6, 1e9, -1e9, W, C), "param_count"),
    (lambda: km.min_step(4, 1e6, 1e9, 1e9, 0, C), "bandwidth"),
    (lambda: km.min_step(4, 1e6, 1e9, 1e9, W, math.inf), "flops"),
    (lambda: km.min_step(math.nan, 1e6, 1e9, 1e9, W, C), "batch"),
    (lambda: km.min_step(np.array([1, np.inf]), 1e6, 1e9, 1e9, W, C), "batch"),
    (lambda: km.min_step_simple(4, 1e6, 1e9, -W), "bandwidth"),
    (lambda: km.critical_batch(C, 0, 2), "bandwidth"),
    (lambda: km.critical_batch(-C, W, 2), "flops"),
    (lambda: km.critical_batch(C, W, 0), "bytes_per_param"),
    (lambda: km.tokens_per_s(0.01, 0), "batch"),
    (lambda: km.tokens_per_s_per_seq(0), "step_s"),
    (lambda: km.kv_cache_bytes(524288, 8192.5, 16), "context"),
    (lambda: km.weight_bytes(52e9, -2), "bytes_per_param"),
    (lambda: km.min_chips_for_weights(104e9, 40e9, usable_fraction=1.5), "usable_fraction"),
    (lambda: km.kv_budget_bytes(1, 40e9, 104e9), "weight_bytes"),
    (lambda: km.kv_budget_bytes(2.5, 40e9, 10e9), "n_chips"),
    (lambda: km.max_kv_tokens(16e9, 0), "kv_bytes_per_token"),
    (lambda: km.max_batch(-1, 1e6), "kv_budget_bytes"),
    (lambda: km.kv_bytes_per_chip(1e9, 0, 8), "n_chips"),
    (lambda: km.kv_bytes_per_chip(1e9, 2, 8, shard="layers"), "shard"),
    (lambda: km.prefill_flops(0, 7e9, 32, 32, 128), "prompt_len"),
    (lambda: km.prefill_time(1e12, 0, 1e9, 0, W), "flops"),
    (lambda: km.attention_flops_per_step(16, 8192, 32, 0, 128), "n_heads"),
    (lambda: km.dtype_bytes("bf8"), "dtype"),
    (lambda: km.dtype_bytes(2), "dtype"),
    (lambda: km.get_model("llama-9-7b"), "model"),
    (lambda: km.get_model(7), "model"),
    (lambda: km.get_chip("a100"), "hardware"),
    (lambda: km.get_chip("h100-sxm").flops("int4"), "compute_dtype"),
    (lambda: km.get_chip("a100-80gb").flops("fp8"), "fp8"),
    (lambda: km.get_model("llama-2-7b").with_kv_heads(5), "n_kv_heads"),
    (lambda: km.get_model("llama-2-7b").with_kv_heads(0), "n_kv_heads"),
    (lambda: km.get_model("llama-2-7b").replace(n_kv_heads=5), "divisible by n_kv_heads"),
    (lambda: km.get_model("llama-2-7b").replace(n_layers=32.5), "n_layers"),
    (lambda: km.get_model("llama-2-7b").replace(attention="sparse"), "attention"),
    (lambda: km.get_model("llama-2-7b").kv_bytes_per_seq(-5), "context"),
    (lambda: km.get_chip("h100-sxm").replace(bandwidth=0), "bandwidth"),
]


def test_there_are_at_least_30_cases():
    assert len(CASES) >= 30


@pytest.mark.parametrize("call, words", CASES, ids=[w for _, w in CASES])
def test_bad_input_raises_value_error_naming_it(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_with_kv_heads_5_names_the_divisibility():
    # 32 heads cannot be shared evenly by 5 KV heads
    with pytest.raises(ValueError, match=r"n_heads \(32\) must be divisible by n_kv_heads \(5\)"):
        km.get_model("llama-2-7b").with_kv_heads(5)
