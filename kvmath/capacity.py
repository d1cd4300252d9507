"""Memory capacity: weights, how many chips hold them, and what is left for the KV cache."""

from __future__ import annotations

import numpy as np

from .memory import _whole, memory_budget
from .validation import ArrayLike, fraction, non_negative, positive, positive_int


def weight_bytes(param_count: ArrayLike, bytes_per_param: ArrayLike) -> ArrayLike:
    """Bytes of weights: count x bytes per weight.

    Examples
    --------
    >>> weight_bytes(52e9, 2) / 1e9  # kipply's 52B in fp16
    104.0
    """
    return positive("param_count", param_count) * positive("bytes_per_param", bytes_per_param)


def min_chips_for_weights(
    weight_bytes: ArrayLike, hbm_bytes, usable_fraction: ArrayLike = 1.0, budget: str = "device"
):
    """Fewest chips whose memory holds the weights: ``ceil(weights / (memory * usable))``.

    ``hbm_bytes`` is bytes per chip or a :class:`~kvmath.Chip`; ``budget``
    names which of the chip's figures counts (:func:`kvmath.memory_budget`:
    ``"device"``, the marketed size and the default, ``"reported"``,
    ``"reserve"`` or ``"engine"``).

    Examples
    --------
    >>> min_chips_for_weights(104e9, 40e9)
    3
    >>> from kvmath import get_chip
    >>> min_chips_for_weights(160e9, get_chip("h100-sxm")), min_chips_for_weights(160e9, get_chip("h100-sxm"), budget="reported")
    (2, 2)
    """
    weight_bytes = positive("weight_bytes", weight_bytes)
    usable = memory_budget(hbm_bytes, budget) * fraction("usable_fraction", usable_fraction)
    return _whole(np.ceil(weight_bytes / usable), "chips for the weights")


def kv_budget_bytes(
    n_chips: ArrayLike, hbm_bytes, weight_bytes: ArrayLike, usable_fraction: ArrayLike = 1.0,
    budget: str = "device",
) -> ArrayLike:
    """Bytes left for the KV cache once the weights are loaded, in bytes.

    ``hbm_bytes`` is bytes per chip or a :class:`~kvmath.Chip`, and
    ``budget`` names which memory figure counts (:func:`kvmath.memory_budget`;
    default ``"device"``, the marketed size). The ``"engine"`` budget here
    leaves out vLLM's activation peak: :func:`kvmath.vllm_engine` sizes
    vLLM's cache in full. Raises ``ValueError`` where the weights do not fit
    at all.

    Examples
    --------
    >>> kv_budget_bytes(3, 40e9, 104e9) / 1e9
    16.0
    >>> from kvmath import get_chip
    >>> h100 = get_chip("h100-sxm")
    >>> [round(kv_budget_bytes(2, h100, 141e9, budget=b) / 1e9, 2) for b in ("device", "reported", "reserve")]
    [19.0, 30.04, 28.37]
    """
    total = positive_int("n_chips", n_chips) * memory_budget(hbm_bytes, budget)
    total = total * fraction("usable_fraction", usable_fraction)
    left = total - positive("weight_bytes", weight_bytes)
    if np.any(left < 0):
        raise ValueError(
            "weight_bytes exceed the memory of n_chips x hbm_bytes; add chips or use a smaller dtype"
        )
    return left


def max_kv_tokens(kv_budget_bytes: ArrayLike, kv_bytes_per_token: ArrayLike):
    """Whole tokens of KV cache that fit in ``kv_budget_bytes``.

    Examples
    --------
    >>> max_kv_tokens(16e9, 2 * 2**20)  # 16 GB, 2 MiB per token
    7629
    """
    tokens = np.floor(non_negative("kv_budget_bytes", kv_budget_bytes) / positive("kv_bytes_per_token", kv_bytes_per_token))
    return _whole(tokens, "kv_budget_bytes / kv_bytes_per_token")


def max_batch(kv_budget_bytes: ArrayLike, kv_bytes_per_seq: ArrayLike):
    """Whole sequences whose caches fit in ``kv_budget_bytes``.

    Examples
    --------
    >>> max_batch(16 * 2**30, 2048 * 2 * 2**20)  # four 2,048-token sequences fit in 16 GiB
    4
    >>> max_batch(16e9, 2048 * 2 * 2**20)       # but only three in 16 GB
    3
    """
    return max_kv_tokens(kv_budget_bytes, kv_bytes_per_seq)
