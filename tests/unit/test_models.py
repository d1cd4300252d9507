"""kvmath.models: what a frozen Model keeps once computed."""

from __future__ import annotations


def test_a_models_derived_figures_are_computed_once_and_handed_out_as_copies():
    """param_groups, matmul_params_per_token and cache_terms are kept on the frozen instance (a deployment built from
    preset names reuses them: benchmarks/bench_versions.py); a caller changing the dict it got changes nothing kept."""
    from kvmath import layers
    from kvmath.models import Model

    m = Model.preset("llama-2-70b")
    groups = m.param_groups()
    groups["mlp"] = -1
    assert m.param_groups()["mlp"] == 80 * 3 * 8192 * 28672  # L x 3 matrices x d x d_ff, by hand
    assert m.cache_terms() is m.cache_terms() and m.cache_terms() == layers.cache_terms(m.layer_specs())
    assert m.matmul_params_per_token() == sum(m.matmul_params_by_group().values())
    assert Model.param_groups.__wrapped__(m) == m.param_groups()
