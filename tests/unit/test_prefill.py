"""Prefill attention FLOPs: MLA is charged its cheaper per-head form, other attention the standard one."""

import numpy as np
import pytest

import kvmath
from kvmath.requests import prefill_attention_flops


@pytest.mark.parametrize("name", ["deepseek-v3", "kimi-k2"])
def test_mla_prefill_per_head_form(name):
    # hand computation: per query and cached token, 2 h (d_nope + d_rope) for the scores and 2 h d_v for the
    # values, per layer (DeepSeek-V3 and Kimi K2: d_nope 128, d_rope 64, d_v 128, so 640 per head); exact
    m = kvmath.Model.preset(name)
    s = np.array([1, 2, 4989, 131072])
    per_head = 2 * (128 + 64) + 2 * 128
    assert per_head == 640
    expected = m.n_layers * m.n_heads * per_head * s * (s + 1) / 2
    assert np.array_equal(prefill_attention_flops(m, s), expected)
    # and it is below the absorbed form decode uses (2,176 per head), summed over the prompt
    absorbed = sum(float(m.attention_flops_per_token(t)) for t in range(1, 101))
    assert prefill_attention_flops(m, 100) < absorbed


def test_non_mla_prefill_unchanged():
    # Llama 2 7B: 4 L h d_h per query and cached token (hand computation; exact)
    m = kvmath.Model.preset("llama-2-7b")
    assert prefill_attention_flops(m, 2048) == 4 * 32 * 32 * 128 * 2048 * 2049 / 2


def test_deepseek_prefill_bound_uses_it():
    # one 4,989-token prompt per H800 of DeepSeek's DP32/EP32 prefill unit: the FLOPs term must be the weight
    # matmuls plus the per-head attention form, at the fp8 peak (1978.9e12); the bound is FLOP-bound here
    ds, h800 = kvmath.Model.preset("deepseek-v3"), kvmath.Chip.preset("h800")
    layout = kvmath.ParallelLayout(dp=32, ep=32, redundant_experts=32)
    dep = kvmath.Deployment(ds, h800, layout, link=None, weights="fp8", kv="fp8")  # no link, as the old call
    t = dep.request(32, 4989, 1).ttft_s
    matmul = 2 * 4989 * ds.matmul_params_per_token() - 2 * 4988 * ds.vocab * ds.d_model  # LM head: last token only
    attention = 61 * 128 * 640 * 4989 * 4990 / 2
    assert float(t) == pytest.approx((matmul + attention) / 1978.9e12, rel=1e-9)
