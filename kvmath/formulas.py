"""The notes' closed forms, by the names the chapters cite: one decode step, the critical batch, the KV cache, prefill.

These take plain numbers (bytes, parameters, bandwidth, FLOP/s) and
broadcast over arrays; :class:`kvmath.Deployment` applies the same rules to
a real model on real chips. The chapters use both: the formula to derive,
the deployment to compute.

Decode cost: the bounds on one step, throughput and the critical batch size.

One decode *step* produces one token for each of the ``batch`` sequences. It
must at least read every sequence's KV cache and the weights the step uses,
and do the math: ``2 * P`` FLOPs per token for the weight matmuls and the
attention FLOPs over the cache. Two forms of the bound follow.

- **Strict lower bound** (perfect overlap of memory and compute):
  ``max(all bytes / W, all FLOPs / C)``. No real step is faster.
- **No-overlap form**: ``max(KV / W, attention FLOPs / C) + max(P_bytes / W,
  2 P B / C)``, attention and weights one after the other. Without attention
  FLOPs it is the notes' ``B * KV / W + max(P_bytes / W, 2 * P_count * B / C)``
  (:func:`min_step`); it is never below the strict form.

An optional fixed per-step overhead (kernel launches, scheduling) adds to
both; it is an estimate to fit, never part of a bound, and is 0 by default.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .links import all_to_all_time, allreduce_estimate, allreduce_time, p2p_time, ring_allreduce_bytes  # noqa: F401
from .moe import experts_touched, saturated_critical_batch, tokens_for_share  # noqa: F401  (the notes' MoE forms)
from .results import Result
from .validation import (ArrayLike, ResultOverflow, as_count, as_scalar, checked, choice, finite, fraction, non_negative,
                         one_int, plain, positive, positive_int)

#: Every formula the module defines or re-exports (the links' collectives, the MoE forms), and their result types.
__all__ = [
    "RESOURCES", "binds", "NEAR_RIDGE", "REGIMES", "roofline_regime", "StepBreakdown", "step_breakdown", "strict_step", "min_step", "min_step_simple",
    "tokens_per_s_per_seq", "tokens_per_s", "critical_batch", "critical_batch_beta_alpha", "weight_flops_per_step",
    "attention_flops_per_step", "compute_ceiling_steps_per_s", "arithmetic_intensity", "kv_bytes_per_token",
    "kv_bytes_per_seq", "kv_cache_bytes", "kv_bytes_per_chip", "prefill_flops", "prefill_time", "weight_bytes",
    "min_chips_for_weights", "kv_budget_bytes", "max_kv_tokens", "max_batch", "max_batch_paged", "Fit", "fit",
    "expected_tokens_per_step", "speculative_improvement_factor", "cost_per_million_tokens",
    "all_to_all_time", "allreduce_estimate", "allreduce_time", "p2p_time", "ring_allreduce_bytes",
    "experts_touched", "saturated_critical_batch", "tokens_for_share",
]


#: Which resource binds a strict bound: the one whose time is the bound.
RESOURCES = ("memory", "compute", "communication")


@checked
def binds(memory_s: ArrayLike, compute_s: ArrayLike, comm_s: ArrayLike = 0.0) -> str | np.ndarray:
    """Which of three parallel resources sets ``max(memory_s, compute_s, comm_s)``; ties go to the first.

    The one rule for "what binds" everywhere (steps, prefill passes, the CLI).

    Examples
    --------
    >>> binds(2e-3, 1e-3), binds(1e-3, 1e-3), binds(1e-3, 1e-4, 5e-3)
    ('memory', 'memory', 'communication')
    """
    memory_s, compute_s, comm_s = (np.asarray(non_negative(name, value)) for name, value in
                                   (("memory_s", memory_s), ("compute_s", compute_s), ("comm_s", comm_s)))
    which = np.where(memory_s >= compute_s, np.where(memory_s >= comm_s, 0, 2), np.where(compute_s >= comm_s, 1, 2))
    if which.ndim == 0:
        return RESOURCES[int(which)]
    return np.array(RESOURCES)[which]


#: How close to a ridge an intensity must be for the datasheet's verdict to be left to measurement:
#: within this fraction either side. Kernels reach 60-90% of a chip's peak FLOP/s or bandwidth
#: (DeepSeek's FlashMLA: ~865 of the H800's 990 TFLOP/s at its throttled clock, 80% of that in the
#: kernel, 3 of 3.35 TB/s), which moves a practical ridge by up to about a quarter.
NEAR_RIDGE = 0.25

#: The verdicts :func:`roofline_regime` gives.
REGIMES = ("memory", "near the ridge", "compute")


@checked
def roofline_regime(intensity: ArrayLike, ridge: ArrayLike, margin: ArrayLike = NEAR_RIDGE) -> str | np.ndarray:
    """Memory-bound, compute-bound, or near the ridge, where achieved rates decide.

    ``"memory"`` below ``ridge * (1 - margin)``, ``"compute"`` above
    ``ridge * (1 + margin)``, ``"near the ridge"`` between (both ends included).

    Examples
    --------
    >>> roofline_regime(241.8, 295.3), roofline_regime(32, 295.3), roofline_regime(483.6, 295.3)
    ('near the ridge', 'memory', 'compute')
    """
    intensity = np.asarray(non_negative("intensity", intensity), dtype=float)
    ridge = np.asarray(positive("ridge", ridge), dtype=float)
    margin = np.asarray(non_negative("margin", margin), dtype=float)
    if np.any(margin >= 1):
        raise ValueError(f"margin must be below 1, got {margin.tolist()!r}")
    which = np.where(intensity < ridge * (1 - margin), 0, np.where(intensity > ridge * (1 + margin), 2, 1))
    if which.ndim == 0:
        return REGIMES[int(which)]
    return np.array(REGIMES)[which]


def _max(a, b):
    """np.maximum that stays in plain Python for two scalars (a numpy call on floats costs ~1 us)."""
    if type(a) in (float, int) and type(b) in (float, int):
        return a if a >= b else b
    return np.maximum(a, b)


def step_times(memory_s, compute_s, comm_s, overhead_s, kv_read_s, weight_read_s, weight_compute_s,
               attention_compute_s):
    """``(strict_s, no_overlap_s)`` of a pass from its terms: the one place both forms are written.

    Strict: ``overhead + max(memory_s, compute_s, comm_s)`` (each resource
    in parallel). No overlap: ``overhead + max(kv, attention) + max(weights
    read, weight math) + comm``.
    """
    strict = overhead_s + _max(_max(memory_s, compute_s), comm_s)
    no_overlap = (overhead_s + _max(kv_read_s, attention_compute_s) + _max(weight_read_s, weight_compute_s)
                  + comm_s)
    return strict, no_overlap


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class StepBreakdown(Result):
    """The terms of a decode step's bounds, in seconds (floats or arrays).

    Attributes
    ----------
    kv_read_s : reading the KV cache, B * KV / W.
    weight_read_s : reading the weights, P_bytes / W.
    weight_compute_s : the weight matmuls, 2 * P_count * B * tokens_per_seq / C.
    attention_compute_s : attention's math over the cache, B * attention FLOPs / C.
    overhead_s : the fixed per-step overhead passed in (0 unless given; an estimate).
    no_overlap_s : the no-overlap form, overhead + max(kv_read_s, attention_compute_s)
        + max(weight_read_s, weight_compute_s): the notes' min-step when
        attention FLOPs and overhead are 0.
    strict_s : the strict lower bound, overhead + max(kv_read_s + weight_read_s,
        attention_compute_s + weight_compute_s).
    weights_bind : what sets the weight term of the no-overlap form, "memory"
        (reading them) or "compute" (their matmuls); equality counts as memory.
    attention_binds : what sets the attention term of the no-overlap form.
    binds : what sets the strict form, "memory" or "compute" (:func:`binds`).
    """

    kv_read_s: ArrayLike
    weight_read_s: ArrayLike
    weight_compute_s: ArrayLike
    attention_compute_s: ArrayLike
    overhead_s: ArrayLike
    no_overlap_s: ArrayLike
    strict_s: ArrayLike

    _derived = ("weights_bind", "attention_binds", "binds")

    # the labels are computed only when asked for: on a grid they are string arrays as large as the grid
    @property
    def weights_bind(self) -> str | np.ndarray:
        """Which weight term binds in the no-overlap form, "memory" or "compute" (equality: memory)."""
        return binds(self.weight_read_s, self.weight_compute_s)

    @property
    def attention_binds(self) -> str | np.ndarray:
        """Which attention term binds in the no-overlap form."""
        return binds(self.kv_read_s, self.attention_compute_s)

    @property
    def binds(self) -> str | np.ndarray:
        """Which resource binds in the strict form."""
        return binds(self.kv_read_s + self.weight_read_s, self.attention_compute_s + self.weight_compute_s)


@checked
def step_breakdown(
    batch: ArrayLike,
    kv_bytes_per_seq: ArrayLike,
    param_bytes: ArrayLike,
    matmul_params: ArrayLike,
    bandwidth: ArrayLike,
    flops: ArrayLike,
    attention_flops_per_seq: ArrayLike = 0,
    overhead_s: ArrayLike = 0,
    tokens_per_seq: ArrayLike = 1,
) -> StepBreakdown:
    """Every term of both forms of the decode-step bound, and what binds in each.

    Parameters are those of :func:`min_step`, and:

    attention_flops_per_seq : float or array
        Attention FLOPs of one sequence in this step (e.g.
        ``Model.attention_flops_per_token(S) * tokens_per_seq``); 0 leaves
        attention as pure memory traffic, as the notes do.
    overhead_s : float or array
        Fixed time per step added to both forms (an estimate, default 0).
    tokens_per_seq : float or array
        Tokens each sequence pushes through the weights this step: 1 for
        plain decoding, gamma + 1 for a speculative verify step. The KV cache
        is still read once per sequence.

    ``batch`` may be fractional, for smooth bound curves.

    Examples
    --------
    The notes' 30B model at B = 256: 20.86 ms without overlap, 18.27 ms strict.

    >>> t = step_breakdown(256, 8192 * 100e3, 30e9, 30e9, 16 * 8.2e11, 16 * 1.97e14)
    >>> round(t.kv_read_s * 1e3, 2), round(t.weight_compute_s * 1e3, 2), t.weights_bind
    (15.98, 4.87, 'compute')
    >>> round(t.no_overlap_s * 1e3, 2), round(t.strict_s * 1e3, 2), t.binds
    (20.86, 18.27, 'memory')
    """
    batch, kv_bytes_per_seq, param_bytes, matmul_params, bandwidth, flops = _step_args(
        batch, kv_bytes_per_seq, param_bytes, matmul_params, bandwidth, flops)
    attention_flops_per_seq = non_negative("attention_flops_per_seq", attention_flops_per_seq)
    overhead_s = non_negative("overhead_s", overhead_s)
    tokens_per_seq = positive("tokens_per_seq", tokens_per_seq)
    kv_read_s = batch * kv_bytes_per_seq / bandwidth
    weight_read_s = param_bytes / bandwidth
    weight_compute_s = 2 * matmul_params * batch * tokens_per_seq / flops
    attention_compute_s = batch * attention_flops_per_seq / flops
    strict, no_overlap = step_times(kv_read_s + weight_read_s, attention_compute_s + weight_compute_s, 0.0,
                                    overhead_s, kv_read_s, weight_read_s, weight_compute_s, attention_compute_s)
    return StepBreakdown(
        kv_read_s=plain(kv_read_s),
        weight_read_s=plain(weight_read_s),
        weight_compute_s=plain(weight_compute_s),
        attention_compute_s=plain(attention_compute_s),
        overhead_s=overhead_s,
        no_overlap_s=plain(no_overlap),
        strict_s=plain(strict),
    )


@checked
def strict_step(
    batch: ArrayLike,
    kv_bytes_per_seq: ArrayLike,
    param_bytes: ArrayLike,
    matmul_params: ArrayLike,
    bandwidth: ArrayLike,
    flops: ArrayLike,
    attention_flops_per_seq: ArrayLike = 0,
) -> ArrayLike:
    """Strict lower bound on one decode step, in seconds: ``max(bytes / W, FLOPs / C)``.

    ``max((B * KV + P_bytes) / W, (B * A + 2 * P_count * B) / C)`` with ``A``
    the attention FLOPs of one sequence: memory and compute perfectly
    overlapped. Parameters are those of :func:`step_breakdown`.

    Examples
    --------
    >>> W, C = 16 * 8.2e11, 16 * 1.97e14
    >>> round(strict_step(256, 8192 * 100e3, 30e9, 30e9, W, C) * 1e3, 2)  # the notes' 20.86 ms case
    18.27
    """
    batch, kv, p_bytes, p_count, w, c = _step_args(batch, kv_bytes_per_seq, param_bytes, matmul_params, bandwidth, flops)
    attention = non_negative("attention_flops_per_seq", attention_flops_per_seq)
    memory = batch * kv
    memory = np.add(memory, p_bytes, out=_out(memory, p_bytes))
    memory = np.divide(memory, w, out=_out(memory, w))
    compute = batch * (attention + 2 * p_count)
    compute = np.divide(compute, c, out=_out(compute, c))
    return plain(np.maximum(memory, compute, out=_out(memory, compute)))


@checked
def min_step(
    batch: ArrayLike,
    kv_bytes_per_seq: ArrayLike,
    param_bytes: ArrayLike,
    matmul_params: ArrayLike,
    bandwidth: ArrayLike,
    flops: ArrayLike,
) -> ArrayLike:
    """The notes' min-step bound on one decode step, in seconds.

    ``B * KV / W + max(P_bytes / W, 2 * P_count * B / C)``: attention read
    as pure memory traffic, not overlapped with the weights. It is a lower
    bound only for a step that cannot overlap the two;
    :func:`strict_step` gives the strict lower bound.

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
    matmul_params : float or array
        Parameters each token multiplies by, a count (active ones for MoE; a preset's
        ``Model.matmul_params_per_token()``, not its total ``param_count()``).
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
    batch, kv, p_bytes, p_count, w, c = _step_args(batch, kv_bytes_per_seq, param_bytes, matmul_params, bandwidth, flops)
    # B KV / W + max(P_bytes / W, 2 P B / C), in place: the notes' formula and nothing else
    weights = batch * (2 * p_count / c)
    weights = np.maximum(weights, p_bytes / w, out=_out(weights, p_bytes / w))
    attention = batch * (kv / w)
    return plain(np.add(attention, weights, out=_out(attention, weights)))


def _step_args(batch, kv_bytes_per_seq, param_bytes, matmul_params, bandwidth, flops):
    """The six arguments of the notes' step forms, checked and named."""
    return (positive("batch", batch), non_negative("kv_bytes_per_seq", kv_bytes_per_seq),
            positive("param_bytes", param_bytes), positive("matmul_params", matmul_params),
            positive("bandwidth", bandwidth), positive("flops", flops))


def _out(a, b):
    """``a`` as the output of an elementwise op with ``b`` where it is an array of the full shape, else None."""
    if isinstance(a, np.ndarray) and a.ndim and a.shape == np.broadcast_shapes(a.shape, np.shape(b)):
        return a
    return None


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
def tokens_per_s_per_seq(seconds_per_step: ArrayLike) -> ArrayLike:
    """Tokens each sequence gets per second: one per step, 1 / seconds_per_step.

    Examples
    --------
    >>> tokens_per_s_per_seq(0.025)
    40.0
    """
    return 1.0 / positive("seconds_per_step", seconds_per_step)


@checked
def tokens_per_s(seconds_per_step: ArrayLike, batch: ArrayLike) -> ArrayLike:
    """Tokens the whole batch produces per second: B / seconds_per_step (B may be fractional).

    Examples
    --------
    >>> tokens_per_s(0.025, 16)
    640.0
    """
    return positive("batch", batch) / positive("seconds_per_step", seconds_per_step)


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
def weight_flops_per_step(batch: ArrayLike, matmul_params: ArrayLike) -> ArrayLike:
    """FLOPs of the weight matmuls in one step: 2 * P * B (B may be fractional, for sweeps).

    Examples
    --------
    >>> weight_flops_per_step(16, 7e9) / 1e9  # the thread's "224 GFLOPs"
    224.0
    """
    return 2 * positive("matmul_params", matmul_params) * positive("batch", batch)


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


# ----- the KV cache -------------------------------------------------------------

@checked
def kv_bytes_per_token(
    n_layers: ArrayLike, n_kv_heads: ArrayLike, head_dim: ArrayLike, bytes_per_elem: ArrayLike = 2
) -> ArrayLike:
    """Bytes of KV cache one token adds: ``2 * L * h_kv * d_h * b_kv``.

    Parameters
    ----------
    n_layers : int or array
        Transformer layers L.
    n_kv_heads : int or array
        Key/value heads h_kv (= query heads for MHA, 1 for MQA).
    head_dim : int or array
        Elements per head d_h.
    bytes_per_elem : float or array
        Bytes per cached element b_kv (2 for bf16, 1 for int8/fp8).

    Returns
    -------
    float or ndarray
        Bytes per token (the leading 2 counts K and V).

    Examples
    --------
    >>> kv_bytes_per_token(32, 32, 128)  # codellama-7b in bf16
    524288.0
    >>> kv_bytes_per_token(32, 1, 128)   # the same with one KV head (MQA)
    16384.0
    """
    n_layers = positive_int("n_layers", n_layers)
    n_kv_heads = positive_int("n_kv_heads", n_kv_heads)
    head_dim = positive_int("head_dim", head_dim)
    bytes_per_elem = positive("bytes_per_elem", bytes_per_elem)
    return 2 * n_layers * n_kv_heads * head_dim * bytes_per_elem


@checked
def kv_bytes_per_seq(kv_bytes_per_token: ArrayLike, context: ArrayLike) -> ArrayLike:
    """Bytes of KV cache one sequence of ``context`` tokens holds, in bytes.

    Examples
    --------
    >>> kv_bytes_per_seq(524288, 8192) / 2**30  # GiB
    4.0
    """
    return positive("kv_bytes_per_token", kv_bytes_per_token) * positive_int("context", context)


@checked
def kv_cache_bytes(kv_bytes_per_token: ArrayLike, context: ArrayLike, batch: ArrayLike) -> ArrayLike:
    """Bytes of KV cache for ``batch`` sequences of ``context`` tokens each.

    Both are counts of whole sequences and tokens (4.0 is fine, 4.5 is not).

    Examples
    --------
    >>> kv_cache_bytes(524288, 8192, 16) / 1e9  # the thread's "67 GB"
    68.719476736
    """
    return kv_bytes_per_seq(kv_bytes_per_token, context) * positive_int("batch", batch)


# ----- the cache over chips ------------------------------------------------------------

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


# ----- prefill ---------------------------------------------------------------------

@checked
def prefill_flops(
    prompt_len: ArrayLike,
    matmul_params: ArrayLike,
    n_layers: ArrayLike,
    n_heads: ArrayLike,
    head_dim: ArrayLike,
    batch: ArrayLike = 1,
) -> ArrayLike:
    """FLOPs to prefill ``batch`` prompts of ``prompt_len`` tokens with causal attention.

    Weights: ``2 * P * S`` per prompt. Attention: each token attends to the
    tokens before it, ``4 * L * h * d_h * S^2 / 2`` per prompt.

    ``matmul_params`` should be the parameters every prompt token multiplies
    by. A preset's ``param_count()`` also counts the input embedding (a
    lookup, no FLOPs) and the LM head (needed for the last position only);
    for a strict lower bound pass the count without them.

    Examples
    --------
    >>> prefill_flops(2048, 6.74e9, 32, 32, 128) / 1e12
    28.70...
    """
    s = positive_int("prompt_len", prompt_len)
    weights = 2 * positive("matmul_params", matmul_params) * s
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


# ----- memory: weights, chips and what is left for the cache ----------------------

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
    """:func:`kvmath.memory.memory_budget` of a chip or of bytes per chip, a bad number named as ``hbm_bytes``."""
    from .hardware import Chip
    from .memory import memory_budget  # the memory module needs the models, which need these formulas

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
    names which of the chip's figures counts (:func:`kvmath.memory.memory_budget`:
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
    >>> from kvmath import Chip
    >>> min_chips_for_weights(160e9, Chip.preset("h100-sxm")), min_chips_for_weights(160e9, Chip.preset("h100-sxm"), budget="reported")
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
    ``budget`` names which memory figure counts (:func:`kvmath.memory.memory_budget`;
    default ``"device"``, the marketed size). The ``"engine"`` budget here
    leaves out vLLM's activation peak: :func:`kvmath.memory.vllm_engine` sizes
    vLLM's cache in full.

    Examples
    --------
    >>> kv_budget_bytes(3, 40e9, 104e9) / 1e9
    16.0
    >>> kv_budget_bytes(3, 40e9, 50e9, usable_fraction=0.5) / 1e9
    10.0
    >>> from kvmath import Chip
    >>> h100 = Chip.preset("h100-sxm")
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


def max_batch_paged(lengths: ArrayLike, page: int, kv_budget_bytes: float, kv_bytes_per_token: float) -> int:
    """Sequences admitted in order while their whole pages fit in ``kv_budget_bytes`` (equation pq-page-waste, summed).

    A sequence of ``s`` tokens holds ``page * ceil(s / page)`` tokens of
    cache, its last page partly empty; the sequences of ``lengths`` are
    admitted in the order given until the pages held so far pass the
    budget. With ``page`` at least the longest sequence each holds one full
    page, the same count as reserving ``page`` tokens each (:func:`max_batch`).

    Examples
    --------
    Sequences of 5, 17 and 40 tokens in pages of 16 hold 16 + 32 + 48 = 96 tokens:

    >>> max_batch_paged([5, 17, 40], 16, 96 * 1000, 1000)
    3
    >>> max_batch_paged([5, 17, 40], 16, 95 * 1000, 1000)  # the third's last page does not fit
    2
    """
    if np.ndim(lengths) != 1:
        raise ValueError(f"lengths must be a list of sequence lengths (one dimension), got shape {np.shape(lengths)}")
    positive_int("lengths", lengths)
    page = one_int("page", page)
    budget = non_negative("kv_budget_bytes", as_scalar("kv_budget_bytes", kv_budget_bytes))
    per_token = positive("kv_bytes_per_token", as_scalar("kv_bytes_per_token", kv_bytes_per_token))
    held = np.cumsum(page * np.ceil(np.asarray(lengths) / page)) * per_token  # bytes held by the first n sequences
    return int(np.count_nonzero(held <= budget))


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class Fit(Result):
    """What fits on chips of one memory size, by the notes' sums (:func:`fit`); bytes unless named otherwise.

    Attributes
    ----------
    weight_bytes : all the weights, ``param_count x bytes_per_param``.
    min_chips : the fewest chips that hold them (:func:`min_chips_for_weights`).
    n_chips : the chips counted (``min_chips`` unless given).
    hbm_bytes : memory per chip.
    kv_budget_bytes : memory of ``n_chips`` left beside the weights (:func:`kv_budget_bytes`).
    kv_bytes_per_token, context : the cache of one token, and tokens per sequence.
    max_tokens, max_batch : whole tokens, and whole sequences of ``context``, that fit.
    """

    weight_bytes: float
    min_chips: int
    n_chips: int
    hbm_bytes: float
    kv_budget_bytes: float
    kv_bytes_per_token: float
    context: float
    max_tokens: int
    max_batch: int


def fit(param_count: float, bytes_per_param: float, kv_bytes_per_token: float, context: float, hbm_bytes: float,
        n_chips: int | None = None) -> Fit:
    """The notes' capacity sums: chips for the weights, then the tokens and sequences whose cache fits beside them.

    Exact whole counts (no model: weights as one block split evenly; a real
    model on a real layout is :meth:`kvmath.Deployment.capacity`). Raises
    ``ValueError`` naming ``n_chips`` where the chips given cannot hold the
    weights, and ``kv_bytes_per_token`` where the tokens that fit overflow.

    Examples
    --------
    The notes' 52B model in fp16 on 40 GB chips, 2 MiB of cache per token:

    >>> f = fit(52e9, 2, 2 * 2**20, 2048, 40e9)
    >>> f.min_chips, round(f.kv_budget_bytes / 1e9), f.max_tokens, f.max_batch
    (3, 16, 7629, 3)
    """
    weights = finite(weight_bytes(param_count, bytes_per_param), nonzero=True)  # a product that under- or overflows
    fewest = min_chips_for_weights(weights, hbm_bytes)
    chips = fewest if n_chips is None else int(positive_int("n_chips", n_chips))
    if chips < fewest:
        raise ValueError(f"n_chips {chips} cannot hold the {weights:.4g} bytes of weights at {hbm_bytes:.4g} bytes "
                         f"per chip: {fewest} or more are needed")
    budget = kv_budget_bytes(chips, hbm_bytes, weights)
    context = positive("context", context)
    try:
        tokens, batch = max_kv_tokens(budget, kv_bytes_per_token), max_batch(budget, kv_bytes_per_token * context)
    except ValueError:
        raise ValueError(f"the tokens that fit overflow a whole number: kv_bytes_per_token {kv_bytes_per_token!r} "
                         "is too small") from None
    return Fit(weight_bytes=float(weights), min_chips=fewest, n_chips=chips, hbm_bytes=float(hbm_bytes),
               kv_budget_bytes=float(budget), kv_bytes_per_token=float(kv_bytes_per_token), context=float(context),
               max_tokens=tokens, max_batch=batch)


# ----- speculative decoding --------------------------------------------------------

@checked
def expected_tokens_per_step(acceptance: ArrayLike, gamma: ArrayLike) -> ArrayLike:
    """Expected tokens one verify step yields per sequence: ``(1 - a**(gamma + 1)) / (1 - a)``.

    ``gamma + 1`` at ``a = 1`` (every draft accepted, plus the target's own
    token); 1 at ``a = 0``.

    Examples
    --------
    >>> round(expected_tokens_per_step(0.8, 4), 4)
    3.3616
    >>> expected_tokens_per_step(1.0, 4), expected_tokens_per_step(0.0, 4)
    (5.0, 1.0)
    """
    a = non_negative("acceptance", acceptance)
    gamma = positive_int("gamma", gamma)
    if np.any(np.asarray(a) > 1):
        raise ValueError(f"acceptance must be in [0, 1], got {acceptance!r}")
    # a geometric sum 1 + a + ... + a**gamma, exact at a = 1 where the closed form is 0/0
    with np.errstate(divide="ignore", invalid="ignore"):
        closed = (1 - np.power(a, gamma + 1)) / (1 - a)
    return plain(np.where(np.asarray(a) == 1, gamma + 1, closed))


@checked
def speculative_improvement_factor(acceptance: ArrayLike, gamma: ArrayLike, cost_ratio: ArrayLike) -> ArrayLike:
    """Leviathan et al.'s walltime improvement: ``(1 - a**(gamma + 1)) / ((1 - a) (gamma c + 1))``.

    Expected tokens per verify step over what the step costs in plain target
    steps, when one draft step costs ``cost_ratio`` (c) target steps and the
    verify step costs one (the target memory-bound: its ``gamma + 1`` tokens
    ride on one weight read). Model-free: :func:`speculative_decode` gives
    the same ratio with both costs from the step model, verify included.

    Examples
    --------
    Leviathan et al.'s T5-small draft for T5-XXL (Table 2, EnDe, argmax):
    a = 0.75, gamma = 7, and c taken as the parameter ratio 77M / 11B;
    the paper measured 3.4x.

    >>> round(speculative_improvement_factor(0.75, 7, 77e6 / 11e9), 2)
    3.43
    >>> speculative_improvement_factor(0.8, 4, 0.0) == expected_tokens_per_step(0.8, 4)
    True
    """
    expected = expected_tokens_per_step(acceptance, gamma)
    c = non_negative("cost_ratio", cost_ratio)
    return plain(expected / (np.asarray(gamma) * c + 1))


# ----- cost --------------------------------------------------------------------------

@checked
def cost_per_million_tokens(price_per_chip_hour: ArrayLike, tokens_per_s_per_chip: ArrayLike) -> ArrayLike:
    """Price of a million tokens at ``tokens_per_s_per_chip``: ``price / 3600 / rate x 1e6``.

    Parameters
    ----------
    price_per_chip_hour : float or array
        What one chip costs per hour, in any currency (an input the reader
        sets; kvmath holds no prices).
    tokens_per_s_per_chip : float or array
        Tokens each chip produces per second.

    Returns
    -------
    float or array
        Currency per million tokens.

    Examples
    --------
    At 2.00 per chip-hour and 1,000 tokens per chip-second: 2 / 3.6 million tokens.

    >>> round(cost_per_million_tokens(2.0, 1000.0), 4)
    0.5556
    """
    price = non_negative("price_per_chip_hour", price_per_chip_hour)
    rate = positive("tokens_per_s_per_chip", tokens_per_s_per_chip)
    return plain(_cost_of_chip_time(price, 1.0 / rate))


def _cost_of_chip_time(price_per_chip_hour: ArrayLike, chip_seconds_per_token: ArrayLike) -> ArrayLike:
    """Price of a million tokens from the chip-seconds each one takes: ``price x chip-s / 3600 x 1e6``.

    The one cost rule (:func:`cost_per_million_tokens` and every result's
    ``cost_per_million_tokens`` use it); inputs checked by the caller.
    Taking chip-seconds rather than a rate spares dividing by a rate that
    underflows.
    """
    return price_per_chip_hour * chip_seconds_per_token / 3600.0 * 1e6
