"""Attention per layer: windows, chunks, linear states, per-layer heads (kvmath/layers.py)."""

import numpy as np
import pytest

import kvmath as km
from kvmath.layers import LayerSpec, attention_flops_per_token, kv_bytes_per_seq, kv_bytes_per_token

FULL = LayerSpec("full", n_heads=16, n_kv_heads=2, head_dim=256, params=1)
LINEAR = LayerSpec("linear", state_bytes=1_097_728, state_flops=3_145_728.0, params=1)


def test_a_linear_layer_holds_a_fixed_state_and_reserves_nothing_per_token():
    # 1 full layer (2 * 2 * 256 = 1024 elems/token) + 3 linear layers of fixed state
    layers = (LINEAR, LINEAR, LINEAR, FULL)
    assert kv_bytes_per_token(layers, 2) == 2048
    for s in (1, 1024, 131072):
        assert kv_bytes_per_seq(layers, s, 2) == 2048 * s + 3 * 1_097_728
    # the state does not follow the KV dtype (kept in the model's dtype)
    assert kv_bytes_per_seq(layers, 1024, 1) == 1024 * 1024 + 3 * 1_097_728
    # attention FLOPs: 4 h d_h per cached token for the full layer, fixed for the linear ones
    assert attention_flops_per_token(layers, 1000) == 4 * 16 * 256 * 1000 + 3 * 3_145_728


def test_chunked_and_sliding_hold_at_most_their_window():
    chunk = LayerSpec("chunked", n_heads=8, n_kv_heads=8, head_dim=128, window=8192)
    got = kv_bytes_per_seq((chunk,), np.array([100, 8192, 100000]), 2)
    assert list(got) == [100 * 4096, 8192 * 4096, 8192 * 4096]


def test_layers_with_different_heads_and_head_dims_sum():
    # two layer shapes in one model (as in models whose local and global layers differ)
    a = LayerSpec("sliding", n_heads=8, n_kv_heads=4, head_dim=128, window=512)
    b = LayerSpec("full", n_heads=8, n_kv_heads=1, head_dim=512)
    layers = (a, a, b)
    # a: 2*4*128 = 1024 elems; b: 2*1*512 = 1024 elems per token
    assert kv_bytes_per_token(layers, 2) == 3 * 2048
    assert kv_bytes_per_seq(layers, 4096, 2) == 2 * 2048 * 512 + 2048 * 4096


def test_a_model_listing_its_layers_honours_them_everywhere():
    base = km.Model.preset("llama-3-8b")
    layers = (LayerSpec("sliding", 32, 8, 128, window=1024, params=1),) * 16 + (LayerSpec("full", 32, 8, 128, params=1),) * 16
    m = base.replace(layers=layers, name="half-local")
    assert m.kv_bytes_per_token() == base.kv_bytes_per_token()  # reserved per token: unchanged
    assert m.kv_bytes_per_seq(8192) == 16 * 131072 / 32 * (1024 + 8192)
    assert m.param_groups()["attention"] == 32
    w = km.Deployment(m, "h100-sxm").step(4, 8192)  # the step model reads the listed layers' cache
    assert w.kv_bytes_read == 4 * m.kv_bytes_per_seq(8192) == 4 * 16 * 131072 / 32 * (1024 + 8192)
    assert m.layer_kinds == ("full", "sliding")


@pytest.mark.parametrize("name", km.Model.presets())
def test_derived_layers_give_the_preset_numbers(name):
    m = km.Model.preset(name)
    listed = m.replace(layers=m.layer_specs(), sliding_window=None, n_sliding_layers=None)
    for s in (1, 4096, 100_000):
        assert listed.kv_bytes_per_seq(s) == m.kv_bytes_per_seq(s)
        assert listed.attention_flops_per_token(s) == m.attention_flops_per_token(s)
    assert listed.kv_bytes_per_token() == m.kv_bytes_per_token()
    assert listed.param_count() == m.param_count()


@pytest.mark.parametrize("kwargs, match", [
    (dict(kind="sliding", n_heads=8, n_kv_heads=8, head_dim=64), "window"),
    (dict(kind="full", n_heads=8, n_kv_heads=3, head_dim=64), "divisible"),
    (dict(kind="full", n_heads=0, n_kv_heads=1, head_dim=64), "n_heads"),
    (dict(kind="ssm"), "kind"),
    (dict(kind="mla", n_heads=8), "latent_dim"),
    (dict(kind="linear", state_bytes=-1), "state_bytes"),
])
def test_bad_layer_specs_name_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LayerSpec(**kwargs)


def test_a_model_needs_one_spec_per_layer():
    with pytest.raises(ValueError, match="layers"):
        km.Model.preset("llama-3-8b").replace(layers=(FULL,))


def test_tokens_held_and_read_are_the_window_rule_every_total_uses():
    # one rule (held_window / read_window) behind these and cache_terms: at 10,000 tokens a full layer holds all,
    # a 4,096-token sliding layer 4,096, an 8,192-token chunked layer 8,192, linear and shared layers none; a
    # shared layer over a sliding source reads 4,096, a dsa layer its top-2,048
    full, sliding = LayerSpec("full", 8, 2, 128), LayerSpec("sliding", 8, 2, 128, window=4096)
    chunked, linear = LayerSpec("chunked", 8, 2, 128, window=8192), LayerSpec("linear", state_bytes=1.0)
    shared = LayerSpec("shared", 8, 2, 128, window=4096)
    dsa = LayerSpec("dsa", n_heads=8, latent_dim=576, score_dim=512, topk=2048, index_bytes=132)
    held = [s.tokens_held(10_000) for s in (full, sliding, chunked, linear, shared, dsa)]
    read = [s.tokens_read(10_000) for s in (full, sliding, chunked, linear, shared, dsa)]
    assert held == [10_000, 4096, 8192, 0, 0, 10_000]
    assert read == [10_000, 4096, 8192, 0, 4096, 2048]
    # and the totals agree with them, layer by layer: bytes held = elements x held tokens x 2 B
    for s in (full, sliding, chunked):
        assert kv_bytes_per_seq((s,), 10_000) == s.elems_per_token() * s.tokens_held(10_000) * 2


def test_a_dsa_layer_reads_its_top_k_and_a_shared_layer_its_sources_window():
    # DeepSeek-V3.2's sparse attention reads index_topk = 2048 latents a token, fewer when the context is shorter
    dsa = LayerSpec("dsa", n_heads=128, latent_dim=576, score_dim=512, topk=2048, params=1)
    assert list(dsa.tokens_read(np.array([1000, 2048, 5000]))) == [1000, 2048, 2048]
    # a shared layer reads the cache of the layer it shares: min(S, 512) for a sliding source, S for a full one
    shared_sliding = LayerSpec("shared", n_heads=8, n_kv_heads=2, head_dim=256, window=512, params=1)
    shared_full = LayerSpec("shared", n_heads=8, n_kv_heads=2, head_dim=256, params=1)
    assert list(shared_sliding.tokens_read(np.array([100, 512, 4096]))) == [100, 512, 512]
    assert list(shared_full.tokens_read(np.array([100, 4096]))) == [100, 4096]


def test_linear_and_shared_layers_hold_no_token_at_any_context():
    shared = LayerSpec("shared", n_heads=8, n_kv_heads=2, head_dim=256, window=512, params=1)
    for layer in (LINEAR, shared):
        held = layer.tokens_held(np.array([0, 1, 4096]))
        assert held.shape == (3,) and list(held) == [0, 0, 0]  # an array like the context, all zero (no NaN at 0)


def test_a_sliding_layer_holds_at_most_its_window():
    sliding = LayerSpec("sliding", n_heads=16, n_kv_heads=8, head_dim=256, window=4096, params=1)
    assert list(sliding.tokens_held(np.array([100, 4096, 10000]))) == [100, 4096, 4096]


def test_a_dsa_layers_indexer_reads_and_scores_every_cached_token():
    # DeepSeek-V3.2's indexer keeps 132 bytes a token (128 fp8 elements and one fp32 scale) and scores every cached
    # token, whatever the top-k: two dsa layers add 2 x 132 x S bytes read and 2 x F x S FLOPs over the same layers
    # without an indexer (S = 10,000 tokens, above the top-k of 2,048; F = 33,280 FLOPs a cached token)
    kw = dict(n_heads=128, latent_dim=576, score_dim=512, topk=2048, params=1)
    with_index = LayerSpec("dsa", index_bytes=132.0, index_flops=33_280.0, **kw)
    without = LayerSpec("dsa", **kw)
    s = 10_000
    bytes_read = km.layers.kv_bytes_read_per_seq
    assert bytes_read((with_index,) * 2, s, 2) - bytes_read((without,) * 2, s, 2) == 2 * 132 * s
    assert (attention_flops_per_token((with_index,) * 2, s) - attention_flops_per_token((without,) * 2, s)
            == 2 * 33_280 * s)


def test_a_step_reads_a_linear_layers_whole_state():
    # one full layer (2 x 2 x 256 elements x 2 B = 2,048 B a token) and one linear layer's 1,097,728-byte state
    assert km.layers.kv_bytes_read_per_seq((LINEAR, FULL), 1000, 2) == 2048 * 1000 + 1_097_728
