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


@pytest.mark.parametrize("name", ["llama-3-8b", "mistral-7b-v0.1", "gemma-2-9b", "gpt-oss-20b", "llama-4-scout"])
def test_a_prompts_attention_is_the_sum_of_each_of_its_tokens(name):
    """Causal prefill: token t attends to the t tokens up to itself, as a decode step at context t does, so the pass
    costs sum_{t=1}^{S} attention_flops_per_token(t), summed here term by term. S = 5,000 passes every window
    (Mistral's 4,096, Gemma 2's 4,096 on half its layers, gpt-oss's 128, Llama 4's 8,192-token chunks not)."""
    from kvmath.requests import prefill_attention_flops

    m = kvmath.Model.preset(name)
    for s in (1, 100, 5000):
        by_token = sum(float(m.attention_flops_per_token(t)) for t in range(1, s + 1))
        assert prefill_attention_flops(m, s) == pytest.approx(by_token, rel=1e-9)


def test_a_listed_sliding_layers_prompt_attention_is_the_sum_of_each_of_its_tokens():
    # the same sum for layers listed one by one: 4 sliding layers over 512 tokens, 1 full and 1 linear (a fixed
    # 3,145,728 FLOPs a token on its state), S = 2,000 > 512
    from kvmath.layers import LayerSpec
    from kvmath.requests import prefill_attention_flops

    sliding, full = LayerSpec("sliding", 8, 2, 256, window=512), LayerSpec("full", 8, 2, 256)
    linear = LayerSpec("linear", n_heads=8, state_bytes=1_097_728, state_flops=3_145_728.0, params=1)
    m = kvmath.Model("toy", 6, 2048, 8, 2, 256, 8192, 32000, attention="gqa",
                     layers=(sliding,) * 4 + (full, linear))
    for s in (100, 512, 2000):
        by_token = sum(float(m.attention_flops_per_token(t)) for t in range(1, s + 1))
        assert prefill_attention_flops(m, s) == pytest.approx(by_token, rel=1e-12)


def test_a_dsa_indexer_scores_every_earlier_token_of_the_prompt():
    """DeepSeek-V3.2's indexer scores all t tokens up to token t: index_flops x S (S + 1) / 2 a layer over a prompt,
    on top of the same model without it (S = 3,000, above the top-k of 2,048)."""
    import dataclasses

    from kvmath.requests import prefill_attention_flops

    v32 = kvmath.Model.preset("deepseek-v3.2")
    f = v32.layers[0].index_flops
    assert f > 0 and {layer.index_flops for layer in v32.layers} == {f}
    # the main attention in MLA's per-head form, 128 heads x (2 x (128 + 64) + 2 x 128) = 81,920 FLOPs per query and
    # read latent (below the absorbed form's 278,528), over min(t, 2,048) tokens: 2,048 x 2,049 / 2 + 952 x 2,048
    s = 3000
    main = 128 * (2 * (128 + 64) + 2 * 128) * (2048 * 2049 / 2 + (s - 2048) * 2048)
    assert v32.layers[0].flops_per_cached_token() == 278_528
    assert prefill_attention_flops(v32, s) == pytest.approx(61 * (main + f * s * (s + 1) / 2), rel=1e-12)
    plain_layers = tuple(dataclasses.replace(layer, index_flops=0.0) for layer in v32.layers)
    without = dataclasses.replace(v32, layers=plain_layers)
    assert prefill_attention_flops(v32, s) - prefill_attention_flops(without, s) == pytest.approx(
        len(v32.layers) * f * s * (s + 1) / 2, rel=1e-9)


def test_the_closed_form_sum_of_a_max_of_two_lines_and_a_floor_is_the_sum_term_by_term():
    """sum_{S=lo}^{hi} max(p1 + q1 S, p2 + q2 S, k), the decode steps' closed form, against the loop it replaces, on
    lines that cross each other and the floor k between integers (roots 10.5, 20.25, ...), rising and falling."""
    from kvmath.requests import _sum_max2_and_constant

    cases = [((1.0, 0.5), (12.0, -0.5), 6.0, 1, 40), ((-3.0, 0.4), (30.0, -1.2), 5.05, 0, 30),
             ((2.5, 0.0), (2.5, 0.0), 1.0, 3, 9), ((0.0, 1.0), (0.5, 1.0), 7.3, 2, 25),
             ((1.0, 0.0), (0.5, 0.0), 2.0, 0, 10), ((0.5, 1.0), (0.0, 1.0), 7.3, 2, 25),
             ((3.0, 0.0), (0.0, 0.0), 1.0, 0, 10), ((1.0, -0.25), (0.0, 0.0), 0.5, 0, 12)]
    for f, g, k, lo, hi in cases:
        by_step = sum(max(f[0] + f[1] * s, g[0] + g[1] * s, k) for s in range(lo, hi + 1))
        assert float(_sum_max2_and_constant(f, g, k, lo, hi)) == pytest.approx(by_step, rel=1e-12), (f, g, k)


def test_an_efficiency_divides_the_bandwidth_of_a_memory_bound_prefill():
    # a 16-token prompt at batch 1 reads Llama 3 8B's weights and little else: memory-bound, so half the bandwidth
    # takes twice as long
    from kvmath.requests import prefill_bound

    dep = kvmath.Deployment("llama-3-8b", "h100-sxm", "tp=1")
    assert dep.step(1, 16).binds == "memory"
    assert prefill_bound(dep, 1, 16, efficiency=0.5) == pytest.approx(2 * prefill_bound(dep, 1, 16), rel=1e-12)


def test_a_prefix_no_request_finds_changes_no_time():
    # a hit rate of 0: every request computes and reads its whole cache, as without a prefix
    from kvmath.requests import request_times

    dep = kvmath.Deployment("llama-3-8b", "h100-sxm", "tp=1")
    plain_req = request_times(dep, 32, 4096, 256).to_dict()
    missed = request_times(dep, 32, 4096, 256, prefix_tokens=2048, prefix_hit_rate=0.0).to_dict()
    for key in ("ttft_s", "decode_s", "total_s"):
        assert missed[key] == pytest.approx(plain_req[key], rel=1e-12), key


def test_cost_per_million_tokens_pays_for_every_chip():
    # $2 a chip-hour on tp=8: 8 x 2 x total_s / 3600 dollars for 32 x 256 tokens, x 1e6
    from kvmath.requests import request_times

    r = request_times(kvmath.Deployment("llama-3-70b", "h100-sxm", "tp=8"), 32, 1024, 256, price_per_chip_hour=2.0)
    assert r.n_chips == 8
    assert r.cost_per_million_tokens == pytest.approx(8 * 2.0 * r.total_s / 3600 / (32 * 256) * 1e6, rel=1e-12)


def test_a_tpot_limit_admits_the_batch_that_meets_it_exactly():
    from kvmath.requests import request_times, serving_frontier

    dep = kvmath.Deployment("llama-3-8b", "h100-sxm", "tp=1")
    limit = request_times(dep, 8, 1024, 256).time_per_output_token_s
    assert serving_frontier(dep, 1024, 256, batch=[1, 8, 64], tpot_limit_s=limit).best_batch == 8
    assert serving_frontier(dep, 1024, 256, batch=[1, 8, 64], tpot_limit_s=limit * (1 - 1e-9)).best_batch == 1
