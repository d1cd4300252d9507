"""Mixture of experts: how many experts a batch touches, and the critical batch that follows.

In one MoE layer each of ``T`` tokens picks ``k`` of ``E`` routed experts.
A step reads only the experts some token picked, so its weight bytes grow
with the batch until every expert is in use:

- at least ``k`` (every token may pick the same experts: the floor a strict
  lower bound must use);
- about ``E * (1 - (1 - k/E)**T)`` when tokens route uniformly and
  independently (an estimate: real routers are skewed, which touches fewer);
- at most ``min(E, k * T)``.
"""

from __future__ import annotations

import numpy as np

from .validation import (ArrayLike, checked, choice, fraction, plain, positive,
                         positive_int)

ROUTINGS = ("floor", "uniform", "ceiling")


@checked
def experts_touched(n_experts: ArrayLike, top_k: ArrayLike, tokens: ArrayLike, routing: str = "uniform") -> ArrayLike:
    """Distinct routed experts one MoE layer reads for ``tokens`` tokens.

    Parameters
    ----------
    n_experts, top_k : int or array
        Routed experts per layer E, and experts each token uses k (k <= E).
    tokens : float or array
        Tokens in the step, T (batch x tokens per sequence). Real-valued so
        that bound curves can sweep it smoothly.
    routing : str
        ``"floor"`` (k: a lower bound), ``"uniform"`` (the estimate above) or
        ``"ceiling"`` (min(E, k T): an upper bound).

    Returns
    -------
    float or ndarray
        Experts touched (not rounded: the uniform estimate is an expectation).

    Examples
    --------
    Mixtral (8 experts, top-2):

    >>> [round(experts_touched(8, 2, b), 3) for b in (1, 8, 64)]
    [2.0, 7.199, 8.0]
    >>> experts_touched(8, 2, 1, "floor"), experts_touched(8, 2, 3, "ceiling")
    (2.0, 6.0)
    """
    routing = choice("routing", routing, ROUTINGS)
    n_experts = positive_int("n_experts", n_experts)
    top_k = positive_int("top_k", top_k)
    tokens = positive("tokens", tokens)
    if np.any(np.asarray(top_k) > np.asarray(n_experts)):
        raise ValueError(f"top_k ({top_k}) must not exceed n_experts ({n_experts})")
    return plain(_touched(n_experts, top_k, tokens, routing))


@checked
def tokens_for_share(n_experts: ArrayLike, top_k: ArrayLike, share: ArrayLike) -> ArrayLike:
    """Tokens a step needs for uniform routing to touch ``share`` of each layer's routed experts.

    The inverse of :func:`experts_touched` (``"uniform"``): ``T = log(1 -
    share) / log(1 - k/E)``, real-valued like ``tokens`` there. ``share``
    runs from ``k/E`` (one token, T = 1) up to but not including 1, which
    uniform routing only reaches as T grows without bound; ``k < E``.

    Examples
    --------
    Mixtral (8 experts, top-2) touches 90% of its experts at about 8 tokens:

    >>> round(tokens_for_share(8, 2, 0.9), 3)
    8.004
    >>> round(experts_touched(8, 2, tokens_for_share(8, 2, 0.9)) / 8, 12)
    0.9
    """
    n_experts = positive_int("n_experts", n_experts)
    top_k = positive_int("top_k", top_k)
    share = fraction("share", share)
    per_token = np.asarray(top_k) / np.asarray(n_experts)
    if np.any(per_token >= 1):
        raise ValueError(f"top_k ({top_k}) must be below n_experts ({n_experts}): one token touches every expert")
    if np.any(np.asarray(share) >= 1):
        raise ValueError(f"share must be below 1 (uniform routing never touches every expert), got {share!r}")
    if np.any(np.asarray(share) < per_token):
        raise ValueError(f"share ({share!r}) must be at least top_k / n_experts: one token touches that many")
    return plain(np.log(1 - share) / np.log(1 - top_k / n_experts))


def _touched(n_experts, top_k, tokens, routing: str):
    """:func:`experts_touched` on checked inputs (the deployment's step calls it directly)."""
    if routing == "floor":
        return top_k + 0 * tokens
    if routing == "ceiling":
        # below one token (fractional sweeps) k T would dip under the floor
        return np.minimum(n_experts, np.maximum(top_k, top_k * tokens))
    expected = n_experts * (1 - np.power(1 - top_k / n_experts, tokens))
    # below one token (fractional sweeps) the expectation would dip under the floor
    return np.maximum(expected, top_k)


@checked
def saturated_critical_batch(
    total_params: ArrayLike, active_params: ArrayLike, flops: ArrayLike, bandwidth: ArrayLike, bytes_per_param: ArrayLike
) -> ArrayLike:
    """Critical batch of an MoE model once every expert is touched: ``(P_total / P_active) * C * b_w / (2 W)``.

    A saturated step reads every matrix, all experts included, but each token
    multiplies by only its own share, so the math catches up with the reads at
    a batch ``P_total / P_active`` times the dense model's. The limit that
    :func:`kvmath.Deployment.critical_batch` approaches takes both counts
    without the input table, which is looked up, not read or multiplied:
    ``total_params = Model.matmul_params_resident()`` and ``active_params =
    Model.matmul_params_per_token()``. The published counts (``param_count``,
    ``active_param_count``) hold the table in both and give a lower figure
    (11% lower for gpt-oss-20b, whose table is large against its active
    parameters).

    Examples
    --------
    Mixtral 8x7B on an H100 in bf16, against 295 for a dense model, from the published counts and from the
    matmul counts (the solved figure is 1,079):

    >>> round(saturated_critical_batch(46.70e9, 12.88e9, 989.4e12, 3.35e12, 2))
    1071
    >>> from kvmath import Model
    >>> m = Model.preset("mixtral-8x7b")
    >>> round(saturated_critical_batch(m.matmul_params_resident(), m.matmul_params_per_token(), 989.4e12, 3.35e12, 2))
    1079
    """
    ratio = positive("total_params", total_params) / positive("active_params", active_params)
    return ratio * positive("flops", flops) * positive("bytes_per_param", bytes_per_param) / (
        2 * positive("bandwidth", bandwidth)
    )
