"""Prefill: processing the prompt before the first new token.

Prefill runs every prompt token through the model at once, so the weight
matmuls are matrix-matrix products with ``B * S`` rows: far right of the
ridge point, compute-bound. Its time to first token is bounded below by the
FLOPs over the FLOP rate, and never below the time to read the weights once
and write the new cache.
"""

from __future__ import annotations

import numpy as np

from .validation import ArrayLike, checked, non_negative, plain, positive, positive_int


@checked
def prefill_flops(
    prompt_len: ArrayLike,
    param_count: ArrayLike,
    n_layers: ArrayLike,
    n_heads: ArrayLike,
    head_dim: ArrayLike,
    batch: ArrayLike = 1,
) -> ArrayLike:
    """FLOPs to prefill ``batch`` prompts of ``prompt_len`` tokens with causal attention.

    Weights: ``2 * P * S`` per prompt. Attention: each token attends to the
    tokens before it, ``4 * L * h * d_h * S^2 / 2`` per prompt.

    ``param_count`` should be the parameters every prompt token multiplies
    by. A preset's ``param_count()`` also counts the input embedding (a
    lookup, no FLOPs) and the LM head (needed for the last position only);
    for a strict lower bound pass the count without them.

    Examples
    --------
    >>> prefill_flops(2048, 6.74e9, 32, 32, 128) / 1e12
    28.70...
    """
    s = positive_int("prompt_len", prompt_len)
    weights = 2 * positive("param_count", param_count) * s
    attention = 2 * positive_int("n_layers", n_layers) * positive_int("n_heads", n_heads) * positive_int("head_dim", head_dim) * s**2
    return positive_int("batch", batch) * (weights + attention)


@checked
def prefill_time(
    flops_needed: ArrayLike,
    flops: ArrayLike,
    param_bytes: ArrayLike,
    kv_bytes_written: ArrayLike,
    bandwidth: ArrayLike,
) -> ArrayLike:
    """Lower bound on prefill time (time to first token), in seconds.

    ``max(FLOPs / C, (P_bytes + KV bytes written) / W)``: the compute bound,
    with the memory floor of reading the weights once and writing the cache.

    Examples
    --------
    >>> round(prefill_time(28.7e12, 312e12, 13.48e9, 2048 * 524288, 2.039e12) * 1e3, 1)
    92.0
    """
    compute_s = non_negative("flops_needed", flops_needed) / positive("flops", flops)
    memory_s = (positive("param_bytes", param_bytes) + non_negative("kv_bytes_written", kv_bytes_written)) / positive("bandwidth", bandwidth)
    return plain(np.maximum(compute_s, memory_s))
