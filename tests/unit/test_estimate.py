"""The estimate beside the bounds: its fit reproduces, its terms by hand, its errors against the issue's targets."""

import csv
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kvmath as km
from kvmath import estimate as E
from kvmath.calibration import REGIMES, bound_for, check, get_measurement, load_measurements, user_measurement
from kvmath.links import collective_estimate
from kvmath.models import _group_bytes

DATA = Path(E.__file__).parent / "data"
ROWS = load_measurements()


def _committed(name: str) -> list[dict]:
    return list(csv.DictReader((DATA / name).read_text(encoding="utf-8").splitlines()))


PARAMS = {r["name"]: float(r["value"]) for r in _committed("estimate_parameters.csv")}
ERRORS = {r["regime"]: r for r in _committed("estimate_errors.csv")}


# ----- the fit is data, and a refit reproduces it ------------------------------------------------------

def test_a_refit_reproduces_the_committed_parameters():
    fitted = E.fit()
    for name, *_ in E.PARAMETERS:
        assert getattr(fitted, name) == pytest.approx(PARAMS[name], rel=1e-6), name
    rows = {r["name"]: int(r["rows"]) for r in _committed("estimate_parameters.csv")}
    assert rows == {name: len(E.parameter_rows(name)) for name, *_ in E.PARAMETERS}
    assert not any(get_measurement(i).held_out for name, *_ in E.PARAMETERS for i in E.parameter_rows(name))


def test_the_rows_held_out_are_the_classes_named_and_still_bounded():
    """MLPerf's offline rows (no prompt lengths: a 1-token prompt charged) and DeepSeek-R1's batch-1 rows (4 tokens
    a step of MTP charged, acceptance unknown) are held out of the fit; every other row is fitted on."""
    held = {m.id: m.held_out for m in ROWS if m.held_out}
    assert {i for i, k in held.items() if k == "unknown_prompt"} == {
        m.id for m in ROWS if m.source.startswith("mlperf_inference")}
    assert {i for i, k in held.items() if k == "unknown_acceptance"} == {"dsr1-b200-minlat", "dsr1-h200-minlat"}
    assert all(m.tokens_per_step == 4 for m in ROWS if m.held_out == "unknown_acceptance")
    assert all(m.input_tokens == 1 for m in ROWS if m.held_out == "unknown_prompt")
    assert all(bound_for(m).ratio <= 1 for m in ROWS if m.held_out)
    assert sum(int(r["rows"]) for k, r in ERRORS.items() if k != "all") == int(ERRORS["all"]["rows"]) == \
        len(ROWS) - len(held)
    with pytest.raises(ValueError, match="held_out"):
        dataclasses.replace(ROWS[0], held_out="unlucky")


@pytest.mark.slow
def test_a_rerun_of_the_cross_validation_reproduces_the_committed_errors():
    cv = E.cross_validate()
    assert set(cv.by_regime) == set(ERRORS) == {*REGIMES, "all"}
    for regime, e in cv.by_regime.items():
        row = ERRORS[regime]
        assert (e.rows, e.sources, e.pooled) == (int(row["rows"]), int(row["sources"]), row["pooled"] == "true")
        for key in ("median_abs_error", "p90_abs_error", "log_low", "log_high", "coverage", "median_half_width"):
            assert getattr(e, key) == pytest.approx(float(row[key]), rel=1e-6, abs=1e-9), (regime, key)
    # the module text's figure for the weights charged in series: a mean absolute log error of 0.212 out of sample
    assert float(np.mean(np.abs(cv.log_residuals))) == pytest.approx(0.212, abs=5e-4)


def _fitted(regime=None):
    return [m for m in load_measurements(regime) if not m.held_out]


def test_every_parameter_is_named_placed_and_within_the_budget():
    """At most one fitted parameter per five fitted rows of its home regime (a parameter homed in two counts half in
    each)."""
    share = {r: 0.0 for r in REGIMES}
    for name, unit, home, meaning in E.PARAMETERS:
        assert unit in ("fraction", "s", "FLOP", "count") and meaning and set(home) <= set(REGIMES), name
        for r in home:
            share[r] += 1 / len(home)
        assert len(E.parameter_rows(name)) >= E.ROWS_PER_PARAMETER, name
    for regime, used in share.items():
        n = len(_fitted(regime))
        assert used <= n / E.ROWS_PER_PARAMETER, (regime, used, n)
    assert len(E.PARAMETERS) <= len(_fitted()) / E.ROWS_PER_PARAMETER
    # a regime with too few rows homes no parameter and says its interval is pooled
    for regime in REGIMES:
        few = len(_fitted(regime)) < E.ROWS_PER_PARAMETER
        assert (ERRORS[regime]["pooled"] == "true") == few, regime
        if few:
            assert share[regime] == 0, regime
    # physical ranges: efficiencies in (0, 1], costs >= 0; an engine running each elementwise op as its own kernel
    # moves a token's activations more often than one that fuses them
    p = E.EstimateParameters.fitted()
    assert 0 < p.memory_efficiency <= 1 and 0 < p.matmul_efficiency <= 1
    assert min(p.layer_overhead_s, p.step_overhead_s, p.activation_passes, p.dequant_flops_per_weight) >= 0
    assert p.unfused_activation_passes > p.activation_passes


@pytest.mark.parametrize("m", ROWS, ids=[m.id for m in ROWS])
def test_the_regime_rule_gives_each_rows_regime(m):
    prompt = m.input_tokens if m.metric in ("ttft_s", "prefill_tok_s") else 0
    per_pass = min(prompt, m.chunk_tokens) if m.chunk_tokens else prompt
    assert E.regime_of(m.deployment(), m.batch, per_pass) == m.regime


# ----- the issue's targets, on the committed cross-validation ----------------------------------------

#: Targets the 102 fitted rows of the table do not reach (kept honest: each fails today, and must be
#: removed from here when a better model or more rows reach it).
MISSED = {
    ("coverage", "large_batch"),  # 65%: TensorRT-LLM's H200 launch blog (v0.5, static batches) runs slower than the
                                  # interval the two other sources' rows give, all five of its rows
    ("coverage", "multi_chip"),   # 69%: five of gpt-fast's tensor-parallel rows run faster (its CUDA graph replays
                                  # NCCL's all-reduces faster than nccl-tests' host-launched curve); PaLM on TPU v4,
                                  # Meta's eager 65B and two of AMD's MI300X runs slower
    ("half_width", "multi_chip"),  # a core within 10% and whole sources 20-90% off (gpt-fast below; MI300X under
                                   # vLLM, Meta's eager 65B, PaLM on TPU v4 with no ICI curve above): heavy tails
    ("half_width", "moe"),      # DeepSeek-R1 on eight GPUs (1.8-2.2x) and Qwen3-30B in NVFP4 at 1,400-1,600
                                # sequences (1.8-2.0x) run slower than any term prices, gpt-fast's Mixtral on 8 faster
}
OWN = [r for r in REGIMES if int(ERRORS[r]["rows"]) >= E.ROWS_PER_PARAMETER]


def _target(kind: str, regime: str) -> bool:
    e = ERRORS[regime]
    if kind == "median":
        return float(e["median_abs_error"]) <= (0.15 if regime == "all" else 0.25)
    if kind == "coverage":
        return 0.70 <= float(e["coverage"]) <= 0.90
    return float(e["median_half_width"]) <= 2 * float(e["median_abs_error"])


def test_the_targets_met_over_all_rows_since_capacity_and_the_weights_in_series():
    """Over all 102 fitted rows the median error and the median half-width meet the issue's targets since the estimate
    holds a continuous-batching run's requests to what its cache admits and charges the weights' reads and matmuls in
    series: 14.5% <= 15% and 26.2% <= 2 x 14.5%, as committed by scripts/fit_estimate.py (to 0.05 points; a refit
    after adding rows moves them, and this test with them)."""
    e = ERRORS["all"]
    median, half = float(e["median_abs_error"]), float(e["median_half_width"])
    assert median == pytest.approx(0.145, abs=5e-4) and median <= 0.15
    assert half == pytest.approx(0.262, abs=5e-4) and half <= 2 * median


@pytest.mark.parametrize("kind, regime", [(k, r) for k in ("median", "coverage", "half_width") for r in (*OWN, "all")])
def test_cross_validated_errors_against_the_issues_targets(kind, regime):
    """Median |error| <= 15% over all rows and <= 25% per regime of >= 5 rows; 80% intervals holding 70-90% of the
    left-out rows; median half-width <= 2x the regime's median error."""
    if (kind, regime) in MISSED:
        assert not _target(kind, regime), f"{kind} in {regime} now meets its target: remove it from MISSED"
        pytest.xfail(f"{kind} target not met in {regime} with {ERRORS[regime]['rows']} rows")
    assert _target(kind, regime)


# ----- every estimate sits at or above its bound --------------------------------------------------------

@pytest.mark.parametrize("m", ROWS, ids=[m.id for m in ROWS])
def test_every_rows_estimate_is_above_its_bound_and_inside_its_own_interval_order(m):
    e = E.estimate_for(m)
    c = bound_for(m)
    assert e.bound_s == pytest.approx(c.unit_s, rel=1e-12) and c.ratio <= 1  # the bound is unchanged
    assert e.bound_s <= e.estimate_low_s <= e.estimate_s <= e.estimate_high_s
    assert e.regime == m.regime and not e.is_lower_bound


def test_a_grid_of_deployments_is_estimated_above_the_bound():
    for model, chip, layout, weights in [("llama-3-8b", "h100-sxm", None, "bf16"),
                                         ("llama-3-70b", "h100-sxm", "tp=8", "fp8"),
                                         ("mixtral-8x7b", "a100-80gb", "tp=2", "bf16"),
                                         ("llama-3-8b", "m2-ultra", None, "q4_0")]:
        dep = km.Deployment(model, chip, layout, weights=weights)
        batch, context = np.array([1.0, 8, 64, 256])[:, None], np.array([128.0, 4096])
        e = E.estimate_step(dep, batch, context)
        assert np.all(e.bound_s <= e.estimate_low_s) and np.all(e.estimate_low_s <= e.estimate_s)
        assert np.all(e.estimate_s <= e.estimate_high_s)
        r = E.estimate_request(dep, 4, 512, 64)
        assert r.total.estimate_s == pytest.approx(r.ttft.estimate_s + r.decode.estimate_s, rel=1e-12)
        assert r.total.bound_s <= r.total.estimate_s


# ----- the terms by hand ----------------------------------------------------------------------------------

def _activations(tokens, layers, width, bandwidth, passes="activation_passes"):
    """The fitted passes over ``width`` bf16 values per token and layer (a fusing engine's unless named), at the fitted
    bandwidth."""
    return PARAMS[passes] * tokens * layers * width * 2 / (bandwidth * PARAMS["memory_efficiency"])


def test_a_batch_one_step_by_hand():
    """Llama 2 7B in bf16 on an A100, B = 1, S = 105: both kernels memory-bound.

    Weights read: 32 layers of Q, K, V, O (4096 x 4096) and the MLP (3 x 4096 x 11008), the 32000 x 4096 head,
    one embedding row, 2 bytes each; the cache 2 x 32 x 4096 x 2 bytes a token. Estimate: the per-pass costs,
    each read at the fitted fraction of 2.039 TB/s, after them the matmuls, 2 FLOPs a weight (the head's too, not
    the embedding row's) at the fitted fraction of 312 TFLOP/s, and the fitted passes over one token's activations
    of each layer, its 4096 hidden values and its MLP's 11008, in bf16. (The attention's math is shorter than the
    cache's read, which sets that kernel.)
    """
    n = 32 * (4 * 4096**2 + 3 * 4096 * 11008) + 32000 * 4096
    w = 2 * (n + 4096)
    kv = 2 * 32 * 4096 * 2 * 105
    p = PARAMS
    expected = p["step_overhead_s"] + 32 * p["layer_overhead_s"] + (w + kv) / (2.039e12 * p["memory_efficiency"]) \
        + 2 * n / (312e12 * p["matmul_efficiency"]) + _activations(1, 32, 4096 + 11008, 2.039e12)
    e = E.estimate_step(km.Deployment("llama-2-7b", "a100-80gb"), 1, 105)
    assert e.estimate_s == pytest.approx(expected, rel=1e-4)  # norms left out by hand: 0.002%
    assert e.bound_s == pytest.approx((w + kv) / 2.039e12, rel=1e-4)
    assert e.flags == {}  # one chip: no collective, nothing stood in for


def test_a_q4_0_steps_dequantization_term_by_hand():
    """Llama 2 7B in Q4_0 (4.5 bits a weight) on an RTX 3090 multiplying in fp16 (71 TFLOP/s, 936 GB/s).

    Each weight read is unpacked: the fitted work per weight at the chip's rate, on top of the bytes; the matmuls,
    2 FLOPs a weight multiplied (not the embedding row), follow at the fitted fraction of the same rate.
    """
    n = 32 * (4 * 4096**2 + 3 * 4096 * 11008) + 32000 * 4096 + 4096  # weights read at B = 1
    b = 4.5 / 8
    p = PARAMS
    dep = km.Deployment("llama-2-7b", "rtx-3090", weights="q4_0", kv="fp16", compute="fp16")
    dequant = n * p["dequant_flops_per_weight"] / 71e12
    kv = 2 * 32 * 4096 * 2 * 64
    matmuls = 2 * (n - 4096) / (71e12 * p["matmul_efficiency"])
    fixed = p["step_overhead_s"] + 32 * p["layer_overhead_s"] + _activations(1, 32, 4096 + 11008, 936e9) + matmuls
    expected = fixed + (n * b + kv) / (936e9 * p["memory_efficiency"]) + dequant
    assert E.estimate_step(dep, 1, 64).estimate_s == pytest.approx(expected, rel=1e-4)
    # in fp16 no weight is unpacked: the same step without that term, the bytes four times as many
    fp16 = km.Deployment("llama-2-7b", "rtx-3090", weights="fp16", kv="fp16", compute="fp16")
    assert E.estimate_step(fp16, 1, 64).estimate_s == pytest.approx(
        fixed + (2 * n + kv) / (936e9 * p["memory_efficiency"]), rel=1e-4)
    # fp4 math (a B200's NVFP4 weights) multiplies 4.5-bit weights as they are: nothing unpacked
    assert E._constants(km.Deployment("llama-3-8b", "b200-hgx", weights="nvfp4", compute="fp4")).unpacked is None


def test_tensor_parallel_collectives_by_hand():
    """Llama 2 7B over 8 A100s (tp = 8, NVLink 3) at batch 1: 64 all-reduces of one token's 4096 bf16 values
    (8,192 B) on each step's chain, each at its measured curve (kvmath/data/collectives.csv), t = latency +
    2 (n - 1) / n S / bandwidth: gpt-fast's NCCL ring, 33.7 us and 231.58 GB/s on 8 GPUs (nccl-tests#123, Azure's
    ND A100 v4); vLLM's custom kernel, 13.7 us and 187 GB/s (sglang#2688). The estimate adds exactly that chain."""
    dep = km.Deployment("llama-2-7b", "a100-80gb", "tp=8")
    moved = 2 * 7 / 8 * 8192
    ring, custom = 64 * (33.7e-6 + moved / 231.58e9), 64 * (13.7e-6 + moved / 187e9)
    step = dep.step(1, 105)
    assert E.collective_estimate_s(dep, step, engine="gpt-fast") == pytest.approx(ring, rel=1e-9)
    assert E.collective_estimate_s(dep, step, engine="vLLM") == pytest.approx(custom, rel=1e-9)
    # the same figures as the topology's estimate of the chain: one path
    assert E.collective_estimate_s(dep, step, engine="vLLM") == dep.comm_estimate(1).estimate_s
    assert E.collective_estimate_s(dep, step, engine="gpt-fast") == dep.comm_estimate(1, algorithm="nccl").estimate_s
    gpt_fast, vllm = (E.estimate_step(dep, 1, 105, engine=e) for e in ("gpt-fast", "vLLM"))
    assert gpt_fast.estimate_s - vllm.estimate_s == pytest.approx(ring - custom, rel=1e-9)
    # a layout without a link still talks: over the chip's own NVLink 3, and the estimate says it assumed so
    none = E.estimate_step(dep.replace(link=None), 1, 105, engine="vLLM")
    assert none.estimate_s == pytest.approx(vllm.estimate_s, rel=1e-12) and "nvlink3" in none.flags["link"]
    # the custom kernel's 8-GPU bandwidth is its 4-GPU row's (the source's table shows no large message on 8)
    assert vllm.flags == {"all_reduce over 8 chips on nvlink3": "curve measured on 8 GPUs, bandwidth not measured there"}


def test_every_engine_has_its_all_reduce_and_stand_in_curves_are_flagged():
    """Engines that call NCCL (gpt-fast, Meta's PyTorch reference) take NCCL's curve; TensorRT-LLM, vLLM and SGLang
    their custom kernels where faster. NVLink 5 (its custom kernel's times NVLink 4's, scaled by the one pair of
    small-message times published on both) and MI300X's Infinity Fabric (no published figure) are stand-ins the
    estimate flags."""
    from kvmath.calibration import ENGINES

    assert set(E.ENGINE_ALGORITHMS) == set(ENGINES)
    assert {e for e in ENGINES if E.engine_algorithm(e) == "nccl"} == {"gpt-fast", "PyTorch", "llama.cpp"}
    assert E.engine_algorithm("") == E.engine_algorithm(None) == "auto"
    for model, chip, link in (("llama-3.1-405b", "b200-hgx", "nvlink5"), ("llama-3.1-405b", "mi300x", "amd-if-mi300x")):
        e = E.estimate_step(km.Deployment(model, chip, "tp=8", weights="fp8"), 16, 1000, engine="vLLM")
        assert any(link in k for k in e.flags), e.flags
    h100 = E.estimate_step(km.Deployment("llama-3.1-405b", "h100-sxm", "tp=8", weights="fp8"), 16, 1000)
    assert h100.flags == {}
    # expert parallelism's all-to-all: DeepEP's curve on one node of H800s, measured there (no flag); on H100s'
    # NVLink 4 no curve is published, so the bound's formula, flagged
    ds = E.estimate_step(km.Deployment("deepseek-v3", "h800", "dp=8,ep=8", weights="fp8"), 64, 1000)
    assert ds.flags == {}
    ds = E.estimate_step(km.Deployment("deepseek-v3", "h100-sxm", "dp=8,ep=8", weights="fp8"), 64, 1000)
    assert ds.flags == {"all_to_all over 8 chips on nvlink4": "no measured curve: the bound's formula"}
    check = get_measurement("orcl-405b-b16")
    assert any("amd-if-mi300x" in k for k in E.estimate_for(check).flags)


def test_a_batch_one_moe_step_is_priced_at_the_dense_rate():
    """gpt-oss-20b at batch 1 (4 of 32 experts a token, d = d_ff_expert = 2880): its weight term (reads, their
    unpacking and their matmuls) with no factor for the experts, and the activations of its hidden vector and four experts'
    intermediates, 2880 + 4 x 2880 = 14400 values a layer."""
    dep = km.Deployment("gpt-oss-20b", "rtx-4090", weights={"default": "q4_k", "experts": "mxfp4"}, kv="fp16",
                        compute="fp16")
    step = dep.step(1, 64)
    p = E.EstimateParameters.fitted()
    c = E._constants(dep)
    # every group is stored below 16 bits (Q4_K, MXFP4 at 4.25 bits): each weight read is unpacked
    per = _group_bytes(dep.formats.weights, False)
    unpacked = sum(v / per[g] for g, v in dep.model.weight_bytes_read_by_group(1, dep.formats.weights).items())
    weights = float(step.weight_read_s) / p.memory_efficiency + unpacked * p.dequant_flops_per_weight / dep.flops \
        + float(step.weight_compute_s) / p.matmul_efficiency
    fixed = p.step_overhead_s + 24 * p.layer_overhead_s + _activations(1, 24, 2880 + 4 * 2880, 1.008e12)
    expected = fixed + float(step.kv_read_s) / p.memory_efficiency + weights
    assert E.estimate_step(dep, 1, 64).estimate_s == pytest.approx(expected, rel=1e-9)
    assert E._unpack_s(c, step) == pytest.approx(unpacked / dep.flops, rel=1e-9)


def test_the_activation_width_by_hand():
    """One token's activations of a layer on a chip: d, plus the MLP's intermediate over tp chips (a mixture of
    experts: its k routed and shared experts' intermediates; a dense layer its own d_ff), averaged over layers."""
    assert E.activation_width(km.Deployment("llama-3-70b", "h100-sxm")) == 8192 + 28672
    assert E.activation_width(km.Deployment("llama-3-70b", "h100-sxm", "tp=8")) == 8192 + 28672 / 8
    # Qwen3-235B: 8 routed experts of 1536, split like the other weights over tp = 8
    assert E.activation_width(km.Deployment("qwen3-235b-a22b", "h200", "tp=8")) == 4096 + 8 * 1536 / 8
    # DeepSeek-V3: 3 dense layers of 18432 and 58 MoE layers of 8 routed + 1 shared expert of 2048 (also 18432);
    # experts spread by expert over ep chips leave each chip its own tokens' full intermediates
    ds = km.Deployment("deepseek-v3", "h800", "dp=8,ep=8")
    assert E.activation_width(ds) == 7168 + (3 * 18432 + 58 * 9 * 2048) / 61 == 7168 + 18432


def test_an_unfused_engine_moves_its_activations_more_often():
    """Llama 3 8B prefill of 512 tokens on an RTX 4090: llama.cpp (one kernel per ggml op) against an engine that
    fuses its elementwise work differ by exactly the two fitted pass counts over 512 tokens x 32 layers x
    (4096 + 14336) bf16 values at the fitted bandwidth."""
    from kvmath.calibration import ENGINES

    assert set(E.UNFUSED_ENGINES) <= set(ENGINES)
    dep = km.Deployment("llama-3-8b", "rtx-4090")
    fused, unfused = (E.estimate_prefill(dep, 1, 512, engine=e).estimate_s for e in ("TensorRT-LLM", "llama.cpp"))
    width = 4096 + 14336
    gap = (PARAMS["unfused_activation_passes"] - PARAMS["activation_passes"]) * 512 * 32 * width * 2 / (
        1.008e12 * PARAMS["memory_efficiency"])
    assert unfused - fused == pytest.approx(gap, rel=1e-6)
    # a decode step at batch 1 moves one token's activations: the same gap over 512 times fewer tokens
    step = [E.estimate_step(dep, 1, 100, engine=e).estimate_s for e in ("TensorRT-LLM", "llama.cpp")]
    assert step[1] - step[0] == pytest.approx(gap / 512, rel=1e-6)


def test_a_large_moe_batch_reads_the_experts_a_uniform_router_touches():
    """Mixtral 8x7B (8 experts, 2 a token) at 64 sequences: the bound reads the floor, 2 experts a layer; the
    estimate the 8 (1 - (1 - 2/8)^64) = 8.0 a uniform router touches, so 4x the expert bytes."""
    dep = km.Deployment("mixtral-8x7b", "h100-sxm", "tp=2")
    floor, uniform = dep.step(64, 500), dep.step(64, 500, routing="uniform")
    expert = dep.model.weight_bytes_read_by_group(64, "bf16", "floor")["experts"]
    assert dep.model.weight_bytes_read_by_group(64, "bf16", "uniform")["experts"] == pytest.approx(
        expert * 8 * (1 - 0.75**64) / 2, rel=1e-12)
    c = E._constants(dep)
    priced = E._step_pricer(dep, E._routed(dep, floor), c)(E.EstimateParameters.fitted())
    assert E.estimate_step(dep, 64, 500).estimate_s == pytest.approx(priced, rel=1e-12)
    assert float(uniform.weight_read_s) > 2 * float(floor.weight_read_s)


def test_a_continuous_batching_run_holds_what_its_cache_admits_by_hand():
    """TensorRT-LLM's Llama 3.1 70B in FP8 on one H200, 3,000 requests of 128 tokens in and 2,048 out. Each request's
    FP8 cache, reserved to completion (GUARANTEED_NO_EVICT), holds 2,176 x (2 x 80 x 8 x 128 x 1 B) = 356,515,840 B;
    the weights take 80 x (8192 x 18432 + 3 x 8192 x 28672 + 2 x 8192) + 2 x 128256 x 8192 + 8192 = 70,553,706,496 B
    of the 150,754,820,096 B the H200 reports, and 0.9 of the rest holds 202 requests. The estimate prices waves of
    202 (3000 / 202 of them), each a whole request of 202; the bound still takes all 3,000 at once."""
    from kvmath.requests import request_times

    weights = 80 * (8192 * 18432 + 3 * 8192 * 28672 + 2 * 8192) + 2 * 128256 * 8192 + 8192
    seq = 2176 * 2 * 80 * 8 * 128
    held = int(0.9 * (150_754_820_096 - weights) / seq)
    assert (weights, seq, held) == (70_553_706_496, 356_515_840, 202)
    m = get_measurement("pov-70b-h200-128-2048")
    dep = m.deployment()
    assert m.continuous_batching and E.in_flight_batch(dep, 3000, 128, 2048) == held
    wave = E.estimate_request(dep, held, 128, 2048, engine="TensorRT-LLM").total.estimate_s
    assert E.estimate_for(m).estimate_s == pytest.approx(3000 / held * wave / 2048, rel=1e-12)
    assert bound_for(m).unit_s == pytest.approx(request_times(dep, 3000, 128, 2048).total_s / 2048, rel=1e-12)
    # fewer requests than the cache holds all run at once; a row of a static batch is priced at its batch
    assert E.in_flight_batch(dep, 150, 128, 2048) == 150
    assert not get_measurement("h200-70b-b512").continuous_batching
    with pytest.raises(ValueError, match="continuous_batching"):
        dataclasses.replace(get_measurement("gf-7b-bf16"), continuous_batching=True)
    with pytest.raises(ValueError, match="requests"):
        E.in_flight_batch(dep, 0, 128, 2048)


def test_a_requests_decode_is_the_sum_of_its_steps():
    """The closed form over contexts S_in + 1 .. S_in + S_out - 1 against one estimate per step, summed."""
    for dep in (km.Deployment("llama-3-8b", "h100-sxm"), km.Deployment("gemma-3-12b", "h100-sxm", weights="fp8")):
        r = E.estimate_request(dep, 8, 4000, 300)
        steps = E.estimate_step(dep, 8, np.arange(4001, 4300, dtype=float))
        assert r.decode.estimate_s == pytest.approx(float(np.sum(steps.estimate_s)), rel=1e-9)
        assert r.time_per_output_token.estimate_s == pytest.approx(r.decode.estimate_s / 299, rel=1e-12)
    # windows that are no model.sliding_window, crossed by the contexts 8,001 .. 8,399: a dsa layer's top-k of 2,048
    # (the line drawn from contexts 1 and 2 went on growing past it) and Llama 4's chunks of 8,192
    for dep in (km.Deployment("deepseek-v3.2", "h100-sxm", "tp=8"), km.Deployment("llama-4-scout", "h100-sxm", "tp=4")):
        r = E.estimate_request(dep, 8, 8000, 400)
        steps = E.estimate_step(dep, 8, np.arange(8001, 8400, dtype=float))
        assert r.decode.estimate_s == pytest.approx(float(np.sum(steps.estimate_s)), rel=1e-9)
    # DeepSeek-V3 on one H200 with an fp8 cache: its absorbed attention's FLOPs, not its latents' bytes, bind
    dep = km.Deployment("deepseek-v3", "h200", kv="fp8")
    step, p = dep.step(8, 4000), E.EstimateParameters.fitted()
    assert step.attention_compute_s / p.matmul_efficiency > 2 * step.kv_read_s / p.memory_efficiency
    r = E.estimate_request(dep, 8, 4000, 300)
    steps = E.estimate_step(dep, 8, np.arange(4001, 4300, dtype=float))
    assert r.decode.estimate_s == pytest.approx(float(np.sum(steps.estimate_s)), rel=1e-9)
    # and DeepSeek-V3.2 past its top-k of 2,048: attention's FLOPs bind and are constant but the indexer's
    dep = km.Deployment("deepseek-v3.2", "h200", kv="fp8")
    step = dep.step(8, 8000)
    assert step.attention_compute_s / p.matmul_efficiency > 1.3 * step.kv_read_s / p.memory_efficiency
    r = E.estimate_request(dep, 8, 8000, 300)
    steps = E.estimate_step(dep, 8, np.arange(8001, 8300, dtype=float))
    assert r.decode.estimate_s == pytest.approx(float(np.sum(steps.estimate_s)), rel=1e-9)


def test_a_prefill_estimate_is_its_passes_priced():
    """Whole prompt: one pass; in chunks of 512: four passes with the same FLOPs in all (the causal attention
    telescopes, the LM head runs once), each reading the 32 layers' weights, 2 x 32 x (4 x 4096^2 + 3 x 4096 x 11008)
    = 12.95 GB, at the fitted fraction of 2.039 TB/s before its matmuls: three more passes' fixed costs and three
    more reads of the layers' weights (to 1e-4: the embedding rows each pass looks up)."""
    dep = km.Deployment("llama-2-7b", "a100-80gb", weights="fp16", compute="fp16")
    whole = E.estimate_prefill(dep, 1, 2048)
    p = dep.prefill(1, 2048)
    assert whole.estimate_s == pytest.approx(E.estimate_pass(dep, p, prompt_tokens_per_pass=2048).estimate_s,
                                             rel=1e-12)
    chunks = E.estimate_prefill(dep, 1, 2048, chunk_tokens=512)
    fixed = PARAMS["step_overhead_s"] + 32 * PARAMS["layer_overhead_s"]
    layers = 2 * 32 * (4 * 4096**2 + 3 * 4096 * 11008)
    extra = chunks.estimate_s - whole.estimate_s - 3 * fixed
    assert extra == pytest.approx(3 * layers / (2.039e12 * PARAMS["memory_efficiency"]), rel=1e-4)
    assert whole.regime == chunks.regime == "prefill"


# ----- results and the command line ---------------------------------------------------------------------

def test_estimates_are_results_named_as_estimates():
    e = E.estimate_step(km.Deployment("llama-3-8b", "h100-sxm"), 1, 100)
    d = e.to_dict()
    assert set(d) == {"bound_s", "estimate_s", "estimate_low_s", "estimate_high_s", "regime", "regime_rows",
                      "pooled", "flags", "is_lower_bound"}
    assert all(d[k] == getattr(e, k) for k in d)
    r = E.estimate_request(km.Deployment("llama-3-8b", "h100-sxm"), 1, 100, 1).to_dict()
    assert set(r) == {"ttft", "decode", "total", "time_per_output_token"}
    assert r["time_per_output_token"]["estimate_s"] is None  # one output token: no decode step (NaN -> None)
    json.dumps(r, allow_nan=False)


def test_import_kvmath_does_not_load_the_estimate():
    code = "import sys, kvmath; print('kvmath.estimate' in sys.modules, 'kvmath.calibration' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(km.__file__).parents[1]).stdout.split()
    assert out == ["False", "False"]


def _cli(*argv):
    return subprocess.run([sys.executable, "-m", "kvmath", *argv], capture_output=True, text=True,
                          cwd=Path(km.__file__).parents[1])


def test_cli_estimate_is_the_results_to_dict():
    out = _cli("decode", "--model", "llama-2-7b", "--hardware", "a100-80gb", "--batch", "1", "--context", "105",
               "--estimate", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["estimate"] == json.loads(json.dumps(
        E.estimate_step(km.Deployment("llama-2-7b", "a100-80gb"), 1, 105).to_dict()))
    run = json.loads(_cli("run", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--input", "100", "--output",
                          "50", "--estimate", "--json").stdout)
    assert set(run["estimate"]) == {"ttft", "decode", "total", "time_per_output_token"}
    text = _cli("prefill", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--input", "2048", "--estimate").stdout
    assert text.count("estimate ") == 2 and "regime prefill" in text
    bad = _cli("decode", "--model", "llama-2-7b", "--hardware", "a100-80gb", "--batch", "1", "--context", "9",
               "--estimate", "--efficiency", "0.8")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--estimate" in bad.stderr


# ----- check: the calibration table, and figures that beat their bound -----------------------------------

def test_every_row_of_the_table_is_checked():
    """No row beats its bound; each falls inside its regime's interval except those listed: 18 of 113 (16%; an 80%
    interval leaves out a fifth of the rows it was built from, and the held-out rows were built from none).

    Slower than the interval: gpt-fast's int8 and int4 (its own unpacking kernels), PaLM on 64 TPU v4 chips (no ICI
    curve: no collective priced), Meta's eager reference code for LLaMA 65B, llama.cpp's Q4_K decode on an M2 Ultra
    and its 512-token prompts on an M2 Ultra and an RTX 3090 (fp16) and an RTX 4090 (Q4_K), TensorRT-LLM's
    DeepSeek-R1 at 3,072 sequences on eight B200s, and the held-out rows whose unknowns make the bound loosest
    (DeepSeek-R1 at batch 1 on B200s and H200s with four tokens a step charged; MLPerf on one MI300X or B200 and its
    Mixtral runs on eight H100s, H200s and B200s, without their prompts). DeepSeek's production day, its all-to-all
    priced at DeepEP's curve over the nodes' network, is inside, and so are TensorRT-LLM's Llama 3.1 8B runs of
    30,000 and 3,000 requests on an H100 since the estimate holds as many at once as the cache admits. Faster:
    gpt-fast's Llama 2 7B on eight A100s (its CUDA graph replays the all-reduces faster than the NCCL curve, measured
    with a launch from the host) and MLPerf's 8-GPU Llama 70B offline run on B200s (held out: a 1-token prompt
    charged).
    """
    slower, faster = [], []
    for m in ROWS:
        c = check(m)
        assert not c.beats_bound and c.likely_causes == () and c.ratio == bound_for(m).ratio
        inside = c.estimate.estimate_low_s <= c.measured_s <= c.estimate.estimate_high_s
        assert (c.against_estimate == "inside the interval") == inside, m.id
        if not inside:
            (slower if c.measured_s > c.estimate.estimate_high_s else faster).append(m.id)
            assert c.against_estimate == ("slower" if m.id in slower else "faster") + " than the interval"
    assert sorted(slower) == ["dsr1-b200-maxtp", "dsr1-b200-minlat", "dsr1-h200-minlat", "gf-7b-int4", "gf-7b-int8",
                              "meta-65b-tp8", "mlp41-b200-70b", "mlp41-h100x8-mixtral", "mlp41-h200x8-mixtral",
                              "mlp41-mi300x1-70b", "mlp50-b200x8-mixtral", "pope-palm-64", "pr4766-3090-7b-f16-pp512",
                              "xd-4090-8b-q4km-pp512", "xd-m2u-8b-f16-pp512", "xd-m2u-8b-q4km"]
    assert sorted(faster) == ["gf-7b-tp8", "mlp50-b200x8-70b"]


@pytest.mark.parametrize("kwargs, cause", [
    # gpt-fast's 7B at 180 tok/s, above its 153.7 tok/s bf16 bound: in fp8 the bytes halve
    (dict(metric="seq_tok_s", measured=180.0, input_tokens=5, output_tokens=200), "check the weight precision"),
    # 400 tok/s per user in fp8 (the bound: 6.7 GB a step at 2.039 TB/s, about 300): two tokens a step allow it
    (dict(metric="user_tok_s", measured=400.0, input_tokens=500, weights="fp8"), "speculative decoding"),
    # 9,000 output tok/s from 8 sequences: 1,118 is the bound; 512 sequences would allow it
    (dict(metric="out_tok_s", measured=9000.0, batch=8, input_tokens=128, output_tokens=128), "check the batch"),
    # per GPU, 8 GPUs: the whole deployment's figure divided by 8 fits
    (dict(metric="out_tok_s", measured=40000.0, batch=64, input_tokens=128, output_tokens=128, layout="tp=8",
          link="nvlink3", per_chip=True), "per chip against per node"),
    # a step time in ms typed as seconds' thousandths twice over
    (dict(metric="s_per_token", measured=9.5e-6, input_tokens=100), "check the unit"),
])
def test_a_figure_that_beats_its_bound_names_the_likely_cause(kwargs, cause):
    c = check(user_measurement("llama-2-7b", "a100-80gb", **kwargs))
    assert c.beats_bound and c.against_estimate == "faster than the interval"
    assert any(cause in text for text in c.likely_causes), c.likely_causes


def test_cli_check_measurement_is_checks_to_dict():
    args = ["check", "measurement", "--model", "llama-2-7b", "--hardware", "a100-80gb", "--metric", "seq_tok_s",
            "--measured", "104.9", "--input", "5", "--output", "200", "--link", "none"]
    out = _cli(*args, "--json")
    assert out.returncode == 0, out.stderr
    expected = check(user_measurement("llama-2-7b", "a100-80gb", metric="seq_tok_s", measured=104.9,
                                      input_tokens=5, output_tokens=200))
    assert json.loads(out.stdout) == json.loads(json.dumps(expected.to_dict()))
    text = _cli(*args).stdout
    assert "does not beat the bound" in text and "inside the interval" in text
    beaten = _cli("check", "measurement", "--model", "llama-2-7b", "--hardware", "a100-80gb", "--metric",
                  "seq_tok_s", "--measured", "180", "--input", "5", "--output", "200").stdout
    assert "BEATS THE BOUND" in beaten and "weight precision" in beaten
    assert _cli("check", "--help").stdout.count("measurement") >= 1
    assert _cli("check").returncode == 2


def test_the_frontier_and_the_steady_state_are_estimated_below_their_bounds_rates():
    """An estimated time is never below its bound, so the estimated best throughput (among the batches the
    bound's memory cap admits, the estimated time per output token within the limit) is never above the bound's."""
    for dep in (km.Deployment("llama-3-70b", "h100-sxm", "tp=8", link="nvlink4"),
                km.Deployment("llama-3-8b", "a100-80gb", weights="fp8", compute="bf16")):
        for limit in (None, 0.03):
            f = dep.frontier(np.array([500, 2000]), np.array([200, 1000]), tpot_limit_s=limit)
            e = E.estimate_frontier(dep, np.array([500, 2000]), np.array([200, 1000]), tpot_limit_s=limit)
            assert np.all(e.throughput_per_chip_estimate <= f.best_throughput_per_chip * (1 + 1e-12))
            assert np.all(e.throughput_per_chip_estimate_low <= e.throughput_per_chip_estimate)
            assert np.all(e.throughput_per_chip_estimate <= e.throughput_per_chip_estimate_high)
            assert np.all(e.best_batch <= f.max_batch) and np.all(e.best_batch >= 1)
            if limit is not None:
                assert np.all(e.time_per_output_token.estimate_s <= limit)
        s = dep.steady_state(64, 1000, 200)
        est = E.estimate_steady_state(dep, 64, 1000, 200)
        assert s.time_per_output_token_s == est.bound_s <= est.estimate_low_s <= est.estimate_s <= est.estimate_high_s


# ----- the review of issue 24 at 900f15f: its WRONG and MISLEADING items, by hand ------------------------------

def test_deepseeks_production_layout_is_estimated_on_its_network_at_deepeps_curve():
    """DeepSeek-V3 decoding on 128 H800s in 16 nodes of 8 (dp = ep = 128; the row names no link, so the bound counts
    no communication). The estimate routes the experts' all-to-all as the system is built: NVLink inside a node, each
    GPU's 400 Gb/s card between nodes (the chip's network, ``ib-ndr400``), at DeepEP's measured curve for 128-way
    expert parallelism. Its README's low-latency kernels take 192 us to dispatch (fp8) and 369 us to combine (bf16)
    128 tokens a chip, top-8 of d = 7168: with S = 128 x 8 x 7168 B dispatched and 2 S combined, the curve's latency
    is 2 x 192 - 369 = 15 us and its bandwidth S / 177 us = 41.5 GB/s. The row's 84 sequences a chip at two tokens a
    step are 168 tokens, each layer's share 168 x 8 x 7168 x 2 B both ways (the row's bf16 activations), over the
    58 MoE layers: 55.64 ms a step, where one 200 GB/s NVLink fabric for all 128 chips gave 11.15 ms (the review's
    figure) and the 50 GB/s card alone bounds it at 44.4 ms."""
    s = 128 * 8 * 7168
    bandwidth = s / 177e-6
    # the curve passes through both measured points (its bandwidth kept to 6 figures in the table)
    assert collective_estimate("all_to_all", s, 128, "ib-ndr400").estimate_s == pytest.approx(192e-6, rel=1e-5)
    assert collective_estimate("all_to_all", 2 * s, 128, "ib-ndr400").estimate_s == pytest.approx(369e-6, rel=1e-5)
    m = get_measurement("ds-v3-decode")
    dep = m.deployment()
    assert dep.link is None and dep.step(m.batch, 100).comm_s == 0  # the bound counts none
    step = dep.step(m.batch, m.input_tokens, tokens_per_seq=m.tokens_per_step)
    share = 10752 / 128 * 2 * 8 * 7168 * 2
    expected = 58 * 2 * (15e-6 + share / bandwidth)
    assert E.collective_estimate_s(dep, step) == pytest.approx(expected, rel=1e-5)
    assert expected == pytest.approx(55.64e-3, abs=0.01e-3)
    one_fabric = 58 * 2 * (127 / 128 * share / 200e9 + 0.5e-6)
    assert one_fabric == pytest.approx(11.15e-3, abs=0.01e-3) and expected > one_fabric
    flags = E.estimate_for(m).flags
    assert "ib-ndr400" in flags["network"] and not any("all_to_all" in k for k in flags)  # measured at 128: no flag
    # a network the deployment names is kept; a chip with no sourced network says the estimate is too fast
    named = km.Deployment("deepseek-v3", "h800", "dp=128,ep=128", node_link="ib-ndr400")
    assert E.collective_estimate_s(named, step) == pytest.approx(expected, rel=1e-5)
    wide = E.estimate_step(km.Deployment("llama-3.1-405b", "a100-80gb", "tp=16"), 1, 100)
    assert "too fast" in wide.flags["network"]


def test_nvlink5s_stand_in_keeps_the_measured_order_of_b200_and_hopper():
    """NVLink 5 has no published small-message time for an engine's custom all-reduce. The one pair of small-message
    times published for the same kernels on both fabrics, NCCL 2.27's symmetric-memory all-reduce of 8 B on 8 GPUs
    with CUDA graphs, is about 3 us on B200s against 2.3 us on H800s or H200s (nccl#1940): the stand-in scales the
    NVLink 4 custom kernel's 5.9 us at 8 GPUs (sglang#2904) by 3.0 / 2.3 to 7.70 us, and its 263 GB/s by the links'
    900 / 450. DeepSeek-R1 at batch 1 in TensorRT-LLM (three MTP draft layers on both, so the unknown acceptance
    cancels in the ratio) measured 14.56 ms a step on 8 B200s against 25.30 ms on 8 H200s: the estimate must rank
    them the same way, as it must put Llama 3 70B at tp = 8 on B200s ahead of H200s and H100s."""
    e = collective_estimate("all_reduce", 16384, 8, "nvlink5", "custom")
    assert e.latency_s == pytest.approx(5.9e-6 * 3.0 / 2.3, rel=1e-3)  # the table keeps 7.70 us
    assert e.bandwidth == pytest.approx(2 * 263e9, rel=1e-3) and e.flagged
    measured = {i: bound_for(i).unit_s / bound_for(i).ratio for i in ("dsr1-b200-minlat", "dsr1-h200-minlat")}
    assert measured["dsr1-h200-minlat"] / measured["dsr1-b200-minlat"] == pytest.approx(1.74, abs=0.01)
    estimate = {i: E.estimate_for(i).estimate_s for i in measured}
    assert estimate["dsr1-b200-minlat"] < estimate["dsr1-h200-minlat"]
    llama = {chip: E.estimate_step(km.Deployment("llama-3-70b", chip, "tp=8", weights="fp8"), 1, 1000,
                                   engine="TensorRT-LLM").estimate_s for chip in ("h100-sxm", "h200", "b200-hgx")}
    assert llama["b200-hgx"] < llama["h200"] < llama["h100-sxm"]


def test_a_frontier_that_picks_batch_one_takes_the_small_batch_regime():
    """Llama 3 8B on one H100, 1,000 tokens in and 200 out: with a limit on the time per output token that only one
    sequence meets, the frontier picks batch 1, whose regime is batch 1's and its interval the committed batch-1
    errors around the estimate (x exp(log_low) to x exp(log_high)); without a limit it picks a large batch and the
    large-batch regime."""
    dep = km.Deployment("llama-3-8b", "h100-sxm")
    one = E.estimate_request(dep, 1, 1000, 200).time_per_output_token
    e = E.estimate_frontier(dep, 1000, 200, tpot_limit_s=one.estimate_s * 1.001)
    assert e.best_batch.tolist() == [1.0] and e.regime.tolist() == ["batch1"]
    t = e.time_per_output_token
    lo, hi = (float(ERRORS["batch1"][k]) for k in ("log_low", "log_high"))
    assert t.estimate_s[0] == pytest.approx(one.estimate_s, rel=1e-9)
    assert t.estimate_low_s[0] == pytest.approx(max(one.bound_s, one.estimate_s * np.exp(lo)), rel=1e-9)
    assert t.estimate_high_s[0] == pytest.approx(one.estimate_s * np.exp(hi), rel=1e-9)
    assert t.regime.tolist() == ["batch1"] and t.regime_rows.tolist() == [int(ERRORS["batch1"]["rows"])]
    many = E.estimate_frontier(dep, 1000, 200)
    assert many.best_batch[0] > 1 and many.regime.tolist() == ["large_batch"]


def test_unpacking_is_charged_on_the_weights_stored_below_their_compute_width_alone():
    """Llama 3 8B in Q4_0 with its LM head in bf16 on an RTX 4090 multiplying in fp16. Each of the 32 layers holds
    4096 x (4096 + 2 x 1024 + 4096) attention and 3 x 4096 x 14336 MLP weights, stored with the 65 norms' 4096 in the
    default Q4_0, and a step looks up one 4096-wide embedding row: those are unpacked, at the fitted FLOPs per weight
    and the chip's fp16 rate. The head's 128256 x 4096 bf16 weights multiply as stored (charging q on bytes, as
    before, counted them 2 / 0.5625 = 3.6 times over). With the head in Q4_0 too, it is unpacked as well."""
    layers = 32 * (4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 14336)
    unpacked = layers + 65 * 4096 + 4096
    rate = km.Chip.preset("rtx-4090").flops("fp16")
    q = PARAMS["dequant_flops_per_weight"]
    head_bf16 = km.Deployment("llama-3-8b", "rtx-4090", weights={"default": "q4_0", "lm_head": "bf16"}, kv="fp16",
                              compute="fp16")
    terms = E.estimate_terms(head_bf16, 1, 256)
    assert terms["unpacking"] == pytest.approx(unpacked * q / rate, rel=1e-9)
    all_q4 = km.Deployment("llama-3-8b", "rtx-4090", weights="q4_0", kv="fp16", compute="fp16")
    assert E.estimate_terms(all_q4, 1, 256)["unpacking"] == pytest.approx((unpacked + 128256 * 4096) * q / rate,
                                                                          rel=1e-9)
    # 16-bit weights unpack nothing
    assert E.estimate_terms(km.Deployment("llama-3-8b", "rtx-4090", kv="fp16"), 1, 256)["unpacking"] == 0


def test_the_terms_add_up_to_the_steps_estimate():
    for dep, batch, engine in ((km.Deployment("llama-3-8b", "rtx-4090", weights="q4_k"), 1, "llama.cpp"),
                               (km.Deployment("llama-3-70b", "h100-sxm", "tp=8", weights="fp8"), 64, "TensorRT-LLM"),
                               (km.Deployment("mixtral-8x7b", "a100-80gb", "tp=2"), 16, "gpt-fast"),
                               (km.Deployment("llama-2-7b", "a100-80gb"), 512, None)):
        t = E.estimate_terms(dep, batch, 1000, engine=engine)
        total = (t["fixed"] + t["attention"] + t["weight_read"] + t["unpacking"] + t["weight_compute"]
                 + t["activations"] + t["collectives"])
        assert E.estimate_step(dep, batch, 1000, engine=engine).estimate_s == pytest.approx(total, rel=1e-12)


def test_a_requests_total_interval_is_its_parts_intervals_summed():
    """Llama 3 8B on one H100, 8,000 tokens in and 16 out: the prefill (the prefill regime's errors) is most of the
    request and the decode (batch 1's) the rest. The total's ends are the sums of the parts' ends, each part's its
    estimate times its regime's committed exp(log_low) and exp(log_high), no lower than its bound: never narrower
    than either part's interval, where the decode regime's alone made it narrower than the prefill's."""
    dep = km.Deployment("llama-3-8b", "h100-sxm")
    r = E.estimate_request(dep, 1, 8000, 16)
    assert E.regimes_of(r.total) == ("prefill", "batch1") and r.total.regime == "prefill + batch1"
    assert r.total.regime_rows == int(ERRORS["prefill"]["rows"]) + int(ERRORS["batch1"]["rows"])

    def ends(part, regime):
        lo, hi = (float(ERRORS[regime][k]) for k in ("log_low", "log_high"))
        return max(part.bound_s, part.estimate_s * np.exp(lo)), part.estimate_s * np.exp(hi)

    (p_lo, p_hi), (d_lo, d_hi) = ends(r.ttft, "prefill"), ends(r.decode, "batch1")
    assert r.total.estimate_low_s == pytest.approx(p_lo + d_lo, rel=1e-12)
    assert r.total.estimate_high_s == pytest.approx(p_hi + d_hi, rel=1e-12)
    width = [e.estimate_high_s - e.estimate_low_s for e in (r.total, r.ttft, r.decode)]
    assert width[0] >= max(width[1:])
    assert r.total.estimate_s == pytest.approx(r.ttft.estimate_s + r.decode.estimate_s, rel=1e-12)


def test_cli_estimate_prints_its_regimes_errors_and_takes_the_engine():
    """The issue asks the command line for each regime's median and 90th-percentile error beside the estimate, and
    the estimate's all-reduce is the engine's: Llama 3 70B in fp8 over 8 H100s at batch 1 is 160 all-reduces of
    16 KiB, at NCCL's 30 us in gpt-fast and at the custom kernel's 6 us in TensorRT-LLM."""
    args = ["decode", "--model", "llama-3-70b", "--hardware", "h100-sxm", "--parallel", "tp=8", "--weight-dtype",
            "fp8", "--batch", "1", "--context", "1000", "--estimate"]
    dep = km.Deployment("llama-3-70b", "h100-sxm", "tp=8", weights="fp8")
    got = {e: json.loads(_cli(*args, "--engine", e, "--json").stdout)["estimate"] for e in ("gpt-fast", "TensorRT-LLM")}
    for engine, d in got.items():
        assert d == json.loads(json.dumps(E.estimate_step(dep, 1, 1000, engine=engine).to_dict()))
    assert got["gpt-fast"]["estimate_s"] - got["TensorRT-LLM"]["estimate_s"] > 160 * 20e-6
    text = _cli(*args, "--engine", "gpt-fast").stdout
    e = ERRORS["multi_chip"]
    assert (f"multi_chip error out of sample: median {float(e['median_abs_error']):.1%}, 90th percentile "
            f"{float(e['p90_abs_error']):.1%} ({e['rows']} rows") in text
    assert "estimate's all-reduce    NCCL's (--engine gpt-fast)" in text
    # the estimate's line sits under the bound's, its value in the same column as every other line's
    lines = text.splitlines()
    bound = next(x for x in lines if x.startswith("  step, strict"))
    estimate = next(x for x in lines if x.strip().startswith("estimate "))
    assert estimate.index(estimate.split()[1]) == bound.index(bound.split()[4])
    bad = _cli(*args[:-1], "--engine", "gpt-fast")
    assert bad.returncode == 2 and "--engine" in bad.stderr and "--estimate" in bad.stderr
    assert "all-reduce the estimate prices" in _cli("check", "measurement", "--help").stdout


# ----- pins the mutation check asked for (scripts/mutation_check.py) ------------------

def test_a_mixed_steps_estimate_by_its_equation():
    """Llama 3 8B on one H100, a steady state of 64 sequences of 1,000 in and 200 out: its step (64 decode tokens and
    321.6 prompt tokens on average) is priced as its bytes and its FLOPs in series (the weights' kernels' form), plus the
    fixed overheads of the step and its 32 layers and one activation pass of every token at each layer
    (activation_width: d + d_ff = 4,096 + 14,336 values of 2 B)."""
    dep = km.Deployment("llama-3-8b", "h100-sxm")
    step = dep.steady_state(64, 1000, 200).step
    p = E.EstimateParameters.fitted()
    assert E.activation_width(dep) == 4096 + 14336
    read = (step.weight_bytes_read + step.kv_bytes_read) / 3.35e12 / p.memory_efficiency
    work = read + step.total_flops / 989.4e12 / p.matmul_efficiency
    activations = (64 + step.prefill_tokens) * 32 * (4096 + 14336) * 2 / 3.35e12 * p.activation_passes
    by_hand = p.step_overhead_s + 32 * p.layer_overhead_s + work + activations / p.memory_efficiency
    assert step.prefill_tokens == pytest.approx(64 * 1000 / 199, rel=1e-12)
    assert E.estimate_steady_state(dep, 64, 1000, 200).estimate_s == pytest.approx(by_hand, rel=1e-12)
    # Mixtral on tp=2, pp=2 over NVLink 4, its experts in Q4_0 (unpacked to bf16 for the matmuls), 2 sequences: the
    # step's collectives carry its 2 + 10.05 tokens a pipeline stage at a time, (2 + 10.05) / 2, and it unpacks the
    # experts that its 1 + 10.05 / 2 tokens per sequence touch (more than one token's). Its matmuls run at one rate
    # that gives the same total time: the two active experts' 32 x 2 x 3 x 4,096 x 14,336 parameters at Q4_0's int8
    # rate (1,978.9 TFLOP/s; llama.cpp multiplies int8 activations against them) and attention (32 x 4,096 x 10,240),
    # the router (32 x 4,096 x 8) and the lm_head (32,000 x 4,096) at bf16 (989.4)
    dep = km.Deployment("mixtral-8x7b", "h100-sxm", "tp=2,pp=2", link="nvlink4",
                        weights={"experts": "q4_0", "default": "bf16"})
    step = dep.steady_state(2, 1000, 200).step
    c = E._constants(dep)
    assert step.prefill_tokens == pytest.approx(2 * 1000 / 199, rel=1e-12)
    unpack = E._unpack_s(c, step, tokens_per_seq=1 + step.prefill_tokens / 2)
    assert unpack > 1.2 * E._unpack_s(c, step, tokens_per_seq=1.0)
    seconds, activation_s = E._chain(c, (2 + step.prefill_tokens) / 2, c.dep)
    experts, rest = 32 * 2 * 3 * 4096 * 14336, 32 * 4096 * 10240 + 32 * 4096 * 8 + 32000 * 4096
    rate = (experts + rest) / (experts / 1978.9e12 + rest / 989.4e12)
    read = (step.weight_bytes_read + step.kv_bytes_read) / 3.35e12 / p.memory_efficiency + unpack * p.dequant_flops_per_weight
    work = read + step.total_flops / rate / p.matmul_efficiency
    by_hand = (p.step_overhead_s + 32 * p.layer_overhead_s + work + seconds
               + activation_s * p.activation_passes / p.memory_efficiency)
    assert seconds > 0 and E.estimate_steady_state(dep, 2, 1000, 200).estimate_s == pytest.approx(by_hand, rel=1e-12)
    # 256 sequences: 1,286 prompt tokens a step besides the 256 decode tokens; the FLOPs now outweigh the bytes, and
    # both are still charged
    dep = km.Deployment("llama-3-8b", "h100-sxm")
    step = dep.steady_state(256, 1000, 200).step
    read = (step.weight_bytes_read + step.kv_bytes_read) / 3.35e12 / p.memory_efficiency
    flops_s = step.total_flops / 989.4e12 / p.matmul_efficiency
    activations = (256 + step.prefill_tokens) * 32 * (4096 + 14336) * 2 / 3.35e12 * p.activation_passes
    assert flops_s > 1.3 * read
    by_hand = p.step_overhead_s + 32 * p.layer_overhead_s + read + flops_s + activations / p.memory_efficiency
    assert E.estimate_steady_state(dep, 256, 1000, 200).estimate_s == pytest.approx(by_hand, rel=1e-12)


def test_a_prefill_stage_does_its_share_of_the_stage_groups_collectives_and_activations():
    """Llama 3 70B on tp=4, pp=2 over NVLink 4, a prefill of 4 prompts of 1,000 tokens: a stage's chip does half its
    stage group's (tp=4, every layer) chain of collectives for the 4,000 tokens, and passes each token's activations
    of its 40 layers once: 4,000 x 40 x 15,360 values (d + d_ff / 4) x 2 B at 3.35 TB/s = 1.4672 ms."""
    from kvmath.requests import _prefill_passes, _without_pipeline

    dep = km.Deployment("llama-3-70b", "h100-sxm", "tp=4,pp=2", link="nvlink4")
    c = E._constants(dep)
    step, _, _ = _prefill_passes(dep, 4.0, 1000, None, False, {"overhead_s": 0.0, "efficiency": 1.0, "routing": "uniform"})
    seconds, activation_s = E._collectives(c, step, stage=True)
    group = _without_pipeline(c.dep)._comm_measured(4000.0, c.algorithm)[0]
    assert seconds == pytest.approx(group / 2, rel=1e-12) and group > 0
    assert activation_s == pytest.approx(4000 * 40 * 15_360 * 2 / 3.35e12, rel=1e-12)


def test_an_interval_is_the_regimes_own_order_statistics_or_the_pooled_ones():
    """Weibull quantiles (rank p (n + 1)): 9 residuals 1 .. 9 give the 10th and 90th percentiles at ranks 1 and 9;
    with fewer rows than ROWS_PER_PARAMETER (5) the pooled 19 residuals' 5th and 95th, ranks 1 and 19."""
    from kvmath.estimate import ROWS_PER_PARAMETER, _interval

    assert ROWS_PER_PARAMETER == 5
    own, pooled = np.arange(1.0, 10.0), np.arange(1.0, 20.0)
    assert _interval(own, pooled, 5) == (1.0, 9.0, False)
    assert _interval(own, pooled, 4) == (1.0, 19.0, True)
    # 4 rows 1 .. 4: ranks 0.5 and 4.5 clip to the ends
    assert _interval(np.arange(1.0, 5.0), pooled, 5) == (1.0, 4.0, False)


def test_the_regime_a_pass_of_several_one_token_prompts_falls_in_and_fp8_weights_that_need_no_unpacking():
    dep = km.Deployment("llama-3-8b", "h100-sxm")
    # batch x prompt tokens a pass > 1: four one-token prompts are a prefill pass, one is not
    assert E.regime_of(dep, 4, prompt_tokens_per_pass=1) == "prefill"
    assert E.regime_of(dep, 1, prompt_tokens_per_pass=1) == "batch1"
    # a one-token prompt is no prefill regime whatever the chunk it could have been cut in
    assert E.estimate_prefill(dep, 1, 1, chunk_tokens=512).regime == "batch1"
    assert E.estimate_request(dep, 1, 1, 2, chunk_tokens=512).ttft.regime == "batch1"
    # weights of one byte and no separate compute format are multiplied as stored: nothing is unpacked
    fp8 = km.Deployment("llama-3-8b", "h100-sxm", weights="fp8")
    assert E._unpacked_weights(fp8) is None and E.estimate_terms(fp8, 1, 256)["unpacking"] == 0.0


def test_attention_is_estimated_at_the_slower_of_its_bytes_and_its_flops():
    """DeepSeek-V3 on 8 H200s, 64 sequences verifying 16 tokens each at 4,000 tokens of context: its absorbed MLA
    attention does 16 x 278,528 FLOPs per cached latent, which at the fitted matmul efficiency outlast reading them."""
    dep = km.Deployment("deepseek-v3", "h200", "tp=8", link="nvlink4")
    step = dep.step(64, 4000, tokens_per_seq=16)
    p = E.EstimateParameters.fitted()
    flops_s, bytes_s = step.attention_compute_s / p.matmul_efficiency, step.kv_read_s / p.memory_efficiency
    assert flops_s > 2 * bytes_s
    assert E.estimate_terms(dep, 64, 4000, tokens_per_seq=16)["attention"] == pytest.approx(flops_s, rel=1e-12)


def test_a_one_token_pass_under_pipeline_stages_is_priced_as_the_decode_step_it_is():
    # prompt_tokens_per_pass 1 is no prefill: the step of a mixture of experts is priced at the experts a uniform
    # router touches and with the deployment's own chain of collectives, exactly as estimate_step prices it
    dep = km.Deployment("mixtral-8x7b", "h100-sxm", "tp=2,pp=2", link="nvlink4")
    step = dep.step(8, 1000)
    assert E.estimate_pass(dep, step, prompt_tokens_per_pass=1).estimate_s == pytest.approx(
        E.estimate_step(dep, 8, 1000).estimate_s, rel=1e-12)


def test_the_estimated_frontier_by_hand_at_one_batch():
    """One batch of 64, 1,000 in and 200 out, on two H100s (tp=2): its throughput per chip is 64 x 200 / 2 tokens
    over the estimated request's time, the interval's high end over its low time and the low over its high; with a
    TPOT limit equal to its own estimated TPOT, it is admitted (the limit is inclusive)."""
    dep = km.Deployment("llama-3-8b", "h100-sxm", "tp=2", link="nvlink4")
    r = E.estimate_request(dep, 64, 1000, 200)
    f = E.estimate_frontier(dep, 1000, 200, batch=[64], tpot_limit_s=float(r.time_per_output_token.estimate_s))
    assert f.best_batch.tolist() == [64]
    assert f.throughput_per_chip_estimate[0] == pytest.approx(64 * 200 / 2 / r.total.estimate_s, rel=1e-12)
    assert f.throughput_per_chip_estimate_high[0] == pytest.approx(64 * 200 / 2 / r.total.estimate_low_s, rel=1e-12)
    assert f.throughput_per_chip_estimate_low[0] == pytest.approx(64 * 200 / 2 / r.total.estimate_high_s, rel=1e-12)


def test_a_prefill_under_pipeline_stages_adds_each_earlier_stages_weights_and_send():
    """pp=2: the estimated time to first token is the last stage's priced pass, plus the first stage's weights read
    at the fitted bandwidth and its send of the first chunk's activations down the pipeline."""
    from kvmath.requests import _prefill_passes

    dep = km.Deployment("llama-3-70b", "h100-sxm", "tp=4,pp=2", link="nvlink4")
    c, p = E._constants(dep), E.EstimateParameters.fitted()
    step, _, hop_bytes = _prefill_passes(dep, 4.0, 1000, None, False,
                                         {"overhead_s": 0.0, "efficiency": 1.0, "routing": "uniform"})
    per = E._pass_s(step, c, p, E._collectives(c, step, stage=True), E._unpack_s(c, step))
    hop_s = c.dep._comm_measured(None, c.algorithm, hops=hop_bytes)[0]
    by_hand = per + step.weight_read_s / p.memory_efficiency + hop_s
    assert hop_s > 0 and E.estimate_prefill(dep, 4, 1000).estimate_s == pytest.approx(by_hand, rel=1e-12)
    # pp=4: three earlier stages each read their weights
    dep = km.Deployment("llama-3-70b", "h100-sxm", "tp=2,pp=4", link="nvlink4")
    c = E._constants(dep)
    step, _, hop_bytes = _prefill_passes(dep, 4.0, 1000, None, False,
                                         {"overhead_s": 0.0, "efficiency": 1.0, "routing": "uniform"})
    per = E._pass_s(step, c, p, E._collectives(c, step, stage=True), E._unpack_s(c, step))
    hop_s = c.dep._comm_measured(None, c.algorithm, hops=hop_bytes)[0]
    by_hand = per + 3 * step.weight_read_s / p.memory_efficiency + hop_s
    assert E.estimate_prefill(dep, 4, 1000).estimate_s == pytest.approx(by_hand, rel=1e-12)
