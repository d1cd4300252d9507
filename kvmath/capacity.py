"""Memory capacity: weights, how many chips hold them, and what is left for the KV cache."""

from __future__ import annotations

import numpy as np

from .validation import ArrayLike, checked, fraction, non_negative, positive, positive_int


@checked
def weight_bytes(param_count: ArrayLike, bytes_per_param: ArrayLike) -> ArrayLike:
    """Bytes of weights: count x bytes per weight.

    Examples
    --------
    >>> weight_bytes(52e9, 2) / 1e9  # kipply's 52B in fp16
    104.0
    """
    return positive("param_count", param_count) * positive("bytes_per_param", bytes_per_param)


@checked
def min_chips_for_weights(weight_bytes: ArrayLike, hbm_bytes: ArrayLike, usable_fraction: ArrayLike = 1.0):
    """Fewest chips whose memory holds the weights: ``ceil(weights / (HBM * usable))``.

    Examples
    --------
    >>> min_chips_for_weights(104e9, 40e9)
    3
    """
    weight_bytes = positive("weight_bytes", weight_bytes)
    usable = positive("hbm_bytes", hbm_bytes) * fraction("usable_fraction", usable_fraction)
    chips = np.ceil(weight_bytes / usable)
    return int(chips) if np.ndim(chips) == 0 else chips.astype(int)


@checked
def kv_budget_bytes(
    n_chips: ArrayLike, hbm_bytes: ArrayLike, weight_bytes: ArrayLike, usable_fraction: ArrayLike = 1.0
) -> ArrayLike:
    """Bytes left for the KV cache once the weights are loaded, in bytes.

    Raises ``ValueError`` where the weights do not fit at all.

    Examples
    --------
    >>> kv_budget_bytes(3, 40e9, 104e9) / 1e9
    16.0
    """
    total = positive_int("n_chips", n_chips) * positive("hbm_bytes", hbm_bytes)
    total = total * fraction("usable_fraction", usable_fraction)
    left = total - positive("weight_bytes", weight_bytes)
    if np.any(left < 0):
        raise ValueError(
            "weight_bytes exceed the memory of n_chips x hbm_bytes; add chips or use a smaller dtype"
        )
    return left


@checked
def max_kv_tokens(kv_budget_bytes: ArrayLike, kv_bytes_per_token: ArrayLike):
    """Whole tokens of KV cache that fit in ``kv_budget_bytes``.

    Examples
    --------
    >>> max_kv_tokens(16e9, 2 * 2**20)  # 16 GB, 2 MiB per token
    7629
    """
    tokens = np.floor(non_negative("kv_budget_bytes", kv_budget_bytes) / positive("kv_bytes_per_token", kv_bytes_per_token))
    return int(tokens) if np.ndim(tokens) == 0 else tokens.astype(np.int64)


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
    return max_kv_tokens(kv_budget_bytes, kv_bytes_per_seq)
