"""Energy per token: a floor from the bytes a step moves and the FLOPs it does, and an estimate from board power.

**The floor.** A decode step on a chip reads ``bytes`` from its DRAM and does
``FLOPs`` of arithmetic (:meth:`kvmath.Deployment.step`'s per-chip figures).
Reading a bit of DRAM costs at least the energy of the most efficient DRAM
published: HBM2, about 3.97 pJ per bit accessed (activation, on-die movement
and I/O; O'Connor et al., "Fine-Grained DRAM: Energy-Efficient DRAM for
Extreme Bandwidth Systems", MICRO 2017, doi:10.1145/3123939.3124545, where HBM2
is "the highest-bandwidth, most energy-efficient contemporary DRAM"; GDDR5 is
about 14 pJ/bit in the same paper; SK hynix states about 4.3 pJ/bit for HBM2e,
Moon et al., IEDM 2023). No source found gives a per-bit energy for HBM3 or
HBM3e, nor a per-FLOP energy for the tensor cores of a 7 nm or 4 nm chip
(Dally's Hot Chips 2023 keynote quotes 1.5 pJ per half-precision FMA at 45 nm,
from Horowitz, ISSCC 2014, which a newer process beats): the floor takes
``pj_per_bit`` = 3.97 for every chip's DRAM and ``pj_per_flop`` = 0 (give
your own). Per output token,

    E_token >= n_chips (8 bytes pj_per_bit + FLOPs pj_per_flop) 1e-12 / B   joules,

and ``3.6e9 / E_token`` tokens per megawatt-hour (1 MWh = 3.6e9 J) is a
ceiling. The floor leaves out the idle and static power, SRAM, the
interconnect and the host; it is called a floor only because it stays below
every published measured energy per token the tests hold it against.

**A power cap** ``P`` (watts per chip) bounds the step's time from below:
the chip cannot spend its floor's joules faster than ``P``, so
``t >= max(t_step, E_chip / P)``.

**The estimate** is board power times a step's time: :func:`board_energy_per_token`
takes the step time as an argument, so any step time can feed it. Until the
step estimate of :mod:`kvmath.estimate` is there, :func:`energy_per_token`
feeds it the step's **lower bound** (``estimate_step_s``, labelled so): with the
board at its full power for the shortest the step can take, the figure is a
rough estimate, not a bound either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .deployment import Deployment
from .presets import PresetTable, lookup
from .results import Result
from .validation import ArrayLike, broadcast, instance, non_negative, plain, positive

#: pJ per bit read from DRAM: HBM2's, the most efficient DRAM published (O'Connor et al., MICRO 2017).
DRAM_PJ_PER_BIT = 3.97

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
    estimate_step_s : the step time fed to the estimate: the lower bound ``step_s`` (until a step estimate is wired).
    joules_per_token_estimate, tokens_per_mwh_estimate : board power times ``estimate_step_s``, per token (None
        without a board power).
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
    joules_per_token_estimate: ArrayLike | None
    tokens_per_mwh_estimate: ArrayLike | None
    is_lower_bound: bool = True


def energy_per_token(dep: Deployment, batch: ArrayLike, context: ArrayLike, *, pj_per_bit: float = DRAM_PJ_PER_BIT,
                     pj_per_flop: float = 0.0, power_cap_w: ArrayLike | None = None,
                     board_power_w: ArrayLike | None = None) -> Energy:
    """The energy floor of a decode step of ``batch`` sequences at ``context`` tokens, and board power's estimate.

    Examples
    --------
    Llama 3 8B on one H100 at batch 1: the step reads 15.01 GB of bf16 weights (every matrix, the LM head
    included, but one row of the embedding table), 15.01e9 x 8 x 3.97 pJ, about half a joule a token:

    >>> from kvmath import Deployment
    >>> e = energy_per_token(Deployment("llama-3-8b", "h100-sxm"), 1, 1)
    >>> round(float(e.joules_per_token_floor), 3), f"{float(e.tokens_per_mwh_ceiling):.3g}"
    (0.477, '7.55e+09')
    """
    instance("dep", dep, Deployment, "a kvmath.Deployment")
    e_bit = float(positive("pj_per_bit", pj_per_bit))
    e_flop = float(non_negative("pj_per_flop", pj_per_flop))
    broadcast(batch=batch, context=context, power_cap_w=power_cap_w, board_power_w=board_power_w)
    step = dep.step(batch, context)
    moved = step.weight_bytes_read + step.kv_bytes_read
    flops = step.weight_flops + step.attention_flops
    chip_j = (8 * moved * e_bit + flops * e_flop) * 1e-12
    per_step = dep.n_chips * chip_j
    per_token = per_step / (step.batch * step.tokens_per_seq)
    t = step.strict_s
    cap = None
    if power_cap_w is not None:
        cap = positive("power_cap_w", power_cap_w)
        t = np.maximum(t, chip_j / cap)
    try:
        board = _board(dep, board_power_w)
    except ValueError:
        board = None  # no sourced board power for this chip: no estimate, the floor stands
    estimate = tokens = None
    if board is not None:
        power = board if cap is None else np.minimum(board, cap)
        estimate = board_energy_per_token(dep, t, step.batch * step.tokens_per_seq, board_power_w=power)
        tokens = plain(J_PER_MWH / np.asarray(estimate))
    return Energy(batch=step.batch, context=step.context, n_chips=dep.n_chips, bytes_read_per_chip=plain(moved),
                  flops_per_chip=plain(flops), pj_per_bit=e_bit, pj_per_flop=e_flop,
                  joules_per_step_floor=plain(per_step), joules_per_token_floor=plain(per_token),
                  tokens_per_mwh_ceiling=plain(J_PER_MWH / per_token), power_cap_w=plain(cap) if cap is not None else None,
                  step_s=plain(t), board_power_w=None if board is None else plain(board), estimate_step_s=plain(t),
                  joules_per_token_estimate=estimate, tokens_per_mwh_estimate=tokens)
