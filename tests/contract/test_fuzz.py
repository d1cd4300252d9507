"""Property-based fuzzing of the input contract.

Every public function in ``kvmath.__all__``, the ``Model`` and ``Chip``
constructors (through ``replace``), the preset methods and every CLI
subcommand is called with valid and invalid values of every kind. The
contract: a correct value (finite, >= 0, the same for every numeric type and
for arrays as element by element), or a ``ValueError`` / exit status 2 whose
message names the argument; never a traceback, never inf, NaN or a negative.

To cover a new public function, add a row to ``FUNCTIONS``: its argument
names with their kinds (see ``VALID``). ``test_every_public_name_is_covered``
fails until you do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import importlib
import io
import json
import math
import pathlib

import importlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvmath as km
from kvmath import cli
from kvmath.formats import Format, format_names
from kvmath.layers import LayerSpec
from kvmath.validation import ResultOverflow

settings.register_profile("kvmath", deadline=None, derandomize=True)
settings.load_profile("kvmath")
# 1500 examples a test: about 10 s on an idle 2-core machine, under 30 s on a loaded one (the
# bound is 2 minutes in CI); the hunts that found the bugs here used 3000 and random seeds.
FUZZ = settings(max_examples=1500, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

# ----- kinds of argument -------------------------------------------------------

#: config.json files (paths and dicts) that name their stored precision.
_HF_DATA = pathlib.Path(__file__).parents[1] / "data" / "hf_configs"
_HF_CONFIGS = [str(_HF_DATA / "meta-llama--Llama-3.1-8B" / "config.json"), _HF_DATA / "google--gemma-3-12b-it",
               {"torch_dtype": "float16"}, {"quantization_config": {"quant_method": "mxfp4"}},
               {"torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}]
_real = st.one_of(st.floats(1e-6, 1e18), st.sampled_from([1e-300, 1e300, 1.7e308, 5e-324]))
VALID = {
    "pos": _real,                                                     # > 0, real-valued
    "nonneg": st.one_of(st.just(0.0), _real),                          # >= 0
    "count": st.one_of(st.integers(1, 10**6), st.sampled_from([10**15, 2**31, 2**32 + 1])),  # whole >= 1
    "frac": st.floats(1e-3, 1.0),                                      # (0, 1]
    "optcount": st.one_of(st.none(), st.integers(1, 10**6)),           # a count, or None for "not given"
    "digits": st.integers(0, 15),
    "model": st.sampled_from(km.Model.presets() + ["LLAMA-2-7B", " mixtral-8x7b "]),
    "chip": st.sampled_from(km.Chip.presets() + ["H100-SXM"]),
    "dtype": st.sampled_from(sorted(km.units.DTYPE_BYTES) + ["BF16"]),
    "shard": st.sampled_from(["heads", "batch", "BATCH"]),
    "hfconfig": st.sampled_from(_HF_CONFIGS),
}
#: Refused for every numeric kind.
_NOT_NUMBERS = [
    "32", b"32", True, np.bool_(False), None, float("nan"), float("inf"), -math.inf, 1 + 0j, np.complex64(1),
    np.datetime64("2024-01-01"), datetime.timedelta(seconds=1), datetime.date(2024, 1, 1), np.timedelta64(1, "s"),
    np.ma.masked_array([1.0], mask=[True]), np.array([1, None], dtype=object), ["32"], [1.0, "2"], [1.0, None],
    np.array(["1"]), np.array([True]), [[1.0], [2.0, 3.0]], {"a": 1}, 10**400, [1.0, math.nan], [1.0, True],
]
INVALID = {
    "pos": _NOT_NUMBERS + [0, 0.0, -1, -1e-300, np.int32(-5), np.array([1.0, -1.0])],
    "nonneg": _NOT_NUMBERS + [-1, -1e-300, np.array([0.0, -2.0])],
    "count": _NOT_NUMBERS + [0, -3, 2.5, 1e-300, np.float32(0.5), np.array([1, 0])],
    "frac": _NOT_NUMBERS + [0, 1.5, -0.5, 1.0000001],
    "optcount": [v for v in _NOT_NUMBERS if v is not None] + [0, -3, 2.5],
    "digits": ["2", None, True, -1, 2.5, 16, math.nan],
    "model": [3, None, b"llama-2-7b", "llama2-7b", "", ["llama-2-7b"]],
    "chip": [3, None, b"h100-sxm", "h100", ""],
    "dtype": [2, None, "bf8", "", b"bf16"],
    "shard": ["layers", 3, None, ""],
    "hfconfig": [3, None, b"{}", "", "no/such/config.json", {}, {"torch_dtype": "int3"},
                 {"quantization_config": {"quant_method": "gptq"}}, {"quantization_config": []}],
}
#: How each kind looks when numpy types or arrays carry the same value.
_NUMERIC = {"pos", "nonneg", "count", "frac", "frac0", "int", "chips", "one", "signed", "whole0"}
#: Kinds that are one whole number (an int or numpy int; "one" also takes 4.0), never an array.
_WHOLE = {"int", "chips", "one"}

# Objects and names of the step, memory, links and serving models.
_MODELS = [km.Model.preset(n) for n in km.Model.presets()]
_CHIPS = [km.Chip.preset(n) for n in km.Chip.presets()]
_LINKS = [km.Link.preset(n) for n in km.Link.presets()]
_LAYOUTS = [km.ParallelLayout(), km.ParallelLayout(tp=2), km.ParallelLayout(tp=8), km.ParallelLayout(tp=2, pp=2),
            km.ParallelLayout(dp=2), km.ParallelLayout(cp=2), km.ParallelLayout(tp=4, ep=4)]
_HF_DIR = __import__("pathlib").Path(__file__).parents[1] / "data" / "hf_configs"
_HF_CONFIGS = [json.loads(p.read_text()) for p in sorted(_HF_DIR.rglob("*.json"))]
_WEIGHTS = st.one_of(st.sampled_from(format_names() + ["BF16", "Q4_K"]), st.sampled_from([0.5, 1, 2.0, 0.5625]),
                     st.sampled_from([{"default": "fp8"}, {"default": "int4", "attention": "bf16", "lm_head": "q6_k"},
                                      {"default": 1.0, "experts": "mxfp4"}]))
_COMPUTE = ["bf16", "fp8", "int8", "BF16"]
_obj = [3, None, b"x", {"n_layers": 32}, [1.0]]
VALID.update({
    "int": st.one_of(st.integers(1, 4096), st.sampled_from([2**20, 10**6])),          # whole >= 1, ints only
    # prefill chunks: few enough to evaluate quickly (a million cells take seconds; more are refused by name)
    "chunk": st.one_of(st.none(), st.integers(256, 10**6), st.just(1)),
    "one": st.one_of(st.integers(1, 4096), st.sampled_from([2**20, 10**6])),          # one whole number >= 1 (4.0 too)
    "chips": st.sampled_from([1, 2, 4, 8, 16]),                                        # a small count of chips
    "frac0": st.floats(0.0, 1.0),                                                      # [0, 1]
    "signed": st.one_of(_real, st.just(0.0), _real.map(lambda x: -x)),                 # any finite real
    "optpos": st.one_of(st.none(), _real),
    "whole0": st.one_of(st.just(0), st.integers(1, 10**6)),                            # whole >= 0 (a chunk of tokens)
    "optnonneg": st.one_of(st.none(), st.just(0.0), _real),
    "flag": st.booleans(),
    "modelobj": st.sampled_from(_MODELS),
    "optmodelobj": st.one_of(st.none(), st.sampled_from(_MODELS)),
    "moemodelobj": st.sampled_from([m for m in _MODELS if m.n_experts]),
    "chipobj": st.sampled_from(_CHIPS),
    # functions that also take a preset name (step.as_presets): the objects, drawn as for modelobj and chipobj
    "modelpreset": st.sampled_from(_MODELS),
    "chippreset": st.sampled_from(_CHIPS),
    "chiporbytes": st.one_of(st.sampled_from(_CHIPS), st.floats(1e9, 1e13)),
    "link": st.sampled_from(_LINKS),
    "optlink": st.one_of(st.none(), st.sampled_from(_LINKS)),
    "layout": st.sampled_from(_LAYOUTS),
    "optlayout": st.one_of(st.none(), st.sampled_from(_LAYOUTS)),
    "weights": _WEIGHTS,
    "format": st.sampled_from(format_names() + ["Q4_K"]),
    "kvdtype": st.one_of(st.sampled_from(["bf16", "fp8", "fp16", "FP8"]), st.sampled_from([1, 2.0, 0.5])),
    "compute": st.sampled_from(_COMPUTE),
    "actdtype": st.sampled_from(["bf16", "fp8", "fp16", "FP8"]),
    "optcompute": st.one_of(st.none(), st.sampled_from(_COMPUTE)),
    "routing": st.sampled_from(["floor", "uniform", "ceiling", "UNIFORM"]),
    "budget": st.sampled_from(list(km.memory.BUDGETS) + ["ENGINE"]),
    "engine": st.sampled_from(["v1", "v0", "V1"]),
    "algorithm": st.sampled_from(["best", "ring", "one_shot", "in_switch", "RING"]),
    "linkname": st.sampled_from(km.Link.presets() + ["NVLINK4"]),
    "layouttext": st.sampled_from(["tp=2", "tp=8,pp=2", "tp=2,dp=4", "ep=8,tp=8", "cp=2", "pp=1"]),
    "hfconfig": st.sampled_from(_HF_CONFIGS),
    # a Deployment's layout and links: objects, text and names, or None (one chip; no communication counted)
    "deplayout": st.one_of(st.none(), st.sampled_from(_LAYOUTS), st.sampled_from(["tp=2", "tp=2,pp=2", "tp=2,kv=batch"])),
    "deplink": st.one_of(st.none(), st.sampled_from(_LINKS), st.sampled_from(["nvlink4", "IB-NDR400"])),
    "optactdtype": st.one_of(st.none(), st.sampled_from(["bf16", "fp8", "FP8"])),
    "optmodelpreset": st.one_of(st.none(), st.sampled_from(_MODELS), st.just("llama-3.2-1b")),
    "optvllm": st.sampled_from([None, "vllm", "VLLM"]),
    # the newer keywords (issue 27 item 6): the load model's service times, vLLM's hybrid rules, a power cap
    "times": st.sampled_from(["bound", "estimate", "ESTIMATE"]),
    # request lengths, few enough tokens that the load model prices them quickly; and ones with a decode step
    # (one output token has no time per output token: a documented NaN)
    "length": st.one_of(st.integers(1, 4096), st.sampled_from([2**20, 10**6])),
    "decoded": st.one_of(st.integers(2, 4096), st.sampled_from([2**20, 10**6])),
    "mambamode": st.sampled_from(["none", "align", "all", "ALIGN"]),
    "optmambamode": st.sampled_from([None, "none", "align", "all", "All"]),
    "tokensrule": st.sampled_from(["blocks", "concurrency", "CONCURRENCY"]),
    "opttokensrule": st.sampled_from([None, "blocks", "concurrency", "Blocks"]),
    "vllmdtype": st.sampled_from(["auto", "bf16", "fp16", "fp32", "AUTO"]),
    "optflag": st.sampled_from([None, True, False]),
    "optone": st.one_of(st.none(), st.sampled_from([1, 8, 16, 64, 128])),
    "optchipobj": st.one_of(st.none(), st.sampled_from(_CHIPS)),
    "modeltype": st.sampled_from(sorted(km.hf_config._FAMILY) + ["llama4", "gemma3", "RefinedWebModel"]),
    # watts per chip, up to the H100's 700 W board power (a cap above it does not bind and is refused by name)
    "powercap": st.one_of(st.none(), st.floats(1e-3, 700.0), st.just(700)),
})
_NUMBERS_NOT_NONE = [v for v in _NOT_NUMBERS if v is not None]
INVALID.update({
    "int": _NOT_NUMBERS + [0, -3, 2.5, 4.0, np.float64(2)],
    "whole0": _NOT_NUMBERS + [-1, 2.5, -1e-300, np.array([1, -1])],
    "one": _NOT_NUMBERS + [0, -3, 2.5, np.array([1, 2]), [4, 8]],
    "chunk": [v for v in _NOT_NUMBERS if v is not None] + [0, -3, 2.5],
    "chips": _NOT_NUMBERS + [0, -3, 2.5],
    "frac0": _NOT_NUMBERS + [-0.5, 1.5, -1e-300],
    "signed": _NOT_NUMBERS,
    "optpos": _NUMBERS_NOT_NONE + [0, -1],
    "optnonneg": _NUMBERS_NOT_NONE + [-1],
    "flag": ["true", 1, 0, None, "False", math.nan],
    "modelobj": _obj + ["llama-2-7b", _CHIPS[0]],
    "optmodelobj": [v for v in _obj if v is not None] + ["llama-2-7b", _CHIPS[0]],
    "moemodelobj": _obj + ["deepseek-v3", _CHIPS[0], km.Model.preset("llama-2-7b")],  # a dense model has no experts
    "chipobj": _obj + ["h100-sxm", _MODELS[0]],
    "modelpreset": _obj + ["llama2-7b", _CHIPS[0]],  # a preset name is accepted; an unknown one is not
    "chippreset": _obj + [_MODELS[0]],  # an unknown chip name is refused as "unknown hardware", not by argument
    "chiporbytes": _NOT_NUMBERS + [0, -1, "h100-sxm", _MODELS[0]],
    "link": _obj + ["nvlink9", _MODELS[0]],  # a preset name is accepted (as_link); a wrong one is not
    "optlink": [v for v in _obj if v is not None] + ["nvlink9", _MODELS[0]],
    "layout": _obj + ["tp=2", (2, 1, 1, 1, 1)],
    "optlayout": [v for v in _obj if v is not None] + ["tp=2", (2, 1, 1, 1, 1)],
    "weights": ["bf8", "", 0, -1, math.nan, math.inf, None, True, b"bf16", {}, {"default": "bf8"}, {"attn": "fp8"},
                {"attention": "fp8"}, ["bf16"], {"default": None}, {"default": -2}],
    "format": [3, None, "bf8", "", b"bf16", ["bf16"]],
    "kvdtype": [None, "bf8", "", 0, -1, math.nan, True, b"bf16", ["bf16"]],
    "compute": [None, "bf8", "", 3, b"bf16", "int4", "fp32"],
    "actdtype": [None, "bf8", "", 2, 0.5, b"bf16", ["bf16"]],
    "optcompute": ["bf8", "", 3, b"bf16", "int4", "fp32"],
    "routing": ["random", "", 3, None, b"floor"],
    "budget": ["devices", "", 3, None],
    "engine": ["v2", "", 1, None, b"v1"],
    "algorithm": ["butterfly", "", 3, None],
    "linkname": ["nvlink", "", 3, None, b"nvlink4"],
    "layouttext": ["tp=0", "tp=2.5", "tp", "xx=2", "tp=-1", "tp=2,tp=4", 3, None, "", "tp=1e3", ],
    "hfconfig": [3, None, {}, {"model_type": "llama"}, [], "", b"{}"],
    "deplayout": [3, b"x", {"n_layers": 32}, [1.0], (2, 1, 1, 1, 1), "tp=0", "xx=2", "tp=2.5", ""],
    "deplink": [3, b"x", {"n_layers": 32}, [1.0], "nvlink9", "", _MODELS[0]],
    "optactdtype": ["bf8", "", 2, 0.5, b"bf16", ["bf16"]],
    "optmodelpreset": [3, b"x", {"n_layers": 32}, [1.0], "llama2-7b", _CHIPS[0]],
    "optvllm": ["sglang", "", 3, b"vllm"],
    # outside the choices (a near miss, an internal value, another engine's word), not a string, NaN, a bool
    "length": INVALID["count"],
    "decoded": INVALID["count"],
    "times": ["bounds", "", "estimate_low", "measured", 3, None, True, math.nan, "1", b"bound", ["bound"]],
    "mambamode": ["aligned", "", "prefix", "auto", 1, None, True, math.nan, "0", b"align", ["all"]],
    "optmambamode": ["aligned", "", "auto", 1, True, math.nan, "0", b"align", ["all"]],
    "tokensrule": ["tokens", "", "block", "concurrent", 2, None, True, math.nan, "1", b"blocks", ["blocks"]],
    "opttokensrule": ["tokens", "", "block", 2, True, math.nan, "1", b"blocks"],
    "vllmdtype": ["float32", "fp8", "", 2, None, True, math.nan, b"auto", ["bf16"]],
    "optflag": ["true", 1, 0, "False", math.nan],
    "optone": [v for v in _NOT_NUMBERS if v is not None] + [0, -3, 2.5, np.array([1, 2])],
    "optchipobj": [3, b"x", {"n_layers": 32}, [1.0], "h100-sxm", _MODELS[0]],
    "modeltype": ["qwen3_5", "gemma4", "", 3, None, b"llama", ["llama"]],
    "powercap": _NUMBERS_NOT_NONE + [0, 0.0, -1, -700.0, -1e-300, np.array([300.0, -1.0]), 701, 1e6],
})

# ----- the table of public functions --------------------------------------------

F = "fmt"
#: The closed forms of kvmath.formulas, by their names there (arguments and kinds as before the spine).
_FORMULAS = {
    "arithmetic_intensity": dict(flops="pos", bytes_moved="pos"),
    "attention_flops_per_step": dict(batch="pos", context="pos", n_layers="count", n_heads="count", head_dim="count"),
    "binds": dict(memory_s="nonneg", compute_s="nonneg", comm_s="nonneg"),
    "compute_ceiling_steps_per_s": dict(flops_per_step="pos", flops="pos"),
    "critical_batch": dict(flops="pos", bandwidth="pos", bytes_per_param="pos"),
    "roofline_regime": dict(intensity="nonneg", ridge="pos", margin="frac"),
    "critical_batch_beta_alpha": dict(bf16_flops="pos", bandwidth="pos", bytes_per_param="pos", bytes_per_activation="pos"),
    "fit": dict(param_count="pos", bytes_per_param="pos", kv_bytes_per_token="pos", context="count", hbm_bytes="pos",
                n_chips="optcount"),
    "kv_budget_bytes": dict(n_chips="count", hbm_bytes="pos", weight_bytes="pos", usable_fraction="frac"),
    "kv_bytes_per_chip": dict(kv_cache_bytes="nonneg", n_chips="count", n_kv_heads="count", batch="count", shard="shard"),
    "kv_bytes_per_seq": dict(kv_bytes_per_token="pos", context="count"),
    "kv_bytes_per_token": dict(n_layers="count", n_kv_heads="count", head_dim="count", bytes_per_elem="pos"),
    "kv_cache_bytes": dict(kv_bytes_per_token="pos", context="count", batch="count"),
    "max_batch": dict(kv_budget_bytes="nonneg", kv_bytes_per_seq="pos"),
    "max_kv_tokens": dict(kv_budget_bytes="nonneg", kv_bytes_per_token="pos"),
    "max_batch_paged": dict(lengths="count", page="one", kv_budget_bytes="nonneg", kv_bytes_per_token="pos"),
    "min_chips_for_weights": dict(weight_bytes="pos", hbm_bytes="pos", usable_fraction="frac"),
    "min_step": dict(batch="pos", kv_bytes_per_seq="nonneg", param_bytes="pos", matmul_params="pos", bandwidth="pos", flops="pos"),
    "min_step_simple": dict(batch="pos", kv_bytes_per_seq="nonneg", param_bytes="pos", bandwidth="pos"),
    "roofline_regime": dict(intensity="nonneg", ridge="pos", margin="frac0"),
    "prefill_flops": dict(prompt_len="count", matmul_params="pos", n_layers="count", n_heads="count", head_dim="count", batch="count"),
    "prefill_time": dict(flops_needed="nonneg", flops="pos", param_bytes="pos", kv_bytes_written="nonneg", bandwidth="pos"),
    "step_breakdown": dict(batch="pos", kv_bytes_per_seq="nonneg", param_bytes="pos", matmul_params="pos", bandwidth="pos", flops="pos"),
    "strict_step": dict(batch="pos", kv_bytes_per_seq="nonneg", param_bytes="pos", matmul_params="pos", bandwidth="pos",
                        flops="pos", attention_flops_per_seq="nonneg"),
    "tokens_per_s": dict(seconds_per_step="pos", batch="pos"),
    "tokens_per_s_per_seq": dict(seconds_per_step="pos"),
    "weight_bytes": dict(param_count="pos", bytes_per_param="pos"),
    "weight_flops_per_step": dict(batch="pos", matmul_params="pos"),
    "expected_tokens_per_step": dict(acceptance="frac0", gamma="count"),
    "experts_touched": dict(n_experts="count", top_k="count", tokens="pos", routing="routing"),
    "tokens_for_share": dict(n_experts="count", top_k="count", share="frac"),
    "saturated_critical_batch": dict(total_params="pos", active_params="pos", flops="pos", bandwidth="pos",
                                     bytes_per_param="pos"),
    "speculative_improvement_factor": dict(acceptance="frac0", gamma="count", cost_ratio="nonneg"),
    "cost_per_million_tokens": dict(price_per_chip_hour="nonneg", tokens_per_s_per_chip="pos"),
    "all_to_all_time": dict(bytes_per_chip="nonneg", n_chips="count", link="link"),
    "allreduce_estimate": dict(message_bytes="nonneg", n_chips="count", link="link"),
    "allreduce_time": dict(message_bytes="nonneg", n_chips="count", link="link", algorithm="algorithm"),
    "p2p_time": dict(message_bytes="nonneg", link="link"),
    "ring_allreduce_bytes": dict(message_bytes="nonneg", n_chips="count"),
}
#: What every question of a Deployment is asked of: the constructor's arguments (formats as Formats' fields).
#: The old functions' model, chip, layout, link, weights, kv_dtype, compute_dtype and activation_dtype reach it here.
_DEPLOYMENT = dict(model="modelpreset", chip="chippreset", layout="deplayout", link="deplink", weights="weights",
                   kv="kvdtype", compute="optcompute", activations="actdtype")
#: The links over nodes and expert parallelism's dispatch format (the old expert_parallel_comm_s's node_link,
#: chips_per_node and dispatch bytes), on the constructor and the step.
_NODES = dict(node_link="deplink", chips_per_node="optcount", dispatch="optactdtype")
FUNCTIONS = {
    **{f"formulas.{name}": args for name, args in _FORMULAS.items()},
    "units.dtype_bytes": dict(dtype="dtype"),
    "formatting.fmt_bandwidth": dict(bytes_per_s="nonneg", digits="digits"),
    "formatting.fmt_bytes": dict(n_bytes="nonneg", digits="digits"),
    "formatting.fmt_count": dict(count="nonneg", digits="digits"),
    "formatting.fmt_flop_rate": dict(flops_per_s="nonneg", digits="digits"),
    "formatting.fmt_flops": dict(flops="nonneg", digits="digits"),
    "formatting.fmt_seconds": dict(seconds="nonneg", digits="digits"),
    "formatting.fmt_number": dict(value="signed"),  # table cells may be negative (a difference)
    "hf_config.weights_from_hf_config": dict(config="hfconfig"),
    "hf_config.model_from_hf_config": dict(config="hfconfig"),
    # presets, and preset methods bound to a preset with sliding windows, one with MLA, and a chip
    "Model.preset": dict(name="model"),
    "Chip.preset": dict(name="chip"),
    "Link.preset": dict(name="linkname"),
    "formats.get_format": dict(name="format"),
    "Model.kv_bytes_per_token@mistral": dict(bytes_per_elem="pos", context="optcount"),
    "Model.kv_bytes_per_seq@gemma": dict(context="count", bytes_per_elem="pos"),
    "Model.kv_bytes_per_token@deepseek": dict(bytes_per_elem="pos"),
    "Model.with_kv_heads@llama": dict(n_kv_heads="count"),
    "Chip.flops@h100": dict(dtype="dtype"),
    # the deployment and every question asked of it (the old decode_step, compute_rate, chip_step, step_time,
    # layout_step_time, tensor_parallel_step and the comm functions are Deployment + step; the rest by name)
    "Deployment": dict(**_DEPLOYMENT, **_NODES),
    "Deployment.step": dict(**_DEPLOYMENT, **_NODES, batch="pos", context="pos", tokens_per_seq="pos",
                            routing="routing", efficiency="frac", overhead_s="nonneg"),
    "Deployment.strict_s": dict(**_DEPLOYMENT, batch="pos", context="pos", tokens_per_seq="pos"),
    "Deployment.prefill": dict(**_DEPLOYMENT, batch="pos", input_tokens="count"),
    "Deployment.request": dict(**_DEPLOYMENT, batch="count", input_tokens="count", output_tokens="count",
                               chunk_tokens="chunk", price_per_chip_hour="optpos", efficiency="frac",
                               overhead_s="nonneg", last_mlp_logits_only="flag", routing="routing"),
    "Deployment.mixed_step": dict(**_DEPLOYMENT, batch="pos", context="count", chunk_tokens="whole0",
                                  chunk_start="whole0", overhead_s="nonneg", routing="routing"),
    "Deployment.steady_state": dict(**_DEPLOYMENT, batch="pos", input_tokens="count", output_tokens="count",
                                    price_per_chip_hour="optpos", overhead_s="nonneg", routing="routing"),
    "Deployment.frontier": dict(**_DEPLOYMENT, input_tokens="count", output_tokens="count", batch="optcount",
                                tpot_limit_s="optpos", chunk_tokens="chunk", budget="budget", hbm_bytes="optpos",
                                price_per_chip_hour="optpos", routing="routing"),
    "Deployment.capacity": dict(**_DEPLOYMENT, context="pos", budget="budget", hbm_bytes="optpos",
                                engine="optvllm", mamba_cache_mode="optmambamode", tokens_rule="opttokensrule"),
    "Deployment.fewest_chips": dict(**_DEPLOYMENT, budget="budget", hbm_bytes="optpos", engine="optvllm"),
    "Deployment.critical_batch": dict(**_DEPLOYMENT, routing="routing"),
    "Deployment.speculate": dict(**_DEPLOYMENT, batch="pos", context="pos", gamma="one", acceptance="frac0",
                                 draft="optmodelpreset", routing="routing"),
    "Deployment.replace@tp2": dict(model="modelpreset", chip="chippreset", layout="deplayout", link="deplink",
                                   chips_per_node="optcount"),
    # memory and the vLLM engine budget
    "memory.memory_budget": dict(chip="chiporbytes", budget="budget", gpu_memory_utilization="frac",
                                 non_torch_bytes="nonneg"),
    "memory.runtime_total_bytes": dict(chip="chiporbytes"),
    "memory.vllm_activation_peak_bytes": dict(model="modelobj", max_num_batched_tokens="count", max_num_seqs="count",
                                              act_bytes="pos", tensor_parallel="one"),
    "memory.vllm_available_kv_bytes": dict(total_bytes="pos", weight_bytes="nonneg", activation_peak_bytes="nonneg",
                                           non_torch_bytes="nonneg", gpu_memory_utilization="frac"),
    "memory.vllm_engine": dict(model="modelobj", chip="chiporbytes", max_model_len="count", gpu_memory_utilization="frac",
                               block_size="optone", weights="weights", kv_dtype="kvdtype", tensor_parallel="one",
                               max_num_batched_tokens="optcount", max_num_seqs="optcount", weight_bytes="optnonneg",
                               activation_peak_bytes="optnonneg", non_torch_bytes="nonneg", hybrid="optflag",
                               engine="engine", mamba_cache_mode="mambamode", tokens_rule="tokensrule",
                               dtype="vllmdtype", mamba_ssm_cache_dtype="vllmdtype"),
    "memory.vllm_kv_cache": dict(model="modelobj", available_kv_bytes="nonneg", max_model_len="count",
                                 block_size="optone", kv_dtype="kvdtype", tensor_parallel="one", layers="optcount",
                                 max_num_batched_tokens="optcount", hybrid="optflag", engine="engine",
                                 mamba_cache_mode="mambamode", tokens_rule="tokensrule", dtype="vllmdtype",
                                 mamba_ssm_cache_dtype="vllmdtype", chip="optchipobj"),
    "memory.vllm_kv_groups": dict(model="modelobj", hybrid="optflag"),
    "memory.vllm_block_size": dict(model="modelobj", chip="optchipobj", block_size="optone"),
    "memory.vllm_model_dtype": dict(stored="format", dtype="vllmdtype"),
    "hf_config.reads": dict(model_type="modeltype"),
    "memory.vllm_max_num_batched_tokens": dict(max_model_len="count", engine="engine", large_gpu="flag"),
    "memory.vllm_page_bytes": dict(model="modelobj", block_size="optone", kv_dtype="kvdtype", tensor_parallel="one"),
    "memory.vllm_request_kv_bytes": dict(model="modelobj", tokens="count", kv_dtype="kvdtype", block_size="one",
                                         tensor_parallel="one", max_num_batched_tokens="optcount", hybrid="flag",
                                         mamba_cache_mode="mambamode"),
    # load, sizing and energy, through the keywords added since the first contract (issue 27 item 6): a Deployment
    # bound (Llama 3 8B on one H100, 700 W board power), the rest drawn; lengths kept to "int" (the load model
    # prices every length drawn) and the simulation to 100 requests a replica (each call a fraction of a second)
    "load.serving_load@llama": dict(arrival_rate="pos", input_tokens="length", output_tokens="length", times="times"),
    "load.simulate@llama": dict(arrival_rate="pos", input_tokens="length", output_tokens="decoded", times="times"),
    "sizing.size@llama": dict(max_chips="chips", ttft_target_s="pos", tpot_target_s="pos", input_tokens="length",
                              output_tokens="length", arrival_rate="pos", times="times"),
    "energy.energy_per_token@llama": dict(batch="pos", context="pos", pj_per_bit="pos", pj_per_flop="nonneg",
                                          power_cap_w="powercap"),
    # layouts and links (n_chips and shard of the old functions reach ParallelLayout's tp and kv_split)
    "layout.parse_layout": dict(text="layouttext"),
    "ParallelLayout": dict(tp="chips", cp="chips", dp="chips", pp="chips", ep="chips", kv_split="shard"),
    "ParallelLayout.check@tp2": dict(model="modelobj"),
    "Link.replace@nvlink4": dict(bandwidth="pos", latency_s="nonneg", stated_bandwidth="nonneg",
                                 measured_allreduce_latency_s="optpos", in_switch_reduction="flag",
                                 latency_is_assumption="flag"),
    # whole requests
    "requests.prefill_attention_flops": dict(model="modelobj", input_tokens="count"),
    # layers
    "LayerSpec@sliding": dict(n_heads="count", n_kv_heads="count", head_dim="count", window="count"),
    "LayerSpec@SLIDING": dict(n_heads="count", n_kv_heads="count", head_dim="count", window="count"),
    "LayerSpec@linear": dict(state_bytes="nonneg", state_flops="nonneg", params="nonneg"),
    "LayerSpec.tokens_held@sliding": dict(context="nonneg"),
    # preset methods of the step model and config loading
    "Model.from_hf_config": dict(config="hfconfig"),
    "Model.weight_bytes_read@mixtral": dict(batch="pos", weights="weights", routing="routing", tokens_per_seq="pos"),
    "Model.weight_bytes_read@deepseek": dict(batch="pos", weights="weights", routing="routing", tokens_per_seq="pos"),
    "Model.weight_bytes_read_by_group@qwen3moe": dict(batch="pos", weights="weights", routing="routing",
                                                       tokens_per_seq="pos"),
    "Model.weight_bytes_resident@gptoss": dict(weights="weights"),
    "Model.weight_bytes_resident_by_group@llama": dict(weights="weights"),
    "Model.attention_flops_per_token@gemma3": dict(context="pos"),
    "Model.attention_flops_per_token@deepseek": dict(context="pos"),
    "Model.kv_bytes_by_kind@gemma3": dict(context="count", bytes_per_elem="pos"),
    "Chip.flops_for_format@h100": dict(weights="format"),
    "Chip.ridge_point@b200": dict(dtype="compute"),
}
#: The functions' own domain errors: a valid value of each argument, in a combination that has no answer.
_LAYOUT_ERRORS = ("must divide the", "must not exceed the", "needs a mixture-of-experts", "must equal tp * cp * dp")
DOMAIN_ERRORS = {
    "formulas.kv_budget_bytes": ("weight_bytes exceed",),
    "formulas.roofline_regime": ("margin must be below 1",),  # a margin of 1 or more leaves no memory-bound side
    "formulas.fit": ("cannot hold the", "weight_bytes exceed the memory", "overflow a whole number"),  # documented
    "Model.with_kv_heads@llama": ("divisible by n_kv_heads",),
    "Chip.flops@h100": ("compute_dtype",),  # fp32, int4 are storage formats, not compute rates
    "LayerSpec@sliding": ("must be divisible by",),
    "LayerSpec@SLIDING": ("must be divisible by",),
    "formulas.allreduce_estimate": ("has no measured all-reduce latency",),
    "formulas.allreduce_time": ("has no in-switch reduction",),
    "memory.runtime_total_bytes": ("has no device_bytes",),
    "memory.memory_budget": ("has no device_bytes", "has no runtime_bytes", "exceeds the free memory",
                             "must be below the runtime total", "leaves nothing for the weights"),
    "memory.vllm_available_kv_bytes": ("no memory left for the KV cache",),
    "memory.vllm_kv_cache": ("layers (a pipeline stage's share)", "exceeds the model's", "must divide",
                             "which kvmath does not size as vLLM does"),
    # DeepSeek-V3.2's 'dsa' and KV-shared layers: vLLM's paging of them is not modelled, and said so by name
    "memory.vllm_kv_groups": ("which kvmath does not size as vLLM does",),
    "memory.vllm_request_kv_bytes": ("must divide", "which kvmath does not size as vLLM does"),
    "hf_config.weights_from_hf_config": ("is not one kvmath reads",),
    "memory.vllm_engine": ("has no device_bytes", "has no runtime_bytes", "exceeds the free memory", "no memory left",
                           "must divide", "layers (a pipeline stage's share)", "which kvmath does not size as vLLM does"),
    "ParallelLayout.check@tp2": _LAYOUT_ERRORS,
    "formulas.experts_touched": ("must not exceed n_experts",),
    "formulas.roofline_regime": ("margin must be below 1",),   # a margin of 1 leaves no memory-bound side
    # one list of sequence lengths, admitted in order: a lone number is not one
    "formulas.max_batch_paged": ("lengths must be a list of sequence lengths",),
    # the uniform estimate's inverse exists only between one token's share (k/E) and 1, for k < E
    "formulas.tokens_for_share": ("must be below n_experts", "share must be below 1", "must be at least top_k"),
}
# Refusals of the memory and vLLM code for valid-looking inputs: a chip with no reported total, and
# the configurations vLLM itself refuses to start (block sizes, tensor parallel sizes, no room).
_VLLM_REFUSES = ("has no reported total", "no runtime total", "block_size must be one of", "does not divide the",
                 "neither divides", "vLLM refuses", "fewer than one", "no KV cache blocks", "0 blocks",
                 "cannot hold", "too large to count", "exceeds the model's",
                 "kvmath sizes them for V1 only",  # DSA, linear or shared-KV layers under V0, which never paged them
                 # DeepSeek-V3.2 on a chip without vLLM's sparse MLA backend (compute capability 8.x, 12.x), and on
                 # a chip whose vLLM DSA block kvmath does not know (TPU, Apple, Trainium)
                 "vLLM cannot serve", "which kvmath does not size as vLLM does")
for _name in ("memory.memory_budget", "memory.runtime_total_bytes", "memory.vllm_engine", "memory.vllm_kv_cache",
              "memory.vllm_available_kv_bytes", "memory.vllm_kv_groups", "memory.vllm_page_bytes",
              "memory.vllm_request_kv_bytes", "memory.vllm_block_size",
              "memory.vllm_max_num_batched_tokens", "memory.vllm_activation_peak_bytes", "formulas.kv_budget_bytes",
              "formulas.min_chips_for_weights", "Deployment.frontier", "Deployment.request", "Deployment.capacity",
              "Deployment.fewest_chips"):
    DOMAIN_ERRORS[_name] = DOMAIN_ERRORS.get(_name, ()) + _VLLM_REFUSES
_CHUNKS = ("too many to evaluate",)
_NO_RATE = ("has no bf16 rate", "has no fp8 rate", "has no int8 rate")
# Every question is asked of a Deployment built from independently drawn parts: a layout the model does not
# split, a chip with no rate for the weights' format, a link with no in-switch reduction refuse by name
for _name in [n for n in FUNCTIONS if n.startswith("Deployment")]:
    DOMAIN_ERRORS[_name] = DOMAIN_ERRORS.get(_name, ()) + _NO_RATE + _LAYOUT_ERRORS + _CHUNKS + (
        "is not modelled with a layout", "must be 1 or the layout's", "has no in-switch", "weight_bytes exceed",
        "does not divide the", "mixes formats of different compute rates",
        "is modelled for dense models only")  # llama.cpp's last-MLP rule: documented for dense models
for _name in ("Deployment.mixed_step", "Deployment.steady_state"):
    DOMAIN_ERRORS[_name] += ("output_tokens must be at least 2",)
DOMAIN_ERRORS["Deployment.critical_batch"] += ("never catches up",)
for _name in ("Deployment.capacity", "Deployment.fewest_chips"):
    DOMAIN_ERRORS[_name] += ("the weights do not fit", "no tensor-parallel size from", "cannot hold", "has no device_bytes",
                             "has no runtime_bytes", "must exceed the driver's reserve",
                             "is sized for tensor parallelism only",  # vLLM's sizing: documented, tp layouts only
                             "context must be a whole number",  # and whole tokens
                             "no memory left for the KV cache")  # vLLM's profile leaves none: documented
DOMAIN_ERRORS["Deployment.frontier"] += ("must exceed the driver's reserve",)
# vLLM's options without engine="vllm" would size nothing: a combination refused by name
DOMAIN_ERRORS["Deployment.capacity"] += ("applies with engine='vllm' only",)
# the simulation's absolute clocks cannot resolve a prefill over the span of a vanishing rate's arrivals
DOMAIN_ERRORS["load.simulate@llama"] = ("is too low to simulate",)
# a cap below the board power slows the clocks; above it, it does not bind (documented)
DOMAIN_ERRORS["energy.energy_per_token@llama"] = ("must be at most",)
_BOUND = {
    "Model.kv_bytes_per_token@mistral": lambda: km.Model.preset("mistral-7b-v0.1").kv_bytes_per_token,
    "Model.kv_bytes_per_seq@gemma": lambda: km.Model.preset("gemma-2-9b").kv_bytes_per_seq,
    "Model.kv_bytes_per_token@deepseek": lambda: km.Model.preset("deepseek-v3").kv_bytes_per_token,
    "Model.with_kv_heads@llama": lambda: km.Model.preset("llama-2-7b").with_kv_heads,
    "Chip.flops@h100": lambda: km.Chip.preset("h100-sxm").flops,
    "ParallelLayout.check@tp2": lambda: km.ParallelLayout(tp=2).check,
    "Link.replace@nvlink4": lambda: km.Link.preset("nvlink4").replace,
    "LayerSpec@sliding": lambda: functools.partial(LayerSpec, "sliding"),
    "LayerSpec@SLIDING": lambda: functools.partial(LayerSpec, "SLIDING"),  # stored as "sliding"
    "LayerSpec@linear": lambda: functools.partial(LayerSpec, "linear"),
    "LayerSpec.tokens_held@sliding": lambda: LayerSpec("sliding", 16, 8, 256, window=4096).tokens_held,
    "Model.from_hf_config": lambda: km.Model.from_hf_config,
    "Model.weight_bytes_read@mixtral": lambda: km.Model.preset("mixtral-8x7b").weight_bytes_read,
    "Model.weight_bytes_read@deepseek": lambda: km.Model.preset("deepseek-v3").weight_bytes_read,
    "Model.weight_bytes_read_by_group@qwen3moe": lambda: km.Model.preset("qwen3-30b-a3b").weight_bytes_read_by_group,
    "Model.weight_bytes_resident@gptoss": lambda: km.Model.preset("gpt-oss-20b").weight_bytes_resident,
    "Model.weight_bytes_resident_by_group@llama": lambda: km.Model.preset("llama-3-8b").weight_bytes_resident_by_group,
    "Model.attention_flops_per_token@gemma3": lambda: km.Model.preset("gemma-3-12b").attention_flops_per_token,
    "Model.attention_flops_per_token@deepseek": lambda: km.Model.preset("deepseek-v3").attention_flops_per_token,
    "Model.kv_bytes_by_kind@gemma3": lambda: km.Model.preset("gemma-3-12b").kv_bytes_by_kind,
    "Chip.flops_for_format@h100": lambda: km.Chip.preset("h100-sxm").flops_for_format,
    "Chip.ridge_point@b200": lambda: km.Chip.preset("b200").ridge_point,
    "Deployment.replace@tp2": lambda: km.Deployment("llama-3-8b", "h100-sxm", "tp=2").replace,
    "load.serving_load@llama": lambda: functools.partial(importlib.import_module("kvmath.load").serving_load,
                                                         km.Deployment("llama-3-8b", "h100-sxm")),
    "load.simulate@llama": lambda: functools.partial(importlib.import_module("kvmath.load").simulate,
                                                     km.Deployment("llama-3-8b", "h100-sxm"), n_requests=100),
    "sizing.size@llama": lambda: functools.partial(importlib.import_module("kvmath.sizing").size, "llama-3-8b",
                                                   "h100-sxm"),
    "energy.energy_per_token@llama": lambda: functools.partial(
        importlib.import_module("kvmath.energy").energy_per_token, km.Deployment("llama-3-8b", "h100-sxm")),
}
#: Public names that are not functions of numbers: constants, classes and listings, each with where it is checked.
NOT_IN_TABLE = {
    # constants and result records (their numbers are checked in the results of the functions that build them)
    "units.DTYPE_BYTES", "units.GB", "units.GiB", "units.KB", "units.KiB", "units.MB", "units.MiB", "units.TB",
    "units.TiB", "formulas.RESOURCES", "formulas.NEAR_RIDGE", "formulas.REGIMES", "formulas.StepBreakdown", "formulas.Fit", "memory.BUDGETS",
    "memory.EngineBudget", "Capacity", "Frontier", "Request", "Step", "ResultOverflow",
    # records built from data: fuzzed through their constructors below (Model, Chip) or above (replace, check)
    "Model", "Chip", "Link",
    # a record of format names, checked where a Deployment is built (weights, kv, compute, activations, dispatch)
    "Formats",
    # a function of text, not of numbers (tests/book/test_tables.py checks it)
    "formatting.group_digits",
    # functions of the rows of measurements.csv, not of numbers (tests/unit/test_calibration.py checks them)
    "calibration.Calibration", "calibration.Measurement", "calibration.bound_for", "calibration.calibrate",
    "calibration.get_measurement", "calibration.load_measurements", "calibration.Check", "calibration.check",
    "calibration.user_measurement",
    # timing this machine: seconds of work per call (tests/unit/test_measure.py checks them)
    *(f"measure.{name}" for name in km.measure.__all__),
}
#: The submodules whose public functions the table covers (kvmath.__all__'s), and the questions of a Deployment.
_SUBMODULES = ("formulas", "memory", "calibration", "hf_config", "units", "formatting", "measure")
DEPLOYMENT_METHODS = ("step", "strict_s", "prefill", "request", "mixed_step", "steady_state", "frontier", "capacity",
                      "fewest_chips", "critical_batch", "speculate", "replace")


def _public_surface() -> set[str]:
    """Every name the table must cover: kvmath.__all__'s classes, each submodule's public names, the methods."""
    import inspect

    names = {n for n in km.__all__ if n not in _SUBMODULES}
    for mod in _SUBMODULES:
        module = getattr(km, mod)
        listed = getattr(module, "__all__", None)
        if listed is None:  # no __all__: the functions and classes the module itself defines (constants are data)
            listed = [n for n, v in vars(module).items() if not n.startswith("_")
                      and (inspect.isfunction(v) or inspect.isclass(v)) and v.__module__ == module.__name__]
        names |= {f"{mod}.{n}" for n in listed}
    names |= {f"Deployment.{m}" for m in DEPLOYMENT_METHODS}
    return names


def _asked(method: str):
    """A Deployment built from the constructor's arguments, asked ``method`` with the rest."""
    def call(model, chip, layout=None, link=None, weights="bf16", kv="bf16", compute=None, activations="bf16",
             dispatch=None, node_link=_DEFAULT, chips_per_node=None, **question):
        nodes = {} if node_link is _DEFAULT else {"node_link": node_link}
        dep = km.Deployment(model, chip, layout, link=link, chips_per_node=chips_per_node, **nodes,
                            formats=km.Formats(weights=weights, kv=kv, compute=compute, activations=activations,
                                               dispatch=dispatch))
        return dep if method is None else getattr(dep, method)(**question)
    return call


_DEFAULT = object()


def _function(name):
    if name in _BOUND:
        return _BOUND[name]()
    if name == "Deployment" or name.startswith("Deployment."):
        return _asked(name.partition(".")[2] or None)
    if "." in name:  # a submodule's function, or a class's (presets)
        owner, _, attr = name.partition(".")
        if owner[0].islower():   # a submodule: imported by name (kvmath imports its submodules lazily)
            return getattr(importlib.import_module(f"kvmath.{owner}"), attr)
        return getattr(getattr(km, owner), attr)
    return getattr(km, name)


def test_every_public_name_is_covered():
    covered = {n.partition("@")[0] for n in FUNCTIONS} | NOT_IN_TABLE
    missing = _public_surface() - covered
    assert not missing, f"add these to FUNCTIONS in tests/contract/test_fuzz.py: {sorted(missing)}"
    assert km.Chip.presets() and km.Model.presets()
    # the old functions' arguments all reach an entry point: each Deployment question takes the constructor's
    for name, args in FUNCTIONS.items():
        if name.startswith("Deployment") and "@" not in name:
            assert set(_DEPLOYMENT) <= set(args), name


#: Inputs that come back in results (a DecodeStep's layout, a ChipStep's): not numbers to check.
_INPUT_RECORDS = (km.Model, km.Chip, km.Link, km.ParallelLayout, Format, km.Formats)


def _numbers(result) -> list:
    """Every number in a result: record fields and public properties, dict values, tuple items, LayerSpec sizes."""
    if isinstance(result, (str, bytes, bool, np.bool_, _INPUT_RECORDS)) or result is None:
        return []
    if isinstance(result, km.Frontier):  # NaN marks a batch that does not fit (or meet the limit): check the rest
        found = np.asarray(result.best_batch) > 0
        return [*_numbers(result.requests), result.max_batch, result.best_batch,
                np.where(result.fits, result.throughput_per_chip, 0.0), np.where(found, result.best_throughput_per_chip, 0.0)]
    if isinstance(result, km.Request):  # documented: NaN (undefined) per-token figures for one output token
        decoding = np.broadcast_to(np.asarray(result.output_tokens) > 1, np.shape(result.tokens_per_s_per_user))
        rest = [k for k in ("ttft_s", "decode_s", "decode_no_overlap_s", "price_per_chip_hour", "total_s",
                            "output_tokens_per_s", "output_tokens_per_s_per_chip", "cost_per_million_tokens")]
        return [n for k in rest for n in _numbers(getattr(result, k))] + [
            np.where(decoding, result.tokens_per_s_per_user, 0.0),
            np.where(decoding, result.time_per_output_token_s, 0.0)]
    if isinstance(result, importlib.import_module("kvmath.sizing").Sizing):
        # documented: NaN (JSON null) times and utilisation where no layout meets the pair; check the rest
        feasible = np.asarray(result.feasible)
        rest = ("arrival_rate", "ttft_target_s", "tpot_target_s", "percentile", "n_chips", "goodput_rps",
                "goodput_tokens_per_s_per_chip")
        return [n for k in rest for n in _numbers(getattr(result, k))] + [
            np.where(feasible, getattr(result, k), 0.0) for k in ("ttft_s", "tpot_s", "utilisation")] + [
            n for end in (result.at_low, result.at_high) for n in _numbers(end)]
    if isinstance(result, importlib.import_module("kvmath.load").Load):
        # documented: NaN (JSON null) waits, times and running sequences where the load is unstable (rho >= 1)
        stable = np.asarray(result.utilisation) < 1
        rest = ("arrival_rate", "input_tokens", "output_tokens", "n_chips", "utilisation", "prefill_utilisation",
                "percentiles", "goodput_tokens_per_s_per_chip")
        return [n for k in rest for n in _numbers(getattr(result, k))] + [
            np.where(stable, getattr(result, k), 0.0) for k in ("running", "queue_wait_s", "ttft_s", "tpot_s",
                                                                 "ttft_percentiles_s")] + [
            n for part in (result.simulated, result.at_low, result.at_high) for n in _numbers(part)]
    if isinstance(result, km.Deployment):  # what it precomputed: the matmul rate and the chips
        return [result.flops, result.n_chips]
    if isinstance(result, LayerSpec):
        return [result.elems_per_token(), result.flops_per_cached_token()]
    if isinstance(result, dict):
        return [n for v in result.values() for n in _numbers(v)]
    if isinstance(result, tuple):
        return [n for v in result for n in _numbers(v)]
    if isinstance(result, list) and result and all(isinstance(v, str) for v in result):  # labels (a Sizing's layouts)
        return []
    if dataclasses.is_dataclass(result):
        names = [f.name for f in dataclasses.fields(result)]
        names += [k for c in type(result).__mro__ for k, v in vars(c).items()
                  if isinstance(v, property) and not k.startswith("_") and k not in names]
        return [n for k in names for n in _numbers(getattr(result, k))]
    if isinstance(result, np.ndarray) and result.dtype.kind in "bUSO":  # masks and labels ("memory", "compute")
        return []
    return [result]


def _check_value(result) -> None:
    for part in _numbers(result):
        if isinstance(part, int):  # Python ints: exact, however large
            assert part >= 0, f"negative result {part!r}"
            continue
        arr = np.asarray(part)
        assert arr.dtype.kind in "iuf", f"not a number: {part!r}"
        assert np.all(np.isfinite(arr)), f"non-finite result {part!r}"
        assert np.all(arr >= 0), f"negative result {part!r}"


def _call(name, args):
    """The result, or None where the function refused valid inputs for a reason it may give."""
    try:
        return _function(name)(**args)
    except ResultOverflow as err:
        assert "overflows" in str(err)
        return None
    except ValueError as err:
        allowed = DOMAIN_ERRORS.get(name, ())
        assert any(a in str(err) for a in allowed), f"{name}({args}) refused valid input: {err}"
        return None


def _variants(kind, value):
    """The same number as other accepted types: numpy scalars, 0-d and 1-d arrays, lists."""
    if kind in _WHOLE:
        return [np.int64(value)] + ([np.int32(value)] if value < 2**31 else []) + ([float(value)] if kind == "one" else [])
    out = [np.float64(value), np.array(value)]
    if kind == "count" and value < 2**31:
        out += [np.int32(value), np.int64(value), float(value)]
    return out


#: Functions whose numeric arguments are scalars, or whose result is not element by element (a frontier's best
#: batch, the fewest chips, a deployment), or that take one number per call (a fit's whole counts).
_SCALAR_ONLY = {"units.dtype_bytes", "Chip.preset", "Model.preset", "Link.preset", "Deployment.frontier",
                "ParallelLayout", "Deployment", "Deployment.fewest_chips", "formulas.fit", "Link.replace@nvlink4"}


@st.composite
def calls(draw):
    name = draw(st.sampled_from(sorted(FUNCTIONS)))
    args = {arg: draw(VALID[kind]) for arg, kind in FUNCTIONS[name].items()}
    return name, args


@FUZZ
@given(calls(), st.data())
def test_valid_inputs_give_a_finite_non_negative_value_of_any_numeric_type(call, data):
    name, args = call
    result = _call(name, args)
    if result is None:
        return
    _check_value(result)
    numeric = [a for a, k in FUNCTIONS[name].items() if k in _NUMERIC]
    if not numeric:
        return
    # the same number as another type gives the same answer
    arg = data.draw(st.sampled_from(numeric))
    variant = data.draw(st.sampled_from(_variants(FUNCTIONS[name][arg], args[arg])))
    again = _call(name, {**args, arg: variant})
    if again is not None:
        for a, b in zip(_numbers(result), _numbers(again)):
            assert np.all(np.asarray(a) == np.asarray(b)), (name, arg, variant)
    # an array of two values broadcasts and agrees element by element
    if name.startswith("formatting.") or "@" in name or name in _SCALAR_ONLY or FUNCTIONS[name][arg] in _WHOLE:
        return
    other = data.draw(VALID[FUNCTIONS[name][arg]])
    pair = _call(name, {**args, arg: [args[arg], other]})
    single = _call(name, {**args, arg: other})
    if pair is not None and single is not None:
        for whole, first, second in zip(_numbers(pair), _numbers(result), _numbers(single)):
            whole = np.broadcast_to(np.asarray(whole), (2,))
            assert whole[0] == first and whole[1] == second, (name, arg)


@FUZZ
@given(calls(), st.data())
def test_an_invalid_argument_is_refused_naming_it(call, data):
    name, args = call
    if name in DOMAIN_ERRORS and _call(name, args) is None:
        return  # a combination with no answer (tp that does not divide the heads) may be refused before the bad value
    arg = data.draw(st.sampled_from(sorted(FUNCTIONS[name])))
    bad = data.draw(st.sampled_from(INVALID[FUNCTIONS[name][arg]]))
    shown = "dtype" if FUNCTIONS[name][arg] == "dtype" and name == "Chip.flops@h100" else arg
    with pytest.raises(ValueError) as err:
        _function(name)(**{**args, arg: bad})
    message = str(err.value)
    wanted = {"Model.preset": "model", "Chip.preset": "hardware", "Chip.flops@h100": "compute_dtype",
              "formats.get_format": "dtype", "layout.parse_layout": "parallel layout",
              "Chip.flops_for_format@h100": "weights", "Link.preset": "link"}.get(name, shown)
    assert wanted in message or (name == "units.dtype_bytes" and "dtype" in message), (name, arg, bad, message)


@FUZZ
@given(calls(), st.data())
def test_mismatched_shapes_name_the_arguments(call, data):
    name, args = call
    numeric = [a for a, k in FUNCTIONS[name].items() if k in _NUMERIC - _WHOLE]
    if len(numeric) < 2 or name.startswith("formatting.") or "@" in name or name in _SCALAR_ONLY:
        return
    if name in DOMAIN_ERRORS and _call(name, args) is None:
        return  # a combination with no answer (ep on a dense model) is refused before the shapes, as it should be
    a, b = data.draw(st.permutations(numeric))[:2]
    args = {**args, a: np.full(2, args[a]), b: np.full(3, args[b])}
    with pytest.raises(ValueError, match=rf"{a} \(2,\) and {b} \(3,\)|{b} \(3,\) and {a} \(2,\)"):
        _function(name)(**args)


# ----- Model and Chip constructors, through replace() -----------------------------------

_MODEL_COUNTS = ["n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab"]
_MODEL_OPTIONAL = ["sliding_window", "n_sliding_layers", "n_experts", "n_shared_experts", "top_k", "d_ff_expert",
                   "n_dense_layers", "q_lora_rank", "kv_lora_rank", "qk_rope_dim", "v_head_dim"]
_STRICT_COUNT_BAD = [v for v in INVALID["count"] if v is not None] + [32.0, np.float64(8)]
MODEL_FIELDS = {
    **{f: _STRICT_COUNT_BAD + [None] for f in _MODEL_COUNTS},
    **{f: [v for v in _STRICT_COUNT_BAD if not (isinstance(v, int) and v == 0)] + [-1, 10**9] for f in _MODEL_OPTIONAL},
    "mlp_matrices": [1, 4, 2.0, "3", None, True],
    "n_positions": [-1, 2.5, "0", None],
    "tied_embeddings": ["false", "true", 0, 1, None, math.nan, "False"],
    "attention": [3, None, "sparse", b"mla", ""],
    "published_params": ["6.7e9", math.nan, -1, 0, math.inf, True, [1e9]],
    "name": [3, None, "", b"x"],
    "display_name": [3, b"x"],
}


@FUZZ
@given(st.sampled_from(km.Model.presets()), st.sampled_from(sorted(MODEL_FIELDS)), st.data())
def test_model_fields_are_all_validated(preset, field, data):
    model = km.Model.preset(preset)
    bad = data.draw(st.sampled_from(MODEL_FIELDS[field]))
    try:
        changed = model.replace(**{field: bad})
    except ValueError as err:
        message = str(err)
        related = {field, "n_sliding_layers", "sliding_window", "n_experts", "top_k", "d_ff_expert",
                   "MLA", "mixture-of-experts", "divisible", "n_dense_layers", "n_layers"}
        assert any(w in message for w in related), (preset, field, bad, message)
        return
    # the few "bad" values that are fine in some preset (10**9 experts, a window as long as you like)
    assert field in _MODEL_OPTIONAL and bad in (10**9,) or field in ("n_dense_layers",), (preset, field, bad)
    _check_value(changed.param_count())


@FUZZ
@given(st.sampled_from(km.Model.presets()), st.sampled_from([np.int32, np.int64, np.uint32, np.int16]))
def test_model_fields_of_any_integer_type_give_the_same_sizes(preset, itype):
    model = km.Model.preset(preset)
    fields = {f: itype(getattr(model, f)) for f in _MODEL_COUNTS + _MODEL_OPTIONAL
              if getattr(model, f) is not None and getattr(model, f) <= np.iinfo(itype).max}
    same = model.replace(**fields, attention=model.attention.upper())
    assert same.param_count() == model.param_count() and type(same.param_count()) is int
    assert same.active_param_count() == model.active_param_count()
    assert same.kv_bytes_per_token() == model.kv_bytes_per_token()
    assert same.kv_bytes_per_seq(4096) == model.kv_bytes_per_seq(4096)


CHIP_FIELDS = {
    "hbm_bytes": INVALID["pos"], "bandwidth": INVALID["pos"],
    "flops_by_dtype": [{"bf16": v} for v in INVALID["pos"][:12]] + [{}, {"fp8": 1e15}, {"bf16": 1e15, "fp6": 1e15},
                                                                     [1e15], "bf16", None],
    "name": [3, None, ""],
}


@FUZZ
@given(st.sampled_from(km.Chip.presets()), st.sampled_from(sorted(CHIP_FIELDS)), st.data())
def test_chip_fields_are_all_validated(preset, field, data):
    bad = data.draw(st.sampled_from(CHIP_FIELDS[field]))
    with pytest.raises(ValueError) as err:
        km.Chip.preset(preset).replace(**{field: bad})
    assert field in str(err.value) or ("bf16" in str(err.value) and field == "flops_by_dtype"), (field, bad, err.value)
    assert km.Chip.preset(preset) == km.Chip.preset(preset.upper())


# ----- the command line -----------------------------------------------------------------

_TEXT_VALUES = ["1", "0", "-1", "0.5", "2.5", "1e-300", "1e300", "1.7e308", "1e400", "nan", "inf", "-inf", "",
                "abc", "0x10", "1_000", " 8 ", "\u0663", "5e-324", "-1e5", "1e15", "8", "4096", "1e9"]
CLI = {
    "decode": (["decode", "--model", "llama-2-7b", "--hardware", "h100-sxm", "--batch", "8", "--context", "4096"],
               ["--batch", "--context", "--chips", "--efficiency", "--params", "--kv-bytes-per-token", "--bandwidth",
                "--flops"]),
    "decode-no-presets": (["decode", "--params", "7e9", "--kv-bytes-per-token", "5e5", "--bandwidth", "2e12",
                           "--flops", "1e15", "--batch", "8", "--context", "4096"],
                          ["--batch", "--context", "--chips", "--efficiency"]),
    "capacity": (["capacity", "--model", "mixtral-8x7b", "--hardware", "a100-80gb", "--context", "4096"],
                 ["--context", "--chips", "--hbm-bytes", "--params", "--kv-bytes-per-token", "--bandwidth", "--flops"]),
    "critical-batch": (["critical-batch", "--hardware", "h100-sxm"], ["--bandwidth", "--flops"]),
    "models": (["models"], ["--json"]),
    "hardware": (["hardware"], ["--json"]),
}


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exit_info:
            code = exit_info.code
    return code, out.getvalue(), err.getvalue()


def _finite_json(text):
    def refuse(constant):
        raise AssertionError(f"non-JSON constant {constant} in the output")

    return json.loads(text, parse_constant=refuse)


@FUZZ
@given(st.sampled_from(sorted(CLI)), st.data(), st.booleans())
def test_cli_never_shows_a_traceback_and_names_the_option(command, data, as_json):
    base, options = CLI[command]
    option = data.draw(st.sampled_from(options))
    if option == "--json":  # the listings take no numbers: give them one anyway
        argv = [*base, "--json", data.draw(st.sampled_from(["--json", "--batch", "x", "--model"]))]
        code, out, err = _run(argv)
        assert code == 2 and "Traceback" not in err and err.count("\n") == 1
        return
    value = data.draw(st.one_of(st.sampled_from(_TEXT_VALUES), st.floats(allow_nan=True).map(repr),
                                st.text("0123456789.e-+x", max_size=6)))
    if option in base:
        i = base.index(option)
        argv = [*base[:i], option, value, *base[i + 2:]]
    else:
        argv = [*base, option, value]
    if as_json:
        argv.append("--json")
    code, out, err = _run(argv)
    assert "Traceback" not in err + out
    assert code in (0, 2), (argv, code, err)
    if code == 2:
        assert out == "" and err.count("\n") == 1, (argv, err)
        assert option in err or "give it once" in err, (argv, err)
        return
    # on success stderr is empty, or one warning that the context is past the model's supported length
    assert err == "" or (err.count("\n") == 1 and "warning: --context" in err), (argv, err)
    if as_json:
        result = _finite_json(out)
        numbers = [v for v in result.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        assert all(math.isfinite(v) and v >= 0 for v in numbers), (argv, result)
    else:
        assert "nan" not in out.lower().replace("nanosecond", "") and "inf" not in out.lower(), (argv, out)


@FUZZ
@given(st.sampled_from(sorted(CLI)), st.data())
def test_cli_repeated_options_are_errors(command, data):
    base, options = CLI[command]
    option = data.draw(st.sampled_from([o for o in base if o.startswith("--")] or ["--json"]))
    if option == "--json":
        argv = [*base, "--json", "--json"]
    else:
        i = base.index(option)
        argv = [*base, option, base[i + 1]]
    code, out, err = _run(argv)
    assert code == 2 and "given twice" in err and option in err, (argv, err)


# ----- config.json loading --------------------------------------------------------------

_CONFIG_BAD = [None, "32", -1, 0, 2.5, math.nan, math.inf, True, [32], {"a": 1}, 10**30]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.sampled_from(_HF_CONFIGS), st.data())
def test_a_bad_number_in_a_config_is_refused_naming_its_key(config, data):
    keys = sorted(k for k, v in config.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
    key, bad = data.draw(st.sampled_from(keys)), data.draw(st.sampled_from(_CONFIG_BAD))
    try:
        model = km.Model.from_hf_config({**config, key: bad})
    except ValueError as err:
        # a type or range error names the key; 10**30 may instead break a relation between keys (heads divisible by
        # KV heads, dense layers below layers), whose message names the relation
        assert key in str(err) or bad == 10**30, (key, bad, str(err))
        return
    _check_value(model.param_count())  # a key the model does not use, or a value that still makes sense
