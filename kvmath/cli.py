"""The ``kvmath`` command line: decode, capacity, critical-batch, models, hardware.

Every subcommand prints base-unit results formatted at the edge, or one
JSON object with ``--json``. Bad input exits with status 2 and a one-line
message on stderr; it never shows a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Sequence

from .capacity import kv_budget_bytes, max_batch, max_kv_tokens, min_chips_for_weights, weight_bytes
from .decode import critical_batch, critical_batch_beta_alpha, step_breakdown, tokens_per_s, tokens_per_s_per_seq
from .formatting import fmt_bandwidth, fmt_bytes, fmt_count, fmt_flop_rate, fmt_seconds
from .hardware import chip_names, get_chip
from .models import get_model, model_names
from .parallel import KV_SHARDINGS, kv_bytes_per_chip, tensor_parallel_step
from .units import DTYPE_BYTES, dtype_bytes
from .validation import fraction, positive, positive_int

COMPUTE_DTYPES = ("bf16", "fp16", "fp8", "int8")


class _Parser(argparse.ArgumentParser):
    """argparse, but every error is one line on stderr and exit status 2."""

    def error(self, message: str):  # noqa: D102 - argparse hook
        self.exit(2, f"kvmath: error: {message}\n")


def _number(text: str) -> float:
    """Parse '30e9' or '8.2e11'; argparse turns the ValueError into a usage error."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="model preset (see `kvmath models`)")
    p.add_argument("--params", type=_number, help="parameter count, instead of or overriding --model")
    p.add_argument("--kv-bytes-per-token", type=_number, help="KV bytes per token, overriding the model")
    p.add_argument("--weight-dtype", default="bf16", choices=sorted(DTYPE_BYTES), help="stored weights")
    p.add_argument("--kv-dtype", default="bf16", choices=sorted(DTYPE_BYTES), help="cached keys and values")


def _add_hardware_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hardware", help="chip preset (see `kvmath hardware`)")
    p.add_argument("--chips", type=_number, help="number of chips, N (decode: 1; capacity: the fewest that hold the weights)")
    p.add_argument("--bandwidth", type=_number, help="HBM bytes/s per chip, overriding --hardware")
    p.add_argument("--flops", type=_number, help="FLOP/s per chip in the compute dtype, overriding --hardware")
    p.add_argument("--compute-dtype", default="bf16", choices=COMPUTE_DTYPES, help="dtype the matmuls run in")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kvmath", description="The arithmetic of LLM inference.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    decode = sub.add_parser("decode", help="min-step bound on one decode step and tokens/s")
    _add_model_options(decode)
    _add_hardware_options(decode)
    decode.add_argument("--batch", type=_number, required=True, help="sequences per step, B")
    decode.add_argument("--context", type=_number, required=True, help="tokens in each sequence's cache, S")
    decode.add_argument("--kv-shard", default="heads", choices=KV_SHARDINGS, help="split the cache across chips by")
    decode.add_argument("--efficiency", type=_number, default=1.0, help="achieved fraction of peak bandwidth")

    capacity = sub.add_parser("capacity", help="chips for the weights, KV budget, tokens and batch that fit")
    _add_model_options(capacity)
    _add_hardware_options(capacity)
    capacity.add_argument("--hbm-bytes", type=_number, help="memory per chip in bytes, overriding --hardware")
    capacity.add_argument("--context", type=_number, required=True, help="tokens per sequence, S")

    crit = sub.add_parser("critical-batch", help="B_crit = C * b_w / (2 W)")
    crit.add_argument("--hardware", help="chip preset")
    crit.add_argument("--bandwidth", type=_number, help="bytes/s, overriding --hardware")
    crit.add_argument("--flops", type=_number, help="FLOP/s in the compute dtype, overriding --hardware")
    crit.add_argument("--weight-dtype", default="bf16", choices=sorted(DTYPE_BYTES))
    crit.add_argument("--compute-dtype", default="bf16", choices=COMPUTE_DTYPES)
    crit.add_argument("--json", action="store_true")

    models = sub.add_parser("models", help="list model presets")
    models.add_argument("--json", action="store_true")
    hardware = sub.add_parser("hardware", help="list chip presets")
    hardware.add_argument("--json", action="store_true")
    return parser


def _chip_rates(args) -> tuple[float, float]:
    """(bandwidth, FLOP/s) per chip from --hardware, with --bandwidth/--flops overriding."""
    chip = get_chip(args.hardware) if args.hardware else None
    if chip is None and (args.bandwidth is None or args.flops is None):
        raise ValueError("give --hardware, or both --bandwidth and --flops")
    bandwidth = args.bandwidth if args.bandwidth is not None else chip.bandwidth
    flops = args.flops if args.flops is not None else chip.flops(args.compute_dtype)
    return positive("--bandwidth", bandwidth), positive("--flops", flops)


def _model_numbers(args, context: float | None) -> tuple[object, float, float]:
    """(model or None, parameter count used per token, KV bytes per token)."""
    model = get_model(args.model) if args.model else None
    if model is None and (args.params is None or args.kv_bytes_per_token is None):
        raise ValueError("give --model, or both --params and --kv-bytes-per-token")
    params = args.params if args.params is not None else model.active_param_count()
    if args.kv_bytes_per_token is not None:
        kv_per_token = args.kv_bytes_per_token
    else:
        kv_per_token = model.kv_bytes_per_token(dtype_bytes(args.kv_dtype), context=context)
    return model, positive("--params", params), positive("--kv-bytes-per-token", kv_per_token)


def _stored_params(args, model, params_per_token: float) -> float:
    """Parameters held in memory: all experts of an MoE model, not only the active ones."""
    return model.param_count() if model is not None and args.params is None else params_per_token


def _decode(args) -> dict:
    n_chips = positive_int("--chips", 1 if args.chips is None else args.chips)
    batch = positive_int("--batch", args.batch)
    context = positive_int("--context", args.context)
    efficiency = fraction("--efficiency", args.efficiency)
    bandwidth, flops = _chip_rates(args)
    model, params, kv_per_token = _model_numbers(args, context)
    b_w = dtype_bytes(args.weight_dtype, argument="--weight-dtype")
    kv_total = batch * context * kv_per_token
    # With no model there are no KV heads to count; assume the cache splits
    # evenly. An MLA latent is shared by every head, so like MQA it is one head.
    if model is None:
        heads = n_chips
    else:
        heads = 1 if model.attention == "mla" else model.n_kv_heads
    effective_bw = bandwidth * efficiency
    # Weight reads count every stored parameter: at any useful batch an MoE
    # step routes tokens to (nearly) every expert, so all of them are read.
    stored = _stored_params(args, model, params)
    terms = tensor_parallel_step(
        batch, kv_total / batch, heads, weight_bytes(stored, b_w), params, n_chips, effective_bw, flops,
        shard=args.kv_shard,
    )
    return {
        "model": model.name if model else None,
        "hardware": args.hardware,
        "chips": int(n_chips),
        "batch": int(batch),
        "context": int(context),
        "param_count": params,
        "kv_bytes_per_token": kv_per_token,
        "kv_cache_bytes": kv_total,
        "kv_bytes_per_chip": float(kv_bytes_per_chip(kv_total, n_chips, heads, batch=batch, shard=args.kv_shard)),
        "bandwidth_per_chip": effective_bw,
        "flops_per_chip": flops,
        "step_s": float(terms.step_s),
        "kv_s": float(terms.kv_s),
        "weight_memory_s": float(terms.weight_memory_s),
        "weight_compute_s": float(terms.weight_compute_s),
        "bound": terms.bound,
        "tokens_per_s_per_seq": float(tokens_per_s_per_seq(terms.step_s)),
        "tokens_per_s": float(tokens_per_s(terms.step_s, batch)),
        "critical_batch": float(critical_batch(flops, effective_bw, b_w)),
    }


def _print_decode(r: dict) -> None:
    print(f"decode step, B = {r['batch']}, S = {r['context']}, N = {r['chips']} chip(s)")
    print(f"  KV cache (whole batch)   {fmt_bytes(r['kv_cache_bytes'])}; per chip {fmt_bytes(r['kv_bytes_per_chip'])}")
    print(f"  KV read                  {fmt_seconds(r['kv_s'])}")
    print(f"  weights, memory          {fmt_seconds(r['weight_memory_s'])}")
    print(f"  weights, compute         {fmt_seconds(r['weight_compute_s'])}")
    print(f"  min-step                 {fmt_seconds(r['step_s'])}  (weights {r['bound']}-bound)")
    print(f"  tokens/s per sequence    {r['tokens_per_s_per_seq']:.2f}")
    print(f"  tokens/s for the batch   {r['tokens_per_s']:.2f}")
    print(f"  critical batch B_crit    {r['critical_batch']:.1f}")


def _capacity(args) -> dict:
    context = positive_int("--context", args.context)
    model, params, kv_per_token = _model_numbers(args, context)
    stored = _stored_params(args, model, params)
    chip = get_chip(args.hardware) if args.hardware else None
    if chip is None and args.hbm_bytes is None:
        raise ValueError("give --hardware or --hbm-bytes")
    hbm = positive("--hbm-bytes", args.hbm_bytes if args.hbm_bytes is not None else chip.hbm_bytes)
    weights = weight_bytes(stored, dtype_bytes(args.weight_dtype, argument="--weight-dtype"))
    fewest = min_chips_for_weights(weights, hbm)
    n_chips = fewest if args.chips is None else int(positive_int("--chips", args.chips))
    budget = kv_budget_bytes(n_chips, hbm, weights)
    result = {
        "model": model.name if model else None,
        "weight_bytes": weights,
        "min_chips": fewest,
        "chips": n_chips,
        "kv_budget_bytes": float(budget),
        "kv_bytes_per_token": kv_per_token,
        "max_tokens": max_kv_tokens(budget, kv_per_token),
        "context": int(context),
        "max_batch": max_batch(budget, kv_per_token * context),
    }
    if chip is not None or args.bandwidth is not None:
        bandwidth, flops = _chip_rates(args)
        result["critical_batch"] = float(critical_batch(flops, bandwidth, dtype_bytes(args.weight_dtype)))
    return result


def _print_capacity(r: dict) -> None:
    print(f"weights                {fmt_bytes(r['weight_bytes'])}  (fewest chips: {r['min_chips']})")
    print(f"KV budget on {r['chips']} chip(s) {fmt_bytes(r['kv_budget_bytes'])}")
    print(f"KV per token           {r['kv_bytes_per_token']:,.0f} B")
    print(f"tokens that fit        {r['max_tokens']:,}")
    print(f"batch at S = {r['context']:,}  {r['max_batch']:,}")
    if "critical_batch" in r:
        print(f"critical batch B_crit  {r['critical_batch']:.1f}")


def _critical(args) -> dict:
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


def _models() -> list[dict]:
    rows = []
    for name in model_names():
        m = get_model(name)
        rows.append({
            "name": name, "attention": m.attention, "param_count": m.param_count(),
            "active_param_count": m.active_param_count(), "kv_bytes_per_token_bf16": m.kv_bytes_per_token(),
            "source": m.source,
        })
    return rows


def _print_models(rows: list[dict]) -> None:
    print(f"{'model':<17}{'attn':<6}{'params':>9}{'active':>9}{'KV B/token (bf16)':>19}")
    for r in rows:
        print(f"{r['name']:<17}{r['attention']:<6}{fmt_count(r['param_count']):>9}"
              f"{fmt_count(r['active_param_count']):>9}{r['kv_bytes_per_token_bf16']:>19,.0f}")


def _hardware() -> list[dict]:
    rows = []
    for name in chip_names():
        c = get_chip(name)
        rows.append({"name": name, "hbm_bytes": c.hbm_bytes, "bandwidth": c.bandwidth,
                     "flops_by_dtype": dict(c.flops_by_dtype), "ridge_bf16": c.ridge_point(), "source": c.source})
    return rows


def _print_hardware(rows: list[dict]) -> None:
    print(f"{'chip':<11}{'HBM':>10}{'bandwidth':>12}{'bf16':>16}{'ridge':>7}")
    for r in rows:
        print(f"{r['name']:<11}{r['hbm_bytes'] / 1e9:>7.0f} GB{fmt_bandwidth(r['bandwidth']):>12}"
              f"{fmt_flop_rate(r['flops_by_dtype']['bf16']):>16}{r['ridge_bf16']:>7.0f}")


_COMMANDS = {
    "decode": (_decode, _print_decode),
    "capacity": (_capacity, _print_capacity),
    "critical-batch": (_critical, _print_critical),
    "models": (lambda args: _models(), _print_models),
    "hardware": (lambda args: _hardware(), _print_hardware),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvmath`` console script; returns the exit status."""
    args = _build_parser().parse_args(argv)
    compute, show = _COMMANDS[args.command]
    try:
        result = compute(args)
    except ValueError as err:
        print(f"kvmath {args.command}: error: {err}", file=sys.stderr)
        return 2
    try:
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            show(result)
        sys.stdout.flush()
    except BrokenPipeError:
        # `kvmath models | head` closes the pipe early: that is not an error.
        # Point stdout at devnull so the flush at exit does not fail again
        # (the recipe in Python's signal module documentation).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
