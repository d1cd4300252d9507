"""Tensor parallelism over N chips: what each chip holds and reads per step.

Bandwidth and FLOP/s add up across chips, and the weights split N ways.
The KV cache splits by heads only while there are heads to go round: a
model with ``n_kv_heads < N`` must replicate some heads, and a multi-query
model (one KV head) keeps the whole cache on every chip, unless the cache
is sharded by batch instead (each chip keeps the caches of its own
sequences).
"""

from __future__ import annotations

import numpy as np

from .decode import StepBreakdown, step_breakdown
from .validation import ArrayLike, ResultOverflow, checked, choice, non_negative, plain, positive, positive_int

KV_SHARDINGS = ("heads", "batch")


@checked
def kv_bytes_per_chip(
    kv_cache_bytes: ArrayLike,
    n_chips: ArrayLike,
    n_kv_heads: ArrayLike,
    batch: ArrayLike = 1,
    shard: str = "heads",
) -> ArrayLike:
    """Bytes of KV cache each chip holds and reads per step.

    ``shard="heads"``: each chip gets ``ceil(h_kv / N)`` of the ``h_kv`` heads.
    ``shard="batch"``: each chip gets ``ceil(B / N)`` of the ``B`` sequences.

    Examples
    --------
    >>> kv_bytes_per_chip(68.72e9, 2, 32) / 1e9            # MHA splits in two
    34.36
    >>> kv_bytes_per_chip(68.72e9, 2, 1) / 1e9             # MQA: every chip reads it all
    68.72
    >>> kv_bytes_per_chip(68.72e9, 2, 1, batch=16, shard="batch") / 1e9
    34.36
    """
    total = non_negative("kv_cache_bytes", kv_cache_bytes)
    n_chips = positive_int("n_chips", n_chips)
    shard = choice("shard", shard, KV_SHARDINGS)
    heads, batch = positive_int("n_kv_heads", n_kv_heads), positive_int("batch", batch)  # both, whichever is used
    share = heads if shard == "heads" else batch
    return plain(total * np.ceil(share / n_chips) / share)


@checked
def tensor_parallel_step(
    batch: ArrayLike,
    kv_bytes_per_seq: ArrayLike,
    n_kv_heads: ArrayLike,
    param_bytes: ArrayLike,
    param_count: ArrayLike,
    n_chips: ArrayLike,
    bandwidth: ArrayLike,
    flops: ArrayLike,
    shard: str = "heads",
) -> StepBreakdown:
    """The min-step terms on one of ``n_chips`` chips running tensor parallel.

    Weights and their FLOPs split evenly; the KV cache splits as
    :func:`kv_bytes_per_chip` says. ``bandwidth`` and ``flops`` are per chip.

    Examples
    --------
    The thread's MQA model at 256K on two A100s at 70% of 2 TB/s:

    >>> kv = 262144 * 16384  # bytes per sequence, one KV head
    >>> by_heads = tensor_parallel_step(16, kv, 1, 14e9, 7e9, 2, 1.4e12, 312e12)
    >>> by_batch = tensor_parallel_step(16, kv, 1, 14e9, 7e9, 2, 1.4e12, 312e12, shard="batch")
    >>> round(1 / by_heads.step_s, 1), round(1 / by_batch.step_s, 1)
    (18.5, 33.8)
    """
    n_chips = positive_int("n_chips", n_chips)
    batch = positive_int("batch", batch)
    kv_bytes_per_seq = non_negative("kv_bytes_per_seq", kv_bytes_per_seq)
    positive_int("n_kv_heads", n_kv_heads)
    choice("shard", shard, KV_SHARDINGS)
    param_bytes = positive("param_bytes", param_bytes)
    param_count = positive("param_count", param_count)
    bandwidth = positive("bandwidth", bandwidth)
    flops = positive("flops", flops)
    kv_total = kv_bytes_per_seq * batch
    if not np.all(np.isfinite(kv_total)):
        raise ResultOverflow("batch x kv_bytes_per_seq overflows float64")
    # each chip's share; one too small for a float64 would be refused as zero below
    for name, share in (("param_bytes", param_bytes / n_chips), ("param_count", param_count / n_chips)):
        if np.any(np.asarray(share) == 0):
            raise ValueError(f"{name} / n_chips underflows float64 to 0; use a larger {name} or fewer n_chips")
    kv_chip = kv_bytes_per_chip(kv_total, n_chips, n_kv_heads, batch=batch, shard=shard)
    return step_breakdown(batch, kv_chip / batch, param_bytes / n_chips, param_count / n_chips, bandwidth, flops)
