"""Decode cost: the min-step lower bound, throughput and the critical batch size.

One decode *step* produces one token for each of the ``batch`` sequences. It
must at least read every sequence's KV cache and every weight once, and do
``2 * P`` FLOPs per sequence for the weight matmuls, so

    step >= B * KV / W + max(P_bytes / W, 2 * P_count * B / C).

Attention reads its cache once per sequence and does only a few FLOPs per
byte, so it stays memory-bound; the weight term is memory-bound at small
batch and compute-bound past the critical batch size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .validation import ArrayLike, checked, non_negative, plain, positive, positive_int


@dataclass(frozen=True)
class StepBreakdown:
    """The terms of the min-step bound, in seconds (floats or arrays).

    Attributes
    ----------
    kv_s : reading the KV cache, B * KV / W.
    weight_memory_s : reading the weights, P_bytes / W.
    weight_compute_s : the weight matmuls, 2 * P_count * B / C.
    step_s : kv_s + max(weight_memory_s, weight_compute_s).
    bound : "memory" where reading weights takes at least as long as their math
        (equality counts as memory-bound), else "compute".
    """

    kv_s: ArrayLike
    weight_memory_s: ArrayLike
    weight_compute_s: ArrayLike
    step_s: ArrayLike
    bound: str | np.ndarray


@checked
def step_breakdown(
    batch: ArrayLike,
    kv_bytes_per_seq: ArrayLike,
    param_bytes: ArrayLike,
    param_count: ArrayLike,
    bandwidth: ArrayLike,
    flops: ArrayLike,
) -> StepBreakdown:
    """Every term of the min-step bound and which weight term binds.

    Parameters are those of :func:`min_step` (``batch`` may be fractional).

    Examples
    --------
    >>> t = step_breakdown(256, 8192 * 100e3, 30e9, 30e9, 16 * 8.2e11, 16 * 1.97e14)
    >>> round(t.kv_s * 1e3, 2), round(t.weight_compute_s * 1e3, 2), t.bound
    (15.98, 4.87, 'compute')
    """
    batch = positive("batch", batch)
    kv_bytes_per_seq = non_negative("kv_bytes_per_seq", kv_bytes_per_seq)
    param_bytes = positive("param_bytes", param_bytes)
    param_count = positive("param_count", param_count)
    bandwidth = positive("bandwidth", bandwidth)
    flops = positive("flops", flops)
    kv_s = batch * kv_bytes_per_seq / bandwidth
    weight_memory_s = param_bytes / bandwidth
    weight_compute_s = 2 * param_count * batch / flops
    memory_bound = np.asarray(weight_memory_s >= weight_compute_s)
    bound = np.where(memory_bound, "memory", "compute")
    return StepBreakdown(
        kv_s=kv_s,
        weight_memory_s=weight_memory_s,
        weight_compute_s=weight_compute_s,
        step_s=plain(kv_s + np.maximum(weight_memory_s, weight_compute_s)),
        bound=str(bound) if bound.ndim == 0 else bound,
    )


@checked
def min_step(
    batch: ArrayLike,
    kv_bytes_per_seq: ArrayLike,
    param_bytes: ArrayLike,
    param_count: ArrayLike,
    bandwidth: ArrayLike,
    flops: ArrayLike,
) -> ArrayLike:
    """Lower bound on the time of one decode step, in seconds.

    ``B * KV / W + max(P_bytes / W, 2 * P_count * B / C)``

    Parameters
    ----------
    batch : float or array
        Sequences decoded together, B. Real-valued on purpose: a fractional
        batch is accepted for continuous sweeps and bound curves (B_crit is
        rarely a whole number); it must be > 0 and finite.
    kv_bytes_per_seq : float or array
        KV cache bytes of one sequence at its current context (bytes).
    param_bytes : float or array
        Bytes of weights read each step (count x bytes per weight).
    param_count : float or array
        Number of parameters each token multiplies by (active ones for MoE).
    bandwidth : float or array
        Memory bandwidth W in bytes/s (summed over chips).
    flops : float or array
        FLOP/s C of the dtype the matmuls run in (summed over chips).

    Returns
    -------
    float or ndarray
        Seconds per step; broadcasts over all arguments.

    Examples
    --------
    The notes' 30B model (int8 weights, bf16 math) on a TPU v5e 4x4 slice:

    >>> W, C = 16 * 8.2e11, 16 * 1.97e14
    >>> round(min_step(4, 8192 * 100e3, 30e9, 30e9, W, C) * 1e3, 3)
    2.536
    >>> round(min_step(256, 8192 * 100e3, 30e9, 30e9, W, C) * 1e3, 2)
    20.86
    """
    return step_breakdown(batch, kv_bytes_per_seq, param_bytes, param_count, bandwidth, flops).step_s


@checked
def min_step_simple(
    batch: ArrayLike, kv_bytes_per_seq: ArrayLike, param_bytes: ArrayLike, bandwidth: ArrayLike
) -> ArrayLike:
    """The all-memory form of the bound, ``(B * KV + P_bytes) / W``, in seconds.

    It equals :func:`min_step` whenever the batch is below the critical batch size.
    ``batch`` may be fractional, as in :func:`min_step`.

    Examples
    --------
    >>> round(min_step_simple(4, 8192 * 100e3, 30e9, 16 * 8.2e11) * 1e3, 3)
    2.536
    """
    batch = positive("batch", batch)
    kv_bytes_per_seq = non_negative("kv_bytes_per_seq", kv_bytes_per_seq)
    param_bytes = positive("param_bytes", param_bytes)
    bandwidth = positive("bandwidth", bandwidth)
    return (batch * kv_bytes_per_seq + param_bytes) / bandwidth


@checked
def tokens_per_s_per_seq(step_s: ArrayLike) -> ArrayLike:
    """Tokens each sequence gets per second: one per step, 1 / step_s.

    Examples
    --------
    >>> tokens_per_s_per_seq(0.025)
    40.0
    """
    return 1.0 / positive("step_s", step_s)


@checked
def tokens_per_s(step_s: ArrayLike, batch: ArrayLike) -> ArrayLike:
    """Tokens the whole batch produces per second: B / step_s (B may be fractional).

    Examples
    --------
    >>> tokens_per_s(0.025, 16)
    640.0
    """
    return positive("batch", batch) / positive("step_s", step_s)


@checked
def critical_batch(flops: ArrayLike, bandwidth: ArrayLike, bytes_per_param: ArrayLike) -> ArrayLike:
    """Batch size at which the weight matmuls take as long as reading the weights.

    Setting ``P * b_w / W = 2 * P * B / C`` gives ``B_crit = C * b_w / (2 * W)``.

    The notes write ``B_crit = beta * alpha`` with ``beta = b_w / b_act`` and
    ``alpha = C / W``. The two agree when ``alpha`` uses the **bf16** rate
    (so ``b_act = 2``) and the math runs in bf16; with int8 x int8 math they
    agree only if the chip's int8 rate is exactly twice its bf16 rate.
    Pass here the FLOP/s of the dtype the matmuls actually run in.

    Parameters
    ----------
    flops : float or array
        FLOP/s of the compute dtype, C.
    bandwidth : float or array
        Bytes/s, W (per chip or summed: the ratio is the same).
    bytes_per_param : float or array
        Bytes per stored weight, b_w.

    Returns
    -------
    float or ndarray
        The critical batch size (sequences; not rounded).

    Examples
    --------
    >>> critical_batch(312e12, 1.5e12, 2)  # kipply's A100
    208.0
    >>> round(critical_batch(1.97e14, 8.2e11, 1), 1)  # v5e, int8 weights, bf16 math
    120.1
    """
    flops = positive("flops", flops)
    bandwidth = positive("bandwidth", bandwidth)
    bytes_per_param = positive("bytes_per_param", bytes_per_param)
    return flops * bytes_per_param / (2 * bandwidth)


@checked
def critical_batch_beta_alpha(
    bf16_flops: ArrayLike, bandwidth: ArrayLike, bytes_per_param: ArrayLike, bytes_per_activation: ArrayLike
) -> ArrayLike:
    """The notes' form ``beta * alpha`` with ``alpha = C_bf16 / W`` and ``beta = b_w / b_act``.

    Examples
    --------
    >>> critical_batch_beta_alpha(312e12, 1.5e12, 2, 2)
    208.0
    """
    beta = positive("bytes_per_param", bytes_per_param) / positive("bytes_per_activation", bytes_per_activation)
    return beta * positive("bf16_flops", bf16_flops) / positive("bandwidth", bandwidth)


@checked
def weight_flops_per_step(batch: ArrayLike, param_count: ArrayLike) -> ArrayLike:
    """FLOPs of the weight matmuls in one step: 2 * P * B (B may be fractional, for sweeps).

    Examples
    --------
    >>> weight_flops_per_step(16, 7e9) / 1e9  # the thread's "224 GFLOPs"
    224.0
    """
    return 2 * positive("param_count", param_count) * positive("batch", batch)


@checked
def attention_flops_per_step(
    batch: ArrayLike, context: ArrayLike, n_layers: ArrayLike, n_heads: ArrayLike, head_dim: ArrayLike
) -> ArrayLike:
    """FLOPs of attention over the cache in one step: ``4 * B * S * L * h * d_h``.

    Each query head does ``q K^T`` (2 * S * d_h FLOPs) and ``a V`` (another
    2 * S * d_h). It counts query heads h, not KV heads: sharing KV heads
    saves bytes, not FLOPs. ``batch`` and ``context`` may be fractional (continuous
    sweeps); the structural counts L, h and d_h must be whole numbers.

    Examples
    --------
    >>> attention_flops_per_step(16, 256 * 1024, 32, 32, 128) / 1e12  # the thread's "2 TFLOPs"
    2.199023255552
    """
    return (
        4
        * positive("batch", batch)
        * positive("context", context)
        * positive_int("n_layers", n_layers)
        * positive_int("n_heads", n_heads)
        * positive_int("head_dim", head_dim)
    )


@checked
def compute_ceiling_steps_per_s(flops_per_step: ArrayLike, flops: ArrayLike) -> ArrayLike:
    """Steps per second if compute were the only limit: C / FLOPs per step.

    Examples
    --------
    >>> round(compute_ceiling_steps_per_s(2.2e12, 600e12), 1)
    272.7
    """
    return positive("flops", flops) / positive("flops_per_step", flops_per_step)


@checked
def arithmetic_intensity(flops: ArrayLike, bytes_moved: ArrayLike) -> ArrayLike:
    """FLOPs per byte moved; compare with a chip's ridge point C / W.

    Examples
    --------
    >>> arithmetic_intensity(2 * 4096 * 4096, 2 * 4096 * 4096)  # bf16 matrix-vector
    1.0
    """
    return positive("flops", flops) / positive("bytes_moved", bytes_moved)
