"""The ``kvmath`` command line: a thin layer from options to one :class:`kvmath.Deployment` and its answer.

Every command that computes builds one Deployment from its options and asks
it the question (``decode``: :meth:`~kvmath.Deployment.step`, ``prefill``:
:meth:`~kvmath.Deployment.prefill` and :meth:`~kvmath.Deployment.request`,
``run``: :meth:`~kvmath.Deployment.request`, ``capacity``:
:meth:`~kvmath.Deployment.capacity`, ``critical-batch``:
:meth:`~kvmath.Deployment.critical_batch`). ``--json`` prints the result's
``to_dict()``, so Python and JSON cannot disagree; the text form formats the
same result at the edge. Without ``--model`` (``--params`` and
``--kv-bytes-per-token``) ``decode`` and ``capacity`` use the notes' closed
forms (:func:`kvmath.formulas.step_breakdown`, :func:`kvmath.formulas.fit`).
Bad input exits with status 2 and a one-line message on stderr; it never
shows a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import re
import sys
import warnings
from collections import Counter
from typing import Sequence

import numpy as np

from . import formulas
from .deployment import Deployment, Formats, binds
from .formatting import fmt_bandwidth, fmt_bytes, fmt_count, fmt_flop_rate, fmt_flops, fmt_seconds
from .hardware import Chip
from .layout import KV_SHARDINGS, ParallelLayout, parse_parallel
from .links import Link
from .models import Model
from .units import DTYPE_BYTES, dtype_bytes
from .validation import ResultOverflow, choice, fraction, non_negative, positive, positive_int

# kvmath.memory (the engines' budgets) is imported where a command needs it: a decode answer does not, and loading
# it cost a few percent of every start-up (benchmarks/bench_startup.py).

COMPUTE_DTYPES = ("bf16", "fp16", "fp8", "int8", "fp4")

#: Every key of ``kvmath decode --json`` with --model or --config: :class:`kvmath.Step`'s to_dict(). ``--help`` prints it.
DECODE_KEYS = {
    "batch": "sequences per step B", "context": "tokens in each sequence's cache S",
    "tokens_per_seq": "tokens each sequence pushes through the weights (1 for decoding)",
    "micro_batch": "sequences one chip's weights see per pass (B; max(ceil(B / dp) / pp, 1) under dp and pp)",
    "weight_bytes_read": "weight bytes the busiest chip reads (the k-expert floor for MoE)",
    "kv_bytes_read": "KV cache bytes the busiest chip reads",
    "weight_flops": "FLOPs of the chip's weight matmuls", "attention_flops": "FLOPs of the chip's attention over the cache",
    "weight_bytes_resident": "weight bytes the chip holds (its stage's layers, its share; every expert)",
    "kv_bytes_resident": "cache bytes the chip holds",
    "kv_read_s": "seconds to read the chip's cache", "weight_read_s": "seconds to read the chip's weights",
    "weight_compute_s": "seconds of the chip's weight math", "attention_compute_s": "seconds of the chip's attention math",
    "memory_s": "seconds to read all the chip's bytes, (kv + weight bytes) / W",
    "compute_s": "seconds of all the chip's math, (weight + attention FLOPs) / C",
    "comm_s": "lower bound on the chain of communication over --link / --node-link, seconds (0 on one chip or with --link none)",
    "overhead_s": "fixed per-step overhead (--overhead-s; an estimate)",
    "strict_s": "strict lower bound on the step: overhead + max(bytes / W, FLOPs / C, comm_s), seconds",
    "no_overlap_s": "no-overlap form: overhead + max(kv_read_s, attention_compute_s) + max(weight_read_s, weight_compute_s) + comm_s",
    "is_lower_bound": "true when the times are bounds; false when --efficiency < 1 or --overhead-s > 0 make them estimates",
    "n_chips": "chips of the layout", "bandwidth": "bytes/s per chip used (peak x --efficiency)",
    "flops": "FLOP/s per chip the matmuls and attention run at",
    "binds": "what sets strict_s: memory, compute or communication",
    "tokens_per_s": "batch / strict_s: tokens/s of the whole batch",
    "memory_bytes": "weight_bytes_resident + kv_bytes_resident",
}


class _Help(argparse.HelpFormatter):
    """Help at a fixed width: argparse asks shutil for the terminal's width for every option it adds (importing
    shutil, bz2 and lzma), a tenth of a command's start-up, for help that is rarely printed."""

    def __init__(self, prog, width=100, **kwargs):
        super().__init__(prog, width=width, **kwargs)


class _RawHelp(_Help, argparse.RawDescriptionHelpFormatter):
    """:class:`_Help` that keeps the description's and epilog's own line breaks."""


class _Parser(argparse.ArgumentParser):
    """argparse, but every error is one line on stderr and exit status 2."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

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


class _OneLineHelp(_Help):
    """``kvmath --help``: each command and its help on one line (argparse puts a long name on a line of its own)."""

    def __init__(self, prog):
        super().__init__(prog, max_help_position=24, width=100)
        self._action_max_length = 22  # "    critical-batch" and two spaces


def _add_model_choice(p: argparse.ArgumentParser, help_model: str) -> None:
    which = p.add_mutually_exclusive_group()
    which.add_argument("--model", help=help_model, action=_Once)
    which.add_argument("--config", metavar="PATH",
                       help="a Hugging Face config.json (or its directory) instead of --model (default: none)", action=_Once)


def _add_model_options(p: argparse.ArgumentParser, notes: bool) -> None:
    if notes:
        _add_model_choice(p, "model preset (see `kvmath models`); default: none, then --params and "
                             "--kv-bytes-per-token are both needed (the notes' closed forms)")
        p.add_argument("--params", type=_number, action=_Once,
                       help="without --model: parameters each token multiplies by, a count (default: none)")
        p.add_argument("--kv-bytes-per-token", type=_number, action=_Once,
                       help="without --model: KV cache bytes per token (default: none)")
    else:
        _add_model_choice(p, "model preset (see `kvmath models`); default: none, then --config is needed")
    p.add_argument("--weight-dtype", default="bf16", type=str.lower, choices=sorted(DTYPE_BYTES),
                   help="format of the stored weights, scales included (default: bf16; with --config, the "
                        "formats the config stores)", action=_Once)
    p.add_argument("--lm-head-dtype", type=str.lower, choices=sorted(DTYPE_BYTES),
                   help="format of the LM head (default: --weight-dtype)", action=_Once)
    p.add_argument("--embedding-dtype", type=str.lower, choices=sorted(DTYPE_BYTES),
                   help="format of the input embedding table (default: --weight-dtype)", action=_Once)
    p.add_argument("--experts-dtype", type=str.lower, choices=sorted(DTYPE_BYTES),
                   help="format of the routed experts, e.g. mxfp4 for gpt-oss as published (default: --weight-dtype)",
                   action=_Once)
    p.add_argument("--kv-dtype", default="bf16", type=str.lower, choices=sorted(DTYPE_BYTES),
                   help="cached keys and values (default: bf16)", action=_Once)


def _add_chip_options(p: argparse.ArgumentParser, rates: bool = True) -> None:
    if rates:
        p.add_argument("--hardware", action=_Once,
                       help="chip preset (see `kvmath hardware`); default: none, then --bandwidth and --flops are both needed")
        p.add_argument("--bandwidth", type=_number, action=_Once,
                       help="HBM bytes/s per chip; overrides the --hardware preset's (default: from the preset)")
        p.add_argument("--flops", type=_number, action=_Once,
                       help="dense FLOP/s per chip, every format; overrides the --hardware preset's rates (default: from the preset)")
    else:
        p.add_argument("--hardware", help="chip preset (see `kvmath hardware`; required with --model or --config; default: none)",
                       action=_Once)
    p.add_argument("--compute-dtype", type=str.lower, choices=COMPUTE_DTYPES, action=_Once,
                   help="rate the matmuls run at (default: the weight format's own where the chip has it, else bf16)")
    p.add_argument("--json", action=_OnceFlag, help="print one JSON object instead of text (default: text)")


def _add_layout_options(p: argparse.ArgumentParser, capacity: bool = False) -> None:
    chips = ("number of chips N, as tensor parallelism tp=N (default: the fewest tp whose chips hold the weights)"
             if capacity else "number of chips N, as tensor parallelism tp=N (default: 1)")
    p.add_argument("--chips", type=_number, help=chips, action=_Once)
    p.add_argument("--parallel", action=_Once,
                   help="layout over the chips instead of --chips, e.g. 'tp=4,pp=2', 'tp=8,kv=batch' or "
                        "'dp=144,ep=144,redundant=32,dispatch=fp8' (fields tp, cp, dp, pp, ep; kv=heads|batch; with ep: "
                        "redundant=N extra expert copies spread over the ep chips, dispatch=FORMAT the format tokens "
                        "travel to their experts in, e.g. fp8 as DeepSeek-V3 dispatches; the combine stays in the "
                        "activations' bf16) (default: tp = --chips)")
    p.add_argument("--kv-shard", type=str.lower, choices=KV_SHARDINGS, action=_Once,
                   help="with --chips: split the cache by heads or by sequences (batch), the same as "
                        "--parallel tp=N,kv=batch (default: heads)")
    p.add_argument("--link", action=_Once,
                   help="a link preset (see `kvmath links`) or 'none' to count no communication. A link inside a node "
                        "(nvlink4, pcie4-x16, ...) is the chips' fabric in a node; a network between nodes "
                        "(ib-ndr400), given alone, is the link between nodes, the chip's own link staying inside "
                        "each node: --parallel tp=8,pp=2 --link ib-ndr400 on H100s keeps tensor parallelism on "
                        "NVLink and sends the pipeline hop over InfiniBand (default: the chip preset's own "
                        "interconnect, one fabric for every chip)")
    p.add_argument("--node-link", action=_Once,
                   help="link between nodes (see `kvmath links`), --link then staying inside a node (default: the "
                        "network a lone --link names, else the same fabric as --link)")
    p.add_argument("--chips-per-node", type=_number, action=_Once,
                   help="chips one node holds; chips fill nodes in the order tp, cp, dp, pp, and a collective over a "
                        "group wider than a node crosses the link between nodes (default: the chip preset's node, "
                        "8 for HGX H100/H200/A100 and MI300X, 72 for GB200 NVL72; every chip where the preset has none)")
    p.add_argument("--nodes", type=_number, action=_Once,
                   help="nodes the layout's chips fill evenly, instead of --chips-per-node (default: as --chips-per-node)")


def _add_estimate_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--estimate", action=_OnceFlag,
                   help="beside every time, an estimate fitted on published measurements, its 80%% interval, its "
                        "regime and the regime's error out of sample (kvmath.estimate; default: bounds only)")
    p.add_argument("--engine", action=_Once, help=_ENGINE_HELP)


_ENGINE_HELP = ("the serving engine, which sets the all-reduce the estimate prices the collectives with "
                "(kvmath.estimate.ENGINE_ALGORITHMS: NCCL for gpt-fast and PyTorch, the engine's own kernel for small "
                "messages where faster for vLLM, SGLang and TensorRT-LLM; default: the fastest measured curve)")


def _engine(args) -> str | None:
    """``--engine``, checked: a name of :data:`kvmath.estimate.ENGINE_ALGORITHMS`, given only with ``--estimate``."""
    if args.engine is None:
        return None
    from .estimate import ENGINE_ALGORITHMS

    if not args.estimate:
        raise ValueError("--engine sets the estimate's all-reduce: give --estimate too")
    names = {name.lower(): name for name in ENGINE_ALGORITHMS}  # the table's spelling, matched in any case
    return names[choice("--engine", args.engine, names)]


def _add_check_commands(sub) -> None:
    """``kvmath check WHAT``: one subcommand per kind of thing checked (each its own parser and function)."""
    check = sub.add_parser("check", help="check a measured figure against the bound and the estimate, or another "
                                         "tool's figure for a config.json against kvmath's")
    kinds = check.add_subparsers(dest="check_command", required=True, parser_class=_Parser, metavar="WHAT",
                                 prog="kvmath check", help="what to check (required): measurement, config")
    m = kinds.add_parser("measurement", help="does a measured figure beat the bound (and why), and where does it "
                                             "fall against the estimate (kvmath.calibration.check)")
    _add_model_options(m, notes=False)
    _add_chip_options(m)
    m.add_argument("--chips", type=_number, help="number of chips N, as tensor parallelism tp=N (default: 1)",
                   action=_Once)
    m.add_argument("--parallel", action=_Once, help="layout over the chips instead of --chips, e.g. 'tp=4,pp=2' "
                                                    "(default: tp = --chips)")
    m.add_argument("--link", action=_Once, help="link between the chips (see `kvmath links`), or 'none' "
                                                "(default: the chip preset's own interconnect)")
    m.add_argument("--metric", required=True, type=str.lower, action=_Once,  # checked by the Measurement it builds
                   help="what was measured: tokens/s per sequence over a run (seq_tok_s), output tokens/s of the "
                        "batch (out_tok_s), tokens/s per user while decoding (user_tok_s), seconds per decode step "
                        "(s_per_token), seconds to the first token (ttft_s), prompt tokens/s (prefill_tok_s) (required)")
    m.add_argument("--measured", type=_number, required=True, action=_Once,
                   help="the figure, in the metric's unit: tokens/s, or seconds for s_per_token and ttft_s (required)")
    m.add_argument("--batch", type=_number, default=1, help="sequences served together, B (default: 1)", action=_Once)
    m.add_argument("--input", type=_number, default=0, action=_Once,
                   help="prompt tokens per sequence; the context of a step metric (default: 0)")
    m.add_argument("--output", type=_number, default=1, help="output tokens per sequence (default: 1)", action=_Once)
    m.add_argument("--chunk-tokens", type=_number, action=_Once,
                   help="prefill metrics: tokens per chunk (default: the whole prompt at once)")
    m.add_argument("--tokens-per-step", type=_number, default=1, action=_Once,
                   help="tokens each sequence gains per step (speculative decoding, MTP; default: 1)")
    m.add_argument("--per-chip", action=_OnceFlag, help="out_tok_s: the figure is per chip (default: all chips)")
    m.add_argument("--engine", action=_Once, help=_ENGINE_HELP + "; recorded in the answer")
    m.set_defaults(kv_shard=None)  # the layout's reader (_layout) asks for it; --parallel holds kv=batch here
    _add_check_config(kinds)


def _build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; with ``only``, that command's alone (half the start-up of building them all)."""
    # wide enough that every command and its help share one line
    parser = _Parser(prog="kvmath", description="The arithmetic of LLM inference: bounds from a model, a chip and a layout.",
                     formatter_class=_OneLineHelp)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND",
                                prog="kvmath")  # a prog spares argparse a help formatter (and shutil) per start

    if only in (None, "decode"):
        keys = "\n".join(f"  {k:<27} {v}" for k, v in DECODE_KEYS.items())
        decode = sub.add_parser(
            "decode", help="bounds on one decode step and tokens/s (Deployment.step)",
            formatter_class=_RawHelp,
            epilog=f"keys of --json with --model or --config (kvmath.Step; base units: bytes, seconds, FLOPs):\n{keys}\n"
                   f"  {'estimate':<27} with --estimate: kvmath.estimate.Estimate of strict_s (estimate_s, "
                   "estimate_low_s, estimate_high_s, regime, ...)\n"
                   f"  {'weights_formats':<27} with --config and no --weight-dtype: each weight group's format, as "
                   "the config stores it\n"
                   "with --params alone: the keys of kvmath.formulas.step_breakdown",
        )
        _add_model_options(decode, notes=True)
        _add_chip_options(decode)
        _add_layout_options(decode)
        decode.add_argument("--batch", type=_number, required=True, help="sequences per step, B (required)", action=_Once)
        decode.add_argument("--context", type=_number, required=True, help="tokens in each sequence's cache, S (required)", action=_Once)
        decode.add_argument("--efficiency", type=_number, default=1.0,
                            help="achieved fraction of peak bandwidth (default: 1; below 1 the times are estimates)", action=_Once)
        decode.add_argument("--overhead-s", type=_number, default=0.0,
                            help="fixed seconds per step, e.g. kernel launches (default: 0; above 0 the times are estimates)", action=_Once)
        _add_estimate_option(decode)

    if only in (None, "capacity"):
        from .memory import BLOCK_SIZE, GPU_MEMORY_UTILIZATION, MLA_BLOCK_BY_CHIP, MLA_BLOCK_SIZE, VLLM_ENGINES
        capacity = sub.add_parser("capacity", help="weights, KV budget, tokens and batch that fit (Deployment.capacity)")
        _add_model_options(capacity, notes=True)
        capacity.add_argument("--hardware", action=_Once,
                              help="chip preset (see `kvmath hardware`); default: none, then --hbm-bytes is needed")
        capacity.add_argument("--json", action=_OnceFlag, help="print one JSON object instead of text (default: text)")
        _add_layout_options(capacity, capacity=True)
        capacity.add_argument("--hbm-bytes", type=_number, help="memory per chip in bytes; overrides the --hardware preset's (default: from the preset)", action=_Once)
        capacity.add_argument("--context", type=_number, required=True, help="tokens per sequence, S (required)", action=_Once)
        capacity.add_argument("--budget", default="device", type=str.lower, choices=("device", "reported", "reserve"),
                              help="memory per chip: the marketed size (default), the total the device reports "
                                   "(nvidia-smi), or the CUDA runtime's total less the process's non-torch memory; "
                                   "a --hbm-bytes number is taken as the reported total", action=_Once)
        capacity.add_argument("--engine", type=str.lower, choices=("vllm",),
                              help="also size the KV cache as this serving engine does, at TP = the layout's chips "
                                   "(default: none)", action=_Once)
        capacity.add_argument("--gpu-memory-utilization", type=_number,
                              help=f"vLLM's fraction of the CUDA runtime total (default: {GPU_MEMORY_UTILIZATION})", action=_Once)
        capacity.add_argument("--block-size", type=_number, action=_Once,
                              help=f"tokens per vLLM block asked for (default: {BLOCK_SIZE}; for MLA the block vLLM "
                                   f"sets on the chip, {MLA_BLOCK_BY_CHIP['h200']} on Hopper, "
                                   f"{MLA_BLOCK_BY_CHIP['b200']} on the B200 and GB200 (compute capability 10.0); "
                                   f"for DSA {MLA_BLOCK_SIZE} on Hopper and datacenter Blackwell, whatever is asked, "
                                   "as vLLM forces it; vLLM v0.10-v0.11's rules, kvmath.memory.vllm_block_size)")
        capacity.add_argument("--max-model-len", type=_number, help="vLLM's --max-model-len (default: --context)", action=_Once)
        capacity.add_argument("--vllm-version", type=str.lower, choices=VLLM_ENGINES,
                              help="v1 (default: hybrid sliding-window groups) or v0 (every layer full attention)", action=_Once)
        _add_vllm_rules(capacity, "with --engine vllm: ")
        from .cli_serving import add_prefix_options
        add_prefix_options(capacity)

    if only in (None, "critical-batch"):
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

    for name, text in (("prefill", "bound on the prefill, time to first token (Deployment.prefill, .request)"),
                       ("run", "whole requests: TTFT, decode, tokens/s, cost (Deployment.request)")):
        if only not in (None, name):
            continue
        p = sub.add_parser(name, help=text)
        _add_model_options(p, notes=False)
        _add_chip_options(p)
        _add_layout_options(p)
        p.add_argument("--batch", type=_number, default=1, help="requests served together, B (default: 1)", action=_Once)
        p.add_argument("--input", type=_number, required=True, help="prompt tokens per request (required)", action=_Once)
        p.add_argument("--chunk-tokens", type=_number, help="chunked prefill: tokens per chunk (default: the whole prompt at once)", action=_Once)
        from .cli_serving import add_prefix_options
        add_prefix_options(p)
        _add_estimate_option(p)
        if name == "run":
            from .memory import BUDGETS
            p.add_argument("--output", type=_number, required=True, help="output tokens per request (required)", action=_Once)
            p.add_argument("--price-per-hour", type=_number, action=_Once,
                           help="price of one chip-hour, for cost_per_million_tokens (default: none, no cost)")
            p.add_argument("--budget", default="device", type=str.lower, choices=BUDGETS, action=_Once,
                           help="text only: the memory per chip the last step's memory is compared with "
                                "(kvmath.memory.memory_budget; default: device, the marketed size)")

    if only in (None, "check"):
        _add_check_commands(sub)

    if only in (None, "models"):
        models = sub.add_parser("models", help="list model presets")
        models.add_argument("--family", help="only this family (llama, qwen, gemma, ...; default: all)", action=_Once)
        models.add_argument("--attention", help="only models with this attention (mha, gqa, mqa, mla) or layer kind "
                                                "(full, sliding, chunked, linear; default: all)", action=_Once)
        models.add_argument("--json", action=_OnceFlag, help="print JSON instead of text (default: text)")
    if only in (None, "hardware"):
        hardware = sub.add_parser("hardware", help="list chip presets")
        hardware.add_argument("--vendor", help="only this vendor (nvidia, amd, google, apple; default: all)", action=_Once)
        hardware.add_argument("--json", action=_OnceFlag, help="print JSON instead of text (default: text)")
    if only in (None, "links"):
        links = sub.add_parser("links", help="list link presets")
        links.add_argument("--json", action=_OnceFlag, help="print JSON instead of text (default: text)")
    _add_serving_parsers(sub, only)
    return parser


def _vllm_default(name: str):
    """The default of :func:`kvmath.memory.vllm_kv_cache`'s argument ``name``, read from its signature."""
    import inspect

    from .memory import vllm_kv_cache

    return inspect.signature(vllm_kv_cache).parameters[name].default


def _add_vllm_rules(p, applies: str) -> None:
    """``--mamba-cache-mode``, ``--tokens-rule``, ``--hybrid-kv-cache-manager``, ``--vllm-dtype`` and
    ``--mamba-ssm-cache-dtype``: vLLM's rules that differ between releases (:func:`kvmath.memory.vllm_kv_cache`).

    The defaults shown are the library's own (read from its signature), so the two cannot disagree; an option
    not given is not passed on."""
    from .memory import VLLM_DEFAULTS_VERSION, VLLM_DTYPES, VLLM_MAMBA_CACHE_MODES, VLLM_TOKEN_RULES

    default = {k: _vllm_default(k) for k in ("mamba_cache_mode", "tokens_rule")}
    p.add_argument("--mamba-cache-mode", type=str.lower, choices=VLLM_MAMBA_CACHE_MODES, action=_Once,
                   help=f"{applies}how vLLM caches a linear (Mamba, Gated DeltaNet) layer's state, its "
                        "CacheConfig.mamba_cache_mode (MambaSpec.max_memory_usage_bytes, vllm/v1/kv_cache_interface.py "
                        "at commit 001cabc1): none, one state page per request (prefix caching off; vLLM's default "
                        "through v0.11); align, two, the running state and the one kept at the last block boundary "
                        "(what vLLM selects for Gated DeltaNet models with prefix caching on); all, one per attention "
                        f"block of max_model_len (default: {default['mamba_cache_mode']})")
    p.add_argument("--tokens-rule", type=str.lower, choices=VLLM_TOKEN_RULES, action=_Once,
                   help=f"{applies}what vLLM's 'GPU KV cache size: N tokens' line counts (_report_kv_cache_config, "
                        "vllm/v1/core/kv_cache_utils.py): blocks, num_blocks // groups x the smallest block size "
                        "(vLLM v0.10 to v0.20); concurrency, int(max concurrency x max_model_len) (vLLM v0.29.0; the "
                        f"switch falls between v0.20 and v0.29) (default: {default['tokens_rule']})")
    p.add_argument("--hybrid-kv-cache-manager", type=str.lower, choices=("on", "off"), action=_Once,
                   help=f"{applies}vLLM's hybrid KV-cache manager: off is --disable-hybrid-kv-cache-manager (every "
                        f"attention layer paged as full attention) (default: vLLM {VLLM_DEFAULTS_VERSION}'s, on except "
                        "for chunked local attention (Llama 4), which later releases turn on too)")
    p.add_argument("--vllm-dtype", type=str.lower, choices=VLLM_DTYPES, action=_Once,
                   help=f"{applies}vLLM's --dtype, the dtype of unquantized weights and linear-layer states "
                        f"(default: {_vllm_default('dtype')}, a float32 checkpoint in bf16)")
    p.add_argument("--mamba-ssm-cache-dtype", type=str.lower, choices=VLLM_DTYPES, action=_Once,
                   help=f"{applies}vLLM's --mamba-ssm-cache-dtype, the recurrent state's dtype (default: "
                        f"{_vllm_default('mamba_ssm_cache_dtype')}, the model dtype or the config's mamba_ssm_dtype)")


#: Destinations of :func:`_add_vllm_rules`' options and the library argument each sets.
_VLLM_RULES = {"mamba_cache_mode": "mamba_cache_mode", "tokens_rule": "tokens_rule",
               "hybrid_kv_cache_manager": "hybrid", "vllm_dtype": "dtype",
               "mamba_ssm_cache_dtype": "mamba_ssm_cache_dtype"}


def _vllm_rules(args) -> dict:
    """The options of :func:`_add_vllm_rules` given, as :func:`kvmath.memory.vllm_kv_cache` arguments."""
    rules = {arg: getattr(args, dest) for dest, arg in _VLLM_RULES.items() if getattr(args, dest) is not None}
    if "hybrid" in rules:
        rules["hybrid"] = rules["hybrid"] == "on"
    return rules


def _add_check_config(checks) -> None:
    """``kvmath check config FILE --<figure> N``: :func:`kvmath.config_check.check_config` from the command line."""
    p = checks.add_parser("config", help="a calculator's or engine's figure for a config.json, against kvmath's",
                          description="Compare a figure another calculator or an engine gives for a config.json "
                                      "with kvmath's, and name the misreading of the config that gives it "
                                      "(linear layers as full attention, windows ignored, MLA as full "
                                      "attention, the DSA indexer dropped, shared-KV layers counted, stored "
                                      "precision ignored). Exits 0 where the figures agree, 1 where they do not, "
                                      "2 on bad input.")
    p.add_argument("file", metavar="FILE", help="the config.json (or its directory; required)")
    figure = p.add_mutually_exclusive_group(required=True)
    figure.add_argument("--kv-bytes-per-token", type=_number, action=_Once,
                        help="their KV bytes an engine reserves per token, every attention layer (one figure is required)")
    figure.add_argument("--seq-bytes", type=_number, action=_Once,
                        help="their bytes of cache for one sequence of --tokens tokens (one figure is required)")
    figure.add_argument("--vllm-tokens", type=_number, action=_Once,
                        help="vLLM's 'GPU KV cache size: N tokens' for --available-gib of KV memory "
                             "(one figure is required; through v0.20 it equals the memory over every layer paged "
                             "as full attention, so it cannot tell the hybrid misreadings apart: "
                             "--vllm-concurrency can)")
    figure.add_argument("--vllm-concurrency", type=_number, action=_Once,
                        help="vLLM's 'Maximum concurrency for N tokens per request: X x' for --available-gib of KV "
                             "memory and --max-model-len N (one figure is required)")
    figure.add_argument("--weight-bytes", type=_number, action=_Once,
                        help="their bytes of weights in memory (one figure is required)")
    p.add_argument("--tokens", type=_number, action=_Once,
                   help="with --seq-bytes: the sequence's length (required there; default: none)")
    p.add_argument("--available-gib", type=_number, action=_Once,
                   help="with --vllm-tokens or --vllm-concurrency: vLLM's 'Available KV cache memory' per rank, GiB "
                        "(required there; default: none)")
    for opt, default, text in (("--max-model-len", 8192, "vLLM's --max-model-len"),
                               ("--block-size", None, "tokens per vLLM block asked for (default: 16, or 64 for "
                                                      "MLA, FlashMLA's on Hopper; DSA 64 whatever is asked)"),
                               ("--tensor-parallel", 1, "vLLM's --tensor-parallel-size"),
                               ("--max-num-batched-tokens", None, "vLLM's --max-num-batched-tokens (default: "
                                                                  "vLLM's for the engine)")):
        p.add_argument(opt, type=_number, action=_Once,
                       help=f"with --vllm-tokens or --vllm-concurrency: {text}"
                            + (f" (default: {default})" if default else ""))
    _add_vllm_rules(p, "with --vllm-tokens or --vllm-concurrency: ")
    p.add_argument("--kv-dtype", default="bf16", type=str.lower, choices=sorted(DTYPE_BYTES), action=_Once,
                   help="cached keys and values (default: bf16; with --vllm-tokens, vLLM's --kv-cache-dtype auto: "
                        "the model dtype, or fp8_ds_mla for DeepSeek-V3.2 as vLLM v0.11 stores it)")
    p.add_argument("--json", action=_OnceFlag, help="print the result's to_dict() as JSON (default: text)")


#: ``kvmath check`` subcommands: name -> compute(args) returning an _Answer (each check adds its own).
_CHECKS = {}


def _check(args) -> "_Answer":
    return _CHECKS[args.check_command](args)


def _check_config(args) -> "_Answer":
    from .config_check import check_config

    figures = {"kv_bytes_per_token": "--kv-bytes-per-token", "seq_bytes": "--seq-bytes",
               "vllm_tokens": "--vllm-tokens", "vllm_concurrency": "--vllm-concurrency",
               "weight_bytes": "--weight-bytes"}
    quantity = next(q for q in figures if getattr(args, q) is not None)
    engine = ("vllm_tokens", "vllm_concurrency")
    needs = {"seq_bytes": ("tokens",), "vllm_tokens": ("available_gib",), "vllm_concurrency": ("available_gib",)}
    applies = {"tokens": ("seq_bytes",), "available_gib": engine, "max_model_len": engine, "block_size": engine,
               "tensor_parallel": engine, "max_num_batched_tokens": engine, **{dest: engine for dest in _VLLM_RULES}}
    for dest, owners in applies.items():
        if getattr(args, dest) is not None and quantity not in owners:
            raise ValueError(f"{_option(args, dest)} applies to {' and '.join(figures[o] for o in owners)} only")
    for dest in needs.get(quantity, ()):
        if getattr(args, dest) is None:
            raise ValueError(f"{figures[quantity]} needs --{dest.replace('_', '-')}")
    if _given(args, "kv_dtype") and quantity == "weight_bytes":
        raise ValueError("--kv-dtype has no effect on --weight-bytes; drop it")
    figure = positive(figures[quantity], getattr(args, quantity))
    kw = {}
    if quantity == "seq_bytes":
        kw["tokens"] = int(positive_int("--tokens", args.tokens))
    if quantity in engine:
        kw["available_kv_bytes"] = float(positive("--available-gib", args.available_gib)) * 2**30
        for dest in ("max_model_len", "block_size", "tensor_parallel", "max_num_batched_tokens"):
            if getattr(args, dest) is not None:
                kw[dest] = int(positive_int(_option(args, dest), getattr(args, dest)))
        kw.update(_vllm_rules(args))
    r = check_config(args.file, quantity, figure, kv_dtype=args.kv_dtype if _given(args, "kv_dtype") else None, **kw)
    # exit 1 where the figure disagrees with kvmath's, so that a script or CI can use the check
    return _Answer(r.to_dict(), lambda: _print_check_config(r), status=0 if r.matches else 1)


_CHECKS["config"] = _check_config


def _print_check_config(r) -> None:
    from .config_check import shown

    engine = r.quantity.startswith("vllm")
    _row(f"{r.quantity}: yours", shown(r.quantity, r.figure))
    _row(f"{r.quantity}: kvmath", shown(r.quantity, r.kvmath))
    for kind, value in r.terms.items():
        text = f"{value:,}" if isinstance(value, int) else f"{value:,.0f} B"
        _row(kind if engine else f"{kind} layers", text, 2)
    print(r.explanation)
    if r.readings and not r.matches:
        print("readings of the config (the figure each gives):")
        for name, value in r.readings.items():
            same = "  (= kvmath's: this figure cannot tell it apart)" if name in r.indistinguishable else ""
            print(f"  {shown(r.quantity, value):>20}  {name}{same}")


def _layout_text(layout: ParallelLayout) -> str:
    """A layout as --parallel text, its trivial fields left out (tp=1,pp=12 -> "pp=12")."""
    parts = [f"{k}={getattr(layout, k)}" for k in ("tp", "cp", "dp", "pp", "ep") if getattr(layout, k) > 1]
    return ",".join(parts) or "tp=1"


class _Answer:
    """What a command computed: ``data`` (what --json prints), ``show()``, the text form of the same result, and
    the exit ``status`` (0; 1 where a check found a disagreement)."""

    __slots__ = ("data", "show", "status")

    def __init__(self, data, show, status: int = 0):
        self.data, self.show, self.status = data, show, status


def _refuse_ignored(args) -> None:
    """An option that cannot change any number the command prints is an error, not silently dropped."""
    cmd = args.command

    def clash(dest, why):
        raise ValueError(f"{_option(args, dest)} {why}")

    if cmd not in ("decode", "capacity", "critical-batch", "prefill", "run"):
        return
    if _given(args, "compute_dtype") and _given(args, "flops"):
        clash("compute_dtype", "has no effect with --flops (it only picks the --hardware preset's rate); drop one")
    if cmd == "critical-batch":
        return
    if _given(args, "hardware") and _given(args, "bandwidth") and _given(args, "flops"):
        clash("hardware", "has no effect when --bandwidth and --flops are both given; drop one")
    if _given(args, "kv_shard") and _given(args, "parallel"):
        clash("kv_shard", "does not combine with --parallel: write kv=batch in the layout")
    if _given(args, "kv_shard") and not _given(args, "parallel") and (args.chips is None or args.chips == 1):
        clash("kv_shard", "has no effect on one chip; give --chips above 1 or drop it")
    if cmd == "run" and _given(args, "budget") and args.json:
        clash("budget", "only sets the text's memory check, not --json; use `kvmath capacity --budget` for what fits")
    if cmd == "capacity" and args.parallel and parse_parallel(args.parallel)[1] is not None:
        clash("parallel", "sets a dispatch format, which changes no figure of capacity (what fits); drop dispatch=")
    if cmd not in ("decode", "capacity"):
        return
    if _given(args, "kv_dtype") and _given(args, "kv_bytes_per_token"):
        clash("kv_dtype", "has no effect with --kv-bytes-per-token (which already fixes the bytes); drop one")
    model_given = _given(args, "model") or _given(args, "config")
    notes = [d for d in ("params", "kv_bytes_per_token") if _given(args, d)]
    if model_given and len(notes) == 2:
        clash("model" if _given(args, "model") else "config",
              "has no effect when --params and --kv-bytes-per-token are both given; drop one")
    if model_given and notes:
        clash(notes[0], "does not combine with --model or --config, whose layers set it; drop one")
    if not model_given:
        for dest in ("parallel", "link", "node_link", "chips_per_node", "nodes", "kv_shard"):
            if _given(args, dest):
                clash(dest, "needs --model or --config (the layers, heads and width decide the layout and its "
                            "communication)")


def _model(args) -> Model | None:
    """The model from --model (a preset) or --config (a config.json), or None."""
    if getattr(args, "config", None):
        return Model.from_hf_config(args.config)
    return Model.preset(args.model) if args.model else None


def _chip(args) -> Chip:
    """The chip: the --hardware preset, its rates replaced by --bandwidth / --flops where given."""
    bandwidth, flops = getattr(args, "bandwidth", None), getattr(args, "flops", None)  # capacity has neither
    bandwidth = None if bandwidth is None else positive("--bandwidth", bandwidth)
    flops = None if flops is None else positive("--flops", flops)
    if not args.hardware:
        if bandwidth is None or flops is None:
            raise ValueError("give --hardware, or both --bandwidth and --flops")
        # no preset: one rate for every format; the memory size is not used by these commands' answers
        return Chip(name="custom", hbm_bytes=1.0, bandwidth=bandwidth, flops_by_dtype={"bf16": flops})
    chip = Chip.preset(args.hardware)
    changes = {}
    if bandwidth is not None:
        changes["bandwidth"] = bandwidth
    if flops is not None:
        changes["flops_by_dtype"] = {k: flops for k in chip.flops_by_dtype}
    return chip.replace(**changes) if changes else chip


def _formats(args) -> Formats:
    """Each weight group's format from --weight-dtype, --lm-head-dtype, --embedding-dtype and --experts-dtype."""
    w = args.weight_dtype
    weights = {"default": w, "experts": args.experts_dtype or w, "lm_head": args.lm_head_dtype or w,
               "embedding": args.embedding_dtype or w}
    if getattr(args, "config", None) and not _given(args, "weight_dtype"):
        weights = _config_weights(args)
    dispatch = parse_parallel(args.parallel)[1] if getattr(args, "parallel", None) else None
    return Formats(weights=weights if len(set(map(str, weights.values()))) > 1 else weights["default"],
                   kv=args.kv_dtype, compute=getattr(args, "compute_dtype", None), dispatch=dispatch)


def _config_weights(args) -> dict:
    """Each group's format as --config stores it (kvmath.hf_config.weights_from_hf_config), with --experts-dtype,
    --lm-head-dtype and --embedding-dtype on top; said on stderr, so text and --json runs both show it."""
    from .hf_config import weights_from_hf_config
    from .models import group_formats

    try:
        stored = weights_from_hf_config(args.config)
    except ValueError as err:
        text = str(err)
        raise ValueError(text if "--weight-dtype" in text else
                         f"{text} (or give --weight-dtype to size the weights yourself)") from None
    weights = {"default": "bf16", **group_formats(stored)}
    for dest, group in (("experts_dtype", "experts"), ("lm_head_dtype", "lm_head"), ("embedding_dtype", "embedding")):
        if getattr(args, dest, None):
            weights[group] = getattr(args, dest)
    named = {g: f if isinstance(f, str) else f"{f:g} B/weight" for g, f in weights.items() if g != "default"}
    shown = f"every group {next(iter(named.values()))}" if len(set(named.values())) == 1 else \
        ", ".join(f"{g} {f}" for g, f in named.items())
    if "fp32" in named.values():  # review J23-9: the engine figures below are in bf16; say why they differ
        shown += ("; engines load float32 weights in bf16 (vLLM's --dtype auto), so vLLM's figures use half "
                  "these bytes (--weight-dtype bf16 sizes them so here too)")
    args._notes = [f"weights as config.json stores them (--weight-dtype overrides): {shown}"]
    args._weights_formats = weights  # --json carries them too (weights_formats)
    return weights


def _formats_text(weights) -> str:
    """Weight formats as one phrase: "bf16", or "experts mxfp4, default bf16"."""
    if not isinstance(weights, dict):
        return str(weights)
    if len(set(map(str, weights.values()))) == 1:
        return str(next(iter(weights.values())))
    return ", ".join(f"{g} {f if isinstance(f, str) else f'{f:g} B/weight'}" for g, f in weights.items())


def _layout(args, model: Model) -> ParallelLayout:
    """--parallel, or --chips as tensor parallelism (with --kv-shard), checked against the model."""
    if args.parallel:
        try:
            layout = parse_parallel(args.parallel)[0].check(model)
        except ValueError as err:
            raise ValueError(f"--parallel {args.parallel}: {err}") from None
        if args.chips is not None and int(positive_int("--chips", args.chips)) != layout.n_chips:
            raise ValueError(f"--chips ({args.chips:g}) must equal the {layout.n_chips} chips of --parallel {args.parallel}")
        return layout
    n = 1 if args.chips is None else int(positive_int("--chips", args.chips))
    try:
        return ParallelLayout(tp=n, kv_split=args.kv_shard or "heads").check(model)
    except ValueError as err:
        raise ValueError(f"--chips {n}: {str(err).replace('try pp=', 'try --parallel pp=')} or --kv-shard batch") from None


def _link_options(args, chip: Chip, layout: ParallelLayout | None) -> dict:
    """Deployment's link arguments from --link, --node-link, --chips-per-node and --nodes (absent: its defaults).

    A lone --link that names a network between nodes (a link whose scope is
    "between nodes") is the node link, the chip's own link staying inside a
    node. ``layout`` None: the command counts no communication (capacity's
    fewest chips), so --nodes, which needs the layout's chips, is refused.
    """
    out = {}
    for dest in ("link", "node_link"):
        name = getattr(args, dest)
        if name is None:
            continue
        option = _option(args, dest)
        if not name.strip():
            raise ValueError(f"{option} is empty: give a link preset (see `kvmath links`), 'none', or leave it out")
        if name.strip().lower() == "none":
            out[dest] = None
            continue
        try:
            out[dest] = Link.preset(name)
        except ValueError as err:
            raise ValueError(f"{option}: {err}") from None
    lone = out.get("link")
    if lone is not None and lone.scope == "between nodes" and "node_link" not in out:
        out["node_link"] = out.pop("link")
    if args.chips_per_node is not None:
        out["chips_per_node"] = int(positive_int("--chips-per-node", args.chips_per_node))
    if args.nodes is not None:
        nodes = int(positive_int("--nodes", args.nodes))
        if layout is None:
            raise ValueError("--nodes needs --chips or --parallel (the chips the nodes hold)")
        if layout.n_chips % nodes:
            raise ValueError(f"--nodes {nodes} must divide the {layout.n_chips} chips of the layout evenly")
        per_node = layout.n_chips // nodes
        if out.get("chips_per_node", per_node) != per_node:
            raise ValueError(f"--nodes {nodes} and --chips-per-node {out['chips_per_node']} disagree: {nodes} nodes "
                             f"of the layout's {layout.n_chips} chips hold {per_node} each; give one of them")
        out["chips_per_node"] = per_node
    if layout is None:
        return out
    network = out.get("node_link")
    nodes_given = [_option(args, d) for d in ("chips_per_node", "nodes") if getattr(args, d) is not None]
    if network is not None:
        size = out.get("chips_per_node", chip.node_chips or layout.n_chips)
        if layout.n_chips <= size:
            given = _option(args, "node_link" if args.node_link is not None else "link")
            where = f"--chips-per-node {size}" if "chips_per_node" in out else (
                f"the {chip.name} preset's node" if chip.node_chips else "no node size given")
            raise ValueError(f"{given} {network.name} links nodes, but the layout's {layout.n_chips} chips fit in one "
                             f"node of {size} ({where}): give --nodes or --chips-per-node, or drop it")
    elif nodes_given and "node_link" not in out:
        raise ValueError(f"{nodes_given[0]} has no effect without a link between nodes: give --node-link (or a "
                         "lone --link that is a network, such as ib-ndr400)")
    return out


def _deployment(args, model: Model, layout: ParallelLayout | None = None) -> Deployment:
    """The one Deployment a command asks its question of."""
    chip = _chip(args)
    layout = _layout(args, model) if layout is None else layout
    return Deployment(model, chip, layout, formats=_formats(args), **_link_options(args, chip, layout))


def _warn_past_supported_context(args, model, context: float) -> None:
    if model is not None and model.supported_context and context > model.supported_context:
        print(f"kvmath {args.command}: warning: --context {context:,.0f} is beyond the {model.supported_context:,} "
              f"tokens {model.name} is documented to support; computing anyway",
              file=sys.stderr)


def _describe(dep: Deployment) -> str:
    """'N chip(s)', with the layout and links where there is more than one chip."""
    if dep.n_chips == 1:
        return "1 chip(s)"
    lay = dep.layout
    fields = ",".join(f"{k}={getattr(lay, k)}" for k in ("tp", "cp", "dp", "pp", "ep") if getattr(lay, k) > 1)
    fields += ",kv=batch" if lay.kv_split == "batch" else ""
    fields += f",redundant={lay.redundant_experts}" if lay.redundant_experts else ""
    fields += f",dispatch={dep.formats.dispatch}" if dep.formats.dispatch else ""
    link = "no communication counted" if dep.link is None else f"link {dep.link.name}"
    if dep.node_link is not dep.link and dep.chips_per_node < dep.n_chips:
        link += f", {dep.node_link.name if dep.node_link else 'none'} between nodes of {dep.chips_per_node}"
    return f"{dep.n_chips} chip(s), {fields}, {link}"


# ----- decode ---------------------------------------------------------------------------

def _decode(args) -> _Answer:
    batch = positive_int("--batch", args.batch)
    context = positive_int("--context", args.context)
    efficiency = fraction("--efficiency", args.efficiency)
    overhead_s = non_negative("--overhead-s", args.overhead_s)
    engine = _engine(args)
    model = _model(args)
    if model is None:
        if args.estimate:
            raise ValueError("--estimate needs --model or --config (it prices a deployment's terms)")
        return _notes_decode(args, batch, context, efficiency, overhead_s)
    dep = _deployment(args, model)
    step = dep.step(batch, context, efficiency=efficiency, overhead_s=overhead_s)
    _warn_past_supported_context(args, model, context)
    data = step.to_dict()
    est = None
    if args.estimate:
        from .estimate import estimate_step

        if not step.is_lower_bound:
            raise ValueError("--estimate prices the bound itself: drop --efficiency and --overhead-s")
        est = estimate_step(dep, batch, context, engine=engine)
        data["estimate"] = est.to_dict()
    return _Answer(data, lambda: _print_decode(args, dep, step, est))


def _notes_decode(args, batch, context, efficiency, overhead_s) -> _Answer:
    """--params and --kv-bytes-per-token without a model: the notes' closed form on N chips' pooled rates."""
    if args.params is None or args.kv_bytes_per_token is None:
        raise ValueError("give --model or --config, or both --params and --kv-bytes-per-token")
    params = positive("--params", args.params)
    kv_per_token = positive("--kv-bytes-per-token", args.kv_bytes_per_token)
    n = int(positive_int("--chips", 1 if args.chips is None else args.chips))
    chip = _chip(args)
    b_w = dtype_bytes(args.weight_dtype, argument="--weight-dtype")
    flops = chip.flops(args.compute_dtype) if args.compute_dtype else chip.flops_for_format(args.weight_dtype)
    t = formulas.step_breakdown(batch, context * kv_per_token, formulas.weight_bytes(params, b_w), params,
                                n * chip.bandwidth * efficiency, n * flops, overhead_s=overhead_s)
    bandwidth = chip.bandwidth * efficiency
    return _Answer(t.to_dict(), lambda: _print_notes_decode(args, n, t, formulas.critical_batch(flops, bandwidth, b_w)))


def _print_estimate(e) -> None:
    """An estimate, its 80% interval and regime (a pooled interval said so), the regime's error out of sample,
    and each stand-in it took, indented under the time it estimates."""
    from .estimate import regime_errors, regimes_of

    pooled = ", too few rows: pooled interval" if e.pooled else ""
    print(f"    estimate               {fmt_seconds(e.estimate_s)}  (80%: {fmt_seconds(e.estimate_low_s)} "
          f"to {fmt_seconds(e.estimate_high_s)}; regime {e.regime}, {e.regime_rows} rows{pooled})")
    for regime in regimes_of(e):  # the figures: each regime's median and 90th-percentile error
        r = regime_errors()[regime]
        print(f"      {regime} error out of sample: median {r.median_abs_error:.1%}, 90th percentile "
              f"{r.p90_abs_error:.1%} ({r.rows} rows, {r.sources} sources)")
    for what, why in e.flags.items():  # a collective priced by a stand-in curve, or a link assumed
        print(f"      stand-in: {what}: {why}")


def _print_engine(args, dep: Deployment) -> None:
    """The all-reduce the estimate priced a multi-chip deployment's collectives with (``--engine``)."""
    if dep.layout.weight_shards == 1:  # no all-reduce on the chain (one chip, or experts and data alone)
        return
    from .estimate import engine_algorithm

    how = {"nccl": "NCCL's", "auto": "the fastest measured curve (an engine's own kernel for small messages)"}
    engine = f"--engine {args.engine}" if args.engine else "no --engine"
    print(f"  estimate's all-reduce    {how[engine_algorithm(_engine(args))]} ({engine})")


def _print_decode(args, dep: Deployment, s, est=None) -> None:
    print(f"decode step, B = {s.batch:g}, S = {s.context:g}, {_describe(dep)}")
    print(f"  KV cache per chip        {fmt_bytes(s.kv_bytes_read)} read, {fmt_bytes(s.kv_bytes_resident)} held")
    print(f"  weights per chip         {fmt_bytes(s.weight_bytes_read)} read of {fmt_bytes(s.weight_bytes_resident)} resident")
    print(f"  KV read                  {fmt_seconds(s.kv_read_s)}")
    print(f"  attention, compute       {fmt_seconds(s.attention_compute_s)}")
    print(f"  weights, memory          {fmt_seconds(s.weight_read_s)}")
    print(f"  weights, compute         {fmt_seconds(s.weight_compute_s)}")
    if s.comm_s:
        print(f"  communication            {fmt_seconds(s.comm_s)}")
    kind = "lower bound" if s.is_lower_bound else "estimate"
    print(f"  step, strict {kind:<11} {fmt_seconds(s.strict_s)}  ({s.binds}-bound)")
    if est is not None:
        _print_estimate(est)
        _print_engine(args, dep)
    print(f"  step, no overlap         {fmt_seconds(s.no_overlap_s)}  (attention "
          f"{binds(s.kv_read_s, s.attention_compute_s)}-bound, weights {binds(s.weight_read_s, s.weight_compute_s)}-bound)")
    print(f"  tokens/s per sequence    {formulas.tokens_per_s_per_seq(s.strict_s):.2f}")
    print(f"  tokens/s for the batch   {s.tokens_per_s:.2f}")
    b_w = dtype_bytes(args.weight_dtype, argument="--weight-dtype")
    print(f"  critical batch B_crit    {formulas.critical_batch(dep.flops, s.bandwidth, b_w):.1f}")
    try:
        own = f"{dep.critical_batch():.1f}"
    except ValueError:  # rates so far apart (--bandwidth, --flops) that no batch below 1e9 turns compute-bound
        own = "above 1e9"
    print(f"  this model's B_crit      {own}")


def _print_notes_decode(args, n: int, t, b_crit: float) -> None:
    print(f"decode step, B = {args.batch:g}, S = {args.context:g}, {n} chip(s) (the notes' closed form: no model)")
    print(f"  KV read                  {fmt_seconds(t.kv_read_s)}")
    print(f"  attention, compute       {fmt_seconds(t.attention_compute_s)}")
    print(f"  weights, memory          {fmt_seconds(t.weight_read_s)}")
    print(f"  weights, compute         {fmt_seconds(t.weight_compute_s)}")
    print(f"  step, strict {'lower bound' if args.efficiency == 1 and args.overhead_s == 0 else 'estimate':<11} "
          f"{fmt_seconds(t.strict_s)}  ({t.binds}-bound)")
    print(f"  step, no overlap         {fmt_seconds(t.no_overlap_s)}  "
          f"(attention {t.attention_binds}-bound, weights {t.weights_bind}-bound)")
    print(f"  tokens/s per sequence    {formulas.tokens_per_s_per_seq(t.strict_s):.2f}")
    print(f"  tokens/s for the batch   {formulas.tokens_per_s(t.strict_s, args.batch):.2f}")
    print(f"  critical batch B_crit    {b_crit:.1f}")


# ----- capacity ---------------------------------------------------------------------------

def _capacity(args) -> _Answer:
    context = positive_int("--context", args.context)
    from .cli_serving import _prefix_kwargs
    prefix = _prefix_kwargs(args, "--context", context)
    # --block-size sizes vLLM's pool, or the blocks a cached prefix reuses
    engine_options = ("gpu_memory_utilization", "max_model_len", "vllm_version", *_VLLM_RULES) + (
        () if prefix else ("block_size",))
    if args.engine is None:
        given = [_option(args, o) for o in engine_options if getattr(args, o) is not None]
        if given:
            raise ValueError(f"{given[0]} needs --engine vllm")
    hbm = None if args.hbm_bytes is None else positive("--hbm-bytes", args.hbm_bytes)
    model = _model(args)
    if model is None:
        return _notes_capacity(args, context, hbm)
    if not args.hardware:
        raise ValueError("give --hardware with --model or --config (--hbm-bytes may override its memory)")
    chip = Chip.preset(args.hardware)
    if hbm is None and chip.device_bytes is None and chip.runtime_bytes is None:
        needs = [f"--budget {args.budget}"] if args.budget != "device" else []
        needs += ["--engine vllm"] if args.engine else []
        if needs:
            raise ValueError(f"--hardware {chip.name} has no reported memory total in its preset; "
                             f"{' and '.join(needs)} {'need' if len(needs) > 1 else 'needs'} one: give --hbm-bytes "
                             "(the total nvidia-smi reports, in bytes) or use --budget device (the marketed size)")
    fewest = args.chips is None and args.parallel is None
    if fewest:
        try:
            dep = Deployment(model, chip, ParallelLayout(kv_split=args.kv_shard or "heads"), formats=_formats(args),
                             **_link_options(args, chip, None)).fewest_chips(args.budget, hbm, args.engine)
        except ValueError as err:
            where = f"--hbm-bytes {hbm:g}" if hbm is not None else f"--hardware {chip.name}"
            raise ValueError(f"{where}, --budget {args.budget}: {err}") from None
    else:
        dep = _deployment(args, model)
    engine = {}
    if args.engine:
        # given rules only: the library's defaults stand otherwise
        engine = dict(engine="vllm", vllm_version=args.vllm_version or "v1", **_vllm_rules(args))
        if not _given(args, "kv_dtype"):  # vLLM's own default, --kv-cache-dtype auto (DeepSeek-V3.2: fp8_ds_mla)
            engine["kv_dtype"] = "auto"
        if args.gpu_memory_utilization is not None:
            engine["gpu_memory_utilization"] = fraction("--gpu-memory-utilization", args.gpu_memory_utilization)
        if args.block_size is not None:
            engine["block_size"] = int(positive_int("--block-size", args.block_size))
        if args.max_model_len is not None:
            engine["max_model_len"] = int(positive_int("--max-model-len", args.max_model_len))
            if context > engine["max_model_len"]:
                raise ValueError(f"--context {context:,.0f} exceeds --max-model-len {engine['max_model_len']:,}: "
                                 "vLLM refuses longer requests")
    try:
        cap = dep.capacity(context, budget=args.budget, hbm_bytes=hbm, **{**engine, **prefix})
    except ValueError as err:
        if "do not fit" in str(err):
            given = f"--chips {args.chips:g}" if args.parallel is None else f"--parallel {args.parallel}"
            enough = dep.fewest_chips(args.budget, hbm, args.engine).layout
            advice = (f"--chips {enough.tp} or more" if enough.n_chips == enough.tp  # a layout the advice can build
                      else f"--parallel {_layout_text(enough)} (the heads do not split {enough.n_chips} ways)")
            raise ValueError(f"{given} cannot hold the {fmt_bytes(dep.model.weight_bytes_resident(dep.formats.weights))} "
                             f"of weights (--budget {args.budget}): give {advice}") from None
        if args.engine:
            how = "--chips" if not fewest else "the fewest chips that hold the weights; --chips sets it"
            raise ValueError(f"--engine vllm at TP={dep.layout.tp} ({how}): {err}") from None
        raise
    return _Answer(cap.to_dict(), lambda: _print_capacity(args, dep, cap, fewest, hbm))


def _notes_capacity(args, context, hbm) -> _Answer:
    """--params and --kv-bytes-per-token without a model: the notes' sums (kvmath.formulas.fit)."""
    if args.params is None or args.kv_bytes_per_token is None:
        raise ValueError("give --model or --config, or both --params and --kv-bytes-per-token")
    if args.engine:
        raise ValueError("--engine vllm needs --model or --config (the cache layout depends on heads and layers)")
    if hbm is None and not args.hardware:
        raise ValueError("give --hardware or --hbm-bytes")
    from .memory import memory_budget
    memory = memory_budget(Chip.preset(args.hardware) if hbm is None else hbm, args.budget)
    f = formulas.fit(positive("--params", args.params), dtype_bytes(args.weight_dtype, argument="--weight-dtype"),
                     positive("--kv-bytes-per-token", args.kv_bytes_per_token), context, memory,
                     None if args.chips is None else positive_int("--chips", args.chips))
    return _Answer(f.to_dict(), lambda: _print_fit(args, f))


def _row(label: str, value: str, indent: int = 0) -> None:
    """One line of a label column (values aligned whatever the label's length) and its value."""
    print(f"{' ' * indent}{label:<{40 - indent}} {value}")


def _print_fit(args, f) -> None:
    if args.budget != "device":
        _row("memory per chip", f"{fmt_bytes(f.hbm_bytes)}  (budget: {args.budget})")
    _row("weights", f"{fmt_bytes(f.weight_bytes)}  (fewest chips: {f.min_chips})")
    _row(f"KV budget on {f.n_chips} chip(s)", fmt_bytes(f.kv_budget_bytes))
    _row("KV per token", f"{f.kv_bytes_per_token:,.0f} B")
    _row("tokens that fit", f"{f.max_tokens:,}")
    _row(f"batch at S = {f.context:,.0f}", f"{f.max_batch:,}")


def _print_capacity(args, dep: Deployment, c, fewest: bool, hbm) -> None:
    if args.budget != "device":
        _row("memory per chip", f"{fmt_bytes(c.memory_per_chip_bytes)}  (budget: {args.budget})")
    chips = f"  (fewest chips: {c.n_chips})" if fewest else ""
    _row("weights" if c.n_chips == 1 else "weights per chip", fmt_bytes(c.weight_bytes_per_chip) + chips)
    _row("KV budget on 1 chip(s)" if c.n_chips == 1 else "KV budget per chip", fmt_bytes(c.kv_budget_bytes_per_chip))
    _row(f"KV per token (average over S = {c.context:,.0f})", f"{c.kv_bytes_per_token:,.0f} B")
    _row(f"tokens that fit on {c.n_chips} chip(s)", f"{c.max_tokens:,.0f}" + ("  (cache slots, without sharing)"
                                                                            if args.prefix_tokens is not None else ""))
    if args.prefix_tokens is None:
        _row(f"batch at S = {c.context:,.0f}", f"{c.max_batch:,.0f}")
    else:  # said, with what it buys (R25b-3): the batch below counts on it
        from .prefix import check_prefix, reused_tokens

        prefix, hit, block = check_prefix(args.prefix_tokens, args.prefix_hit_rate, args.block_size)  # its defaults
        reused = reused_tokens(prefix, block, c.context, prompt_name="--context")
        _row("shared prefix, held once per chip", f"{fmt_bytes(c.prefix_kv_bytes_per_chip)}  ({reused:,.0f} of its "
             f"{args.prefix_tokens:,.0f} tokens in whole blocks of {block:g}, hit rate {hit:g})")
        _row(f"batch at S = {c.context:,.0f}, with the prefix", f"{c.max_batch:,.0f}")
    b_w = dtype_bytes(args.weight_dtype, argument="--weight-dtype")
    _row("critical batch B_crit", f"{formulas.critical_batch(dep.flops, dep.chip.bandwidth, b_w):.1f}")
    e = c.engine
    if e is not None:
        from .memory import GPU_MEMORY_UTILIZATION
        util = GPU_MEMORY_UTILIZATION if args.gpu_memory_utilization is None else args.gpu_memory_utilization
        from .memory import VLLM_DEFAULTS_VERSION
        rules = [f"{dest} {getattr(args, dest) or _vllm_default(dest)}" for dest in ("mamba_cache_mode", "tokens_rule")
                 if getattr(args, dest) or (dest == "mamba_cache_mode" and "linear" in e.group_kinds)]
        rules.append(f"hybrid KV-cache manager {'on' if e.hybrid_kv_cache_manager else 'off'}" + (
            " for chunked local attention (--hybrid-kv-cache-manager on: later releases)"
            if args.hybrid_kv_cache_manager is None and not e.hybrid_kv_cache_manager else ""))
        print(f"vLLM ({args.vllm_version or 'v1'}, TP={dep.layout.tp}, gpu_memory_utilization "
              f"{util:.2f}{''.join(', ' + r for r in rules)}; defaults of vLLM {VLLM_DEFAULTS_VERSION}; "
              "overheads are estimates)")
        print("  per rank")
        estimated = "  (estimate: reported total less 0.5 GiB)" if hbm is not None or dep.chip.runtime_bytes is None else ""
        _row("CUDA runtime total", fmt_bytes(e.total_bytes) + estimated, 4)
        loaded = "" if e.weight_formats == dep.formats.weights else \
            f"  (loaded as vLLM --dtype {args.vllm_dtype or _vllm_default('dtype')} does: {_formats_text(e.weight_formats)})"
        _row("weights", fmt_bytes(e.weight_bytes) + loaded, 4)
        _row("activation peak", fmt_bytes(e.activation_peak_bytes), 4)
        _row("non-torch memory", fmt_bytes(e.non_torch_bytes), 4)
        _row("KV cache", fmt_bytes(e.available_kv_bytes), 4)
        if e.kv_cache_dtype != args.kv_dtype:  # vLLM's --kv-cache-dtype auto, or fp8 made fp8_ds_mla: said
            from .memory import VLLM_DSA_AUTO_KV
            why = (f"vLLM v0.11's --kv-cache-dtype auto for DSA; later releases keep bf16 (--kv-dtype bf16)"
                   if e.kv_cache_dtype == VLLM_DSA_AUTO_KV and not _given(args, "kv_dtype") else
                   "vLLM's format for an fp8 DSA cache" if e.kv_cache_dtype == VLLM_DSA_AUTO_KV else
                   "vLLM's --kv-cache-dtype auto: the model dtype")
            _row("KV cache dtype", f"{e.kv_cache_dtype}  ({why})", 4)
        kinds = Counter(e.group_kinds)
        # one group of layers with different pages (DSA's latent and indexer keys): a block spans all of them
        spans = "1 spanning every layer" if (e.num_groups, e.group_size) == (1, 1) and dep.model.n_layers > 1 \
            else f"{e.num_groups} of {e.group_size} layers"
        _row("KV-cache groups", f"{spans} (" + ", ".join(f"{n} {kind}" for kind, n in kinds.items()) + ")", 4)
        if e.state_bytes is not None:  # vLLM's "Setting attention block size" and "Padding mamba page size" lines
            _row("linear-layer state", f"{e.state_bytes:,} B, padded {e.state_padding:.2%} to one page", 4)
        _row(f"blocks of {e.block_size} tokens", f"{e.num_blocks:,}", 4)
        print("  engine (all ranks)")
        other = next(r for r in e.tokens_by_rule if r != e.tokens_rule)
        versions = {"blocks": "vLLM up to v0.20", "concurrency": "vLLM v0.29; the switch falls between v0.20 and v0.29"}
        _row("KV cache size", f"{e.tokens:,} tokens ({versions[e.tokens_rule]}; {e.tokens_by_rule[other]:,} in "
             f"{versions[other]})", 4)
        _row("max concurrency", f"{e.max_concurrency:.2f}x at {e.max_model_len:,} tokens", 4)


# ----- critical batch ------------------------------------------------------------------------

def _critical(args) -> _Answer:
    model = _model(args)  # a bad --model or --config fails here, as in the other commands
    chip = _chip(args)
    b_w = dtype_bytes(args.weight_dtype, argument="--weight-dtype")
    flops = chip.flops(args.compute_dtype) if args.compute_dtype else chip.flops_for_format(args.weight_dtype)
    result = {"critical_batch": float(formulas.critical_batch(flops, chip.bandwidth, b_w)), "flops": flops,
              "bandwidth": chip.bandwidth}
    if args.hardware:
        result["beta_alpha"] = float(formulas.critical_batch_beta_alpha(chip.flops("bf16"), chip.bandwidth, b_w, 2))
    if model is not None:
        dep = Deployment(model, chip, weights=args.weight_dtype, compute=args.compute_dtype)
        result["model_critical_batch"] = dep.critical_batch()
    return _Answer(result, lambda: _print_critical(result))


def _print_critical(r: dict) -> None:
    print(f"B_crit = C * b_w / (2 W) = {r['critical_batch']:.1f}  (C = {fmt_flop_rate(r['flops'])}, W = {fmt_bandwidth(r['bandwidth'])})")
    if "beta_alpha" in r:
        print(f"the notes' beta * alpha (bf16 alpha, 2-byte activations) = {r['beta_alpha']:.1f}")
    if "model_critical_batch" in r:
        print(f"this model's B_crit (uniform routing) = {r['model_critical_batch']:.1f}")


# ----- whole requests: prefill and run --------------------------------------------------------

def _request_deployment(args) -> Deployment:
    if not args.model and not args.config:
        raise ValueError(f"kvmath {args.command} needs --model or --config")
    if not args.hardware and (args.bandwidth is None or args.flops is None):
        raise ValueError("give --hardware (--bandwidth and --flops may override its rates)")
    return _deployment(args, _model(args))


def _chunk(args):
    return None if args.chunk_tokens is None else int(positive_int("--chunk-tokens", args.chunk_tokens))


def _refuse_estimate_with_prefix(args) -> None:
    """The estimate is fitted on runs without a cached prefix: it prices no prefix, so the two are not combined."""
    if getattr(args, "prefix_tokens", None) is not None:
        raise ValueError("--estimate does not model a cached prefix: drop --prefix-tokens or --estimate")


def _prefill(args) -> _Answer:
    dep = _request_deployment(args)
    batch = int(positive_int("--batch", args.batch))
    s_in = int(positive_int("--input", args.input))
    from .cli_serving import _prefix_kwargs
    one_pass = dep.prefill(batch, s_in)
    req = dep.request(batch, s_in, 1, chunk_tokens=_chunk(args), **_prefix_kwargs(args, "--input", s_in))
    data = {"prefill": one_pass.to_dict(), "request": req.to_dict()}
    est, engine = None, _engine(args)
    if args.estimate:
        from .estimate import estimate_pass, estimate_request

        _refuse_estimate_with_prefix(args)
        est = {"prefill": estimate_pass(dep, one_pass, prompt_tokens_per_pass=s_in, engine=engine),
               "request": estimate_request(dep, batch, s_in, 1, chunk_tokens=_chunk(args), engine=engine)}
        data["estimate"] = {k: v.to_dict() for k, v in est.items()}
    return _Answer(data, lambda: _print_prefill(args, dep, one_pass, req, est))


def _print_prefill(args, dep, p, req, est=None) -> None:
    chunk = f", chunks of {_chunk(args):,}" if args.chunk_tokens is not None else ""
    print(f"prefill, B = {req.batch:g}, {req.input_tokens:,} tokens each{chunk}, {_describe(dep)}")
    print(f"  weights read per chip    {fmt_bytes(p.weight_bytes_read)}")
    print(f"  cache written per chip   {fmt_bytes(p.kv_bytes_read)}")
    print(f"  FLOPs per chip           {fmt_flops(p.weight_flops + p.attention_flops)}")
    print(f"  communication            {fmt_seconds(p.comm_s)}")
    print(f"  one pass, lower bound    {fmt_seconds(p.strict_s)}  ({p.binds}-bound)")
    if est is not None:
        _print_estimate(est["prefill"])
        _print_engine(args, dep)
    print(f"  TTFT, lower bound        {fmt_seconds(req.ttft_s)}")
    if est is not None:
        _print_estimate(est["request"].ttft)
    print(f"  prompt tokens/s          {formulas.tokens_per_s(req.ttft_s, req.batch * req.input_tokens):,.0f}")


def _run(args) -> _Answer:
    dep = _request_deployment(args)
    batch = int(positive_int("--batch", args.batch))
    s_in = int(positive_int("--input", args.input))
    s_out = int(positive_int("--output", args.output))
    price = None if args.price_per_hour is None else float(non_negative("--price-per-hour", args.price_per_hour))
    from .cli_serving import _prefix_kwargs
    prefix = _prefix_kwargs(args, "--input", s_in)
    r = dep.request(batch, s_in, s_out, chunk_tokens=_chunk(args), price_per_chip_hour=price, **prefix)
    data, est, engine = r.to_dict(), None, _engine(args)
    if args.estimate:
        from .estimate import estimate_request

        _refuse_estimate_with_prefix(args)
        est = estimate_request(dep, batch, s_in, s_out, chunk_tokens=_chunk(args), engine=engine)
        data["estimate"] = est.to_dict()
    return _Answer(data, lambda: _print_run(args, dep, r, est))


def _print_run(args, dep, r, est=None) -> None:
    from .memory import memory_budget
    try:
        room = memory_budget(dep.chip, args.budget)
    except ValueError as err:
        raise ValueError(f"--budget {args.budget}: {err}") from None
    last = dep.step(r.batch, r.input_tokens + r.output_tokens - 1)  # the largest cache the batch holds
    print(f"{r.batch} request(s) of {r.input_tokens:,} in, {r.output_tokens:,} out, on {_describe(dep)}")
    print(f"  time to first token      {fmt_seconds(r.ttft_s)}")
    if est is not None:
        _print_estimate(est.ttft)
        _print_engine(args, dep)
    print(f"  decode                   {fmt_seconds(r.decode_s)}  (no overlap: {fmt_seconds(r.decode_no_overlap_s)})")
    if est is not None and r.output_tokens > 1:
        _print_estimate(est.decode)
    print(f"  total                    {fmt_seconds(r.total_s)}")
    if est is not None:
        _print_estimate(est.total)
    tpot = "n/a (one output token: no decode step)" if r.output_tokens == 1 else fmt_seconds(r.time_per_output_token_s)
    print(f"  time per output token    {tpot}")
    if est is not None and r.output_tokens > 1:
        _print_estimate(est.time_per_output_token)
    print(f"  output tokens/s          {r.output_tokens_per_s:,.1f}  ({r.output_tokens_per_s_per_chip:,.1f} per chip)")
    fits = last.memory_bytes <= room
    print(f"  memory per chip          {fmt_bytes(last.memory_bytes)}  ({'fits' if fits else 'does NOT fit'} in "
          f"{fmt_bytes(room)}, budget: {args.budget})")
    if r.cost_per_million_tokens is not None:
        print(f"  cost per 1M output tokens {r.cost_per_million_tokens:.4f} (at {r.price_per_chip_hour:g} per chip-hour)")
    if not fits:
        print("  warning: the batch's caches do not fit beside the weights", file=sys.stderr)


# ----- check -------------------------------------------------------------------------------------

def _check_measurement(args) -> _Answer:
    from .calibration import check, user_measurement

    model = _model(args)
    if model is None:
        raise ValueError("kvmath check measurement needs --model or --config")
    if not args.hardware and (args.bandwidth is None or args.flops is None):
        raise ValueError("give --hardware (--bandwidth and --flops may override its rates)")
    chip = _chip(args)
    layout = _layout(args, model)
    link = args.link if args.link is not None else (chip.link_name or "none")
    if link.strip().lower() != "none":
        try:
            link = Link.preset(link).name
        except ValueError as err:
            raise ValueError(f"--link: {err}") from None
    preset_chip = args.hardware and args.bandwidth is None and args.flops is None
    m = user_measurement(
        Model.preset(args.model).name if args.model else model, chip.name if preset_chip else chip,
        metric=args.metric, measured=positive("--measured", args.measured),
        batch=int(positive_int("--batch", args.batch)), input_tokens=int(non_negative("--input", args.input)),
        output_tokens=int(positive_int("--output", args.output)), layout=_layout_text(layout) if layout.n_chips > 1
        else "", link="" if link.strip().lower() == "none" else link, weights=_formats(args).weights,
        kv_dtype=args.kv_dtype, compute_dtype=args.compute_dtype, chunk_tokens=_chunk(args),
        tokens_per_step=int(positive_int("--tokens-per-step", args.tokens_per_step)), per_chip=args.per_chip,
        engine=args.engine or "")
    c = check(m)
    return _Answer(c.to_dict(), lambda: _print_check(c))


def _print_check(c) -> None:
    from .calibration import TIME_METRICS

    m, e = c.measurement, c.estimate
    unit = "s" if m.metric in TIME_METRICS else "tokens/s"
    print(f"{m.metric} {m.measured:g} {unit}: {m.configuration}")
    print(f"  bound                    {c.bound:.4g} {unit}  (fraction reached: {c.ratio:.2f})")
    if c.beats_bound:
        print("  BEATS THE BOUND: almost always a setup or unit mistake. Likely causes:")
        for cause in c.likely_causes:
            print(f"    - {cause}")
    else:
        print("  does not beat the bound")
    print(f"  per unit                 measured {fmt_seconds(c.measured_s)}, bound {fmt_seconds(e.bound_s)}")
    _print_estimate(e)
    print(f"  against the estimate     {c.against_estimate}")


_CHECKS["measurement"] = _check_measurement


# ----- the listings ---------------------------------------------------------------------------

def _models(args) -> list[dict]:
    from .layers import LAYER_KINDS
    from .models import ATTENTION_KINDS

    rows = []
    family = args.family.strip().lower() if args.family else None
    attention = args.attention.strip().lower() if args.attention else None
    names = Model.presets()
    if family is not None:
        choice("--family", family, sorted({Model.preset(n).family for n in names}))
    if attention is not None:
        choice("--attention", attention, ATTENTION_KINDS + LAYER_KINDS)
    for name in names:
        m = Model.preset(name)
        if family is not None and m.family != family:
            continue
        if attention is not None and attention != m.attention and attention not in m.layer_kinds:
            continue
        rows.append({
            "name": name, "family": m.family, "attention": m.attention, "layer_kinds": list(m.layer_kinds),
            "param_count": m.param_count(), "active_param_count": m.active_param_count(),
            "matmul_params_per_token": m.matmul_params_per_token(), "kv_bytes_per_token_bf16": m.kv_bytes_per_token(),
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
    names = Chip.presets()
    if vendor is not None:
        choice("--vendor", vendor, sorted({Chip.preset(n).vendor for n in names}))
    for name in names:
        c = Chip.preset(name)
        if vendor is not None and c.vendor != vendor:
            continue
        rows.append({"name": name, "vendor": c.vendor, "hbm_bytes": c.hbm_bytes, "device_bytes": c.device_bytes,
                     "runtime_bytes": c.runtime_bytes, "bandwidth": c.bandwidth, "link": c.link_name or None,
                     "flops_by_dtype": dict(c.flops_by_dtype), "ridge_bf16": c.ridge_point(), "source": c.source})
    return rows


def _print_hardware(rows: list[dict]) -> None:
    print(f"{'chip':<11}{'HBM':>10}{'bandwidth':>12}{'bf16':>16}{'ridge':>7}")
    for r in rows:
        print(f"{r['name']:<11}{r['hbm_bytes'] / 1e9:>7.0f} GB{fmt_bandwidth(r['bandwidth']):>12}"
              f"{fmt_flop_rate(r['flops_by_dtype']['bf16']):>16}{r['ridge_bf16']:>7.0f}")


def _links(args) -> list[dict]:
    import dataclasses

    return [dataclasses.asdict(Link.preset(name)) for name in Link.presets()]


def _print_links(rows: list[dict]) -> None:
    print(f"{'link':<15}{'per direction':>15}{'source states':>26}{'hop latency':>15}  in-switch")
    for r in rows:
        stated = f"{fmt_bandwidth(r['stated_bandwidth'])} {'both' if r['stated_as'] == 'bidirectional' else 'one way'}"
        latency = fmt_seconds(r["latency_s"]) + ("*" if r["latency_is_assumption"] else " ")
        print(f"{r['name']:<15}{fmt_bandwidth(r['bandwidth']):>15}{stated:>26}{latency:>15}"
              f"  {'yes' if r['in_switch_reduction'] else 'no'}")
    print("* assumed: no vendor publishes a per-hop latency (see each preset's latency_source)")


from .cli_serving import _SERVING_COMMANDS, _add_serving_parsers  # noqa: E402  (the serving commands use the helpers above)

#: command: (compute(args) -> an _Answer or JSON-ready rows, show(rows) for the listings)
_COMMANDS = {
    "decode": (_decode, None),
    "capacity": (_capacity, None),
    "critical-batch": (_critical, None),
    "prefill": (_prefill, None),
    "run": (_run, None),
    "check": (_check, None),
    "models": (_models, _print_models),
    "hardware": (_hardware, _print_hardware),
    "links": (_links, _print_links),
    **{name: (compute, None) for name, compute in _SERVING_COMMANDS.items()},
}


#: Library argument names, and what a user of the command line typed for them.
_OPTION_WORDS = {
    "n_chips": "--chips", "hbm_bytes": "--hbm-bytes", "param_count": "--params",
    "kv_bytes_per_token": "--kv-bytes-per-token", "kv_bytes_per_seq": "--kv-bytes-per-token x --context",
    "kv_cache_bytes": "--batch x --context x --kv-bytes-per-token", "param_bytes": "--params x --weight-dtype",
    "weight_bytes": "the weights (--params x --weight-dtype)", "bytes_per_param": "--weight-dtype",
    "kv_budget_bytes": "the KV budget", "chips_per_node": "--chips-per-node", "dispatch": "dispatch",
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
            print(json.dumps(result.data if isinstance(result, _Answer) else result, indent=2, allow_nan=False))
        elif isinstance(result, _Answer):
            result.show()
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
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _build_parser(argv[0] if argv and argv[0] in _COMMANDS else None).parse_args(argv)
    compute = _COMMANDS[args.command][0]
    try:
        _refuse_ignored(args)
        # a config's hints (kvmath.hf_config warnings) are shown after a good answer, one line each
        with np.errstate(all="ignore"), warnings.catch_warnings(record=True) as hints:
            warnings.simplefilter("always")
            result = compute(args)
        if _non_finite(result.data if isinstance(result, _Answer) else result):
            raise ResultOverflow("non-finite result")
        if getattr(args, "_weights_formats", None) and isinstance(result, _Answer) and isinstance(result.data, dict):
            result.data["weights_formats"] = args._weights_formats
        text = _render(args, result)
    except (ValueError, ArithmeticError) as err:
        message = _encodable(f"kvmath {args.command}: error: {_user_message(args, err)}\n", sys.stderr)
        sys.stderr.write(message)
        return 2
    notes = [str(h.message) for h in hints if issubclass(h.category, UserWarning)] + getattr(args, "_notes", [])
    for note in dict.fromkeys(notes):  # what a run assumed, on stderr so --json output stays JSON
        sys.stderr.write(_encodable(f"kvmath {args.command}: note: {note}\n", sys.stderr))
    try:
        sys.stdout.write(_encodable(text, sys.stdout))
        sys.stdout.flush()
    except BrokenPipeError:
        # `kvmath models | head` closes the pipe early: that is not an error.
        # Point stdout at devnull so the flush at exit does not fail again
        # (the recipe in Python's signal module documentation).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return result.status if isinstance(result, _Answer) else 0
