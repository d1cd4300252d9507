"""Speculative and multi-token decoding: more tokens per step for more math per step.

A draft proposes ``gamma`` tokens per sequence; one verify step of the
target checks all ``gamma + 1`` positions at once. The verify step does
``gamma + 1`` times the FLOPs of a plain step but reads the same weights
(a dense model; an MoE model touches more experts with more tokens) and
the same cache. With each draft token accepted with probability ``a``
(independently), a step yields on average ``(1 - a**(gamma + 1)) / (1 - a)``
tokens (Leviathan et al. 2023). While the target is memory-bound the extra
math is nearly free; once the verify step turns compute-bound it is not, and
speculation stops paying.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .results import Result

from .models import Model
from .deployment import Deployment
from .formulas import expected_tokens_per_step, speculative_improvement_factor  # noqa: F401  (the notes' forms)
from .models import get_model
from .validation import (ArrayLike, as_number, as_scalar, checked, flag, instance, one_int, plain,
                         positive)


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class Speculation(Result):
    """Speculative decoding against plain decoding, at the strict bounds (seconds per step).

    Attributes
    ----------
    expected_tokens : tokens per sequence per verify step.
    plain_step_s : one plain decode step of the target.
    verify_step_s : one verify step (gamma + 1 tokens per sequence).
    draft_s : the draft's gamma steps (0 with no draft model).
    speedup : plain_step_s * expected_tokens / (verify_step_s + draft_s);
        below 1, speculation costs more than it gives.
    """

    expected_tokens: ArrayLike
    plain_step_s: ArrayLike
    verify_step_s: ArrayLike
    draft_s: ArrayLike
    speedup: ArrayLike


@checked
def speculative_decode(
    deployment: "Deployment",
    batch: ArrayLike,
    context: ArrayLike,
    gamma: int,
    acceptance: ArrayLike,
    draft: Model | None = None,
    routing: str = "uniform",
    *,
    verify_tokens: int | None = None,
    tokens_per_step: ArrayLike | None = None,
) -> Speculation:
    """Speed-up of speculative decoding over plain decoding, both at their strict lower bounds.

    ``draft`` (a Model or preset name) runs ``gamma`` plain steps on the
    same chips, in the same layout, before each verify
    step; ``None`` means a draft that costs nothing (n-gram lookup, or a
    multi-token-prediction head whose cost is folded into the target). The
    acceptance rate is an assumption about the data, so the speed-up is an
    estimate built from bounds, not a bound. An MoE target's verify step
    touches more experts than a plain step; both are charged the experts
    ``routing`` gives (uniform by default: the k-expert floor would make
    the verify step as cheap as a plain one). Both models' steps are
    ``deployment.step`` (its layout, links and formats).

    Tree drafting (Medusa, EAGLE) verifies more tokens than it keeps:
    ``verify_tokens`` is the tokens per sequence the verify step runs
    through the target (default ``gamma + 1``, a chain; a tree of n
    candidates verifies n + 1), and ``tokens_per_step`` a measured mean
    number of tokens each verify step yields (the papers' acceptance
    length, in [1, verify_tokens]), used instead of the chain's formula
    (``acceptance`` must then be None). The plain step runs 1 token per
    sequence and the verify step ``verify_tokens``.

    Examples
    --------
    Llama 3 8B on one H100 with a free draft, gamma = 4, a = 0.8: memory-bound
    at batch 1, so the verify step costs about one plain step; at batch 1,024
    with short contexts the verify step is compute-bound and speculation loses.

    >>> from kvmath import Deployment
    >>> dep = Deployment("llama-3-8b", "h100-sxm")
    >>> s = speculative_decode(dep, [1, 1024], 128, 4, 0.8)
    >>> [round(float(x), 2) for x in s.speedup]
    [3.36, 0.67]

    A 63-candidate tree (64 tokens verified) yielding 3 tokens a step pays
    at batch 1 and loses by batch 16:

    >>> t = speculative_decode(dep, [1, 16], 128, 4, None, verify_tokens=64, tokens_per_step=3.0)
    >>> [round(float(x), 2) for x in t.speedup]
    [3.0, 0.88]
    """
    instance("deployment", deployment, Deployment, "a Deployment")
    gamma = one_int("gamma", gamma)
    if draft is not None:  # named as the draft, not as the model a deployment would call it
        if isinstance(draft, str):
            try:
                draft = get_model(draft)
            except ValueError as err:
                raise ValueError(f"draft: {err}") from None
        else:
            draft = instance("draft", draft, Model, "a Model, a preset name or None")
        try:
            drafting = deployment.replace(model=draft)
        except ValueError as err:
            raise ValueError(f"draft: {err}") from None
    verify = gamma + 1 if verify_tokens is None else one_int("verify_tokens", verify_tokens)
    if verify < gamma + 1:
        raise ValueError(f"verify_tokens must be at least gamma + 1 = {gamma + 1} (the draft's tokens and the "
                         f"target's own), got {verify_tokens!r}")
    if tokens_per_step is None:
        if acceptance is None:
            raise ValueError("acceptance must be a number in [0, 1] (None only with tokens_per_step)")
        expected = expected_tokens_per_step(acceptance, gamma)
    else:
        if acceptance is not None:  # one or the other: a silently ignored acceptance would hide a mistake
            raise ValueError(f"acceptance must be None when tokens_per_step is given (the measured tokens per "
                             f"step replace the chain's formula), got acceptance={acceptance!r}")
        expected = as_number("tokens_per_step", tokens_per_step)
        bad = (np.asarray(expected) < 1) | (np.asarray(expected) > verify)
        if bad.any():  # a verify step keeps at least the target's own token and at most what it verified
            raise ValueError(f"tokens_per_step must be in [1, verify_tokens = {verify}], got {tokens_per_step!r}"[:300])
    batch = positive("batch", batch)
    def step_s(dep, tokens: int) -> ArrayLike:
        return dep.step(batch, context, tokens_per_seq=tokens, routing=routing).strict_s

    plain_step, verify_s = step_s(deployment, 1), step_s(deployment, verify)
    draft_s = 0.0 if draft is None else gamma * step_s(drafting, 1)
    return Speculation(
        expected_tokens=expected,
        plain_step_s=plain_step,
        verify_step_s=verify_s,
        draft_s=draft_s,
        speedup=plain(plain_step * expected / (verify_s + draft_s)),
    )


def speculation_break_even_batch(
    deployment: "Deployment",
    context: ArrayLike,
    gamma: int,
    acceptance: ArrayLike,
    draft: Model | None = None,
    routing: str = "uniform",
    *,
    none_if_always_pays: bool = False,
    **options,
) -> float | None:
    """The batch at which speculative decoding stops paying: where its speed-up last falls to 1.

    Below it the target is memory-bound enough that the verify step's extra
    math is nearly free; above it the verify step is compute-bound and each
    step's ``gamma + 1`` tokens cost about ``gamma + 1`` times the math, so
    plain decoding is faster. For a dense model the speed-up only falls as
    the batch grows. For an MoE model it first rises: at small batch the
    verify step's extra tokens touch experts a plain step leaves unread, and
    once a plain step touches them all that cost is gone; the speed-up can
    dip below 1 at small batch and pay again later. This returns the batch
    past which it never pays again (below 10**7), found on a log grid of
    the speed-up (:func:`speculative_decode`, which broadcasts) and refined
    on finer grids: an estimate, like the speed-up it solves. Raises
    ``ValueError`` where speculation pays at 10**7 (no break-even below it;
    with ``none_if_always_pays=True`` it returns ``None`` there instead)
    or at no batch of the grid. ``options`` go to
    :func:`speculative_decode` (``verify_tokens``, ``tokens_per_step``); like
    ``context`` and ``acceptance``, each must be one number (an array raises
    ``ValueError`` naming it).

    Examples
    --------
    Llama 3 8B on one H100 with a free draft, gamma = 4, a = 0.8, short contexts:

    >>> from kvmath import Deployment
    >>> round(speculation_break_even_batch(Deployment("llama-3-8b", "h100-sxm"), 128, 4, 0.8))
    254

    At 32,768 tokens of context the cache keeps even a batch of 10**7 memory-bound:

    >>> speculation_break_even_batch(Deployment("llama-3-8b", "h100-sxm"), 32768, 4, 0.8,
    ...                              none_if_always_pays=True) is None
    True
    """
    if "batch" in options:
        raise ValueError(f"batch is what speculation_break_even_batch solves for, got batch={options['batch']!r}")
    none_if_always_pays = flag("none_if_always_pays", none_if_always_pays)
    # one break-even batch: every number but the batch grid must be one number (an array would broadcast
    # against the grid and make the crossing ambiguous)
    for name, value in dict(context=context, acceptance=acceptance, **options).items():
        if value is not None and not isinstance(value, (str, dict, Model)) and np.ndim(value) != 0:
            as_scalar(name, value)  # the complaint about strings or ragged lists first, if there is one
    def gain(b):
        return np.asarray(speculative_decode(deployment, b, context, gamma, acceptance, draft, routing,
                                             **options).speedup, dtype=float) - 1

    lo_b, hi_b = 1.0, 1e7
    grid = np.geomspace(lo_b, hi_b, 8 * 24)  # eight points an octave
    pays = gain(grid) > 0
    if pays[-1]:
        if none_if_always_pays:
            return None
        raise ValueError(f"speculation still pays at batch {hi_b:.0e}: no break-even batch below it")
    if not pays.any():
        raise ValueError(f"speculation does not pay at any batch from 1 to {hi_b:.0e} (gamma {gamma}, "
                         f"acceptance {acceptance!r})")
    while True:  # between the last point that pays and the next, on ever finer log grids (one call each)
        last = int(np.flatnonzero(pays)[-1])
        lo, hi = float(grid[last]), float(grid[last + 1])
        if hi / lo <= 1 + 1e-9:
            return hi
        grid = np.geomspace(lo, hi, 65)
        pays = gain(grid) > 0
        pays[0], pays[-1] = True, False  # the ends as found before, whatever rounding does to them
