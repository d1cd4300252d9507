"""Memory capacity: weights, how many chips hold them, and what is left for the KV cache."""

from __future__ import annotations

import numpy as np

from .hardware import Chip
from .memory import memory_budget
from .validation import ArrayLike, ResultOverflow, as_count, checked, fraction, non_negative, plain, positive, positive_int


@checked
def weight_bytes(param_count: ArrayLike, bytes_per_param: ArrayLike) -> ArrayLike:
    """Bytes of weights: count x bytes per weight.

    Examples
    --------
    >>> weight_bytes(52e9, 2) / 1e9  # kipply's 52B in fp16
    104.0
    """
    return positive("param_count", param_count) * positive("bytes_per_param", bytes_per_param)


def _budget(hbm_bytes, budget: str):
    """:func:`memory_budget` of a chip or of bytes per chip, a bad number named as ``hbm_bytes``."""
    return memory_budget(hbm_bytes if isinstance(hbm_bytes, Chip) else positive("hbm_bytes", hbm_bytes), budget)


def _usable_bytes(n_chips, hbm_bytes, usable_fraction):
    """Memory of ``n_chips`` chips that may hold weights and cache; one expression for both
    :func:`min_chips_for_weights` and :func:`kv_budget_bytes`, so they agree to the last bit."""
    return n_chips * hbm_bytes * usable_fraction


@checked
def min_chips_for_weights(
    weight_bytes: ArrayLike, hbm_bytes, usable_fraction: ArrayLike = 1.0, budget: str = "device"
):
    """Fewest chips whose memory holds the weights: ``ceil(weights / (memory * usable))``.

    ``hbm_bytes`` is bytes per chip or a :class:`~kvmath.Chip`; ``budget``
    names which of the chip's figures counts (:func:`kvmath.memory_budget`:
    ``"device"``, the marketed size and the default, ``"reported"``,
    ``"reserve"`` or ``"engine"``).

    Exact: the count returned is the smallest ``N`` for which
    :func:`kv_budget_bytes` ``(N, hbm_bytes, weight_bytes, usable_fraction)``
    does not raise, even for fractional byte counts where the float
    quotient rounds across a whole number.

    Examples
    --------
    >>> min_chips_for_weights(104e9, 40e9)
    3
    >>> min_chips_for_weights(104e9, 40e9, usable_fraction=0.5)
    6
    >>> from kvmath import get_chip
    >>> min_chips_for_weights(160e9, get_chip("h100-sxm")), min_chips_for_weights(160e9, get_chip("h100-sxm"), budget="reported")
    (2, 2)
    """
    weight_bytes = positive("weight_bytes", weight_bytes)
    hbm_bytes = _budget(hbm_bytes, budget)
    usable_fraction = fraction("usable_fraction", usable_fraction)
    chips = np.ceil(weight_bytes / (hbm_bytes * usable_fraction))
    if not np.all(np.isfinite(chips)):
        raise ResultOverflow(
            f"min_chips_for_weights: weight_bytes / hbm_bytes overflows float64 "
            f"(weight_bytes={weight_bytes!r}, hbm_bytes={hbm_bytes!r})"
        )
    # The quotient is rounded (and may underflow to 0): one fewer chip may already hold the
    # weights, or this many may fall short by a rounding error. Step to the exact count.
    fewer = chips - 1
    chips = np.where(_usable_bytes(fewer, hbm_bytes, usable_fraction) >= weight_bytes, fewer, chips)
    chips = np.where(_usable_bytes(chips, hbm_bytes, usable_fraction) < weight_bytes, chips + 1, chips)
    return as_count("min_chips_for_weights", chips)


@checked
def kv_budget_bytes(
    n_chips: ArrayLike, hbm_bytes, weight_bytes: ArrayLike, usable_fraction: ArrayLike = 1.0,
    budget: str = "device",
) -> ArrayLike:
    """Bytes left for the KV cache once the weights are loaded, in bytes.

    ``n_chips * hbm_bytes * usable_fraction - weight_bytes``. Raises
    ``ValueError`` where the weights do not fit at all (not even by a byte).

    ``hbm_bytes`` is bytes per chip or a :class:`~kvmath.Chip`, and
    ``budget`` names which memory figure counts (:func:`kvmath.memory_budget`;
    default ``"device"``, the marketed size). The ``"engine"`` budget here
    leaves out vLLM's activation peak: :func:`kvmath.vllm_engine` sizes
    vLLM's cache in full.

    Examples
    --------
    >>> kv_budget_bytes(3, 40e9, 104e9) / 1e9
    16.0
    >>> kv_budget_bytes(3, 40e9, 50e9, usable_fraction=0.5) / 1e9
    10.0
    >>> from kvmath import get_chip
    >>> h100 = get_chip("h100-sxm")
    >>> [round(kv_budget_bytes(2, h100, 141e9, budget=b) / 1e9, 2) for b in ("device", "reported", "reserve")]
    [19.0, 30.04, 28.37]
    """
    n_chips = positive_int("n_chips", n_chips)
    hbm_bytes = _budget(hbm_bytes, budget)
    usable_fraction = fraction("usable_fraction", usable_fraction)
    weight_bytes = positive("weight_bytes", weight_bytes)
    left = _usable_bytes(n_chips, hbm_bytes, usable_fraction) - weight_bytes
    if np.any(left < 0):
        raise ValueError(
            "weight_bytes exceed the memory of n_chips x hbm_bytes x usable_fraction; "
            "add chips or use a smaller dtype"
        )
    return plain(left)


@checked
def max_kv_tokens(kv_budget_bytes: ArrayLike, kv_bytes_per_token: ArrayLike):
    """Whole tokens of KV cache that fit in ``kv_budget_bytes``.

    Examples
    --------
    >>> max_kv_tokens(16e9, 2 * 2**20)  # 16 GB, 2 MiB per token
    7629
    """
    tokens = np.floor(non_negative("kv_budget_bytes", kv_budget_bytes) / positive("kv_bytes_per_token", kv_bytes_per_token))
    if not np.all(np.isfinite(tokens)):
        raise ResultOverflow("max_kv_tokens: kv_budget_bytes / kv_bytes_per_token overflows float64")
    return as_count("max_kv_tokens", tokens)


@checked
def max_batch(kv_budget_bytes: ArrayLike, kv_bytes_per_seq: ArrayLike):
    """Whole sequences whose caches fit in ``kv_budget_bytes``.

    Examples
    --------
    >>> max_batch(16 * 2**30, 2048 * 2 * 2**20)  # four 2,048-token sequences fit in 16 GiB
    4
    >>> max_batch(16e9, 2048 * 2 * 2**20)       # but only three in 16 GB
    3
    """
    budget = non_negative("kv_budget_bytes", kv_budget_bytes)
    return max_kv_tokens(budget, positive("kv_bytes_per_seq", kv_bytes_per_seq))
