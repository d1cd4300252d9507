"""What an object stores is the value it checked, normalised: a label in any case, a number of any real type,
a bool as a bool. Each case below was accepted and then silently mis-used (the reliability audit at 3f3cb8a,
findings 1, 6, 7 and 8): an upper-case layer kind counted as full attention, a Link kept a list or the string
"false", a tiny vLLM utilisation gave a negative budget, and a bool inside a list counted as 1.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kvmath as km
from kvmath import layers
from kvmath.layers import LayerSpec
from kvmath.links import allreduce_estimate
from kvmath.memory import NON_TORCH_BYTES, memory_budget, runtime_total_bytes

GEMMA2 = Path(__file__).parents[1] / "data" / "hf_configs" / "google--gemma-2-9b-it"

# ----- LayerSpec.kind -----------------------------------------------------------


@pytest.mark.parametrize("typed, stored", [("SLIDING", "sliding"), ("Full", "full"), ("MLA", "mla"),
                                           ("Linear", "linear"), ("CHUNKED", "chunked"), ("DSA", "dsa")])
def test_a_layer_kind_in_any_case_is_stored_lower_case(typed, stored):
    fields = {"sliding": dict(n_heads=16, n_kv_heads=8, head_dim=256, window=4096),
              "full": dict(n_heads=16, n_kv_heads=8, head_dim=256),
              "chunked": dict(n_heads=16, n_kv_heads=8, head_dim=256, window=8192),
              "mla": dict(n_heads=128, latent_dim=576, score_dim=512),
              "dsa": dict(n_heads=128, latent_dim=576, score_dim=512, topk=2048, index_bytes=132.0),
              "linear": dict(n_heads=32, state_bytes=1e6)}[stored]
    assert LayerSpec(typed, **fields).kind == stored


def test_gemma_2_9b_at_32k_with_upper_case_kinds_is_sized_as_with_lower_case():
    # google/gemma-2-9b-it's config.json: 42 layers alternating sliding (window 4096) and full, 8 KV heads
    # of 256, bf16. Per token and layer K and V take 2 x 8 x 256 x 2 B = 8192 B; at S = 32768 the 21
    # sliding layers hold 4096 tokens and the 21 full ones all 32768:
    # 8192 x 21 x (4096 + 32768) = 6,341,787,648 B (6.34 GB). Counting every layer as full (the bug)
    # would give 8192 x 42 x 32768 = 11,274,289,152 B (11.27 GB). Exact integers, no tolerance.
    right, wrong = 8192 * 21 * (4096 + 32768), 8192 * 42 * 32768
    assert (right, wrong) == (6_341_787_648, 11_274_289_152)
    model = km.Model.from_hf_config(GEMMA2)
    specs = model.layer_specs()
    assert [s.kind for s in specs].count("sliding") == 21 and len(specs) == 42
    shouted = tuple(LayerSpec(s.kind.upper(), s.n_heads, s.n_kv_heads, s.head_dim, window=s.window) for s in specs)
    assert layers.kv_bytes_per_seq(specs, 32768) == right
    assert layers.kv_bytes_per_seq(shouted, 32768) == right
    rebuilt = model.replace(sliding_window=None, n_sliding_layers=None, layers=shouted)
    assert rebuilt.kv_bytes_per_seq(32768) == right
    assert layers.kinds(shouted) == ("full", "sliding")


def test_upper_case_mla_caches_its_latent_and_linear_keeps_its_state():
    # DeepSeek-V3's MLA: kv_lora_rank 512 + qk_rope 64 = 576 elements per token, 128 heads;
    # absorbed attention FLOPs per cached token 2 h (r + r_rope) + 2 h r = 2*128*576 + 2*128*512 = 278,528.
    mla = LayerSpec("MLA", n_heads=128, latent_dim=576, score_dim=512)
    assert mla.elems_per_token() == 576 and mla.flops_per_cached_token() == 278_528
    linear = LayerSpec("LINEAR", n_heads=32, state_bytes=3.0e6)
    assert layers.kv_bytes_per_seq((linear,), 100) == 3.0e6  # the fixed state, whatever the context


# ----- Link -----------------------------------------------------------------------

NVLINK4 = km.Link.preset("nvlink4")


@pytest.mark.parametrize("change, words", [
    (dict(bandwidth=[4.5e11, 9e11]), "bandwidth must be a single number"),
    (dict(bandwidth=np.ones((2, 2))), "bandwidth"),
    (dict(latency_s=[1e-6]), "latency_s"),
    (dict(measured_allreduce_latency_s=-1.0), "measured_allreduce_latency_s must be > 0"),
    (dict(measured_allreduce_latency_s="3e-5"), "measured_allreduce_latency_s"),
    (dict(measured_allreduce_latency_s=float("nan")), "measured_allreduce_latency_s"),
    (dict(stated_bandwidth=-1), "stated_bandwidth must be >= 0"),
    (dict(in_switch_reduction="false"), "in_switch_reduction must be True or False"),
    (dict(in_switch_reduction=1), "in_switch_reduction"),
    (dict(in_switch_reduction=None), "in_switch_reduction"),
    (dict(latency_is_assumption="yes"), "latency_is_assumption"),
    (dict(scope="on the moon"), "scope"),
    (dict(name=""), "name"),
    (dict(source=3), "source"),
])
def test_link_replace_refuses_each_bad_field_by_name(change, words):
    with pytest.raises(ValueError, match=words):
        NVLINK4.replace(**change)


def test_link_replace_stores_what_a_preset_stores():
    link = NVLINK4.replace(bandwidth=np.int64(400_000_000_000), latency_s=np.float32(0), stated_bandwidth=np.array(8e11),
                           scope="Inside A Node", stated_as="BIDIRECTIONAL", in_switch_reduction=np.bool_(False),
                           measured_allreduce_latency_s=np.float64(2e-5))
    assert (type(link.bandwidth), type(link.latency_s), type(link.stated_bandwidth)) == (float, float, float)
    assert (link.bandwidth, link.latency_s, link.stated_bandwidth) == (4e11, 0.0, 8e11)
    assert (link.scope, link.stated_as) == ("inside a node", "bidirectional")
    assert link.in_switch_reduction is False and type(link.measured_allreduce_latency_s) is float
    # the estimate: the measured 20 us plus the bytes of the best algorithm without in-switch reduction,
    # 2 (N - 1) / N x S / W = 2 x 7/8 x 16384 / 4e11 s (relative 1e-12: float rounding)
    assert allreduce_estimate(16384, 8, link) == pytest.approx(2e-5 + 2 * 7 / 8 * 16384 / 4e11, rel=1e-12)


# ----- memory_budget("engine") ------------------------------------------------------------


def test_an_engine_budget_that_would_be_negative_is_refused_naming_the_utilisation():
    h100 = km.Chip.preset("h100-sxm")
    total = runtime_total_bytes(h100)  # vLLM's logged total_gpu_memory, 79.22 GiB
    # 0.004 x 79.22 GiB = 0.317 GiB, below the process's 0.35 GiB outside PyTorch: nothing left
    assert 0.004 * total < NON_TORCH_BYTES
    for util in (0.004, 0.001, np.array([0.9, 0.004])):
        with pytest.raises(ValueError, match="gpu_memory_utilization .* leaves nothing"):
            memory_budget(h100, "engine", gpu_memory_utilization=util)
    # at twice the break-even fraction the budget is exactly what the process holds outside PyTorch
    util = 2 * NON_TORCH_BYTES / total
    assert memory_budget(h100, "engine", gpu_memory_utilization=util) == pytest.approx(NON_TORCH_BYTES, rel=1e-9)


# ----- bools inside lists ---------------------------------------------------------------


@pytest.mark.parametrize("value", [[32, True], [True, 32], (32, False), [[32], [np.True_]],
                                   [np.array([True]), np.array([32])]],
                         ids=["list", "first", "tuple", "nested numpy bool", "bool array in a list"])
def test_a_bool_inside_a_list_is_refused_naming_the_argument(value):
    with pytest.raises(ValueError, match="n_layers .*a bool inside a list"):
        km.formulas.kv_bytes_per_token(value, 8, 128)


def test_a_bool_inside_a_list_is_refused_by_the_spine_and_the_memory_functions():
    deployment = km.Deployment(km.Model.preset("llama-3-8b"), km.Chip.preset("h100-sxm"))
    with pytest.raises(ValueError, match="batch .*a bool inside a list"):
        deployment.step([16, True], 4096)
    with pytest.raises(ValueError, match="context .*a bool inside a list"):
        deployment.step(16, [4096, False])
    with pytest.raises(ValueError, match="chip .*a bool inside a list"):
        runtime_total_bytes([85.5e9, True])
    # numbers of every real type in a list stay accepted: 2 x 8 x 128 x 2 B per layer
    assert list(km.formulas.kv_bytes_per_token([32, np.int64(16), 8.0], 8, 128)) == [131072.0, 65536.0, 32768.0]
