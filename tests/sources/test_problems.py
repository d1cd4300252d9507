"""Every pen-and-paper problem's answer, recomputed with kvmath.

The problems and their answers live in ``book/teaching/problems.yaml`` and
nowhere else; the page ``book/teaching/problems.md`` is generated from it
(``tests/book/test_workshop.py`` checks it is not stale). Here each answer, in the
unit it is stated in, is converted to base units and compared with kvmath's
value to the problem's relative tolerance ``tol``; each given number that
comes from a preset is checked against that preset to the same tolerance (at
least the precision it is written to).
"""

from __future__ import annotations

import math

import pytest

import kvmath

from kvbook.workshop import workshop_pages

PROBLEMS = {p["id"]: p for p in workshop_pages.problems()}


def _kv_given(g: dict, model: kvmath.Model) -> dict:
    return {"L": model.n_layers, "h_kv": model.n_kv_heads, "d_h": model.head_dim}


def pp_kv_per_token(g):
    m = kvmath.Model.preset("llama-3-8b")
    k = m.kv_bytes_per_token(g["b_kv"])
    assert k == kvmath.formulas.kv_bytes_per_token(g["L"], g["h_kv"], g["d_h"], g["b_kv"])
    return {"k_bytes": k, "k_kib": k}, _kv_given(g, m)


def pp_kv_batch(g):
    m = kvmath.Model.preset("llama-2-7b")
    k = m.kv_bytes_per_token(g["b_kv"])
    seq = kvmath.formulas.kv_bytes_per_seq(k, g["S"])
    batch = kvmath.formulas.kv_cache_bytes(k, g["S"], g["B"])
    return {"k_kib": k, "seq_gib": seq, "batch_gib": batch, "batch_gb": batch}, _kv_given(g, m)


def pp_gib(g):
    h100 = kvmath.Chip.preset("h100-sxm")
    return ({"hbm_gib": h100.hbm_bytes, "device_gb": h100.device_bytes},
            {"hbm_gb": h100.hbm_bytes / 1e9, "smi_mib": h100.device_bytes / 2**20})


def pp_ridge(g):
    h100 = kvmath.Chip.preset("h100-sxm")
    return ({"alpha": h100.ridge_point("bf16")},
            {"C_tflops": h100.flops("bf16") / 1e12, "W_tbs": h100.bandwidth / 1e12})


def _bcrit(chip_name, g):
    chip = kvmath.Chip.preset(chip_name)
    return ({"b_crit": kvmath.formulas.critical_batch(chip.flops("bf16"), chip.bandwidth, g["b_w"])},
            {"C_tflops": chip.flops("bf16") / 1e12, "W_tbs": chip.bandwidth / 1e12})


def pp_bcrit(g):
    return _bcrit("a100-80gb", g)


def pp_bcrit_int8(g):
    assert g["b_w"] == kvmath.units.dtype_bytes("int8")
    return _bcrit("h100-sxm", g)


def pp_min_step(g):
    m, chip = kvmath.Model.preset("llama-2-7b"), kvmath.Chip.preset("a100-80gb")
    weights = kvmath.formulas.weight_bytes(m.param_count(), g["b_w"])
    kv_seq = m.kv_bytes_per_seq(g["S"], 2)
    t_short = kvmath.formulas.min_step_simple(1, 0.0, weights, chip.bandwidth)
    t_long = kvmath.formulas.min_step_simple(1, kv_seq, weights, chip.bandwidth)
    return ({"weights_gb": weights, "t_short": t_short, "rate_short": kvmath.formulas.tokens_per_s_per_seq(t_short),
             "kv_gb": kv_seq, "t_long": t_long},
            {"P_billion": m.param_count() / 1e9, "W_tbs": chip.bandwidth / 1e12,
             "k_kib": m.kv_bytes_per_token(2) / 2**10})


def pp_fit(g):
    m, chip = kvmath.Model.preset("llama-2-70b"), kvmath.Chip.preset("h100-sxm")
    weights = m.weight_bytes_resident("bf16")
    chips = kvmath.formulas.min_chips_for_weights(weights, chip.hbm_bytes)
    budget = kvmath.formulas.kv_budget_bytes(chips, chip.hbm_bytes, weights)
    k = m.kv_bytes_per_token(g["b_kv"])
    return ({"weights_gb": weights, "chips": chips, "budget_gb": budget, "k_bytes": k,
             "tokens": kvmath.formulas.max_kv_tokens(budget, k), "seqs": kvmath.formulas.max_batch(budget, k * g["S"])},
            {"P_billion": m.param_count() / 1e9, "hbm_gb": chip.hbm_bytes / 1e9, **_kv_given(g, m)})


def pp_per_sequence(g):
    step = 1 / g["rate_seq"]
    assert kvmath.formulas.tokens_per_s_per_seq(step) == pytest.approx(g["rate_seq"])
    return {"step": step, "rate_batch": kvmath.formulas.tokens_per_s(step, g["B"])}, {}


def pp_mqa_tp(g):
    mqa = kvmath.Model.preset("codellama-7b").with_kv_heads(1)
    k = mqa.kv_bytes_per_token(g["b_kv"])
    total = kvmath.formulas.kv_cache_bytes(k, g["S"], g["B"])
    return ({"k_kib": k, "total_gib": total,
             "heads_gib": kvmath.formulas.kv_bytes_per_chip(total, g["N"], g["h_kv"], g["B"], shard="heads"),
             "batch_gib": kvmath.formulas.kv_bytes_per_chip(total, g["N"], g["h_kv"], g["B"], shard="batch")},
            {"L": mqa.n_layers, "h_kv": mqa.n_kv_heads, "d_h": mqa.head_dim})


def pp_attention_intensity(g):
    m = kvmath.Model.preset("llama-3-8b")
    B, S = 16, 4096  # any batch and context: the ratio does not depend on them
    flops = kvmath.formulas.attention_flops_per_step(B, S, m.n_layers, m.n_heads, m.head_dim)
    kv = kvmath.formulas.kv_cache_bytes(m.kv_bytes_per_token(g["b_kv"]), S, B)
    return ({"g": m.group_size, "intensity": kvmath.formulas.arithmetic_intensity(flops, kv)},
            {"h": m.n_heads, "h_kv": m.n_kv_heads})


CHECKS = {name.replace("_", "-"): fn for name, fn in dict(globals()).items() if name.startswith("pp_")}


def test_at_least_eight_problems_each_with_a_check():
    assert len(PROBLEMS) >= 8
    assert set(PROBLEMS) == set(CHECKS)


def _written_precision(value: float) -> float:
    """Half a unit in the last digit the number is written with, relative to it."""
    text = repr(float(value))
    decimals = len(text.split(".")[1].rstrip("0")) if "." in text else 0
    return 0.5 * 10.0 ** -decimals / abs(value) if value else 0.0


@pytest.mark.parametrize("pid", sorted(PROBLEMS))
def test_answer_matches_kvmath(pid):
    problem = PROBLEMS[pid]
    computed, preset_given = CHECKS[pid](problem["given"])
    assert set(computed) == set(problem["answers"]), "every stated answer is recomputed"
    tol = problem["tol"]
    for name, ans in problem["answers"].items():
        stated = ans["value"] * workshop_pages.UNITS[ans["unit"]]
        exact = float(computed[name])
        assert math.isclose(stated, exact, rel_tol=tol, abs_tol=0), (
            f"{pid}: {name} = {ans['value']} {ans['unit']}, kvmath gives "
            f"{exact / workshop_pages.UNITS[ans['unit']]:.6g} {ans['unit']} (tol {tol})")
    for name, exact in preset_given.items():
        stated = problem["given"][name]
        rel = max(tol, _written_precision(stated))
        assert math.isclose(stated, exact, rel_tol=rel), f"{pid}: given {name} = {stated}, the preset has {exact}"
