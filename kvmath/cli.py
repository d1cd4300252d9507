"""The ``kvmath`` command line: decode, capacity, critical-batch, prefill, run, models, hardware, links.

Every subcommand prints base-unit results formatted at the edge, or one
JSON object with ``--json``. Bad input exits with status 2 and a one-line
message on stderr; it never shows a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import math
import os
import re
import sys
from typing import Sequence

import numpy as np

from .formulas import kv_budget_bytes, max_batch, max_kv_tokens, min_chips_for_weights, weight_bytes
from .formulas import critical_batch, critical_batch_beta_alpha, tokens_per_s, tokens_per_s_per_seq
from .formatting import fmt_bandwidth, fmt_bytes, fmt_count, fmt_flop_rate, fmt_flops, fmt_seconds
from .hardware import Chip, chip_names, get_chip
from .layers import LAYER_KINDS
from .links import get_link, link_names
from .memory import (BUDGETS, GPU_MEMORY_UTILIZATION, BLOCK_SIZE, VLLM_ENGINES, _check_tensor_parallel, memory_budget,
                     runtime_total_bytes, vllm_engine, vllm_kv_cache)
from .models import ATTENTION_KINDS, Model, get_model, model_names
from .parallel import KV_SHARDINGS, ParallelLayout, parse_layout, tensor_parallel_comm_s
from .requests import prefill_bound, prefill_chip_step, request_times
from .step import StepWork, decode_step, layout_step_time, model_critical_batch, step_time, step_work
from .units import DTYPE_BYTES, dtype_bytes
from .validation import ResultOverflow, choice, fraction, non_negative, positive, positive_int

COMPUTE_DTYPES = ("bf16", "fp16", "fp8", "int8", "fp4")

#: Every key of ``kvmath decode --json``: its meaning, unit and which form
#: of the bound it belongs to. ``--help`` prints this table.
DECODE_KEYS = {
    "model": "model preset name (null with --params alone)",
    "hardware": "chip preset name (null with --bandwidth/--flops alone)",
    "chips": "chips N the step runs on (tensor parallel)",
    "batch": "sequences per step B",
    "context": "tokens in each sequence's cache S",
    "supported_context": "tokens the model's authors document as supported (null if unknown)",
    "param_count": "parameters each token multiplies by (matmul parameters; active ones for MoE)",
    "weight_bytes_read": "bytes of weights the step reads, all chips: what the strict bound charges (k-expert floor for MoE)",
    "weight_bytes_read_uniform": "the same under uniform MoE routing (an estimate; equals weight_bytes_read for a dense model)",
    "weight_bytes_read_ceiling": "the same with min(E, k B) experts (an upper bound)",
    "weight_bytes_resident": "bytes of all weights held in memory, every expert",
    "kv_bytes_per_token": "KV bytes per token (average over the context where layers use windows)",
    "kv_cache_bytes": "KV cache of the whole batch, bytes",
    "kv_bytes_per_chip": "KV bytes each chip reads (a cache replicated across chips counts in full; under --parallel pp=..., its stage's share of its sequences)",
    "weight_flops": "FLOPs of the weight matmuls, whole step",
    "attention_flops": "FLOPs of attention over the cache, whole step (0 with --params and no --model)",
    "bandwidth_per_chip": "bytes/s per chip used (peak x --efficiency)",
    "flops_per_chip": "FLOP/s per chip used for weights and attention",
    "kv_s": "seconds to read the KV cache on one chip",
    "attention_compute_s": "seconds of attention math on one chip",
    "weight_memory_s": "seconds to read the weights on one chip",
    "weight_compute_s": "seconds of weight math on one chip",
    "overhead_s": "fixed per-step overhead added to both forms (--overhead-s; an estimate)",
    "comm_s": "lower bound on the chips' communication over --link, seconds: tensor parallelism's 2 all-reduces per layer, and with --parallel its other collectives (0 without --link or on 1 chip)",
    "step_s": "strict lower bound on the step, seconds: overhead + max(all bytes / W, all FLOPs / C, comm_s)",
    "bound": "what binds in the strict form: memory, compute or communication",
    "tokens_per_s_per_seq": "tokens/s each sequence gets at step_s",
    "tokens_per_s": "tokens/s of the whole batch at step_s",
    "no_overlap_step_s": "no-overlap form, seconds: overhead + max(kv_s, attention_compute_s) + max(weight_memory_s, weight_compute_s) + comm_s (the notes' min-step without comm)",
    "no_overlap_tokens_per_s": "tokens/s of the whole batch at no_overlap_step_s",
    "no_overlap_attention_bound": "which attention term binds in the no-overlap form: memory or compute",
    "no_overlap_weights_bound": "which weight term binds in the no-overlap form: memory or compute",
    "is_lower_bound": "true when the times are bounds; false when --efficiency < 1 or --overhead-s > 0 make them estimates",
    "critical_batch": "C * b_w / (2 W) of the chip and dtypes (the dense-model B_crit)",
    "model_critical_batch": "batch where this model's weight math equals its weight reads (uniform MoE routing; null with --params)",
}


class _Parser(argparse.ArgumentParser):
    """argparse, but every error is one line on stderr and exit status 2."""

    def error(self, message: str):  # noqa: D102 - argparse hook
        self.exit(2, f"kvmath: error: {message}\n")


def _remember(parser, namespace, action, option_string) -> None:
    """Record that the user typed ``option_string``; refuse it the second time."""
    given = getattr(namespace, "_given", None)
    if given is None:
        given = {}
        setattr(namespace, "_given", given)
    if action.dest in given:
        first = given[action.dest]
        spelled = f" (as {first} and {option_string})" if first != option_string else ""
        parser.error(f"{option_string} given twice{spelled}; give it once")
    given[action.dest] = option_string


class _Once(argparse.Action):
    """Store a value, but refuse the option when it is repeated (argparse keeps the last silently)."""

    def __call__(self, parser, namespace, values, option_string=None):
        _remember(parser, namespace, self, option_string)
        setattr(namespace, self.dest, values)


class _OnceFlag(argparse.Action):
    """``store_true`` that refuses a repeat."""

    def __init__(self, option_strings, dest, default=False, required=False, help=None):
        super().__init__(option_strings, dest, nargs=0, const=True, default=default, required=required, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        _remember(parser, namespace, self, option_string)
        setattr(namespace, self.dest, True)


def _given(args, dest: str) -> bool:
    """Whether the user typed the option stored in ``dest``."""
    return dest in (getattr(args, "_given", None) or {})


def _option(args, dest: str) -> str:
    return (getattr(args, "_given", None) or {}).get(dest, "--" + dest.replace("_", "-"))


def _number(text: str) -> float:
    """Parse '30e9' or '8.2e11'; argparse turns the ValueError into a usage error."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _add_model_choice(p: argparse.ArgumentParser, help_model: str) -> None:
    which = p.add_mutually_exclusive_group()
    which.add_argument("--model", help=help_model, action=_Once)
    which.add_argument("--config", metavar="PATH",
                       help="a Hugging Face config.json (or its directory) instead of --model (default: none)", action=_Once)


def _model(args) -> Model | None:
    """The model from --model (a preset) or --config (a config.json), or None."""
    if getattr(args, "config", None):
        return Model.from_hf_config(args.config)
    return get_model(args.model) if args.model else None


def _add_model_options(p: argparse.ArgumentParser) -> None:
    _add_model_choice(p, "model preset (see `kvmath models`); default: none, then --params and --kv-bytes-per-token are both needed")
    p.add_argument("--params", type=_number, help="parameters each token multiplies by (a count); overrides the --model preset's (default: from the preset)", action=_Once)
    p.add_argument("--kv-bytes-per-token", type=_number, help="KV cache bytes per token; overrides the --model preset's, which --kv-dtype otherwise sets (default: from the preset)", action=_Once)
    p.add_argument("--weight-dtype", default="bf16", type=str.lower, choices=sorted(DTYPE_BYTES),
                   help="format of the stored weights, scales included (default: bf16)", action=_Once)
    p.add_argument("--lm-head-dtype", type=str.lower, choices=sorted(DTYPE_BYTES),
                   help="format of the LM head (default: --weight-dtype)", action=_Once)
    p.add_argument("--embedding-dtype", type=str.lower, choices=sorted(DTYPE_BYTES),
                   help="format of the input embedding table (default: --weight-dtype)", action=_Once)
    p.add_argument("--experts-dtype", type=str.lower, choices=sorted(DTYPE_BYTES),
                   help="format of the routed experts, e.g. mxfp4 for gpt-oss as published (default: --weight-dtype)",
                   action=_Once)
    p.add_argument("--kv-dtype", default="bf16", type=str.lower, choices=sorted(DTYPE_BYTES), help="cached keys and values (default: bf16)", action=_Once)


def _add_hardware_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hardware", help="chip preset (see `kvmath hardware`); default: none, then --bandwidth and --flops are both needed", action=_Once)
    p.add_argument("--chips", type=_number, help="number of chips N (default: 1 for decode, prefill and run; for capacity, the fewest that hold the weights)", action=_Once)
    p.add_argument("--bandwidth", type=_number, help="HBM bytes/s per chip; overrides the --hardware preset's (default: from the preset)", action=_Once)
    p.add_argument("--flops", type=_number, help="dense FLOP/s per chip; overrides the --hardware preset's rate (default: from the preset and the compute dtype)", action=_Once)
    p.add_argument("--compute-dtype", type=str.lower, choices=COMPUTE_DTYPES,
                   help="rate the matmuls run at (default: the weight format's own where the chip has it, else bf16)", action=_Once)
    p.add_argument("--json", action=_OnceFlag, help="print one JSON object instead of text (default: text)")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kvmath", description="The arithmetic of LLM inference.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    keys = "\n".join(f"  {k:<27} {v}" for k, v in DECODE_KEYS.items())
    decode = sub.add_parser(
        "decode", help="bounds on one decode step and tokens/s",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"keys of --json (base units: bytes, seconds, FLOPs):\n{keys}",
    )
    _add_model_options(decode)
    _add_hardware_options(decode)
    decode.add_argument("--batch", type=_number, required=True, help="sequences per step, B (required)", action=_Once)
    decode.add_argument("--context", type=_number, required=True, help="tokens in each sequence's cache, S (required)", action=_Once)
    decode.add_argument("--kv-shard", default="heads", type=str.lower, choices=KV_SHARDINGS, help="split the cache across chips by heads or by batch (default: heads)", action=_Once)
    decode.add_argument("--link", help="link between the chips (see `kvmath links`): adds comm_s (default: none, communication not counted)", action=_Once)
    decode.add_argument("--parallel", help="layout over the chips instead of --chips/--kv-shard, e.g. 'tp=4,pp=2' "
                                           "(fields tp, cp, dp, pp, ep; needs --model; default: none)", action=_Once)
    decode.add_argument("--efficiency", type=_number, default=1.0,
                        help="achieved fraction of peak bandwidth (default: 1; below 1 the times are estimates)", action=_Once)
    decode.add_argument("--overhead-s", type=_number, default=0.0,
                        help="fixed seconds per step, e.g. kernel launches (default: 0; above 0 the times are estimates)", action=_Once)

    capacity = sub.add_parser("capacity", help="chips for the weights, KV budget, tokens and batch that fit")
    _add_model_options(capacity)
    _add_hardware_options(capacity)
    capacity.add_argument("--hbm-bytes", type=_number, help="memory per chip in bytes; overrides the --hardware preset's (default: from the preset)", action=_Once)
    capacity.add_argument("--context", type=_number, required=True, help="tokens per sequence, S (required)", action=_Once)
    capacity.add_argument("--budget", default="device", type=str.lower, choices=("device", "reported", "reserve"),
                          help="memory per chip: the marketed size (default), the total the device reports "
                               "(nvidia-smi), or the CUDA runtime's total less the process's non-torch memory; "
                               "a --hbm-bytes number is taken as the reported total", action=_Once)
    capacity.add_argument("--engine", type=str.lower, choices=("vllm",),
                          help="also size the KV cache as this serving engine does (--chips is its tensor-parallel "
                               "size; default: the fewest chips that hold the weights and split the heads)", action=_Once)
    capacity.add_argument("--gpu-memory-utilization", type=_number,
                          help=f"vLLM's fraction of the CUDA runtime total (default: {GPU_MEMORY_UTILIZATION})", action=_Once)
    capacity.add_argument("--block-size", type=_number, help=f"tokens per vLLM block (default: {BLOCK_SIZE})", action=_Once)
    capacity.add_argument("--max-model-len", type=_number, help="vLLM's --max-model-len (default: --context)", action=_Once)
    capacity.add_argument("--vllm-version", type=str.lower, choices=VLLM_ENGINES,
                          help="v1 (default: hybrid sliding-window groups) or v0 (every layer full attention)", action=_Once)

    crit = sub.add_parser("critical-batch", help="B_crit = C * b_w / (2 W), and a model's own with --model")
    crit.add_argument("--hardware", help="chip preset; default: none, then --bandwidth and --flops are both needed", action=_Once)
    _add_model_choice(crit, "model preset: also solve its own B_crit, which MoE models change (default: none)")
    crit.add_argument("--bandwidth", type=_number, help="bytes/s; overrides the --hardware preset's (default: from the preset)", action=_Once)
    crit.add_argument("--flops", type=_number, help="FLOP/s in the compute dtype; overrides the --hardware preset's (default: from the preset)", action=_Once)
    crit.add_argument("--weight-dtype", default="bf16", type=str.lower, choices=sorted(DTYPE_BYTES), action=_Once,
                      help="number format of the stored weights, b_w (default: %(default)s)")
    crit.add_argument("--compute-dtype", type=str.lower, choices=COMPUTE_DTYPES,
                      help="rate the matmuls run at (default: the weight format's own where the chip has it, else bf16)", action=_Once)
    crit.add_argument("--json", action=_OnceFlag, help="print JSON instead of text (default: text)")

    models = sub.add_parser("models", help="list model presets")
    models.add_argument("--family", help="only this family (llama, qwen, gemma, ...; default: all)", action=_Once)
    models.add_argument("--attention", help="only models with this attention (mha, gqa, mqa, mla) or layer kind "
                                            "(full, sliding, chunked, linear; default: all)", action=_Once)
    models.add_argument("--json", action=_OnceFlag, help="print JSON instead of text (default: text)")
    hardware = sub.add_parser("hardware", help="list chip presets")
    hardware.add_argument("--vendor", help="only this vendor (nvidia, amd, google, apple; default: all)", action=_Once)
    hardware.add_argument("--json", action=_OnceFlag, help="print JSON instead of text (default: text)")
    _add_request_parsers(sub)
    return parser


def _refuse_ignored(args) -> None:
    """An option that cannot change any number the command prints is an error, not silently dropped."""
    cmd = args.command
    if cmd not in ("decode", "capacity", "critical-batch"):
        return

    def clash(dest, why):
        raise ValueError(f"{_option(args, dest)} {why}")

    if _given(args, "compute_dtype") and _given(args, "flops"):
        clash("compute_dtype", "has no effect with --flops (it only picks the --hardware preset's rate); drop one")
    if cmd == "critical-batch":
        return
    if _given(args, "kv_dtype") and _given(args, "kv_bytes_per_token"):
        clash("kv_dtype", "has no effect with --kv-bytes-per-token (which already fixes the bytes); drop one")
    if cmd == "decode":
        if _given(args, "hardware") and _given(args, "bandwidth") and _given(args, "flops"):
            clash("hardware", "has no effect when --bandwidth and --flops are both given; drop one")
        if _given(args, "kv_shard") and (args.chips is None or args.chips == 1):
            clash("kv_shard", "has no effect on one chip; give --chips above 1 or drop it")
    if cmd == "capacity":
        if _given(args, "model") and _given(args, "params") and _given(args, "kv_bytes_per_token"):
            clash("model", "has no effect when --params and --kv-bytes-per-token are both given; drop one")
        if args.hardware is None and args.bandwidth is None:
            for dest in ("flops", "compute_dtype"):
                if _given(args, dest):
                    clash(dest, "is only used for B_crit, which needs --bandwidth or --hardware as well")
        if (_given(args, "hardware") and _given(args, "hbm_bytes") and _given(args, "bandwidth")
                and _given(args, "flops")):
            clash("hardware", "has no effect when --hbm-bytes, --bandwidth and --flops are all given; drop one")


def _chip_rates(args) -> tuple[float, float]:
    """(bandwidth, FLOP/s) per chip from --hardware, with --bandwidth/--flops overriding."""
    chip = get_chip(args.hardware) if args.hardware else None
    if chip is None and (args.bandwidth is None or args.flops is None):
        raise ValueError("give --hardware, or both --bandwidth and --flops")
    bandwidth = args.bandwidth if args.bandwidth is not None else chip.bandwidth
    if args.flops is not None:
        flops = args.flops
    elif args.compute_dtype is not None:
        flops = chip.flops(args.compute_dtype)
    else:
        flops = chip.flops_for_format(args.weight_dtype)
    return positive("--bandwidth", bandwidth), positive("--flops", flops)


def _precision(args) -> dict:
    """Format of each weight group from --weight-dtype, --lm-head-dtype, --embedding-dtype and --experts-dtype."""
    return {"default": args.weight_dtype,
            "experts": getattr(args, "experts_dtype", None) or args.weight_dtype,
            "lm_head": getattr(args, "lm_head_dtype", None) or args.weight_dtype,
            "embedding": getattr(args, "embedding_dtype", None) or args.weight_dtype}


def _model_numbers(args, context: float | None) -> tuple[object, float, float]:
    """(model or None, parameter count used per token, KV bytes per token)."""
    model = _model(args)
    if model is None and (args.params is None or args.kv_bytes_per_token is None):
        raise ValueError("give --model or --config, or both --params and --kv-bytes-per-token")
    params = args.params if args.params is not None else model.active_param_count()
    if args.kv_bytes_per_token is not None:
        kv_per_token = args.kv_bytes_per_token
    else:
        kv_per_token = model.kv_bytes_per_token(dtype_bytes(args.kv_dtype), context=context)
    return model, positive("--params", params), positive("--kv-bytes-per-token", kv_per_token)


def _stored_params(args, model, params_per_token: float) -> float:
    """Parameters held in memory: all experts of an MoE model, not only the active ones."""
    return model.param_count() if model is not None and args.params is None else params_per_token


def _work(args, model, batch: float, context: float) -> StepWork:
    """The step's bytes and FLOPs from the model, with --params / --kv-bytes-per-token overriding."""
    if model is not None:
        work = step_work(model, batch, context, weights=_precision(args), kv_dtype=args.kv_dtype)
    if args.params is not None:
        b_w = dtype_bytes(args.weight_dtype, argument="--weight-dtype")
        read = weight_bytes(positive("--params", args.params), b_w)
        counts = dict(weight_bytes_read=read, weight_bytes_read_uniform=read, weight_bytes_read_ceiling=read,
                      weight_bytes_resident=read, matmul_params=args.params)
        if model is None:
            # No model: no attention FLOPs to count, no heads; the cache splits evenly.
            return StepWork(batch=batch, context=context, tokens_per_seq=1,
                            kv_bytes_per_seq=context * positive("--kv-bytes-per-token", args.kv_bytes_per_token),
                            attention_flops_per_seq=0.0, kv_heads=int(positive_int("--chips", args.chips or 1)),
                            **counts)
        work = dataclasses.replace(work, **counts)
    if args.kv_bytes_per_token is not None:
        work = dataclasses.replace(work, kv_bytes_per_seq=context * positive("--kv-bytes-per-token", args.kv_bytes_per_token),
                                   state_bytes_per_seq=0.0)
    return work


def _warn_past_supported_context(args, model, context: float) -> None:
    if model is not None and model.supported_context and context > model.supported_context:
        print(f"kvmath {args.command}: warning: --context {context:,.0f} is beyond the {model.supported_context:,} "
              f"tokens {model.name} is documented to support; computing anyway",
              file=sys.stderr)


def _decode(args) -> dict:
    """:func:`_decode_numbers`, with an overflow inside the step model reported in terms of the options."""
    try:
        return _decode_numbers(args)
    except ValueError as err:
        if "must be finite" not in str(err) or str(err).startswith("--"):
            raise
        raise ValueError(f"the step overflows a float ({err}) for {_typed(args)}: --batch, --context, --params or "
                         "--kv-bytes-per-token too large, or --bandwidth/--flops too small") from None


def _decode_numbers(args) -> dict:
    n_chips = positive_int("--chips", 1 if args.chips is None else args.chips)
    batch = positive_int("--batch", args.batch)
    context = positive_int("--context", args.context)
    efficiency = fraction("--efficiency", args.efficiency)
    overhead_s = non_negative("--overhead-s", args.overhead_s)
    bandwidth, flops = _chip_rates(args)
    model = _model(args)
    if model is None and (args.params is None or args.kv_bytes_per_token is None):
        raise ValueError("give --model or --config, or both --params and --kv-bytes-per-token")
    work = _work(args, model, batch, context)
    link = _link_option(args)
    if args.parallel:
        step = layout_step_time(model, work, bandwidth, flops, _layout_option(args, model), weights=_precision(args),
                                link=link, overhead_s=overhead_s, efficiency=efficiency)
        n_chips = step.n_chips
    else:
        if model is not None and args.kv_shard == "heads" and model.n_heads % int(n_chips):
            raise ValueError(f"--chips ({int(n_chips)}) must divide the {model.n_heads} heads of {model.name} to split "
                             f"by heads; try --parallel pp={int(n_chips)} (pipeline by layers) or --kv-shard batch")
        step = step_time(work, bandwidth, flops, n_chips=int(n_chips), shard=args.kv_shard,
                         overhead_s=overhead_s, efficiency=efficiency)
    if link is not None and not args.parallel:
        if model is None:
            raise ValueError("--link needs --model (the layers and width the all-reduces move)")
        step = dataclasses.replace(step, comm_s=tensor_parallel_comm_s(model, batch, n_chips, link))
    t = step.terms
    b_w = dtype_bytes(args.weight_dtype, argument="--weight-dtype")
    own_b_crit = None
    if model is not None and args.params is None:
        own_b_crit = model_critical_batch(model, get_chip(args.hardware), _precision(args), args.compute_dtype) \
            if args.hardware and args.bandwidth is None and args.flops is None else None
    result = {
        "model": model.name if model else None,
        "hardware": args.hardware,
        "chips": int(n_chips),
        "batch": int(batch),
        "context": int(context),
        "supported_context": model.supported_context if model else None,
        "param_count": float(work.matmul_params),
        "weight_bytes_read": float(work.weight_bytes_read),
        "weight_bytes_read_uniform": float(work.weight_bytes_read_uniform),
        "weight_bytes_read_ceiling": float(work.weight_bytes_read_ceiling),
        "weight_bytes_resident": float(work.weight_bytes_resident),
        "kv_bytes_per_token": float(work.kv_bytes_per_seq / context),
        "kv_cache_bytes": float(work.kv_bytes_read),
        "kv_bytes_per_chip": float(_own_kv_bytes(step, batch)),
        "weight_flops": float(work.weight_flops),
        "attention_flops": float(work.attention_flops),
        "bandwidth_per_chip": float(bandwidth * efficiency),
        "flops_per_chip": float(flops),
        "kv_s": float(t.kv_s),
        "attention_compute_s": float(t.attention_compute_s),
        "weight_memory_s": float(t.weight_memory_s),
        "weight_compute_s": float(t.weight_compute_s),
        "overhead_s": float(t.overhead_s),
        "comm_s": float(step.comm_s),
        "step_s": float(step.strict_step_s),
        "bound": "communication" if step.strict_step_s > t.strict_step_s else t.strict_bound,
        "tokens_per_s_per_seq": float(tokens_per_s_per_seq(step.strict_step_s)),
        "tokens_per_s": float(tokens_per_s(step.strict_step_s, batch)),
        "no_overlap_step_s": float(step.no_overlap_step_s),
        "no_overlap_tokens_per_s": float(tokens_per_s(step.no_overlap_step_s, batch)),
        "no_overlap_attention_bound": t.attention_bound,
        "no_overlap_weights_bound": t.bound,
        "is_lower_bound": step.is_lower_bound,
        "critical_batch": float(critical_batch(flops, bandwidth * efficiency, b_w)),
        "model_critical_batch": own_b_crit,
    }
    _warn_past_supported_context(args, model, context)
    return result


def _own_kv_bytes(step, batch: float) -> float:
    """The cache one chip itself reads in the step; under pp, its stage's share of its group's sequences.

    The bound charges ``max(B' / pp, 1)`` sequences' whole-model cache per
    round (:class:`kvmath.ChipStep`); a chip reads ``B' / pp`` of them.
    """
    if step.chip is None or step.chip.layout.pp == 1:
        return step.kv_bytes_per_chip
    layout = step.chip.layout
    return step.kv_bytes_per_chip / step.chip.micro_batch * math.ceil(batch / layout.dp) / layout.pp


def _print_decode(r: dict) -> None:
    print(f"decode step, B = {r['batch']}, S = {r['context']}, N = {r['chips']} chip(s)")
    print(f"  KV cache (whole batch)   {fmt_bytes(r['kv_cache_bytes'])}; per chip {fmt_bytes(r['kv_bytes_per_chip'])}")
    print(f"  weights read             {fmt_bytes(r['weight_bytes_read'])} of {fmt_bytes(r['weight_bytes_resident'])} resident")
    print(f"  KV read                  {fmt_seconds(r['kv_s'])}")
    print(f"  attention, compute       {fmt_seconds(r['attention_compute_s'])}")
    print(f"  weights, memory          {fmt_seconds(r['weight_memory_s'])}")
    print(f"  weights, compute         {fmt_seconds(r['weight_compute_s'])}")
    if r["comm_s"]:
        print(f"  communication            {fmt_seconds(r['comm_s'])}")
    kind = "lower bound" if r["is_lower_bound"] else "estimate"
    print(f"  step, strict {kind:<11} {fmt_seconds(r['step_s'])}  ({r['bound']}-bound)")
    print(f"  step, no overlap         {fmt_seconds(r['no_overlap_step_s'])}  "
          f"(attention {r['no_overlap_attention_bound']}-bound, weights {r['no_overlap_weights_bound']}-bound)")
    print(f"  tokens/s per sequence    {r['tokens_per_s_per_seq']:.2f}")
    print(f"  tokens/s for the batch   {r['tokens_per_s']:.2f}")
    print(f"  critical batch B_crit    {r['critical_batch']:.1f}")
    if r["model_critical_batch"] is not None:
        print(f"  this model's B_crit      {r['model_critical_batch']:.1f}")


def _capacity(args) -> dict:
    context = positive_int("--context", args.context)
    model, params, kv_per_token = _model_numbers(args, context)
    stored = _stored_params(args, model, params)
    chip = get_chip(args.hardware) if args.hardware else None
    if chip is None and args.hbm_bytes is None:
        raise ValueError("give --hardware or --hbm-bytes")
    memory = chip if args.hbm_bytes is None else positive("--hbm-bytes", args.hbm_bytes)
    if memory is chip and chip.device_bytes is None and chip.runtime_bytes is None:
        needs = [f"--budget {args.budget}"] if args.budget != "device" else []
        needs += ["--engine vllm"] if args.engine else []
        if needs:
            raise ValueError(f"--hardware {chip.name} has no reported memory total in its preset; "
                             f"{' and '.join(needs)} {'need' if len(needs) > 1 else 'needs'} one: give --hbm-bytes (the total nvidia-smi reports, "
                             "in bytes) or use --budget device (the marketed size)")
    hbm = memory_budget(memory, args.budget)
    if model is not None and args.params is None:  # every group in its own format (--experts-dtype, ...)
        weights = model.weight_bytes_resident(_precision(args))
    else:
        weights = weight_bytes(stored, dtype_bytes(args.weight_dtype, argument="--weight-dtype"))
    fewest = min_chips_for_weights(weights, hbm)
    n_chips = fewest if args.chips is None else int(positive_int("--chips", args.chips))
    if n_chips < fewest:
        raise ValueError(f"--chips {n_chips} cannot hold the {fmt_bytes(weights)} of weights "
                         f"({fmt_bytes(hbm)} per chip, --budget {args.budget}): give --chips {fewest} or more")
    budget = kv_budget_bytes(n_chips, hbm, weights)
    try:
        tokens, batch = max_kv_tokens(budget, kv_per_token), max_batch(budget, kv_per_token * context)
    except ValueError:
        raise ValueError(f"the tokens that fit overflow a whole number: --kv-bytes-per-token {kv_per_token!r} "
                         "is too small") from None
    result = {
        "model": model.name if model else None,
        "weight_bytes": weights,
        "min_chips": fewest,
        "chips": n_chips,
        "kv_budget_bytes": float(budget),
        "kv_bytes_per_token": kv_per_token,
        "max_tokens": tokens,
        "context": int(context),
        "max_batch": batch,
        "budget": args.budget,
        "memory_per_chip_bytes": float(hbm),
    }
    if chip is not None or args.bandwidth is not None:
        bandwidth, flops = _chip_rates(args)
        result["critical_batch"] = float(critical_batch(flops, bandwidth, dtype_bytes(args.weight_dtype)))
    engine_options = ("gpu_memory_utilization", "block_size", "max_model_len", "vllm_version")
    if args.engine is None:
        given = [f"--{o.replace('_', '-')}" for o in engine_options if getattr(args, o) is not None]
        if given:
            raise ValueError(f"{given[0]} needs --engine vllm")
    else:
        result["engine"] = _vllm_capacity(args, model, memory, int(context), n_chips)
    return result


def _engine_tp(model, n_chips: int) -> int:
    """The fewest tensor-parallel ranks, from ``n_chips`` up, whose split of the heads vLLM accepts."""
    for tp in range(n_chips, model.n_heads + 1):
        try:
            _check_tensor_parallel(model, tp)
            return tp
        except ValueError:
            continue
    raise ValueError(f"no tensor-parallel size from {n_chips} up splits {model.name}'s heads as vLLM requires")


def _vllm_capacity(args, model, memory, context: int, n_chips: int) -> dict:
    """vLLM's KV cache on each of the tensor-parallel ranks (kvmath.vllm_engine)."""
    if model is None:
        raise ValueError("--engine vllm needs --model (the cache layout depends on heads and layers)")
    for option in ("params", "kv_bytes_per_token"):
        if getattr(args, option) is not None:
            raise ValueError(f"--{option.replace('_', '-')} does not apply with --engine vllm, which sizes the "
                             "weights and cache from the model's own layers")
    util = fraction("--gpu-memory-utilization",
                    GPU_MEMORY_UTILIZATION if args.gpu_memory_utilization is None else args.gpu_memory_utilization)
    block = int(positive_int("--block-size", BLOCK_SIZE if args.block_size is None else args.block_size))
    max_len = int(positive_int("--max-model-len", context if args.max_model_len is None else args.max_model_len))
    if context > max_len:
        raise ValueError(f"--context {context:,} exceeds --max-model-len {max_len:,}: vLLM refuses longer requests")
    tp = n_chips if args.chips is not None else _engine_tp(model, n_chips)
    version = args.vllm_version or "v1"
    # --hbm-bytes is the reported total here too (as for --budget): vLLM sees the runtime total, an estimate below it.
    total = memory if isinstance(memory, Chip) else runtime_total_bytes(memory)
    try:
        e = vllm_engine(model, total, max_len, gpu_memory_utilization=util, block_size=block,
                        weights=_precision(args), kv_dtype=args.kv_dtype, tensor_parallel=tp, engine=version)
        at_context = e if context == max_len else vllm_kv_cache(
            model, e.available_kv_bytes, context, block_size=block, kv_dtype=args.kv_dtype, tensor_parallel=tp,
            max_num_batched_tokens=e.max_num_batched_tokens, engine=version)
    except ValueError as err:
        how = "--chips" if args.chips is not None else "the fewest chips that hold the weights; --chips sets it"
        raise ValueError(f"--engine vllm at TP={tp} ({how}), --max-model-len {max_len:,}: {err}") from None
    return {
        "engine": "vllm", "vllm_version": version, "gpu_memory_utilization": util, "block_size": block,
        "max_model_len": max_len, "tensor_parallel": tp, "max_num_batched_tokens": e.max_num_batched_tokens,
        "total_bytes": e.total_bytes, "requested_bytes": e.requested_bytes, "weight_bytes": e.weight_bytes,
        "activation_peak_bytes": e.activation_peak_bytes, "non_torch_bytes": e.non_torch_bytes,
        "kv_bytes": e.available_kv_bytes, "page_bytes": e.page_bytes, "num_groups": e.num_groups,
        "num_blocks": e.num_blocks, "tokens": e.tokens, "max_concurrency": e.max_concurrency,
        "context": context, "max_concurrency_at_context": at_context.max_concurrency, "is_estimate": True,
        "total_is_estimate": not (isinstance(memory, Chip) and memory.runtime_bytes is not None),
    }


def _row(label: str, value: str, indent: int = 0) -> None:
    """One line of a label column (values aligned whatever the label's length) and its value."""
    print(f"{' ' * indent}{label:<{40 - indent}} {value}")


def _print_capacity(r: dict) -> None:
    if r["budget"] != "device":
        _row("memory per chip", f"{fmt_bytes(r['memory_per_chip_bytes'])}  (budget: {r['budget']})")
    _row("weights", f"{fmt_bytes(r['weight_bytes'])}  (fewest chips: {r['min_chips']})")
    _row(f"KV budget on {r['chips']} chip(s)", fmt_bytes(r["kv_budget_bytes"]))
    # The per-token figure is KV of one S-token sequence over S: an average where layers use windows or states.
    _row(f"KV per token (average over S = {r['context']:,})", f"{r['kv_bytes_per_token']:,.0f} B")
    _row("tokens that fit at that average", f"{r['max_tokens']:,}")
    _row(f"batch at S = {r['context']:,}", f"{r['max_batch']:,}")
    if "critical_batch" in r:
        _row("critical batch B_crit", f"{r['critical_batch']:.1f}")
    if "engine" in r:
        e = r["engine"]
        print(f"vLLM ({e['vllm_version']}, TP={e['tensor_parallel']}, gpu_memory_utilization "
              f"{e['gpu_memory_utilization']:.2f}; overheads are estimates)")
        print("  per rank")
        estimated = "  (estimate: reported total less 0.5 GiB)" if e["total_is_estimate"] else ""
        _row("CUDA runtime total", fmt_bytes(e["total_bytes"]) + estimated, 4)
        _row("weights", fmt_bytes(e["weight_bytes"]), 4)
        _row("activation peak", fmt_bytes(e["activation_peak_bytes"]), 4)
        _row("non-torch memory", fmt_bytes(e["non_torch_bytes"]), 4)
        _row("KV cache", fmt_bytes(e["kv_bytes"]), 4)
        _row(f"blocks of {e['block_size']} tokens", f"{e['num_blocks']:,}", 4)
        print("  engine (all ranks)")
        _row("KV cache size", f"{e['tokens']:,} tokens", 4)
        at_context = f", {e['max_concurrency_at_context']:.2f}x at {e['context']:,}" \
            if e["context"] != e["max_model_len"] else ""
        _row("max concurrency", f"{e['max_concurrency']:.2f}x at {e['max_model_len']:,} tokens{at_context}", 4)


def _critical(args) -> dict:
    _model(args)  # a bad --model or --config fails here, as in the other commands
    bandwidth, flops = _chip_rates(args)
    b_w = dtype_bytes(args.weight_dtype, argument="--weight-dtype")
    result = {"critical_batch": float(critical_batch(flops, bandwidth, b_w)), "flops": flops, "bandwidth": bandwidth}
    if args.hardware:
        chip = get_chip(args.hardware)
        result["beta_alpha"] = float(critical_batch_beta_alpha(chip.flops("bf16"), bandwidth, b_w, 2))
    return result


def _print_critical(r: dict) -> None:
    print(f"B_crit = C * b_w / (2 W) = {r['critical_batch']:.1f}  (C = {fmt_flop_rate(r['flops'])}, W = {fmt_bandwidth(r['bandwidth'])})")
    if "beta_alpha" in r:
        print(f"the notes' beta * alpha (bf16 alpha, 2-byte activations) = {r['beta_alpha']:.1f}")


def _models(args) -> list[dict]:
    rows = []
    family = args.family.strip().lower() if args.family else None
    attention = args.attention.strip().lower() if args.attention else None
    if family is not None:
        choice("--family", family, sorted({get_model(n).family for n in model_names()}))
    if attention is not None:
        choice("--attention", attention, ATTENTION_KINDS + LAYER_KINDS)
    for name in model_names():
        m = get_model(name)
        if family is not None and m.family != family:
            continue
        if attention is not None and attention != m.attention and attention not in m.layer_kinds:
            continue
        rows.append({
            "name": name, "family": m.family, "attention": m.attention, "layer_kinds": list(m.layer_kinds),
            "param_count": m.param_count(),
            "active_param_count": m.active_param_count(), "kv_bytes_per_token_bf16": m.kv_bytes_per_token(),
            "supported_context": m.supported_context, "source": m.source, "context_source": m.context_source,
        })
    return rows


def _print_models(rows: list[dict]) -> None:
    print(f"{'model':<17}{'family':<10}{'attn':<6}{'params':>9}{'active':>9}{'KV B/token (bf16)':>19}")
    for r in rows:
        print(f"{r['name']:<17}{r['family']:<10}{r['attention']:<6}{fmt_count(r['param_count']):>9}"
              f"{fmt_count(r['active_param_count']):>9}{r['kv_bytes_per_token_bf16']:>19,.0f}")


def _hardware(args) -> list[dict]:
    rows = []
    vendor = args.vendor.strip().lower() if args.vendor else None
    if vendor is not None:
        choice("--vendor", vendor, sorted({get_chip(n).vendor for n in chip_names()}))
    for name in chip_names():
        c = get_chip(name)
        if vendor is not None and c.vendor != vendor:
            continue
        rows.append({"name": name, "vendor": c.vendor, "hbm_bytes": c.hbm_bytes, "device_bytes": c.device_bytes,
                     "runtime_bytes": c.runtime_bytes, "bandwidth": c.bandwidth,
                     "flops_by_dtype": dict(c.flops_by_dtype), "ridge_bf16": c.ridge_point(), "source": c.source})
    return rows


def _print_hardware(rows: list[dict]) -> None:
    print(f"{'chip':<11}{'HBM':>10}{'bandwidth':>12}{'bf16':>16}{'ridge':>7}")
    for r in rows:
        print(f"{r['name']:<11}{r['hbm_bytes'] / 1e9:>7.0f} GB{fmt_bandwidth(r['bandwidth']):>12}"
              f"{fmt_flop_rate(r['flops_by_dtype']['bf16']):>16}{r['ridge_bf16']:>7.0f}")


# ----- whole requests: prefill, run, links ------------------------------------------------

#: Every key of ``kvmath run --json``.
RUN_KEYS = {
    "model": "model preset name",
    "hardware": "chip preset name",
    "chips": "chips serving the batch (the layout's tp * cp * dp * pp)",
    "layout": "parallel layout: tp, cp, dp, pp, ep",
    "link": "link preset between the chips (null: communication not counted)",
    "batch": "requests served together B",
    "input_tokens": "prompt tokens per request (required)",
    "output_tokens": "output tokens per request (the first comes from the prefill)",
    "ttft_s": "time to first token: the prefill bound, seconds",
    "decode_s": "the output_tokens - 1 decode steps, strict bounds summed, seconds",
    "decode_no_overlap_s": "the same in the no-overlap form, seconds",
    "total_s": "ttft_s + decode_s, seconds",
    "time_per_output_token_s": "decode_s / (output_tokens - 1), seconds (null for one output token: no decode step)",
    "tokens_per_s_per_user": "1 / time_per_output_token_s (null for one output token)",
    "output_tokens_per_s": "batch * output_tokens / total_s (prefill included, as benchmarks count)",
    "output_tokens_per_s_per_chip": "output_tokens_per_s / chips",
    "memory_bytes_per_chip": "weights and cache the busiest chip holds at the last step, bytes",
    "budget": "--budget: the memory budget fits_in_memory compares with (device: the marketed size, the default)",
    "memory_budget_bytes": "bytes per chip that --budget gives (kvmath.memory_budget)",
    "fits_in_memory": "memory_bytes_per_chip <= memory_budget_bytes",
    "price_per_chip_hour": "--price-per-hour (null if not given)",
    "cost_per_million_tokens": "price per million output tokens: price x chips x total_s / 3600 / (batch x output_tokens) x 1e6 (null without a price)",
    "is_lower_bound": "true: every time is a lower bound (assumed 0.5 us per link hop, see `kvmath links`)",
}

#: Every key of ``kvmath prefill --json``.
PREFILL_KEYS = {
    "model": RUN_KEYS["model"], "hardware": RUN_KEYS["hardware"], "chips": RUN_KEYS["chips"],
    "layout": RUN_KEYS["layout"], "link": RUN_KEYS["link"], "batch": "prompts prefilled together B",
    "input_tokens": RUN_KEYS["input_tokens"], "chunk_tokens": "chunk size of chunked prefill (null: one pass)",
    "ttft_s": "strict lower bound on the prefill (time to first token), seconds",
    "weight_bytes_read_per_chip": "weight bytes one chip reads in one pass (chunked: per chunk, once; under pp its stage's)",
    "kv_bytes_written_per_chip": "cache bytes one chip writes (under pp, its stage's layers)",
    "flops_per_chip": "weight and attention FLOPs of one chip (under pp, its stage's share)",
    "comm_s": "lower bound on one chip's collectives in the pass, seconds (pipeline sends are in ttft_s's fill)",
    "bound": "what binds: compute, memory or communication (one pass)",
    "prompt_tokens_per_s": "batch * input_tokens / ttft_s",
}


def _add_request_parsers(sub) -> None:
    """The parsers of `kvmath prefill`, `kvmath run` and `kvmath links`."""
    def common(p):
        _add_model_options(p)
        _add_hardware_options(p)
        p.add_argument("--batch", type=_number, default=1, help="requests served together, B (default: 1)", action=_Once)
        p.add_argument("--input", type=_number, required=True, help="prompt tokens per request (required)", action=_Once)
        p.add_argument("--parallel", help="layout over the chips, e.g. 'tp=8' or 'tp=2,pp=4' (fields tp, cp, dp, pp, ep); "
                                          "default: tp = --chips", action=_Once)
        p.add_argument("--link", help="link between the chips (see `kvmath links`); default: none, communication not counted", action=_Once)
        p.add_argument("--chunk-tokens", type=_number, help="chunked prefill: tokens per chunk (default: the whole prompt at once)", action=_Once)

    def keys(table):
        return "keys of --json (base units: bytes, seconds, FLOPs):\n" + "\n".join(f"  {k:<30} {v}" for k, v in table.items())

    prefill = sub.add_parser("prefill", help="bound on the prefill (time to first token)",
                             formatter_class=argparse.RawDescriptionHelpFormatter, epilog=keys(PREFILL_KEYS))
    common(prefill)
    run = sub.add_parser("run", help="whole requests: TTFT, decode, tokens/s, cost",
                         formatter_class=argparse.RawDescriptionHelpFormatter, epilog=keys(RUN_KEYS))
    common(run)
    run.add_argument("--output", type=_number, required=True, help="output tokens per request (required)", action=_Once)
    run.add_argument("--price-per-hour", type=_number, help="price of one chip-hour, for cost_per_million_tokens (default: none, no cost)", action=_Once)
    run.add_argument("--budget", default="device", type=str.lower, choices=BUDGETS,
                     help="memory per chip that fits_in_memory compares with: the marketed size (default), the total "
                          "the device reports, the runtime's total less non-torch memory, or vLLM's "
                          "gpu_memory_utilization share of it (kvmath.memory_budget)", action=_Once)
    links = sub.add_parser("links", help="list link presets")
    links.add_argument("--json", action=_OnceFlag, help="print JSON instead of text (default: text)")


def _request_setup(args):
    """(model, chip, layout, link, options) for `prefill` and `run`, each bad value naming its option."""
    if not args.model and not args.config:
        raise ValueError(f"kvmath {args.command} needs --model or --config (--params alone has no layers or heads)")
    if args.params is not None or args.kv_bytes_per_token is not None:
        raise ValueError(f"kvmath {args.command} takes the model's own --params and --kv-bytes-per-token; drop them")
    model = _model(args)
    if not args.hardware:
        raise ValueError("give --hardware (--bandwidth and --flops may override its rates)")
    chip = get_chip(args.hardware)
    bandwidth, flops = _chip_rates(args)
    if args.bandwidth is not None or args.flops is not None:
        chip = chip.replace(bandwidth=bandwidth, flops_by_dtype={k: flops for k in chip.flops_by_dtype})
    layout = _layout_option(args, model)
    link = _link_option(args)
    options = dict(layout=layout, link=link, weights=_precision(args), kv_dtype=args.kv_dtype,
                   compute_dtype=args.compute_dtype,
                   chunk_tokens=None if args.chunk_tokens is None else int(positive_int("--chunk-tokens", args.chunk_tokens)))
    return model, chip, layout, link, options


def _layout_option(args, model) -> ParallelLayout:
    """--parallel (or --chips as tensor parallelism), checked against the model; errors name the option."""
    if args.parallel and model is None:
        raise ValueError("--parallel needs --model (its heads, layers and experts decide the layout)")
    if args.parallel and (args.params is not None or args.kv_bytes_per_token is not None):
        raise ValueError("--parallel takes the model's own --params and --kv-bytes-per-token; drop them")
    if args.parallel and getattr(args, "kv_shard", "heads") != "heads":
        raise ValueError("--kv-shard does not combine with --parallel: write dp= in the layout")
    try:
        layout = parse_layout(args.parallel) if args.parallel else ParallelLayout(
            tp=int(positive_int("--chips", 1 if args.chips is None else args.chips)))
        layout.check(model)
    except ValueError as err:
        raise ValueError(f"{'--parallel' if args.parallel else '--chips'}: {err}") from None
    if args.parallel and args.chips is not None and int(positive_int("--chips", args.chips)) != layout.n_chips:
        raise ValueError(f"--chips ({args.chips:g}) must equal the {layout.n_chips} chips of --parallel {args.parallel}")
    return layout


def _link_option(args):
    """The --link preset (None without one); an unknown name names the option."""
    if args.link is not None and not args.link.strip():
        raise ValueError("--link is empty: give a link preset (see `kvmath links`) or leave --link out")
    try:
        return get_link(args.link) if args.link else None
    except ValueError as err:
        raise ValueError(f"--link: {err}") from None


def _shape_fields(args, model, chip, layout, link) -> dict:
    return {"model": model.name, "hardware": chip.name, "chips": layout.n_chips, "layout": dataclasses.asdict(layout),
            "link": link.name if link else None}


def _prefill(args) -> dict:
    model, chip, layout, link, options = _request_setup(args)
    batch = int(positive_int("--batch", args.batch))
    s_in = int(positive_int("--input", args.input))
    ttft = prefill_bound(model, chip, batch, s_in, **options)
    one_pass = prefill_chip_step(model, chip, batch, s_in, layout=layout, link=link, weights=options["weights"],
                                 kv_dtype=args.kv_dtype, compute_dtype=args.compute_dtype)
    memory_s = (one_pass.weight_bytes_read + one_pass.kv_bytes_read) / one_pass.bandwidth
    compute_s = (one_pass.weight_flops + one_pass.attention_flops) / one_pass.flops
    bound = max((compute_s, "compute"), (memory_s, "memory"), (one_pass.comm_s, "communication"))[1]
    return {**_shape_fields(args, model, chip, layout, link), "batch": batch, "input_tokens": s_in,
            "chunk_tokens": options["chunk_tokens"], "ttft_s": float(ttft),
            "weight_bytes_read_per_chip": float(one_pass.weight_bytes_read),
            "kv_bytes_written_per_chip": float(one_pass.kv_bytes_read),
            "flops_per_chip": float(one_pass.weight_flops + one_pass.attention_flops),
            "comm_s": float(one_pass.comm_s), "bound": bound, "prompt_tokens_per_s": batch * s_in / float(ttft)}


def _print_prefill(r: dict) -> None:
    print(f"prefill, B = {r['batch']}, {r['input_tokens']:,} tokens each, {r['chips']} chip(s)")
    print(f"  weights read per chip    {fmt_bytes(r['weight_bytes_read_per_chip'])}")
    print(f"  cache written per chip   {fmt_bytes(r['kv_bytes_written_per_chip'])}")
    print(f"  FLOPs per chip           {fmt_flops(r['flops_per_chip'])}")
    print(f"  communication            {fmt_seconds(r['comm_s'])}")
    print(f"  TTFT, lower bound        {fmt_seconds(r['ttft_s'])}  ({r['bound']}-bound)")
    print(f"  prompt tokens/s          {r['prompt_tokens_per_s']:,.0f}")


def _run(args) -> dict:
    model, chip, layout, link, options = _request_setup(args)
    batch = int(positive_int("--batch", args.batch))
    s_in = int(positive_int("--input", args.input))
    s_out = int(positive_int("--output", args.output))
    price = None if args.price_per_hour is None else float(non_negative("--price-per-hour", args.price_per_hour))
    try:
        room = memory_budget(chip, args.budget)
    except ValueError as err:
        raise ValueError(f"--budget {args.budget}: {err}") from None
    r = request_times(model, chip, batch, s_in, s_out, price_per_chip_hour=price, **options)
    last = decode_step(model, chip, batch, s_in + s_out - 1, layout=layout, link=link, weights=options["weights"],
                       kv_dtype=args.kv_dtype, compute_dtype=args.compute_dtype).chip
    result = {
        **_shape_fields(args, model, chip, layout, link), "batch": batch, "input_tokens": s_in, "output_tokens": s_out,
        "ttft_s": float(r.ttft_s), "decode_s": float(r.decode_s), "decode_no_overlap_s": float(r.decode_no_overlap_s),
        "total_s": float(r.total_s),
        "time_per_output_token_s": float(r.time_per_output_token_s) if s_out > 1 else None,
        "tokens_per_s_per_user": float(r.tokens_per_s_per_user) if s_out > 1 else None,
        "output_tokens_per_s": float(r.output_tokens_per_s), "output_tokens_per_s_per_chip": float(r.output_tokens_per_s_per_chip),
        "memory_bytes_per_chip": float(last.memory_bytes), "budget": args.budget, "memory_budget_bytes": float(room),
        "fits_in_memory": bool(last.memory_bytes <= room),
        "price_per_chip_hour": price,
        "cost_per_million_tokens": None if price is None else float(r.cost_per_million_tokens),
        "is_lower_bound": r.is_lower_bound,
    }
    return result


def _print_run(r: dict) -> None:
    print(f"{r['batch']} request(s) of {r['input_tokens']:,} in, {r['output_tokens']:,} out, on {r['chips']} chip(s)")
    print(f"  time to first token      {fmt_seconds(r['ttft_s'])}")
    print(f"  decode                   {fmt_seconds(r['decode_s'])}  (no overlap: {fmt_seconds(r['decode_no_overlap_s'])})")
    print(f"  total                    {fmt_seconds(r['total_s'])}")
    tpot = r["time_per_output_token_s"]
    print(f"  time per output token    {'n/a (one output token: no decode step)' if tpot is None else fmt_seconds(tpot)}")
    print(f"  output tokens/s          {r['output_tokens_per_s']:,.1f}  ({r['output_tokens_per_s_per_chip']:,.1f} per chip)")
    fits = "fits" if r["fits_in_memory"] else "does NOT fit"
    print(f"  memory per chip          {fmt_bytes(r['memory_bytes_per_chip'])}  ({fits} in {fmt_bytes(r['memory_budget_bytes'])}, "
          f"budget: {r['budget']})")
    if r["cost_per_million_tokens"] is not None:
        print(f"  cost per 1M output tokens {r['cost_per_million_tokens']:.4f} (at {r['price_per_chip_hour']:g} per chip-hour)")
    if not r["fits_in_memory"]:
        print("  warning: the batch's caches do not fit beside the weights", file=sys.stderr)


def _links() -> list[dict]:
    return [dataclasses.asdict(get_link(name)) for name in link_names()]


def _print_links(rows: list[dict]) -> None:
    print(f"{'link':<15}{'per direction':>15}{'source states':>26}{'hop latency':>15}  in-switch")
    for r in rows:
        stated = f"{fmt_bandwidth(r['stated_bandwidth'])} {'both' if r['stated_as'] == 'bidirectional' else 'one way'}"
        latency = fmt_seconds(r["latency_s"]) + ("*" if r["latency_is_assumption"] else " ")
        print(f"{r['name']:<15}{fmt_bandwidth(r['bandwidth']):>15}{stated:>26}{latency:>15}"
              f"  {'yes' if r['in_switch_reduction'] else 'no'}")
    print("* assumed: no vendor publishes a per-hop latency (see each preset's latency_source)")


_COMMANDS = {
    "decode": (_decode, _print_decode),
    "capacity": (_capacity, _print_capacity),
    "critical-batch": (_critical, _print_critical),
    "models": (_models, _print_models),
    "hardware": (_hardware, _print_hardware),
    "prefill": (_prefill, _print_prefill),
    "run": (_run, _print_run),
    "links": (lambda args: _links(), _print_links),
}


#: Library argument names, and what a user of the command line typed for them.
_OPTION_WORDS = {
    "n_chips": "--chips", "hbm_bytes": "--hbm-bytes", "param_count": "--params",
    "kv_bytes_per_token": "--kv-bytes-per-token", "kv_bytes_per_seq": "--kv-bytes-per-token x --context",
    "kv_cache_bytes": "--batch x --context x --kv-bytes-per-token", "param_bytes": "--params x --weight-dtype",
    "weight_bytes": "the weights (--params x --weight-dtype)", "bytes_per_param": "--weight-dtype",
    "kv_budget_bytes": "the KV budget", "step_s": "the step time",
}


def _typed(args) -> str:
    """The numeric options the user typed, as they would retype them."""
    given = getattr(args, "_given", None) or {}
    def short(x: float) -> str:
        return f"{x:g}" if float(f"{x:g}") == x else repr(x)

    shown = [f"{opt} {short(getattr(args, dest))}" for dest, opt in given.items()
             if isinstance(getattr(args, dest), float)]
    return ", ".join(shown) or "the presets"


def _user_message(args, err: Exception) -> str:
    """``err`` worded for the command line: option names, and overflow blamed on what was typed."""
    text = str(err)
    if isinstance(err, (ResultOverflow, ArithmeticError)) or ("must be finite" in text and "--" not in text):
        return f"the result overflows a float64 (it would be inf or nan) for {_typed(args)}; use smaller numbers"
    for word, option in _OPTION_WORDS.items():
        text = re.sub(rf"(?<![\w-]){word}(?![\w-])", option, text)
    return text


def _non_finite(value) -> bool:
    if isinstance(value, dict):
        return any(_non_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_non_finite(v) for v in value)
    return isinstance(value, float) and not math.isfinite(value)


def _render(args, result) -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        if args.json:
            print(json.dumps(result, indent=2, allow_nan=False))
        else:
            _COMMANDS[args.command][1](result)
    return buffer.getvalue()


def _encodable(text: str, stream) -> str:
    """``text`` as ``stream`` can write it: "µs" becomes "us" on an ASCII-only terminal."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        text.encode(encoding)
        return text
    except (UnicodeEncodeError, LookupError):
        text = text.replace("µ", "u")
        return text.encode(encoding, errors="replace").decode(encoding, errors="replace")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvmath`` console script; returns the exit status."""
    args = _build_parser().parse_args(argv)
    compute, show = _COMMANDS[args.command]
    try:
        _refuse_ignored(args)
        with np.errstate(all="ignore"):  # an overflow is reported once, as one line, below
            result = compute(args)
        if _non_finite(result):
            raise ResultOverflow("non-finite result")
        text = _render(args, result)
    except (ValueError, ArithmeticError) as err:
        message = _encodable(f"kvmath {args.command}: error: {_user_message(args, err)}\n", sys.stderr)
        sys.stderr.write(message)
        return 2
    try:
        sys.stdout.write(_encodable(text, sys.stdout))
        sys.stdout.flush()
    except BrokenPipeError:
        # `kvmath models | head` closes the pipe early: that is not an error.
        # Point stdout at devnull so the flush at exit does not fail again
        # (the recipe in Python's signal module documentation).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
