"""Prefix caching: a prompt prefix shared by many requests, computed once and stored once.

A serving engine with automatic prefix caching (vLLM's APC, SGLang's radix
cache) keys each *full* block of ``b`` cached tokens by a hash of every
token up to it. A request whose prompt starts with ``P`` tokens that an
earlier request already cached reuses their blocks: it neither recomputes
them nor stores them again. Two rules bound what it can reuse:

- **whole blocks only**: a block is cached once it is full, so at most
  ``floor(P / b) * b`` tokens of the prefix are reused (a 240-token system
  prompt reuses 240 tokens with 16-token blocks and none with 784-token
  blocks);
- **never the whole prompt**: the engine must compute at least the last
  prompt token to get the first output token's logits, so the hit is at most
  ``S_in - 1`` tokens, again rounded down to whole blocks (vLLM V1,
  ``KVCacheManager.get_computed_blocks``: ``max_cache_hit_length =
  request.num_tokens - 1``).

With a hit rate ``h`` (the fraction of requests that find the prefix cached),
a request on average prefills ``S_in - h R`` tokens (``R`` the reused tokens),
does ``sum_{t=1}^{S_in} A(t) - h sum_{t=1}^{R} A(t)`` attention FLOPs and
writes ``k(S_in) - h (k(S_in) - k(S_in - R))`` cache bytes, ``k(S)`` the cache
of ``S`` tokens (with sliding windows, only the prefix tokens still inside a
window are shared). The request path (:func:`kvmath.requests.request_times`)
and the capacity (:meth:`kvmath.Deployment.capacity`) take the prefix as
arguments; this module holds the rule they share.
"""

from __future__ import annotations

import numpy as np

from .validation import ArrayLike, non_negative, plain, positive_int


def reused_tokens(prefix_tokens: ArrayLike, block_size: ArrayLike, input_tokens: ArrayLike | None = None, *,
                  prompt_name: str = "input_tokens") -> ArrayLike:
    """Prompt tokens a request reuses from a cached prefix of ``prefix_tokens``: whole blocks, never the last token.

    ``floor(min(P, S_in - 1) / b) * b`` (``S_in`` omitted: ``floor(P / b) * b``). The prefix is the start of every
    prompt, so one longer than the prompt is refused, naming ``prompt_name`` (the caller's name for ``S_in``).

    Examples
    --------
    A 240-token system prompt, before a 1,000-token prompt's own text:

    >>> int(reused_tokens(240, 16, 1000)), int(reused_tokens(240, 784, 1000))
    (240, 0)

    A prompt that is all prefix still computes its last token, here its whole last block:

    >>> int(reused_tokens(256, 16, 256))
    240
    """
    p = non_negative("prefix_tokens", prefix_tokens)
    b = positive_int("block_size", block_size)
    if np.any(np.asarray(p) != np.floor(p)):
        raise ValueError(f"prefix_tokens must be whole numbers of tokens, got {prefix_tokens!r}")
    if input_tokens is not None:
        s_in = positive_int(prompt_name, input_tokens)
        longer = np.asarray(p) > np.asarray(s_in)
        if np.any(longer):
            raise ValueError(f"prefix_tokens ({prefix_tokens!r}) is longer than {prompt_name} ({input_tokens!r}): a "
                             "shared prefix is the start of every prompt, so at most its length"[:300])
        p = np.minimum(p, np.asarray(s_in, dtype=float) - 1)
    return plain(np.floor(np.asarray(p, dtype=float) / b) * b)


def unit_interval(name: str, value) -> ArrayLike:
    """``value`` as float(s) in the closed interval [0, 1] (a rate or a probability: 0 and 1 are both valid)."""
    out = non_negative(name, value)
    if np.any(np.asarray(out) > 1):
        raise ValueError(f"{name} must be in [0, 1], got {value!r}"[:300])
    return out


def check_prefix(prefix_tokens, prefix_hit_rate, block_size):
    """The three prefix arguments checked at a public boundary: ``(P, h, b)``, or None where there is no prefix."""
    if prefix_tokens is None:
        if prefix_hit_rate is not None:
            raise ValueError(f"prefix_hit_rate needs prefix_tokens (the shared prefix's length), got "
                             f"prefix_hit_rate={prefix_hit_rate!r}")
        return None
    from .memory import BLOCK_SIZE

    b = BLOCK_SIZE if block_size is None else block_size
    h = 1.0 if prefix_hit_rate is None else unit_interval("prefix_hit_rate", prefix_hit_rate)
    reused_tokens(prefix_tokens, b)  # checks P and b
    return non_negative("prefix_tokens", prefix_tokens), h, positive_int("block_size", b)


def shared_kv_bytes(plan, context, reused) -> ArrayLike:
    """Cache bytes of a ``context``-token sequence that belong to its first ``reused`` tokens (held once when shared).

    ``k(S) - k(S - R)``: every full-attention layer's ``R`` tokens, a windowed
    layer's only where they are still inside its window; a linear layer's
    fixed state is the sequence's own.
    """
    return plan.kv_per_seq(context) - plan.kv_per_seq(np.maximum(np.asarray(context, dtype=float) - reused, 0.0))
