"""The ``kvmath`` command line: decode, capacity, critical-batch, models, hardware.

Every subcommand prints base-unit results formatted at the edge, or one
JSON object with ``--json``. Bad input exits with status 2 and a one-line
message on stderr; it never shows a traceback.
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
from typing import Sequence

from .capacity import kv_budget_bytes, max_batch, max_kv_tokens, min_chips_for_weights, weight_bytes
from .decode import critical_batch, critical_batch_beta_alpha, step_breakdown, tokens_per_s, tokens_per_s_per_seq
from .formatting import fmt_bandwidth, fmt_bytes, fmt_count, fmt_flop_rate, fmt_seconds
from .hardware import chip_names, get_chip
from .models import get_model, model_names
from .parallel import KV_SHARDINGS, kv_bytes_per_chip, tensor_parallel_step
from .units import DTYPE_BYTES, dtype_bytes
from .validation import ResultOverflow, fraction, positive, positive_int

COMPUTE_DTYPES = ("bf16", "fp16", "fp8", "int8")


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


def _add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", action=_Once, help="model preset (see `kvmath models`); default: none, "
                   "then --params and --kv-bytes-per-token are both needed")
    p.add_argument("--params", type=_number, action=_Once,
                   help="parameters each token uses (a count); overrides the --model preset's "
                        "(default: the preset's active parameters)")
    p.add_argument("--kv-bytes-per-token", type=_number, action=_Once,
                   help="KV cache bytes per token; overrides the --model preset's, which --kv-dtype "
                        "otherwise sets (default: from the preset)")
    p.add_argument("--weight-dtype", default="bf16", choices=sorted(DTYPE_BYTES), type=str.lower, action=_Once,
                   help="number format of the stored weights (default: %(default)s)")
    p.add_argument("--kv-dtype", default="bf16", choices=sorted(DTYPE_BYTES), type=str.lower, action=_Once,
                   help="number format of the cached keys and values, used with --model "
                        "(default: %(default)s; not with --kv-bytes-per-token)")


def _add_hardware_options(p: argparse.ArgumentParser, chips_help: str) -> None:
    p.add_argument("--hardware", action=_Once, help="chip preset (see `kvmath hardware`); default: none, "
                   "then --bandwidth and --flops are both needed")
    p.add_argument("--chips", type=_number, action=_Once, help=chips_help)
    p.add_argument("--bandwidth", type=_number, action=_Once,
                   help="HBM bytes/s per chip; overrides the --hardware preset's (default: from the preset)")
    p.add_argument("--flops", type=_number, action=_Once,
                   help="dense FLOP/s per chip in the compute dtype; overrides the --hardware preset's "
                        "rate for --compute-dtype (default: from the preset)")
    p.add_argument("--compute-dtype", default="bf16", choices=COMPUTE_DTYPES, type=str.lower, action=_Once,
                   help="dtype the matmuls run in; picks the --hardware preset's FLOP/s rate "
                        "(default: %(default)s; not with --flops)")
    p.add_argument("--json", action=_OnceFlag, help="print one JSON object instead of text (default: text)")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kvmath", description="The arithmetic of LLM inference.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    decode = sub.add_parser("decode", help="min-step bound on one decode step and tokens/s")
    _add_model_options(decode)
    _add_hardware_options(decode, "number of chips N running tensor parallel (default: 1)")
    decode.add_argument("--batch", type=_number, required=True, action=_Once, help="sequences per step, B (required)")
    decode.add_argument("--context", type=_number, required=True, action=_Once,
                        help="tokens in each sequence's cache, S (required)")
    decode.add_argument("--kv-shard", default="heads", choices=KV_SHARDINGS, type=str.lower, action=_Once,
                        help="split the cache across chips by heads or by batch (default: %(default)s; "
                             "needs --chips above 1)")
    decode.add_argument("--efficiency", type=_number, default=1.0, action=_Once,
                        help="achieved fraction of peak bandwidth, in (0, 1] (default: %(default)s)")

    capacity = sub.add_parser("capacity", help="chips for the weights, KV budget, tokens and batch that fit")
    _add_model_options(capacity)
    _add_hardware_options(capacity, "number of chips N (default: the fewest that hold the weights)")
    capacity.add_argument("--hbm-bytes", type=_number, action=_Once,
                          help="memory per chip in bytes; overrides the --hardware preset's (default: from the preset)")
    capacity.add_argument("--context", type=_number, required=True, action=_Once,
                          help="tokens per sequence, S (required)")

    crit = sub.add_parser("critical-batch", help="B_crit = C * b_w / (2 W)")
    crit.add_argument("--hardware", action=_Once, help="chip preset; default: none, then --bandwidth and "
                      "--flops are both needed")
    crit.add_argument("--bandwidth", type=_number, action=_Once,
                      help="bytes/s; overrides the --hardware preset's (default: from the preset)")
    crit.add_argument("--flops", type=_number, action=_Once,
                      help="FLOP/s in the compute dtype; overrides the --hardware preset's (default: from the preset)")
    crit.add_argument("--weight-dtype", default="bf16", choices=sorted(DTYPE_BYTES), type=str.lower, action=_Once,
                      help="number format of the stored weights, b_w (default: %(default)s)")
    crit.add_argument("--compute-dtype", default="bf16", choices=COMPUTE_DTYPES, type=str.lower, action=_Once,
                      help="dtype the matmuls run in; picks the --hardware preset's rate "
                           "(default: %(default)s; not with --flops)")
    crit.add_argument("--json", action=_OnceFlag, help="print one JSON object instead of text (default: text)")

    models = sub.add_parser("models", help="list model presets")
    models.add_argument("--json", action=_OnceFlag, help="print JSON instead of a table (default: table)")
    hardware = sub.add_parser("hardware", help="list chip presets")
    hardware.add_argument("--json", action=_OnceFlag, help="print JSON instead of a table (default: table)")
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
    if n_chips < fewest:
        raise ValueError(
            f"the weights ({fmt_bytes(weights)}) need at least {fewest} chips of {fmt_bytes(hbm)}; "
            f"--chips {n_chips} is too few"
        )
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
