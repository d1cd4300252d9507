"""The serving commands of the command line: ``load``, ``size``, ``energy``, ``offload``, ``speculate``, ``disaggregate``.

Each is one parser block and one function from options to a result whose
``to_dict()`` is ``--json``, on the helpers of :mod:`kvmath.cli` (the same
model, chip, layout and link options; bad input exits 2 with one line).
"""

from __future__ import annotations

import numpy as np

from .cli import (
    _Answer,
    _add_chip_options,
    _add_layout_options,
    _add_model_options,
    _model,
    _number,
    _Once,
    _OnceFlag,
    _request_deployment,
)
from .formatting import fmt_bytes, fmt_seconds
from .prefix import unit_interval
from .validation import non_negative, positive, positive_int


def _numbers(text: str) -> np.ndarray | float:
    """'1,2,4' as an array (one number as a float): several (rate, target) pairs in one call."""
    parts = [_number(t) for t in text.split(",")]
    return parts[0] if len(parts) == 1 else np.array(parts)


def _percentiles(option: str, value) -> np.ndarray:
    p = np.atleast_1d(np.asarray(value, dtype=float))
    if np.any(~np.isfinite(p)) or np.any((p <= 0) | (p >= 100)):
        raise ValueError(f"{option} must be strictly between 0 and 100, got {value!r}")
    return p


def _prefix_kwargs(args, prompt_option: str, prompt: int) -> dict:
    """--prefix-tokens, --prefix-hit-rate and --block-size as the library's prefix arguments (checked, named): the
    prefix is the start of every prompt, so no longer than ``prompt`` tokens (the value of ``prompt_option``)."""
    if args.prefix_tokens is None:
        for dest, option in (("prefix_hit_rate", "--prefix-hit-rate"), ("block_size", "--block-size")):
            # capacity takes --block-size for its vLLM engine too; a hit rate without a prefix means nothing anywhere
            # (review R25c-6: capacity ignored it)
            if getattr(args, dest, None) is not None and not (dest == "block_size" and args.command == "capacity"):
                raise ValueError(f"{option} needs --prefix-tokens (the shared prefix's length)")
        return {}
    out = {"prefix_tokens": float(positive_int("--prefix-tokens", args.prefix_tokens))}
    if out["prefix_tokens"] > prompt:
        raise ValueError(f"--prefix-tokens {out['prefix_tokens']:,.0f} is longer than {prompt_option} {prompt:,.0f}: a "
                         "shared prefix is the start of every prompt, so at most its length")
    if args.prefix_hit_rate is not None:
        out["prefix_hit_rate"] = float(unit_interval("--prefix-hit-rate", args.prefix_hit_rate))
    if args.block_size is not None:
        out["block_size"] = int(positive_int("--block-size", args.block_size))
    return out


def add_prefix_options(p) -> None:
    """--prefix-tokens and --prefix-hit-rate (and --block-size where the command has none yet)."""
    from .memory import BLOCK_SIZE

    p.add_argument("--prefix-tokens", type=_number, action=_Once,
                   help="a shared prompt prefix of this many tokens, cached (prefix caching; default: none)")
    p.add_argument("--prefix-hit-rate", type=_number, action=_Once,
                   help="fraction of requests that find the prefix cached, in [0, 1] (default: 1 with --prefix-tokens)")
    if not any("--block-size" in a.option_strings for a in p._actions):
        p.add_argument("--block-size", type=_number, action=_Once,
                       help=f"tokens per cache block: only whole blocks are reused (default: vLLM's {BLOCK_SIZE})")


def add_times_option(p) -> None:
    """--times: the service times the load model takes (kvmath.load.TIMES)."""
    from .load import TIMES

    p.add_argument("--times", type=str.lower, choices=TIMES, default="bound", action=_Once,
                   help="service times: the step model's lower bounds, or kvmath.estimate's estimates with the "
                        "answer also at their 80%% interval's ends (default: bound)")


def _add_serving_parsers(sub, only: str | None) -> None:
    """The serving commands' parsers (each only when asked for, as the others)."""
    def common(name, text, request=True):
        p = sub.add_parser(name, help=text)
        _add_model_options(p, notes=False)
        _add_chip_options(p)
        if name != "size":
            _add_layout_options(p)
        if request:
            p.add_argument("--input", type=_number, required=True, help="prompt tokens per request (required)",
                           action=_Once)
            p.add_argument("--output", type=_number, required=True, help="output tokens per request (required)",
                           action=_Once)
        return p

    if only in (None, "load"):
        from .load import MAX_SIMULATED_REQUESTS, REPLICAS

        p = common("load", "utilisation, queueing, TTFT and TPOT percentiles at an arrival rate (kvmath.load)")
        p.add_argument("--rate", type=_numbers, required=True, action=_Once,
                       help="requests/s, or several comma-separated (required)")
        p.add_argument("--percentiles", type=_numbers, default=np.array([50.0, 90.0, 99.0]), action=_Once,
                       help="comma-separated, each in (0, 100) (default: 50,90,99)")
        p.add_argument("--simulate", type=_number, action=_Once,
                       help=f"also simulate the scheduler with this many requests on each of {REPLICAS} replicas, at most "
                            f"{MAX_SIMULATED_REQUESTS // REPLICAS:,} (default: none)")
        p.add_argument("--seed", type=_number, default=0, action=_Once, help="the simulation's seed, a whole number, 0 or more (default: 0)")
        add_times_option(p)
        add_prefix_options(p)
    if only in (None, "size"):
        p = common("size", "fewest chips and layout meeting TTFT and TPOT targets at a load (kvmath.sizing)")
        p.add_argument("--max-chips", type=_number, required=True, action=_Once, help="most chips a layout may use (required)")
        p.add_argument("--rate", type=_numbers, action=_Once, help="requests/s, or several comma-separated (required unless --users is given)")
        p.add_argument("--users", type=_numbers, action=_Once, help="concurrent users (a closed loop), instead of --rate (no default: one of the two is required)")
        p.add_argument("--think-s", type=_numbers, action=_Once,
                       help="with --users: seconds each user waits between requests (default: 0)")
        p.add_argument("--ttft-s", type=_numbers, required=True, action=_Once,
                       help="target on the time to first token at --percentile, seconds (required; comma-separated for several)")
        p.add_argument("--tpot-s", type=_numbers, required=True, action=_Once,
                       help="target on the mean time per output token, seconds (required; comma-separated for several)")
        p.add_argument("--percentile", type=_number, default=90.0, action=_Once,
                       help="the TTFT percentile the target applies to, in (0, 100) (default: 90)")
        add_times_option(p)
    if only in (None, "energy"):
        p = common("energy", "joules per output token: the floor from bytes and FLOPs, and board power's estimate",
                   request=False)
        p.add_argument("--batch", type=_number, default=1, action=_Once, help="sequences per step (default: 1)")
        p.add_argument("--context", type=_number, required=True, action=_Once, help="tokens in each cache (required)")
        p.add_argument("--power-cap", type=_number, action=_Once,
                       help="watts per chip the chip is capped at, at most its board power: the step slows, its energy "
                            "assumed unchanged (default: none)")
        p.add_argument("--pj-per-flop", type=_number, default=0.0, action=_Once,
                       help="picojoules per FLOP counted in the floor (default: 0, no sourced figure)")
    if only in (None, "offload"):
        p = common("offload", "KV caches or experts in host memory or on NVMe, moved over a link (kvmath.offload)",
                   request=False)
        p.add_argument("--what", type=str.lower, choices=("kv", "experts"), default="kv", action=_Once,
                       help="what is offloaded (default: kv)")
        p.add_argument("--batch", type=_number, required=True, action=_Once, help="sequences per step (required)")
        p.add_argument("--context", type=_number, required=True, action=_Once, help="tokens in each cache (required)")
        p.add_argument("--offload-link", default="pcie5-x16", action=_Once,
                       help="the link to host memory or the drive (see `kvmath links`; default: pcie5-x16)")
        p.add_argument("--fraction", type=_number, action=_Once,
                       help="with --what experts: fraction of the routed experts off the chip, in [0, 1] (required there)")
    if only in (None, "speculate"):
        p = common("speculate", "speculative or multi-token decoding: speed-up and break-even batch", request=False)
        p.add_argument("--batch", type=_number, default=1, action=_Once, help="sequences per step (default: 1)")
        p.add_argument("--context", type=_number, required=True, action=_Once, help="tokens in each cache (required)")
        p.add_argument("--gamma", type=_number, required=True, action=_Once, help="draft tokens per step (required)")
        p.add_argument("--acceptance", type=_number, action=_Once,
                       help="each draft token's acceptance rate, in [0, 1] (required unless --tokens-per-step)")
        p.add_argument("--draft", action=_Once, help="draft model preset (default: none, a free draft or MTP heads)")
        p.add_argument("--tokens-per-step", type=_number, action=_Once,
                       help="measured tokens per verify step instead of --acceptance (tree drafts, MTP heads; default: from --acceptance)")
        p.add_argument("--verify-tokens", type=_number, action=_Once,
                       help="tokens verified per sequence (default: gamma + 1; a tree of n candidates: n + 1)")
    if only in (None, "disaggregate"):
        p = common("disaggregate", "prefill chips per decode chip for a request shape and latency targets")
        p.add_argument("--decode-batch", type=_number, action=_Once,
                       help="sequences a decode instance runs together (default: the most that fit, or meet --tpot-s)")
        p.add_argument("--ttft-s", type=_number, action=_Once, help="TTFT target at --percentile, seconds (default: none)")
        p.add_argument("--tpot-s", type=_number, action=_Once, help="TPOT target, seconds (default: none)")
        p.add_argument("--percentile", type=_number, default=90.0, action=_Once,
                       help="the TTFT percentile the target applies to, in (0, 100) (default: 90)")
        p.add_argument("--transfer-link", default="nvlink4", action=_Once,
                       help="the link the cache crosses between the pools (see `kvmath links`; default: nvlink4)")


# ----- one function per command ---------------------------------------------------------------

def _load(args) -> _Answer:
    from .load import seed_value, serving_load, simulated_requests

    dep = _request_deployment(args)
    rate = positive("--rate", args.rate)
    pct = _percentiles("--percentiles", args.percentiles)
    sim = None if args.simulate is None else simulated_requests("--simulate", args.simulate)
    s_in = int(positive_int("--input", args.input))
    prefix = _prefix_kwargs(args, "--input", s_in)
    if prefix and args.times != "bound":  # said with the options, not serving_load's argument names (R25b-5)
        raise ValueError(f"--times {args.times} prices no cached prefix (the estimate is fitted on runs without one): "
                         "give --prefix-tokens with --times bound, or drop it")
    load = serving_load(dep, rate, s_in, int(positive_int("--output", args.output)), percentiles=pct,
                        simulate_requests=sim, seed=seed_value("--seed", args.seed), times=args.times, **prefix)
    return _Answer(load.to_dict(), lambda: _print_load(load))


#: How each kind of service times reads in the commands' text.
_TIMES_TEXT = {"bound": "the step bounds' times", "estimate": "the step estimates' times",
               "estimate_low": "at the estimates' 80% interval's low end", "estimate_high": "at its high end"}


def _print_load(load) -> None:
    print(f"load: {load.input_tokens:,.0f} in, {load.output_tokens:,.0f} out, {load.n_chips} chip(s) "
          f"(an estimate from {_TIMES_TEXT[load.times]})")
    _print_load_rows(load)
    sims = [] if load.simulated is None else np.atleast_1d(load.simulated).tolist()
    for sim in sims:
        pcts = "  ".join(f"p{p:g} {fmt_seconds(t)}" for p, t in zip(sim.percentiles, sim.ttft_percentiles_s))
        print(f"  simulated at {sim.arrival_rate:g} req/s ({sim.replicas} x {sim.n_requests:,d} requests): TTFT "
              f"{fmt_seconds(sim.ttft_s)} ({pcts}), TPOT {fmt_seconds(sim.tpot_s)}")
    for end in (load.at_low, load.at_high):
        if end is not None:
            print(f" {_TIMES_TEXT[end.times]}:")
            _print_load_rows(end)
    if load.at_low is not None:
        print(" (the ends put every prefill and step at once at its estimate's 80% interval end: not an interval on "
              "TTFT or TPOT)")


def _print_load_rows(load) -> None:
    rates = np.atleast_1d(load.arrival_rate)
    for i, rate in enumerate(rates):
        pick = (lambda x: np.atleast_1d(x)[i]) if np.ndim(load.arrival_rate) else (lambda x: x)
        if not pick(load.fits):
            print(f"  {rate:g} req/s: utilisation {pick(load.utilisation):.2f}, not served (unstable or out of memory)")
            continue
        pcts = "  ".join(f"p{p:g} {fmt_seconds(np.asarray(load.ttft_percentiles_s)[k].reshape(-1)[i if rates.size > 1 else 0])}"
                         for k, p in enumerate(load.percentiles))
        print(f"  {rate:g} req/s: utilisation {pick(load.utilisation):.2f} (stable below 1), busy "
              f"{pick(load.busy):.0%} of the time, TTFT {fmt_seconds(pick(load.ttft_s))} ({pcts}), "
              f"TPOT {fmt_seconds(pick(load.tpot_s))}")


def _size(args) -> _Answer:
    from .sizing import size

    if not args.model and not args.config:
        raise ValueError("kvmath size needs --model or --config")
    if not args.hardware:
        raise ValueError("kvmath size needs --hardware (the chip to count)")
    if (args.rate is None) == (args.users is None):
        raise ValueError("give one of --rate and --users")
    if args.users is None and args.think_s is not None:
        raise ValueError("--think-s needs --users (a closed loop of users); with --rate it has no meaning")
    think = 0.0 if args.think_s is None else non_negative("--think-s", args.think_s)
    demand = dict(arrival_rate=positive("--rate", args.rate)) if args.users is None else dict(
        users=positive("--users", args.users), think_s=think)
    pct = float(_percentiles("--percentile", args.percentile)[0])
    from .cli import _chip

    s = size(_model(args), _chip(args), int(positive_int("--max-chips", args.max_chips)),
             positive("--ttft-s", args.ttft_s), positive("--tpot-s", args.tpot_s),
             int(positive_int("--input", args.input)), int(positive_int("--output", args.output)), percentile=pct,
             weights=args.weight_dtype, kv=args.kv_dtype, times=args.times, **demand)
    return _Answer(s.to_dict(), lambda: _print_size(s, demand.get("users")))


def _print_size(s, users=None) -> None:
    print(f"size: {s.model} on {s.chip}, TTFT p{s.percentile:g} and mean TPOT targets "
          f"(an estimate from {_TIMES_TEXT[s.times]})")
    rows = zip(*(np.atleast_1d(x) for x in (s.arrival_rate, s.ttft_target_s, s.tpot_target_s, s.feasible, s.n_chips,
                                           s.goodput_rps)))
    layouts = s.layout if isinstance(s.layout, list) else [s.layout]
    ends = [np.atleast_1d(e.n_chips) for e in (s.at_low, s.at_high)] if s.at_low is not None else None
    for i, ((rate, ttft, tpot, ok, chips, goodput), layout) in enumerate(zip(rows, layouts)):
        where = (f"{int(chips)} chip(s), {layout}, goodput {goodput:,.2f} req/s" if ok
                 else "no layout meets it (feasible: false)")
        if ends is not None:  # the interval's ends: 0 chips is none meeting it
            low, high = ("none" if e[i] == 0 else f"{int(e[i])}" for e in ends)
            where += f"; chips at the 80% interval's ends: {low} .. {high}"
        load = f"{rate:g} req/s" if np.isfinite(rate) else f"{np.broadcast_to(users, np.shape(s.feasible)).ravel()[i]:g} users"
        print(f"  {load}, TTFT <= {fmt_seconds(ttft)}, TPOT <= {fmt_seconds(tpot)}: {where}")


def _energy(args) -> _Answer:
    from .energy import energy_per_token

    dep = _request_deployment(args)
    cap = None if args.power_cap is None else positive("--power-cap", args.power_cap)
    if cap is not None:
        board = _sourced_board_power(dep.chip.name)
        if board is not None and cap > board:
            raise ValueError(f"--power-cap must be at most {dep.chip.name}'s board power, {board:g} W (a cap above it "
                             f"does not bind), got {args.power_cap!r}")

    e = energy_per_token(dep, positive("--batch", args.batch), positive_int("--context", args.context),
                         power_cap_w=cap, pj_per_flop=non_negative("--pj-per-flop", args.pj_per_flop))
    # the energy of a step is priced at any batch; whether that batch's caches fit is said beside it (review R25c-7)
    most = int(dep.capacity(e.context).max_batch)
    answer = {**e.to_dict(), "max_batch": most, "fits": bool(e.batch <= most)}
    return _Answer(answer, lambda: _print_energy(e, dep.chip.name, most))


def _sourced_board_power(chip_name: str):
    """The chip's sourced board power in watts, or None where energy.csv has none."""
    from .energy import chip_board_power_w

    try:
        return chip_board_power_w(chip_name)
    except ValueError:
        return None


def _print_energy(e, chip_name: str, most: int) -> None:
    print(f"energy, B = {e.batch:g}, S = {e.context:g}, {e.n_chips} chip(s)")
    if e.batch > most:
        print(f"  B = {e.batch:g} does not fit: at most {most:,} sequences of {e.context:g} tokens (priced as if it did)")
    print(f"  bytes read per chip      {fmt_bytes(e.bytes_read_per_chip)}  (at {e.pj_per_bit} pJ/bit)")
    print(f"  floor per output token   {e.joules_per_token_floor:.4g} J  ({e.tokens_per_mwh_ceiling:.3g} tokens/MWh at most)")
    if e.power_cap_w is not None:
        print(f"  step bound under the cap {fmt_seconds(e.step_s)}  ({e.power_cap_w:g} W per chip)")
    if e.joules_per_token_estimate is not None:
        power = e.board_power_w if e.power_cap_w is None else e.power_cap_w
        capped = "" if e.power_cap_w is None else (f", slowed {e.board_power_w / e.power_cap_w:.3g}x from "
                                                    f"{e.board_power_w:g} W: the cap is assumed to save no energy")
        print(f"  board power x step       {e.joules_per_token_estimate:.4g} J per token  (estimate, decode only, "
              f"80% interval {e.joules_per_token_estimate_low:.4g} .. {e.joules_per_token_estimate_high:.4g} J; "
              f"{power:g} W per chip for the step's estimate {fmt_seconds(e.estimate_step_s)}{capped})")
    else:
        print(f"  no sourced board power for {chip_name} (kvmath/data/energy.csv): no estimate, the floor only")


def _offload(args) -> _Answer:
    from .offload import expert_offload, kv_offload

    dep = _request_deployment(args)
    # a KV cache is one whole sequence's; experts are read by a mean batch's tokens, which may be fractional
    batch = (positive_int if args.what == "kv" else positive)("--batch", args.batch)
    context = positive_int("--context", args.context)
    try:
        from .links import Link

        link = Link.preset(args.offload_link)
    except ValueError as err:
        raise ValueError(f"--offload-link: {err}") from None
    if args.what == "kv":
        if args.fraction is not None:
            raise ValueError("--fraction is for --what experts; the cache offloads what does not fit")
        o = kv_offload(dep, batch, context, link=link)
    else:
        if args.fraction is None:
            raise ValueError("--what experts needs --fraction (the share of routed experts off the chip)")
        o = expert_offload(dep, batch, context, unit_interval("--fraction", args.fraction), link=link)
    return _Answer(o.to_dict(), lambda: _print_offload(o))


def _print_offload(o) -> None:
    print(f"offload of {o.kind} over {o.link}, B = {o.batch:g}, S = {o.context:g}")
    moved = o.offloaded_bytes_per_step
    print(f"  moved per step           {f'{fmt_bytes(moved)} in {fmt_seconds(o.link_s)}' if moved else 'nothing'}")
    print(f"  step, lower bound        {fmt_seconds(o.step_s)}  (the chip alone: {fmt_seconds(o.chip_step_s)})")
    print(f"  sequences that fit       {o.max_batch_chip:,.0f} on the chip, {o.max_batch:,.0f} with offload")
    if not moved:  # nothing crosses the link: no verdict on offloading (R25b-4)
        why = (f"B = {o.batch:g} fits on the chip" if o.kind == "kv" else "no expert is off the chip (--fraction 0)")
        print(f"  tokens/s                 {o.tokens_per_s:,.0f} ({o.tokens_per_s_chip_only:,.0f} at the chip's "
              f"largest batch): nothing to offload, {why}")
        return
    print(f"  tokens/s                 {o.tokens_per_s:,.0f} against {o.tokens_per_s_chip_only:,.0f} without: "
          f"{'pays' if o.pays else 'does not pay'}")


def _speculate(args) -> _Answer:
    from .speculative import speculation_break_even_batch, speculative_decode

    dep = _request_deployment(args)
    gamma = int(positive_int("--gamma", args.gamma))
    if (args.acceptance is None) == (args.tokens_per_step is None):
        raise ValueError("give one of --acceptance and --tokens-per-step")
    acceptance = None if args.acceptance is None else float(unit_interval("--acceptance", args.acceptance))
    options = {}
    if args.tokens_per_step is not None:
        options["tokens_per_step"] = float(positive("--tokens-per-step", args.tokens_per_step))
    if args.verify_tokens is not None:
        options["verify_tokens"] = int(positive_int("--verify-tokens", args.verify_tokens))
    batch, context = positive("--batch", args.batch), positive_int("--context", args.context)
    try:
        s = speculative_decode(dep, batch, context, gamma, acceptance, args.draft, **options)
        even = speculation_break_even_batch(dep, context, gamma, acceptance, args.draft, none_if_always_pays=True,
                                            **options)
    except ValueError as err:
        text = str(err)
        for word, option in (("tokens_per_step", "--tokens-per-step"), ("verify_tokens", "--verify-tokens"),
                             ("acceptance", "--acceptance"), ("draft", "--draft"), ("gamma", "--gamma")):
            text = text.replace(word, option) if option not in text else text
        if "does not pay at any batch" in text:
            even = 0.0
            s = speculative_decode(dep, batch, context, gamma, acceptance, args.draft, **options)
        else:
            raise ValueError(text) from None
    try:
        fits = int(np.min(dep.capacity(int(np.max(context))).max_batch))   # the break-even search ignores memory
    except ValueError:
        fits = None
    data = {**s.to_dict(), "break_even_batch": even, "max_batch_that_fits": fits}
    return _Answer(data, lambda: _print_speculate(s, even, fits))


def _print_speculate(s, even, fits=None) -> None:
    print(f"speculative decoding: {float(s.expected_tokens):.3g} tokens per verify step")
    print(f"  plain step               {fmt_seconds(s.plain_step_s)}")
    print(f"  verify step + draft      {fmt_seconds(s.verify_step_s)} + {fmt_seconds(s.draft_s)}")
    print(f"  speed-up                 {float(s.speedup):.2f}x  (an estimate: the acceptance is an assumption)")
    if even is not None and even == 0:
        where = "never pays"
    elif fits is not None and (even is None or even >= fits):
        where = f"pays at every batch that fits (up to {fits:,d} at this context)"
    elif even is None:
        where = "pays at every batch up to 1e7"
    else:
        where = f"stops paying above batch {even:,.0f}"
    print(f"  break-even               {where}")


def _disaggregate(args) -> _Answer:
    from .disaggregation import disaggregate

    dep = _request_deployment(args)
    opts = {}
    for dest, option in (("decode_batch", "--decode-batch"), ("ttft_s", "--ttft-s"), ("tpot_s", "--tpot-s")):
        if getattr(args, dest) is not None:
            opts[dest] = float(positive(option, getattr(args, dest)))
    pct = float(_percentiles("--percentile", args.percentile)[0])
    try:
        from .links import Link

        link = Link.preset(args.transfer_link)
    except ValueError as err:
        raise ValueError(f"--transfer-link: {err}") from None
    if positive_int("--output", args.output) < 2:
        raise ValueError(f"--output must be at least 2 (a decode step to disaggregate), got {args.output!r}")
    d = disaggregate(dep, int(positive_int("--input", args.input)), int(positive_int("--output", args.output)),
                     decode_batch=opts.get("decode_batch"), ttft_target_s=opts.get("ttft_s"),
                     tpot_target_s=opts.get("tpot_s"), percentile=pct, link=link)
    return _Answer(d.to_dict(), lambda: _print_disaggregate(d))


def _print_disaggregate(d) -> None:
    print(f"disaggregated: {d.input_tokens:,.0f} in, {d.output_tokens:,.0f} out (an estimate from the step bounds)")
    print(f"  prefill per request      {fmt_seconds(d.prefill_s)} on {d.prefill_chips} chip(s), "
          f"utilisation {d.prefill_utilisation:.2f}")
    print(f"  decode                   batch {d.decode_batch:g}, step {fmt_seconds(d.decode_step_s)}")
    ratio = "none meets the targets" if d.prefill_chips_per_decode_chip is None else f"{d.prefill_chips_per_decode_chip:.2f}"
    print(f"  prefill chips per decode chip  {ratio}{'' if d.feasible else '  (feasible: false)'}")
    print(f"  cache per request        {fmt_bytes(d.kv_bytes_per_request)} over {d.link} in {fmt_seconds(d.transfer_s)}")


#: The serving commands, for :data:`kvmath.cli._COMMANDS`.
_SERVING_COMMANDS = {"load": _load, "size": _size, "energy": _energy, "offload": _offload, "speculate": _speculate,
                     "disaggregate": _disaggregate}
