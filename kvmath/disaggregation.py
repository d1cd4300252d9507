"""Disaggregated prefill and decode: how many prefill chips per decode chip, and the cache moved between them.

DistServe and Splitwise run prompts on one pool of chips and decode steps on
another. In the step model a request costs the prefill pool
``t_p(S_in) N_p`` chip-seconds (one prompt's prefill bound on an instance of
``N_p`` chips) and the decode pool ``t_d(B) (S_out - 1) N_d / B`` (its share of
``S_out - 1`` decode steps at batch ``B``, the decode step at the mean context
``S_in + S_out / 2``). The pools balance at

    prefill chips per decode chip = (t_p N_p / rho) / (t_d (S_out - 1) N_d / B),

``rho`` the prefill pool's utilisation. Without targets ``rho = 1`` (every
chip busy: the ratio of the notes). With a TTFT target the prefill instances
are queues (M/D/1: Poisson prompts, fixed prefill time), and ``rho`` is the
highest utilisation whose TTFT percentile (wait + prefill + the cache's
transfer) meets it (:func:`kvmath.load.wait_percentile_s`); with a TPOT
target ``B`` is the largest batch whose decode step meets it and whose caches
fit. Each request's cache, ``k(S_in)`` bytes, crosses ``link`` once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .deployment import Deployment
from .links import Link, p2p_time
from .load import _percentile, wait_percentile_s
from .results import Result
from .moe import ROUTINGS
from .validation import ArrayLike, choice, instance, positive, positive_int

_BISECT = 48


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class Disaggregation(Result):
    """The two pools' sizes for one request shape (seconds, bytes; an estimate built from the step bounds).

    Attributes
    ----------
    input_tokens, output_tokens : the request shape.
    prefill_chips, decode_chips : chips of one prefill and one decode instance.
    prefill_s : one prompt's prefill bound on a prefill instance.
    decode_batch : sequences a decode instance runs together.
    decode_step_s : its decode step at the mean context (the TPOT it gives).
    prefill_chip_s, decode_chip_s : chip-seconds per request on each pool.
    prefill_utilisation : the prefill pool's ``rho`` (1 without a TTFT target).
    ttft_s : the TTFT at ``percentile`` (wait, prefill and transfer) at that utilisation.
    prefill_chips_per_decode_chip : the pools' ratio.
    kv_bytes_per_request, link, transfer_s : the cache moved, over what, and its bound.
    feasible : whether the targets can be met (False: no batch meets the TPOT target, or the
        prefill and transfer alone exceed the TTFT target).
    """

    input_tokens: float
    output_tokens: float
    prefill_chips: int
    decode_chips: int
    prefill_s: float
    decode_batch: float
    decode_step_s: float
    prefill_chip_s: float
    decode_chip_s: float
    prefill_utilisation: float
    ttft_s: float
    percentile: float
    prefill_chips_per_decode_chip: float
    kv_bytes_per_request: float
    link: str
    transfer_s: float
    feasible: bool
    is_lower_bound: bool = False


def disaggregate(prefill: Deployment, input_tokens: int, output_tokens: int, *, decode: Deployment | None = None,
                 decode_batch: float | None = None, ttft_target_s: float | None = None,
                 tpot_target_s: float | None = None, percentile: float = 90.0,
                 link: Link | str = "nvlink4", routing: str = "floor") -> Disaggregation:
    """Prefill chips per decode chip for requests of ``input_tokens`` in and ``output_tokens`` out.

    ``prefill`` and ``decode`` (default the same) are the two pools'
    instances; ``decode_batch`` the decode instance's batch (default: the
    largest that fits at the requests' longest, or that meets ``tpot_target_s``).
    ``routing`` (MoE models): the experts a decode step and a prefill read
    (:func:`kvmath.moe.experts_touched`). The default ``"floor"`` charges
    ``k`` per layer whatever the batch, so it undercharges the decode pool
    and gives an upper bound on the prefill share; ``"uniform"`` estimates
    a real router's reads and is the one to size pools with.

    Examples
    --------
    Llama 3 8B on H100s, 4,000 tokens in and 250 out, decoded 96 at a time (chapter 11's case):

    >>> from kvmath import Deployment
    >>> d = disaggregate(Deployment("llama-3-8b", "h100-sxm"), 4000, 250, decode_batch=96)
    >>> round(d.prefill_s * 1e3, 1), round(d.prefill_chips_per_decode_chip, 2)
    (60.7, 1.17)
    """
    instance("prefill", prefill, Deployment, "a kvmath.Deployment")
    decode = prefill if decode is None else instance("decode", decode, Deployment, "a kvmath.Deployment")
    s_in = float(positive_int("input_tokens", input_tokens))
    s_out = float(positive_int("output_tokens", output_tokens))
    if s_out < 2:
        raise ValueError(f"output_tokens must be at least 2 (a decode step to disaggregate), got {output_tokens!r}")
    p = float(_percentile(percentile))
    try:
        link = Link.preset(link) if isinstance(link, str) else instance("link", link, Link, "a Link or a preset name")
    except ValueError as err:
        raise ValueError(f"link: {err}") from None
    context = s_in + s_out / 2
    routing = choice("routing", routing, ROUTINGS)
    prefill_s = float(prefill.request(1, s_in, 1, routing=routing).ttft_s)
    fits = float(decode.capacity(int(s_in + s_out)).max_batch)
    feasible = fits >= 1
    if decode_batch is None:
        batch = max(fits, 1.0)
        if tpot_target_s is not None:
            grid = np.arange(1, batch + 1)
            ok = decode.mixed_step(grid, context, routing=routing).strict_s <= positive("tpot_target_s", tpot_target_s)
            feasible = feasible and bool(ok.any())
            batch = float(grid[ok].max()) if ok.any() else 1.0
    else:
        batch = float(positive("decode_batch", decode_batch))
    step_s = float(decode.mixed_step(batch, context, routing=routing).strict_s)
    if tpot_target_s is not None and step_s > tpot_target_s:
        feasible = False
    kv = float(prefill._plan.kv_per_seq(s_in))
    transfer = float(p2p_time(kv, link))
    rho = 1.0
    if ttft_target_s is not None:
        target = float(positive("ttft_target_s", ttft_target_s))
        lo, hi = 0.0, 1.0
        for _ in range(_BISECT):  # the highest utilisation whose TTFT percentile meets the target
            mid = (lo + hi) / 2
            wait = mid * prefill_s / (2 * (1 - mid))  # M/D/1
            ok = wait_percentile_s(wait, mid, p) + prefill_s + transfer <= target
            lo, hi = (mid, hi) if ok else (lo, mid)
        rho = lo
        feasible = feasible and rho > 0
    wait = rho * prefill_s / (2 * (1 - rho)) if rho < 1 else np.inf
    ttft = float(wait_percentile_s(wait, rho, p) + prefill_s + transfer) if rho < 1 else float("inf")
    prefill_chip_s = prefill_s * prefill.n_chips
    decode_chip_s = step_s * (s_out - 1) * decode.n_chips / batch
    ratio = prefill_chip_s / max(rho, 1e-300) / decode_chip_s if rho > 0 else float("inf")
    return Disaggregation(input_tokens=s_in, output_tokens=s_out, prefill_chips=prefill.n_chips,
                          decode_chips=decode.n_chips, prefill_s=prefill_s, decode_batch=batch, decode_step_s=step_s,
                          prefill_chip_s=prefill_chip_s, decode_chip_s=decode_chip_s, prefill_utilisation=rho,
                          ttft_s=ttft if np.isfinite(ttft) else None, percentile=p,
                          prefill_chips_per_decode_chip=ratio if np.isfinite(ratio) else None,
                          kv_bytes_per_request=kv, link=link.name, transfer_s=transfer, feasible=bool(feasible))
