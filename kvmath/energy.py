"""Energy per token: a floor from the bytes a step moves and the FLOPs it does, and an estimate from board power.

**The floor.** A decode step on a chip reads ``bytes`` from its DRAM and does
``FLOPs`` of arithmetic (:meth:`kvmath.Deployment.step`'s per-chip figures).
Reading a bit of DRAM costs at least the energy of the most efficient DRAM
published for any generation a preset uses. The published per-bit energies:

- HBM2, 3.97 pJ per bit accessed (activation, on-die movement and I/O;
  O'Connor et al., "Fine-Grained DRAM: Energy-Efficient DRAM for Extreme
  Bandwidth Systems", MICRO 2017, doi:10.1145/3123939.3124545; GDDR5 about
  14 pJ/bit in the same paper);
- HBM2E, 6.0 pJ/bit average device power (Micron, "Ultra-Bandwidth
  Solutions" memory comparison, https://www.micron.com/products/ultra-bandwidth-solutions;
  GDDR6 7.5, GDDR6X 7.25 in the same table); SK hynix states about 4.3 pJ/bit
  for HBM2E (Moon et al., IEDM 2023);
- HBM3E, 2.4 pJ/bit: Micron's HBM3 Gen2 (HBM3E, the H200's and B200's memory)
  has "2.5 times" the performance per watt of its HBM2E (Micron's announcement,
  July 2023, reported by Tom's Hardware, https://www.tomshardware.com/news/microns-new-hbm3-is-worlds-fastest-at-12-tbs-also-highest-capacity-in-8-high-stack),
  so 6.0 / 2.5 pJ/bit on the same accounting.

No source found gives a per-bit energy for HBM3 (the H100's) or for an
accelerator's LPDDR or GDDR6X beside these. A floor must not exceed the true
minimum, so :data:`DRAM_PJ_PER_BIT` is the **lowest** of the published
figures, HBM3E's 2.4 pJ/bit, for every chip: per-generation figures would
charge an H100 HBM2's 3.97 pJ/bit, which its HBM3 may beat. HBM2's figure
alone would overstate the floor of an H200 or a B200 by 65%. No source gives
a per-FLOP energy for the tensor cores of a 7 nm or 4 nm chip (Dally's Hot
Chips 2023 keynote quotes 1.5 pJ per half-precision FMA at 45 nm, from
Horowitz, ISSCC 2014, which a newer process beats), so ``pj_per_flop`` is 0
unless given. Per output token,

    E_token >= n_chips (8 bytes pj_per_bit + FLOPs pj_per_flop) 1e-12 / B   joules,

and ``3.6e9 / E_token`` tokens per megawatt-hour (1 MWh = 3.6e9 J) is a
ceiling. The floor leaves out the idle and static power, SRAM, the
interconnect and the host; it is called a floor only because it stays below
every published measured energy per token the tests hold it against
(``tests/data/energy_measurements.csv``).

**A power cap** ``P`` (watts per chip) bounds the step's time from below:
the chip cannot spend its floor's joules faster than ``P``, so
``t >= max(t_step, E_chip / P)``. For the estimate, a capped chip lowers
its clocks until it draws no more than ``P`` (NVIDIA's NVML names this
clock event ``SwPowerCap``: "the clocks have been optimized to ensure not to
exceed currently set power limits",
https://docs.nvidia.com/deploy/nvml-api/api/group__nvmlClocksEventReasons.html).
No source gives how much slower a step runs, so the estimate **assumes** the
step's energy stays what it is at board power: the step takes
``P_board / P`` times as long and the energy per token is unchanged. The
estimate claims no saving from a cap (lower voltages at lower clocks save
some in practice: an upper estimate of the slowdown, and of the energy). A
cap above the board power does not bind and is refused.

**The estimate** is board power times the step's **estimate**
(:func:`kvmath.estimate.estimate_step`, fitted on published measurements,
with its regime's 80% interval), per token: the board at its full power
(its TDP, ``kvmath/data/energy.csv``) for as long as a real engine takes,
the decode step only (a request's prefill is priced apart, by feeding
:func:`board_energy_per_token` a prefill's time). :func:`board_energy_per_token` takes any step time, so a
measured one can feed it too. An estimate, not a bound either way: a board
below its TDP spends less, one whose host and idle chips are counted more.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .deployment import Deployment
from .presets import PresetTable, lookup
from .results import Result
from .validation import ArrayLike, ResultOverflow, broadcast, checked, instance, non_negative, plain, positive

#: pJ per bit accessed in HBM2 (O'Connor et al., MICRO 2017).
HBM2_PJ_PER_BIT = 3.97
#: pJ per bit, HBM2E's average device power in Micron's memory comparison.
HBM2E_PJ_PER_BIT = 6.0
#: Micron's HBM3 Gen2 (HBM3E): this many times the performance per watt of its HBM2E.
HBM3E_GAIN_OVER_HBM2E = 2.5
#: pJ per bit read from DRAM: the lowest published, HBM3E's (Micron's HBM2E figure over its gain), 2.4.
DRAM_PJ_PER_BIT = HBM2E_PJ_PER_BIT / HBM3E_GAIN_OVER_HBM2E

#: Joules in a megawatt-hour.
J_PER_MWH = 3.6e9


@lru_cache(maxsize=1)
def _board_power() -> PresetTable:
    return PresetTable("energy.csv", lambda row: float(row["board_power_w"]))


def chip_board_power_w(chip_name: str) -> float:
    """A chip preset's board power (its TDP, watts), from ``kvmath/data/energy.csv``; ValueError if none is sourced."""
    return lookup(chip_name, _board_power(), "board power (kvmath/data/energy.csv)")


def board_energy_per_token(dep: Deployment, step_s: ArrayLike, tokens_per_step: ArrayLike, *,
                           board_power_w: ArrayLike | None = None) -> ArrayLike:
    """Board power times a step's time, per token, joules: an **estimate**, whatever step time it is fed.

    The hook for a step estimate: ``n_chips * P_board * step_s / tokens_per_step``,
    ``P_board`` the chip's board power (``kvmath/data/energy.csv``) unless given.
    """
    instance("dep", dep, Deployment, "a kvmath.Deployment")
    power = _board(dep, board_power_w)
    return plain(dep.n_chips * power * positive("step_s", step_s) / positive("tokens_per_step", tokens_per_step))


def _board(dep, board_power_w):
    if board_power_w is not None:
        return positive("board_power_w", board_power_w)
    return chip_board_power_w(dep.chip.name)


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class Energy(Result):
    """Energy of a decode step and per output token (joules; arrays where the inputs were).

    Attributes
    ----------
    batch, context : the step's shape.
    n_chips : chips of the deployment.
    bytes_read_per_chip, flops_per_chip : what the busiest chip moves and does (the step's bound).
    pj_per_bit, pj_per_flop : the energies used for the floor.
    joules_per_step_floor : ``n_chips (8 bytes pj_per_bit + FLOPs pj_per_flop) 1e-12``.
    joules_per_token_floor : over the batch's tokens; ``tokens_per_mwh_ceiling`` its reciprocal per MWh.
    power_cap_w : the cap per chip given (None without).
    step_s : the step's lower bound, under the cap where given (``max(t, E_chip / P)``).
    board_power_w : the board power the estimate used (None where no source gives one).
    estimate_step_s, estimate_step_low_s, estimate_step_high_s : the step's estimate and its 80% interval
        (:func:`kvmath.estimate.estimate_step`; under a cap ``P``, ``P_board / P`` times as long, at least
        ``E_chip / P``: the module text's assumption).
    estimate_regime : the calibration regime whose errors set that interval.
    joules_per_token_estimate, tokens_per_mwh_estimate : board power times ``estimate_step_s``, per token (None
        without a board power); ``joules_per_token_estimate_low`` / ``_high`` the interval's ends.
    is_lower_bound : the floor is a bound; the estimate is not.
    """

    batch: ArrayLike
    context: ArrayLike
    n_chips: int
    bytes_read_per_chip: ArrayLike
    flops_per_chip: ArrayLike
    pj_per_bit: float
    pj_per_flop: float
    joules_per_step_floor: ArrayLike
    joules_per_token_floor: ArrayLike
    tokens_per_mwh_ceiling: ArrayLike
    power_cap_w: ArrayLike | None
    step_s: ArrayLike
    board_power_w: ArrayLike | None
    estimate_step_s: ArrayLike
    estimate_step_low_s: ArrayLike
    estimate_step_high_s: ArrayLike
    estimate_regime: str
    joules_per_token_estimate: ArrayLike | None
    joules_per_token_estimate_low: ArrayLike | None
    joules_per_token_estimate_high: ArrayLike | None
    tokens_per_mwh_estimate: ArrayLike | None
    is_lower_bound: bool = True


@checked  # finite inputs whose joules overflow float64 are refused naming them (ResultOverflow), never inf
def energy_per_token(dep: Deployment, batch: ArrayLike, context: ArrayLike, *, pj_per_bit: float = DRAM_PJ_PER_BIT,
                     pj_per_flop: float = 0.0, power_cap_w: ArrayLike | None = None,
                     board_power_w: ArrayLike | None = None) -> Energy:
    """The energy floor of a decode step of ``batch`` sequences at ``context`` tokens, and board power's estimate.

    Examples
    --------
    Llama 3 8B on one H100 at batch 1: the step reads 15.01 GB of bf16 weights (every matrix, the LM head
    included, but one row of the embedding table), 15.01e9 x 8 x 2.4 pJ, 0.29 J a token at least; the board's
    700 W for the step's estimate (6.75 ms) is 4.72 J. Like every estimate here, it counts the decode step
    only: a request's prefill is not in it.

    >>> from kvmath import Deployment
    >>> e = energy_per_token(Deployment("llama-3-8b", "h100-sxm"), 1, 1)
    >>> round(float(e.joules_per_token_floor), 3), f"{float(e.tokens_per_mwh_ceiling):.3g}"
    (0.288, '1.25e+10')
    >>> round(float(e.joules_per_token_estimate), 2), e.estimate_regime
    (4.69, 'batch1')
    """
    from .estimate import estimate_step

    instance("dep", dep, Deployment, "a kvmath.Deployment")
    e_bit = float(positive("pj_per_bit", pj_per_bit))
    e_flop = float(non_negative("pj_per_flop", pj_per_flop))
    broadcast(batch=batch, context=context, power_cap_w=power_cap_w, board_power_w=board_power_w)
    step = dep.step(batch, context)
    moved = step.weight_bytes_read + step.kv_bytes_read
    flops = step.weight_flops + step.attention_flops
    chip_j = (8 * moved * e_bit + flops * e_flop) * 1e-12
    per_step = dep.n_chips * chip_j
    tokens_per_step = step.batch * step.tokens_per_seq
    per_token = per_step / tokens_per_step
    t = step.strict_s
    est = estimate_step(dep, batch, context)
    times = [est.estimate_s, est.estimate_low_s, est.estimate_high_s]
    cap = None
    if power_cap_w is not None:
        cap = positive("power_cap_w", power_cap_w)
        slowest = chip_j / cap  # the chip cannot spend the floor's joules faster than the cap allows
        t = np.maximum(t, slowest)
        times = [np.maximum(x, slowest) for x in times]
    if not (np.all(np.isfinite(chip_j)) and all(np.all(np.isfinite(x)) for x in (t, *times))):
        raise ResultOverflow("energy_per_token")  # @checked names the inputs (pj_per_bit, power_cap_w, ...)
    try:
        board = _board(dep, board_power_w)
    except ValueError:
        board = None  # no sourced board power for this chip: no estimate, the floor stands
    joules = [None, None, None]
    tokens = None
    if board is not None:
        power = board
        if cap is not None:
            if np.any(np.asarray(cap) > board):
                raise ValueError(f"power_cap_w must be at most {dep.chip.name}'s board power, {board:g} W (a cap above "
                                 f"it does not bind), got {power_cap_w!r}")
            # the clocks drop until the board draws the cap: the step's energy at board power, spent at the cap
            times = [np.maximum(x * board / cap, slowest) for x in times]
            power = cap
        joules = [board_energy_per_token(dep, x, tokens_per_step, board_power_w=power) for x in times]
        tokens = plain(J_PER_MWH / np.asarray(joules[0]))
    return Energy(batch=step.batch, context=step.context, n_chips=dep.n_chips, bytes_read_per_chip=plain(moved),
                  flops_per_chip=plain(flops), pj_per_bit=e_bit, pj_per_flop=e_flop,
                  joules_per_step_floor=plain(per_step), joules_per_token_floor=plain(per_token),
                  tokens_per_mwh_ceiling=plain(J_PER_MWH / per_token), power_cap_w=plain(cap) if cap is not None else None,
                  step_s=plain(t), board_power_w=None if board is None else plain(board),
                  estimate_step_s=plain(times[0]), estimate_step_low_s=plain(times[1]),
                  estimate_step_high_s=plain(times[2]), estimate_regime=est.regime,
                  joules_per_token_estimate=joules[0], joules_per_token_estimate_low=joules[1],
                  joules_per_token_estimate_high=joules[2], tokens_per_mwh_estimate=tokens)
