"""Properties of the cost model that hold for every input, checked with hypothesis."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvmath as km

# CI machines are noisy: a slow example is not a failure, a wrong one is.
settings.register_profile("kvmath", deadline=None, derandomize=True)
settings.load_profile("kvmath")

batch = st.integers(1, 4096)
context = st.integers(1, 1_000_000)
kv_per_token = st.floats(1e3, 1e7)
params = st.floats(1e8, 1e12)
bytes_per_param = st.sampled_from([0.5, 1.0, 2.0, 4.0])
bandwidth = st.floats(1e11, 1e14)
flops = st.floats(1e13, 1e17)


@given(batch, batch, context, kv_per_token, params, bytes_per_param, bandwidth, flops)
def test_min_step_is_monotone_in_batch(b1, b2, s, kv, p, b_w, w, c):
    lo, hi = sorted((b1, b2))
    args = (s * kv, p * b_w, p, w, c)
    assert km.formulas.min_step(lo, *args) <= km.formulas.min_step(hi, *args)


@given(batch, context, context, kv_per_token, params, bytes_per_param, bandwidth, flops)
def test_min_step_is_monotone_in_context(b, s1, s2, kv, p, b_w, w, c):
    lo, hi = sorted((s1, s2))
    assert km.formulas.min_step(b, lo * kv, p * b_w, p, w, c) <= km.formulas.min_step(b, hi * kv, p * b_w, p, w, c)


@given(batch, context, kv_per_token, params, bytes_per_param, bandwidth, flops)
def test_min_step_is_at_least_each_bound(b, s, kv, p, b_w, w, c):
    t = km.formulas.step_breakdown(b, s * kv, p * b_w, p, w, c)
    assert t.no_overlap_s >= t.kv_read_s
    assert t.no_overlap_s >= t.weight_read_s
    assert t.no_overlap_s >= t.weight_compute_s
    assert t.no_overlap_s >= km.formulas.min_step_simple(b, s * kv, p * b_w, w) * (1 - 1e-12)
    assert t.no_overlap_s == pytest.approx(t.kv_read_s + max(t.weight_read_s, t.weight_compute_s), rel=1e-12)


@given(params, bytes_per_param, bandwidth, flops)
def test_weight_terms_are_equal_at_the_critical_batch(p, b_w, w, c):
    b_crit = km.formulas.critical_batch(c, w, b_w)
    t = km.formulas.step_breakdown(b_crit, 0, p * b_w, p, w, c)
    assert t.weight_compute_s == pytest.approx(t.weight_read_s, rel=1e-9)


@given(params, bytes_per_param, bandwidth, flops, st.floats(0.05, 20))
def test_bound_flips_at_the_critical_batch(p, b_w, w, c, factor):
    b_crit = km.formulas.critical_batch(c, w, b_w)
    t = km.formulas.step_breakdown(b_crit * factor, 0, p * b_w, p, w, c)
    if factor < 0.999:
        assert t.weights_bind == "memory"
    elif factor > 1.001:
        assert t.weights_bind == "compute"


@given(context, st.integers(1, 64), st.sampled_from([1, 2, 4, 8, 16, 32]))
@settings(max_examples=50)
def test_kv_cache_scales_with_kv_heads_and_context(s, b, h_kv):
    per_token = km.formulas.kv_bytes_per_token(32, h_kv, 128)
    assert km.formulas.kv_cache_bytes(per_token, s, b) == 2 * 32 * h_kv * 128 * 2 * s * b


def test_one_call_broadcasts_over_a_grid():
    b = np.array([1, 16, 256])[:, None]
    s = np.array([1024, 8192])[None, :]
    grid = km.formulas.min_step(b, s * 524_288, 13.48e9, 6.74e9, 2.039e12, 312e12)
    assert grid.shape == (3, 2)
    for i, bi in enumerate([1, 16, 256]):
        for j, sj in enumerate([1024, 8192]):
            assert grid[i, j] == km.formulas.min_step(bi, sj * 524_288, 13.48e9, 6.74e9, 2.039e12, 312e12)
    t = km.formulas.step_breakdown(b, s * 524_288, 13.48e9, 6.74e9, 2.039e12, 312e12)
    assert t.weights_bind.shape == (3, 1)  # the weight terms do not depend on context
