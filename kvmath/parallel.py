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

from .validation import ArrayLike, choice, non_negative, plain, positive_int

KV_SHARDINGS = ("heads", "batch")


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
    share = positive_int("n_kv_heads", n_kv_heads) if shard == "heads" else positive_int("batch", batch)
    return plain(total * np.ceil(share / n_chips) / share)
